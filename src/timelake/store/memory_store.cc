#include "timelake/store/memory_store.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include <arrow/io/memory.h>

#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

// Buffers writes and publishes the object into the store on Close.
class MemoryOutput : public ObjectOutput {
 public:
  MemoryOutput(MemoryStore* store, std::string path,
               std::shared_ptr<arrow::io::BufferOutputStream> sink)
      : store_(store), path_(std::move(path)), sink_(std::move(sink)) {}
  arrow::Status Write(const void* data, int64_t nbytes) override {
    if (sink_ == nullptr) {
      return arrow::Status::Invalid("write to a closed stream for '", path_, "'");
    }
    return sink_->Write(data, nbytes);
  }
  arrow::Result<int64_t> Tell() const override {
    if (sink_ == nullptr) return arrow::Status::Invalid("stream for '", path_, "' is closed");
    return sink_->Tell();
  }
  bool closed() const override { return sink_ == nullptr; }
  arrow::Status Close() override {
    if (sink_ == nullptr) return arrow::Status::OK();
    auto sink = std::move(sink_);
    ARROW_ASSIGN_OR_RAISE(auto buffer, sink->Finish());
    return store_->Put(path_, buffer);
  }
  arrow::Status Abort() override {
    sink_.reset();
    return arrow::Status::OK();
  }

 private:
  MemoryStore* store_;
  std::string path_;
  std::shared_ptr<arrow::io::BufferOutputStream> sink_;  // null once closed or aborted
};

}  // namespace

struct MemoryStore::Locks {
  std::mutex mutex;
  std::set<std::string> held;  // GUARDED_BY(mutex)
};

namespace {

class MemoryLock : public StoreLock {
 public:
  MemoryLock(std::shared_ptr<MemoryStore::Locks> locks, std::string path)
      : locks_(std::move(locks)), path_(std::move(path)) {}
  ~MemoryLock() override {
    std::lock_guard<std::mutex> lock(locks_->mutex);
    locks_->held.erase(path_);
  }
  MemoryLock(const MemoryLock&) = delete;
  MemoryLock& operator=(const MemoryLock&) = delete;

 private:
  std::shared_ptr<MemoryStore::Locks> locks_;
  std::string path_;
};

std::string FolderOf(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

}  // namespace

MemoryStore::MemoryStore(std::string name, bool machine_local)
    : name_(std::move(name)),
      machine_local_(machine_local),
      files_(std::make_shared<MemoryFiles>(
          [this](const std::string& folder) { return HasFolder(folder); })),
      locks_(std::make_shared<Locks>()) {}

bool MemoryStore::HasFolder(const std::string& folder) {
  if (folder.empty()) return true;
  const std::string prefix = folder + "/";
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = objects_.lower_bound(prefix);
  return it != objects_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

std::shared_ptr<LocalFiles> MemoryStore::AsLocalFiles() {
  return machine_local_ ? files_ : nullptr;
}

arrow::Result<std::unique_ptr<StoreLock>> MemoryStore::LockExclusive(const std::string& path,
                                                                     int64_t wait_ms) {
  if (!machine_local_) return nullptr;
  // One level only, as LocalStore: a lock in a dropped table's folder must not bring it back.
  const std::string folder = FolderOf(path);
  if (!HasFolder(folder) && !HasFolder(FolderOf(folder))) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!objects_.count(path)) {
      objects_.emplace(path, NewObject(std::make_shared<arrow::Buffer>(nullptr, 0)));
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (int64_t pause_us = 20;; pause_us = std::min<int64_t>(pause_us * 2, 250)) {
    {
      std::lock_guard<std::mutex> lock(locks_->mutex);
      if (locks_->held.insert(path).second) {
        return std::unique_ptr<StoreLock>(new MemoryLock(locks_, path));
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return nullptr;
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
}

MemoryStore::Object MemoryStore::NewObject(std::shared_ptr<arrow::Buffer> data) {
  return Object{std::move(data), NowMillis(), ++generation_};
}

ObjectMeta MemoryStore::MetaOf(const std::string& path, const Object& object) {
  return ObjectMeta{path, object.data->size(), object.modified_ms,
                    std::to_string(object.generation)};
}

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
  return MetaOf(path, it->second);
}

arrow::Status MemoryStore::Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) {
  ARROW_RETURN_NOT_OK(Fault("put", path));
  std::lock_guard<std::mutex> lock(mutex_);
  objects_[path] = NewObject(data);
  return arrow::Status::OK();
}

arrow::Result<bool> MemoryStore::PutIfAbsent(const std::string& path,
                                             const std::shared_ptr<arrow::Buffer>& data) {
  ARROW_RETURN_NOT_OK(Fault("put_if_absent", path));
  std::lock_guard<std::mutex> lock(mutex_);
  if (objects_.count(path)) return false;
  objects_.emplace(path, NewObject(data));
  return true;
}

arrow::Result<bool> MemoryStore::PutIfMatch(const std::string& path,
                                            const std::shared_ptr<arrow::Buffer>& data,
                                            const std::string& etag) {
  if (etag.empty()) return arrow::Status::Invalid("PutIfMatch of '", path, "' needs an entity tag");
  ARROW_RETURN_NOT_OK(Fault("put_if_match", path));
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = objects_.find(path);
  if (it == objects_.end() || std::to_string(it->second.generation) != etag) return false;
  it->second = NewObject(data);
  return true;
}

arrow::Result<std::shared_ptr<ObjectOutput>> MemoryStore::OpenOutput(
    const std::string& path, const OutputOptions& options) {
  ARROW_RETURN_NOT_OK(options.Validate());
  ARROW_RETURN_NOT_OK(Fault("open_output", path));
  ARROW_ASSIGN_OR_RAISE(auto sink, arrow::io::BufferOutputStream::Create());
  return std::make_shared<MemoryOutput>(this, path, std::move(sink));
}

arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> MemoryStore::OpenInput(
    const std::string& path) {
  ARROW_RETURN_NOT_OK(Fault("open_input", path));
  ARROW_ASSIGN_OR_RAISE(auto data, Get(path));
  return std::make_shared<arrow::io::BufferReader>(data);
}

arrow::Result<ObjectPage> MemoryStore::ListPage(const ListPageRequest& request) {
  if (request.max_keys < 1) {
    return arrow::Status::Invalid("a listing page needs max_keys >= 1, got ", request.max_keys);
  }
  ARROW_RETURN_NOT_OK(Fault("list", request.prefix));
  std::lock_guard<std::mutex> lock(mutex_);
  // The continuation is the last path of the previous page: the listing resumes after it.
  const std::string& after = std::max(request.start_after, request.continuation);
  ObjectPage page;
  auto it = request.prefix > after ? objects_.lower_bound(request.prefix)
                                   : objects_.upper_bound(after);
  for (; it != objects_.end() && it->first.compare(0, request.prefix.size(), request.prefix) == 0;
       ++it) {
    if (static_cast<int64_t>(page.objects.size()) == request.max_keys) {
      page.continuation = page.objects.back().path;
      break;
    }
    page.objects.push_back(MetaOf(it->first, it->second));
  }
  return page;
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
