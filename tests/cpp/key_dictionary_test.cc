#include "timelake/ingest/key_dictionary.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace timelake {
namespace {

// Values that differ in one byte only, at every position a short value is compared at (first and
// last eight bytes, the middle of a long one), in a zero byte, or in length.
std::vector<std::string> NearlyEqualValues() {
  std::vector<std::string> values = {"", std::string(1, '\0'), std::string(2, '\0'), "a", "b"};
  for (size_t len = 1; len <= 40; ++len) {
    const std::string base(len, 'k');
    values.push_back(base);
    for (size_t at = 0; at < len; ++at) {
      std::string v = base;
      v[at] = 'x';
      values.push_back(v);
      v[at] = '\0';
      values.push_back(v);
    }
  }
  std::vector<std::string> distinct;  // in order, each once
  std::set<std::string> seen;
  for (auto& v : values) {
    if (seen.insert(v).second) distinct.push_back(v);
  }
  return distinct;
}

// Hashes are made to collide, so that values are told apart by their bytes alone: every distinct
// value gets its own id, and each is found again under it.
TEST(KeyDictionaryTest, ValuesWithEqualHashesAreToldApartByEveryByte) {
  const auto values = NearlyEqualValues();
  for (uint64_t hash : {uint64_t{0}, uint64_t{42}}) {
    KeyDictionary dictionary;
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(dictionary.IdOf(values[i].data(), values[i].size(), hash), static_cast<int32_t>(i))
          << "value " << i << " of size " << values[i].size();
    }
    for (size_t i = 0; i < values.size(); ++i) {
      // A copy: found by its bytes, not by its address.
      const std::string copy = values[i];
      ASSERT_EQ(dictionary.IdOf(copy.data(), copy.size(), hash), static_cast<int32_t>(i));
    }
    ASSERT_EQ(dictionary.entries().size(), values.size());
  }
}

TEST(KeyDictionaryTest, EqualValuesHashEquallyAndManyValuesGrowTheTable) {
  KeyDictionary dictionary;
  std::vector<std::string> values;
  for (int i = 0; i < 50'000; ++i) values.push_back("device/" + std::to_string(i * 7919));
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(dictionary.IdOf(values[i].data(), values[i].size()), static_cast<int32_t>(i));
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string copy = values[i];
    EXPECT_EQ(KeyDictionary::Hash(copy.data(), copy.size()),
              KeyDictionary::Hash(values[i].data(), values[i].size()));
    ASSERT_EQ(dictionary.IdOf(copy.data(), copy.size()), static_cast<int32_t>(i));
  }
  // Every byte counts in the hash too (not only for correctness: for spreading the values).
  const auto nearly = NearlyEqualValues();
  int collisions = 0;
  for (size_t i = 1; i < nearly.size(); ++i) {
    if (KeyDictionary::Hash(nearly[i].data(), nearly[i].size()) ==
        KeyDictionary::Hash(nearly[i - 1].data(), nearly[i - 1].size())) {
      ++collisions;
    }
  }
  EXPECT_EQ(collisions, 0);
}

}  // namespace
}  // namespace timelake
