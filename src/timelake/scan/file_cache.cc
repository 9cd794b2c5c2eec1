#include "timelake/scan/file_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <future>
#include <optional>
#include <system_error>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <arrow/io/memory.h>
#include <parquet/exception.h>
#include <parquet/metadata.h>

#include "timelake/scan/row_groups.h"
#include "timelake/util/encoding.h"
#include "timelake/util/ids.h"
#include "timelake/util/parallel.h"
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

arrow::Status WriteAt(int fd, const uint8_t* data, int64_t size, int64_t offset, const std::string& path);

constexpr const char* kPins = ".pins/";
constexpr const char* kEvictLock = "evict.lock";

// flock() that waits, through signals.
int LockWaiting(int fd, int operation) {
  int r;
  do {
    r = ::flock(fd, operation);
  } while (r != 0 && errno == EINTR);
  return r;
}

}  // namespace

void CachePin::Release() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // then unlock: an eviction never sees it unlocked and listed
  ::close(fd_);
  fd_ = -1;
}

arrow::Result<std::shared_ptr<CachePin>> FileCache::Pin(const std::vector<CachedFile>& files) {
  const std::string pins = directory_ + kPins;
  std::error_code ec;
  fs::create_directories(pins, ec);
  if (ec) return arrow::Status::IOError("cannot create the cache folder ", pins, ": ", ec.message());
  const std::string lock_path = pins + kEvictLock;
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0 || LockWaiting(lock, LOCK_SH) != 0) {
    const std::string why = std::strerror(errno);
    if (lock >= 0) ::close(lock);
    return arrow::Status::IOError("cannot lock the cache file ", lock_path, ": ", why);
  }
  std::string listed;
  for (const auto& f : files) listed += CopyName(f) + "\n";
  const std::string path = pins + NewUuid() + ".pin";
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  arrow::Status status;
  if (fd < 0 || LockWaiting(fd, LOCK_EX) != 0) {
    status = arrow::Status::IOError("cannot write the cache pin ", path, ": ", std::strerror(errno));
  } else {
    status = WriteAt(fd, reinterpret_cast<const uint8_t*>(listed.data()),
                     static_cast<int64_t>(listed.size()), 0, path);
  }
  ::close(lock);
  if (!status.ok()) {
    if (fd >= 0) {
      ::unlink(path.c_str());
      ::close(fd);
    }
    return status;
  }
  return std::make_shared<CachePin>(fd, path);
}

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

FileCache::FileCache(std::shared_ptr<ObjectStore> store, std::string root, int64_t max_bytes,
                     int64_t memory_bytes)
    : store_(std::move(store)), max_bytes_(max_bytes), memory_(memory_bytes) {
  const std::string key = Sha256Hex(store_->Identity()).substr(0, 20);
  directory_ = (fs::path(root) / key).lexically_normal().string() + "/";
}

arrow::Result<std::shared_ptr<FileCache>> FileCache::Make(std::shared_ptr<ObjectStore> store,
                                                          const FileCacheOptions& options) {
  std::string root = options.root.empty() ? DefaultRoot() : options.root;
  std::string temporary;
  if (options.temporary) {
    std::string pattern = (fs::temp_directory_path() / "timelake-cache-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      return arrow::Status::IOError("cannot make a temporary cache folder ", pattern, ": ", std::strerror(errno));
    }
    root = temporary = pattern;
  }
  auto cache = std::make_shared<FileCache>(std::move(store), root,
                                           options.disk_bytes < 0 ? DefaultBudget() : options.disk_bytes,
                                           options.memory_bytes < 0 ? kDefaultMemoryBytes : options.memory_bytes);
  cache->temporary_root_ = temporary;
  cache->creator_pid_ = ::getpid();
  return cache;
}

FileCache::~FileCache() {
  // A child made by fork() that destroys its copy of the cache leaves the parent's folder alone.
  if (temporary_root_.empty() || ::getpid() != creator_pid_) return;
  std::error_code ec;
  fs::remove_all(temporary_root_, ec);
}

struct FileCache::Target {
  std::string store_path;
  std::string local;  // the final path
  int64_t size = 0;   // the final local size
  // (offset, length) ranges of the remote file, written at the same offsets locally.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  // Row-group copies: the new footer (with its length and magic), written at trailer_offset.
  std::string trailer;
  int64_t trailer_offset = -1;
  std::string temp;
  int fd = -1;
};

