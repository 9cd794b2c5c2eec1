#include "timelake/lake.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <arrow/compute/initialize.h>
#include <arrow/type.h>

#include "timelake/log/delta_log.h"
#include "timelake/log/file_tags.h"
#include "timelake/log/features.h"
#include "timelake/log/schema.h"
#include "timelake/http/http_client.h"
#include "timelake/store/store_factory.h"
#include "timelake/table/head.h"
#include "timelake/txn/committer.h"
#include "timelake/table/context.h"
#include "timelake/table/lake_runtime.h"
#include "timelake/util/ids.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"
#include "timelake/util/text.h"

namespace timelake {
namespace {

// A lake whose files engines open where they are (no file cache).
bool IsLocal(const ObjectStore& store) { return store.RootUrl().rfind("file://", 0) == 0; }

constexpr size_t kMaxIdentifierBytes = 128;
// Folders of dropped tables, renamed out of sight before their files are deleted. The leading
// dot keeps them from ever parsing as a table name.
constexpr const char* kDroppedPrefix = ".dropped-";
// Short-lived locks that make creations of names equal ignoring case take turns (a folder at the
// lake root whose name is no identifier, so it is never taken for a namespace).
constexpr const char* kNameLocks = ".timelake/create-locks/";
constexpr int64_t kNameLockWaitMs = 10'000;
constexpr int64_t kNameLockStaleMs = 30'000;


// Counts a creation or drop (table/head.h, CatalogChanges) when it goes: after it, whatever its
// outcome, so that no list of tables or handle checked while it ran is reused.
struct GenerationBump {
  ~GenerationBump() { NoteCatalogChange(); }
};

bool SameIgnoringCase(const TableName& a, const TableName& b) {
  return Lower(a.ns) == Lower(b.ns) && Lower(a.table) == Lower(b.table);
}

bool IsIdentifier(const std::string& s) {
  if (s.empty() || s.size() > kMaxIdentifierBytes) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

}  // namespace

arrow::Result<TableName> ParseTableName(const std::string& name) {
  TableName out;
  const auto dot = name.find('.');
  if (dot == std::string::npos) {
    out = {"default", name};
  } else {
    out = {name.substr(0, dot), name.substr(dot + 1)};
  }
  if (!IsIdentifier(out.ns) || !IsIdentifier(out.table)) {
    // A name can be any size: quote enough of it to recognise, not megabytes of it.
    constexpr size_t kShown = 200;
    const std::string shown = name.size() <= kShown
                                  ? name
                                  : name.substr(0, kShown) + "… (" + std::to_string(name.size()) +
                                        " bytes)";
    return arrow::Status::Invalid("invalid table name '", shown,
                                  "': use 'table' or 'namespace.table', where each part starts "
                                  "with a letter or '_', has only letters, digits and '_', and is "
                                  "at most 128 bytes");
  }
  return out;
}

arrow::Result<std::shared_ptr<Lake>> Lake::Open(
    const std::string& location, const std::map<std::string, std::string>& storage_options) {
  // timelake's own options (the cache's, the version check interval); the rest are the store's.
  std::map<std::string, std::string> options = storage_options;
  ARROW_ASSIGN_OR_RAISE(FileCacheOptions cache_options, FileCacheOptions::Take(&options));
  std::optional<int64_t> interval_ms;
  if (auto it = options.find(kVersionCheckIntervalKey); it != options.end()) {
    ARROW_ASSIGN_OR_RAISE(interval_ms, ParseDurationMs(kVersionCheckIntervalKey, it->second));
    options.erase(it);
  }
  ARROW_ASSIGN_OR_RAISE(auto store, OpenStore(location, options));
  const bool local = IsLocal(*store);
  if (local && cache_options.given) {
    return arrow::Status::Invalid("storage options 'timelake_cache*' do not apply to a local lake (",
                                  location, "): its files are read where they are");
  }
  // A table opens from its head. Object stores: a head after every commit, and reads check the
  // log at most once per interval. Local disks: a head every kLocalHeadInterval appends (the
  // commits after it are read from the log, which costs no round trips there), and reads check
  // the log every time unless the option says otherwise. memory:// (tests) opens from the log.
  const std::string url = store->RootUrl();
  TableOpenOptions open;
  open.heads = url.rfind("memory://", 0) != 0;
  open.head_interval = local ? kLocalHeadInterval : 1;
  open.check_interval_ms = interval_ms.value_or(local || !open.heads ? 0 : kDefaultCheckIntervalMs);
  auto lake = OverStore(store, open);
  if (!local) {
    ARROW_ASSIGN_OR_RAISE(lake->cache_, FileCache::Make(store, cache_options));
  }
  return lake;
}

std::shared_ptr<Lake> Lake::OverStore(std::shared_ptr<ObjectStore> store,
                                      const TableOpenOptions& open) {
  // Arrow's compute kernels (sort, take, cast, min/max) register on first initialisation; doing
  // it again is a no-op, and it cannot fail for the kernels the wheel ships.
  (void)arrow::compute::Initialize();
  return std::shared_ptr<Lake>(new Lake(std::move(store), open));
}

arrow::Result<TableName> Lake::Resolve(const std::string& name) {
  ARROW_ASSIGN_OR_RAISE(auto parsed, ParseTableName(name));
  ARROW_ASSIGN_OR_RAISE(bool exists, DeltaLog(store_, parsed.path()).Exists());
  if (exists) return parsed;
  ARROW_ASSIGN_OR_RAISE(auto twins, CaseTwins(parsed));
  return twins.empty() ? parsed : twins.front();
}

arrow::Result<std::vector<TableName>> Lake::CaseTwins(const TableName& name) {
  std::vector<TableName> out;
  ARROW_ASSIGN_OR_RAISE(auto namespaces, store_->ListChildren(""));
  for (const auto& ns : namespaces) {
    if (Lower(ns) != Lower(name.ns)) continue;
    ARROW_ASSIGN_OR_RAISE(auto tables, store_->ListChildren(ns + "/"));
    for (const auto& t : tables) {
      const TableName candidate{ns, t};
      if (candidate.path() == name.path() || !SameIgnoringCase(candidate, name)) continue;
      ARROW_ASSIGN_OR_RAISE(bool exists, DeltaLog(store_, candidate.path()).Exists());
      if (exists) out.push_back(candidate);
    }
  }
  return out;
}

arrow::Result<std::shared_ptr<Table>> Lake::CreateTable(const std::string& name,
                                                        const std::shared_ptr<arrow::Schema>& schema,
                                                        const ContractOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto table_name, ParseTableName(name));
  ARROW_ASSIGN_OR_RAISE(auto contract, MakeContract(*schema, options));
  ARROW_ASSIGN_OR_RAISE(auto storage, StorageSchemaOf(*schema));
  // Tables whose names differ only in case must not both come to exist: creations of such names
  // take turns, so the check below and the commit that creates the table are one step.
  ARROW_ASSIGN_OR_RAISE(auto lock, LockName(table_name));
  struct Unlock {
    ObjectStore* store;
    std::string path;
    ~Unlock() { (void)store->Delete(path); }
  } unlock{store_.get(), lock};
  DeltaLog log(store_, table_name.path());
  ARROW_ASSIGN_OR_RAISE(bool exists, log.Exists());
  auto already = [&](const TableName& existing) {
    std::string why = existing.path() == table_name.path()
                          ? ""
                          : " (as '" + existing.qualified() +
                                "': table names are case-insensitive, as in SQL)";
    return arrow::Status::AlreadyExists("table '", table_name.qualified(), "' already exists in ",
                                        store_->RootUrl(), why, "; open it with lake.table('",
                                        existing.qualified(), "') or drop it first");
  };
  if (exists) return already(table_name);
  ARROW_ASSIGN_OR_RAISE(auto twins, CaseTwins(table_name));
  if (!twins.empty()) return already(twins.front());

