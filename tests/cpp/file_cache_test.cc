// FileCache and row-group pruning (scan/file_cache.h, scan/row_groups.h): which row groups a
// filter keeps, and that a row-group copy holds exactly their rows while fetching only their bytes.

#include "timelake/scan/file_cache.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <limits>

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <gtest/gtest.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>

#include "timelake/scan/row_groups.h"
#include "timelake/store/memory_store.h"
#include "test_util.h"
#include "timelake/util/ids.h"

namespace timelake::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kGroups = 8;
constexpr int kRowsPerGroup = 50000;
constexpr int64_t kDay = int64_t{86400} * 1000000;

/// A MemoryStore that counts the bytes and requests of ranged reads.
class CountingStore : public MemoryStore {
 public:
  arrow::Result<std::shared_ptr<arrow::Buffer>> GetRange(const std::string& path, int64_t offset,
                                                         int64_t length) override {
    ++requests;
    bytes += length;
    return MemoryStore::GetRange(path, offset, length);
  }
  std::atomic<int64_t> requests{0}, bytes{0};
};

// Rows sorted by (device, time): device d (0..kGroups-1) fills row group d, its times run over
// day d; the text column is "dev-<d>".
std::shared_ptr<arrow::Table> SortedTable() {
  arrow::Int64Builder device, value;
  arrow::TimestampBuilder time(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), arrow::default_memory_pool());
  arrow::StringBuilder name;
  for (int d = 0; d < kGroups; ++d) {
    for (int r = 0; r < kRowsPerGroup; ++r) {
      EXPECT_TRUE(device.Append(d).ok());
      EXPECT_TRUE(time.Append(d * kDay + r * int64_t{1000000}).ok());
      const auto appended = name.Append("dev-" + std::to_string(d));
      if (!appended.ok()) { ADD_FAILURE() << appended.ToString(); return nullptr; }
      EXPECT_TRUE(value.Append((int64_t{d} * 7919 + int64_t{r} * 104729) % 1000003).ok());  // incompressible enough
    }
  }
  auto schema = arrow::schema({arrow::field("device", arrow::int64()),
                               arrow::field("time", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
                               arrow::field("name", arrow::utf8()), arrow::field("value", arrow::int64())});
  return arrow::Table::Make(schema, {*device.Finish(), *time.Finish(), *name.Finish(), *value.Finish()});
}

std::shared_ptr<arrow::Buffer> ParquetOf(const arrow::Table& table) {
  auto out = *arrow::io::BufferOutputStream::Create();
  auto props = parquet::WriterProperties::Builder().compression(parquet::Compression::UNCOMPRESSED)->disable_dictionary()->build();
  EXPECT_TRUE(parquet::arrow::WriteTable(table, arrow::default_memory_pool(), out, kRowsPerGroup, props).ok());
  return *out->Finish();
}

std::shared_ptr<parquet::FileMetaData> FooterOf(const std::shared_ptr<arrow::Buffer>& file) {
  auto reader = parquet::ParquetFileReader::Open(std::make_shared<arrow::io::BufferReader>(file));
  return reader->metadata();
}

std::shared_ptr<arrow::Table> ReadLocal(const std::string& path) {
  auto input = *arrow::io::ReadableFile::Open(path);
  std::unique_ptr<parquet::arrow::FileReader> reader;
  EXPECT_TRUE(parquet::arrow::OpenFile(input, arrow::default_memory_pool()).Value(&reader).ok());
  std::shared_ptr<arrow::Table> table;
  EXPECT_TRUE(reader->ReadTable(&table).ok());
  return table;
}

