#include "timelake/table/context.h"

#include <algorithm>
#include <set>

#include "timelake/log/features.h"
#include "timelake/log/file_tags.h"
#include "timelake/log/schema.h"
#include "timelake/util/ids.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

constexpr const char* kArrowSchemaKey = "timelake.arrowSchema";
// Like checkpoints for the log: every kIndexFoldInterval commits the index records are folded.
constexpr int64_t kIndexFoldInterval = 32;
constexpr int64_t kIndexFoldRows = 32 * 1024;

std::string EngineInfo() { return std::string("timelake/") + TIMELAKE_VERSION; }

arrow::Status CheckReadable(const Protocol& p, const Metadata& m, const std::string& name) {
  const std::set<std::string>& readable = ReadableFeatures();
  auto it = m.configuration.find("delta.columnMapping.mode");
  if (it != m.configuration.end() && it->second != "none" && it->second != "name" && it->second != "id") {
    return arrow::Status::NotImplemented("table '", name, "' uses Delta column mapping mode '",
                                         it->second, "', which timelake cannot read");
  }
  if (it != m.configuration.end() && it->second != "none") {
    // Read by physical name (Spark writes them in both modes); nested names are not mapped.
    auto physical = PhysicalNames(m.schema_string);
    if (!physical.ok()) {
      return arrow::Status::NotImplemented("table '", name, "': ", physical.status().message());
    }
  }
  if (p.min_reader_version > 3) {
    return arrow::Status::NotImplemented("table '", name, "' needs Delta reader version ",
                                         p.min_reader_version, "; timelake reads up to 3");
  }
  if (p.reader_features) {
    for (const auto& f : *p.reader_features) {
      if (!readable.count(f)) {
        return arrow::Status::NotImplemented("table '", name, "' uses the Delta reader feature '", f,
                                             "', which timelake does not support");
      }
    }
  }
  return arrow::Status::OK();
}

}  // namespace

arrow::Status LoadDerived(TableContext& t) {
  const Metadata& m = t.snapshot.metadata;
  ARROW_RETURN_NOT_OK(CheckReadable(t.snapshot.protocol, m, t.name));
  auto it = m.configuration.find(kArrowSchemaKey);
  if (it != m.configuration.end()) {
    ARROW_ASSIGN_OR_RAISE(t.declared, DecodeArrowSchema(it->second));
  } else {
    auto schema = SchemaFromDelta(m.schema_string);
    if (!schema.ok()) {
      return arrow::Status::NotImplemented("table '", t.name, "': ", schema.status().message());
    }
    t.declared = *schema;
  }
  ARROW_ASSIGN_OR_RAISE(t.storage, StorageSchemaOf(*t.declared));
  ARROW_ASSIGN_OR_RAISE(t.contract, ContractFromConfiguration(m.configuration));
  if (t.contract.is_time_series() && m.configuration.count("delta.columnMapping.mode") &&
      m.configuration.at("delta.columnMapping.mode") != "none") {
    // timelake's own readers of a time-series table (dedup, latest(), compaction) read columns by
    // name: they follow column mapping only while every column keeps its name.
    ARROW_ASSIGN_OR_RAISE(auto physical, PhysicalNames(m.schema_string));
    bool same = static_cast<int>(physical.size()) == t.declared->num_fields();
    for (const auto& f : t.declared->fields()) {
      auto it = physical.find(f->name());
      same = same && it != physical.end() && it->second == f->name();
    }
    if (!same) {
      return arrow::Status::NotImplemented(
          "table '", t.name, "': another engine renamed or dropped columns under Delta column "
          "mapping; timelake reads a time-series table with column mapping only while every "
          "column keeps its name");
    }
  }
  t.metadata_id = m.id;
  t.derived_schema_string = m.schema_string;
  t.derived_arrow_schema = ArrowSchemaText(m);
  t.checkpointed = std::make_shared<std::atomic<int64_t>>(-1);  // tasks of an older table keep theirs
  t.latest = LatestState{};
  t.index = std::make_shared<LastValueIndex>(t.store, t.table_path, m.id, t.contract, t.storage);
  return arrow::Status::OK();
}