  Commit commit;
  CommitInfo info;
  info.timestamp = NowMillis();
  info.operation = "CREATE TABLE";
  info.operation_parameters = {{"mode", "ErrorIfExists"}};
  info.engine_info = std::string("timelake/") + TIMELAKE_VERSION;
  info.txn_id = NewUuid();
  commit.commit_info = info;

  Protocol protocol;
  if (NeedsTimestampNtz(*storage)) {
    protocol.min_reader_version = 3;
    protocol.min_writer_version = 7;
    protocol.reader_features = std::vector<std::string>{"timestampNtz"};
    protocol.writer_features = std::vector<std::string>{"appendOnly", "invariants", "timestampNtz"};
  }
  auto widening = options.properties.find("delta.enableTypeWidening");
  if (widening != options.properties.end() && widening->second == "true") {
    protocol = WithFeature(protocol, kTypeWideningFeature);  // widen_columns needs no upgrade
  }
  commit.protocol = protocol;

  Metadata metadata;
  metadata.id = NewUuid();
  metadata.name = table_name.table;
  ARROW_ASSIGN_OR_RAISE(metadata.schema_string, DeltaSchemaString(*storage));
  metadata.configuration = {{"delta.checkpointInterval", "10"},
                            {"delta.setTransactionRetentionDuration", "interval 30 days"}};
  for (const auto& [k, v] : ContractConfiguration(contract)) metadata.configuration[k] = v;
  for (const auto& [k, v] : options.properties) metadata.configuration[k] = v;
  ARROW_ASSIGN_OR_RAISE(metadata.configuration["timelake.arrowSchema"], EncodeArrowSchema(*schema));
  metadata.configuration["timelake.formatVersion"] = "1";
  metadata.created_time = info.timestamp;
  commit.metadata = metadata;

