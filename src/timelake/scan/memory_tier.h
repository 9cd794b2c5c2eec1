// MemoryTier: the memory tier of a lake's block cache (scan/file_cache.h), for small hot objects.
//
// FileCache keeps local copies of a remote lake's data files on disk; what every query over
// large files reads first, the files' Parquet footers (with their length and magic), is kept
// here too, so that a warm query chooses its row groups without opening a file. Values are
// immutable byte strings under keys that name the bytes exactly (FileCache keys them by the
// object's path, size and the log's modification time: see file_cache.h for why that is never
// stale), so an entry never needs to be invalidated, only evicted.
//
// Bounded by a byte budget: entries are evicted least recently used first; a value larger than
// an eighth of the budget is not kept (it would push out everything else). A budget of 0 keeps
// nothing.
//
// Thread-safe: every method may be called from any thread; one mutex guards the entries, held
// only for the map operations (values are shared, never copied under the lock).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace timelake {

class MemoryTier {
 public:
  explicit MemoryTier(int64_t budget_bytes) : budget_(budget_bytes < 0 ? 0 : budget_bytes) {}
  MemoryTier(const MemoryTier&) = delete;
  MemoryTier& operator=(const MemoryTier&) = delete;

  /// The value under `key` (and marks it used), or null.
  std::shared_ptr<const std::string> Get(const std::string& key);
  /// Keeps `value` under `key` (replacing what was there), evicting the least recently used
  /// entries until the tier fits its budget. Returns false (and keeps nothing) if the value is
  /// larger than an eighth of the budget.
  bool Put(const std::string& key, std::shared_ptr<const std::string> value);

  int64_t budget() const { return budget_; }
  /// Bytes of the values held (keys are not counted).
  int64_t bytes() const;
  int64_t entries() const;

 private:
  struct Entry {
    std::shared_ptr<const std::string> value;
    std::list<std::string>::iterator position;
  };
  /// REQUIRES: mutex_ held.
  void EraseLocked(std::unordered_map<std::string, Entry>::iterator it);

  const int64_t budget_;
  mutable std::mutex mutex_;
  std::list<std::string> order_;  // most recently used first
  std::unordered_map<std::string, Entry> entries_;
  int64_t bytes_ = 0;
};

}  // namespace timelake
