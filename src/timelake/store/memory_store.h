// MemoryStore: an ObjectStore held in process memory, for tests.
//
// Behaves like the other stores (atomic put-if-absent and put-if-match, sorted listings; entity
// tags are a store-wide generation counter) and lets a test inject failures: the fault hook is
// called before every operation with the operation's name ("get", "put", "put_if_absent",
// "put_if_match", "list" (once per listing page), "delete", "open_output", "open_input", "head",
// "rename") and the path; a non-OK status it returns fails that operation without side effects.
// An output stream publishes its object with a "put" on Close. FaultStore (store/fault_store.h)
// does the same for any store, with counted operations, lost replies and crashes.
//
// Each MemoryStore is its own namespace of objects: two stores with the same name share nothing.
// Output streams keep a pointer to their store, which must outlive them. Thread-safe.
//
// A store made machine-local also acts as a local lake does for the writers of one machine, its
// handles standing for processes: LockExclusive takes in-process locks (made, like LocalStore's,
// only where the folder above the lock's folder holds objects; the lock is an empty object) and
// AsLocalFiles gives its MemoryFiles (store/memory_files.h), so that the group-commit spool runs
// over it. Its files are not objects: listings do not show them, and the fault hook does not see
// them or the locks. Other stores have no locks and no LocalFiles, as object stores; files() is
// there for tests either way. The files ask their store which folders exist: like output
// streams, they must not be used after the store is gone (locks may outlive it).
#pragma once

#include <functional>
#include <map>
#include <mutex>

#include "timelake/store/memory_files.h"
#include "timelake/store/object_store.h"

namespace timelake {

class MemoryStore : public ObjectStore {
 public:
  using FaultHook = std::function<arrow::Status(const std::string& op, const std::string& path)>;

  /// `machine_local`: see above.
  explicit MemoryStore(std::string name = "test", bool machine_local = false);
  /// The paths of a machine-local store that are locked (memory_store.cc).
  struct Locks;

  void SetFaultHook(FaultHook hook);

  /// The store's LocalFiles, machine-local or not (tests of the files themselves).
  const std::shared_ptr<MemoryFiles>& files() const { return files_; }
  /// files(), for a machine-local store; nullptr otherwise.
  std::shared_ptr<LocalFiles> AsLocalFiles() override;
  bool HasLocks() const override { return machine_local_; }
  /// For a machine-local store, an in-process lock (polled up to `wait_ms`); nullptr otherwise.
  arrow::Result<std::unique_ptr<StoreLock>> LockExclusive(const std::string& path,
                                                          int64_t wait_ms) override;

  arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> GetRange(const std::string& path, int64_t offset,
                                                         int64_t length) override;
  arrow::Result<ObjectMeta> Head(const std::string& path) override;
  arrow::Status Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) override;
  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override;
  arrow::Result<bool> PutIfMatch(const std::string& path,
                                 const std::shared_ptr<arrow::Buffer>& data,
                                 const std::string& etag) override;
  using ObjectStore::OpenOutput;
  arrow::Result<std::shared_ptr<ObjectOutput>> OpenOutput(const std::string& path,
                                                          const OutputOptions& options) override;
  arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInput(
      const std::string& path) override;
  arrow::Result<ObjectPage> ListPage(const ListPageRequest& request) override;
  arrow::Result<std::vector<std::string>> ListChildren(const std::string& prefix) override;
  arrow::Status Delete(const std::string& path) override;
  arrow::Status DeletePrefix(const std::string& prefix) override;
  arrow::Status RenamePrefix(const std::string& prefix, const std::string& to) override;
  std::string RootUrl() const override { return "memory://" + name_; }
  std::string ExternalPath(const std::string& path) const override {
    return RootUrl() + "/" + path;
  }

 private:
  struct Object {
    std::shared_ptr<arrow::Buffer> data;
    int64_t modified_ms;
    int64_t generation;  // the entity tag
  };
  arrow::Status Fault(const char* op, const std::string& path);
  /// REQUIRES: mutex_ held.
  Object NewObject(std::shared_ptr<arrow::Buffer> data);
  static ObjectMeta MetaOf(const std::string& path, const Object& object);

  /// Whether an object's path starts with `folder` + '/'.
  bool HasFolder(const std::string& folder);

  std::string name_;
  bool machine_local_;
  std::shared_ptr<MemoryFiles> files_;
  std::shared_ptr<Locks> locks_;  // shared with the locks handed out
  std::mutex mutex_;
  std::map<std::string, Object> objects_;  // GUARDED_BY(mutex_)
  int64_t generation_ = 0;                  // GUARDED_BY(mutex_): the last one handed out
  FaultHook hook_;                          // GUARDED_BY(mutex_)
};

}  // namespace timelake
