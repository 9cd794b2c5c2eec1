#include "timelake/store/parquet_object.h"

#include <algorithm>

#include <arrow/io/memory.h>
#include <arrow/record_batch.h>
#include <parquet/arrow/reader.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/schema.h>
#include <parquet/statistics.h>

#include "timelake/util/status.h"

namespace timelake {
namespace {

// Objects up to this size are fetched with one read before decoding: on an object store one
// request beats the footer-then-chunks sequence of the Parquet reader.
constexpr int64_t kReadWholeBelow = int64_t{32} << 20;

arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenObject(ObjectStore* store,
                                                                       const std::string& path) {
  // The store's own errors already name the object (and keep NotFound recognisable).
  ARROW_ASSIGN_OR_RAISE(auto input, store->OpenInput(path));
  ARROW_ASSIGN_OR_RAISE(const int64_t size, input->GetSize());
  if (size <= kReadWholeBelow) {
    ARROW_ASSIGN_OR_RAISE(auto data, input->ReadAt(0, size));
    if (data->size() != size) {
      return arrow::Status::IOError("cannot read Parquet object '", path, "': ", data->size(),
                                    " of ", size, " bytes could be read");
    }
    input = std::make_shared<arrow::io::BufferReader>(std::move(data));
  }
  return input;
}

arrow::Result<std::shared_ptr<arrow::Table>> ReadAll(
    std::shared_ptr<arrow::io::RandomAccessFile> input) {
  parquet::arrow::FileReaderBuilder builder;
  ARROW_RETURN_NOT_OK(builder.Open(std::move(input), VerifyingReaderProperties()));
  std::unique_ptr<parquet::arrow::FileReader> reader;
  // Larger objects: the column chunks are fetched ahead, coalesced and in parallel (on the I/O
  // thread pool), so a read is not a chain of round trips.
  parquet::ArrowReaderProperties arrow_properties;
  arrow_properties.set_pre_buffer(true);
  ARROW_RETURN_NOT_OK(builder.memory_pool(arrow::default_memory_pool())
                          ->properties(arrow_properties)
                          ->Build(&reader));
  return reader->ReadTable();
}

// Parquet reports corruption as IOError or Invalid (which would reach users as ValueError, as
// if they had passed a bad argument); either way the object is what is wrong, so say which.
arrow::Status NameTheObject(const arrow::Status& status, const std::string& origin) {
  if (status.ok() || IsNotFound(status)) return status;
  return arrow::Status::IOError("cannot read Parquet object '", origin, "': ", status.message());
}

}  // namespace

parquet::ReaderProperties VerifyingReaderProperties() {
  parquet::ReaderProperties props(arrow::default_memory_pool());
  props.set_page_checksum_verification(true);
  return props;
}

arrow::Result<std::shared_ptr<arrow::Table>> ReadParquetTable(ObjectStore* store,
                                                              const std::string& path) {
  ARROW_ASSIGN_OR_RAISE(auto input, OpenObject(store, path));
  auto table = ReadAll(std::move(input));
  if (!table.ok()) return NameTheObject(table.status(), path);
  return table;
}

namespace {

// A batch reader that owns the file reader it reads from and names the object in its errors.
class ParquetBatches : public arrow::RecordBatchReader {
 public:
  ParquetBatches(std::unique_ptr<parquet::arrow::FileReader> file,
                 std::unique_ptr<arrow::RecordBatchReader> batches, std::string path)
      : file_(std::move(file)), batches_(std::move(batches)), path_(std::move(path)) {}
  std::shared_ptr<arrow::Schema> schema() const override { return batches_->schema(); }
  arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* batch) override {
    return NameTheObject(batches_->ReadNext(batch), path_);
  }

 private:
  std::unique_ptr<parquet::arrow::FileReader> file_;  // outlives `batches_`, which reads from it
  std::unique_ptr<arrow::RecordBatchReader> batches_;
  std::string path_;
};

}  // namespace

