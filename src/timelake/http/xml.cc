#include "timelake/http/xml.h"

#include <expat.h>

namespace timelake {
namespace {

struct Builder {
  XmlElement root;
  std::vector<XmlElement*> open;  // the path from the root to the element being read
  bool seen_root = false;
};

void OnStart(void* user, const XML_Char* name, const XML_Char**) {
  auto* b = static_cast<Builder*>(user);
  std::string local(name);
  const auto colon = local.rfind(':');
  if (colon != std::string::npos) local = local.substr(colon + 1);
  if (b->open.empty()) {
    b->root.name = std::move(local);
    b->seen_root = true;
    b->open.push_back(&b->root);
    return;
  }
  XmlElement* parent = b->open.back();
  parent->children.push_back(XmlElement{std::move(local), {}, {}});
  b->open.push_back(&parent->children.back());
}

void OnEnd(void* user, const XML_Char*) {
  auto* b = static_cast<Builder*>(user);
  if (!b->open.empty()) b->open.pop_back();
}

void OnText(void* user, const XML_Char* text, int length) {
  auto* b = static_cast<Builder*>(user);
  if (!b->open.empty()) b->open.back()->text.append(text, static_cast<size_t>(length));
}

}  // namespace

const XmlElement* XmlElement::Child(std::string_view child) const {
  for (const auto& c : children) {
    if (c.name == child) return &c;
  }
  return nullptr;
}

std::string XmlElement::ChildText(std::string_view child) const {
  const XmlElement* c = Child(child);
  return c ? c->text : std::string();
}

std::vector<const XmlElement*> XmlElement::Children(std::string_view child) const {
  std::vector<const XmlElement*> out;
  for (const auto& c : children) {
    if (c.name == child) out.push_back(&c);
  }
  return out;
}

arrow::Result<XmlElement> ParseXml(std::string_view text) {
  // Children are appended while pointers to their parents are held: a parent's vector of
  // children only grows while that parent is the innermost open element, and pointers into it
  // are taken only for its last element, which is then the open one. Pointers to ancestors stay
  // valid because an ancestor's vector does not change while a descendant is open.
  Builder builder;
  XML_Parser parser = XML_ParserCreateNS(nullptr, ':');
  if (!parser) return arrow::Status::OutOfMemory("XML_ParserCreate failed");
  XML_SetUserData(parser, &builder);
  XML_SetElementHandler(parser, OnStart, OnEnd);
  XML_SetCharacterDataHandler(parser, OnText);
  const auto ok = XML_Parse(parser, text.data(), static_cast<int>(text.size()), /*isFinal=*/1);
  arrow::Status status;
  if (ok == XML_STATUS_ERROR || !builder.seen_root) {
    status = arrow::Status::Invalid(
        "malformed XML reply (", builder.seen_root ? XML_ErrorString(XML_GetErrorCode(parser)) : "no root element",
        " at line ", XML_GetCurrentLineNumber(parser), ")");
  }
  XML_ParserFree(parser);
  ARROW_RETURN_NOT_OK(status);
  return std::move(builder.root);
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

arrow::Result<XmlElement> ParseXmlReply(std::string_view text, std::string_view root,
                                        const std::string& what) {
  auto xml = ParseXml(text);
  if (!xml.ok()) return arrow::Status::IOError(what, ": ", xml.status().message());
  if (xml->name != root) {
    return arrow::Status::IOError(what, ": unexpected reply <", xml->name, ">");
  }
  return xml;
}

}  // namespace timelake
