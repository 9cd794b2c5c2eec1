// LastValueIndex: the newest row of every series, kept beside the table so latest() costs
// O(series), not O(rows).
//
// The index is derived data: latest() must equal the newest row per series of the table's live
// files (by the dedup policy) whatever happened to the index objects. Each index object therefore
// says which data files it summarises, and reading checks that against the snapshot.
//
// Layout, under `_timelake/lvi/<table id>/` (the table's Delta metaData.id, so nothing of a
// dropped table can leak into a new one at the same path; Delta readers ignore `_timelake/`):
//   <version>.parquet       written after commit <version> is acknowledged (compactions, and
//                           appends whose files are large: table/context.cc, RecordWorthWriting):
//                           the newest row of every series in the files that commit added. A
//                           small append's files are as cheap to read as its record would be.
//   base-<version>.parquet  the newest row of every series over every timelake file live at
//                           <version>, written by a fold
// Every object is a table in the storage schema plus an int64 `__timelake_seq` column (the
// sequence number of the row's file), and carries the paths of the files it summarises in its
// Parquet key-value metadata (`timelake.files`, a JSON array).
//
// Reading at a snapshot (the recovery rules, also in docs/format.md):
//  * Only files with timelake's tags are summarised. Files of other engines are read on every call.
//  * A live timelake file that no readable object summarises (its record was never written, was
//    deleted by a racing fold, or is corrupt) is read from its Parquet data.
//  * An object that summarises a file the snapshot no longer has is still valid when the removal
//    kept the rows (a compaction, or any `remove` with dataChange=false) or dropped a whole chunk
//    for retention that has no live file now; rows of chunks without live files are dropped. Any
//    other removal (another engine's DELETE/UPDATE/MERGE, an expired tombstone) makes the objects
//    unusable, and the index is rebuilt from the data files.
//  * A base deleted by a racing fold between listing and reading makes the read start over.
// Index objects never change once written (each has a fresh name), so an instance keeps the ones
// it read in memory (checked against the listing's size and time, dropped once no longer listed):
// latest() on a warm handle lists the index folder and reads only objects it has not seen. Objects
// it has not seen are read in parallel, one GET each.
// Thread safety: concurrent calls are fine.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <arrow/result.h>
#include <arrow/table.h>

#include "timelake/contract.h"
#include "timelake/log/snapshot.h"
#include "timelake/rows/newest_rows.h"
#include "timelake/store/object_store.h"

namespace timelake {

struct IndexState {
  /// One row per series over every live file (with the sequence column): what latest() returns.
  std::shared_ptr<arrow::Table> rows;
  /// The same over timelake's files only, and those files' paths: what a fold stores.
  std::shared_ptr<arrow::Table> tagged_rows;
  std::vector<std::string> tagged_files;
  int64_t version = -1;       // the snapshot version the state is exact for
  int64_t bytes = 0;          // size of the index objects read
  int64_t base_version = -1;  // the base used (-1: none)
  int64_t records = 0;        // commit records used
  int64_t files_read = 0;     // timelake data files read because no object summarised them
  bool rebuilt = false;       // the objects were unusable and everything was read from data
};

class LastValueIndex {
 public:
  /// Appends whose files hold at most this many rows get no record: their files are read instead.
  static constexpr int64_t kRecordMinFileRows = 4096;

  /// `table_id` is the table's metaData.id.
  LastValueIndex(std::shared_ptr<ObjectStore> store, std::string table_path,
                 const std::string& table_id, Contract contract,
                 std::shared_ptr<arrow::Schema> storage);
  ~LastValueIndex();

  /// Records `newest` (with the sequence column) as the summary of `files`, the data files commit
  /// `version` added. Call only after the commit is acknowledged.
  arrow::Status Record(int64_t version, const std::vector<std::string>& files,
                       const std::shared_ptr<arrow::Table>& newest);

  /// The rows of commit `version`'s record when it exists and summarises exactly `files`; null
  /// when it is missing, unreadable or about other files (a record is only a shortcut).
  arrow::Result<std::shared_ptr<arrow::Table>> RecordOf(int64_t version,
                                                        const std::vector<std::string>& files);

  /// The newest rows (with the sequence column, `seq`) of the data files `paths` (relative to the
  /// table folder, in write order) that one commit added: what its record would hold, for a
  /// commit that has none. Null for no paths.
  arrow::Result<std::shared_ptr<arrow::Table>> NewestOfFiles(const std::vector<std::string>& paths,
                                                             int64_t seq);

  /// The index exact for `snapshot` (see the rules above).
  arrow::Result<IndexState> Read(const Snapshot& snapshot);

  /// The version of the newest base in the index folder (-1: none). A fold at or below it is
  /// wasted work: that base already summarises more (a writer's upkeep can lag behind others').
  arrow::Result<int64_t> NewestBase();

  /// Writes `state` as the base at its version and deletes the objects it replaces (older
  /// records and bases, and anything left by an earlier table at this path). Returns the number
  /// of objects deleted.
  arrow::Result<int64_t> Fold(const IndexState& state);

  /// The folder of the index objects (relative to the store root).
  const std::string& dir() const { return dir_; }

 private:
  /// One attempt; NotFound when a base vanished between listing and reading. Without
  /// `use_objects` everything is read from the data files.
  arrow::Result<IndexState> TryRead(const Snapshot& snapshot, bool use_objects);

  /// The newest rows of one data file (its deletion vector applied), with the sequence column;
  /// a file of at most kMergeWholeRows rows gives all its rows (callers MergeNewest the pieces,
  /// which keeps the newest row per series of them all).
  arrow::Result<std::shared_ptr<arrow::Table>> NewestOfFile(const AddFile& add, int64_t seq);
  static constexpr int64_t kMergeWholeRows = 1024;
  /// NewestOfFile of each of `adds` (with `seqs`), read in parallel, in order.
  arrow::Result<std::vector<std::shared_ptr<arrow::Table>>> NewestOf(
      const std::vector<const AddFile*>& adds, const std::vector<int64_t>& seqs);

  struct Object;
  /// The objects of `metas`, in order: from memory when seen before, else read (in parallel).
  /// An entry is null when its object could not be read; the status of the first failure goes
  /// to `errors` at the same position.
  std::vector<std::shared_ptr<const Object>> ReadObjects(const std::vector<ObjectMeta>& metas,
                                                         const arrow::Schema& expected,
                                                         std::vector<arrow::Status>* errors);
  /// Forgets objects that are no longer listed.
  void KeepOnly(const std::vector<ObjectMeta>& listing);

  std::shared_ptr<ObjectStore> store_;
  std::string table_path_;
  std::string root_;  // `_timelake/lvi/` of the table
  std::string dir_;   // root_ + the table id folder
  Contract contract_;
  std::shared_ptr<arrow::Schema> storage_;
  struct Cached;
  std::mutex cache_mutex_;
  std::unique_ptr<std::unordered_map<std::string, Cached>> cache_;
};


}  // namespace timelake
