// Latest: latest() of a handle and the last-value index records (see table/latest.h).
#include "timelake/table/latest.h"

#include <algorithm>

#include "timelake/log/file_tags.h"
#include "timelake/rows/newest_rows.h"
#include "timelake/table/context.h"

namespace timelake {
namespace {

// Like checkpoints for the log: every kIndexFoldInterval commits the index records are folded.
constexpr int64_t kIndexFoldInterval = 8;
constexpr int64_t kIndexFoldRows = 32 * 1024;

}  // namespace

void LatestState::Note(int64_t v, std::optional<LatestDelta> delta) {
  if (!rows || v <= version) return;
  if (!delta || deltas.size() >= kMaxDeltas) {
    *this = LatestState{};
    return;
  }
  deltas[v] = std::move(*delta);
}

// What commit `commit` did to the newest rows; nullopt when the latest state cannot follow it.
std::optional<LatestDelta> LatestDeltaOf(const Commit& commit) {
  if (commit.metadata || commit.protocol) return std::nullopt;
  LatestDelta delta;
  if (commit.removes.empty()) {
    if (commit.adds.empty()) return delta;  // txn or commitInfo only
    delta.kind = LatestDelta::kAppend;
    std::vector<std::pair<int64_t, std::string>> ordered;  // in write order
    delta.rows = 0;
    for (const auto& add : commit.adds) {
      // Only timelake's files have index records; another engine's append is read in full.
      if (!add.tags.count(kSeqTag) || !add.tags.count(kMinTimeTag)) return std::nullopt;
      ordered.emplace_back(TagInt(add, kOrderTag, 0), add.path);
      const int64_t rows = NumRecords(add);
      delta.rows = rows < 0 || delta.rows < 0 ? -1 : delta.rows + rows;
    }
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [order, path] : ordered) delta.paths.push_back(std::move(path));
    return delta;
  }
  // A timelake compaction keeps every row, minus duplicates that read-time deduplication and the
  // index resolve the same way (so also when its adds are marked dataChange for them).
  for (const auto& remove : commit.removes) {
    auto by = remove.tags.find(kRemovedByTag);
    if (by == remove.tags.end() || by->second != kRemovedByCompaction) return std::nullopt;
  }
  for (const auto& add : commit.adds) {
    if (!add.tags.count(kSeqTag)) return std::nullopt;
  }
  return delta;
}

// The index record of commit `version`: the newest rows of `newest` (one table per file, null
// when a file's are unknown) tagged with sequence number `seq`; null when any is unknown (then
// latest() reads those files).
arrow::Result<std::shared_ptr<arrow::Table>> RecordRows(
    const std::vector<std::shared_ptr<arrow::Table>>& newest, int64_t seq, const Contract& contract) {
  std::vector<std::shared_ptr<arrow::Table>> tagged;
  for (const auto& rows : newest) {
    if (!rows) return nullptr;
    ARROW_ASSIGN_OR_RAISE(auto with_seq, WithSequence(rows, seq));
    tagged.push_back(std::move(with_seq));
  }
  // `newest` is in write order; among equal sequence numbers MergeNewest keeps the row it meets
  // last, which must be the earliest write for `first` (as read-time deduplication keeps it).
  if (contract.dedup == DedupPolicy::kFirst) std::reverse(tagged.begin(), tagged.end());
  return MergeNewest(tagged, contract);
}

// Whether an append whose `files` hold `file_rows` rows gets an index record. A record saves
// reading the files (a new handle's latest(), a fold) and costs a write per commit (and on a
// local disk a file made and, at the next fold, deleted). A small append's files are read as
// fast as its record would be: it gets none.
bool RecordWorthWriting(int64_t file_rows) {
  return file_rows > LastValueIndex::kRecordMinFileRows;
}

// Commits between index folds for records of `record_rows` rows (RecordAndFold).
int64_t FoldInterval(int64_t record_rows) {
  return std::clamp<int64_t>(kIndexFoldRows / std::max<int64_t>(1, record_rows), 2, kIndexFoldInterval);
}

