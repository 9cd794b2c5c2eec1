#include "timelake/table.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <set>
#include <thread>

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

void Table::MaybeCheckpoint() {
  const int64_t interval = ParseInt64(snapshot_.Config("delta.checkpointInterval", "10")).value_or(10);
  if (interval <= 0 || snapshot_.version == 0 || snapshot_.version % interval != 0) return;
  // A failed checkpoint costs only replay time; the commit itself has succeeded.
  if (!log_.Checkpoint(snapshot_).ok()) return;
  // A drop between the commit and here would make the checkpoint revive the dropped folder as a
  // broken table: take it back if the commit is no longer there.
  if (!log_.CheckHead(snapshot_.version, snapshot_.head_fingerprint).ok()) {
    (void)store_->Delete(log_.LogPath(CommitFileName(snapshot_.version).substr(0, 20) +
                                      ".checkpoint.parquet"));
    (void)store_->Delete(log_.LogPath("_last_checkpoint"));
    return;
  }
  snapshot_.checkpoint_version = snapshot_.version;
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

  const auto started = std::chrono::steady_clock::now();
  CommitOutcome outcome;
  bool duplicate = false;
  arrow::Status st = CommitRebasing(
      &commit,
      [](Commit* c, int64_t version) {
        for (auto& add : c->adds) add.tags[kSeqTag] = std::to_string(version);
      },
      [&]() -> arrow::Result<AfterLostRace> {
        // A winner that recorded the same batch id makes this append a duplicate.
        duplicate = options.batch_id && HasBatch(*options.batch_id);
        return duplicate ? AfterLostRace::kAbandon : AfterLostRace::kRetry;
      },
      &outcome);
  if (!st.ok()) {
    // With an unknown outcome the files may be referenced by a commit: vacuum decides later.
    if (!outcome.outcome_unknown) ingestor.Abort();
    return DroppedOr(st);
  }
  if (!outcome.version) {
    ingestor.Abort();
    AppendResult dup;
    dup.version = snapshot_.version;
    dup.duplicate = duplicate;
    dup.attempts = outcome.attempts;
    return dup;
  }
  result.version = *outcome.version;
  result.attempts = outcome.attempts;
  result.commit_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  // The append is acknowledged: from here on nothing may turn it into an error.
  AfterCommit();
  RecordNewest(files, result.version, result.version);
  if (options.maintain.value_or(AutoMaintain())) {
    MaintainResult maintenance;
    arrow::Status upkeep = MaintainLocked(MaintainOptions{}, /*inline_only=*/true, &maintenance);
    if (!upkeep.ok()) {
      result.maintenance = maintenance;
      result.maintenance_error = upkeep.message();
    } else if (maintenance.partitions_dropped + maintenance.partitions_compacted +
                   maintenance.snapshots_expired + maintenance.objects_deleted > 0) {
      result.maintenance = maintenance;
    }
  }
  return result;
}

