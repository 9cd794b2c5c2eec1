// LastValueIndex: the newest row of every series, kept beside the table so latest() costs
// O(series), not O(rows).
//
// Layout, under the table's `_timelake/lvi/` folder (ignored by Delta readers):
//   <version>.parquet       written after each append commits: the newest row of every series
//                           that commit touched
//   base-<version>.parquet  written by maintain: the fold of everything up to <version>
// Every record is a table in the storage schema plus an int64 `__timelake_seq` column (the
// commit version the row was written at). A commit with no record (another engine's, or one whose
// writer crashed between commit and record) is folded in by reading its data files, so the index
// is always exact.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <arrow/result.h>
#include <arrow/table.h>

#include "timelake/contract.h"
#include "timelake/log/snapshot.h"
#include "timelake/store/object_store.h"

namespace timelake {

/// Name of the sequence column in index records.
constexpr const char* kSeqColumn = "__timelake_seq";

/// The newest row per series of `rows`, which must be sorted by (series key, time).
arrow::Result<std::shared_ptr<arrow::Table>> NewestRows(const std::shared_ptr<arrow::Table>& rows,
                                                        const Contract& contract);

/// `rows` with the sequence column appended, holding `seq` in every row.
arrow::Result<std::shared_ptr<arrow::Table>> WithSequence(const std::shared_ptr<arrow::Table>& rows,
                                                          int64_t seq);

/// Merges index records (each with the sequence column) into one row per series: the newest
/// time wins; equal times are resolved by the dedup policy (first: lowest seq, else highest).
arrow::Result<std::shared_ptr<arrow::Table>> MergeNewest(
    const std::vector<std::shared_ptr<arrow::Table>>& records, const Contract& contract);

struct IndexState {
  std::shared_ptr<arrow::Table> rows;  // one row per series, with the sequence column
  int64_t covered_version = -1;        // highest version any record covers
  int64_t bytes = 0;                   // size of the index objects read
  int64_t base_version = -1;
  std::vector<std::string> records;    // paths of the delta records read
};

class LastValueIndex {
 public:
  LastValueIndex(std::shared_ptr<ObjectStore> store, std::string table_path, Contract contract,
                 std::shared_ptr<arrow::Schema> storage);

  /// Records the newest rows of commit `version`.
  arrow::Status Record(int64_t version, const std::shared_ptr<arrow::Table>& newest);

  /// The index as of `snapshot` (records newer than the snapshot are ignored; rows of chunks
  /// the snapshot no longer has are dropped).
  arrow::Result<IndexState> Read(const Snapshot& snapshot);

  /// Writes `state` as the base at `version` and deletes the records it replaces. Returns the
  /// number of objects deleted.
  arrow::Result<int64_t> Fold(const IndexState& state, int64_t version);

 private:
  std::string Dir() const { return table_path_ + "/_timelake/lvi/"; }

  std::shared_ptr<ObjectStore> store_;
  std::string table_path_;
  Contract contract_;
  std::shared_ptr<arrow::Schema> storage_;
};

/// Reads a whole Parquet object of `store` into a table.
arrow::Result<std::shared_ptr<arrow::Table>> ReadParquetObject(ObjectStore* store,
                                                               const std::string& path);

}  // namespace timelake