namespace {

// The footer of a Parquet file is at most this far from its end in the common case: one read.
constexpr int64_t kFooterGuess = 64 << 10;

arrow::Status WriteAt(int fd, const uint8_t* data, int64_t size, int64_t offset, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, static_cast<size_t>(size), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return arrow::Status::IOError("cannot write the cache file ", path, ": ", std::strerror(errno));
    data += n;
    size -= n;
    offset += n;
  }
  return arrow::Status::OK();
}

// True if the row-group copy at `local` ends as written: a footer after `footer_start` that
// its last eight bytes ("<length>PAR1") describe. A copy cut short or emptied on disk fails this
// (one stat and one 8-byte read, no footer built), and is then made again.
bool RowGroupCopyIsWhole(const std::string& local, int64_t footer_start) {
  const int fd = ::open(local.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  char tail[8];
  const bool read = ::fstat(fd, &st) == 0 && st.st_size >= footer_start + 8 &&
                    ::pread(fd, tail, 8, st.st_size - 8) == 8;
  ::close(fd);
  if (!read || std::memcmp(tail + 4, "PAR1", 4) != 0) return false;
  uint32_t length = 0;
  std::memcpy(&length, tail, 4);
  return static_cast<int64_t>(length) == st.st_size - footer_start - 8;
}

std::string Damaged(const ObjectStore& store, const std::string& path, int64_t size) {
  return "data file " + store.ExternalPath(path) + " is shorter than the " + std::to_string(size) +
         " bytes the table's log records; it is damaged";
}

}  // namespace

std::string FileCache::CopyName(const CachedFile& file) const {
  // "@<time>" before the name's extension (part-1.parquet: part-1@<time>.parquet), so that
  // copies keep the extension tools look for; always present (also "@-1"), so that the name of
  // one (path, time) is never another's.
  const size_t base = file.store_path.rfind('/') + 1;  // 0 without a '/'
  size_t dot = file.store_path.rfind('.');
  if (dot == std::string::npos || dot <= base) dot = file.store_path.size();
  return directory_ + file.store_path.substr(0, dot) + "@" + std::to_string(file.modified_ms) +
         file.store_path.substr(dot);
}

arrow::Result<std::shared_ptr<const std::string>> FileCache::Footer(const CachedFile& file,
                                                                    const std::string& footer_copy) {
  const int64_t size = file.size;
  if (auto kept = memory_.Get(footer_copy)) {
    ++counters_.memory_hits;
    counters_.bytes_served += static_cast<int64_t>(kept->size());
    return kept;
  }
  std::string tail;
  {
    std::ifstream in(footer_copy, std::ios::binary);
    if (in) {
      std::ostringstream text;
      text << in.rdbuf();
      tail = text.str();
    }
  }
  if (!tail.empty()) {
    // A footer copy holds exactly the footer, its length and the magic; anything else is damage
    // (a full disk, a crash): forget it and read the footer again.
    uint32_t n = 0;
    if (tail.size() >= 12) std::memcpy(&n, tail.data() + tail.size() - 8, 4);
    if (tail.size() < 12 || tail.compare(tail.size() - 4, 4, "PAR1") != 0 ||
        int64_t{n} + 8 != static_cast<int64_t>(tail.size()) || int64_t{n} + 12 > size) {
      std::error_code ec;
      fs::remove(footer_copy, ec);
      tail.clear();
    }
  }
  if (!tail.empty()) {
    ++counters_.disk_hits;
    counters_.bytes_served += static_cast<int64_t>(tail.size());
    auto kept = std::make_shared<const std::string>(std::move(tail));
    memory_.Put(footer_copy, kept);
    return kept;
  }
  ++counters_.misses;
  auto fetch = [&](int64_t offset, int64_t length) -> arrow::Result<std::string> {
    ++counters_.requests;
    ARROW_ASSIGN_OR_RAISE(auto buffer, store_->GetRange(file.store_path, offset, length));
    counters_.bytes_fetched += buffer->size();
    if (buffer->size() != length) return arrow::Status::IOError(Damaged(*store_, file.store_path, size));
    return buffer->ToString();
  };
  const int64_t tail_size = std::min(size, kFooterGuess);
  ARROW_ASSIGN_OR_RAISE(tail, fetch(size - tail_size, tail_size));
  auto not_parquet = std::make_shared<const std::string>();
  if (tail.size() < 12 || tail.compare(tail.size() - 4, 4, "PAR1") != 0) return not_parquet;
  uint32_t footer_len = 0;
  std::memcpy(&footer_len, tail.data() + tail.size() - 8, 4);  // little-endian, as every platform timelake builds on
  const int64_t footer_start = size - 8 - int64_t{footer_len};
  if (footer_start < 4) return not_parquet;
  if (static_cast<int64_t>(tail.size()) < int64_t{footer_len} + 8) {
    ARROW_ASSIGN_OR_RAISE(std::string footer, fetch(footer_start, footer_len));
    tail = footer + tail.substr(tail.size() - 8);
  }
  tail.erase(0, tail.size() - (int64_t{footer_len} + 8));
  {
    std::error_code ec;
    fs::create_directories(fs::path(footer_copy).parent_path(), ec);
    const std::string temp = footer_copy + ".part-" + NewUuid();
    bool written = false;
    {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      out.write(tail.data(), static_cast<std::streamsize>(tail.size()));
      out.close();
      written = static_cast<bool>(out);
    }
    // Best effort: without it, the next query of another Lake reads the footer again.
    if (written) fs::rename(temp, footer_copy, ec);
    if (!written || ec) fs::remove(temp, ec);
  }
  auto kept = std::make_shared<const std::string>(std::move(tail));
  memory_.Put(footer_copy, kept);
  return kept;
}

