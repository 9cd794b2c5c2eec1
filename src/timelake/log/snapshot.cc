#include "timelake/log/snapshot.h"

#include <algorithm>

#include "timelake/util/time.h"

namespace timelake {

void Snapshot::Apply(const Commit& commit, int64_t commit_version) {
  if (commit.protocol) protocol = *commit.protocol;
  if (commit.metadata) metadata = *commit.metadata;
  for (const auto& t : commit.txns) txns[t.app_id] = t;
  for (const auto& r : commit.removes) {
    files.erase(r.path);
    tombstones[r.path] = r;
  }
  for (const auto& a : commit.adds) {
    tombstones.erase(a.path);
    files[a.path] = a;
  }
  version = commit_version;
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
