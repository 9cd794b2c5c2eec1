// Data file paths: Delta's URI-encoded action paths turned into store paths and engine paths.
#include "timelake/log/data_path.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "timelake/store/memory_store.h"

namespace timelake::testing {
namespace {

TEST(UriDecodeTest, DecodesEscapesAndKeepsEverythingElse) {
  EXPECT_EQ(UriDecode("a%20b%2Fc%3a"), "a b/c:");
  EXPECT_EQ(UriDecode("100%"), "100%");      // no digits after '%'
  EXPECT_EQ(UriDecode("%G1%2"), "%G1%2");    // not hex / cut short
  EXPECT_EQ(UriDecode("%FF"), "\xFF");       // bytes, not necessarily UTF-8
  EXPECT_EQ(UriDecode("%2520"), "%20");      // decoded once
}

TEST(DataFilePathTest, RelativePathsLieUnderTheTableFolder) {
  ASSERT_OK_AND_ASSIGN(auto path, DataFileStorePath("ns/t", "data/2025-01-01/a%20b.parquet"));
  EXPECT_EQ(path, "ns/t/data/2025-01-01/a b.parquet");
}

TEST(DataFilePathTest, FilesOutsideTheTableFolderCannotBeReachedThroughTheStore) {
  for (const char* outside : {"s3://bucket/x.parquet", "file:///tmp/x.parquet", "file:/tmp/x.parquet",
                              "/tmp/x.parquet", "s3%3A%2F%2Fbucket%2Fx.parquet"}) {
    EXPECT_TRUE(FailsWith(DataFileStorePath("ns/t", outside), arrow::StatusCode::NotImplemented,
                          "outside the table folder"))
        << outside;
  }
}

// Paths from a log are data, not trust: one that climbs out of the table folder (in any
// spelling: plain, %-escaped, behind "." segments or doubled slashes), or names the log or the
// index, is refused by every path the readers take, and nothing is opened.
TEST(DataFilePathTest, PathsThatLeaveTheTableFolderAreRefused) {
  MemoryStore store("lake");
  for (const char* hostile :
       {"../../../secret.parquet", "data/../../x.parquet", "%2E%2E/%2E%2E/secret.parquet",
        "data/..%2F..%2F..%2Fsecret.parquet", "./../x.parquet", "data//..//..//x.parquet",
        "_delta_log/00000000000000000000.json", "data/../_delta_log/x.json",
        "_timelake/index/x", "./_timelake/x", "", ".", "data/..", "a%00b.parquet"}) {
    EXPECT_TRUE(FailsWith(DataFileStorePath("ns/t", hostile), arrow::StatusCode::IOError, "table"))
        << hostile;
    EXPECT_TRUE(FailsWith(DataFileExternalPath(store, "ns/t", hostile), arrow::StatusCode::IOError,
                          "table"))
        << hostile;
  }
  // A path that wanders but stays inside is read as what it names.
  ASSERT_OK_AND_ASSIGN(auto inside, DataFileStorePath("ns/t", "data/x/../y/./z.parquet"));
  EXPECT_EQ(inside, "ns/t/data/y/z.parquet");
  ASSERT_OK_AND_ASSIGN(auto partition, DataFileStorePath("ns/t", "p=..a/x.parquet"));
  EXPECT_EQ(partition, "ns/t/p=..a/x.parquet");
}

TEST(DataFilePathTest, EnginesOpenStorePathsThroughTheStoreAndUrisOnlyInsideTheTable) {
  MemoryStore store("lake");
  ASSERT_OK_AND_ASSIGN(auto relative, DataFileExternalPath(store, "ns/t", "data/a%20b.parquet"));
  EXPECT_EQ(relative, "memory://lake/ns/t/data/a b.parquet");
  ASSERT_OK_AND_ASSIGN(auto absolute,
                       DataFileExternalPath(store, "ns/t", "memory://lake/ns/t/data/./a%20b.parquet"));
  EXPECT_EQ(absolute, "memory://lake/ns/t/data/a b.parquet");
  for (const char* outside :
       {"s3://bucket/a%20b.parquet", "file:///tmp/x.parquet", "file:/tmp/x.parquet", "/etc/passwd",
        "memory://lake/ns/t2/data/x.parquet", "memory://lake/ns/t/../t2/x.parquet",
        "memory://lake/ns/t/_delta_log/00000000000000000000.json", "memory://lake/ns/t",
        "https://example.com/x.parquet"}) {
    EXPECT_TRUE(FailsWith(DataFileExternalPath(store, "ns/t", outside), arrow::StatusCode::IOError,
                          "table"))
        << outside;
  }
}

}  // namespace
}  // namespace timelake::testing