TEST(RowGroups, KeyAndTimeStatisticsPickTheGroupsThatCanMatch) {
  auto file = ParquetOf(*SortedTable());
  auto meta = FooterOf(file);
  ASSERT_EQ(meta->num_row_groups(), kGroups);

  EXPECT_EQ(RowGroupsAdmitted(*meta, {}, "time").size(), static_cast<size_t>(kGroups));
  ScanFilter one_device;
  one_device.key_equals["device"] = int64_t{5};
  EXPECT_EQ(RowGroupsAdmitted(*meta, one_device, "time"), std::vector<int>{5});
  ScanFilter by_name;
  by_name.key_equals["name"] = std::string("dev-3");
  EXPECT_EQ(RowGroupsAdmitted(*meta, by_name, "time"), std::vector<int>{3});
  ScanFilter absent;
  absent.key_equals["device"] = int64_t{99};
  EXPECT_TRUE(RowGroupsAdmitted(*meta, absent, "time").empty());

  ScanFilter days;  // from the last second of day 2 to the first microsecond of day 4
  days.min_time = 2 * kDay + (kRowsPerGroup - 1) * int64_t{1000000};
  days.max_time = 4 * kDay;
  EXPECT_EQ(RowGroupsAdmitted(*meta, days, "time"), (std::vector<int>{2, 3, 4}));
  // Without the time column's name, time says nothing.
  EXPECT_EQ(RowGroupsAdmitted(*meta, days, "").size(), static_cast<size_t>(kGroups));
  // A column the file lacks, or of a kind the statistics cannot order, keeps every group.
  ScanFilter unknown;
  unknown.key_equals["missing"] = int64_t{1};
  EXPECT_EQ(RowGroupsAdmitted(*meta, unknown, "time").size(), static_cast<size_t>(kGroups));
  ScanFilter wrong_kind;
  wrong_kind.key_equals["device"] = std::string("5");
  EXPECT_EQ(RowGroupsAdmitted(*meta, wrong_kind, "time").size(), static_cast<size_t>(kGroups));
}

TEST(RowGroups, MillisecondTimesAtTheEdgeOfTheRangeDoNotOverflow) {
  // An "end of time" sentinel in milliseconds (INT64_MAX microseconds cut to milliseconds).
  arrow::TimestampBuilder time(arrow::timestamp(arrow::TimeUnit::MILLI), arrow::default_memory_pool());
  ASSERT_TRUE(time.Append(0).ok());
  ASSERT_TRUE(time.Append(std::numeric_limits<int64_t>::max() / 1000).ok());
  auto schema = arrow::schema({arrow::field("time", arrow::timestamp(arrow::TimeUnit::MILLI))});
  auto table = arrow::Table::Make(schema, {*time.Finish()});
  auto out = *arrow::io::BufferOutputStream::Create();
  ASSERT_TRUE(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), out, 10).ok());
  auto meta = FooterOf(*out->Finish());
  ScanFilter late;
  late.min_time = int64_t{1} << 60;
  EXPECT_EQ(RowGroupsAdmitted(*meta, late, "time"), std::vector<int>{0});
  ScanFilter early;
  early.max_time = -1;
  EXPECT_TRUE(RowGroupsAdmitted(*meta, early, "time").empty());
}

TEST(RowGroups, ByteRangesCoverTheChosenGroupsOnly) {
  auto file = ParquetOf(*SortedTable());
  auto meta = FooterOf(file);
  const int64_t footer_start = file->size() - 8 - meta->size();
  auto ranges = RowGroupByteRanges(*meta, {2, 3, 6}, footer_start);
  ASSERT_TRUE(ranges.has_value());
  auto group = [&](int i) {
    auto g = meta->RowGroup(i);
    auto first = g->ColumnChunk(0);
    return first->has_dictionary_page() ? first->dictionary_page_offset() : first->data_page_offset();
  };
  auto last = meta->RowGroup(kGroups - 1);
  auto last_column = last->ColumnChunk(last->num_columns() - 1);
  const int64_t data_end = last_column->data_page_offset() + last_column->total_compressed_size();
  // 2 and 3 merge; 6 alone; then what lies between the groups and the footer (page indexes).
  ASSERT_EQ(ranges->size(), data_end < footer_start ? 3u : 2u);
  EXPECT_EQ((*ranges)[0].first, group(2));
  EXPECT_EQ((*ranges)[0].first + (*ranges)[0].second, group(4));
  EXPECT_EQ((*ranges)[1].first, group(6));
  EXPECT_EQ((*ranges)[1].first + (*ranges)[1].second, group(7));
  if (data_end < footer_start) {
    EXPECT_EQ((*ranges)[2].first, data_end);
    EXPECT_EQ((*ranges)[2].first + (*ranges)[2].second, footer_start);
  }
  // Offsets past the footer are not a layout to trust.
  EXPECT_FALSE(RowGroupByteRanges(*meta, {0}, group(7)).has_value());
}

class FileCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("timelake-cache-test-" + NewUuid());
    table_ = SortedTable();
    file_ = ParquetOf(*table_);
    ASSERT_GE(file_->size(), FileCache::kRowGroupCopyMinBytes);
    ASSERT_TRUE(store_->Put("t/data/part.parquet", file_).ok());
  }
  void TearDown() override { fs::remove_all(root_); }

  RowGroupChooser Choose(std::vector<int> groups) {
    return [groups](const parquet::FileMetaData&) { return groups; };
  }
  std::shared_ptr<arrow::Table> Rows(const std::vector<int>& groups) {
    std::vector<std::shared_ptr<arrow::Table>> parts;
    for (int g : groups) parts.push_back(table_->Slice(int64_t{g} * kRowsPerGroup, kRowsPerGroup));
    if (parts.empty()) return table_->Slice(0, 0);
    return *arrow::ConcatenateTables(parts);
  }

  fs::path root_;
  std::shared_ptr<CountingStore> store_ = std::make_shared<CountingStore>();
  std::shared_ptr<arrow::Table> table_;
  std::shared_ptr<arrow::Buffer> file_;
};

TEST_F(FileCacheTest, RowGroupCopyHoldsExactlyTheChosenRowsAndFetchesOnlyTheirBytes) {
  FileCache cache(store_, root_.string(), int64_t{1} << 40);
  const CachedFile f{"t/data/part.parquet", file_->size()};
  auto paths = cache.Materialize({f}, Choose({1, 5}));
  ASSERT_TRUE(paths.ok()) << paths.status().ToString();
  const std::string local = (*paths)[0];
  EXPECT_NE(local.find(".rg-"), std::string::npos) << local;
  EXPECT_TRUE(ReadLocal(local)->Equals(*Rows({1, 5}))) << "the copy must hold exactly rows of groups 1 and 5";
  EXPECT_LT(store_->bytes.load(), file_->size() / 3) << "fetched " << store_->bytes << " of " << file_->size();

  // Again: the footer and the copy are local; nothing is fetched.
  store_->requests = 0;
  auto again = cache.Materialize({f}, Choose({5, 1}));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0], local);
  EXPECT_EQ(store_->requests.load(), 0);

  // Other groups: another copy, with the footer read locally.
  store_->requests = 0;
  auto other = cache.Materialize({f}, Choose({7}));
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)[0], local);
  EXPECT_TRUE(ReadLocal((*other)[0])->Equals(*Rows({7})));
  EXPECT_EQ(store_->requests.load(), 1);  // group 7's bytes, one range
}

TEST_F(FileCacheTest, APlanIsCopiedWithTheRowGroupsItsFilterAdmitsAndPinned) {
  FileCache cache(store_, root_.string(), int64_t{1} << 40);
  ScanPlan plan;
  plan.contract.time_column = "time";
  ScanFile f;
  f.path = "memory://t/data/part.parquet";
  f.store_path = "t/data/part.parquet";
  f.size = file_->size();
  plan.files.push_back(f);
  auto whole = cache.MaterializePlan(plan);  // no filter: the whole file
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_EQ(whole->paths.size(), 1u);
  EXPECT_EQ(whole->paths[0].find(".rg-"), std::string::npos) << whole->paths[0];
  EXPECT_NE(whole->pin, nullptr);
  EXPECT_TRUE(ReadLocal(whole->paths[0])->Equals(*table_));

  plan.filter.key_equals["device"] = int64_t{5};  // only group 5 may hold device 5
  auto part = cache.MaterializePlan(plan);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->paths[0], whole->paths[0]) << "a whole copy, when present, is used instead";
  fs::remove(whole->paths[0]);
  auto chosen = cache.MaterializePlan(plan);
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  EXPECT_NE(chosen->paths[0].find(".rg-"), std::string::npos) << chosen->paths[0];
  EXPECT_TRUE(ReadLocal(chosen->paths[0])->Equals(*Rows({5})));
}

