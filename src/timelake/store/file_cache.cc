#include "timelake/store/file_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <system_error>

#include "timelake/store/sigv4.h"
#include "timelake/util/ids.h"
#include "timelake/util/status.h"

namespace timelake {
namespace fs = std::filesystem;

namespace {

constexpr int kParallelDownloads = 8;
constexpr int64_t kChunk = int64_t{16} << 20;
constexpr auto kEvictAfterIdle = std::chrono::minutes(1);

std::string EnvOr(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// A store path is safe as a relative local path: no empty, "." or ".." segments.
bool SafeRelative(const std::string& path) {
  if (path.empty() || path.front() == '/') return false;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string segment = path.substr(start, end - start);
    if (segment.empty() || segment == "." || segment == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

std::string FileCache::DefaultRoot() {
  if (auto dir = EnvOr("TIMELAKE_CACHE_DIR"); !dir.empty()) return dir;
  if (auto xdg = EnvOr("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/timelake";
  if (auto home = EnvOr("HOME"); !home.empty()) return home + "/.cache/timelake";
  return (fs::temp_directory_path() / "timelake-cache").string();
}

int64_t FileCache::DefaultBudget() {
  const std::string v = EnvOr("TIMELAKE_CACHE_MAX_BYTES");
  if (!v.empty()) {
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (*end == '\0' && n > 0) return n;
  }
  return int64_t{20} << 30;
}

FileCache::FileCache(std::shared_ptr<ObjectStore> store, std::string root, int64_t max_bytes)
    : store_(std::move(store)), max_bytes_(max_bytes) {
  const std::string key = Sha256Hex(store_->RootUrl()).substr(0, 20);
  directory_ = (fs::path(root) / key).lexically_normal().string() + "/";
}

arrow::Status FileCache::Download(const CachedFile& file, const std::string& local) {
  int64_t size = file.size;
  if (size < 0) {
    ARROW_ASSIGN_OR_RAISE(auto meta, store_->Head(file.store_path));
    size = meta.size;
  }
  std::error_code ec;
  fs::create_directories(fs::path(local).parent_path(), ec);
  if (ec) return arrow::Status::IOError("cannot create the cache folder for ", local, ": ", ec.message());
  const std::string temp = local + ".part-" + NewUuid();
  arrow::Status status;
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) return arrow::Status::IOError("cannot write the cache file ", temp);
    for (int64_t offset = 0; offset < size && status.ok(); offset += kChunk) {
      auto chunk = store_->GetRange(file.store_path, offset, std::min(kChunk, size - offset));
      if (!chunk.ok()) {
        status = chunk.status();
        break;
      }
      if ((*chunk)->size() != std::min(kChunk, size - offset)) {
        status = arrow::Status::IOError("data file ", store_->ExternalPath(file.store_path),
                                        " is shorter than the ", size,
                                        " bytes the table's log records; it is damaged");
        break;
      }
      out.write(reinterpret_cast<const char*>((*chunk)->data()), (*chunk)->size());
    }
    out.flush();
    if (status.ok() && !out) status = arrow::Status::IOError("cannot write the cache file ", temp);
  }
  if (status.ok()) {
    fs::rename(temp, local, ec);
    if (ec) status = arrow::Status::IOError("cannot publish the cache file ", local, ": ", ec.message());
  }
  if (!status.ok()) fs::remove(temp, ec);
  return status;
}

arrow::Result<std::vector<std::string>> FileCache::Materialize(const std::vector<CachedFile>& files) {
  std::vector<std::string> locals;
  locals.reserve(files.size());
  std::vector<size_t> missing;
  for (size_t i = 0; i < files.size(); ++i) {
    if (!SafeRelative(files[i].store_path)) {
      return arrow::Status::Invalid("data file path '", files[i].store_path,
                                    "' cannot be copied to the local cache");
    }
    locals.push_back(directory_ + files[i].store_path);
    std::error_code ec;
    const auto size = fs::file_size(locals.back(), ec);
    if (!ec && (files[i].size < 0 || static_cast<int64_t>(size) == files[i].size)) {
      fs::last_write_time(locals.back(), fs::file_time_type::clock::now(), ec);  // recently used
      continue;
    }
    missing.push_back(i);
  }
  int64_t downloaded = 0;
  for (size_t start = 0; start < missing.size(); start += kParallelDownloads) {
    std::vector<std::future<arrow::Status>> running;
    const size_t end = std::min(missing.size(), start + kParallelDownloads);
    for (size_t j = start; j < end; ++j) {
      const size_t i = missing[j];
      running.push_back(std::async(std::launch::async,
                                   [this, &files, &locals, i] { return Download(files[i], locals[i]); }));
    }
    arrow::Status first;
    for (auto& r : running) {
      auto s = r.get();
      if (first.ok() && !s.ok()) first = s;
    }
    ARROW_RETURN_NOT_OK(first);
    for (size_t j = start; j < end; ++j) downloaded += std::max<int64_t>(0, files[missing[j]].size);
  }
  bool check = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    downloaded_since_check_ += downloaded;
    if (downloaded_since_check_ > max_bytes_ / 10) {
      downloaded_since_check_ = 0;
      check = true;
    }
  }
  if (check) Evict(locals);
  return locals;
}

void FileCache::Evict(const std::vector<std::string>& keep) {
  struct Entry {
    fs::file_time_type used;
    int64_t size;
    std::string path;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(directory_, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const int64_t size = static_cast<int64_t>(it->file_size(ec));
    entries.push_back({it->last_write_time(ec), size, it->path().string()});
    total += size;
  }
  if (total <= max_bytes_) return;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  const auto idle_before = fs::file_time_type::clock::now() - kEvictAfterIdle;
  for (const auto& e : entries) {
    if (total <= max_bytes_) break;
    if (e.used > idle_before) break;  // in use now, perhaps by another process's query
    if (std::find(keep.begin(), keep.end(), e.path) != keep.end()) continue;
    if (fs::remove(e.path, ec)) total -= e.size;
  }
}

}  // namespace timelake
