#include "timelake/util/time.h"

#include <charconv>
#include <chrono>
#include <cstdio>

#include <algorithm>
#include <cctype>
#include <vector>

#include <arrow/status.h>

namespace timelake {

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t NowMillis() { return NowMicros() / 1000; }

CivilDate CivilFromDays(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t y = yoe + era * 400;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  return {m <= 2 ? y + 1 : y, m, d};
}

int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

std::string FormatIsoMillis(int64_t micros) {
  const int64_t days = FloorDiv(micros, kMicrosPerDay);
  const int64_t in_day = micros - days * kMicrosPerDay;
  const CivilDate date = CivilFromDays(days);
  const int64_t ms = in_day / 1000;
  char out[64];
  std::snprintf(out, sizeof(out), "%04lld-%02d-%02dT%02lld:%02lld:%02lld.%03lldZ",
                static_cast<long long>(date.year), date.month, date.day,
                static_cast<long long>(ms / 3'600'000), static_cast<long long>(ms / 60'000 % 60),
                static_cast<long long>(ms / 1000 % 60), static_cast<long long>(ms % 1000));
  return out;
}

std::optional<int64_t> ParseIsoMicros(std::string_view text) {
  size_t pos = 0;
  // `width` decimal digits, then optionally `sep`.
  auto digits = [&](size_t width, int64_t* out) {
    if (pos + width > text.size()) return false;
    int64_t v = 0;
    for (size_t i = 0; i < width; ++i) {
      const char c = text[pos + i];
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    pos += width;
    *out = v;
    return true;
  };
  auto expect = [&](char c) {
    if (pos >= text.size() || text[pos] != c) return false;
    ++pos;
    return true;
  };
  int64_t year, month, day, hour, minute, second;
  if (!digits(4, &year) || !expect('-') || !digits(2, &month) || !expect('-') ||
      !digits(2, &day) || !expect('T') || !digits(2, &hour) || !expect(':') ||
      !digits(2, &minute) || !expect(':') || !digits(2, &second)) {
    return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 59) {
    return std::nullopt;
  }
  int64_t fraction = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int n = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (n < 6) fraction = fraction * 10 + (text[pos] - '0');
      ++n;
      ++pos;
    }
    if (n == 0 || n > 9) return std::nullopt;
    for (; n < 6; ++n) fraction *= 10;
  }
  int64_t offset_minutes = 0;
  if (pos < text.size() && text[pos] == 'Z') {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const int64_t sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    int64_t oh, om;
    if (!digits(2, &oh) || !expect(':') || !digits(2, &om) || oh > 23 || om > 59) {
      return std::nullopt;
    }
    offset_minutes = sign * (oh * 60 + om);
  }
  if (pos != text.size()) return std::nullopt;
  const int64_t days = DaysFromCivil(year, static_cast<int>(month), static_cast<int>(day));
  const int64_t seconds = (hour * 60 + minute - offset_minutes) * 60 + second;
  return days * kMicrosPerDay + seconds * kMicrosPerSecond + fraction;
}

arrow::Result<int64_t> ParseDuration(std::string_view text) {
  auto bad = [&] {
    return arrow::Status::Invalid("invalid duration '", text,
                                  "': use a positive whole number followed by s, m, h, d or w, "
                                  "such as \"90d\", \"36h\" or \"15m\"");
  };
  if (text.size() < 2) return bad();
  int64_t n = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size() - 1;
  auto [ptr, ec] = std::from_chars(begin, end, n);
  if (ec != std::errc() || ptr != end || n <= 0) return bad();
  int64_t unit = 0;
  switch (text.back()) {
    case 's': unit = kMicrosPerSecond; break;
    case 'm': unit = 60 * kMicrosPerSecond; break;
    case 'h': unit = kMicrosPerHour; break;
    case 'd': unit = kMicrosPerDay; break;
    case 'w': unit = 7 * kMicrosPerDay; break;
    default: return bad();
  }
  if (n > INT64_MAX / unit) return bad();
  return n * unit;
}

int64_t DeltaIntervalMillis(const std::string& text, int64_t fallback_ms) {
  if (text.empty()) return fallback_ms;
  std::string s = text;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s.rfind("interval ", 0) == 0) s = s.substr(9);
  long long n = 0;
  char unit[32] = {0};
  if (std::sscanf(s.c_str(), "%lld %31s", &n, unit) != 2) return fallback_ms;
  std::string u(unit);
  if (!u.empty() && u.back() == 's') u.pop_back();
  int64_t unit_ms = 0;
  if (u == "millisecond") {
    unit_ms = 1;
  } else if (u == "second") {
    unit_ms = 1000;
  } else if (u == "minute") {
    unit_ms = 60'000;
  } else if (u == "hour") {
    unit_ms = 3'600'000;
  } else if (u == "day") {
    unit_ms = 86'400'000;
  } else if (u == "week") {
    unit_ms = 7 * 86'400'000LL;
  } else {
    return fallback_ms;
  }
  if (n < 0 || n > INT64_MAX / 4 / unit_ms) return fallback_ms;
  return n * unit_ms;
}

arrow::Result<int64_t> ParseDeltaInterval(std::string_view text) {
  auto bad = [&] {
    return arrow::Status::Invalid(
        "'", text, "' is not a Delta interval: write \"interval <n> <unit>\" in lower case, with "
        "a whole number n and a unit of microseconds, milliseconds, seconds, minutes, "
        "hours, days or weeks, such as \"interval 7 days\"");
  };
  // Whitespace-separated words, as delta-kernel-rs splits them.
  std::vector<std::string_view> words;
  for (size_t i = 0; i < text.size();) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) words.push_back(text.substr(i, j - i));
    i = j;
  }
  if (words.size() != 3 || words[0] != "interval") return bad();
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(words[1].data(), words[1].data() + words[1].size(), n);
  if (ec != std::errc() || ptr != words[1].data() + words[1].size() || n < 0) return bad();
  std::string_view unit = words[2];
  if (unit.size() > 1 && unit.back() == 's') unit.remove_suffix(1);
  // Milliseconds per unit (microseconds divide instead). Spark does not know nanoseconds.
  int64_t per = 0;
  if (unit == "microsecond") {
    return n / 1000;
  } else if (unit == "millisecond") {
    per = 1;
  } else if (unit == "second") {
    per = 1000;
  } else if (unit == "minute") {
    per = 60'000;
  } else if (unit == "hour") {
    per = 3'600'000;
  } else if (unit == "day") {
    per = 86'400'000;
  } else if (unit == "week") {
    per = 7 * 86'400'000LL;
  } else {
    return bad();
  }
  if (n > INT64_MAX / 4 / per) return bad();  // far beyond any clock, and safe to subtract
  return n * per;
}

}  // namespace timelake
