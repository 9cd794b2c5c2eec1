#include "timelake/log/delta_log.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <utility>
#include <set>
#include <vector>

#include <rapidjson/document.h>

#include "timelake/log/checkpoint.h"
#include "timelake/util/parallel.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

// "ns/table" -> "ns.table", for messages.
std::string DisplayName(const std::string& table_path) {
  std::string out = table_path;
  std::replace(out.begin(), out.end(), '/', '.');
  return out;
}

}  // namespace

// Replay reads commits ahead of applying them, a window at a time (meant to be read in
// parallel: a log read after many commits, up to a checkpoint stride of 159, is one small read
// and parse after another, each waiting on the store; see kParallelism). A window is bounded so
// that replaying a long log from commit 0 keeps few parsed commits in memory.
class DeltaLog::CommitReadAhead {
 public:
  CommitReadAhead(DeltaLog& log, const std::set<int64_t>& commits, int64_t latest)
      : log_(log), commits_(commits), latest_(latest) {}

  /// Commit `v` (which the listing holds), read with the window it starts if not read yet;
  /// `*fingerprint` gets its fingerprint when `v` is the latest version, else 0.
  arrow::Result<Commit> Take(int64_t v, uint64_t* fingerprint) {
    if (v < first_ || v >= first_ + static_cast<int64_t>(read_.size())) Fill(v);
    Read& read = read_[static_cast<size_t>(v - first_)];
    *fingerprint = read.fingerprint;
    return std::move(read.commit);
  }

 private:
  static constexpr int64_t kWindow = 64;
  // One read at a time for now: reading the window in parallel (2 threads locally, 16 on object
  // stores) made test_drop_and_create_racing_stale_writers_leave_only_the_new_tables_log[gcs]
  // fail (a stale writer's commit reported as rebased past an expired log); to be understood
  // before it is turned back on.
  static constexpr int kParallelism = 1;

  struct Read {
    arrow::Result<Commit> commit = arrow::Status::UnknownError("not read");
    uint64_t fingerprint = 0;
  };

  // Reads the commits from `v` on that the listing holds without a gap, up to a window.
  void Fill(int64_t v) {
    int64_t end = v;
    while (end <= latest_ && end - v < kWindow && commits_.count(end)) ++end;
    first_ = v;
    read_.clear();
    read_.resize(static_cast<size_t>(std::max<int64_t>(end - v, 1)));
    auto read_one = [&](size_t i) {
      const int64_t version = v + static_cast<int64_t>(i);
      read_[i].commit = log_.ReadCommit(version, version == latest_ ? &read_[i].fingerprint : nullptr);
      return arrow::Status::OK();
    };
    (void)RunParallel(read_.size(), kParallelism, read_one);
  }

  DeltaLog& log_;
  const std::set<int64_t>& commits_;
  const int64_t latest_;
  int64_t first_ = 0;
  std::vector<Read> read_;
};

uint64_t CommitFingerprint(std::string_view bytes) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ULL;
  return h == 0 ? 1 : h;
}

DeltaLog::DeltaLog(std::shared_ptr<ObjectStore> store, std::string table_path)
    : store_(store), table_path_(table_path), log_store_(store, table_path) {}

std::string DeltaLog::LogPath(const std::string& name) const { return log_store_.Path(name); }

arrow::Result<bool> DeltaLog::Exists() { return log_store_.Exists(); }

arrow::Status DeltaLog::DeleteNewestFirst() {
  const std::string prefix = LogPath("");
  for (int round = 0;; ++round) {
    ARROW_ASSIGN_OR_RAISE(auto objects, store_->List(prefix));
    if (objects.empty()) return arrow::Status::OK();
    if (round >= kMaxDeleteRounds) {
      return arrow::Status::IOError("cannot delete the log of ", DisplayName(table_path_),
                                    ": writers keep committing to it; stop them and drop again");
    }
    std::optional<int64_t> newest;
    std::string head;
    std::vector<std::string> rest;
    for (const auto& o : objects) {
      auto version = CommitVersionOf(o.path.substr(prefix.size()));
      if (version && (!newest || *version > *newest)) {
        if (!head.empty()) rest.push_back(head);
        newest = version;
        head = o.path;
      } else {
        rest.push_back(o.path);
      }
    }
    if (!head.empty()) ARROW_RETURN_NOT_OK(store_->Delete(head));
    ARROW_RETURN_NOT_OK(store_->DeleteMany(rest));
  }
}

