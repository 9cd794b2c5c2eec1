// MemoryTier (scan/memory_tier.h): a byte-bounded, least-recently-used store of immutable values.

#include "timelake/scan/memory_tier.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace timelake::testing {
namespace {

std::shared_ptr<const std::string> Bytes(size_t n, char c = 'x') {
  return std::make_shared<const std::string>(n, c);
}

TEST(MemoryTier, KeepsValuesWithinItsBudgetEvictingTheLeastRecentlyUsed) {
  MemoryTier tier(800);
  for (const char* key : {"a", "b", "c", "d"}) EXPECT_TRUE(tier.Put(key, Bytes(100)));
  EXPECT_EQ(tier.bytes(), 400);
  ASSERT_NE(tier.Get("a"), nullptr);  // a is now the most recently used
  for (const char* key : {"e", "f", "g", "h", "i"}) EXPECT_TRUE(tier.Put(key, Bytes(100)));
  EXPECT_EQ(tier.bytes(), 800);
  EXPECT_EQ(tier.entries(), 8);
  EXPECT_EQ(tier.Get("b"), nullptr) << "the least recently used goes first";
  EXPECT_NE(tier.Get("a"), nullptr) << "a use keeps an entry";
  EXPECT_NE(tier.Get("i"), nullptr);
}

TEST(MemoryTier, AValueOverAnEighthOfTheBudgetIsNotKept) {
  MemoryTier tier(800);
  EXPECT_TRUE(tier.Put("small", Bytes(100)));
  EXPECT_FALSE(tier.Put("large", Bytes(101)));
  EXPECT_EQ(tier.Get("large"), nullptr);
  EXPECT_NE(tier.Get("small"), nullptr) << "a refused value evicts nothing";
  MemoryTier off(0);
  EXPECT_FALSE(off.Put("k", Bytes(1)));
  EXPECT_EQ(off.bytes(), 0);
}

TEST(MemoryTier, ReplacingAKeyCountsOnlyTheNewValue) {
  MemoryTier tier(8000);
  EXPECT_TRUE(tier.Put("k", Bytes(100, 'a')));
  EXPECT_TRUE(tier.Put("k", Bytes(300, 'b')));
  EXPECT_EQ(tier.bytes(), 300);
  EXPECT_EQ(tier.entries(), 1);
  EXPECT_EQ(*tier.Get("k"), std::string(300, 'b'));
}

TEST(MemoryTier, ConcurrentUseStaysWithinTheBudgetAndReturnsWholeValues) {
  MemoryTier tier(64 << 10);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&tier, &wrong, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string key = std::to_string((i * 7 + t) % 300);
        const size_t size = 100 + (i * 7 + t) % 300 * 10;
        tier.Put(key, Bytes(size, static_cast<char>('a' + key.size())));
        if (auto got = tier.Get(key)) {
          if (got->empty() || got->front() != static_cast<char>('a' + key.size())) ++wrong;
        }
        if (tier.bytes() > tier.budget()) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(tier.bytes(), tier.budget());
}

}  // namespace
}  // namespace timelake::testing
