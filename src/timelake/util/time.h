// Time arithmetic in UTC: clocks, civil dates, ISO-8601 text and durations.
//
// All instants are microseconds since the Unix epoch (the unit timelake stores). Nothing here
// consults the process time zone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <arrow/result.h>

namespace timelake {

constexpr int64_t kMicrosPerSecond = 1'000'000;
constexpr int64_t kMicrosPerHour = 3600 * kMicrosPerSecond;
constexpr int64_t kMicrosPerDay = 24 * kMicrosPerHour;

int64_t NowMicros();
int64_t NowMillis();

/// Floor division that rounds toward negative infinity (for instants before 1970).
inline int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

struct CivilDate {
  int64_t year;
  int month;  // 1..12
  int day;    // 1..31
};

/// Days since 1970-01-01 to a proleptic Gregorian date and back (Howard Hinnant's algorithms).
CivilDate CivilFromDays(int64_t days);
int64_t DaysFromCivil(int64_t year, int month, int day);

/// "2025-01-02T03:04:05.678Z" (milliseconds, always UTC).
std::string FormatIsoMillis(int64_t micros);

/// Parses the ISO-8601 text Delta stats hold for timestamps: "YYYY-MM-DDTHH:MM:SS", optionally
/// with a fraction of up to 9 digits (cut to microseconds, rounding down) and "Z" or a "+HH:MM" /
/// "-HH:MM" offset (no zone: read as UTC). Microseconds since the epoch, or nullopt for any other
/// text.
std::optional<int64_t> ParseIsoMicros(std::string_view text);

/// Parses a duration such as "90d", "36h", "15m", "30s", "2w" into microseconds. Rejects
/// anything else, zero and negative values with Status::Invalid naming the text.
arrow::Result<int64_t> ParseDuration(std::string_view text);

/// Parses a Delta interval property ("interval 7 days", "30 days", "1 hour") into milliseconds;
/// `fallback_ms` if the text is empty, not understood or out of range. Lenient: for reading
/// tables any engine wrote.
int64_t DeltaIntervalMillis(const std::string& text, int64_t fallback_ms);

/// Strictly parses a Delta interval property in the one form every Delta engine reads (Spark
/// accepts more; delta-rs and delta-kernel-rs accept only this): "interval <n> <unit>", lower
/// case, `n` a whole number >= 0, `unit` one of microsecond, millisecond, second, minute, hour,
/// day, week (or their plurals). Returns milliseconds, rounded down. Anything else
/// (months and years included, which Delta does not allow) is Status::Invalid naming the text.
arrow::Result<int64_t> ParseDeltaInterval(std::string_view text);

}  // namespace timelake
