#include "timelake/store/memory_files.h"

#include <cstring>

#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {

namespace {

std::string FolderOf(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

class Held : public LocalFiles::Liveness {
 public:
  explicit Held(std::shared_ptr<std::atomic<int>> holders) : holders_(std::move(holders)) {
    ++*holders_;
  }
  ~Held() override { --*holders_; }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;

 private:
  std::shared_ptr<std::atomic<int>> holders_;
};

}  // namespace

bool MemoryFiles::FolderExists(const std::string& folder) const {
  if (folder.empty()) return true;
  const std::string prefix = folder + "/";
  auto it = files_.lower_bound(prefix);
  if (it != files_.end() && it->first.compare(0, prefix.size(), prefix) == 0) return true;
  return folder_exists_ && folder_exists_(folder);
}

arrow::Result<std::unique_ptr<LocalFiles::Liveness>> MemoryFiles::Publish(
    const std::string& scratch, const std::string& path, const arrow::Buffer& data, bool hold) {
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<arrow::Buffer> copy, arrow::AllocateBuffer(data.size()));
  if (data.size() > 0) {
    std::memcpy(copy->mutable_data(), data.data(), static_cast<size_t>(data.size()));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!FolderExists(FolderOf(scratch))) {
    return arrow::Status::IOError("cannot create '", scratch, "': its folder is missing");
  }
  if (!FolderExists(FolderOf(path))) {
    files_.erase(scratch);
    return arrow::Status::IOError("cannot write '", path, "': its folder is missing");
  }
  std::shared_ptr<File>& at = files_[scratch];
  if (at == nullptr) {
    at = std::make_shared<File>();
    at->identity = ++identities_;
  }
  std::shared_ptr<File> file = at;
  file->data = std::move(copy);
  file->modified_ms = NowMillis();
  std::unique_ptr<Liveness> held;
  if (hold) held = std::make_unique<Held>(file->holders);
  files_.erase(scratch);
  files_[path] = std::move(file);
  return held;
}

arrow::Result<bool> MemoryFiles::Claim(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = files_.find(from);
  if (it == files_.end()) return false;
  if (!FolderExists(FolderOf(to))) {
    return arrow::Status::IOError("cannot rename '", from, "': the folder of '", to,
                                  "' is missing");
  }
  std::shared_ptr<File> file = std::move(it->second);
  files_.erase(it);
  files_[to] = std::move(file);
  return true;
}

arrow::Result<bool> MemoryFiles::Withdraw(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  return files_.erase(path) > 0;
}

arrow::Result<bool> MemoryFiles::IsHeld(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = files_.find(path);
  if (it == files_.end()) return NotFound(path);
  return it->second->holders->load() > 0;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> MemoryFiles::Read(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = files_.find(path);
  if (it == files_.end()) return NotFound(path);
  return it->second->data;  // never written into: Publish gives the file a new buffer
}

arrow::Result<std::vector<LocalFileInfo>> MemoryFiles::List(const std::string& folder,
                                                            ListDetail detail) {
  const std::string prefix = folder.empty() ? "" : folder + "/";
  const int64_t now = NowMillis();
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<LocalFileInfo> out;
  for (auto it = files_.lower_bound(prefix);
       it != files_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    if (it->first.find('/', prefix.size()) != std::string::npos) continue;  // in a subfolder
    LocalFileInfo info{it->first.substr(prefix.size())};
    if (detail == ListDetail::kAges) {
      info.age_ms = std::max<int64_t>(0, now - it->second->modified_ms);
      info.identity = it->second->identity;
    }
    out.push_back(std::move(info));
  }
  return out;
}

arrow::Status MemoryFiles::Age(const std::string& path, int64_t ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = files_.find(path);
  if (it == files_.end()) return NotFound(path);
  it->second->modified_ms -= ms;
  return arrow::Status::OK();
}

}  // namespace timelake
