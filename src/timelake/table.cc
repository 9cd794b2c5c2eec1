#include "timelake/table.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>

#include <arrow/type.h>
#include <arrow/type_traits.h>
#include <rapidjson/document.h>

#include "timelake/log/file_tags.h"
#include "timelake/log/schema.h"
#include "timelake/util/ids.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

constexpr const char* kArrowSchemaKey = "timelake.arrowSchema";
constexpr int64_t kIndexFoldInterval = 32;

std::string EngineInfo() { return std::string("timelake/") + TIMELAKE_VERSION; }

int64_t NumRecords(const AddFile& add) {
  if (!add.stats) return -1;
  rapidjson::Document doc;
  doc.Parse(add.stats->c_str());
  if (doc.HasParseError() || !doc.IsObject()) return -1;
  auto it = doc.FindMember("numRecords");
  if (it == doc.MemberEnd() || !it->value.IsInt64()) return -1;
  return it->value.GetInt64();
}

arrow::Status CheckReadable(const Protocol& p, const Metadata& m, const std::string& name) {
  static const std::set<std::string> readable = {"timestampNtz", "vacuumProtocolCheck",
                                                 "appendOnly", "invariants"};
  auto it = m.configuration.find("delta.columnMapping.mode");
  if (it != m.configuration.end() && it->second != "none") {
    return arrow::Status::NotImplemented("table '", name, "' uses Delta column mapping (mode ",
                                         it->second, "), which timelake cannot read yet");
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

Table::Table(std::shared_ptr<ObjectStore> store, std::string table_path, std::string name)
    : store_(store),
      table_path_(table_path),
      name_(std::move(name)),
      log_(store, table_path),
      committer_(&log_, name_),
      mutex_("table handle '" + name_ + "'",
             "use a second handle for the table, from lake.table('" + name_ + "')") {}

arrow::Result<std::shared_ptr<Table>> Table::Open(std::shared_ptr<ObjectStore> store,
                                                  std::string table_path, std::string name) {
  std::shared_ptr<Table> table(new Table(std::move(store), std::move(table_path), std::move(name)));
  auto snapshot = table->log_.Load();
  if (!snapshot.ok()) {
    if (snapshot.status().IsKeyError()) {
      return TableNotFound(table->name_);
    }
    return snapshot.status();
  }
  table->snapshot_ = std::move(*snapshot);
  ARROW_RETURN_NOT_OK(table->LoadDerived());
  return table;
}

std::string Table::BatchAppId(const std::string& batch_id) { return "timelake:" + batch_id; }

std::string Table::location() const { return store_->RootUrl() + "/" + table_path_; }

int64_t Table::version() {
  // From inside this thread's own operation (its input stream), that operation is suspended.
  if (mutex_.HeldByThisThread()) return snapshot_.version;
  auto lock = mutex_.Acquire("version");
  return snapshot_.version;
}

arrow::Status Table::LoadDerived() {
  const Metadata& m = snapshot_.metadata;
  ARROW_RETURN_NOT_OK(CheckReadable(snapshot_.protocol, m, name_));
  auto it = m.configuration.find(kArrowSchemaKey);
  if (it != m.configuration.end()) {
    ARROW_ASSIGN_OR_RAISE(declared_, DecodeArrowSchema(it->second));
  } else {
    auto schema = SchemaFromDelta(m.schema_string);
    if (!schema.ok()) {
      return arrow::Status::NotImplemented("table '", name_, "': ", schema.status().message());
    }
    declared_ = *schema;
  }
  ARROW_ASSIGN_OR_RAISE(storage_, StorageSchemaOf(*declared_));
  ARROW_ASSIGN_OR_RAISE(contract_, ContractFromConfiguration(m.configuration));
  metadata_id_ = m.id;
  index_ = std::make_unique<LastValueIndex>(store_, table_path_, m.id, contract_, storage_);
  return arrow::Status::OK();
}

arrow::Status Table::CheckWritable() const {
  const Protocol& p = snapshot_.protocol;
  static const std::set<std::string> writable = {"appendOnly", "invariants", "timestampNtz"};
  if (p.min_writer_version > 7 || (p.min_writer_version >= 3 && p.min_writer_version <= 6)) {
    return arrow::Status::NotImplemented(
        "table '", name_, "' needs Delta writer version ", p.min_writer_version,
        " (constraints, generated columns, column mapping or identity columns), which timelake "
        "cannot honour; write to it with the engine that created it");
  }
  if (p.writer_features) {
    for (const auto& f : *p.writer_features) {
      if (!writable.count(f)) {
        return arrow::Status::NotImplemented("table '", name_, "' uses the Delta writer feature '",
                                             f, "', which timelake does not implement; it can read "
                                             "this table but not write to it");
      }
    }
  }
  if (!snapshot_.metadata.partition_columns.empty()) {
    return arrow::Status::NotImplemented("table '", name_,
                                         "' is partitioned by another engine; timelake can read it "
                                         "but not append to it");
  }
  return arrow::Status::OK();
}

bool Table::HasBatch(const std::string& batch_id) const {
  auto it = snapshot_.txns.find(BatchAppId(batch_id));
  if (it == snapshot_.txns.end()) return false;
  const std::string retention = snapshot_.Config("delta.setTransactionRetentionDuration");
  if (retention.empty() || !it->second.last_updated) return true;
  // Batch ids older than the dedup window are forgotten, as Delta readers forget the txn.
  const int64_t window_ms = DeltaIntervalMillis(retention, INT64_MAX / 2);
  return *it->second.last_updated >= NowMillis() - window_ms;
}

arrow::Status Table::MaybeCheckpoint() {
  const int64_t interval = ParseInt64(snapshot_.Config("delta.checkpointInterval", "10")).value_or(10);
  if (interval <= 0 || snapshot_.version == 0 || snapshot_.version % interval != 0) {
    return arrow::Status::OK();
  }
  ARROW_RETURN_NOT_OK(log_.Checkpoint(snapshot_));
  // A drop between the commit and here would make the checkpoint revive the dropped folder as a
  // broken table: take it back if the commit is no longer there.
  if (arrow::Status head = log_.CheckHead(snapshot_.version, snapshot_.head_fingerprint);
      !head.ok()) {
    (void)log_.store().DeleteCheckpoint(snapshot_.version);
    return head;
  }
  snapshot_.checkpoint_version = snapshot_.version;
  return arrow::Status::OK();
}

arrow::Status Table::Refresh() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("refresh"));
  ARROW_RETURN_NOT_OK(log_.Update(&snapshot_));
  if (snapshot_.metadata.id != metadata_id_ || !declared_) return LoadDerived();
  return arrow::Status::OK();
}

