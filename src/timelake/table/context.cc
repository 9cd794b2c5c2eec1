// The handle's state and the steps every operation shares (see table/context.h).
#include "timelake/table/context.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "timelake/log/features.h"
#include "timelake/log/file_tags.h"
#include "timelake/log/schema.h"
#include "timelake/table/head.h"
#include "timelake/util/ids.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

constexpr const char* kArrowSchemaKey = "timelake.arrowSchema";

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

arrow::Status Update(TableContext& t) {
  bool reloaded = false;
  ARROW_RETURN_NOT_OK(t.log.UpdateVisiting(
      &t.snapshot,
      [&t](int64_t version, const Commit& commit, const Snapshot&) {
        t.latest.Note(version, LatestDeltaOf(commit));
        return arrow::Status::OK();
      },
      &reloaded));
  NoteVersionSeen(t.store->RootUrl() + "/" + t.table_path, t.snapshot.metadata.id, t.snapshot.version);
  if (reloaded) t.latest = LatestState{};
  if (t.snapshot.metadata.id != t.metadata_id || !t.declared ||
      t.snapshot.metadata.schema_string != t.derived_schema_string ||
      ArrowSchemaText(t.snapshot.metadata) != t.derived_arrow_schema) {
    return LoadDerived(t);
  }
  return arrow::Status::OK();
}

int64_t SteadyMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

arrow::Status UpdateForRead(TableContext& t) {
  const int64_t now = SteadyMillis();
  const uint64_t changes = CatalogChanges();
  if (t.check_interval_ms > 0 && t.checked_at_ms >= 0 && now - t.checked_at_ms < t.check_interval_ms &&
      changes == t.checked_changes &&
      NewestVersionSeen(t.store->RootUrl() + "/" + t.table_path, t.snapshot.metadata.id) <=
          t.snapshot.version) {
    return arrow::Status::OK();
  }
  ARROW_RETURN_NOT_OK(Update(t));
  t.checked_at_ms = now;  // what the check saw was there when it started
  t.checked_changes = changes;
  NoteVersionChecked(t.store->RootUrl() + "/" + t.table_path, t.snapshot.metadata.id, t.snapshot.version, now,
                     changes);
  return arrow::Status::OK();
}

arrow::Status UpdateWhole(TableContext& t) {
  // A load is the latest version already: no Update() after it (which would read its head again).
  if (!t.partial) return Update(t);
  auto whole = t.log.Load();
  if (!whole.ok()) {
    return whole.status().IsKeyError() ? TableDropped(t.name) : whole.status();
  }
  if (whole->metadata.id != t.snapshot.metadata.id) return TableDropped(t.name);
  t.snapshot = std::move(*whole);
  t.partial = false;
  t.latest = LatestState{};
  NoteVersionSeen(t.store->RootUrl() + "/" + t.table_path, t.snapshot.metadata.id, t.snapshot.version);
  if (t.snapshot.metadata.schema_string != t.derived_schema_string ||
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
  if (t.partial) {
    // Operations that commit call UpdateWhole first; a commit planned on a head's snapshot gets
    // that version's history here (not the latest version: the committer must see the winners).
    ARROW_ASSIGN_OR_RAISE(auto whole, t.log.LoadAt(t.snapshot.version));
    if (whole.metadata.id != t.snapshot.metadata.id) return TableDropped(t.name);
    t.snapshot = std::move(whole);
    t.partial = false;
  }
  arrow::Status st = t.committer.Commit(&t.snapshot, pending, out);
  if (out->version) {
    NoteVersionSeen(t.store->RootUrl() + "/" + t.table_path, t.snapshot.metadata.id, *out->version);
  }
  return st;
}

std::string BatchAppId(const std::string& batch_id) { return "timelake:" + batch_id; }

}  // namespace timelake
