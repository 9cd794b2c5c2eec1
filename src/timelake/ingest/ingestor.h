// Ingestor: streams a user's record batches into Parquet data files of one table.
//
// Batches are aligned to the storage schema as they arrive and buffered up to a byte budget;
// each time the budget fills (and at the end) the buffer is arranged (chunked, sorted,
// deduplicated) and written as one file per chunk (two, cut by series, where that keeps every
// core writing: Arranged::BalanceRuns). Memory stays bounded by the budget whatever
// the input's size. Files are written before any commit; if the append fails or turns out to be
// a duplicate, Abort() deletes them (a crash leaves them unreferenced, for vacuum).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <arrow/record_batch.h>
#include <arrow/table.h>
#include <arrow/result.h>

#include "timelake/contract.h"
#include "timelake/log/actions.h"
#include "timelake/store/object_store.h"
#include "timelake/util/interrupt.h"

namespace timelake {

struct Arranged;  // ingest/arrange.h
struct ChunkRun;

/// Files of one flush being closed (made durable: an fsync, an upload's completion) at once, each
/// on a thread of its own while the next file is encoded.
constexpr size_t kMaxFilesClosing = 16;

/// Rows per data page (Parquet's default is 20,000). One series over a time range is a run of a
/// few hundred rows in a file sorted by (series key, time); the core's selection reader
/// (scan/selection_reader.h) reads and decodes only the pages that hold it, so a page's size is
/// what a one-series read costs per column (bytes, CRC, decoding): 4,096 rows made a week of one
/// series 1.5-2x faster to read than 20,000, for +0.4 % in file size, ~4 % on full scans and
/// ~10 % on a bulk append (bench/README.md, "Page size").
constexpr int64_t kRowsPerPage = 4096;

struct IngestOptions {
  int64_t buffer_bytes = 256LL << 20;  // flush when this much aligned data is buffered
  int64_t row_group_rows = 256 * 1024;
  // Copy each input batch into the buffer, so that the input's memory (arrays a generator made
  // for one batch) is released as soon as the batch is read. Off when the caller holds the whole
  // input anyway (an in-memory table): the copy would only add to it.
  bool copy_input = true;
  InterruptCheck interrupt;  // checked before each input batch; its error stops Consume()
};

/// Where an ingestor's time went, in seconds. Phases that run on several threads (everything per
/// file) add up thread time, so their sum may exceed the wall time. Read by the benchmarks
/// (TIMELAKE_PROFILE=1 prints it after each append, see bench/README.md).
struct IngestProfile {
  double align = 0;    // matching input batches to the storage schema
  double arrange = 0;  // chunking, sorting, in-batch dedup (one thread)
  double gather = 0;   // gathering each file's rows in sorted order
  double summarise = 0;  // min/max times, newest rows per series, Delta statistics
  double encode = 0;   // Parquet encoding, compression and writing into the store's stream
  double close = 0;    // closing the file: the store's durability step (fsync, rename, upload)
  double wall = 0;     // Consume() and Finish() from start to end
};

/// A data file written by the ingestor, not yet committed.
struct WrittenFile {
  std::string path;   // relative to the table folder
  std::string chunk;  // chunk label ("" for plain tables)
  int64_t size = 0;
  int64_t rows = 0;
  int64_t min_time = 0;  // microseconds; meaningful for time-series tables
  int64_t max_time = 0;
  // Range of the series key when it is one string or integer column (empty otherwise); integers
  // are written in decimal. Lets a reader see that two files cannot hold the same series.
  std::string min_key;
  std::string max_key;
  int order = 0;  // write order within the append (breaks ties between files of one commit)
  std::string stats;
  std::shared_ptr<arrow::Table> newest;  // newest row per series (time-series tables)
};

class Ingestor {
 public:
  Ingestor(std::shared_ptr<ObjectStore> store, std::string table_path, Contract contract,
           std::shared_ptr<arrow::Schema> declared, std::shared_ptr<arrow::Schema> storage,
           IngestOptions options = {});

  /// Reads `reader` to its end. Status::Invalid for input that does not fit the table; the
  /// interrupt check's status if it asks to stop (then Abort() deletes what was written).
  arrow::Status Consume(arrow::RecordBatchReader* reader);
  /// Writes what is still buffered and returns every file written.
  arrow::Result<std::vector<WrittenFile>> Finish();
  /// Deletes every file written so far (best effort).
  void Abort();
  /// Writes what is buffered now: rows consumed before and after a flush are arranged (sorted,
  /// deduplicated) apart, into different files.
  arrow::Status Flush();

  /// Writes `batches` at once, as Flush() writes a buffer (after writing what is buffered): the
  /// rows of a compaction, read from the table's data files. The batches are not aligned: they
  /// must have the storage schema, except that a single string or binary series key may be
  /// dictionary-encoded, and hold valid rows (no null times). Each batch is expected to be
  /// sorted already (a data file's rows are): sorted batches are merged instead of sorted again
  /// (Arrange's `parts`).
  arrow::Status WriteSortedBatches(std::vector<std::shared_ptr<arrow::RecordBatch>> batches);