arrow::Result<std::shared_ptr<arrow::RecordBatchReader>> ReadParquetBatches(
    ObjectStore* store, const std::string& path, int64_t batch_rows,
    const std::vector<std::string>& as_dictionary) {
  ARROW_ASSIGN_OR_RAISE(auto input, OpenObject(store, path));
  auto opened = [&]() -> arrow::Result<std::shared_ptr<arrow::RecordBatchReader>> {
    parquet::arrow::FileReaderBuilder builder;
    ARROW_RETURN_NOT_OK(builder.Open(std::move(input), VerifyingReaderProperties()));
    parquet::ArrowReaderProperties arrow_properties;
    arrow_properties.set_batch_size(std::max<int64_t>(1, batch_rows));
    if (!as_dictionary.empty()) {
      const parquet::SchemaDescriptor& schema = *builder.raw_reader()->metadata()->schema();
      for (int i = 0; i < schema.num_columns(); ++i) {
        const auto& column = *schema.Column(i);
        if (column.physical_type() != parquet::Type::BYTE_ARRAY || column.path()->ToDotVector().size() != 1) {
          continue;
        }
        if (std::find(as_dictionary.begin(), as_dictionary.end(), column.name()) != as_dictionary.end()) {
          arrow_properties.set_read_dictionary(i, true);
        }
      }
    }
    std::unique_ptr<parquet::arrow::FileReader> file;
    ARROW_RETURN_NOT_OK(builder.memory_pool(arrow::default_memory_pool())
                            ->properties(arrow_properties)
                            ->Build(&file));
    ARROW_ASSIGN_OR_RAISE(auto batches, file->GetRecordBatchReader());
    return std::make_shared<ParquetBatches>(std::move(file), std::move(batches), path);
  }();
  if (!opened.ok()) return NameTheObject(opened.status(), path);
  return opened;
}

arrow::Result<std::shared_ptr<arrow::Table>> ReadParquetBuffer(
    const std::shared_ptr<arrow::Buffer>& data, const std::string& origin) {
  auto table = ReadAll(std::make_shared<arrow::io::BufferReader>(data));
  if (!table.ok()) return NameTheObject(table.status(), origin);
  return table;
}

namespace {

// True unless the statistics of row group `g` say that every leaf in `leaves` is null in all of
// its rows (a chunk without a null count may hold values).
bool MayHoldValues(const parquet::FileMetaData& meta, int g, const std::vector<int>& leaves) {
  auto group = meta.RowGroup(g);
  for (int leaf : leaves) {
    auto chunk = group->ColumnChunk(leaf);
    auto stats = chunk->statistics();
    if (!chunk->is_stats_set() || !stats || !stats->HasNullCount()) return true;
    if (stats->null_count() < group->num_rows()) return true;
  }
  return false;
}

arrow::Result<std::shared_ptr<arrow::Table>> ReadPart(const std::shared_ptr<arrow::Buffer>& data,
                                                      const std::vector<std::string>& columns,
                                                      const std::vector<std::string>& present,
                                                      int64_t* file_rows) {
  parquet::arrow::FileReaderBuilder builder;
  ARROW_RETURN_NOT_OK(builder.Open(std::make_shared<arrow::io::BufferReader>(data),
                                   VerifyingReaderProperties()));
  std::unique_ptr<parquet::arrow::FileReader> reader;
  ARROW_RETURN_NOT_OK(builder.memory_pool(arrow::default_memory_pool())->Build(&reader));
  const parquet::FileMetaData& meta = *reader->parquet_reader()->metadata();
  if (file_rows) *file_rows = meta.num_rows();
  const parquet::SchemaDescriptor& schema = *meta.schema();
  std::vector<int> leaves, presence;
  for (int i = 0; i < schema.num_columns(); ++i) {
    const auto path = schema.Column(i)->path()->ToDotVector();
    if (!path.empty() && std::find(columns.begin(), columns.end(), path[0]) != columns.end()) {
      leaves.push_back(i);
    }
    const std::string dotted = schema.Column(i)->path()->ToDotString();
    if (std::find(present.begin(), present.end(), dotted) != present.end()) presence.push_back(i);
  }
  std::vector<int> groups;
  for (int g = 0; g < meta.num_row_groups(); ++g) {
    if (MayHoldValues(meta, g, presence)) groups.push_back(g);
  }
  if (leaves.empty() || groups.empty()) {
    std::shared_ptr<arrow::Schema> whole;
    ARROW_RETURN_NOT_OK(reader->GetSchema(&whole));
    arrow::FieldVector fields;
    for (const auto& f : whole->fields()) {
      if (std::find(columns.begin(), columns.end(), f->name()) != columns.end()) fields.push_back(f);
    }
    return arrow::Table::MakeEmpty(arrow::schema(std::move(fields)));
  }
  return reader->ReadRowGroups(groups, leaves);
}

}  // namespace

arrow::Result<std::shared_ptr<arrow::Table>> ReadParquetBufferPart(
    const std::shared_ptr<arrow::Buffer>& data, const std::string& origin,
    const std::vector<std::string>& columns, const std::vector<std::string>& present,
    int64_t* file_rows) {
  auto table = ReadPart(data, columns, present, file_rows);
  if (!table.ok()) return NameTheObject(table.status(), origin);
  return table;
}

}  // namespace timelake
