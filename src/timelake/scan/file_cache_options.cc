// FileCacheOptions::Take: the timelake_cache* storage options (scan/file_cache.h).
#include "timelake/scan/file_cache.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <optional>

namespace timelake {

namespace {

arrow::Result<int64_t> ByteCount(const std::string& key, const std::string& value, int64_t least) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || n < least) {
    return arrow::Status::Invalid("storage option '", key, "' must be a whole number of bytes, at least ",
                                  least, " (such as 67108864 for 64 MiB)");
  }
  return static_cast<int64_t>(n);
}

}  // namespace

arrow::Result<FileCacheOptions> FileCacheOptions::Take(std::map<std::string, std::string>* options) {
  FileCacheOptions out;
  auto take = [options, &out](const std::string& key) -> std::optional<std::string> {
    auto it = options->find(key);
    if (it == options->end()) return std::nullopt;
    std::string value = it->second;
    options->erase(it);
    out.given = true;
    return value;
  };
  if (auto mode = take("timelake_cache")) {
    std::string lower;
    for (char c : *mode) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "memory") {
      out.temporary = true;
    } else if (lower == "off") {
      return arrow::Status::Invalid(
          "storage option 'timelake_cache' cannot be off: sql() and one-series queries read local "
          "copies of an object-store lake's data files. Use 'memory' to keep nothing after the "
          "Lake is gone, or timelake_cache_memory_bytes=0 to keep no footers in memory");
    } else if (lower != "disk") {
      return arrow::Status::Invalid("storage option 'timelake_cache' must be disk or memory");
    }
  }
  if (auto dir = take("timelake_cache_dir")) {
    if (dir->empty() || dir->find('\0') != std::string::npos) {
      return arrow::Status::Invalid("storage option 'timelake_cache_dir' must name a folder");
    }
    out.root = *dir;
  }
  if (auto bytes = take("timelake_cache_memory_bytes")) {
    ARROW_ASSIGN_OR_RAISE(out.memory_bytes, ByteCount("timelake_cache_memory_bytes", *bytes, 0));
  }
  if (auto bytes = take("timelake_cache_disk_bytes")) {
    ARROW_ASSIGN_OR_RAISE(out.disk_bytes, ByteCount("timelake_cache_disk_bytes", *bytes, 1));
  }
  if (out.temporary && !out.root.empty()) {
    return arrow::Status::Invalid("storage options 'timelake_cache=memory' and 'timelake_cache_dir' "
                                  "contradict each other: a memory cache keeps no folder");
  }
  return out;
}

}  // namespace timelake
