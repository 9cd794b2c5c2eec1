#include "timelake/store/cloud/service_time.h"

#include <cctype>
#include <cstdio>
#include <ctime>

#include <curl/curl.h>

#include "timelake/util/time.h"

namespace timelake {

int64_t ParseServiceTimeMs(const std::string& text) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &year, &month, &day, &hour, &minute,
                  &second, &consumed) == 6) {
    std::tm tm{};
    tm.tm_year = year - 1900;
    tm.tm_mon = month - 1;
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = minute;
    tm.tm_sec = second;
    int64_t ms = static_cast<int64_t>(timegm(&tm)) * 1000;
    const char* fraction = text.c_str() + consumed;
    if (*fraction == '.') {
      int scale = 100;
      for (const char* p = fraction + 1; std::isdigit(static_cast<unsigned char>(*p)) && scale > 0;
           ++p) {
        ms += (*p - '0') * scale;
        scale /= 10;
      }
    }
    return ms;
  }
  const time_t seconds = curl_getdate(text.c_str(), nullptr);
  if (seconds >= 0) return static_cast<int64_t>(seconds) * 1000;
  return NowMillis();
}

std::string HttpDate(int64_t unix_seconds) {
  static const char* days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday],
                tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

}  // namespace timelake
