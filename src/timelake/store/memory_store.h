// MemoryStore: an ObjectStore held in process memory, for tests.
//
// Behaves like the other stores (atomic put-if-absent, sorted listings) and lets a test inject
// failures: the fault hook is called before every operation with the operation's name ("get",
// "put", "put_if_absent", "list", "delete", "open_output", "open_input", "head") and the path; a
// non-OK status it returns fails that operation without side effects.
#pragma once

#include <functional>
#include <map>
#include <mutex>

#include "timelake/store/object_store.h"

namespace timelake {

class MemoryStore : public ObjectStore {
 public:
  using FaultHook = std::function<arrow::Status(const std::string& op, const std::string& path)>;

  explicit MemoryStore(std::string name = "test") : name_(std::move(name)) {}

  void SetFaultHook(FaultHook hook);

  arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> GetRange(const std::string& path, int64_t offset,
                                                         int64_t length) override;
  arrow::Result<ObjectMeta> Head(const std::string& path) override;
  arrow::Status Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) override;
  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override;
  arrow::Result<std::shared_ptr<arrow::io::OutputStream>> OpenOutput(
      const std::string& path) override;
  arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInput(
      const std::string& path) override;
  arrow::Result<std::vector<ObjectMeta>> List(const std::string& prefix) override;
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
  };
  arrow::Status Fault(const char* op, const std::string& path);

  std::string name_;
  std::mutex mutex_;
  std::map<std::string, Object> objects_;
  FaultHook hook_;
};

}  // namespace timelake
