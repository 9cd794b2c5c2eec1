// A hash table of series-key strings for the counting sort (arrange.cc).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace timelake {

// The distinct values of some strings, numbered in order of first appearance; the values are
// views into the input, which outlives the dictionary. Keys are mostly short: one of up to 16
// bytes is hashed and compared as two 8-byte words (its first and last eight, overlapping),
// without a call to memcpy or memcmp.
class KeyDictionary {
 public:
  struct Entry {
    uint64_t hash;
    const char* data;
    size_t size;
  };

  /// The id of the value `data[0, size)`, a new one (the next number) if it is new.
  int32_t IdOf(const char* data, size_t size) { return IdOf(data, size, Hash(data, size)); }

  /// The same, with the value's hash given: Hash(data, size), or any hash that is equal for
  /// equal values (tests give colliding ones, so that values are told apart by Same alone).
  int32_t IdOf(const char* data, size_t size, uint64_t hash) {
    for (size_t slot = hash & mask_;; slot = (slot + 1) & mask_) {
      const int32_t id = slots_[slot];
      if (id < 0) {
        slots_[slot] = static_cast<int32_t>(entries_.size());
        entries_.push_back(Entry{hash, data, size});
        if (entries_.size() * 2 > slots_.size()) Grow();
        return static_cast<int32_t>(entries_.size() - 1);
      }
      const Entry& e = entries_[static_cast<size_t>(id)];
      if (e.hash == hash && Same(e, data, size)) return id;
    }
  }

  /// The distinct values, by id.
  const std::vector<Entry>& entries() const { return entries_; }

  static uint64_t Hash(const char* p, size_t n) {
    uint64_t first, last;
    Words(p, n, &first, &last);
    uint64_t h = (first * 0x9E3779B97F4A7C15ULL) ^ ((last + n) * 0xBF58476D1CE4E5B9ULL);
    for (size_t i = 8; i + 8 < n; i += 8) h = (h ^ Load8(p + i)) * 0x94D049BB133111EBULL;
    h ^= h >> 33;  // the finalizer of MurmurHash3: every bit of h reaches the low bits (the slot)
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 33);
  }

 private:
  static uint64_t Load8(const char* p) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    return word;
  }
  // Two words that together hold every byte of a value of at most 16 bytes (and the first and
  // last eight of a longer one).
  static void Words(const char* p, size_t n, uint64_t* first, uint64_t* last) {
    if (n >= 8) {
      *first = Load8(p);
      *last = Load8(p + n - 8);
      return;
    }
    uint64_t word = 0;
    if (n >= 4) {
      uint32_t lo, hi;
      std::memcpy(&lo, p, 4);
      std::memcpy(&hi, p + n - 4, 4);
      word = lo | (static_cast<uint64_t>(hi) << 32);
    } else if (n > 0) {
      word = static_cast<uint8_t>(p[0]) | (static_cast<uint64_t>(static_cast<uint8_t>(p[n / 2])) << 8) |
             (static_cast<uint64_t>(static_cast<uint8_t>(p[n - 1])) << 16);
    }
    *first = word;
    *last = 0;
  }
  static bool Same(const Entry& e, const char* p, size_t n) {
    if (e.size != n) return false;
    if (n > 16) return std::memcmp(e.data, p, n) == 0;
    uint64_t a1, b1, a2, b2;
    Words(e.data, n, &a1, &b1);
    Words(p, n, &a2, &b2);
    return a1 == a2 && b1 == b2;
  }
  void Grow() {
    slots_.assign(slots_.size() * 2, -1);
    mask_ = slots_.size() - 1;
    for (size_t id = 0; id < entries_.size(); ++id) {
      size_t slot = entries_[id].hash & mask_;
      while (slots_[slot] >= 0) slot = (slot + 1) & mask_;
      slots_[slot] = static_cast<int32_t>(id);
    }
  }

  std::vector<int32_t> slots_ = std::vector<int32_t>(64, -1);  // ids; -1: empty
  size_t mask_ = 63;
  std::vector<Entry> entries_;
};

}  // namespace timelake
