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

arrow::Result<AppendResult> Table::Append(arrow::RecordBatchReader* reader,
                                          const AppendOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("append", options.interrupt));
  return AppendBatches(ctx_, reader, options);
}

arrow::Result<MaintainResult> Table::Maintain(const MaintainOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("maintain", options.interrupt));
  const auto started = std::chrono::steady_clock::now();
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
  ARROW_ASSIGN_OR_RAISE(auto state, ctx_.index->Read(ctx_.snapshot));
  return state.rows->RemoveColumn(state.rows->num_columns() - 1);
}

arrow::Result<TableInfo> Table::Info() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("info"));
  TableInfo info;
  info.contract = ctx_.contract;
  for (const auto& [path, add] : ctx_.snapshot.files) {
    ++info.files;
    info.bytes += add.size;
    info.rows += std::max<int64_t>(0, NumRecords(add));
  }
  if (ctx_.contract.is_time_series()) {
    ARROW_ASSIGN_OR_RAISE(auto state, ctx_.index->Read(ctx_.snapshot));
    info.index_series = state.rows->num_rows();
    info.index_version = state.version;
    info.index_bytes = state.bytes;
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

arrow::Result<ScanPlan> Table::Scan() {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("scan"));
  ScanPlan plan;
  plan.version = ctx_.snapshot.version;
  plan.declared = ctx_.declared;
  plan.contract = ctx_.contract;
  plan.partition_columns = ctx_.snapshot.metadata.partition_columns;
  arrow::FieldVector file_fields;
  for (const auto& f : ctx_.storage->fields()) {
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
  const bool int_key = ctx_.contract.series_key.size() == 1 &&
                       arrow::is_integer(ctx_.storage->GetFieldByName(ctx_.contract.series_key[0])->type()->id());
  auto key_less = [int_key](const std::string& a, const std::string& b) {
    if (int_key) {
      auto x = ParseInt64(a), y = ParseInt64(b);
      if (x && y) return *x < *y;
    }
    return a < b;
  };
  std::map<std::string, std::vector<Range>> by_chunk;
  for (const auto& [path, add] : ctx_.snapshot.files) {
    ScanFile f;
    const std::string decoded = UriDecode(add.path);
    if (decoded.rfind("file://", 0) == 0) {
      f.path = decoded.substr(7);
    } else if (decoded.find("://") != std::string::npos) {
      f.path = decoded;
    } else {
      f.path = ctx_.store->ExternalPath(ctx_.table_path + "/" + decoded);
    }
    f.seq = TagInt(add, kSeqTag, 0);
    f.order = TagInt(add, kOrderTag, 0);
    f.rows = NumRecords(add);
    f.partition_values = add.partition_values;
    auto chunk = add.tags.find(kChunkTag);
    if (chunk != add.tags.end()) f.chunk = chunk->second;
    if (ctx_.contract.dedup != DedupPolicy::kNone) {
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