  // Version 0 through the same committer as every other commit (a put whose reply was lost is
  // recognised as this creation), without rebasing: a winner created the table first.
  Snapshot empty;
  PendingCommit pending;
  pending.commit = std::move(commit);
  pending.intent.kind = CommitKind::kCreate;
  pending.rebase = false;
  CommitOutcome outcome;
  // The table's folder is made here only: no other write makes it (LocalStore's fixed levels),
  // so a writer whose table was dropped cannot bring it back.
  ARROW_RETURN_NOT_OK(store_->MakeFolders(table_name.path() + "/_delta_log/"));
  const GenerationBump bump;
  ARROW_RETURN_NOT_OK(Committer(&log, table_name.qualified()).Commit(&empty, &pending, &outcome));
  if (!outcome.version) return already(table_name);
  return Table::Open(store_, table_name.path(), table_name.qualified(), runtime_, open_);
}

arrow::Result<std::shared_ptr<Table>> Lake::OpenTable(const std::string& name) {
  ARROW_ASSIGN_OR_RAISE(auto table_name, ParseTableName(name));
  auto table = Table::Open(store_, table_name.path(), table_name.qualified(), runtime_, open_);
  if (table.ok() || !IsTableNotFound(table.status())) return table;
  ARROW_ASSIGN_OR_RAISE(auto twins, CaseTwins(table_name));
  if (twins.empty()) return table;
  return Table::Open(store_, twins.front().path(), twins.front().qualified(), runtime_, open_);
}

arrow::Result<std::vector<std::string>> Lake::Tables() {
  std::vector<std::string> out;
  ARROW_ASSIGN_OR_RAISE(auto namespaces, store_->ListChildren(""));
  for (const auto& ns : namespaces) {
    if (!IsIdentifier(ns)) continue;
    ARROW_ASSIGN_OR_RAISE(auto tables, store_->ListChildren(ns + "/"));
    for (const auto& t : tables) {
      if (!IsIdentifier(t)) continue;
      // A folder is a table while its log has a commit or checkpoint (a writer that lost its
      // table to a drop may leave an empty `_delta_log/` folder behind).
      ARROW_ASSIGN_OR_RAISE(bool exists, DeltaLog(store_, ns + "/" + t).Exists());
      if (exists) out.push_back(ns + "." + t);
    }
  }
  return out;
}

arrow::Result<std::vector<std::string>> Lake::TablesForRead() {
  const uint64_t generation = CatalogChanges();
  const int64_t now = SteadyMillis();
  {
    std::lock_guard<std::mutex> lock(tables_mutex_);
    if (open_.check_interval_ms > 0 && tables_listed_ms_ >= 0 &&
        now - tables_listed_ms_ < open_.check_interval_ms && generation == tables_generation_) {
      return tables_;
    }
  }
  ARROW_ASSIGN_OR_RAISE(auto listed, Tables());
  std::lock_guard<std::mutex> lock(tables_mutex_);
  tables_ = listed;
  tables_listed_ms_ = now;
  tables_generation_ = generation;
  return listed;
}

arrow::Status Lake::DropTable(const std::string& name) {
  ARROW_ASSIGN_OR_RAISE(auto table_name, Resolve(name));
  const GenerationBump bump;
  // Handles of this process may still have an append's checkpoint or index record to write
  // (table/upkeep.h): written after the drop, it would bring the table's folder back. Handles of
  // the table opened by other Lakes of the process count too (table/lake_runtime.h).
  DrainTableUpkeep(store_->RootUrl() + "/" + table_name.path());
  DeltaLog log(store_, table_name.path());
  ARROW_ASSIGN_OR_RAISE(bool exists, log.Exists());
  if (!exists) {
    return TableNotFound(table_name.qualified());
  }
  SweepDropped(table_name.ns);
  const std::string hidden = table_name.ns + "/" + kDroppedPrefix + NewUuid() + "/";
  arrow::Status renamed = store_->RenamePrefix(table_name.path() + "/", hidden);
  if (renamed.IsNotImplemented()) {
    // Stores without an atomic rename: the log goes first, so the folder stops being a table.
    ARROW_RETURN_NOT_OK(log.DeleteNewestFirst());
    return store_->DeletePrefix(table_name.path() + "/");
  }
  if (IsNotFound(renamed)) return TableNotFound(table_name.qualified());  // a racing drop won
  ARROW_RETURN_NOT_OK(renamed);
  // The table is gone; deleting its files is cleanup. A writer still finishing a data file in
  // the old folder can make one pass fail, and a later drop sweeps what is left.
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (store_->DeletePrefix(hidden).ok()) break;
  }
  return arrow::Status::OK();
}

