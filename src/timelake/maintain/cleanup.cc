#include "timelake/maintain/cleanup.h"

#include <map>
#include <set>
#include <vector>

#include "timelake/log/actions.h"
#include "timelake/log/checkpoint.h"
#include "timelake/log/data_path.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

constexpr int64_t kDay = 86'400'000;

std::string FileName(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

arrow::Result<CleanupResult> ExpireLog(ObjectStore* store, const std::string& table_path,
                                       const Snapshot& snapshot, int64_t now_ms) {
  CleanupResult result;
  const int64_t cutoff =
      now_ms - DeltaIntervalMillis(snapshot.Config("delta.logRetentionDuration"), 30 * kDay);
  ARROW_ASSIGN_OR_RAISE(auto listing, store->List(table_path + "/_delta_log/"));
  std::map<int64_t, ObjectMeta> commits, checkpoints;
  for (const auto& meta : listing) {
    const std::string name = FileName(meta.path);
    if (auto v = CommitVersionOf(name)) commits.emplace(*v, meta);
    if (auto v = CheckpointVersionOf(name)) checkpoints.emplace(*v, meta);
  }
  // The newest checkpoint old enough to be the new start of the log (and not beyond the
  // snapshot, which is the newest state this process has verified) that can actually be read:
  // deleting the commits before a damaged checkpoint would leave nothing to rebuild the table.
  int64_t keep_from = -1;
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend() && keep_from < 0; ++it) {
    const auto& [v, meta] = *it;
    if (v > snapshot.version || meta.modified_ms > cutoff) continue;
    auto data = store->Get(meta.path);
    if (!data.ok()) {
      if (IsNotFound(data.status())) continue;  // removed meanwhile: not a start to keep
      return data.status();
    }
    Snapshot probe;
    if (ReadCheckpoint(*data, meta.path, &probe).ok()) keep_from = v;
  }
  if (keep_from <= 0) return result;
  result.oldest_version = keep_from;
  // One by one, oldest first (not DeleteMany, which promises no order): a crash midway must leave
  // the commits that remain contiguous up to the checkpoint, with commit 0 the first to go.
  for (const auto& [v, meta] : commits) {
    if (v >= keep_from) break;
    ARROW_RETURN_NOT_OK(store->Delete(meta.path));
    ++result.objects_deleted;
    ++result.snapshots_expired;
  }
  for (const auto& [v, meta] : checkpoints) {
    if (v >= keep_from) break;
    ARROW_RETURN_NOT_OK(store->Delete(meta.path));
    ++result.objects_deleted;
  }
  return result;
}

arrow::Result<CleanupResult> Vacuum(ObjectStore* store, const std::string& table_path,
                                    const Snapshot& snapshot, int64_t now_ms) {
  CleanupResult result;
  const int64_t cutoff = now_ms - snapshot.DeletedFileRetentionMs();
  // The log names files by URI-encoded paths, the listing by store paths: compare store paths.
  // Files outside the table folder are never under its data/ folder.
  std::set<std::string> live;
  for (const auto& [path, add] : snapshot.files) {
    if (auto store_path = DataFileStorePath(table_path, path); store_path.ok()) {
      live.insert(*store_path);
    }
  }
  std::map<std::string, int64_t> removed_at;
  ARROW_ASSIGN_OR_RAISE(const auto tombstones, snapshot.Tombstones());
  for (const auto& [path, remove] : tombstones) {
    auto store_path = DataFileStorePath(table_path, path);
    if (store_path.ok() && remove.deletion_timestamp) {
      removed_at[*store_path] = *remove.deletion_timestamp;
    }
  }
  ARROW_ASSIGN_OR_RAISE(auto listing, store->List(JoinPath(table_path, "data/")));
  std::vector<std::string> doomed;
  for (const auto& meta : listing) {
    if (live.count(meta.path)) continue;
    auto tombstone = removed_at.find(meta.path);
    const int64_t since = tombstone != removed_at.end() ? tombstone->second : meta.modified_ms;
    if (since > cutoff) continue;
    doomed.push_back(meta.path);
  }
  // Data files are independent of each other: one bulk delete, in any order.
  ARROW_RETURN_NOT_OK(store->DeleteMany(doomed));
  result.objects_deleted = static_cast<int64_t>(doomed.size());
  // A writer holds a temporary file for the seconds of a put at most (a staged commit: until its
  // turn): one an hour old belongs to a writer that died.
  constexpr int64_t kAbandonedTemporaryMs = 3600 * 1000;
  ARROW_ASSIGN_OR_RAISE(int64_t temporaries,
                        store->DeleteAbandonedTemporaries(table_path + "/", now_ms - kAbandonedTemporaryMs));
  result.objects_deleted += temporaries;
  return result;
}

}  // namespace timelake
