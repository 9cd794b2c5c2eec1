#include "timelake/log/data_path.h"

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

}  // namespace

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
  return decoded;
}

arrow::Result<std::string> DataFileStorePath(const std::string& table_path,
                                             const std::string& add_path) {
  ARROW_ASSIGN_OR_RAISE(std::string relative, DataFileRelativePath(add_path));
  return JoinPath(table_path, relative);
}

std::string DataFileExternalPath(const ObjectStore& store, const std::string& table_path,
                                 const std::string& add_path) {
  std::string decoded = UriDecode(add_path);
  if (decoded.rfind("file://", 0) == 0) return decoded.substr(7);
  if (decoded.rfind("file:/", 0) == 0) return decoded.substr(5);
  if (IsAbsolute(decoded)) return decoded;
  return store.ExternalPath(JoinPath(table_path, decoded));
}

}  // namespace timelake