arrow::Result<Snapshot> DeltaLog::Rebuild(const LogStore::Versions& versions, bool from_zero,
                                          std::vector<std::string>* failures) {
  const auto& commits = versions.commits;
  const auto& checkpoints = versions.checkpoints;
  const int64_t latest = std::max(commits.empty() ? -1 : *commits.rbegin(),
                                  checkpoints.empty() ? -1 : *checkpoints.rbegin());
  // Starting points, best first: every checkpoint from the newest down, then commit 0. A
  // start that cannot rebuild the state (an unreadable checkpoint, a missing or corrupt commit
  // after it) gives way to the next, as Delta readers fall back.
  auto replay = [&](Snapshot* snapshot, int64_t from) -> arrow::Status {
    CommitReadAhead ahead(*this, commits, latest);
    for (int64_t v = from; v <= latest; ++v) {
      if (!commits.count(v)) {
        // A gap is damage, unless everything after it is strays of a dropped table's writers
        // (see IsStrayCommit): then the log ends before the gap.
        for (auto w = commits.upper_bound(v); w != commits.end(); ++w) {
          auto later = ReadCommit(*w);
          if (!later.ok() || snapshot->version < 0 ||
              !IsStrayCommit(*later, snapshot->metadata.id)) {
            return arrow::Status::IOError("commit ", LogPath(CommitFileName(v)), " is missing");
          }
        }
        break;
      }
      // Only the head's fingerprint is kept (hashing every replayed commit was ~5% of an open);
      // when strays end the log early, the head is fingerprinted below.
      uint64_t fingerprint = 0;
      ARROW_ASSIGN_OR_RAISE(auto commit, ahead.Take(v, &fingerprint));
      // A stray of a dropped table's writer ends the log here: it is being taken back.
      if (snapshot->version >= 0 && IsStrayCommit(commit, snapshot->metadata.id)) break;
      snapshot->Apply(commit, v);
      snapshot->head_fingerprint = fingerprint;
    }
    if (snapshot->head_fingerprint == 0 && commits.count(snapshot->version)) {
      // A checkpoint with no commit after it (of its table): fingerprint the checkpointed
      // commit, which must be of the checkpoint's table. A dropped table's writer can put its
      // checkpoint into the log of a table created at the same path (object stores have no
      // folders to keep it out); the new table's commits then look like strays to it.
      ARROW_ASSIGN_OR_RAISE(auto head, ReadCommit(snapshot->version, &snapshot->head_fingerprint));
      if (IsStrayCommit(head, snapshot->metadata.id)) {
        return arrow::Status::IOError("the checkpoint belongs to another table (a dropped one of "
                                      "the same name)");
      }
    }
    return arrow::Status::OK();
  };
  for (auto cp = checkpoints.rbegin(); cp != checkpoints.rend(); ++cp) {
    if (!versions.CheckpointStarts(*cp)) {
      failures->push_back("from checkpoint " + std::to_string(*cp) +
                          ": not part of this log (its commit is missing)");
      continue;
    }
    Snapshot snapshot;
    arrow::Status st = [&]() -> arrow::Status {
      ARROW_ASSIGN_OR_RAISE(auto data, log_store_.GetCheckpoint(*cp));
      ARROW_RETURN_NOT_OK(ReadCheckpoint(data, LogPath(CheckpointFileName(*cp)), &snapshot,
                                         CheckpointActions::kLive));
      snapshot.version = *cp;
      snapshot.checkpoint_version = *cp;
      return replay(&snapshot, *cp + 1);
    }();
    if (st.ok()) return snapshot;
    if (IsStoreUnavailable(st)) return st;  // unreadable now, not damaged
    failures->push_back("from checkpoint " + std::to_string(*cp) + ": " + st.message());
  }
  if (!from_zero) return arrow::Status::IOError("no checkpoint leads to version ", latest);
  if (commits.count(0)) {
    Snapshot snapshot;
    arrow::Status st = replay(&snapshot, 0);
    if (st.ok()) return snapshot;
    if (IsStoreUnavailable(st)) return st;  // unreadable now, not damaged
    failures->push_back("from commit 0: " + st.message());
  } else {
    failures->push_back("from commit 0: " + LogPath(CommitFileName(0)) + " is missing");
  }
  std::string why;
  for (const auto& f : *failures) why += (why.empty() ? "" : "; ") + f;
  return arrow::Status::IOError("the Delta log of '", table_path_, "' is damaged: version ", latest,
                                " cannot be rebuilt (", why, ")");
}

