#include "timelake/maintain/cleanup.h"

#include <map>
#include <vector>

#include "timelake/log/actions.h"
#include "timelake/log/checkpoint.h"
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
  const std::string root = table_path + "/";
  ARROW_ASSIGN_OR_RAISE(auto listing, store->List(root + "data/"));
  std::vector<std::string> doomed;
  for (const auto& meta : listing) {
    const std::string relative = meta.path.substr(root.size());
    if (snapshot.files.count(relative)) continue;  // live
    auto tombstone = snapshot.tombstones.find(relative);
    const int64_t since = tombstone != snapshot.tombstones.end()
                              ? tombstone->second.deletion_timestamp.value_or(meta.modified_ms)
                              : meta.modified_ms;
    if (since > cutoff) continue;
    doomed.push_back(meta.path);
  }
  // Data files are independent of each other: one bulk delete, in any order.
  ARROW_RETURN_NOT_OK(store->DeleteMany(doomed));
  result.objects_deleted = static_cast<int64_t>(doomed.size());
  return result;
}

}  // namespace timelake