arrow::Result<std::optional<FileCache::Target>> FileCache::PlanRowGroupCopy(
    const CachedFile& file, const std::string& whole, const RowGroupChooser& choose) {
  const int64_t size = file.size;
  // The footer is kept beside the copies (and in memory): warm queries read no remote byte to
  // choose their row groups.
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<const std::string> footer,
                        Footer(file, whole + ".footer-" + std::to_string(size)));
  if (footer->empty()) return std::nullopt;  // not plain Parquet
  const std::string& tail = *footer;
  const int64_t footer_len = static_cast<int64_t>(tail.size()) - 8;
  const int64_t footer_start = size - static_cast<int64_t>(tail.size());
  if (footer_start < 4) return std::nullopt;
  std::shared_ptr<parquet::FileMetaData> meta;
  std::vector<int> chosen;
  std::optional<std::vector<std::pair<int64_t, int64_t>>> ranges;
  try {
    meta = parquet::FileMetaData::Make(tail.data(), footer_len);
    if (meta->is_encryption_algorithm_set()) return std::nullopt;
    chosen = choose(*meta);
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    if (static_cast<int>(chosen.size()) >= meta->num_row_groups()) return std::nullopt;
    ranges = RowGroupByteRanges(*meta, chosen, footer_start);
    if (!ranges) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;  // a footer Arrow cannot read: copy the whole file, the reader will say why
  }
  std::string key = std::to_string(size);
  for (int i : chosen) key += "," + std::to_string(i);
  Target target;
  target.store_path = file.store_path;
  target.local = whole + ".rg-" + Sha256Hex(key).substr(0, 16);
  target.ranges = std::move(*ranges);
  if (RowGroupCopyIsWhole(target.local, footer_start)) return target;  // made before: nothing to write
  std::error_code removed_ec;
  fs::remove(target.local, removed_ec);  // damaged (if there at all): made again below

  std::string trailer;
  try {
    ARROW_ASSIGN_OR_RAISE(auto out, arrow::io::BufferOutputStream::Create());
    meta->Subset(chosen)->WriteTo(out.get());
    ARROW_ASSIGN_OR_RAISE(auto serialized, out->Finish());
    trailer = serialized->ToString();
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const uint32_t trailer_len = static_cast<uint32_t>(trailer.size());
  trailer.append(reinterpret_cast<const char*>(&trailer_len), 4);
  trailer.append("PAR1", 4);
  target.size = footer_start + static_cast<int64_t>(trailer.size());
  target.trailer = std::move(trailer);
  target.trailer_offset = footer_start;
  return target;
}