arrow::Result<Snapshot> DeltaLog::Load() {
  // The log can change under a load: a drop renames the table's folder away (and a create may
  // put a new table at its path), log expiry deletes old commits and checkpoints. A load that
  // failed on a log whose listing has changed since is started again; one that fails on a log
  // that stays as it was is damaged.
  constexpr int kAttempts = 5;
  for (int attempt = 1;; ++attempt) {
    LogStore::Versions listed;
    auto snapshot = LoadListed(&listed);
    if (snapshot.ok() || attempt == kAttempts || !snapshot.status().IsIOError() ||
        IsStoreUnavailable(snapshot.status())) {
      return snapshot;
    }
    ARROW_ASSIGN_OR_RAISE(auto now, log_store_.ListVersions(0));
    if (now.commits == listed.commits && now.checkpoints == listed.checkpoints) return snapshot;
  }
}

arrow::Result<Snapshot> DeltaLog::LoadListed(LogStore::Versions* listed) {
  std::vector<std::string> failures;
  // The fast way: list from the checkpoint `_last_checkpoint` names. Only the versions from
  // there on are seen, so the oldest version stays unknown (-1) until someone asks.
  if (auto hint = log_store_.LastCheckpointHint()) {
    ARROW_ASSIGN_OR_RAISE(auto recent, log_store_.ListVersions(*hint));
    // Without the checkpoint's own commit, only the whole listing tells an expired log from a
    // dropped table's checkpoint (see Rebuild).
    if (recent.checkpoints.count(*hint) && recent.commits.count(*hint)) {
      auto snapshot = Rebuild(recent, /*from_zero=*/false, &failures);
      if (snapshot.ok()) {
        snapshot->oldest_version = -1;
        return snapshot;
      }
    }
    // A stale hint (its checkpoint gone, or unreadable like every newer one): list it all.
  }
  ARROW_ASSIGN_OR_RAISE(*listed, log_store_.ListVersions(0));
  const LogStore::Versions& versions = *listed;
  // Without commit 0 and without a checkpoint there is no start to read from: no table, or only
  // the stray commit of a writer whose table was just dropped (it takes it back at once).
  if (!versions.HoldsATable()) {
    return arrow::Status::KeyError("no Delta table at '", table_path_, "'");
  }
  ARROW_ASSIGN_OR_RAISE(auto snapshot, Rebuild(versions, /*from_zero=*/true, &failures));
  snapshot.oldest_version = versions.commits.count(0) ? 0 : *versions.checkpoints.begin();
  return snapshot;
}

namespace {

// The versions that can be read from `versions`: from the oldest start (commit 0 or the oldest
// checkpoint) to the newest commit or checkpoint; {-1, -1} for none.
std::pair<int64_t, int64_t> ReadableRange(const LogStore::Versions& versions) {
  const int64_t newest = std::max(versions.commits.empty() ? -1 : *versions.commits.rbegin(),
                                  versions.checkpoints.empty() ? -1 : *versions.checkpoints.rbegin());
  if (versions.commits.count(0)) return {0, newest};
  if (versions.checkpoints.empty()) return {-1, -1};
  return {*versions.checkpoints.begin(), newest};
}

std::string RangeText(std::pair<int64_t, int64_t> range) {
  if (range.first < 0) return "no version can be read";
  if (range.first == range.second) return "only version " + std::to_string(range.first) + " can be read";
  return "versions " + std::to_string(range.first) + " to " + std::to_string(range.second) +
         " can be read";
}

}  // namespace

arrow::Result<Snapshot> DeltaLog::LoadAt(int64_t version) {
  ARROW_ASSIGN_OR_RAISE(auto versions, log_store_.ListVersions(0));
  const auto range = ReadableRange(versions);
  if (range.first < 0) return arrow::Status::KeyError("no Delta table at '", table_path_, "'");
  if (version < range.first || version > range.second) {
    return arrow::Status::KeyError(
        "version ", version, " of '", table_path_, "' cannot be read: ", RangeText(range),
        version < range.first ? " (log expiry removed the older ones: see delta.logRetentionDuration)"
                              : "");
  }
  // The log as it stood at `version`: what came later is not there.
  LogStore::Versions upto;
  upto.commits.insert(versions.commits.begin(), versions.commits.upper_bound(version));
  upto.checkpoints.insert(versions.checkpoints.begin(), versions.checkpoints.upper_bound(version));
  std::vector<std::string> failures;
  ARROW_ASSIGN_OR_RAISE(auto snapshot, Rebuild(upto, /*from_zero=*/true, &failures));
  if (snapshot.version != version) {
    // The log ended before `version` there: the versions after were strays of a dropped table.
    return arrow::Status::KeyError("version ", version, " of '", table_path_,
                                   "' cannot be read: it is not part of this table's log");
  }
  snapshot.oldest_version = range.first;
  return snapshot;
}