// Writes the index record (unless null), then folds the index at `snapshot` (unless null).
// Like checkpoints for the log: every few commits the records are folded into one base, so
// latest() never reads more than that many records or unrecorded commits' files.
arrow::Status RecordAndFold(LastValueIndex& index, int64_t version,
                            const std::vector<std::string>& paths,
                            const std::shared_ptr<arrow::Table>& record,
                            const Snapshot* snapshot) {
  if (record) ARROW_RETURN_NOT_OK(index.Record(version, paths, record));
  if (snapshot != nullptr) {
    // Writer processes fold at versions they commit, each on its own upkeep thread: one that
    // lags finds a newer base and has nothing to add (folding an older snapshot would read every
    // file the newer base already summarises).
    ARROW_ASSIGN_OR_RAISE(int64_t newest_base, index.NewestBase());
    if (newest_base >= snapshot->version) return arrow::Status::OK();
    ARROW_ASSIGN_OR_RAISE(auto state, index.Read(*snapshot));
    ARROW_RETURN_NOT_OK(index.Fold(state).status());
  }
  return arrow::Status::OK();
}

arrow::Status RecordNewest(TableContext& t, const std::vector<WrittenFile>& files,
                           int64_t version, int64_t seq) {
  if (!t.contract.is_time_series() || files.empty()) return arrow::Status::OK();
  std::vector<std::shared_ptr<arrow::Table>> newest;
  std::vector<std::string> paths;
  for (const auto& f : files) {
    newest.push_back(f.newest);
    paths.push_back(f.path);
  }
  ARROW_ASSIGN_OR_RAISE(auto record, RecordRows(newest, seq, t.contract));
  const bool fold = t.snapshot.version == version &&
                    version % FoldInterval(record ? record->num_rows() : 0) == 0;
  return RecordAndFold(*t.index, version, paths, record, fold ? &t.snapshot : nullptr);
}

arrow::Result<std::shared_ptr<arrow::Table>> LatestRows(TableContext& t) {
  LatestState& state = t.latest;
  if (state.rows && state.version < t.snapshot.version) {
    // Advance over the commits in between when every one of them is known and followable.
    std::vector<std::shared_ptr<arrow::Table>> pieces{state.rows};
    bool followed = true;
    for (int64_t v = state.version + 1; followed && v <= t.snapshot.version; ++v) {
      auto it = state.deltas.find(v);
      if (it == state.deltas.end()) {
        followed = false;  // applied without being seen (a rebase): unknown
        break;
      }
      const LatestDelta& delta = it->second;
      if (delta.kind != LatestDelta::kAppend) continue;
      if (!delta.newest.empty()) {
        ARROW_ASSIGN_OR_RAISE(auto record, RecordRows(delta.newest, v, t.contract));
        if (record) {
          pieces.push_back(std::move(record));
          continue;
        }
      }
      // A small append has no record: not even a request to find that out.
      const bool recorded = delta.rows < 0 || delta.rows > LastValueIndex::kRecordMinFileRows;
      std::shared_ptr<arrow::Table> record;
      if (recorded) {
        ARROW_ASSIGN_OR_RAISE(record, t.index->RecordOf(v, delta.paths));
      }
      if (!record) {
        // No record (a small append has none; a large one's may not be written yet, or lost):
        // the commit's own files. One that cannot be read (compacted and vacuumed meanwhile)
        // sends latest() to a full read.
        auto newest = t.index->NewestOfFiles(delta.paths, v);
        if (!newest.ok() || !*newest) {
          followed = false;
          break;
        }
        record = std::move(*newest);
      }
      pieces.push_back(std::move(record));
    }
    if (followed) {
      if (pieces.size() > 1) {
        ARROW_ASSIGN_OR_RAISE(state.rows, MergeNewest(pieces, t.contract));
      }
      state.version = t.snapshot.version;
      state.deltas.clear();
    } else {
      state = LatestState{};
    }
  }
  if (!state.rows || state.version != t.snapshot.version) {
    ARROW_ASSIGN_OR_RAISE(auto read, t.index->Read(t.snapshot));
    state = LatestState{};
    state.rows = read.rows;
    state.version = read.version;
  }
  return state.rows;
}

}  // namespace timelake
