#include "timelake/util/text.h"

#include <cctype>

namespace timelake {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view TrimView(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

std::string FoldSpaces(std::string_view value, std::string_view spaces) {
  std::string out;
  bool space = false;
  for (char c : value) {
    if (spaces.find(c) != std::string_view::npos) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string Redact(std::string text, std::initializer_list<std::string_view> secrets) {
  for (std::string_view secret : secrets) {
    if (secret.empty()) continue;
    for (size_t at = text.find(secret); at != std::string::npos;
         at = text.find(secret, at + kRedacted.size())) {
      text.replace(at, secret.size(), kRedacted);
    }
  }
  return text;
}

std::string QuoteReply(std::string_view text) {
  std::string out = text.size() > kMaxQuotedReply
                        ? std::string(text.substr(0, kMaxQuotedReply)) + "…"
                        : std::string(text);
  out = Trim(out);
  for (char& c : out) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return out;
}

}  // namespace timelake
