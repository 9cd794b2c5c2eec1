#include "timelake/table_context.h"

#include <set>

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

std::string EngineInfo() { return std::string("timelake/") + TIMELAKE_VERSION; }

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
  t.metadata_id = m.id;
  t.index = std::make_unique<LastValueIndex>(t.store, t.table_path, m.id, t.contract, t.storage);
  return arrow::Status::OK();
}

arrow::Status Update(TableContext& t) {
  ARROW_RETURN_NOT_OK(t.log.Update(&t.snapshot));
  if (t.snapshot.metadata.id != t.metadata_id || !t.declared) return LoadDerived(t);
  return arrow::Status::OK();
}

arrow::Status CheckWritable(const TableContext& t) {
  const Protocol& p = t.snapshot.protocol;
  static const std::set<std::string> writable = {"appendOnly", "invariants", "timestampNtz"};
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

arrow::Status MaybeCheckpoint(TableContext& t) {
  const int64_t interval = ParseInt64(t.snapshot.Config("delta.checkpointInterval", "10")).value_or(10);
  if (interval <= 0 || t.snapshot.version == 0 || t.snapshot.version % interval != 0) {
    return arrow::Status::OK();
  }
  ARROW_RETURN_NOT_OK(t.log.Checkpoint(t.snapshot));
  // A drop between the commit and here would make the checkpoint revive the dropped folder as a
  // broken table: take it back if the commit is no longer there.
  // Only a definite answer takes it back: a read that failed (a timeout, a 500) leaves the
  // checkpoint, which is right as long as the commit stands, as it almost always does.
  if (arrow::Status head = t.log.CheckHead(t.snapshot.version, t.snapshot.head_fingerprint);
      !head.ok()) {
    if (IsTableNotFound(head)) (void)t.log.store().DeleteCheckpoint(t.snapshot.version);
    return head;
  }
  t.snapshot.checkpoint_version = t.snapshot.version;
  return arrow::Status::OK();
}

arrow::Status RecordNewest(TableContext& t, const std::vector<WrittenFile>& files,
                           int64_t version, int64_t seq) {
  if (!t.contract.is_time_series() || files.empty()) return arrow::Status::OK();
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
  ARROW_ASSIGN_OR_RAISE(auto merged, MergeNewest(newest, t.contract));
  ARROW_RETURN_NOT_OK(t.index->Record(version, paths, merged));
  // Like checkpoints for the log: every kIndexFoldInterval commits the records are folded into
  // one base, so latest() never reads more than that many records.
  if (version % kIndexFoldInterval == 0 && t.snapshot.version == version) {
    ARROW_ASSIGN_OR_RAISE(auto state, t.index->Read(t.snapshot));
    ARROW_RETURN_NOT_OK(t.index->Fold(state).status());
  }
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