TEST_F(FileCacheTest, APlanWithAFileOutsideTheStoreIsAnError) {
  FileCache cache(store_, root_.string(), int64_t{1} << 40);
  ScanPlan plan;
  ScanFile f;
  f.path = "/elsewhere/part.parquet";
  plan.files.push_back(f);
  auto copies = cache.MaterializePlan(plan);
  ASSERT_FALSE(copies.ok());
  EXPECT_TRUE(copies.status().IsIOError());
  EXPECT_NE(copies.status().message().find("/elsewhere/part.parquet lies outside the lake's store"),
            std::string::npos);
}

TEST_F(FileCacheTest, ADamagedFooterCopyIsReadAgain) {
  FileCache cache(store_, root_.string(), int64_t{1} << 40);
  const CachedFile f{"t/data/part.parquet", file_->size()};
  ASSERT_TRUE(cache.Materialize({f}, Choose({2})).ok());
  std::string footer;
  for (const auto& entry : fs::recursive_directory_iterator(root_)) {
    if (entry.path().filename().string().find(".footer-") != std::string::npos) footer = entry.path().string();
  }
  ASSERT_FALSE(footer.empty());
  fs::resize_file(footer, fs::file_size(footer) / 2);  // a full disk, a crash
  store_->requests = 0;
  // A new cache (another Lake, another process): the footer is not in its memory tier.
  FileCache fresh(store_, root_.string(), int64_t{1} << 40);
  auto again = fresh.Materialize({f}, Choose({4}));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(ReadLocal((*again)[0])->Equals(*Rows({4})));
  auto meta = FooterOf(file_);
  const auto ranges = RowGroupByteRanges(*meta, {4}, file_->size() - 8 - meta->size());
  ASSERT_TRUE(ranges.has_value());
  // The footer again, then group 4 (and the page indexes after the last group, if any).
  EXPECT_EQ(store_->requests.load(), 1 + static_cast<int64_t>(ranges->size()));
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(footer)), meta->size() + 8);
}

TEST_F(FileCacheTest, NoGroupIsAnEmptyFileAndEveryGroupIsTheWholeFile) {
  FileCache cache(store_, root_.string(), int64_t{1} << 40);
  const CachedFile f{"t/data/part.parquet", file_->size()};
  auto none = cache.Materialize({f}, Choose({}));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  auto empty = ReadLocal((*none)[0]);
  EXPECT_EQ(empty->num_rows(), 0);
  EXPECT_TRUE(empty->schema()->Equals(*table_->schema(), /*check_metadata=*/false));

  auto all = cache.Materialize({f}, Choose({0, 1, 2, 3, 4, 5, 6, 7}));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)[0], root_.string() + "/" + fs::path(cache.directory()).parent_path().filename().string() +
                           "/t/data/part@-1.parquet");
  EXPECT_EQ(static_cast<int64_t>(fs::file_size((*all)[0])), file_->size());
  EXPECT_TRUE(ReadLocal((*all)[0])->Equals(*table_));
  // With a whole copy present, a chooser changes nothing.
  auto some = cache.Materialize({f}, Choose({3}));
  ASSERT_TRUE(some.ok());
  EXPECT_EQ((*some)[0], (*all)[0]);
}

