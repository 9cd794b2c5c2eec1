#include "timelake/log/delta_log.h"

#include <algorithm>
#include <set>
#include <vector>

#include <rapidjson/document.h>

#include "timelake/log/checkpoint.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

std::string FileName(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "ns/table" -> "ns.table", for messages.
std::string DisplayName(const std::string& table_path) {
  std::string out = table_path;
  std::replace(out.begin(), out.end(), '/', '.');
  return out;
}

}  // namespace

uint64_t CommitFingerprint(std::string_view bytes) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ULL;
  return h == 0 ? 1 : h;
}

DeltaLog::DeltaLog(std::shared_ptr<ObjectStore> store, std::string table_path)
    : store_(std::move(store)), table_path_(std::move(table_path)) {}

std::string DeltaLog::LogPath(const std::string& name) const {
  return table_path_ + "/_delta_log/" + name;
}

arrow::Result<bool> DeltaLog::Exists() {
  ARROW_ASSIGN_OR_RAISE(auto listing, store_->List(LogPath("")));
  for (const auto& meta : listing) {
    const std::string name = FileName(meta.path);
    if (CommitVersionOf(name) || CheckpointVersionOf(name)) return true;
  }
  return false;
}

arrow::Result<Snapshot> DeltaLog::Load() {
  ARROW_ASSIGN_OR_RAISE(auto listing, store_->List(LogPath("")));
  std::set<int64_t> commits, checkpoints;
  for (const auto& meta : listing) {
    const std::string name = FileName(meta.path);
    if (auto v = CommitVersionOf(name)) commits.insert(*v);
    if (auto v = CheckpointVersionOf(name)) checkpoints.insert(*v);
  }
  // Without commit 0 and without a checkpoint there is no start to read from: no table, or only
  // the stray commit of a writer whose table was just dropped (it takes it back at once).
  if (checkpoints.empty() && !commits.count(0)) {
    return arrow::Status::KeyError("no Delta table at '", table_path_, "'");
  }
  const int64_t latest = std::max(commits.empty() ? -1 : *commits.rbegin(),
                                  checkpoints.empty() ? -1 : *checkpoints.rbegin());
  const int64_t oldest = commits.count(0) ? 0 : checkpoints.empty() ? 0 : *checkpoints.begin();

  // Starting points, best first: every checkpoint from the newest down, then commit 0. A
  // start that cannot rebuild the state (an unreadable checkpoint, a missing or corrupt commit
  // after it) gives way to the next, as Delta readers fall back; why each failed is kept for
  // the error if none succeeds.
  std::vector<std::string> failures;
  auto replay = [&](Snapshot* snapshot, int64_t from) -> arrow::Status {
    for (int64_t v = from; v <= latest; ++v) {
      if (!commits.count(v)) {
        return arrow::Status::IOError("commit ", LogPath(CommitFileName(v)), " is missing");
      }
      ARROW_ASSIGN_OR_RAISE(auto commit, ReadCommit(v, &snapshot->head_fingerprint));
      snapshot->Apply(commit, v);
    }
    if (from > latest && commits.count(latest)) {
      // A checkpoint with no commit after it: fingerprint the checkpointed commit.
      ARROW_RETURN_NOT_OK(ReadCommit(latest, &snapshot->head_fingerprint).status());
    }
    return arrow::Status::OK();
  };
  for (auto cp = checkpoints.rbegin(); cp != checkpoints.rend(); ++cp) {
    const std::string path = LogPath(CheckpointFileName(*cp));
    Snapshot snapshot;
    arrow::Status st = [&]() -> arrow::Status {
      ARROW_ASSIGN_OR_RAISE(auto data, store_->Get(path));
      ARROW_RETURN_NOT_OK(ReadCheckpoint(data, path, &snapshot));
      snapshot.version = *cp;
      snapshot.checkpoint_version = *cp;
      return replay(&snapshot, *cp + 1);
    }();
    if (st.ok()) {
      snapshot.oldest_version = oldest;
      return snapshot;
    }
    failures.push_back("from checkpoint " + std::to_string(*cp) + ": " + st.message());
  }
  if (commits.count(0)) {
    Snapshot snapshot;
    arrow::Status st = replay(&snapshot, 0);
    if (st.ok()) {
      snapshot.oldest_version = 0;
      return snapshot;
    }
    failures.push_back("from commit 0: " + st.message());
  } else {
    failures.push_back("from commit 0: " + LogPath(CommitFileName(0)) + " is missing");
  }
  std::string why;
  for (const auto& f : failures) why += (why.empty() ? "" : "; ") + f;
  return arrow::Status::IOError("the Delta log of '", table_path_, "' is damaged: version ", latest,
                                " cannot be rebuilt (", why, ")");
}

arrow::Status DeltaLog::Update(Snapshot* snapshot) {
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
    auto checkpoint = store_->Head(LogPath(CommitFileName(version).substr(0, 20) +
                                           ".checkpoint.parquet"));
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

arrow::Result<bool> DeltaLog::TryCommit(int64_t version, const std::string& body) {
  // Readers take a commit without actions for damage: never write one.
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) {
    return arrow::Status::Invalid("refusing to write commit ", version,
                                  " of '", table_path_, "' with no actions");
  }
  return store_->PutIfAbsent(LogPath(CommitFileName(version)), arrow::Buffer::FromString(body));
}

arrow::Result<Commit> DeltaLog::ReadCommit(int64_t version, uint64_t* fingerprint) {
  const std::string path = LogPath(CommitFileName(version));
  ARROW_ASSIGN_OR_RAISE(auto data, store_->Get(path));
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
  ARROW_RETURN_NOT_OK(store_->Put(LogPath(CheckpointFileName(snapshot.version)), body.data));
  const std::string hint = "{\"version\":" + std::to_string(snapshot.version) +
                           ",\"size\":" + std::to_string(body.num_actions) +
                           ",\"sizeInBytes\":" + std::to_string(body.data->size()) +
                           ",\"numOfAddFiles\":" + std::to_string(body.num_add_files) + "}";
  return store_->Put(LogPath("_last_checkpoint"), arrow::Buffer::FromString(hint));
}

}  // namespace timelake
