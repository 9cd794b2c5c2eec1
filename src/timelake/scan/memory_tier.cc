#include "timelake/scan/memory_tier.h"

namespace timelake {

std::shared_ptr<const std::string> MemoryTier::Get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second.position);
  return it->second.value;
}

bool MemoryTier::Put(const std::string& key, std::shared_ptr<const std::string> value) {
  if (!value) return false;
  const int64_t size = static_cast<int64_t>(value->size());
  if (budget_ == 0 || size > budget_ / 8) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end()) EraseLocked(it);
  order_.push_front(key);
  entries_.emplace(key, Entry{std::move(value), order_.begin()});
  bytes_ += size;
  while (bytes_ > budget_) EraseLocked(entries_.find(order_.back()));
  return true;
}

void MemoryTier::EraseLocked(std::unordered_map<std::string, Entry>::iterator it) {
  bytes_ -= static_cast<int64_t>(it->second.value->size());
  order_.erase(it->second.position);
  entries_.erase(it);
}

int64_t MemoryTier::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

int64_t MemoryTier::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(entries_.size());
}

}  // namespace timelake