TEST_F(FileCacheTest, ShortOrForeignFilesAreErrorsOrWholeCopies) {
  FileCache cache(store_, root_.string(), int64_t{1} << 40);
  // The log records more bytes than the store holds: damaged, and nothing is published.
  auto longer = cache.Materialize({{"t/data/part.parquet", file_->size() + 100}}, Choose({1}));
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find("damaged"), std::string::npos) << longer.status().ToString();
  // Not Parquet at all (no magic at the end): copied whole, the reader will say what it is.
  std::string junk(FileCache::kRowGroupCopyMinBytes, 'x');
  ASSERT_TRUE(store_->Put("t/data/junk.parquet", arrow::Buffer::FromString(junk)).ok());
  auto copied = cache.Materialize({{"t/data/junk.parquet", static_cast<int64_t>(junk.size())}}, Choose({0}));
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(static_cast<int64_t>(fs::file_size((*copied)[0])), static_cast<int64_t>(junk.size()));
  for (const auto& entry : fs::recursive_directory_iterator(root_)) {
    EXPECT_EQ(entry.path().string().find(".part-"), std::string::npos) << "leftover " << entry.path();
  }
}

TEST_F(FileCacheTest, WholeCopiesOfSeveralFilesDownloadInParallelRanges) {
  FileCache cache(store_, root_.string(), int64_t{1} << 40);
  std::vector<CachedFile> files;
  for (int i = 0; i < 3; ++i) {
    const std::string path = "t/data/copy-" + std::to_string(i) + ".parquet";
    ASSERT_TRUE(store_->Put(path, file_).ok());
    files.push_back({path, file_->size()});
  }
  auto paths = cache.Materialize(files);
  ASSERT_TRUE(paths.ok()) << paths.status().ToString();
  for (const auto& p : *paths) EXPECT_TRUE(ReadLocal(p)->Equals(*table_));
}

// Eviction (budget: 1 byte, so every idle copy is due) spares the copies a pin names, whether
// this process or another holds it; a pin whose process was killed frees its copies.
TEST_F(FileCacheTest, EvictionSparesPinnedCopiesOfAnyProcessAndFreesThoseOfAKilledOne) {
  const CachedFile a{"t/data/a.bin", 1000}, b{"t/data/b.bin", 1000};
  ASSERT_TRUE(store_->Put(a.store_path, arrow::Buffer::FromString(std::string(1000, 'a'))).ok());
  ASSERT_TRUE(store_->Put(b.store_path, arrow::Buffer::FromString(std::string(1000, 'b'))).ok());
  FileCache cache(store_, root_.string(), 1);
  auto idle = [](const std::string& path) {  // last asked for two minutes ago
    fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::minutes(2));
  };
  auto pins = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(cache.directory() + ".pins")) n += e.path().extension() == ".pin";
    return n;
  };
  std::shared_ptr<CachePin> pin_a;
  ASSERT_OK_AND_ASSIGN(auto local_a, cache.Materialize({a}, nullptr, &pin_a));
  ASSERT_OK_AND_ASSIGN(auto local_b, cache.Materialize({b}));
  idle(local_a[0]);
  idle(local_b[0]);
  EXPECT_EQ(pins(), 1);
  cache.EvictNow();
  EXPECT_TRUE(fs::exists(local_a[0])) << "a pinned copy was evicted";
  EXPECT_FALSE(fs::exists(local_b[0])) << "an unpinned idle copy was kept";

  // Another process pins b (downloading it again) and lives on.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FileCache other(store_, root_.string(), 1);
    std::shared_ptr<CachePin> pin_b;
    const char ok = other.Materialize({b}, nullptr, &pin_b).ok() ? 'y' : 'n';
    (void)!write(ready[1], &ok, 1);
    for (;;) pause();
  }
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  ASSERT_TRUE(fs::exists(local_b[0]));
  idle(local_b[0]);
  pin_a->Release();
  EXPECT_EQ(pins(), 1);
  cache.EvictNow();
  EXPECT_FALSE(fs::exists(local_a[0])) << "a released copy was kept";
  EXPECT_TRUE(fs::exists(local_b[0])) << "a copy pinned by another process was evicted";

  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  cache.EvictNow();
  EXPECT_FALSE(fs::exists(local_b[0])) << "the copy of a killed process's pin was kept";
  EXPECT_EQ(pins(), 0) << "the killed process's pin was left";
}

