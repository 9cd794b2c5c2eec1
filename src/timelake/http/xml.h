// XmlElement: replies of the XML APIs (S3, Azure, STS) as a small tree, parsed by expat.
//
// Only what the stores read is kept: element names without namespace prefixes, the text each
// element holds directly, and children in document order. Attributes are dropped.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <arrow/result.h>

namespace timelake {

struct XmlElement {
  std::string name;  // local name ("Contents", not "s3:Contents")
  std::string text;  // the character data directly inside, untrimmed
  std::vector<XmlElement> children;

  /// The first child named `child`, or null.
  const XmlElement* Child(std::string_view child) const;
  /// The text of the first child named `child`, "" if there is none.
  std::string ChildText(std::string_view child) const;
  /// Every child named `child`, in order.
  std::vector<const XmlElement*> Children(std::string_view child) const;
};

/// The document's root element; Invalid (saying where) if `text` is not well-formed XML.
arrow::Result<XmlElement> ParseXml(std::string_view text);

/// The root of a service's reply, which must be named `root`: IOError naming `what` if `text` is
/// not well-formed XML or its root is another element.
arrow::Result<XmlElement> ParseXmlReply(std::string_view text, std::string_view root,
                                        const std::string& what);

/// `text` with &, <, >, " and ' escaped, for building request bodies.
std::string XmlEscape(std::string_view text);

}  // namespace timelake
