// The scan plan's read-time dedup decision with series-key range tags that are cut like the
// string stats: two files are kept apart only when their cut ranges prove that no key can be in
// both; a cut must never hide a shared key.
#include <algorithm>

#include <arrow/api.h>
#include <gtest/gtest.h>

#include "lake_fixture.h"
#include "test_util.h"
#include "timelake/lake.h"
#include "timelake/log/file_tags.h"
#include "timelake/store/memory_store.h"
#include "timelake/table/table.h"

namespace timelake::testing {
namespace {

using arrow::field;

const std::string kPrefix(32, 'p');  // longer keys share exactly the part the tags keep

class KeyRangeScanTest : public LakeFixture {
 protected:
  void SetUp() override {
    ContractOptions options;
    options.dedup = "last";
    CreateTable(options);
  }

  // Appends one row per key, all at hours 1..n of 2025-01-01 (so every file overlaps in time).
  void Append(const std::vector<std::string>& keys) {
    std::string ts = "[", sensors = "[", values = "[";
    for (size_t i = 0; i < keys.size(); ++i) {
      const char* sep = i ? "," : "";
      ts += sep + std::to_string(Micros(2025, 1, 1, static_cast<int>(i) + 1));
      sensors += std::string(sep) + "\"" + keys[i] + "\"";
      values += sep + std::to_string(i);
    }
    auto reader = Reader(schema_, {Batch(schema_, {ts + "]", sensors + "]", values + "]"})});
    ASSERT_OK(table_->Append(reader.get(), {}).status());
  }

  // Dedup marks of the plan's files in commit order.
  std::vector<bool> Marks() {
    auto plan = table_->Scan().ValueOrDie();
    std::sort(plan.files.begin(), plan.files.end(),
              [](const ScanFile& a, const ScanFile& b) { return a.seq < b.seq; });
    std::vector<bool> out;
    for (const auto& f : plan.files) out.push_back(f.dedup);
    return out;
  }

};

TEST_F(KeyRangeScanTest, TheSameLongKeyInTwoFilesIsDeduplicated) {
  Append({kPrefix + "-x"});
  Append({kPrefix + "-x"});
  EXPECT_EQ(Marks(), (std::vector<bool>{true, true}));
}

TEST_F(KeyRangeScanTest, LongKeysThatDifferOnlyPastTheCutAreNotProvenApart) {
  Append({kPrefix + "-a"});
  Append({kPrefix + "-b"});
  EXPECT_EQ(Marks(), (std::vector<bool>{true, true}));  // conservative, never wrong
}

TEST_F(KeyRangeScanTest, AKeyInsideAnotherFilesCutRangeIsDeduplicated) {
  Append({kPrefix + "-a", kPrefix + "-z"});
  Append({kPrefix + "-m"});
  EXPECT_EQ(Marks(), (std::vector<bool>{true, true}));
}

TEST_F(KeyRangeScanTest, LongKeysThatDifferBeforeTheCutStayApart) {
  Append({std::string(40, 'a')});
  Append({std::string(40, 'b')});
  EXPECT_EQ(Marks(), (std::vector<bool>{false, false}));
}

TEST_F(KeyRangeScanTest, ACutMaxStillBoundsTheKeysOfItsFile) {
  Append({std::string(40, 'a'), std::string(33, 'b')});  // max cut to 32 b's + U+10FFFF
  Append({std::string(32, 'b') + "zzz"});                 // min cut to 32 b's: not apart
  Append({std::string(32, 'b') + "\xF4\x8F\xBF\xBF"});    // shorter than the cut: not apart
  Append({"c"});                                          // above every b-prefixed key: apart
  EXPECT_EQ(Marks(), (std::vector<bool>{true, true, true, false}));
}

}  // namespace
}  // namespace timelake::testing
