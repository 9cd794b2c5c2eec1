#include "timelake/ingest/ingestor.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include <arrow/array.h>
#include <arrow/builder.h>
#include <arrow/compute/api.h>
#include <arrow/scalar.h>
#include <arrow/table.h>
#include <arrow/type_traits.h>
#include <arrow/util/byte_size.h>
#include <parquet/arrow/writer.h>

#include "timelake/ingest/align.h"
#include "timelake/ingest/arrange.h"
#include "timelake/ingest/stats.h"
#include "timelake/log/file_tags.h"
#include "timelake/rows/newest_rows.h"
#include "timelake/util/ids.h"

namespace timelake {

arrow::Result<int64_t> WriteParquetFile(ObjectStore* store, const std::string& path,
                                        const arrow::Table& table, const IngestOptions& options) {
  parquet::WriterProperties::Builder builder;
  // Every page carries a CRC-32 of its bytes, so that a reader that verifies (timelake's own
  // reads do: store/parquet_object.h) fails on a damaged page instead of decoding wrong values.
  builder.compression(parquet::Compression::SNAPPY)
      ->max_row_group_length(options.row_group_rows)
      ->enable_statistics()
      ->enable_page_checksum();
  // Measured values (floats) rarely repeat: trying a dictionary for them costs a hash per value
  // and is then abandoned. Keys, labels and integers keep dictionary encoding.
  for (const auto& field : table.schema()->fields()) {
    if (arrow::is_floating(field->type()->id())) builder.disable_dictionary(field->name());
  }
  auto props = builder.build();
  auto arrow_props = parquet::ArrowWriterProperties::Builder()
                         .coerce_timestamps(arrow::TimeUnit::MICRO)
                         ->set_use_threads(true)
                         ->build();
  ARROW_ASSIGN_OR_RAISE(auto sink, store->OpenOutput(path));
  auto written = [&]() -> arrow::Result<int64_t> {
    ARROW_ASSIGN_OR_RAISE(auto writer, parquet::arrow::FileWriter::Open(
                                           *table.schema(), arrow::default_memory_pool(), sink,
                                           props, arrow_props));
    ARROW_RETURN_NOT_OK(writer->WriteTable(table, options.row_group_rows));
    ARROW_RETURN_NOT_OK(writer->Close());
    return sink->Tell();
  }();
  // A failed write leaves nothing behind (no temporary file, no uploaded parts).
  if (!written.ok()) {
    (void)sink->Abort();
    return written.status();
  }
  ARROW_RETURN_NOT_OK(sink->Close());
  return written;
}

AddFile ToAddAction(const WrittenFile& f, bool data_change, int64_t modification_time_ms) {
  AddFile add;
  add.path = f.path;
  add.size = f.size;
  add.modification_time = modification_time_ms;
  add.data_change = data_change;
  add.stats = f.stats;
  add.tags[kOrderTag] = std::to_string(f.order);
  if (!f.chunk.empty()) {  // time-series tables (plain tables have no chunks)
    add.tags[kChunkTag] = f.chunk;
    add.tags[kMinTimeTag] = std::to_string(f.min_time);
    add.tags[kMaxTimeTag] = std::to_string(f.max_time);
    if (!f.min_key.empty() || !f.max_key.empty()) {
      // Cut like the string stats, so that long keys do not bloat every log entry; cut bounds
      // keep the read path's "key ranges apart" test sound.
      add.tags[kMinKeyTag] = StatString(f.min_key, /*is_max=*/false);
      add.tags[kMaxKeyTag] = StatString(f.max_key, /*is_max=*/true);
    }
  }
  return add;
}

Ingestor::Ingestor(std::shared_ptr<ObjectStore> store, std::string table_path, Contract contract,
                   std::shared_ptr<arrow::Schema> declared, std::shared_ptr<arrow::Schema> storage,
                   IngestOptions options)
    : store_(std::move(store)),
      table_path_(std::move(table_path)),
      contract_(std::move(contract)),
      declared_(std::move(declared)),
      storage_(std::move(storage)),
      options_(options) {}

arrow::Status Ingestor::Consume(arrow::RecordBatchReader* reader) {
  ARROW_ASSIGN_OR_RAISE(auto aligner, BatchAligner::Make(declared_, storage_, *reader->schema(),
                                                         contract_.time_column));
  for (;;) {
    ARROW_RETURN_NOT_OK(CheckInterrupt(options_.interrupt));
    std::shared_ptr<arrow::RecordBatch> batch;
    ARROW_RETURN_NOT_OK(reader->ReadNext(&batch));
    if (!batch) break;
    if (batch->num_rows() == 0) continue;
    ARROW_ASSIGN_OR_RAISE(auto aligned, aligner.Align(*batch));
    rows_in_ += aligned->num_rows();
    buffered_bytes_ += arrow::util::TotalBufferSize(*aligned);
    buffer_.push_back(std::move(aligned));
    if (buffered_bytes_ >= options_.buffer_bytes) ARROW_RETURN_NOT_OK(Flush());
  }
  return arrow::Status::OK();
}

arrow::Status Ingestor::Flush() {
  if (buffer_.empty()) return arrow::Status::OK();
  ARROW_ASSIGN_OR_RAISE(auto table, arrow::Table::FromRecordBatches(storage_, buffer_));
  buffer_.clear();
  buffered_bytes_ = 0;
  ARROW_ASSIGN_OR_RAISE(auto arranged, Arrange(table, contract_));
  struct Job {
    std::shared_ptr<arrow::Table> rows;
    std::string chunk;
    std::shared_ptr<arrow::Table> newest;
    arrow::Result<WrittenFile> file = arrow::Status::UnknownError("not written");
  };
  std::vector<Job> jobs;
  for (const auto& run : arranged.runs) {
    Job job;
    job.rows = arranged.table->Slice(run.offset, run.length);
    job.chunk = ChunkLabel(contract_.chunk, run.ordinal);
    if (!run.newest.empty()) {
      arrow::Int64Builder positions;
      ARROW_RETURN_NOT_OK(positions.AppendValues(run.newest));
      std::shared_ptr<arrow::Array> indices;
      ARROW_RETURN_NOT_OK(positions.Finish(&indices));
      ARROW_ASSIGN_OR_RAISE(auto taken, arrow::compute::Take(arranged.table, indices));
      ARROW_ASSIGN_OR_RAISE(job.newest, Decoded(taken.table()));
    }
    jobs.push_back(std::move(job));
  }
  // Files of different chunks are independent: encode them on all cores.
  const int first_order = static_cast<int>(written_.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t j = next++; j < jobs.size(); j = next++) {
      jobs[j].file = WriteFile(jobs[j].rows, jobs[j].chunk, jobs[j].newest,
                               first_order + static_cast<int>(j));
    }
  };
  const size_t workers =
      std::min<size_t>(jobs.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (size_t w = 1; w < workers; ++w) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  arrow::Status status;
  for (auto& job : jobs) {
    if (job.file.ok()) {
      written_.push_back(std::move(*job.file));  // Abort() deletes it if a sibling failed
    } else if (status.ok()) {
      status = job.file.status();
    }
  }
  return status;
}

arrow::Result<std::shared_ptr<arrow::Table>> Ingestor::Decoded(
    const std::shared_ptr<arrow::Table>& table) const {
  arrow::ChunkedArrayVector columns;
  for (int c = 0; c < table->num_columns(); ++c) {
    auto column = table->column(c);
    const auto& want = storage_->field(c)->type();
    if (!column->type()->Equals(*want)) {
      ARROW_ASSIGN_OR_RAISE(auto cast, arrow::compute::Cast(column, want));
      column = cast.chunked_array();
    }
    columns.push_back(std::move(column));
  }
  return arrow::Table::Make(storage_, columns, table->num_rows());
}

arrow::Result<WrittenFile> Ingestor::WriteFile(const std::shared_ptr<arrow::Table>& rows,
                                               const std::string& chunk,
                                               std::shared_ptr<arrow::Table> newest, int order) {
  WrittenFile file;
  file.chunk = chunk;
  file.rows = rows->num_rows();
  file.order = order;
  file.path = (chunk.empty() ? std::string("data/") : "data/" + chunk + "/") + "part-" + NewUuid() +
              ".parquet";
  if (contract_.is_time_series()) {
    ARROW_ASSIGN_OR_RAISE(auto mm, arrow::compute::MinMax(rows->GetColumnByName(contract_.time_column)));
    const auto& pair = static_cast<const arrow::StructScalar&>(*mm.scalar());
    file.min_time = static_cast<const arrow::TimestampScalar&>(*pair.value[0]).value;
    file.max_time = static_cast<const arrow::TimestampScalar&>(*pair.value[1]).value;
    if (!newest) {
      ARROW_ASSIGN_OR_RAISE(auto decoded, Decoded(rows));
      ARROW_ASSIGN_OR_RAISE(newest, NewestRows(decoded, contract_));
    }
    file.newest = newest;
    // The newest rows hold every series of the file once: the key range comes from them.
    if (contract_.series_key.size() == 1) {
      auto key = newest->GetColumnByName(contract_.series_key[0]);
      const auto id = key->type()->id();
      const bool is_string = id == arrow::Type::STRING;
      const bool is_int = arrow::is_integer(id);
      if ((is_string || is_int) && key->null_count() == 0 && key->length() > 0) {
        ARROW_ASSIGN_OR_RAISE(auto kmm, arrow::compute::MinMax(key));
        const auto& kp = static_cast<const arrow::StructScalar&>(*kmm.scalar());
        if (is_string) {
          file.min_key = std::string(static_cast<const arrow::StringScalar&>(*kp.value[0]).view());
          file.max_key = std::string(static_cast<const arrow::StringScalar&>(*kp.value[1]).view());
        } else {
          file.min_key = kp.value[0]->ToString();
          file.max_key = kp.value[1]->ToString();
        }
      }
    }
  }
  ARROW_ASSIGN_OR_RAISE(file.stats, FileStatsJson(*rows));
  ARROW_ASSIGN_OR_RAISE(file.size, WriteParquetFile(store_.get(), table_path_ + "/" + file.path,
                                                    *rows, options_));
  return file;
}

arrow::Result<std::vector<WrittenFile>> Ingestor::Finish() {
  ARROW_RETURN_NOT_OK(Flush());
  return written_;
}

void Ingestor::Abort() {
  buffer_.clear();
  std::vector<std::string> paths;
  for (const auto& f : written_) paths.push_back(table_path_ + "/" + f.path);
  (void)store_->DeleteMany(paths);
  written_.clear();
}

}  // namespace timelake
