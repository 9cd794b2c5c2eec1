#include "timelake/log/log_store.h"

#include <cstdio>

#include <rapidjson/document.h>

#include "timelake/log/actions.h"
#include "timelake/util/status.h"

namespace timelake {
namespace {

std::string FileName(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The 20-digit prefix every log object of `version` starts with.
std::string VersionPrefix(int64_t version) { return CommitFileName(version).substr(0, 20); }

}  // namespace

LogStore::LogStore(std::shared_ptr<ObjectStore> store, std::string table_path)
    : store_(std::move(store)), table_path_(std::move(table_path)) {}

std::string LogStore::Path(const std::string& name) const {
  return table_path_ + "/_delta_log/" + name;
}

arrow::Result<bool> LogStore::PutCommit(int64_t version, const std::string& body,
                                        const std::function<void()>& visible) {
  if (visible) {
    return store_->PutIfAbsentVisible(Path(CommitFileName(version)),
                                      arrow::Buffer::FromString(body), visible);
  }
  return store_->PutIfAbsent(Path(CommitFileName(version)), arrow::Buffer::FromString(body));
}

arrow::Result<std::unique_ptr<ObjectStore::Staged>> LogStore::StageCommit(int64_t version,
                                                                         const std::string& body) {
  return store_->Stage(Path(CommitFileName(version)), arrow::Buffer::FromString(body));
}

arrow::Result<bool> LogStore::PutStagedCommit(int64_t version, ObjectStore::Staged* staged,
                                              const std::function<void()>& visible) {
  return store_->PutStagedIfAbsent(Path(CommitFileName(version)), staged, visible ? visible : [] {});
}

arrow::Result<std::shared_ptr<arrow::Buffer>> LogStore::GetCommit(int64_t version) {
  return store_->Get(Path(CommitFileName(version)));
}

arrow::Result<ObjectMeta> LogStore::HeadCommit(int64_t version) {
  return store_->Head(Path(CommitFileName(version)));
}

arrow::Status LogStore::DeleteCommit(int64_t version) {
  return store_->Delete(Path(CommitFileName(version)));
}

arrow::Result<std::shared_ptr<arrow::Buffer>> LogStore::GetCheckpoint(int64_t version) {
  return store_->Get(Path(CheckpointFileName(version)));
}

arrow::Status LogStore::PutCheckpoint(int64_t version, const std::shared_ptr<arrow::Buffer>& body) {
  return store_->Put(Path(CheckpointFileName(version)), body);
}

arrow::Status LogStore::DeleteCheckpoint(int64_t version) {
  ARROW_RETURN_NOT_OK(store_->Delete(Path(CheckpointFileName(version))));
  if (LastCheckpointHint() == version) return store_->Delete(Path("_last_checkpoint"));
  return arrow::Status::OK();
}

std::optional<int64_t> LogStore::LastCheckpointHint() {
  auto data = store_->Get(Path("_last_checkpoint"));
  if (!data.ok()) return std::nullopt;
  rapidjson::Document doc;
  doc.Parse(reinterpret_cast<const char*>((*data)->data()), static_cast<size_t>((*data)->size()));
  if (doc.HasParseError() || !doc.IsObject()) return std::nullopt;
  auto it = doc.FindMember("version");
  if (it == doc.MemberEnd() || !it->value.IsInt64() || it->value.GetInt64() < 0) {
    return std::nullopt;
  }
  return it->value.GetInt64();
}

arrow::Status LogStore::PutLastCheckpoint(const std::string& json) {
  return store_->Put(Path("_last_checkpoint"), arrow::Buffer::FromString(json));
}

arrow::Result<LogStore::Versions> LogStore::ListVersions(int64_t from) {
  // Every object of version v starts with its 20 digits; '~' sorts after all the characters
  // that follow them ('.', digits), so listing after "<from - 1>~" skips exactly the older ones.
  const std::string start_after = from > 0 ? Path(VersionPrefix(from - 1) + "~") : "";
  const std::string dir = Path("");
  ARROW_ASSIGN_OR_RAISE(auto listing, store_->ListAfter(dir, start_after));
  Versions out;
  for (const auto& meta : listing) {
    // Only the log folder's own entries: a folder inside it (a copy someone left, another
    // engine's `_commits/`) may hold names of commits that are not this log's.
    if (meta.path.compare(0, dir.size(), dir) != 0 ||
        meta.path.find('/', dir.size()) != std::string::npos) {
      continue;
    }
    const std::string name = FileName(meta.path);
    if (auto v = CommitVersionOf(name); v && *v >= from) {
      out.commits.insert(*v);
      out.commit_modified_ms[*v] = meta.modified_ms;
    }
    if (auto v = CheckpointVersionOf(name); v && *v >= from) out.checkpoints.insert(*v);
  }
  return out;
}

bool LogStore::Versions::CheckpointStarts(int64_t version) const {
  if (commits.count(version)) return true;
  return commits.count(version + 1) && *commits.begin() > version;
}

bool LogStore::Versions::HoldsATable() const {
  if (commits.count(0)) return true;
  for (int64_t cp : checkpoints) {
    if (CheckpointStarts(cp)) return true;
  }
  return false;
}

arrow::Result<bool> LogStore::Exists() {
  auto first = store_->Head(Path(CommitFileName(0)));
  if (first.ok()) return true;
  if (!IsNotFound(first.status())) return first.status();
  // An expired log has no commit 0 but starts at a checkpoint. Commits alone are no table (a
  // stray of a dropped table's writer, about to be taken back), nor is a checkpoint alone (the
  // same writer's, after the drop), as DeltaLog::Load agrees.
  ARROW_ASSIGN_OR_RAISE(auto versions, ListVersions(0));
  return versions.HoldsATable();
}

}  // namespace timelake
