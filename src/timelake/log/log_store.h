// LogStore: the objects of one table's `_delta_log/`, addressed by version.
//
// The layer between the Delta log logic (DeltaLog, the committer) and the ObjectStore: it knows
// the file names of commits and checkpoints and how to find versions without reading the whole
// folder. Finding the latest version lists only from a known version on (list-after-key), so its
// cost follows the commits since the last checkpoint, not the length of the log.
//
// Every put of a commit is put-if-absent: this is the whole of Delta's mutual exclusion, so a
// store without an atomic put-if-absent (an S3 bucket without conditional writes) cannot hold a
// table that more than one writer commits to. timelake does not support such stores (delta-rs
// needs a DynamoDB lock for them); every store it ships has put-if-absent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <map>
#include <set>
#include <string>

#include "timelake/store/object_store.h"

namespace timelake {

class LogStore {
 public:
  /// `table_path` is the table's folder relative to the store root (e.g. "iot/readings").
  LogStore(std::shared_ptr<ObjectStore> store, std::string table_path);

  /// Writes commit `version` if no commit has that version: true if this call wrote it; false
  /// if one exists (which may be the caller's own, from an earlier attempt whose reply was
  /// lost: compare the contents). An error may mean the write happened anyway (see
  /// object_store.h).
  /// `visible` (when given) runs once the outcome is decided, before the commit is durable
  /// (ObjectStore::PutIfAbsentVisible).
  arrow::Result<bool> PutCommit(int64_t version, const std::string& body,
                                const std::function<void()>& visible = {});
  /// `body` staged for a commit (ObjectStore::Stage) in the log's folder; `version` the one
  /// expected. PutStagedCommit puts it as any version, as PutCommit would.
  arrow::Result<std::unique_ptr<ObjectStore::Staged>> StageCommit(int64_t version, const std::string& body);
  arrow::Result<bool> PutStagedCommit(int64_t version, ObjectStore::Staged* staged,
                                      const std::function<void()>& visible = {});
  /// The bytes of commit `version`; a NotFound status if there is none.
  arrow::Result<std::shared_ptr<arrow::Buffer>> GetCommit(int64_t version);
  /// The metadata of commit `version` (NotFound if there is none).
  arrow::Result<ObjectMeta> HeadCommit(int64_t version);
  /// Deletes commit `version`: only for taking back a commit that must not stand (one put into
  /// a table that was dropped meanwhile), before anyone can have built on it.
  arrow::Status DeleteCommit(int64_t version);

  arrow::Result<std::shared_ptr<arrow::Buffer>> GetCheckpoint(int64_t version);
  arrow::Status PutCheckpoint(int64_t version, const std::shared_ptr<arrow::Buffer>& body);
  /// Deletes checkpoint `version` and, if it points there, `_last_checkpoint`.
  arrow::Status DeleteCheckpoint(int64_t version);

  /// The version `_last_checkpoint` names, if the object exists and parses. A hint only: the
  /// checkpoint it names may be gone or damaged, and newer ones may exist.
  std::optional<int64_t> LastCheckpointHint();
  arrow::Status PutLastCheckpoint(const std::string& json);

  struct Versions {
    std::set<int64_t> commits;      // versions with a JSON commit
    std::set<int64_t> checkpoints;  // versions with a classic checkpoint
    std::map<int64_t, int64_t> commit_modified_ms;  // when each commit was written

    /// True if checkpoint `version` can start this log: its own commit is there (Delta's log
    /// cleanup keeps the commit of the checkpoint it starts from), or the next one is and no
    /// older commit remains (a cleanup that took the checkpoint's commit too). A checkpoint
    /// beyond the commits, or with a gap below it, is a dropped table's, put by its stale writer
    /// after the drop (object stores have no folder to keep it out).
    bool CheckpointStarts(int64_t version) const;
    /// True if the listing holds a table: commit 0, or a checkpoint that can start it.
    bool HoldsATable() const;
  };
  /// The commits and checkpoints of version `from` and later, from one listing that starts
  /// after the names of version `from - 1` (the whole log when `from` is 0).
  arrow::Result<Versions> ListVersions(int64_t from);
  /// True if the log holds a table (Versions::HoldsATable).
  arrow::Result<bool> Exists();

  /// The path of the log object `name` relative to the store root.
  std::string Path(const std::string& name) const;
  const std::string& table_path() const { return table_path_; }

 private:
  std::shared_ptr<ObjectStore> store_;
  std::string table_path_;
};

}  // namespace timelake