arrow::Result<AppendResult> Table::Append(arrow::RecordBatchReader* reader,
                                          const AppendOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("append", options.interrupt));
  ARROW_RETURN_NOT_OK(log_.Update(&snapshot_));
  if (snapshot_.metadata.id != metadata_id_) ARROW_RETURN_NOT_OK(LoadDerived());
  ARROW_RETURN_NOT_OK(CheckWritable());

  AppendResult result;
  if (options.batch_id) {
    if (options.batch_id->empty()) return arrow::Status::Invalid("batch_id must not be empty");
    if (HasBatch(*options.batch_id)) {
      result.version = snapshot_.version;
      result.duplicate = true;
      return result;
    }
  }

  IngestOptions ingest_options = ingest_options_;
  ingest_options.interrupt = options.interrupt;
  Ingestor ingestor(store_, table_path_, contract_, declared_, storage_, ingest_options);
  std::vector<WrittenFile> files;
  {
    arrow::Status st = ingestor.Consume(reader);
    if (st.ok()) {
      auto finished = ingestor.Finish();
      if (finished.ok()) {
        files = std::move(*finished);
      } else {
        st = finished.status();
      }
    }
    if (st.ok()) st = CheckInterrupt(options.interrupt);  // the last chance before committing
    if (!st.ok()) {
      ingestor.Abort();
      return DroppedOr(st);
    }
  }
  if (files.empty() && !options.batch_id) {
    result.version = snapshot_.version;
    return result;
  }

  Commit commit;
  CommitInfo info = NewCommitInfo("WRITE");
  info.operation_parameters = {{"mode", "Append"}};
  info.is_blind_append = true;
  for (const auto& f : files) {
    result.rows += f.rows;
    result.bytes += f.size;
  }
  result.files = static_cast<int64_t>(files.size());
  info.metrics = {{"numFiles", result.files}, {"numOutputRows", result.rows},
                  {"numOutputBytes", result.bytes}};
  if (options.batch_id) {
    commit.txns.push_back({BatchAppId(*options.batch_id), 0, NowMillis()});
  }
  const int64_t now_ms = NowMillis();
  for (const auto& f : files) commit.adds.push_back(ToAddAction(f, /*data_change=*/true, now_ms));

  commit.commit_info = info;

  PendingCommit pending;
  pending.commit = std::move(commit);
  pending.intent.kind = CommitKind::kAppend;
  if (options.batch_id) pending.intent.txn_app_ids.insert(BatchAppId(*options.batch_id));
  pending.prepare = [](Commit* c, int64_t version) {
    for (auto& add : c->adds) add.tags[kSeqTag] = std::to_string(version);
  };
  const auto started = std::chrono::steady_clock::now();
  CommitOutcome outcome;
  if (arrow::Status st = CommitPending(&pending, &outcome); !st.ok()) {
    // With an unknown outcome the files may be referenced by a commit: vacuum decides later.
    if (!outcome.outcome_unknown) ingestor.Abort();
    return DroppedOr(st);
  }
  if (!outcome.version) {
    // A concurrent append recorded the same batch id: this one is its duplicate.
    ingestor.Abort();
    AppendResult dup;
    dup.version = snapshot_.version;
    dup.duplicate = outcome.abandoned && outcome.abandoned->effect == WinnerEffect::kRecordedSameTxn;
    dup.attempts = outcome.attempts;
    return dup;
  }
  result.version = *outcome.version;
  result.attempts = outcome.attempts;
  result.commit_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  // The append is acknowledged: from here on nothing may turn it into an error.
  PostCommitHooks hooks = HooksAfter(&files, result.version, result.version);
  if (options.maintain.value_or(AutoMaintain())) {
    hooks.Add("inline maintenance", [&]() -> arrow::Status {
      MaintainResult maintenance;
      arrow::Status upkeep = MaintainLocked(MaintainOptions{}, /*inline_only=*/true, &maintenance);
      if (!upkeep.ok() || maintenance.partitions_dropped + maintenance.partitions_compacted +
                                  maintenance.snapshots_expired + maintenance.objects_deleted >
                              0) {
        result.maintenance = maintenance;
      }
      return upkeep;
    });
  }
  if (auto failures = hooks.Run(); !failures.empty()) {
    std::string message;
    for (const auto& f : failures) message += (message.empty() ? "" : "; ") + f;
    if (!result.maintenance) result.maintenance = MaintainResult{};
    result.maintenance_error = message;
  }
  return result;
}