  /// Ends the input like Finish(), except that input of at most `max_rows` rows that no flush has
  /// written yet stays buffered and nothing is written (returns true): a group commit writes the
  /// rows of several such appends as one file per chunk (Sibling, Add). False when the files are
  /// written.
  arrow::Result<bool> FinishOrKeep(int64_t max_rows);
  /// The aligned batches buffered and not written yet, in arrival order.
  const std::vector<std::shared_ptr<arrow::RecordBatch>>& buffered() const { return buffer_; }
  /// The rows the buffer holds after in-batch deduplication (what writing it would write). Rows
  /// whose times rise strictly are counted without arranging them; others are arranged, and the
  /// arrangement is kept for the flush.
  arrow::Result<int64_t> BufferedRowsAfterDedup() const;
  /// A new ingestor writing into the same table with the same settings (no interrupt check).
  std::unique_ptr<Ingestor> Sibling() const;
  /// Appends another ingestor's `buffered()` batches to this one's buffer, flushing as Consume
  /// does when the budget fills. When this one held nothing, it takes over the arrangement the
  /// other's BufferedRowsAfterDedup made, if any: a group of one append is arranged once.
  arrow::Status Add(const Ingestor& other);

  int64_t rows_in() const { return rows_in_; }
  const std::shared_ptr<arrow::Schema>& storage() const { return storage_; }
  size_t files_written() const { return written_.size(); }
  const IngestProfile& profile() const { return profile_; }

 private:
  /// Encodes one file of `rows`; `newest` are the rows newest per series (null: compute them).
  /// The file's stream is left to the caller in `unclosed` (see WriteParquetFile). Thread-safe:
  /// touches no member state.
  arrow::Result<WrittenFile> WriteFile(const std::shared_ptr<arrow::Table>& rows,
                                       const std::string& chunk,
                                       std::shared_ptr<arrow::Table> newest, int order,
                                       bool parallel_columns, IngestProfile* profile,
                                       std::shared_ptr<ObjectOutput>* unclosed) const;
  /// Writes one chunk's run of a large arrangement as WriteFile does, gathering and encoding it
  /// a row group at a time (the run's rows never exist gathered all at once); the file's stats,
  /// time range and newest rows (from the run's `newest` positions) are folded piece by piece.
  /// Thread-safe as WriteFile.
  arrow::Result<WrittenFile> WriteRunInPieces(const Arranged& arranged, const ChunkRun& run,
                                              const std::string& chunk, int order,
                                              bool parallel_columns, IngestProfile* profile,
                                              std::shared_ptr<ObjectOutput>* unclosed) const;
  /// Arranges `batches` (of `schema`: the storage schema, or a dictionary-encoded key) and writes
  /// them as files; `sorted_batches` says that each batch is likely sorted already.
  arrow::Status Write(std::vector<std::shared_ptr<arrow::RecordBatch>> batches,
                      std::shared_ptr<arrow::Schema> schema, int64_t bytes, bool sorted_batches);
  /// Writes the files of an arrangement (one per chunk run, on all cores).
  arrow::Status WriteArranged(Arranged arranged, std::chrono::steady_clock::time_point arrange_start,
                              bool release_pages);
  /// `table` with dictionary-encoded columns decoded back to the storage schema's types.
  arrow::Result<std::shared_ptr<arrow::Table>> Decoded(const std::shared_ptr<arrow::Table>& table) const;

  std::shared_ptr<ObjectStore> store_;
  std::string table_path_;
  Contract contract_;
  std::shared_ptr<arrow::Schema> declared_;
  std::shared_ptr<arrow::Schema> storage_;
  IngestOptions options_;
  std::vector<std::shared_ptr<arrow::RecordBatch>> buffer_;
  // The arrangement of exactly `buffer_` that BufferedRowsAfterDedup made (null when none or when
  // the buffer changed since): the flush writes it instead of arranging the rows again.
  mutable std::shared_ptr<const Arranged> arranged_buffer_;
  int64_t buffered_bytes_ = 0;
  int64_t rows_in_ = 0;
  std::vector<WrittenFile> written_;
  IngestProfile profile_;
};

/// The `add` action for a written file, with timelake's tags (the sequence tag is the caller's:
/// it is the commit version, known only when committing).
AddFile ToAddAction(const WrittenFile& file, bool data_change, int64_t modification_time_ms);

/// Writes `table` as a Parquet file at `path` in `store` with timelake's writer settings; returns
/// its size. On failure nothing is left at `path` (the output stream is aborted). `time_column`
/// names the column encoded as sorted times (empty for none); `use_threads` encodes columns in
/// parallel. Adds to `encode_s` and `close_s` when given. With `unclosed`, the encoded file's
/// stream is handed over there instead of being closed: the caller must Close (publish) or Abort
/// it.
arrow::Result<int64_t> WriteParquetFile(ObjectStore* store, const std::string& path,
                                        const arrow::Table& table, const IngestOptions& options,
                                        const std::string& time_column = "",
                                        bool use_threads = true, double* encode_s = nullptr,
                                        double* close_s = nullptr,
                                        std::shared_ptr<ObjectOutput>* unclosed = nullptr);

}  // namespace timelake
