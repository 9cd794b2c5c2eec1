#include "timelake/log/data_path.h"

#include <vector>

namespace timelake {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsAbsolute(const std::string& decoded) {
  return decoded.find("://") != std::string::npos || decoded.rfind("file:", 0) == 0 ||
         (!decoded.empty() && decoded[0] == '/');
}

// `decoded` (a path relative to the table folder) with "." and empty segments dropped and each
// ".." taken back, or an error if it leaves the table folder, names the table's log or index
// (never data), or holds a NUL byte. A log is data, not trust: a hostile or broken `add.path`
// must not make any reader open a file outside its table.
arrow::Result<std::string> Confine(const std::string& decoded, const std::string& original) {
  auto refuse = [&](const char* why) {
    return arrow::Status::IOError("data file path '", original, "' in the table's log ", why,
                                  "; timelake reads only data files inside the table's folder");
  };
  if (decoded.find('\0') != std::string::npos) return refuse("holds a NUL byte");
  std::vector<std::string_view> segments;
  std::string_view rest(decoded);
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    std::string_view segment = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (segment.empty() || segment == ".") continue;
    if (segment == "..") {
      if (segments.empty()) return refuse("leaves the table folder");
      segments.pop_back();
      continue;
    }
    segments.push_back(segment);
  }
  if (segments.empty()) return refuse("names no file");
  if (segments.front() == "_delta_log" || segments.front() == "_timelake") {
    return refuse("names a file of the table's log or index");
  }
  std::string out;
  out.reserve(decoded.size());
  for (const auto& segment : segments) {
    if (!out.empty()) out.push_back('/');
    out.append(segment);
  }
  return out;
}

}  // namespace

arrow::Result<std::string> ConfineToTable(const std::string& relative) {
  return Confine(relative, relative);
}

std::string UriDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && HexDigit(text[i + 1]) >= 0 &&
        HexDigit(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexDigit(text[i + 1]) * 16 + HexDigit(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

arrow::Result<std::string> DataFileRelativePath(const std::string& add_path) {
  std::string decoded = UriDecode(add_path);
  if (IsAbsolute(decoded)) {
    return arrow::Status::NotImplemented("data file '", decoded,
                                         "' lies outside the table folder, which timelake "
                                         "cannot read through its store");
  }
  return Confine(decoded, add_path);
}

arrow::Result<std::string> DataFileStorePath(const std::string& table_path,
                                             const std::string& add_path) {
  ARROW_ASSIGN_OR_RAISE(std::string relative, DataFileRelativePath(add_path));
  return JoinPath(table_path, relative);
}

arrow::Result<std::string> DataFileExternalPath(const ObjectStore& store,
                                                const std::string& table_path,
                                                const std::string& add_path) {
  std::string decoded = UriDecode(add_path);
  if (!IsAbsolute(decoded)) {
    ARROW_ASSIGN_OR_RAISE(std::string relative, Confine(decoded, add_path));
    return store.ExternalPath(JoinPath(table_path, relative));
  }
  // An absolute URI or path is read only where it names a file inside the table folder, in the
  // spelling the store gives that folder (file:// and Spark's file:/ URIs as local paths).
  if (decoded.rfind("file://", 0) == 0) {
    decoded = decoded.substr(7);
  } else if (decoded.rfind("file:/", 0) == 0) {
    decoded = decoded.substr(5);
  }
  std::string root = store.ExternalPath(table_path);
  while (!root.empty() && root.back() == '/') root.pop_back();
  if (decoded.size() > root.size() + 1 && decoded.compare(0, root.size(), root) == 0 &&
      decoded[root.size()] == '/') {
    ARROW_ASSIGN_OR_RAISE(std::string relative, Confine(decoded.substr(root.size() + 1), add_path));
    return root + "/" + relative;
  }
  return arrow::Status::IOError("data file '", decoded, "' in the table's log lies outside the table's "
                                "folder ", root, "; timelake reads only data files inside the table's folder");
}

}  // namespace timelake
