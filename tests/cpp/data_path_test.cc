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

TEST(DataFilePathTest, EnginesOpenStorePathsThroughTheStoreAndUrisAsThemselves) {
  MemoryStore store("lake");
  EXPECT_EQ(DataFileExternalPath(store, "ns/t", "data/a%20b.parquet"),
            "memory://lake/ns/t/data/a b.parquet");
  EXPECT_EQ(DataFileExternalPath(store, "ns/t", "s3://bucket/a%20b.parquet"),
            "s3://bucket/a b.parquet");
  EXPECT_EQ(DataFileExternalPath(store, "ns/t", "file:///tmp/x.parquet"), "/tmp/x.parquet");
  EXPECT_EQ(DataFileExternalPath(store, "ns/t", "file:/tmp/x.parquet"), "/tmp/x.parquet");
}

}  // namespace
}  // namespace timelake::testing