arrow::Status Table::CommitPending(PendingCommit* pending, CommitOutcome* out) {
  return committer_.Commit(&snapshot_, pending, out);
}

PostCommitHooks Table::HooksAfter(const std::vector<WrittenFile>* files, int64_t version,
                                  int64_t seq) {
  PostCommitHooks hooks;
  hooks.Add("checkpoint", [this] { return MaybeCheckpoint(); });
  if (files != nullptr) {
    hooks.Add("last-value index", [this, files, version, seq] {
      return RecordNewest(*files, version, seq);
    });
  }
  return hooks;
}


arrow::Status Table::DroppedOr(arrow::Status st) {
  // Bad input and Ctrl-C say what they are; a storage failure may be the table vanishing.
  if (st.ok() || st.IsInvalid() || st.IsCancelled() || IsTableNotFound(st)) return st;
  arrow::Status head = log_.CheckHead(snapshot_.version, snapshot_.head_fingerprint);
  return IsTableNotFound(head) ? head : st;
}

arrow::Status Table::RecordNewest(const std::vector<WrittenFile>& files, int64_t version,
                                  int64_t seq) {
  if (!contract_.is_time_series() || files.empty()) return arrow::Status::OK();
  std::vector<std::shared_ptr<arrow::Table>> newest;
  std::vector<std::string> paths;
  for (const auto& f : files) {
    // A file without its newest rows (written by an older path) leaves the commit unrecorded:
    // latest() then reads its files.
    if (!f.newest) return arrow::Status::OK();
    ARROW_ASSIGN_OR_RAISE(auto with_seq, WithSequence(f.newest, seq));
    newest.push_back(std::move(with_seq));
    paths.push_back(f.path);
  }
  ARROW_ASSIGN_OR_RAISE(auto merged, MergeNewest(newest, contract_));
  ARROW_RETURN_NOT_OK(index_->Record(version, paths, merged));
  // Like checkpoints for the log: every kIndexFoldInterval commits the records are folded into
  // one base, so latest() never reads more than that many records.
  if (version % kIndexFoldInterval == 0 && snapshot_.version == version) {
    ARROW_ASSIGN_OR_RAISE(auto state, index_->Read(snapshot_));
    ARROW_RETURN_NOT_OK(index_->Fold(state).status());
  }
  return arrow::Status::OK();
}

CommitInfo Table::NewCommitInfo(const std::string& operation) const {
  CommitInfo info;
  info.timestamp = NowMillis();
  info.operation = operation;
  info.engine_info = EngineInfo();
  info.txn_id = NewUuid();
  return info;
}

RemoveFile Table::RemoveOf(const AddFile& add, bool data_change, int64_t now_ms,
                           const char* reason) {
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

arrow::Result<std::shared_ptr<arrow::Table>> Table::Latest() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("latest"));
  ARROW_RETURN_NOT_OK(log_.Update(&snapshot_));
  if (snapshot_.metadata.id != metadata_id_) ARROW_RETURN_NOT_OK(LoadDerived());
  if (!contract_.is_time_series()) {
    return arrow::Status::Invalid("latest() needs a time-series table, but '", name_,
                                  "' has no time column (a plain table)");
  }
  ARROW_ASSIGN_OR_RAISE(auto state, index_->Read(snapshot_));
  return state.rows->RemoveColumn(state.rows->num_columns() - 1);
}

