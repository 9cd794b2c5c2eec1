// Table: the handle; every operation takes the handle's lock and runs over its context.
#include "timelake/table/table.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <map>
#include <set>

#include <arrow/type.h>
#include <arrow/type_traits.h>

#include "timelake/log/features.h"
#include "timelake/log/file_tags.h"
#include "timelake/log/data_path.h"
#include "timelake/log/schema.h"
#include "timelake/txn/conflict.h"
#include "timelake/table/head.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {

Table::Table(std::shared_ptr<ObjectStore> store, std::string table_path, std::string name,
             std::weak_ptr<LakeRuntime> runtime)
    : mutex_("table handle '" + name + "'",
             "use a second handle for the table, from lake.table('" + name + "')"),
      ctx_(std::move(store), std::move(table_path), name, std::move(runtime)) {}

arrow::Result<std::shared_ptr<Table>> Table::Open(std::shared_ptr<ObjectStore> store,
                                                  std::string table_path, std::string name,
                                                  std::weak_ptr<LakeRuntime> runtime,
                                                  const TableOpenOptions& options) {
  std::shared_ptr<Table> table(new Table(std::move(store), std::move(table_path), std::move(name),
                                         std::move(runtime)));
  TableContext& t = table->ctx_;
  t.heads = options.heads;
  t.head_interval = std::max<int64_t>(1, options.head_interval);
  t.check_interval_ms = options.check_interval_ms;
  if (t.heads && table->OpenFromHead()) return table;
  t.checked_at_ms = SteadyMillis();
  t.checked_changes = CatalogChanges();
  auto snapshot = t.log.Load();
  if (!snapshot.ok()) {
    if (snapshot.status().IsKeyError()) return TableNotFound(t.name);
    return snapshot.status();
  }
  t.snapshot = std::move(*snapshot);
  ARROW_RETURN_NOT_OK(LoadDerived(t));
  NoteVersionChecked(table->location(), t.snapshot.metadata.id, t.snapshot.version, t.checked_at_ms,
                     t.checked_changes);
  return table;
}

bool Table::OpenFromHead() {
  TableContext& t = ctx_;
  const int64_t started = SteadyMillis();
  const uint64_t changes = CatalogChanges();
  if (t.check_interval_ms > 0) {
    // Another handle of this process opened the table lately, and a check of the log found its
    // version the newest within the interval (no commit or drop of the process since): start
    // where it did, without a request (the handle `Lake.table()` opened, then a query's).
    if (std::optional<HeadContents> recent = RecentHead(location())) {
      const int64_t version = recent->snapshot.version;
      const std::string id = recent->snapshot.metadata.id;
      const int64_t checked = CheckedAsNewest(location(), id, version);
      if (checked >= 0 && started - checked <= t.check_interval_ms &&
          NewestVersionSeen(location(), id) <= version) {
        t.snapshot = std::move(recent->snapshot);
        if (LoadDerived(t).ok()) {
          t.partial = true;
          if (recent->latest) {
            t.latest.rows = std::move(recent->latest);
            t.latest.version = version;
          }
          t.checked_at_ms = checked;
          t.checked_changes = changes;
          return true;
        }
        t.snapshot = Snapshot{};
      }
    }
  }
  // A store that cannot be read now fails the normal open too, with its own message.
  auto read = ReadHead(*t.store, t.table_path);
  if (!read.ok() || !*read) return false;
  HeadRead& head = **read;
  const int64_t version = head.contents.snapshot.version;
  const std::string commit_etag = head.contents.commit_etag;
  t.snapshot = std::move(head.contents.snapshot);
  if (!LoadDerived(t).ok()) return false;  // the normal open says why
  t.partial = true;
  if (head.contents.latest) {
    t.latest.rows = std::move(head.contents.latest);
    t.latest.version = version;
  }
  // Trusted alone when its writer saw no newer commit at most the interval ago (its age), or
  // when a check of the log by this process found its version the newest within the interval.
  const int64_t checked = CheckedAsNewest(location(), t.snapshot.metadata.id, version);
  const int64_t written = head.age_ms >= 0 ? started - head.age_ms : -1;
  const int64_t newest_check = std::max(checked, written);
  const bool fresh = t.check_interval_ms > 0 && newest_check >= 0 &&
                     started - newest_check <= t.check_interval_ms &&
                     NewestVersionSeen(location(), t.snapshot.metadata.id) <= version;
  if (fresh) {
    t.checked_at_ms = newest_check;
    t.checked_changes = changes;
    NoteVersionSeen(location(), t.snapshot.metadata.id, version);
    Remember();
    return true;
  }
  // Too old to trust alone: the head's commit must still be there (the same bytes: not a dropped
  // table's), and the commits after it are read as a refresh reads them. One listing of the log
  // from the head's version settles it when it shows the head's commit with the tag its writer
  // saw and nothing newer (object stores; a local lake reads the log, which costs no round trip).
  if (NewestVersionSeen(location(), t.snapshot.metadata.id) <= version &&
      HeadStillNewest(*t.store, t.table_path, version, commit_etag)) {
    t.checked_at_ms = started;
    t.checked_changes = changes;
    NoteVersionChecked(location(), t.snapshot.metadata.id, version, started, changes);
    Remember();
    return true;
  }
  if (!Update(t).ok()) {
    t.partial = false;
    t.latest = LatestState{};
    return false;
  }
  t.checked_at_ms = started;
  t.checked_changes = changes;
  NoteVersionChecked(location(), t.snapshot.metadata.id, t.snapshot.version, started, changes);
  Remember();
  return true;
}

