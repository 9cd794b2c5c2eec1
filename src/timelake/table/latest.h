// Latest: the newest row of every series, as latest() answers it, and the index records that
// keep it cheap.
//
// The last-value index (index/last_value_index.h) stores, per commit that added files, a record
// of the newest rows of those files, folded every few commits into one base. A handle also keeps
// latest() in memory (LatestState): exact at one version, with what each later commit did, so
// that the next latest() advances it over the commits in between (O(series + new rows)) instead
// of reading the index again.
//
// Thread safety: LatestState is part of the handle's state; the functions taking a TableContext
// REQUIRE the handle's lock held. RecordRows, RecordWorthWriting, FoldInterval and RecordAndFold
// touch no handle state (the upkeep thread calls them with the index it shares with the handle).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <arrow/result.h>
#include <arrow/table.h>

#include "timelake/contract.h"
#include "timelake/index/last_value_index.h"
#include "timelake/ingest/ingestor.h"
#include "timelake/log/actions.h"
#include "timelake/log/snapshot.h"

namespace timelake {

struct TableContext;  // table/context.h

/// What a commit did to the newest row of each series, as the handle's latest() state sees it.
struct LatestDelta {
  enum Kind {
    kNone,    // rows unchanged: no data files, or a compaction (same rows in new files)
    kAppend,  // timelake data files added, nothing removed
  };
  Kind kind = kNone;
  std::vector<std::string> paths;  // kAppend: the files added
  /// kAppend: the rows of those files by their statistics, -1 if unknown. An append of at most
  /// LastValueIndex::kRecordMinFileRows rows has no record to look for.
  int64_t rows = -1;
  /// kAppend by this handle: each file's newest rows (no sequence column); empty for other
  /// writers' appends, whose index record is read instead.
  std::vector<std::shared_ptr<arrow::Table>> newest;
};

/// latest() kept in the handle: the newest row per series (with the sequence column) exact at
/// `version`, and what each later commit did. latest() advances it over the commits in between
/// (O(series + new rows)) when they are all known appends or compactions; a gap (commits the
/// handle applied without seeing them), a removal of rows, another engine's files or a reload
/// sends it back to LastValueIndex::Read.
struct LatestState {
  static constexpr size_t kMaxDeltas = 1024;  // beyond this a full read is as cheap
  std::shared_ptr<arrow::Table> rows;  // null: nothing known yet
  int64_t version = -1;
  std::map<int64_t, LatestDelta> deltas;  // by commit version, only after `version`
  /// Notes commit `version`; a delta that cannot be followed (or too many) drops the state.
  void Note(int64_t version, std::optional<LatestDelta> delta);
};

/// What `commit` did to the newest rows; nullopt when the latest state cannot follow it.
std::optional<LatestDelta> LatestDeltaOf(const Commit& commit);

/// The newest row of every series at `t.snapshot` (with the sequence column), from the handle's
/// latest state when it can be advanced, else from the index (see LatestState).
/// REQUIRES: the handle's lock held.
arrow::Result<std::shared_ptr<arrow::Table>> LatestRows(TableContext& t);

/// The index record of commit `seq`: the newest rows of `newest` (one table per file, null when
/// a file's are unknown) tagged with sequence number `seq`; null when any is unknown (then
/// latest() reads those files).
arrow::Result<std::shared_ptr<arrow::Table>> RecordRows(
    const std::vector<std::shared_ptr<arrow::Table>>& newest, int64_t seq, const Contract& contract);
/// Whether an append whose files hold `file_rows` rows gets an index record.
bool RecordWorthWriting(int64_t file_rows);
/// Commits between index folds for records of `record_rows` rows (RecordAndFold).
int64_t FoldInterval(int64_t record_rows);

/// Post-commit hook of commits that add files: writes the index record of commit `version` for
/// `files` (whose rows carry sequence number `seq`) and folds the index when due. A missing
/// record only makes latest() read those files. REQUIRES: the handle's lock held.
arrow::Status RecordNewest(TableContext& t, const std::vector<WrittenFile>& files, int64_t version,
                           int64_t seq);
/// Writes the index record of commit `version` (`record`, unless null) for the files `paths` it
/// added, then folds the index at `snapshot` (unless null; skipped when a base at least as new
/// exists).
arrow::Status RecordAndFold(LastValueIndex& index, int64_t version,
                            const std::vector<std::string>& paths,
                            const std::shared_ptr<arrow::Table>& record, const Snapshot* snapshot);

}  // namespace timelake
