#include "timelake/util/time.h"

#include <charconv>
#include <chrono>
#include <cstdio>

#include <algorithm>

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
  if (u == "millisecond") return n;
  if (u == "second") return n * 1000;
  if (u == "minute") return n * 60'000;
  if (u == "hour") return n * 3'600'000;
  if (u == "day") return n * 86'400'000;
  if (u == "week") return n * 7 * 86'400'000;
  return fallback_ms;
}

}  // namespace timelake