std::shared_ptr<FileCache> Lake::cache() {
  if (IsLocal(*store_)) return nullptr;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (!cache_) {  // a lake over a store given to OverStore: the default cache
    cache_ = std::make_shared<FileCache>(store_, FileCache::DefaultRoot(), FileCache::DefaultBudget());
  }
  return cache_;
}

arrow::Result<std::string> Lake::LockName(const TableName& name) {
  const std::string path = std::string(kNameLocks) + Lower(name.ns) + "." + Lower(name.table);
  ARROW_RETURN_NOT_OK(store_->MakeFolders(kNameLocks));
  const int64_t deadline = NowMillis() + kNameLockWaitMs;
  for (int attempt = 0;; ++attempt) {
    // "<taken at, ms> <token>": the token tells this creator's lock from another's, since a
    // retried PutIfAbsent can be refused by its own first attempt (object_store.h).
    const std::string mine = std::to_string(NowMillis()) + " " + NewUuid();
    ARROW_ASSIGN_OR_RAISE(bool won, store_->PutIfAbsent(path, arrow::Buffer::FromString(mine)));
    if (won) return path;
    // A lock older than any creation takes was left by a creator that died: break it.
    auto held = store_->Get(path);
    if (held.ok() && (*held)->ToString() == mine) return path;
    if (held.ok()) {
      const std::string text = (*held)->ToString();
      auto since = ParseInt64(text.substr(0, text.find(' ')));
      if (!since || NowMillis() - *since > kNameLockStaleMs) (void)store_->Delete(path);
    } else if (!IsNotFound(held.status())) {
      return held.status();
    }
    if (NowMillis() > deadline) {
      return arrow::Status::IOError("cannot create table '", name.qualified(),
                                    "': another process has been creating a table of that name "
                                    "for ", kNameLockWaitMs / 1000, " s; retry");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(20, 1 + attempt)));
  }
}

void Lake::SweepDropped(const std::string& ns) {
  auto children = store_->ListChildren(ns + "/");
  if (!children.ok()) return;
  for (const auto& c : *children) {
    if (c.rfind(kDroppedPrefix, 0) == 0) (void)store_->DeletePrefix(ns + "/" + c + "/");
  }
}

}  // namespace timelake