arrow::Status FileCache::Download(std::vector<Target>& targets) {
  struct Piece {
    size_t target;
    int64_t offset, length;
  };
  std::vector<Piece> pieces;
  arrow::Status status;
  for (size_t t = 0; t < targets.size() && status.ok(); ++t) {
    Target& target = targets[t];
    std::error_code ec;
    fs::create_directories(fs::path(target.local).parent_path(), ec);
    if (ec) {
      status = arrow::Status::IOError("cannot create the cache folder for ", target.local, ": ", ec.message());
      break;
    }
    target.temp = target.local + ".part-" + NewUuid();
    target.fd = ::open(target.temp.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (target.fd < 0 || ::ftruncate(target.fd, target.size) != 0) {
      status = arrow::Status::IOError("cannot write the cache file ", target.temp, ": ", std::strerror(errno));
      break;
    }
    for (const auto& [offset, length] : target.ranges) {
      for (int64_t at = offset; at < offset + length; at += kChunk) {
        pieces.push_back({t, at, std::min(kChunk, offset + length - at)});
      }
    }
  }
  if (status.ok() && !pieces.empty()) {
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex error_mutex;
    auto work = [&]() {
      for (size_t i = next++; i < pieces.size() && !failed; i = next++) {
        const Piece& piece = pieces[i];
        const Target& target = targets[piece.target];
        arrow::Status s;
        try {
          ++counters_.requests;
          auto data = store_->GetRange(target.store_path, piece.offset, piece.length);
          if (data.ok()) counters_.bytes_fetched += (*data)->size();
          if (!data.ok()) {
            s = data.status();
          } else if ((*data)->size() != piece.length) {
            s = arrow::Status::IOError(Damaged(*store_, target.store_path, piece.offset + piece.length));
          } else {
            s = WriteAt(target.fd, (*data)->data(), piece.length, piece.offset, target.temp);
          }
        } catch (const std::exception& e) {
          s = arrow::Status::IOError("downloading ", target.store_path, " failed: ", e.what());
        }
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (status.ok()) status = s;
          failed = true;
        }
      }
    };
    const size_t workers = std::min<size_t>(kParallelDownloads, pieces.size());
    std::vector<std::future<void>> running;
    for (size_t w = 1; w < workers; ++w) {
      try {
        running.push_back(std::async(std::launch::async, work));
      } catch (const std::system_error&) {
        break;  // no more threads to be had: the ones running (and this one) do the rest
      }
    }
    work();
    for (auto& r : running) r.wait();
  }
  for (Target& target : targets) {
    if (target.fd < 0) continue;
    if (status.ok() && target.trailer_offset >= 0) {
      status = WriteAt(target.fd, reinterpret_cast<const uint8_t*>("PAR1"), 4, 0, target.temp);
      if (status.ok()) {
        status = WriteAt(target.fd, reinterpret_cast<const uint8_t*>(target.trailer.data()),
                         static_cast<int64_t>(target.trailer.size()), target.trailer_offset, target.temp);
      }
    }
    if (status.ok() && ::fdatasync(target.fd) != 0) {
      status = arrow::Status::IOError("cannot sync the cache file ", target.temp, ": ", std::strerror(errno));
    }
    ::close(target.fd);
    target.fd = -1;
  }
  std::error_code ec;
  for (Target& target : targets) {
    if (target.temp.empty()) continue;
    if (status.ok()) {
      fs::rename(target.temp, target.local, ec);
      if (ec) status = arrow::Status::IOError("cannot publish the cache file ", target.local, ": ", ec.message());
    }
    if (!status.ok()) fs::remove(target.temp, ec);
  }
  return status;
}

arrow::Result<PlanCopies> FileCache::MaterializePlan(const ScanPlan& plan) {
  std::vector<CachedFile> files;
  files.reserve(plan.files.size());
  for (const auto& f : plan.files) {
    if (f.store_path.empty()) {
      return arrow::Status::IOError("data file ", f.path,
                                    " lies outside the lake's store; timelake cannot read it");
    }
    files.push_back({f.store_path, f.size, f.modified_ms});
  }
  PlanCopies copies;
  ARROW_ASSIGN_OR_RAISE(copies.paths, Materialize(files, ChooseRowGroups(plan), &copies.pin));
  return copies;
}

