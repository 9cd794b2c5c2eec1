#include "timelake/store/memory_store.h"

#include <algorithm>

#include <arrow/io/memory.h>

#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

// Buffers writes and publishes the object into the store on Close.
class MemoryOutput : public arrow::io::OutputStream {
 public:
  MemoryOutput(MemoryStore* store, std::string path) : store_(store), path_(std::move(path)) {
    sink_ = arrow::io::BufferOutputStream::Create().ValueOrDie();
  }
  arrow::Status Write(const void* data, int64_t nbytes) override {
    return sink_->Write(data, nbytes);
  }
  arrow::Result<int64_t> Tell() const override { return sink_->Tell(); }
  bool closed() const override { return closed_; }
  arrow::Status Close() override {
    if (closed_) return arrow::Status::OK();
    closed_ = true;
    ARROW_ASSIGN_OR_RAISE(auto buffer, sink_->Finish());
    return store_->Put(path_, buffer);
  }

 private:
  MemoryStore* store_;
  std::string path_;
  std::shared_ptr<arrow::io::BufferOutputStream> sink_;
  bool closed_ = false;
};

}  // namespace

void MemoryStore::SetFaultHook(FaultHook hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  hook_ = std::move(hook);
}

arrow::Status MemoryStore::Fault(const char* op, const std::string& path) {
  FaultHook hook;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    hook = hook_;
  }
  return hook ? hook(op, path) : arrow::Status::OK();
}

arrow::Result<std::shared_ptr<arrow::Buffer>> MemoryStore::Get(const std::string& path) {
  ARROW_RETURN_NOT_OK(Fault("get", path));
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = objects_.find(path);
  if (it == objects_.end()) return NotFound(path);
  return it->second.data;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> MemoryStore::GetRange(const std::string& path,
                                                                    int64_t offset, int64_t length) {
  ARROW_ASSIGN_OR_RAISE(auto data, Get(path));
  offset = std::min(offset, data->size());
  length = std::min(length, data->size() - offset);
  return arrow::SliceBuffer(data, offset, length);
}

arrow::Result<ObjectMeta> MemoryStore::Head(const std::string& path) {
  ARROW_RETURN_NOT_OK(Fault("head", path));
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = objects_.find(path);
  if (it == objects_.end()) return NotFound(path);
  return ObjectMeta{path, it->second.data->size(), it->second.modified_ms};
}

arrow::Status MemoryStore::Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) {
  ARROW_RETURN_NOT_OK(Fault("put", path));
  std::lock_guard<std::mutex> lock(mutex_);
  objects_[path] = {data, NowMillis()};
  return arrow::Status::OK();
}

arrow::Result<bool> MemoryStore::PutIfAbsent(const std::string& path,
                                             const std::shared_ptr<arrow::Buffer>& data) {
  ARROW_RETURN_NOT_OK(Fault("put_if_absent", path));
  std::lock_guard<std::mutex> lock(mutex_);
  return objects_.emplace(path, Object{data, NowMillis()}).second;
}

arrow::Result<std::shared_ptr<arrow::io::OutputStream>> MemoryStore::OpenOutput(
    const std::string& path) {
  ARROW_RETURN_NOT_OK(Fault("open_output", path));
  return std::make_shared<MemoryOutput>(this, path);
}

arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> MemoryStore::OpenInput(
    const std::string& path) {
  ARROW_RETURN_NOT_OK(Fault("open_input", path));
  ARROW_ASSIGN_OR_RAISE(auto data, Get(path));
  return std::make_shared<arrow::io::BufferReader>(data);
}

arrow::Result<std::vector<ObjectMeta>> MemoryStore::List(const std::string& prefix) {
  ARROW_RETURN_NOT_OK(Fault("list", prefix));
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<ObjectMeta> out;
  for (auto it = objects_.lower_bound(prefix);
       it != objects_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    out.push_back({it->first, it->second.data->size(), it->second.modified_ms});
  }
  return out;
}

arrow::Result<std::vector<std::string>> MemoryStore::ListChildren(const std::string& prefix) {
  ARROW_RETURN_NOT_OK(Fault("list", prefix));
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (auto it = objects_.lower_bound(prefix);
       it != objects_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    auto slash = it->first.find('/', prefix.size());
    if (slash == std::string::npos) continue;
    std::string child = it->first.substr(prefix.size(), slash - prefix.size());
    if (out.empty() || out.back() != child) out.push_back(std::move(child));
  }
  return out;
}

arrow::Status MemoryStore::Delete(const std::string& path) {
  ARROW_RETURN_NOT_OK(Fault("delete", path));
  std::lock_guard<std::mutex> lock(mutex_);
  objects_.erase(path);
  return arrow::Status::OK();
}

arrow::Status MemoryStore::DeletePrefix(const std::string& prefix) {
  if (prefix.empty() || prefix.back() != '/') {
    return arrow::Status::Invalid("DeletePrefix needs a folder prefix ending in '/', got '", prefix,
                                  "'");
  }
  ARROW_RETURN_NOT_OK(Fault("delete", prefix));
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = objects_.lower_bound(prefix);
  while (it != objects_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    it = objects_.erase(it);
  }
  return arrow::Status::OK();
}

arrow::Status MemoryStore::RenamePrefix(const std::string& prefix, const std::string& to) {
  if (prefix.empty() || prefix.back() != '/' || to.empty() || to.back() != '/') {
    return arrow::Status::Invalid("RenamePrefix needs folder prefixes ending in '/', got '", prefix,
                                  "' and '", to, "'");
  }
  ARROW_RETURN_NOT_OK(Fault("rename", prefix));
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = objects_.lower_bound(prefix);
  if (it == objects_.end() || it->first.compare(0, prefix.size(), prefix) != 0) {
    return NotFound(prefix);
  }
  while (it != objects_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    objects_[to + it->first.substr(prefix.size())] = std::move(it->second);
    it = objects_.erase(it);
  }
  return arrow::Status::OK();
}

}  // namespace timelake
