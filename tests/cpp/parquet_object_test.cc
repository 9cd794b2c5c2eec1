// Parquet reads of the core: they name the object on every failure, and a damaged page fails the
// read (page checksums written by timelake, verified on read) instead of decoding wrong values.
#include "timelake/store/parquet_object.h"

#include <random>

#include <arrow/api.h>
#include <arrow/io/memory.h>
#include <gtest/gtest.h>
#include <parquet/arrow/reader.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>

#include "test_util.h"
#include "timelake/index/last_value_index.h"
#include "timelake/ingest/ingestor.h"
#include "timelake/store/memory_store.h"

namespace timelake::testing {
namespace {

class ParquetObjectTest : public ::testing::Test {
 protected:
  // A data file as the ingestor writes it: a time, a key and measured values that do not repeat
  // (so that a byte of the values page is a byte of one value, not of a compression back-reference).
  std::shared_ptr<arrow::Table> Readings(int n) {
    std::mt19937_64 random(42);
    std::uniform_real_distribution<double> value(-100, 100);
    arrow::TimestampBuilder ts(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), arrow::default_memory_pool());
    arrow::StringBuilder key;
    arrow::DoubleBuilder temp;
    for (int i = 0; i < n; ++i) {
      EXPECT_OK(ts.Append(Micros(2025, 1, 1) + i * 1'000'000LL));
      EXPECT_OK(key.Append("sensor"));
      EXPECT_OK(temp.Append(value(random)));
    }
    auto schema = arrow::schema({arrow::field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
                                 arrow::field("key", arrow::utf8()),
                                 arrow::field("temp", arrow::float64())});
    return arrow::Table::Make(schema, {ts.Finish().ValueOrDie(), key.Finish().ValueOrDie(),
                                       temp.Finish().ValueOrDie()});
  }

  // Flips one byte near the end of column `column`'s first column chunk: inside its last data
  // page's values.
  void FlipAByteInsideAPage(const std::string& path, int column) {
    ASSERT_OK_AND_ASSIGN(auto data, store_->Get(path));
    auto reader = parquet::ParquetFileReader::Open(std::make_shared<arrow::io::BufferReader>(data));
    auto chunk = reader->metadata()->RowGroup(0)->ColumnChunk(column);
    const int64_t at = chunk->data_page_offset() + chunk->total_compressed_size() - 16;
    std::string bytes = data->ToString();
    bytes[static_cast<size_t>(at)] ^= 0x01;
    ASSERT_OK(store_->Put(path, Buf(bytes)));
  }

  // Reads without page checksum verification: what a reader that trusts the bytes gets.
  std::shared_ptr<arrow::Table> ReadUnverified(const std::string& path) {
    auto input = store_->OpenInput(path).ValueOrDie();
    auto reader = parquet::arrow::OpenFile(input, arrow::default_memory_pool()).ValueOrDie();
    return reader->ReadTable().ValueOrDie();
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
};

TEST_F(ParquetObjectTest, ReadsWhatWasWritten) {
  auto table = Readings(100);
  ASSERT_OK(WriteParquetFile(store_.get(), "t/data/a.parquet", *table, {}).status());
  ASSERT_OK_AND_ASSIGN(auto back, ReadParquetTable(store_.get(), "t/data/a.parquet"));
  EXPECT_TRUE(back->Equals(*table));
}

TEST_F(ParquetObjectTest, AMissingObjectStaysNotFound) {
  EXPECT_TRUE(IsMissing(ReadParquetTable(store_.get(), "t/_timelake/lvi/1.parquet")));
}

TEST_F(ParquetObjectTest, GarbageIsIOErrorNamingTheObject) {
  ASSERT_OK(store_->Put("t/_timelake/lvi/00000000000000000007.parquet", Buf("not parquet at all")));
  auto read = ReadParquetTable(store_.get(), "t/_timelake/lvi/00000000000000000007.parquet");
  // IOError (RuntimeError in Python), not Parquet's Invalid, which would surface as ValueError.
  EXPECT_TRUE(FailsWith(read, arrow::StatusCode::IOError,
                        "cannot read Parquet object 't/_timelake/lvi/00000000000000000007.parquet'"));
}

TEST_F(ParquetObjectTest, ATruncatedBufferIsIOErrorNamingItsOrigin) {
  auto table = Readings(10);
  ASSERT_OK(WriteParquetFile(store_.get(), "x.parquet", *table, {}).status());
  ASSERT_OK_AND_ASSIGN(auto data, store_->Get("x.parquet"));
  EXPECT_TRUE(FailsWith(ReadParquetBuffer(SliceBuffer(data, 0, data->size() - 5), "t/_delta_log/cp"),
                        arrow::StatusCode::IOError, "t/_delta_log/cp"));
}

TEST_F(ParquetObjectTest, TheIndexReadHelperNamesTheObjectToo) {
  ASSERT_OK(store_->Put("t/_timelake/lvi/base-00000000000000000003.parquet", Buf("PAR1")));
  EXPECT_TRUE(FailsWith(ReadParquetTable(store_.get(), "t/_timelake/lvi/base-00000000000000000003.parquet"),
                        arrow::StatusCode::IOError, "base-00000000000000000003.parquet"));
}

TEST_F(ParquetObjectTest, ADamagedDataPageFailsTheReadInsteadOfReturningWrongValues) {
  auto table = Readings(2000);
  ASSERT_OK(WriteParquetFile(store_.get(), "t/data/2025-01-01/part-1.parquet", *table, {}).status());
  FlipAByteInsideAPage("t/data/2025-01-01/part-1.parquet", /*column=*/2);

  // Trusting the bytes decodes a different value without any error...
  auto unverified = ReadUnverified("t/data/2025-01-01/part-1.parquet");
  ASSERT_EQ(unverified->num_rows(), table->num_rows());
  EXPECT_FALSE(unverified->Equals(*table));
  // ...which the page checksum catches.
  EXPECT_TRUE(FailsWith(ReadParquetTable(store_.get(), "t/data/2025-01-01/part-1.parquet"),
                        arrow::StatusCode::IOError, "t/data/2025-01-01/part-1.parquet"));
}

}  // namespace
}  // namespace timelake::testing