void Table::Remember() {
  const TableContext& t = ctx_;
  if (t.check_interval_ms <= 0) return;  // every read checks the log: nothing to start from
  HeadContents contents;
  contents.snapshot = t.snapshot;
  if (t.latest.rows && t.latest.version == t.snapshot.version) contents.latest = t.latest.rows;
  RememberHead(location(), std::move(contents));
}

std::string Table::location() const { return ctx_.store->RootUrl() + "/" + ctx_.table_path; }

int64_t Table::version() {
  // From inside this thread's own operation (its input stream), that operation is suspended.
  if (mutex_.HeldByThisThread()) return ctx_.snapshot.version;
  auto lock = mutex_.Acquire("version", {}, /*allow_busy=*/true);
  return ctx_.snapshot.version;
}

arrow::Status Table::Refresh() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("refresh"));
  ctx_.checked_at_ms = SteadyMillis();
  ctx_.checked_changes = CatalogChanges();
  ARROW_RETURN_NOT_OK(Update(ctx_));
  NoteVersionChecked(location(), ctx_.snapshot.metadata.id, ctx_.snapshot.version, ctx_.checked_at_ms,
                     ctx_.checked_changes);
  return arrow::Status::OK();
}

arrow::Result<std::optional<int64_t>> Table::RecordedBatchVersion(const std::string& batch_id) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("recorded batch version"));
  ARROW_RETURN_NOT_OK(UpdateWhole(ctx_));  // a head's snapshot holds no batch ids
  const std::string app_id = BatchAppId(batch_id);
  // RecordedTxns applies the retention; asked at the lowest version, it says whether any is held.
  ARROW_ASSIGN_OR_RAISE(auto recorded, RecordedTxns({{app_id, INT64_MIN}}, ctx_.snapshot));
  if (recorded.empty()) return std::nullopt;
  ARROW_ASSIGN_OR_RAISE(const Txn* txn, ctx_.snapshot.FindTxn(app_id));
  return txn->version;
}

std::string Table::id() {
  auto lock = mutex_.Acquire("id", {}, /*allow_busy=*/true);
  return ctx_.snapshot.metadata.id;
}

std::map<std::string, std::string> Table::properties() {
  auto lock = mutex_.Acquire("properties", {}, /*allow_busy=*/true);
  return ctx_.snapshot.metadata.configuration;
}

arrow::Status Table::RefreshIfDue() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("refresh"));
  return UpdateForRead(ctx_);
}

arrow::Status Table::WaitForUpkeep() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("wait for upkeep"));
  return DroppedOr(ctx_, FinishUpkeep(ctx_));
}

arrow::Result<AppendResult> Table::Append(arrow::RecordBatchReader* reader,
                                          const AppendOptions& options) {
  return AppendThroughGroup(mutex_, ctx_, group_, reader, options);
}

arrow::Result<MaintainResult> Table::Maintain(const MaintainOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("maintain", options.interrupt));
  const auto started = std::chrono::steady_clock::now();
  ARROW_RETURN_NOT_OK(DroppedOr(ctx_, FinishUpkeep(ctx_)));
  ARROW_RETURN_NOT_OK(UpdateWhole(ctx_));
  MaintainResult result;
  ARROW_RETURN_NOT_OK(DroppedOr(ctx_, MaintainLocked(ctx_, options, /*inline_only=*/false, &result)));
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

arrow::Result<std::shared_ptr<arrow::Table>> Table::Latest() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("latest"));
  ARROW_RETURN_NOT_OK(UpdateForRead(ctx_));
  if (!ctx_.contract.is_time_series()) {
    return arrow::Status::Invalid("latest() needs a time-series table, but '", ctx_.name,
                                  "' has no time column (a plain table)");
  }
  // Reading the index may read data files: a drop meanwhile is a KeyError, not "not found".
  auto rows = LatestRows(ctx_);
  if (!rows.ok()) return DroppedOr(ctx_, rows.status());
  return (*rows)->RemoveColumn((*rows)->num_columns() - 1);
}