arrow::Status Table::CommitRebasing(Commit* commit,
                                    const std::function<void(Commit*, int64_t)>& prepare,
                                    const std::function<arrow::Result<AfterLostRace>()>& on_lost_race,
                                    CommitOutcome* out) {
  std::mt19937_64 rng(std::random_device{}());
  const std::string txn_id = commit->commit_info->txn_id;
  const std::string operation = commit->commit_info->operation;
  for (int attempt = 1;; ++attempt) {
    out->attempts = attempt;
    const int64_t version = snapshot_.version + 1;
    commit->commit_info->read_version = snapshot_.version;
    commit->commit_info->timestamp = NowMillis();
    prepare(commit, version);
    const std::string body = SerializeCommit(*commit);
    // Never put a version into a folder whose version-1 is not this handle's head: after a drop
    // (and a create at the same path) that would leave a stray version, and a gap, in another
    // table's log for as long as it takes to notice. The check after the put covers the rest.
    ARROW_RETURN_NOT_OK(log_.CheckHead(version - 1, snapshot_.head_fingerprint));
    auto won = log_.TryCommit(version, body);
    if (!won.ok()) {
      // The put may have landed even though it reported an error (a lost reply, a failed folder
      // fsync): look at what the version holds before deciding anything.
      auto landed = log_.ReadCommit(version);
      if (landed.ok() && landed->commit_info && landed->commit_info->txn_id == txn_id) {
        won = true;
      } else if (landed.ok()) {
        won = false;  // another writer's commit: an ordinary lost race
      } else if (IsNotFound(landed.status())) {
        return arrow::Status::IOError(operation, " commit of version ", version, " to table '",
                                      name_, "' failed: ", won.status().message());
      } else {
        out->outcome_unknown = true;
        return arrow::Status::IOError(operation, " commit of version ", version, " to table '",
                                      name_, "' failed and its outcome is unknown: ",
                                      won.status().message(), "; retry (with the same batch_id "
                                      "for appends, so that it lands exactly once)");
      }
    }
    if (*won) {
      // The commit counts only if it follows this handle's snapshot in the same table: if the
      // table was dropped (and maybe created again) meanwhile, the put created a stray version
      // in the new folder. Take it back; nothing else can have built on it yet.
      arrow::Status same_table = log_.CheckHead(version - 1, snapshot_.head_fingerprint);
      if (!same_table.ok()) {
        (void)store_->Delete(log_.LogPath(CommitFileName(version)));
        return same_table;
      }
      snapshot_.Apply(*commit, version);
      snapshot_.head_fingerprint = CommitFingerprint(body);
      out->version = version;
      return arrow::Status::OK();
    }
    // Lost the race for `version`. Back off first (with jitter, so racing writers spread out),
    // then read every commit that landed meanwhile and rebase onto the newest: retrying a version
    // computed before the pause would mostly lose again.
    if (attempt >= kMaxCommitAttempts) {
      return arrow::Status::IOError("commit conflict that could not be rebased: table '", name_,
                                    "' lost ", attempt, " commit races in a row; retry later");
    }
    const int64_t cap_us = std::min<int64_t>(100'000, 500LL << std::min(attempt, 8));
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % static_cast<uint64_t>(cap_us)));
    const Protocol protocol_before = snapshot_.protocol;
    const std::string schema_before = snapshot_.metadata.schema_string;
    const std::string id_before = snapshot_.metadata.id;
    ARROW_RETURN_NOT_OK(log_.Update(&snapshot_));
    if (snapshot_.metadata.id != id_before || snapshot_.metadata.schema_string != schema_before ||
        snapshot_.protocol.min_writer_version != protocol_before.min_writer_version ||
        snapshot_.protocol.min_reader_version != protocol_before.min_reader_version) {
      return arrow::Status::IOError("commit conflict that could not be rebased: table '", name_,
                                    "' changed its schema or protocol concurrently; retry");
    }
    ARROW_ASSIGN_OR_RAISE(AfterLostRace next, on_lost_race());
    if (next == AfterLostRace::kAbandon) return arrow::Status::OK();
  }
}

void Table::AfterCommit() { MaybeCheckpoint(); }

arrow::Status Table::DroppedOr(arrow::Status st) {
  // Bad input and Ctrl-C say what they are; a storage failure may be the table vanishing.
  if (st.ok() || st.IsInvalid() || st.IsCancelled() || IsTableNotFound(st)) return st;
  arrow::Status head = log_.CheckHead(snapshot_.version, snapshot_.head_fingerprint);
  return IsTableNotFound(head) ? head : st;
}

void Table::RecordNewest(const std::vector<WrittenFile>& files, int64_t version, int64_t seq) {
  if (!contract_.is_time_series() || files.empty()) return;
  std::vector<std::shared_ptr<arrow::Table>> newest;
  std::vector<std::string> paths;
  for (const auto& f : files) {
    if (!f.newest) return;
    auto with_seq = WithSequence(f.newest, seq);
    if (!with_seq.ok()) return;
    newest.push_back(*with_seq);
    paths.push_back(f.path);
  }
  auto merged = MergeNewest(newest, contract_);
  if (!merged.ok() || !index_->Record(version, paths, *merged).ok()) return;
  // Like checkpoints for the log: every kIndexFoldInterval commits the records are folded into
  // one base, so latest() never reads more than that many records.
  if (version % kIndexFoldInterval == 0 && snapshot_.version == version) {
    auto state = index_->Read(snapshot_);
    if (state.ok()) (void)index_->Fold(*state);
  }
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
  info.snapshots = snapshot_.version - snapshot_.oldest_version + 1;
  info.manifests = snapshot_.checkpoint_version >= 0
                       ? 1 + (snapshot_.version - snapshot_.checkpoint_version)
                       : snapshot_.version + 1;
  return info;
}

arrow::Result<ScanPlan> Table::Scan(const ScanFilter& filter) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("scan"));
  return PlanScan({store_.get(), table_path_, &snapshot_, &contract_, declared_, storage_}, filter);
}

}  // namespace timelake
