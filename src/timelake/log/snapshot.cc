#include "timelake/log/snapshot.h"

#include <algorithm>

#include "timelake/util/time.h"

namespace timelake {

void Snapshot::Apply(const Commit& commit, int64_t commit_version) {
  if (commit.protocol) protocol = *commit.protocol;
  if (commit.metadata) metadata = *commit.metadata;
  for (const auto& t : commit.txns) recent_txns[t.app_id] = t;
  for (const auto& r : commit.removes) {
    files.erase(r.path);
    recent_tombstones[r.path] = r;
  }
  // A file added again hides a tombstone of the history too: FindTombstone looks at `files`.
  for (const auto& a : commit.adds) {
    recent_tombstones.erase(a.path);
    files[a.path] = a;
  }
  version = commit_version;
}

arrow::Result<const Txn*> Snapshot::FindTxn(const std::string& app_id) const {
  if (auto it = recent_txns.find(app_id); it != recent_txns.end()) return &it->second;
  if (!history) return nullptr;
  ARROW_ASSIGN_OR_RAISE(const auto* old, history->txns());
  auto it = old->find(app_id);
  return it == old->end() ? nullptr : &it->second;
}

arrow::Result<const RemoveFile*> Snapshot::FindTombstone(const std::string& path) const {
  if (auto it = recent_tombstones.find(path); it != recent_tombstones.end()) return &it->second;
  if (!history || files.count(path)) return nullptr;
  ARROW_ASSIGN_OR_RAISE(const auto* old, history->tombstones());
  auto it = old->find(path);
  return it == old->end() ? nullptr : &it->second;
}

arrow::Result<std::map<std::string, Txn>> Snapshot::Txns() const {
  if (!history) return recent_txns;
  ARROW_ASSIGN_OR_RAISE(const auto* old, history->txns());
  std::map<std::string, Txn> all = *old;
  for (const auto& [app_id, t] : recent_txns) all[app_id] = t;
  return all;
}

arrow::Result<std::map<std::string, RemoveFile>> Snapshot::Tombstones() const {
  if (!history) return recent_tombstones;
  ARROW_ASSIGN_OR_RAISE(const auto* old, history->tombstones());
  std::map<std::string, RemoveFile> all;
  for (const auto& [path, r] : *old) {
    if (!files.count(path)) all.emplace(path, r);
  }
  for (const auto& [path, r] : recent_tombstones) all[path] = r;
  return all;
}

int64_t Snapshot::HistoryEntries() const {
  return static_cast<int64_t>(recent_txns.size() + recent_tombstones.size()) +
         (history ? history->entries() : 0);
}

std::string Snapshot::Config(const std::string& key, const std::string& fallback) const {
  auto it = metadata.configuration.find(key);
  return it == metadata.configuration.end() ? fallback : it->second;
}

int64_t Snapshot::DeletedFileRetentionMs() const {
  const int64_t configured =
      DeltaIntervalMillis(Config("delta.deletedFileRetentionDuration"), kMinDeletedFileRetentionMs);
  if (Config(kRetentionCheckKey) == "false") return configured;
  return std::max(configured, kMinDeletedFileRetentionMs);
}

}  // namespace timelake