void LatestState::Note(int64_t v, std::optional<LatestDelta> delta) {
  if (!rows || v <= version) return;
  if (!delta || deltas.size() >= kMaxDeltas) {
    *this = LatestState{};
    return;
  }
  deltas[v] = std::move(*delta);
}

namespace {

// What commit `commit` did to the newest rows; nullopt when the latest state cannot follow it.
std::optional<LatestDelta> DeltaOf(const Commit& commit) {
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

}  // namespace

arrow::Status Update(TableContext& t) {
  bool reloaded = false;
  ARROW_RETURN_NOT_OK(t.log.UpdateVisiting(
      &t.snapshot,
      [&t](int64_t version, const Commit& commit, const Snapshot&) {
        t.latest.Note(version, DeltaOf(commit));
        return arrow::Status::OK();
      },
      &reloaded));
  if (reloaded) t.latest = LatestState{};
  if (t.snapshot.metadata.id != t.metadata_id || !t.declared ||
      t.snapshot.metadata.schema_string != t.derived_schema_string ||
      ArrowSchemaText(t.snapshot.metadata) != t.derived_arrow_schema) {
    return LoadDerived(t);
  }
  return arrow::Status::OK();
}

const std::string& ArrowSchemaText(const Metadata& m) {
  static const std::string none;
  auto arrow_schema = m.configuration.find(kArrowSchemaKey);
  return arrow_schema == m.configuration.end() ? none : arrow_schema->second;
}

arrow::Status CheckWritable(const TableContext& t) {
  const Protocol& p = t.snapshot.protocol;
  const std::set<std::string>& writable = WritableFeatures();
  if (p.min_writer_version > 7 || (p.min_writer_version >= 3 && p.min_writer_version <= 6)) {
    return arrow::Status::NotImplemented(
        "table '", t.name, "' needs Delta writer version ", p.min_writer_version,
        " (constraints, generated columns, column mapping or identity columns), which timelake "
        "cannot honour; write to it with the engine that created it");
  }
  if (p.writer_features) {
    for (const auto& f : *p.writer_features) {
      if (!writable.count(f)) {
        return arrow::Status::NotImplemented("table '", t.name, "' uses the Delta writer feature '",
                                             f, "', which timelake does not implement; it can read "
                                             "this table but not write to it");
      }
    }
  }
  if (!t.snapshot.metadata.partition_columns.empty()) {
    return arrow::Status::NotImplemented("table '", t.name,
                                         "' is partitioned by another engine; timelake can read it "
                                         "but not append to it");
  }
  return arrow::Status::OK();
}

bool HasBatch(const TableContext& t, const std::string& batch_id) {
  auto it = t.snapshot.txns.find(BatchAppId(batch_id));
  if (it == t.snapshot.txns.end()) return false;
  const std::string retention = t.snapshot.Config("delta.setTransactionRetentionDuration");
  if (retention.empty() || !it->second.last_updated) return true;
  // Batch ids older than the dedup window are forgotten, as Delta readers forget the txn.
  const int64_t window_ms = DeltaIntervalMillis(retention, INT64_MAX / 2);
  return *it->second.last_updated >= NowMillis() - window_ms;
}

bool AutoMaintain(const TableContext& t) {
  return t.snapshot.Config("timelake.autoMaintain") == "true";
}

bool BackgroundCompactionOn(const TableContext& t) {
  return t.snapshot.Config("timelake.backgroundCompaction") != "false";
}

arrow::Status DroppedOr(TableContext& t, arrow::Status st) {
  // Bad input and Ctrl-C say what they are; a storage failure may be the table vanishing.
  if (st.ok() || st.IsInvalid() || st.IsCancelled() || IsTableNotFound(st)) return st;
  arrow::Status head = t.log.CheckHead(t.snapshot.version, t.snapshot.head_fingerprint);
  return IsTableNotFound(head) ? head : st;
}

CommitInfo NewCommitInfo(const std::string& operation) {
  CommitInfo info;
  info.timestamp = NowMillis();
  info.operation = operation;
  info.engine_info = EngineInfo();
  info.txn_id = NewUuid();
  return info;
}

RemoveFile RemoveOf(const AddFile& add, bool data_change, int64_t now_ms, const char* reason) {
  RemoveFile remove;
  remove.tags[kRemovedByTag] = reason;
  if (auto min_time = add.tags.find(kMinTimeTag); min_time != add.tags.end()) {
    remove.tags[kMinTimeTag] = min_time->second;
  }
  remove.path = add.path;
  remove.deletion_timestamp = now_ms;
  remove.data_change = data_change;
  remove.extended_file_metadata = true;
  remove.partition_values = add.partition_values;
  remove.size = add.size;
  return remove;
}

arrow::Status CommitPending(TableContext& t, PendingCommit* pending, CommitOutcome* out) {
  return t.committer.Commit(&t.snapshot, pending, out);
}

namespace {

// A checkpoint entry (a live file, a tombstone, an application's transaction) per this many
// makes one more commit of replay as costly as writing the checkpoint again (CheckpointStride).
constexpr int64_t kCheckpointEntriesPerCommit = 50;

// Commits between checkpoints: `delta.checkpointInterval` (10), doubled while the checkpoint
// would hold more than kCheckpointEntriesPerCommit entries per commit of the stride. Writing a
// checkpoint costs O(entries); with a fixed interval a table of many files spent most of its
// append's CPU on them (bench/README.md). So the work per commit stays bounded, and a reader
// replays at most about twice the commits a checkpoint's read costs. A function of the
// snapshot, so that writers of version v agree whether v gets one (one that counts fewer expired
// tombstones may not: a checkpoint more or less, which no reader minds).
int64_t CheckpointStride(const Snapshot& snapshot) {
  const int64_t interval =
      ParseInt64(snapshot.Config("delta.checkpointInterval", "10")).value_or(10);
  if (interval <= 0) return interval;
  const int64_t entries = static_cast<int64_t>(snapshot.files.size() + snapshot.tombstones.size() +
                                               snapshot.txns.size());
  int64_t stride = interval;
  while (stride * kCheckpointEntriesPerCommit < entries && stride < (int64_t{1} << 40)) stride *= 2;
  return stride;
}

bool CheckpointDue(const Snapshot& snapshot) {
  const int64_t stride = CheckpointStride(snapshot);
  return stride > 0 && snapshot.version > 0 && snapshot.version % stride == 0;
}

// Writes the checkpoint of `snapshot`. A drop between the commit and here would make the
// checkpoint revive the dropped folder as a broken table: it is taken back if the commit is no
// longer there. Only a definite answer takes it back: a read that failed (a timeout, a 500)
// leaves the checkpoint, which is right as long as the commit stands, as it almost always does.
arrow::Status WriteCheckpoint(DeltaLog& log, const Snapshot& snapshot) {
  ARROW_RETURN_NOT_OK(log.Checkpoint(snapshot));
  if (arrow::Status head = log.CheckHead(snapshot.version, snapshot.head_fingerprint); !head.ok()) {
    if (IsTableNotFound(head)) (void)log.store().DeleteCheckpoint(snapshot.version);
    return head;
  }
  return arrow::Status::OK();
}

}  // namespace

arrow::Status WriteCheckpointUnlessSuperseded(DeltaLog& log, const Snapshot& snapshot) {
  if (auto newest = log.store().LastCheckpointHint(); newest && *newest >= snapshot.version) {
    return arrow::Status::OK();
  }
  return WriteCheckpoint(log, snapshot);
}

namespace {

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

}  // namespace

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

arrow::Status MaybeCheckpoint(TableContext& t) {
  if (!CheckpointDue(t.snapshot)) return arrow::Status::OK();
  ARROW_RETURN_NOT_OK(WriteCheckpoint(t.log, t.snapshot));
  t.snapshot.checkpoint_version = t.snapshot.version;
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

void QueueAfterAppend(TableContext& t, const std::vector<WrittenFile>& files, int64_t version) {
  if (t.contract.is_time_series()) {
    LatestDelta delta;
    if (!files.empty()) delta.kind = LatestDelta::kAppend;
    for (const auto& f : files) {
      delta.paths.push_back(f.path);
      delta.newest.push_back(f.newest);
    }
    t.latest.Note(version, std::move(delta));
  }
  const bool checkpoint = CheckpointDue(t.snapshot);
  int64_t record_rows = 0;  // at most: the record merges these
  int64_t file_rows = 0;
  for (const auto& f : files) {
    record_rows += f.newest ? f.newest->num_rows() : 0;
    file_rows += f.rows;
  }
  const bool indexed = t.contract.is_time_series() && !files.empty();
  const bool record = indexed && RecordWorthWriting(file_rows);
  const bool fold = indexed && version % FoldInterval(record_rows) == 0;
  // The snapshot of the commit, for the tasks that need all of it (copied only then).
  std::shared_ptr<const Snapshot> snapshot;
  if (checkpoint || fold) snapshot = std::make_shared<Snapshot>(t.snapshot);
  if (checkpoint) {
    t.upkeep->Post("checkpoint", [store = t.store, path = t.table_path, snapshot,
                                  checkpointed = t.checkpointed] {
      DeltaLog log(store, path);  // the handle's own log belongs to the handle's thread
      ARROW_RETURN_NOT_OK(WriteCheckpointUnlessSuperseded(log, *snapshot));
      int64_t seen = checkpointed->load();
      while (seen < snapshot->version && !checkpointed->compare_exchange_weak(seen, snapshot->version)) {
      }
      return arrow::Status::OK();
    });
  }
  if (record || fold) {
    std::vector<std::shared_ptr<arrow::Table>> newest;
    std::vector<std::string> paths;
    for (const auto& f : files) {
      if (record) newest.push_back(f.newest);
      paths.push_back(f.path);
    }
    t.upkeep->Post("last-value index", [index = t.index, contract = t.contract, version,
                                        newest = std::move(newest), paths = std::move(paths),
                                        snapshot = fold ? snapshot : nullptr] {
      std::shared_ptr<arrow::Table> rows;
      if (!newest.empty()) {
        ARROW_ASSIGN_OR_RAISE(rows, RecordRows(newest, version, contract));
      }
      return RecordAndFold(*index, version, paths, rows, snapshot.get());
    });
  }
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

arrow::Status FinishUpkeep(TableContext& t) {
  t.upkeep->Drain();
  const int64_t checkpointed = t.checkpointed->load();
  if (checkpointed <= t.snapshot.version && checkpointed > t.snapshot.checkpoint_version) {
    t.snapshot.checkpoint_version = checkpointed;
  }
  // The handle's own compactions are part of what it did: show them.
  if (BackgroundCompactionVersion(t) > t.snapshot.version) return Update(t);
  return arrow::Status::OK();
}

PostCommitHooks HooksAfter(TableContext& t, const std::vector<WrittenFile>* files,
                           int64_t version, int64_t seq) {
  PostCommitHooks hooks;
  hooks.Add("checkpoint", [&t] { return MaybeCheckpoint(t); });
  if (files != nullptr) {
    hooks.Add("last-value index", [&t, files, version, seq] {
      return RecordNewest(t, *files, version, seq);
    });
  }
  return hooks;
}

std::string BatchAppId(const std::string& batch_id) { return "timelake:" + batch_id; }

}  // namespace timelake