arrow::Result<TableInfo> Table::Info() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("info"));
  ARROW_RETURN_NOT_OK(DroppedOr(ctx_, FinishUpkeep(ctx_)));
  TableInfo info;
  info.contract = ctx_.contract;
  for (const auto& [path, add] : ctx_.snapshot.files) {
    ++info.files;
    info.bytes += add.size;
    info.rows += std::max<int64_t>(0, NumRecords(add));
  }
  if (ctx_.contract.is_time_series()) {
    auto state = ctx_.index->Read(ctx_.snapshot);
    if (state.ok()) {
      info.index_series = state->rows->num_rows();
      info.index_version = state->version;
      info.index_bytes = state->bytes;
    } else {
      // A dropped table is an error; a data file the index could not read (damaged, or gone
      // from under the table) is a finding of info(), which must work on a damaged table.
      arrow::Status why = DroppedOr(ctx_, state.status());
      if (IsTableNotFound(why) || why.IsCancelled()) return why;
      info.index_series = -1;
      info.index_version = -1;
      info.index_error = state.status().message();
    }
  }
  if (ctx_.partial) {
    // A head's checkpoint may be older than the one a reader of the log would start from (its
    // writer may have written it before the checkpoint): ask `_last_checkpoint`, as that reader.
    if (auto hint = ctx_.log.store().LastCheckpointHint();
        hint && *hint > ctx_.snapshot.checkpoint_version && *hint <= ctx_.snapshot.version) {
      ctx_.snapshot.checkpoint_version = *hint;
    }
  }
  if (ctx_.snapshot.oldest_version < 0) {
    // A table opened from its last checkpoint has not listed the older log yet.
    ARROW_ASSIGN_OR_RAISE(ctx_.snapshot.oldest_version, ctx_.log.OldestVersion());
  }
  info.snapshots = ctx_.snapshot.version - ctx_.snapshot.oldest_version + 1;
  info.manifests = ctx_.snapshot.checkpoint_version >= 0
                       ? 1 + (ctx_.snapshot.version - ctx_.snapshot.checkpoint_version)
                       : ctx_.snapshot.version + 1;
  return info;
}

arrow::Result<ScanPlan> Table::Scan(const ScanFilter& filter) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("scan"));
  return PlanScan({ctx_.store.get(), ctx_.table_path, &ctx_.snapshot, &ctx_.contract, ctx_.declared,
                   ctx_.storage},
                  filter);
}

arrow::Result<ScanPlan> Table::ScanAsOf(std::optional<int64_t> version,
                                        std::optional<int64_t> timestamp_ms, const ScanFilter& filter) {
  if (!version && !timestamp_ms) return Scan(filter);
  if (version && *version < 0) {
    return arrow::Status::Invalid("a table version is 0 or more, got ", *version);
  }
  // The store, path and name never change for a handle: no lock is needed to read the log.
  DeltaLog log(ctx_.store, ctx_.table_path);
  int64_t v = 0;
  if (version) {
    v = *version;
  } else {
    auto found = log.VersionAt(*timestamp_ms);
    if (!found.ok()) return TableMessage(found.status());
    v = *found;
  }
  auto snapshot = log.LoadAt(v);
  if (!snapshot.ok()) return TableMessage(snapshot.status());
  // Vacuum deletes the files a version read once they have been removed long enough: those are
  // among the files the handle's snapshot no longer holds. Listed under the lock, checked after.
  std::vector<std::string> gone_since;
  {
    ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("scan"));
    for (const auto& [path, add] : snapshot->files) {
      if (!ctx_.snapshot.files.count(path)) gone_since.push_back(path);
    }
  }
  for (const auto& path : gone_since) {
    auto store_path = DataFileStorePath(ctx_.table_path, path);
    if (!store_path.ok()) continue;  // a file outside the store: the query engine reports it
    auto head = ctx_.store->Head(*store_path);
    if (!head.ok() && IsNotFound(head.status())) {
      return VersionNotFound("version " + std::to_string(v) + " of table '" + ctx_.name +
                             "' cannot be read: vacuum removed its data file " + path +
                             " (files are kept for delta.deletedFileRetentionDuration after a newer "
                             "version stops using them)");
    }
    ARROW_RETURN_NOT_OK(head.status());
  }
  TableContext at(ctx_.store, ctx_.table_path, ctx_.name);
  at.snapshot = std::move(*snapshot);
  ARROW_RETURN_NOT_OK(LoadDerived(at));
  return PlanScan({at.store.get(), at.table_path, &at.snapshot, &at.contract, at.declared, at.storage},
                  filter);
}

arrow::Status Table::TableMessage(const arrow::Status& st) const {
  // The log names the table by its folder; users know it by name.
  if (!st.IsKeyError()) return st;
  std::string message = st.message();
  const std::string folder = "'" + ctx_.table_path + "'";
  if (auto at = message.find(folder); at != std::string::npos) {
    message.replace(at, folder.size(), "table '" + ctx_.name + "'");
  }
  return VersionNotFound(message);
}

}  // namespace timelake
