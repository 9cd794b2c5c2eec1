// DeltaLog: reads and writes one table's `_delta_log/` through an ObjectStore.
//
// Loading reads `_last_checkpoint`, lists the log from the version it names on (never the whole
// log), reads the newest checkpoint found and replays the commits after it: the cost of opening
// a table follows the commits since the last checkpoint, not the length of its history. When
// `_last_checkpoint` is missing, names a checkpoint that is gone, or every checkpoint from there
// on is unreadable, the whole log is listed and every checkpoint tried from the newest down, then
// commit 0, as Delta readers fall back; only when no starting point rebuilds the latest version
// does loading fail, naming what is damaged.
// A commit file must hold at least one action; an empty or blank one is damage, never an empty
// commit. Committing writes `<version>.json` with put-if-absent, so of all writers racing for a
// version exactly one wins; the caller decides what a lost race means.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "timelake/log/actions.h"
#include "timelake/log/log_store.h"
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

  /// Deletes every object of the log, for a drop on a store that cannot rename the table away.
  /// The newest commit goes first and alone: a writer whose put lands on top of it then finds
  /// its head gone when it checks after the put, and takes the put back (txn/committer.h); had
  /// the head stayed to the end of the pass, such a writer would go on committing onto a log
  /// that no longer exists. Listed and deleted again until a listing finds nothing, so that
  /// commits put between a listing and the deletion of its head go too.
  arrow::Status DeleteNewestFirst();

  /// The latest snapshot. Status::KeyError if there is no log; Status::IOError naming the
  /// damaged objects if no checkpoint nor commit 0 leads to the latest version. A load whose
  /// objects vanished meanwhile (a drop, a create at the same path, log expiry: the listing has
  /// changed) starts again.
  arrow::Result<Snapshot> Load();

  /// The snapshot at `version` (time travel), rebuilt from the newest checkpoint at or before it.
  /// KeyError naming the versions that can be read when `version` is not one of them: removed by
  /// log expiry, or not written yet.
  arrow::Result<Snapshot> LoadAt(int64_t version);

  /// The newest version committed at or before `timestamp_ms` (milliseconds since the epoch).
  /// A commit's time is its file's modification time, made increasing along the log as the Delta
  /// protocol says (a commit is never older than the one before it); within 2 s of
  /// `timestamp_ms` the commitInfo's own timestamp is used instead, since object stores list
  /// modification times to the second. KeyError when the oldest readable version is newer than
  /// `timestamp_ms`, naming its time.
  arrow::Result<int64_t> VersionAt(int64_t timestamp_ms);

  /// Advances `snapshot` to the latest committed version, reading only the new commits. First
  /// checks that commit `snapshot->version` is still the one the snapshot was built from. If it
  /// is gone or different, the latest snapshot is loaded: with the same metaData.id (log expiry
  /// removed an old handle's head) it replaces `*snapshot`; otherwise the table was dropped (and
  /// maybe created again) and the result is TableDropped (a KeyError).
  arrow::Status Update(Snapshot* snapshot);

  /// Called by UpdateVisiting() with each new commit and the snapshot before it is applied.
  using CommitVisitor =
      std::function<arrow::Status(int64_t version, const Commit& commit, const Snapshot& before)>;
  /// Update() that shows each new commit to `visit` first; a non-OK status from it stops there
  /// (the snapshot then stays at the version before that commit). When the handle's head expired
  /// and the snapshot had to be reloaded, the commits in between cannot be shown: `*reloaded`
  /// is set (when given) and `visit` is not called for them.
  arrow::Status UpdateVisiting(Snapshot* snapshot, const CommitVisitor& visit, bool* reloaded);

  /// Writes `body` as commit `version` if no commit has that version yet; false if one has.
  /// A body without actions is refused (Status::Invalid): readers would take it for damage.
  /// `visible` as LogStore::PutCommit.
  arrow::Result<bool> TryCommit(int64_t version, const std::string& body,
                                const std::function<void()>& visible = {},
                                ObjectStore::Staged* staged = nullptr);
  /// Makes `body` ready to be put as a commit of any version (ObjectStore::Stage): TryCommit with
  /// the result then only publishes it. `version` is the one expected (for the folder).
  arrow::Result<std::unique_ptr<ObjectStore::Staged>> StageCommit(int64_t version,
                                                                 const std::string& body);

  /// The turn to commit among this machine's writers of the table (a lock on
  /// `_timelake/commit.lock` on local disks; nullptr on object stores, where put-if-absent alone
  /// decides; nullptr too when the holder kept it past half a second). Held while reading the
  /// head and putting the next version, so that writers on one disk queue instead of losing
  /// races to each other.
  arrow::Result<std::unique_ptr<StoreLock>> CommitTurn();

  /// Checks that commit `version` exists and (when `fingerprint` is not 0) has that fingerprint;
  /// TableDropped otherwise.
  arrow::Status CheckHead(int64_t version, uint64_t fingerprint);

  /// Reads the actions of commit `version` (NotFound status if it does not exist); sets
  /// `*fingerprint` to the fingerprint of its bytes when given.
  arrow::Result<Commit> ReadCommit(int64_t version, uint64_t* fingerprint = nullptr);

  /// Writes a checkpoint of `snapshot` at its version, then `_last_checkpoint`.
  arrow::Status Checkpoint(const Snapshot& snapshot);

  /// The oldest version the log can still rebuild (commit 0, or the oldest checkpoint once log
  /// expiry removed the commits before it). Lists the whole log.
  arrow::Result<int64_t> OldestVersion();

  LogStore& store() { return log_store_; }
  const std::string& table_path() const { return table_path_; }
  std::string LogPath(const std::string& name) const;

 private:
  class CommitReadAhead;
  static constexpr int kMaxDeleteRounds = 100;  // DeleteNewestFirst's listings
  /// Rebuilds the latest version from the versions in `versions`, trying each checkpoint from
  /// the newest down and then (when `from_zero`) commit 0; `failures` collects why starts failed.
  arrow::Result<Snapshot> Rebuild(const LogStore::Versions& versions, bool from_zero,
                                  std::vector<std::string>* failures);
  /// One try of Load(); `listed` gets the whole log's listing when it was listed (a load from
  /// the `_last_checkpoint` hint that succeeds lists only from there).
  arrow::Result<Snapshot> LoadListed(LogStore::Versions* listed);

  std::shared_ptr<ObjectStore> store_;
  std::string table_path_;
  LogStore log_store_;
};

}  // namespace timelake