arrow::Result<TableInfo> Table::Info() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("info"));
  TableInfo info;
  info.contract = contract_;
  for (const auto& [path, add] : snapshot_.files) {
    ++info.files;
    info.bytes += add.size;
    info.rows += std::max<int64_t>(0, NumRecords(add));
  }
  if (contract_.is_time_series()) {
    ARROW_ASSIGN_OR_RAISE(auto state, index_->Read(snapshot_));
    info.index_series = state.rows->num_rows();
    info.index_version = state.version;
    info.index_bytes = state.bytes;
  }
  if (snapshot_.oldest_version < 0) {
    // A table opened from its last checkpoint has not listed the older log yet.
    ARROW_ASSIGN_OR_RAISE(snapshot_.oldest_version, log_.OldestVersion());
  }
  info.snapshots = snapshot_.version - snapshot_.oldest_version + 1;
  info.manifests = snapshot_.checkpoint_version >= 0
                       ? 1 + (snapshot_.version - snapshot_.checkpoint_version)
                       : snapshot_.version + 1;
  return info;
}

arrow::Result<ScanPlan> Table::Scan() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("scan"));
  ScanPlan plan;
  plan.version = snapshot_.version;
  plan.declared = declared_;
  plan.contract = contract_;
  plan.partition_columns = snapshot_.metadata.partition_columns;
  arrow::FieldVector file_fields;
  for (const auto& f : storage_->fields()) {
    if (std::find(plan.partition_columns.begin(), plan.partition_columns.end(), f->name()) ==
        plan.partition_columns.end()) {
      file_fields.push_back(f);
    }
  }
  plan.file_schema = arrow::schema(file_fields);

  // What a file may hold, for deciding which files can share a (series, time) row.
  struct Range {
    int64_t min, max;  // time
    bool has_key;
    std::string min_key, max_key;
    size_t index;
  };
  const bool int_key = contract_.series_key.size() == 1 &&
                       arrow::is_integer(storage_->GetFieldByName(contract_.series_key[0])->type()->id());
  auto key_less = [int_key](const std::string& a, const std::string& b) {
    if (int_key) {
      auto x = ParseInt64(a), y = ParseInt64(b);
      if (x && y) return *x < *y;
    }
    return a < b;
  };
  std::map<std::string, std::vector<Range>> by_chunk;
  for (const auto& [path, add] : snapshot_.files) {
    ScanFile f;
    const std::string decoded = UriDecode(add.path);
    if (decoded.rfind("file://", 0) == 0) {
      f.path = decoded.substr(7);
    } else if (decoded.find("://") != std::string::npos) {
      f.path = decoded;
    } else {
      f.path = store_->ExternalPath(table_path_ + "/" + decoded);
    }
    f.seq = TagInt(add, kSeqTag, 0);
    f.order = TagInt(add, kOrderTag, 0);
    f.rows = NumRecords(add);
    f.partition_values = add.partition_values;
    auto chunk = add.tags.find(kChunkTag);
    if (chunk != add.tags.end()) f.chunk = chunk->second;
    if (contract_.dedup != DedupPolicy::kNone) {
      auto min_key = add.tags.find(kMinKeyTag);
      auto max_key = add.tags.find(kMaxKeyTag);
      const bool has_key = min_key != add.tags.end() && max_key != add.tags.end();
      by_chunk[f.chunk].push_back({TagInt(add, kMinTimeTag, INT64_MIN),
                                   TagInt(add, kMaxTimeTag, INT64_MAX), has_key,
                                   has_key ? min_key->second : "", has_key ? max_key->second : "",
                                   plan.files.size()});
    }
    plan.files.push_back(std::move(f));
  }
  // A file needs read-time deduplication only if another file may hold a row with the same
  // series key and time: their time ranges overlap and (when known) so do their key ranges.
  for (auto& [chunk, ranges] : by_chunk) {
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& a, const Range& b) { return a.min < b.min; });
    for (size_t i = 0; i < ranges.size(); ++i) {
      for (size_t j = i + 1; j < ranges.size() && ranges[j].min <= ranges[i].max; ++j) {
        const Range& a = ranges[i];
        const Range& b = ranges[j];
        const bool keys_apart = a.has_key && b.has_key &&
                                (key_less(a.max_key, b.min_key) || key_less(b.max_key, a.min_key));
        if (keys_apart) continue;
        plan.files[a.index].dedup = true;
        plan.files[b.index].dedup = true;
      }
    }
  }
  return plan;
}

}  // namespace timelake
