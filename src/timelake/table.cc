// Table: the handle; every operation takes the handle's lock and runs over its context.
#include "timelake/table.h"

#include <algorithm>
#include <chrono>
#include <map>

#include <arrow/type.h>
#include <arrow/type_traits.h>
#include <rapidjson/document.h>

#include "timelake/log/file_tags.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

int64_t NumRecords(const AddFile& add) {
  if (!add.stats) return -1;
  rapidjson::Document doc;
  doc.Parse(add.stats->c_str());
  if (doc.HasParseError() || !doc.IsObject()) return -1;
  auto it = doc.FindMember("numRecords");
  if (it == doc.MemberEnd() || !it->value.IsInt64()) return -1;
  return it->value.GetInt64();
}

}  // namespace

Table::Table(std::shared_ptr<ObjectStore> store, std::string table_path, std::string name)
    : mutex_("table handle '" + name + "'",
             "use a second handle for the table, from lake.table('" + name + "')"),
      ctx_(std::move(store), std::move(table_path), name) {}

arrow::Result<std::shared_ptr<Table>> Table::Open(std::shared_ptr<ObjectStore> store,
                                                  std::string table_path, std::string name) {
  std::shared_ptr<Table> table(new Table(std::move(store), std::move(table_path), std::move(name)));
  TableContext& t = table->ctx_;
  auto snapshot = t.log.Load();
  if (!snapshot.ok()) {
    if (snapshot.status().IsKeyError()) return TableNotFound(t.name);
    return snapshot.status();
  }
  t.snapshot = std::move(*snapshot);
  ARROW_RETURN_NOT_OK(LoadDerived(t));
  return table;
}

std::string Table::location() const { return ctx_.store->RootUrl() + "/" + ctx_.table_path; }

int64_t Table::version() {
  // From inside this thread's own operation (its input stream), that operation is suspended.
  if (mutex_.HeldByThisThread()) return ctx_.snapshot.version;
  auto lock = mutex_.Acquire("version");
  return ctx_.snapshot.version;
}

arrow::Status Table::Refresh() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("refresh"));
  return Update(ctx_);
}

arrow::Status Table::WaitForUpkeep() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("wait for upkeep"));
  return DroppedOr(ctx_, FinishUpkeep(ctx_));
}

arrow::Result<AppendResult> Table::Append(arrow::RecordBatchReader* reader,
                                          const AppendOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("append", options.interrupt));
  return AppendBatches(ctx_, reader, options);
}

arrow::Result<MaintainResult> Table::Maintain(const MaintainOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("maintain", options.interrupt));
  const auto started = std::chrono::steady_clock::now();
  ARROW_RETURN_NOT_OK(DroppedOr(ctx_, FinishUpkeep(ctx_)));
  ARROW_RETURN_NOT_OK(Update(ctx_));
  MaintainResult result;
  ARROW_RETURN_NOT_OK(DroppedOr(ctx_, MaintainLocked(ctx_, options, /*inline_only=*/false, &result)));
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

arrow::Result<std::shared_ptr<arrow::Table>> Table::Latest() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("latest"));
  ARROW_RETURN_NOT_OK(Update(ctx_));
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
    if (!state.ok()) return DroppedOr(ctx_, state.status());
    info.index_series = state->rows->num_rows();
    info.index_version = state->version;
    info.index_bytes = state->bytes;
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

}  // namespace timelake