arrow::Result<int64_t> DeltaLog::VersionAt(int64_t timestamp_ms) {
  ARROW_ASSIGN_OR_RAISE(auto versions, log_store_.ListVersions(0));
  const auto range = ReadableRange(versions);
  if (range.first < 0) return arrow::Status::KeyError("no Delta table at '", table_path_, "'");
  // Times of the commits from the oldest readable version on, never decreasing.
  int64_t found = -1;
  std::optional<int64_t> previous;
  int64_t oldest_time = 0;
  // Object stores list modification times to the second: near `timestamp_ms` the commit's own
  // time (commitInfo.timestamp, the writer's clock in milliseconds) decides.
  constexpr int64_t kCoarseMs = 2000;
  for (const auto& [v, listed] : versions.commit_modified_ms) {
    if (v < range.first) continue;
    int64_t modified = listed;
    if (std::abs(listed - timestamp_ms) <= kCoarseMs) {
      auto commit = ReadCommit(v);
      if (commit.ok() && commit->commit_info && commit->commit_info->timestamp > 0) {
        modified = commit->commit_info->timestamp;
      }
    }
    const int64_t at = previous ? std::max(modified, *previous + 1) : modified;
    if (!previous) oldest_time = at;
    previous = at;
    if (at > timestamp_ms) break;
    found = v;
  }
  if (found < 0) {
    return arrow::Status::KeyError("no version of '", table_path_, "' is as old as ", FormatIsoMillis(timestamp_ms * 1000),
                                   ": the oldest that can be read (version ", range.first,
                                   ") was committed at ", FormatIsoMillis(oldest_time * 1000));
  }
  return found;
}

arrow::Result<int64_t> DeltaLog::OldestVersion() {
  ARROW_ASSIGN_OR_RAISE(auto versions, log_store_.ListVersions(0));
  if (versions.commits.count(0) || versions.checkpoints.empty()) return 0;
  return *versions.checkpoints.begin();
}

arrow::Status DeltaLog::Update(Snapshot* snapshot) {
  return UpdateVisiting(snapshot, nullptr, nullptr);
}

arrow::Status DeltaLog::UpdateVisiting(Snapshot* snapshot, const CommitVisitor& visit,
                                       bool* reloaded) {
  if (reloaded) *reloaded = false;
  // An empty snapshot (version -1) has no head to check.
  arrow::Status head = snapshot->version < 0
                           ? arrow::Status::OK()
                           : CheckHead(snapshot->version, snapshot->head_fingerprint);
  if (IsTableNotFound(head)) {
    // Gone or different: either the table was dropped (and maybe created again), or the handle
    // is so old that log expiry removed its head. The table's identity tells them apart.
    auto latest = Load();
    if (latest.ok() && latest->metadata.id == snapshot->metadata.id &&
        latest->version >= snapshot->version) {
      *snapshot = std::move(*latest);
      if (reloaded) *reloaded = true;
      return arrow::Status::OK();
    }
    return head;
  }
  ARROW_RETURN_NOT_OK(head);
  for (;;) {
    uint64_t fingerprint = 0;
    auto commit = ReadCommit(snapshot->version + 1, &fingerprint);
    if (!commit.ok()) {
      if (IsNotFound(commit.status())) return arrow::Status::OK();
      return commit.status();
    }
    // A stray of a dropped table's writer is not part of this table: as if absent (its writer,
    // or the next writer of this table, takes it back).
    if (snapshot->version >= 0 && IsStrayCommit(*commit, snapshot->metadata.id)) {
      return arrow::Status::OK();
    }
    if (visit) ARROW_RETURN_NOT_OK(visit(snapshot->version + 1, *commit, *snapshot));
    snapshot->Apply(*commit, snapshot->version + 1);
    snapshot->head_fingerprint = fingerprint;
  }
}

