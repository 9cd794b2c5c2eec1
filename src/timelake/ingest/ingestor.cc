#include "timelake/ingest/ingestor.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <system_error>
#include <tuple>

#include <arrow/array.h>
#include <arrow/builder.h>
#include <arrow/array/concatenate.h>
#include <arrow/compute/api.h>
#include <arrow/scalar.h>
#include <arrow/table.h>
#include <arrow/type_traits.h>
#include <arrow/util/byte_size.h>
#include <arrow/util/compression.h>
#include <parquet/arrow/writer.h>

#include "timelake/ingest/align.h"
#include "timelake/ingest/arrange.h"
#include "timelake/ingest/stats.h"
#include "timelake/log/file_tags.h"
#include "timelake/rows/newest_rows.h"
#include "timelake/rows/sorted_rows.h"
#include "timelake/util/ids.h"
#include "timelake/util/parallel.h"

namespace timelake {

namespace {

// Runs shorter than this are never cut in two to keep every core busy (Arranged::BalanceRuns).
constexpr int64_t kBalanceMinRows = 1 << 20;
// A flush of at least this much buffered data hands the allocator's free pages back after.
constexpr int64_t kReleaseAfterBytes = 64LL << 20;

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Adds the seconds from construction to destruction to `*sink` (when not null).
class PhaseTimer {
 public:
  explicit PhaseTimer(double* sink) : sink_(sink), start_(Clock::now()) {}
  ~PhaseTimer() {
    if (sink_ != nullptr) *sink_ += SecondsSince(start_);
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  double* sink_;
  Clock::time_point start_;
};

// Whether Snappy shrinks the values of the float column `column` enough to be worth its time:
// a probe compresses the first kProbeValues values (the leading rows of the file, sorted like
// its pages) and keeps compression only if it saves at least a tenth. Measurements of noisy
// sensors (full-precision doubles) do not compress at all, and Snappy's work on them was ~9 % of
// a bulk append's CPU (bench/README.md, "Incompressible floats"); rounded or repeating
// readings shrink to a third or less and stay compressed.
bool SnappyPays(const arrow::ChunkedArray& column) {
  constexpr int64_t kProbeValues = 16384;
  static const std::shared_ptr<arrow::util::Codec> codec = [] {
    auto made = arrow::util::Codec::Create(arrow::Compression::SNAPPY);
    return made.ok() ? std::shared_ptr<arrow::util::Codec>(std::move(*made)) : nullptr;
  }();
  if (codec == nullptr) return true;
  for (const auto& chunk : column.chunks()) {
    if (chunk->length() == 0) continue;
    const auto& data = *chunk->data();
    if (data.buffers.size() < 2 || data.buffers[1] == nullptr) return true;  // no values to probe
    const int width = static_cast<const arrow::FixedWidthType&>(*data.type).byte_width();
    const int64_t bytes = std::min(data.length, kProbeValues) * width;
    const uint8_t* values = data.buffers[1]->data() + data.offset * width;
    thread_local std::vector<uint8_t> out;
    out.resize(static_cast<size_t>(codec->MaxCompressedLen(bytes, values)));
    auto compressed = codec->Compress(bytes, values, static_cast<int64_t>(out.size()), out.data());
    return !compressed.ok() || *compressed * 10 <= bytes * 9;
  }
  return true;  // no values: nothing is spent either way
}

}  // namespace

namespace {

// Values handed to Parquet's column writers at a time. Each batch updates statistics, encodes
// levels and checks the page and dictionary sizes (1 MiB): the default of 1,024 values made that
// work ~15 % of encoding narrow columns. A batch is as many values as fill kBatchBytes in the
// widest column of `rows` (by its average value size), at least 1,024 and at most a page's rows
// (kRowsPerPage), so a page or dictionary overshoots its limit by at most kBatchBytes.
int64_t WriteBatchRows(const arrow::Table& rows) {
  constexpr int64_t kBatchBytes = 128 * 1024;
  constexpr int64_t kDefaultRows = parquet::DEFAULT_WRITE_BATCH_SIZE;
  int64_t widest = 1;  // bytes per value
  for (const auto& column : rows.columns()) {
    const auto& type = *column->type();
    const auto* values_type = &type;
    if (type.id() == arrow::Type::DICTIONARY) {
      values_type = static_cast<const arrow::DictionaryType&>(type).value_type().get();
    }
    int64_t bytes = 0;
    if (arrow::is_fixed_width(values_type->id())) {
      bytes = std::max(1, values_type->byte_width());
    } else if (arrow::is_base_binary_like(values_type->id())) {
      // The average value of the column (or of its dictionary), offsets included.
      int64_t data = 0, count = 0;
      for (const auto& chunk : column->chunks()) {
        const auto& array = chunk->type_id() == arrow::Type::DICTIONARY
                                ? *static_cast<const arrow::DictionaryArray&>(*chunk).dictionary()
                                : *chunk;
        data += arrow::util::TotalBufferSize(*array.data());
        count += array.length();
      }
      bytes = count > 0 ? std::max<int64_t>(1, data / count) : 1;
    } else {
      return kDefaultRows;  // nested values: Parquet's default
    }
    widest = std::max(widest, bytes);
  }
  return std::clamp<int64_t>(kBatchBytes / widest, kDefaultRows, kRowsPerPage);
}

// A Parquet file written into the store one table at a time (each Write adds row groups of at
// most options.row_group_rows), with timelake's writer settings. `rows` gives the schema, and the
// write batch (WriteBatchRows) for every table written.
class ParquetFileStream {
 public:
  static arrow::Result<std::unique_ptr<ParquetFileStream>> Open(ObjectStore* store, const std::string& path,
                                                                const arrow::Table& rows,
                                                                const IngestOptions& options,
                                                                const std::string& time_column,
                                                                bool use_threads) {
    const arrow::Schema& schema = *rows.schema();
    parquet::WriterProperties::Builder builder;
    // Every page carries a CRC-32 of its bytes, so that a reader that verifies (timelake's own
    // reads do: store/parquet_object.h) fails on a damaged page instead of decoding wrong values.
    builder.compression(parquet::Compression::SNAPPY)
        ->max_row_group_length(options.row_group_rows)
        ->max_rows_per_page(kRowsPerPage)
        ->write_batch_size(WriteBatchRows(rows))
        ->enable_statistics()
        ->enable_page_checksum();
    // Encodings for sorted time-series data (measured in bench/README.md, "Where a bulk append's
    // time goes"). Measured values (floats) rarely repeat: a dictionary costs a hash per value and
    // is then abandoned. Times are nearly unique too, but within a series they increase: delta
    // encoding stores them in a few bits each, and costs less than the dictionary attempt did.
    // Keys, labels and other integers keep dictionary encoding.
    // Floats whose values do not compress are stored uncompressed (SnappyPays).
    for (int c = 0; c < schema.num_fields(); ++c) {
      const auto& field = schema.field(c);
      const arrow::Type::type id = field->type()->id();
      if (arrow::is_floating(id)) builder.disable_dictionary(field->name());
      if ((id == arrow::Type::FLOAT || id == arrow::Type::DOUBLE) && !SnappyPays(*rows.column(c))) {
        builder.compression(field->name(), parquet::Compression::UNCOMPRESSED);
      }
      if (!time_column.empty() && field->name() == time_column &&
          field->type()->id() == arrow::Type::TIMESTAMP) {
        builder.disable_dictionary(field->name());
        builder.encoding(field->name(), parquet::Encoding::DELTA_BINARY_PACKED);
      }
    }
    auto props = builder.build();
    auto arrow_props = parquet::ArrowWriterProperties::Builder()
                           .coerce_timestamps(arrow::TimeUnit::MICRO)
                           ->set_use_threads(use_threads)
                           ->build();
    auto stream = std::unique_ptr<ParquetFileStream>(new ParquetFileStream());
    stream->row_group_rows_ = options.row_group_rows;
    // A data file's name is new and nothing reads it before a commit adds it.
    OutputOptions output;
    output.in_place = true;
    ARROW_ASSIGN_OR_RAISE(stream->sink_, store->OpenOutput(path, output));
    auto writer = parquet::arrow::FileWriter::Open(schema, arrow::default_memory_pool(), stream->sink_,
                                                   props, arrow_props);
    if (!writer.ok()) {
      stream->Abort();
      return writer.status();
    }
    stream->writer_ = std::move(*writer);
    return stream;
  }

