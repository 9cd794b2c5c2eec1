// Small text helpers the core needs in many places: ASCII case folding, trimming, and the
// redaction that keeps secrets out of error messages. One copy each (a second copy of the
// redaction is a second place for a secret to slip through).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace timelake {

/// `s` with ASCII letters in lower case (names, header names, option values; not Unicode).
std::string Lower(std::string_view s);

/// `s` without leading and trailing whitespace (std::isspace in the C locale).
std::string_view TrimView(std::string_view s);
inline std::string Trim(std::string_view s) { return std::string(TrimView(s)); }

/// `value` trimmed of the characters in `spaces`, with each run of them inside folded to one
/// ' ': a header value as request signatures take it (SigV4 folds " \t"; Azure's SharedKey also
/// line breaks).
std::string FoldSpaces(std::string_view value, std::string_view spaces);

/// The parts with `separator` between them.
std::string Join(const std::vector<std::string>& parts, std::string_view separator);

/// What Redact puts in place of a secret.
inline constexpr std::string_view kRedacted = "<redacted>";

/// `text` with every occurrence of each non-empty secret replaced by kRedacted. Applied to all
/// text that comes from outside (reply bodies, transport errors) before it goes into a message
/// that may hold a secret the request carried.
std::string Redact(std::string text, std::initializer_list<std::string_view> secrets);

/// Characters of a service's reply quoted in an error message.
inline constexpr size_t kMaxQuotedReply = 200;

/// The start of a reply (at most kMaxQuotedReply characters, then "…"), trimmed, on one line:
/// for an error message. Redact it first if it may echo a secret.
std::string QuoteReply(std::string_view text);

}  // namespace timelake