// The memory tier: a warm query over a large file finds its footer in memory; a new cache over
// the same folder (another Lake, another process) finds it on disk; neither sends a request.
TEST_F(FileCacheTest, AWarmFooterIsAnsweredFromMemoryAndAColdCacheFindsItOnDisk) {
  const CachedFile f{"t/data/part.parquet", file_->size(), 1000};
  {
    FileCache cache(store_, root_.string(), int64_t{1} << 40);
    ASSERT_TRUE(cache.Materialize({f}, Choose({1})).ok());
    const CacheStats cold = cache.Stats();
    EXPECT_EQ(cold.memory_hits, 0);
    EXPECT_EQ(cold.disk_hits, 0);
    EXPECT_EQ(cold.misses, 2);  // the footer, the row-group copy
    EXPECT_EQ(cold.requests, store_->requests.load());
    EXPECT_EQ(cold.bytes_fetched, store_->bytes.load());
    EXPECT_GT(cold.memory_bytes, 0);
    store_->requests = 0;
    ASSERT_TRUE(cache.Materialize({f}, Choose({1})).ok());
    const CacheStats warm = cache.Stats();
    EXPECT_EQ(store_->requests.load(), 0);
    EXPECT_EQ(warm.memory_hits, 1);  // the footer
    EXPECT_EQ(warm.disk_hits, 1);    // the row-group copy
    EXPECT_EQ(warm.misses, 2);
    EXPECT_EQ(warm.requests, cold.requests);
    EXPECT_GT(warm.bytes_served, FooterOf(file_)->size());
  }
  FileCache other(store_, root_.string(), int64_t{1} << 40);
  ASSERT_TRUE(other.Materialize({f}, Choose({1})).ok());
  EXPECT_EQ(store_->requests.load(), 0);
  EXPECT_EQ(other.Stats().disk_hits, 2);
  EXPECT_EQ(other.Stats().memory_hits, 0);
  // Without a memory tier, footers come from disk every time.
  FileCache no_memory(store_, root_.string(), int64_t{1} << 40, /*memory_bytes=*/0);
  ASSERT_TRUE(no_memory.Materialize({f}, Choose({1})).ok());
  ASSERT_TRUE(no_memory.Materialize({f}, Choose({1})).ok());
  EXPECT_EQ(no_memory.Stats().memory_hits, 0);
  EXPECT_EQ(no_memory.Stats().disk_hits, 4);
  EXPECT_EQ(no_memory.Stats().memory_bytes, 0);
}

