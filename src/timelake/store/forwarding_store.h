// ForwardingStore: an ObjectStore that passes every call to another store.
//
// The base of decorators (fault injection, counting, tracing), like LevelDB's EnvWrapper: a
// decorator derives from it and overrides only the calls it changes. Every method, including
// those with defaults in ObjectStore (ListAfter, DeleteMany, MakeFolders, SyncFolder,
// RenamePrefix), forwards to the target's own, so a decorator keeps the target's better
// implementations. Except these: PutDerived, PutIfAbsentVisible, Stage and PutStagedIfAbsent keep
// ObjectStore's defaults, which call this store's Put and PutIfAbsent, so that a decorator
// overriding those sees every index write and every commit (a decorator that wants the target's
// own forwards them itself, as FaultStore does). Nor is AsLocalFiles forwarded: a decorator gives
// none (ObjectStore's nullptr), since the calls to the target's files would bypass it; a lake over
// a decorator has no cross-process spool. Thread-safe if the target is.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "timelake/store/object_store.h"

namespace timelake {

class ForwardingStore : public ObjectStore {
 public:
  /// `target` must not be null.
  explicit ForwardingStore(std::shared_ptr<ObjectStore> target) : target_(std::move(target)) {}

  /// The store every call goes to.
  const std::shared_ptr<ObjectStore>& target() const { return target_; }

  arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) override {
    return target_->Get(path);
  }
  arrow::Result<DatedObject> GetDated(const std::string& path) override {
    return target_->GetDated(path);
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> GetRange(const std::string& path, int64_t offset,
                                                         int64_t length) override {
    return target_->GetRange(path, offset, length);
  }
  arrow::Result<ObjectMeta> Head(const std::string& path) override { return target_->Head(path); }
  bool HasLocks() const override { return target_->HasLocks(); }
  arrow::Result<std::unique_ptr<StoreLock>> LockExclusive(const std::string& path,
                                                          int64_t wait_ms) override {
    return target_->LockExclusive(path, wait_ms);
  }
  arrow::Status Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) override {
    return target_->Put(path, data);
  }
  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override {
    return target_->PutIfAbsent(path, data);
  }
  arrow::Result<bool> PutIfMatch(const std::string& path,
                                 const std::shared_ptr<arrow::Buffer>& data,
                                 const std::string& etag) override {
    return target_->PutIfMatch(path, data, etag);
  }
  using ObjectStore::OpenOutput;
  arrow::Result<std::shared_ptr<ObjectOutput>> OpenOutput(const std::string& path,
                                                          const OutputOptions& options) override {
    return target_->OpenOutput(path, options);
  }
  arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInput(
      const std::string& path) override {
    return target_->OpenInput(path);
  }
  bool ListsFromName() const override { return target_->ListsFromName(); }
  arrow::Result<ObjectPage> ListPage(const ListPageRequest& request) override {
    return target_->ListPage(request);
  }
  arrow::Result<std::vector<ObjectMeta>> ListAfter(const std::string& prefix,
                                                   const std::string& start_after) override {
    return target_->ListAfter(prefix, start_after);
  }
  arrow::Result<std::vector<std::string>> ListChildren(const std::string& prefix) override {
    return target_->ListChildren(prefix);
  }
  arrow::Status Delete(const std::string& path) override { return target_->Delete(path); }
  arrow::Status DeleteMany(const std::vector<std::string>& paths) override {
    return target_->DeleteMany(paths);
  }
  arrow::Status DeletePrefix(const std::string& prefix) override {
    return target_->DeletePrefix(prefix);
  }
  arrow::Status MakeFolders(const std::string& prefix) override {
    return target_->MakeFolders(prefix);
  }
  arrow::Status SyncFolder(const std::string& prefix) override {
    return target_->SyncFolder(prefix);
  }
  arrow::Status RenamePrefix(const std::string& prefix, const std::string& to) override {
    return target_->RenamePrefix(prefix, to);
  }
  arrow::Result<int64_t> DeleteAbandonedTemporaries(const std::string& prefix,
                                                     int64_t older_than_ms) override {
    return target_->DeleteAbandonedTemporaries(prefix, older_than_ms);
  }
  std::string RootUrl() const override { return target_->RootUrl(); }
  std::string ExternalPath(const std::string& path) const override {
    return target_->ExternalPath(path);
  }

 private:
  std::shared_ptr<ObjectStore> target_;
};

}  // namespace timelake