  ~ParquetFileStream() { Abort(); }

  arrow::Status Write(const arrow::Table& rows) {
    arrow::Status st = writer_->WriteTable(rows, row_group_rows_);
    if (!st.ok()) Abort();
    return st;
  }

  /// Ends the Parquet file; returns its size and hands over its still open stream: the caller
  /// must Close (publish) or Abort it.
  arrow::Result<int64_t> Finish(std::shared_ptr<ObjectOutput>* sink) {
    arrow::Status st = writer_->Close();
    auto size = st.ok() ? sink_->Tell() : arrow::Result<int64_t>(st);
    if (!size.ok()) {
      Abort();
      return size.status();
    }
    *sink = std::move(sink_);
    return size;
  }

  /// A failed write leaves nothing behind (no temporary file, no uploaded parts).
  void Abort() {
    writer_.reset();  // first: a Parquet writer never closed writes its footer as it goes
    if (sink_) (void)sink_->Abort();
    sink_.reset();
  }

 private:
  ParquetFileStream() = default;
  int64_t row_group_rows_ = 0;
  std::shared_ptr<ObjectOutput> sink_;
  std::unique_ptr<parquet::arrow::FileWriter> writer_;
};

// The range of a series key that is one string or integer column, from the newest rows (which
// hold every series of a file once); left empty otherwise.
arrow::Status SetKeyRange(const arrow::Table& newest, const Contract& contract, WrittenFile* file) {
  if (contract.series_key.size() != 1) return arrow::Status::OK();
  auto key = newest.GetColumnByName(contract.series_key[0]);
  const auto id = key->type()->id();
  const bool is_string = id == arrow::Type::STRING;
  const bool is_int = arrow::is_integer(id);
  if (!(is_string || is_int) || key->null_count() != 0 || key->length() == 0) return arrow::Status::OK();
  ARROW_ASSIGN_OR_RAISE(auto kmm, arrow::compute::MinMax(key));
  const auto& kp = static_cast<const arrow::StructScalar&>(*kmm.scalar());
  if (is_string) {
    file->min_key = std::string(static_cast<const arrow::StringScalar&>(*kp.value[0]).view());
    file->max_key = std::string(static_cast<const arrow::StringScalar&>(*kp.value[1]).view());
  } else {
    file->min_key = kp.value[0]->ToString();
    file->max_key = kp.value[1]->ToString();
  }
  return arrow::Status::OK();
}

// `batch` in new buffers of the default pool holding exactly its rows (a slice copies only its
// own range).
arrow::Result<std::shared_ptr<arrow::RecordBatch>> OwnedCopy(const std::shared_ptr<arrow::RecordBatch>& batch) {
  arrow::ArrayVector columns;
  for (const auto& column : batch->columns()) {
    ARROW_ASSIGN_OR_RAISE(auto copy, arrow::Concatenate({column}, arrow::default_memory_pool()));
    columns.push_back(std::move(copy));
  }
  return arrow::RecordBatch::Make(batch->schema(), batch->num_rows(), std::move(columns));
}

// Min and max of a time column.
arrow::Result<std::pair<int64_t, int64_t>> TimeRange(const std::shared_ptr<arrow::ChunkedArray>& times) {
  ARROW_ASSIGN_OR_RAISE(auto mm, arrow::compute::MinMax(times));
  const auto& pair = static_cast<const arrow::StructScalar&>(*mm.scalar());
  return std::make_pair(static_cast<const arrow::TimestampScalar&>(*pair.value[0]).value,
                        static_cast<const arrow::TimestampScalar&>(*pair.value[1]).value);
}

}  // namespace

arrow::Result<int64_t> WriteParquetFile(ObjectStore* store, const std::string& path,
                                        const arrow::Table& table, const IngestOptions& options,
                                        const std::string& time_column, bool use_threads,
                                        double* encode_s, double* close_s,
                                        std::shared_ptr<ObjectOutput>* unclosed) {
  std::shared_ptr<ObjectOutput> sink;
  auto written = [&]() -> arrow::Result<int64_t> {
    PhaseTimer timer(encode_s);
    ARROW_ASSIGN_OR_RAISE(auto stream, ParquetFileStream::Open(store, path, table, options,
                                                               time_column, use_threads));
    ARROW_RETURN_NOT_OK(stream->Write(table));
    return stream->Finish(&sink);
  }();
  ARROW_RETURN_NOT_OK(written.status());
  if (unclosed != nullptr) {
    *unclosed = std::move(sink);
    return written;
  }
  PhaseTimer timer(close_s);
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
  PhaseTimer wall(&profile_.wall);
  ARROW_ASSIGN_OR_RAISE(auto aligner, BatchAligner::Make(declared_, storage_, *reader->schema(),
                                                         contract_.time_column));
  for (;;) {
    ARROW_RETURN_NOT_OK(CheckInterrupt(options_.interrupt));
    std::shared_ptr<arrow::RecordBatch> batch;
    ARROW_RETURN_NOT_OK(reader->ReadNext(&batch));
    if (!batch) break;
    if (batch->num_rows() == 0) continue;
    const auto align_start = Clock::now();
    ARROW_ASSIGN_OR_RAISE(auto aligned, aligner.Align(*batch));
    batch.reset();
    // The buffer owns its rows: what the input's arrays hold (often memory of the caller's, such
    // as numpy arrays a generator made for this batch alone) is released as soon as the batch
    // is consumed, instead of staying alive until the flush copies it (IngestOptions).
    if (options_.copy_input) {
      ARROW_ASSIGN_OR_RAISE(aligned, OwnedCopy(aligned));
    }
    profile_.align += SecondsSince(align_start);
    rows_in_ += aligned->num_rows();
    buffered_bytes_ += arrow::util::TotalBufferSize(*aligned);
    buffer_.push_back(std::move(aligned));
    arranged_buffer_.reset();
    if (buffered_bytes_ >= options_.buffer_bytes) ARROW_RETURN_NOT_OK(Flush());
  }
  return arrow::Status::OK();
}

arrow::Status Ingestor::Flush() {
  if (buffer_.empty()) return arrow::Status::OK();
  auto batches = std::move(buffer_);
  buffer_.clear();
  const int64_t bytes = buffered_bytes_;
  buffered_bytes_ = 0;
  if (arranged_buffer_) {
    // BufferedRowsAfterDedup arranged these very rows already (a small append of a group commit).
    Arranged arranged = *arranged_buffer_;
    arranged_buffer_.reset();
    return WriteArranged(std::move(arranged), Clock::now(), /*release_pages=*/false);
  }
  return Write(std::move(batches), storage_, bytes, /*sorted_batches=*/false);
}

arrow::Status Ingestor::WriteSortedBatches(std::vector<std::shared_ptr<arrow::RecordBatch>> batches) {
  PhaseTimer wall(&profile_.wall);
  ARROW_RETURN_NOT_OK(Flush());
  if (batches.empty()) return arrow::Status::OK();
  // The storage schema, with the key's type as the batches have it (plain or dictionary).
  std::shared_ptr<arrow::Schema> schema = storage_;
  const int key = contract_.series_key.size() == 1 ? storage_->GetFieldIndex(contract_.series_key[0]) : -1;
  if (key >= 0 && batches.front()->num_columns() == storage_->num_fields()) {
    const auto& type = batches.front()->column(key)->type();
    if (type->Equals(*arrow::dictionary(arrow::int32(), storage_->field(key)->type()))) {
      ARROW_ASSIGN_OR_RAISE(schema, storage_->SetField(key, storage_->field(key)->WithType(type)));
    }
  }
  int64_t bytes = 0;
  for (auto& batch : batches) {
    if (!batch->schema()->Equals(*schema, /*check_metadata=*/false)) {
      // Fields may differ in nullability or metadata (files written by other engines); the
      // columns must be the table's, in its order and of its types.
      bool fits = batch->num_columns() == schema->num_fields();
      for (int c = 0; fits && c < schema->num_fields(); ++c) {
        fits = batch->schema()->field(c)->name() == schema->field(c)->name() &&
               batch->column(c)->type()->Equals(*schema->field(c)->type());
      }
      if (!fits) {
        return arrow::Status::Invalid("rows to write do not match the table's columns: ",
                                      batch->schema()->ToString(), " against ", schema->ToString());
      }
      batch = arrow::RecordBatch::Make(schema, batch->num_rows(), batch->columns());
    }
    rows_in_ += batch->num_rows();
    bytes += arrow::util::TotalBufferSize(*batch);
  }
  return Write(std::move(batches), std::move(schema), bytes, /*sorted_batches=*/true);
}

arrow::Status Ingestor::Write(std::vector<std::shared_ptr<arrow::RecordBatch>> batches,
                              std::shared_ptr<arrow::Schema> schema, int64_t bytes, bool sorted_batches) {
  const auto arrange_start = Clock::now();
  ARROW_ASSIGN_OR_RAISE(auto table, arrow::Table::FromRecordBatches(std::move(schema), batches));
  std::vector<int64_t> parts;
  if (sorted_batches) {
    for (const auto& batch : batches) parts.push_back(batch->num_rows());
  }
  batches.clear();
  // Handing freed pages back to the system bounds resident memory after a large flush; after a
  // small one it only costs the madvise calls and the page faults of using them again.
  const bool release_pages = bytes >= kReleaseAfterBytes;
  // The sort wants each column as one array (but a dictionary-encoded key, whose chunks' ids it
  // maps as they are). Concatenating them column by column, and dropping each column's batch
  // chunks as soon as its copy exists, keeps the extra memory at one column instead of a second
  // copy of the whole buffer.
  for (int c = 0; c < table->num_columns(); ++c) {
    if (table->column(c)->num_chunks() <= 1) continue;
    if (table->field(c)->type()->id() == arrow::Type::DICTIONARY) continue;
    ARROW_ASSIGN_OR_RAISE(auto whole, ContiguousColumn(table->column(c)));
    ARROW_ASSIGN_OR_RAISE(table, table->SetColumn(c, table->field(c),
                                                  std::make_shared<arrow::ChunkedArray>(whole)));
    // The allocator keeps freed pages for reuse a while; the batch chunks just freed are many
    // small blocks the large copies cannot reuse: hand them back, or resident memory holds both.
    if (release_pages) arrow::default_memory_pool()->ReleaseUnused();
  }
  ARROW_ASSIGN_OR_RAISE(auto arranged, Arrange(table, contract_, parts));
  table.reset();  // the arrangement holds what it needs
  return WriteArranged(std::move(arranged), arrange_start, release_pages);
}

arrow::Status Ingestor::WriteArranged(Arranged arranged, Clock::time_point arrange_start, bool release_pages) {
  // Every core writes files to the end: chunks that do not divide evenly among the cores are
  // cut in two by series (large ones only: small files cost more than the idle core).
  arranged.BalanceRuns(CpuParallelism(), kBalanceMinRows);
  struct Job {
    const ChunkRun* run = nullptr;
    std::string chunk;
    arrow::Result<WrittenFile> file = arrow::Status::UnknownError("not written");
    std::shared_ptr<ObjectOutput> sink;  // encoded, not yet closed
    std::future<arrow::Status> closed;
    IngestProfile profile;
  };
  std::vector<Job> jobs;
  for (const auto& run : arranged.runs) {
    Job job;
    job.run = &run;
    job.chunk = ChunkLabel(contract_.chunk, run.ordinal);
    jobs.push_back(std::move(job));
  }
  profile_.arrange += SecondsSince(arrange_start);
  // Files of different chunks are independent: gather and encode them on all cores. With
  // several files each thread encodes its own; a single file lets Parquet encode its columns in
  // parallel instead (not both: that would run more threads than cores).
  const int first_order = static_cast<int>(written_.size());
  const bool parallel_columns = jobs.size() == 1;
  std::mutex closing_mutex;
  std::condition_variable slot_freed;
  std::deque<size_t> closing;  // jobs whose file is being closed, oldest first, not yet awaited
  size_t active_closes = 0;    // closes started and not yet awaited (in `closing` or being awaited)
  // Waits for job k's close; its failure becomes the job's.
  auto settle = [&jobs](size_t k) {
    Job& job = jobs[k];
    if (arrow::Status st = job.closed.get(); !st.ok()) job.file = st;
    job.sink.reset();
  };
  (void)RunParallel(jobs.size(), CpuParallelism(), [&](size_t j) {
    Job& job = jobs[j];
    auto write = [&]() -> arrow::Result<WrittenFile> {
      // A large run of a counting-sort arrangement (which knows each series' newest row) is
      // gathered a row group at a time.
      const bool newest_known = !contract_.is_time_series() || !job.run->newest.empty();
      if (arranged.perm && newest_known && job.run->length > 2 * options_.row_group_rows) {
        return WriteRunInPieces(arranged, *job.run, job.chunk, first_order + static_cast<int>(j),
                                parallel_columns, &job.profile, &job.sink);
      }
      const auto gather_start = Clock::now();
      ARROW_ASSIGN_OR_RAISE(auto rows, arranged.Rows(*job.run));
      std::shared_ptr<arrow::Table> newest;
      if (!job.run->newest.empty()) {
        arrow::Int64Builder positions;
        ARROW_RETURN_NOT_OK(positions.AppendValues(job.run->newest));
        std::shared_ptr<arrow::Array> indices;
        ARROW_RETURN_NOT_OK(positions.Finish(&indices));
        ARROW_ASSIGN_OR_RAISE(auto taken, arrow::compute::Take(rows, indices));
        ARROW_ASSIGN_OR_RAISE(newest, Decoded(taken.table()));
      }
      job.profile.gather += SecondsSince(gather_start);
      return WriteFile(rows, job.chunk, newest, first_order + static_cast<int>(j),
                       parallel_columns, &job.profile, &job.sink);
    };
    if (arrow::Status thrown = NoThrow("writing a data file", [&] {
          job.file = write();
          return arrow::Status::OK();
        });
        !thrown.ok()) {
      job.file = thrown;
      if (job.sink) (void)job.sink->Abort();
      job.sink.reset();
    }
    // Closing makes the file durable (an fsync, an upload's completion): mostly waiting on the
    // device or the network. With more files to encode it runs on its own thread so that this
    // one encodes the next file meanwhile; a lone file is closed here. At most kMaxFilesClosing
    // closes are under way at once: an append spanning 60,000 chunks once started a thread per
    // file, and the stacks of threads not yet joined exhausted the process's memory mappings.
    if (job.file.ok() && jobs.size() == 1) {
      PhaseTimer timer(&job.profile.close);
      arrow::Status st = NoThrow("closing a data file", [&] { return job.sink->Close(); });
      if (!st.ok()) job.file = st;
      job.sink.reset();
    } else if (job.file.ok()) {
      {
        // A slot for this close: waits for the oldest close under way while all are taken.
        std::unique_lock<std::mutex> lock(closing_mutex);
        while (active_closes >= kMaxFilesClosing) {
          if (closing.empty()) {  // the other threads are waiting for theirs
            slot_freed.wait(lock);
            continue;
          }
          const size_t oldest = closing.front();
          closing.pop_front();
          lock.unlock();
          settle(oldest);
          lock.lock();
          --active_closes;
          slot_freed.notify_all();
        }
        ++active_closes;
      }
      auto close = [sink = job.sink, seconds = &job.profile.close] {
        PhaseTimer timer(seconds);
        return NoThrow("closing a data file", [&] { return sink->Close(); });
      };
      job.closed = AsyncOrDeferred(std::move(close));
      std::lock_guard<std::mutex> lock(closing_mutex);
      closing.push_back(j);
    }
    return arrow::Status::OK();
  });
  for (auto& job : jobs) {
    if (job.closed.valid()) settle(static_cast<size_t>(&job - jobs.data()));
  }
  if (release_pages) arrow::default_memory_pool()->ReleaseUnused();  // the arrangement's pages
  arrow::Status status;
  for (auto& job : jobs) {
    profile_.gather += job.profile.gather;
    profile_.summarise += job.profile.summarise;
    profile_.encode += job.profile.encode;
    profile_.close += job.profile.close;
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
                                               std::shared_ptr<arrow::Table> newest, int order,
                                               bool parallel_columns, IngestProfile* profile,
                                               std::shared_ptr<ObjectOutput>* unclosed) const {
  const auto summarise_start = Clock::now();
  WrittenFile file;
  file.chunk = chunk;
  file.rows = rows->num_rows();
  file.order = order;
  file.path = (chunk.empty() ? std::string("data/") : "data/" + chunk + "/") + "part-" + NewUuid() +
              ".parquet";
  if (contract_.is_time_series()) {
    ARROW_ASSIGN_OR_RAISE(std::tie(file.min_time, file.max_time),
                          TimeRange(rows->GetColumnByName(contract_.time_column)));
    if (!newest) {
      ARROW_ASSIGN_OR_RAISE(auto decoded, Decoded(rows));
      ARROW_ASSIGN_OR_RAISE(newest, NewestRows(decoded, contract_));
    }
    file.newest = newest;
    ARROW_RETURN_NOT_OK(SetKeyRange(*newest, contract_, &file));
  }
  ARROW_ASSIGN_OR_RAISE(file.stats, FileStatsJson(*rows));
  profile->summarise += SecondsSince(summarise_start);
  ARROW_ASSIGN_OR_RAISE(file.size,
                        WriteParquetFile(store_.get(), table_path_ + "/" + file.path, *rows,
                                         options_, contract_.time_column, parallel_columns,
                                         &profile->encode, &profile->close, unclosed));
  return file;
}

arrow::Result<WrittenFile> Ingestor::WriteRunInPieces(const Arranged& arranged, const ChunkRun& run,
                                                      const std::string& chunk, int order,
                                                      bool parallel_columns, IngestProfile* profile,
                                                      std::shared_ptr<ObjectOutput>* unclosed) const {
  WrittenFile file;
  file.chunk = chunk;
  file.rows = run.length;
  file.order = order;
  file.path = (chunk.empty() ? std::string("data/") : "data/" + chunk + "/") + "part-" + NewUuid() +
              ".parquet";
  // Opened with the first piece: its rows, sorted like the file, set the writer's batch size and
  // which float columns are worth compressing (SnappyPays).
  std::unique_ptr<ParquetFileStream> stream;
  const bool time_series = contract_.is_time_series();
  file.min_time = INT64_MAX;
  file.max_time = INT64_MIN;
  std::vector<std::string> stats;
  std::vector<std::shared_ptr<arrow::Table>> newest_parts;
  size_t next_newest = 0;  // run.newest is ascending: the positions within the current piece follow
  const int64_t piece_rows = options_.row_group_rows;
  for (int64_t offset = 0; offset < run.length; offset += piece_rows) {
    const auto gather_start = Clock::now();
    ChunkRun piece;
    piece.ordinal = run.ordinal;
    piece.offset = run.offset + offset;
    piece.length = std::min(piece_rows, run.length - offset);
    ARROW_ASSIGN_OR_RAISE(auto rows, arranged.Rows(piece));
    profile->gather += SecondsSince(gather_start);
    {
      PhaseTimer timer(&profile->summarise);
      if (time_series) {
        ARROW_ASSIGN_OR_RAISE(auto range, TimeRange(rows->GetColumnByName(contract_.time_column)));
        file.min_time = std::min(file.min_time, range.first);
        file.max_time = std::max(file.max_time, range.second);
        {
          arrow::Int64Builder positions;
          for (; next_newest < run.newest.size() && run.newest[next_newest] < offset + piece.length; ++next_newest) {
            ARROW_RETURN_NOT_OK(positions.Append(run.newest[next_newest] - offset));
          }
          std::shared_ptr<arrow::Array> indices;
          ARROW_RETURN_NOT_OK(positions.Finish(&indices));
          ARROW_ASSIGN_OR_RAISE(auto taken, arrow::compute::Take(rows, indices));
          newest_parts.push_back(taken.table());
        }
      }
      ARROW_ASSIGN_OR_RAISE(auto part_stats, FileStatsJson(*rows));
      stats.push_back(std::move(part_stats));
    }
    PhaseTimer timer(&profile->encode);
    if (!stream) {
      ARROW_ASSIGN_OR_RAISE(stream, ParquetFileStream::Open(store_.get(), table_path_ + "/" + file.path, *rows,
                                                            options_, contract_.time_column, parallel_columns));
    }
    ARROW_RETURN_NOT_OK(stream->Write(*rows));
  }
  {
    PhaseTimer timer(&profile->summarise);
    ARROW_ASSIGN_OR_RAISE(file.stats, MergeFileStats(*arranged.source->schema(), stats));
    if (time_series) {
      ARROW_ASSIGN_OR_RAISE(auto all, arrow::ConcatenateTables(newest_parts));
      ARROW_ASSIGN_OR_RAISE(all, all->CombineChunks());
      ARROW_ASSIGN_OR_RAISE(file.newest, Decoded(all));
      ARROW_RETURN_NOT_OK(SetKeyRange(*file.newest, contract_, &file));
    }
  }
  PhaseTimer timer(&profile->encode);
  if (!stream) return arrow::Status::Invalid("a run of no rows cannot be written in pieces");
  ARROW_ASSIGN_OR_RAISE(file.size, stream->Finish(unclosed));
  return file;
}

arrow::Result<std::vector<WrittenFile>> Ingestor::Finish() {
  PhaseTimer wall(&profile_.wall);
  ARROW_RETURN_NOT_OK(Flush());
  return written_;
}

arrow::Result<bool> Ingestor::FinishOrKeep(int64_t max_rows) {
  if (written_.empty() && !buffer_.empty() && rows_in_ <= max_rows) return true;
  ARROW_RETURN_NOT_OK(Finish().status());
  return false;
}

namespace {

// Whether the times of `batches` rise strictly from row to row, across the batches in order. Then
// no two rows share a time, let alone a series and a time: in-batch deduplication drops nothing.
bool TimesRiseStrictly(const std::vector<std::shared_ptr<arrow::RecordBatch>>& batches,
                       const std::string& time_column) {
  bool any = false;
  int64_t last = 0;
  for (const auto& batch : batches) {
    auto column = batch->GetColumnByName(time_column);
    if (column == nullptr || column->type_id() != arrow::Type::TIMESTAMP || column->null_count() != 0) {
      return false;
    }
    const int64_t* times = static_cast<const arrow::TimestampArray&>(*column).raw_values();
    for (int64_t i = 0; i < column->length(); ++i) {
      if (any && times[i] <= last) return false;
      last = times[i];
      any = true;
    }
  }
  return true;
}

}  // namespace

arrow::Result<int64_t> Ingestor::BufferedRowsAfterDedup() const {
  int64_t rows = 0;
  for (const auto& batch : buffer_) rows += batch->num_rows();
  if (contract_.dedup == DedupPolicy::kNone || buffer_.empty()) return rows;
  // Readings in time order (one sensor's, or a gateway's with a time per row) need no
  // arrangement to be counted; the flush arranges them, with the rows of the other appends of
  // its group commit.
  if (TimesRiseStrictly(buffer_, contract_.time_column)) return rows;
  ARROW_ASSIGN_OR_RAISE(auto table, arrow::Table::FromRecordBatches(storage_, buffer_));
  ARROW_ASSIGN_OR_RAISE(table, table->CombineChunks());
  ARROW_ASSIGN_OR_RAISE(auto arranged, Arrange(table, contract_));
  rows = 0;
  for (const auto& run : arranged.runs) rows += run.length;
  // Kept for the flush that writes these rows: they are arranged once.
  arranged_buffer_ = std::make_shared<const Arranged>(std::move(arranged));
  return rows;
}

std::unique_ptr<Ingestor> Ingestor::Sibling() const {
  IngestOptions options = options_;
  options.interrupt = nullptr;
  return std::make_unique<Ingestor>(store_, table_path_, contract_, declared_, storage_, options);
}

arrow::Status Ingestor::Add(const Ingestor& other) {
  PhaseTimer wall(&profile_.wall);
  const bool fresh = buffer_.empty() && written_.empty();
  for (const auto& batch : other.buffer_) {
    rows_in_ += batch->num_rows();
    buffered_bytes_ += arrow::util::TotalBufferSize(*batch);
    buffer_.push_back(batch);
    arranged_buffer_.reset();
    if (buffered_bytes_ >= options_.buffer_bytes) ARROW_RETURN_NOT_OK(Flush());
  }
  // Holding exactly the other's rows (a group of one append), this one writes them as the other
  // arranged them.
  if (fresh && written_.empty() && buffer_.size() == other.buffer_.size()) {
    arranged_buffer_ = other.arranged_buffer_;
  }
  return arrow::Status::OK();
}

void Ingestor::Abort() {
  buffer_.clear();
  arranged_buffer_.reset();
  std::vector<std::string> paths;
  for (const auto& f : written_) paths.push_back(table_path_ + "/" + f.path);
  (void)store_->DeleteMany(paths);
  written_.clear();
}

}  // namespace timelake