arrow::Result<std::vector<std::string>> FileCache::Materialize(const std::vector<CachedFile>& files,
                                                                const RowGroupChooser& choose,
                                                                std::shared_ptr<CachePin>* pin) {
  for (const auto& f : files) {
    if (!SafeRelative(f.store_path)) {
      return arrow::Status::Invalid("data file path '", f.store_path,
                                    "' cannot be copied to the local cache");
    }
  }
  // Pinned before any copy is looked at: from here on no eviction deletes them.
  ARROW_ASSIGN_OR_RAISE(std::shared_ptr<CachePin> pinned, Pin(files));
  if (pin) *pin = pinned;
  std::vector<std::string> locals(files.size());
  std::vector<Target> targets;
  std::vector<size_t> row_group_candidates;
  // Marks a copy as recently used; false if it does not exist. Only a copy unused for half the
  // eviction age is touched: DuckDB keeps a file's footer cached while its mtime stays the same.
  auto touch = [](const std::string& path) {
    std::error_code ec;
    const auto used = fs::last_write_time(path, ec);
    if (ec) return false;
    const auto now = fs::file_time_type::clock::now();
    if (now - used > kEvictAfterIdle / 2) fs::last_write_time(path, now, ec);
    return true;
  };
  for (size_t i = 0; i < files.size(); ++i) {
    if (!SafeRelative(files[i].store_path)) {
      return arrow::Status::Invalid("data file path '", files[i].store_path,
                                    "' cannot be copied to the local cache");
    }
    locals[i] = CopyName(files[i]);
    std::error_code ec;
    const auto size = fs::file_size(locals[i], ec);
    if (!ec && (files[i].size < 0 || static_cast<int64_t>(size) == files[i].size)) {
      touch(locals[i]);
      ++counters_.disk_hits;
      counters_.bytes_served += static_cast<int64_t>(size);
      continue;
    }
    if (choose && files[i].size >= kRowGroupCopyMinBytes) {
      row_group_candidates.push_back(i);
      continue;
    }
    Target whole;
    whole.store_path = files[i].store_path;
    whole.local = locals[i];
    whole.size = files[i].size;
    if (whole.size < 0) {
      ++counters_.requests;
      ARROW_ASSIGN_OR_RAISE(auto meta, store_->Head(files[i].store_path));
      whole.size = meta.size;
    }
    whole.ranges = {{0, whole.size}};
    ++counters_.misses;
    targets.push_back(std::move(whole));
  }
  // Footers of the row-group candidates, read in parallel.
  for (size_t start = 0; start < row_group_candidates.size(); start += kParallelDownloads) {
    const size_t end = std::min(row_group_candidates.size(), start + kParallelDownloads);
    std::vector<std::future<arrow::Result<std::optional<Target>>>> running;
    for (size_t j = start; j < end; ++j) {
      const size_t i = row_group_candidates[j];
      running.push_back(AsyncOrDeferred([this, &files, &locals, &choose, i] {
        return PlanRowGroupCopy(files[i], locals[i], choose);
      }));
    }
    arrow::Status first;
    for (size_t j = start; j < end; ++j) {
      auto planned = running[j - start].get();
      const size_t i = row_group_candidates[j];
      if (!planned.ok()) {
        if (first.ok()) first = planned.status();
        continue;
      }
      Target target;
      if (planned->has_value()) {
        target = std::move(**planned);
        locals[i] = target.local;
        if (touch(target.local)) {  // made before (by this or another process)
          ++counters_.disk_hits;
          for (const auto& range : target.ranges) counters_.bytes_served += range.second;
          continue;
        }
        if (target.trailer_offset < 0) {
          // It existed when planned and was evicted since: plan it again, to be written.
          auto again = PlanRowGroupCopy(files[i], CopyName(files[i]), choose);
          if (!again.ok()) {
            if (first.ok()) first = again.status();
            continue;
          }
          if (again->has_value() && (*again)->trailer_offset < 0 && touch(target.local)) continue;
          if (!again->has_value() || (*again)->trailer_offset < 0) {
            if (first.ok()) first = arrow::Status::IOError("the cache copy ", target.local, " keeps vanishing");
            continue;
          }
          target = std::move(**again);
        }
      } else {
        target.store_path = files[i].store_path;
        target.local = locals[i];
        target.size = files[i].size;
        target.ranges = {{0, target.size}};
      }
      ++counters_.misses;
      targets.push_back(std::move(target));
    }
    ARROW_RETURN_NOT_OK(first);
  }
  int64_t downloaded = 0;
  for (const Target& t : targets) {
    for (const auto& r : t.ranges) downloaded += r.second;
  }
  ARROW_RETURN_NOT_OK(Download(targets));
  bool check = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    downloaded_since_check_ += downloaded;
    if (downloaded_since_check_ > max_bytes_ / 10) {
      downloaded_since_check_ = 0;
      check = true;
    }
  }
  if (check) Evict();
  return locals;
}