// Other bytes of the same size at a cached path (a table dropped and recreated, another
// writer) come with another add action: they are copied afresh, never answered with the old
// copy, in both tiers.
TEST_F(FileCacheTest, OtherBytesAtACachedPathWithAnotherAddActionAreFetchedAgain) {
  FileCache cache(store_, root_.string(), int64_t{1} << 40);
  const std::string path = "t/data/same.parquet";
  const std::string old_bytes(1000, 'o'), new_bytes(1000, 'n');
  ASSERT_TRUE(store_->Put(path, arrow::Buffer::FromString(old_bytes)).ok());
  auto read = [](const std::string& local) {
    std::ifstream in(local, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  ASSERT_OK_AND_ASSIGN(auto first, cache.Materialize({{path, 1000, 111}}));
  EXPECT_EQ(read(first[0]), old_bytes);
  ASSERT_TRUE(store_->Put(path, arrow::Buffer::FromString(new_bytes)).ok());
  ASSERT_OK_AND_ASSIGN(auto second, cache.Materialize({{path, 1000, 222}}));
  EXPECT_NE(second[0], first[0]);
  EXPECT_EQ(read(second[0]), new_bytes);
  EXPECT_EQ(cache.Stats().misses, 2);

  // The same for a large file's footer (memory tier) and row-group copy.
  const std::string big = "t/data/big.parquet";
  ASSERT_TRUE(store_->Put(big, file_).ok());
  ASSERT_OK_AND_ASSIGN(auto before, cache.Materialize({{big, file_->size(), 1}}, Choose({2})));
  EXPECT_TRUE(ReadLocal(before[0])->Equals(*Rows({2})));
  // Same size, other rows: group 2 of the new file holds group 3's rows.
  std::vector<std::shared_ptr<arrow::Table>> parts = {Rows({0, 1}), Rows({3, 3}), Rows({4, 5, 6, 7})};
  auto shuffled = ParquetOf(**arrow::ConcatenateTables(parts));
  ASSERT_EQ(shuffled->size(), file_->size());
  ASSERT_TRUE(store_->Put(big, shuffled).ok());
  ASSERT_OK_AND_ASSIGN(auto after, cache.Materialize({{big, file_->size(), 2}}, Choose({2})));
  EXPECT_TRUE(ReadLocal(after[0])->Equals(*Rows({3})));
}

TEST(FileCacheOptions, StorageOptionsAreTakenOutAndChecked) {
  std::map<std::string, std::string> options = {{"aws_region", "eu-west-1"},
                                                {"timelake_cache", "Disk"},
                                                {"timelake_cache_memory_bytes", "0"},
                                                {"timelake_cache_disk_bytes", "1000"},
                                                {"timelake_cache_dir", "/tmp/x"}};
  ASSERT_OK_AND_ASSIGN(auto taken, FileCacheOptions::Take(&options));
  EXPECT_EQ(options, (std::map<std::string, std::string>{{"aws_region", "eu-west-1"}}));
  EXPECT_TRUE(taken.given);
  EXPECT_FALSE(taken.temporary);
  EXPECT_EQ(taken.memory_bytes, 0);
  EXPECT_EQ(taken.disk_bytes, 1000);
  EXPECT_EQ(taken.root, "/tmp/x");
  std::map<std::string, std::string> none = {{"aws_region", "x"}};
  ASSERT_OK_AND_ASSIGN(auto defaults, FileCacheOptions::Take(&none));
  EXPECT_FALSE(defaults.given);
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"timelake_cache", "off"}, {"timelake_cache", ""}, {"timelake_cache_memory_bytes", "-1"},
           {"timelake_cache_memory_bytes", "1k"}, {"timelake_cache_disk_bytes", "0"},
           {"timelake_cache_disk_bytes", "99999999999999999999"}, {"timelake_cache_dir", ""}}) {
    std::map<std::string, std::string> bad = {{key, value}};
    auto result = FileCacheOptions::Take(&bad);
    ASSERT_FALSE(result.ok()) << key << "=" << value;
    EXPECT_TRUE(result.status().IsInvalid());
    EXPECT_NE(result.status().message().find(key), std::string::npos) << result.status().ToString();
  }
}

TEST(FileCacheOptions, AMemoryCacheDeletesItsFolderWithIt) {
  auto store = std::make_shared<MemoryStore>();
  ASSERT_TRUE(store->Put("t/data/a.bin", arrow::Buffer::FromString(std::string(100, 'a'))).ok());
  FileCacheOptions options;
  options.temporary = true;
  std::string folder;
  {
    ASSERT_OK_AND_ASSIGN(auto cache, FileCache::Make(store, options));
    ASSERT_OK_AND_ASSIGN(auto paths, cache->Materialize({{"t/data/a.bin", 100, 5}}));
    EXPECT_TRUE(fs::exists(paths[0]));
    folder = fs::path(cache->directory()).parent_path().parent_path().string();
    EXPECT_NE(folder.find("timelake-cache-"), std::string::npos) << folder;
    // A child made by fork() that drops its copy of the cache leaves the folder to the parent.
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      cache.reset();
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_TRUE(fs::exists(paths[0])) << "a fork child deleted its parent's cache folder";
  }
  EXPECT_FALSE(fs::exists(folder));
}

}  // namespace
}  // namespace timelake::testing
