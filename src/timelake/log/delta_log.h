// DeltaLog: reads and writes one table's `_delta_log/` through an ObjectStore.
//
// Loading finds the newest checkpoint (using `_last_checkpoint` as a hint, then the listing) and
// replays the commits after it. Committing writes `<version>.json` with put-if-absent, so of all
// writers racing for a version exactly one wins; the caller decides what a lost race means.
#pragma once

#include <memory>
#include <string>

#include "timelake/log/actions.h"
#include "timelake/log/snapshot.h"
#include "timelake/store/object_store.h"

namespace timelake {

/// The fingerprint of a commit's bytes (never 0).
uint64_t CommitFingerprint(std::string_view bytes);

class DeltaLog {
 public:
  /// `table_path` is the table's folder relative to the store root (e.g. "iot/readings").
  DeltaLog(std::shared_ptr<ObjectStore> store, std::string table_path);

  /// True if the folder holds a Delta log (at least one commit or checkpoint).
  arrow::Result<bool> Exists();

  /// The latest snapshot. Status::KeyError if there is no log.
  arrow::Result<Snapshot> Load();

  /// Advances `snapshot` to the latest committed version, reading only the new commits. First
  /// checks that commit `snapshot->version` is still the one the snapshot was built from. If it
  /// is gone or different, the latest snapshot is loaded: with the same metaData.id (log expiry
  /// removed an old handle's head) it replaces `*snapshot`; otherwise the table was dropped (and
  /// maybe created again) and the result is TableDropped (a KeyError).
  arrow::Status Update(Snapshot* snapshot);

  /// Writes `body` as commit `version` if no commit has that version yet; false if one has.
  arrow::Result<bool> TryCommit(int64_t version, const std::string& body);

  /// Checks that commit `version` exists and (when `fingerprint` is not 0) has that fingerprint;
  /// TableDropped otherwise.
  arrow::Status CheckHead(int64_t version, uint64_t fingerprint);

  /// Reads the actions of commit `version` (NotFound status if it does not exist); sets
  /// `*fingerprint` to the fingerprint of its bytes when given.
  arrow::Result<Commit> ReadCommit(int64_t version, uint64_t* fingerprint = nullptr);

  /// Writes a checkpoint of `snapshot` at its version, then `_last_checkpoint`.
  arrow::Status Checkpoint(const Snapshot& snapshot);

  const std::string& table_path() const { return table_path_; }
  std::string LogPath(const std::string& name) const;

 private:
  std::shared_ptr<ObjectStore> store_;
  std::string table_path_;
};

}  // namespace timelake