arrow::Status DeltaLog::CheckHead(int64_t version, uint64_t fingerprint) {
  const std::string path = LogPath(CommitFileName(version));
  if (fingerprint == 0) {
    auto meta = store_->Head(path);
    if (meta.ok()) return arrow::Status::OK();
    if (!IsNotFound(meta.status())) return meta.status();
    // Without its JSON commit the version still stands if a checkpoint holds it.
    auto checkpoint = store_->Head(LogPath(CheckpointFileName(version)));
    if (checkpoint.ok()) return arrow::Status::OK();
    if (!IsNotFound(checkpoint.status())) return checkpoint.status();
    return TableDropped(DisplayName(table_path_));
  }
  auto data = store_->Get(path);
  if (!data.ok()) {
    return IsNotFound(data.status()) ? TableDropped(DisplayName(table_path_)) : data.status();
  }
  const std::string_view bytes(reinterpret_cast<const char*>((*data)->data()),
                               static_cast<size_t>((*data)->size()));
  if (CommitFingerprint(bytes) != fingerprint) return TableDropped(DisplayName(table_path_));
  return arrow::Status::OK();
}

arrow::Result<std::unique_ptr<StoreLock>> DeltaLog::CommitTurn() {
  // A turn lasts about a millisecond (a put and a folder fsync); waiting much longer means the
  // holder stopped, and the writers then race as they do without turns.
  constexpr int64_t kTurnWaitMs = 500;
  return store_->LockExclusive(table_path_ + "/_timelake/commit.lock", kTurnWaitMs);
}

namespace {
// Readers take a commit without actions for damage: never write one.
arrow::Status CheckCommitBody(const std::string& body, int64_t version, const std::string& table_path) {
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) {
    return arrow::Status::Invalid("refusing to write commit ", version, " of '", table_path,
                                  "' with no actions");
  }
  return arrow::Status::OK();
}
}  // namespace

arrow::Result<bool> DeltaLog::TryCommit(int64_t version, const std::string& body,
                                        const std::function<void()>& visible,
                                        ObjectStore::Staged* staged) {
  ARROW_RETURN_NOT_OK(CheckCommitBody(body, version, table_path_));
  if (staged) return log_store_.PutStagedCommit(version, staged, visible);
  return log_store_.PutCommit(version, body, visible);
}

arrow::Result<std::unique_ptr<ObjectStore::Staged>> DeltaLog::StageCommit(int64_t version,
                                                                         const std::string& body) {
  ARROW_RETURN_NOT_OK(CheckCommitBody(body, version, table_path_));
  return log_store_.StageCommit(version, body);
}

arrow::Result<Commit> DeltaLog::ReadCommit(int64_t version, uint64_t* fingerprint) {
  const std::string path = LogPath(CommitFileName(version));
  ARROW_ASSIGN_OR_RAISE(auto data, log_store_.GetCommit(version));
  const std::string_view bytes(reinterpret_cast<const char*>(data->data()),
                               static_cast<size_t>(data->size()));
  ARROW_ASSIGN_OR_RAISE(auto commit, ParseCommit(bytes, path));
  if (fingerprint) *fingerprint = CommitFingerprint(bytes);
  return commit;
}

arrow::Status DeltaLog::Checkpoint(const Snapshot& snapshot) {
  const int64_t now = NowMillis();
  // Tombstones stay as long as vacuum keeps the files: a dropped tombstone would make a removed
  // file look never-committed, and vacuum would judge it by its (older) modification time.
  const int64_t tombstone_cutoff = now - snapshot.DeletedFileRetentionMs();
  const std::string txn_retention = snapshot.Config("delta.setTransactionRetentionDuration");
  const int64_t txn_cutoff = txn_retention.empty() ? INT64_MIN : now - DeltaIntervalMillis(txn_retention, 0);
  ARROW_ASSIGN_OR_RAISE(auto body, WriteCheckpoint(snapshot, tombstone_cutoff, txn_cutoff));
  ARROW_RETURN_NOT_OK(log_store_.PutCheckpoint(snapshot.version, body.data));
  const std::string hint = "{\"version\":" + std::to_string(snapshot.version) +
                           ",\"size\":" + std::to_string(body.num_actions) +
                           ",\"sizeInBytes\":" + std::to_string(body.data->size()) +
                           ",\"numOfAddFiles\":" + std::to_string(body.num_add_files) + "}";
  return log_store_.PutLastCheckpoint(hint);
}

}  // namespace timelake