CacheStats FileCache::Stats() const {
  CacheStats stats;
  stats.memory_hits = counters_.memory_hits;
  stats.disk_hits = counters_.disk_hits;
  stats.misses = counters_.misses;
  stats.requests = counters_.requests;
  stats.bytes_fetched = counters_.bytes_fetched;
  stats.bytes_served = counters_.bytes_served;
  stats.memory_bytes = memory_.bytes();
  stats.memory_budget = memory_.budget();
  stats.disk_budget = max_bytes_;
  return stats;
}

void FileCache::Evict() {
  const std::string pins = directory_ + kPins;
  std::error_code ec;
  fs::create_directories(pins, ec);
  const std::string lock_path = pins + kEvictLock;
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0) return;  // best effort: the next request's pass tries again
  if (LockWaiting(lock, LOCK_EX) != 0) {
    ::close(lock);
    return;
  }
  // The copies the live pins name. A pin nobody holds locked (its holder died) is deleted.
  std::vector<std::string> pinned;
  for (auto it = fs::directory_iterator(pins, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string path = it->path().string();
    if (it->path().extension() != ".pin") continue;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
      ::unlink(path.c_str());
      ::close(fd);
      continue;
    }
    std::string text;
    char buf[65536];
    for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(n));
    ::close(fd);
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) pinned.push_back(std::move(line));
    }
  }
  std::sort(pinned.begin(), pinned.end());
  // A copy is pinned when a pin names it, or names the file whose row-group or footer copy
  // (<path>.rg-…, <path>.footer-…) or download (<path>.part-…) it is.
  auto is_pinned = [&pinned](const std::string& path) {
    if (std::binary_search(pinned.begin(), pinned.end(), path)) return true;
    for (size_t dot = path.find('.', path.rfind('/') + 1); dot != std::string::npos;
         dot = path.find('.', dot + 1)) {
      if (std::binary_search(pinned.begin(), pinned.end(), path.substr(0, dot))) return true;
    }
    return false;
  };

  struct Entry {
    fs::file_time_type used;
    int64_t size;
    std::string path;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  const fs::path pins_folder = fs::path(pins).parent_path();
  for (auto it = fs::recursive_directory_iterator(directory_, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path() == pins_folder) {
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    struct stat st {};
    if (::stat(it->path().c_str(), &st) != 0) continue;
    const int64_t size = static_cast<int64_t>(st.st_blocks) * 512;  // row-group copies are sparse
    entries.push_back({it->last_write_time(ec), size, it->path().string()});
    total += size;
  }
  if (total > max_bytes_) {
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.used < b.used; });
    const auto idle_before = fs::file_time_type::clock::now() - kEvictAfterIdle;
    const auto abandoned_before = fs::file_time_type::clock::now() - std::chrono::hours(6);
    for (const auto& e : entries) {
      if (total <= max_bytes_) break;
      // Asked for within the minute: perhaps by a process of a timelake that pins nothing.
      if (e.used > idle_before) break;
      if (is_pinned(e.path)) continue;
      // A download in progress (of another process, its pieces can take minutes on a slow link)
      // is left alone unless it was abandoned long ago.
      if (e.path.find(".part-") != std::string::npos && e.used > abandoned_before) continue;
      if (fs::remove(e.path, ec)) total -= e.size;
    }
  }
  ::close(lock);
}

}  // namespace timelake
