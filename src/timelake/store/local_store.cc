#include "timelake/store/local_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <new>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include <arrow/io/file.h>

#include "timelake/store/posix_files.h"
#include "timelake/util/ids.h"
#include "timelake/util/parallel.h"
#include "timelake/util/per_process.h"
#include "timelake/util/status.h"

namespace fs = std::filesystem;

namespace timelake {

// Deferred fsyncs of one store (in-place outputs' fsyncs after Close), and the threads that run
// them. Await(mark, scope) waits for every one of `scope` (a table's folder: syncs of other
// tables are not waited for) started before Mark() returned `mark`; a put waits only for the
// files closed before it began, which are all that its object can name. Failures are sticky:
// once a sync failed (or a put could not make its object durable, Fail), every later Await
// reports it.
//
// The workers are kept for the purpose: starting a thread per fsync cost more CPU than the fsync
// (a stack mapped, touched and unmapped, with a TLB shootdown across cores each time). Up to
// kMaxWorkers run at once, so that the fsyncs of files closed together (threads of one process
// appending) go to the disk together. They belong to the store (its Lake's) and its in-place
// outputs, which share the queue: the last of them to go waits for the syncs still running and
// joins the workers. Jobs capture neither the queue nor the store, so that never happens on a
// worker.
//
// fork() (Python's multiprocessing): the workers, the jobs and the mutex that guards them are kept
// per process (util/per_process.h). A child never waits for its parent's syncs (its parent does),
// never touches a mutex a parent's thread may have held at the fork, and starts workers of its
// own when it needs them; a failure recorded before the fork stays recorded in the child.
class SyncQueue {
 public:
  ~SyncQueue() {
    State* s = state_.IfMade();  // a parent's workers are not the child's to join
    if (s != nullptr) {
      (void)Await();
      {
        std::lock_guard<std::mutex> lock(s->mutex);
        s->stopping = true;
      }
      s->wake.notify_all();
      for (auto& worker : s->workers) worker.join();
    }
    delete failed_.load();
  }

  void Start(std::string scope, std::function<arrow::Status()> sync) {
    auto job = std::make_shared<Job>();
    job->scope = std::move(scope);
    State& s = state_.Get();
    std::unique_lock<std::mutex> lock(s.mutex);
    job->seq = s.next_seq++;
    s.jobs.push_back(job);
    Run(s, lock, [job, sync = std::move(sync)] {
      arrow::Status st = NoThrow("syncing a file", sync);
      std::lock_guard<std::mutex> done(job->mutex);
      job->status = std::move(st);
      job->done = true;
      job->finished.notify_all();
    });
  }

  /// What Await takes: syncs started from now on are not waited for.
  uint64_t Mark() {
    State& s = state_.Get();
    std::lock_guard<std::mutex> lock(s.mutex);
    return s.next_seq;
  }

  /// OK once every sync of `scope` ("" for every scope) started before Mark() returned `mark`
  /// has finished; the first failure ever otherwise.
  arrow::Status Await(uint64_t mark = UINT64_MAX, const std::string& scope = "") {
    State& s = state_.Get();
    std::vector<std::shared_ptr<Job>> waiting;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      for (const auto& job : s.jobs) {
        if (job->seq < mark && (scope.empty() || job->scope == scope)) waiting.push_back(job);
      }
    }
    arrow::Status first;
    for (const auto& job : waiting) {
      std::unique_lock<std::mutex> lock(job->mutex);
      job->finished.wait(lock, [&] { return job->done; });
      if (first.ok() && !job->status.ok()) first = job->status;
    }
    if (!first.ok()) Record(first);
    {
      // Only the syncs waited for leave: a failure is recorded before its job goes.
      std::lock_guard<std::mutex> lock(s.mutex);
      std::erase_if(s.jobs, [&](const auto& job) {
        return std::find(waiting.begin(), waiting.end(), job) != waiting.end();
      });
    }
    const arrow::Status* failed = failed_.load(std::memory_order_acquire);
    return failed ? *failed : arrow::Status::OK();
  }

  /// Records that something acknowledged may not be durable: every later Await fails.
  void Fail(const arrow::Status& why) { Record(why); }

 private:
  static constexpr int kMaxWorkers = 4;

  struct Job {
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    arrow::Status status;
    uint64_t seq = 0;
    std::string scope;
  };
  // One process's syncs and workers; every field GUARDED_BY(mutex).
  struct State {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::function<void()>> queue;  // jobs no worker took yet
    std::vector<std::thread> workers;
    int idle = 0;  // workers waiting for a job
    bool stopping = false;
    uint64_t next_seq = 0;
    std::vector<std::shared_ptr<Job>> jobs;  // started and not yet awaited
  };

  /// Queues `job` (`lock` holds s.mutex, released around an inline run); starts a worker when
  /// none is idle. With no worker to be had, runs it here.
  static void Run(State& s, std::unique_lock<std::mutex>& lock, std::function<void()> job) {
    s.queue.push_back(std::move(job));
    const int workers = static_cast<int>(s.workers.size());
    if (static_cast<int>(s.queue.size()) > s.idle && workers < kMaxWorkers) {
      try {
        s.workers.emplace_back([&s] { Work(s); });
      } catch (const std::system_error&) {
        if (workers == 0) {  // nobody else will: run what is queued here
          while (!s.queue.empty()) {
            auto next = std::move(s.queue.front());
            s.queue.pop_front();
            lock.unlock();
            next();
            lock.lock();
          }
          return;
        }
      }
    }
    s.wake.notify_one();
  }

  static void Work(State& s) {
    std::unique_lock<std::mutex> lock(s.mutex);
    for (;;) {
      ++s.idle;
      s.wake.wait(lock, [&s] { return s.stopping || !s.queue.empty(); });
      --s.idle;
      if (s.queue.empty()) return;  // stopping, and every job ran
      auto job = std::move(s.queue.front());
      s.queue.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  void Record(const arrow::Status& why) {
    if (failed_.load(std::memory_order_acquire) != nullptr) return;
    auto* failed = new arrow::Status(arrow::Status::IOError(
        "a file written earlier could not be made durable (", why.message(),
        "): the disk may have lost written data, so nothing more is written through this lake; "
        "open the lake again once the disk is healthy"));
    const arrow::Status* none = nullptr;
    if (!failed_.compare_exchange_strong(none, failed, std::memory_order_acq_rel)) delete failed;
  }

  PerProcess<State> state_;
  // The first failure, kept for good; an atomic (not under State's mutex) so that a child made by
  // fork() reads it without a mutex of its parent's.
  std::atomic<const arrow::Status*> failed_{nullptr};
};

namespace {

constexpr const char* kTempPrefix = ".tmp-";

arrow::Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  return arrow::Status::IOError(what, " '", path, "': ", std::strerror(err));
}

std::string ParentDir(const std::string& full) {
  auto slash = full.rfind('/');
  return slash == std::string::npos ? "." : full.substr(0, slash);
}

arrow::Status EnsureDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return arrow::Status::IOError("cannot create directory '", dir, "': ", ec.message());
  return arrow::Status::OK();
}

// Calls `visit(name, d_type)` (the name a string_view valid during the call) for every entry of the open folder `handle` (at `dir`) but "." and
// "..", stopping at the first failure; a failed read of the folder is an error naming it.
template <typename Visit>
arrow::Status ForEachEntry(DIR* handle, const std::string& dir, Visit&& visit) {
  for (;;) {
    errno = 0;
    const struct dirent* entry = ::readdir(handle);
    if (entry == nullptr) {
      if (errno != 0) return ErrnoStatus("cannot list", dir, errno);
      return arrow::Status::OK();
    }
    const std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    ARROW_RETURN_NOT_OK(visit(name, entry->d_type));
  }
}

// A file that could not be created; NotFound when its folder vanished (a dropped table).
arrow::Status CreateError(const std::string& file, int err) {
  if (err == ENOENT) return NotFound(ParentDir(file) + "/");
  return ErrnoStatus("cannot create", file, err);
}

// fsync(2) of the open `fd` (naming `path`), or the store's SyncFunction.
int SyncFd(const LocalStore::SyncFunction& sync, int fd, const std::string& path) {
  return sync ? sync(fd, path) : ::fsync(fd);
}

arrow::Status FsyncDir(const std::string& dir, const LocalStore::SyncFunction& sync) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open directory", dir, errno);
  int rc = SyncFd(sync, fd, dir);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus("cannot fsync directory", dir, err);
  return arrow::Status::OK();
}

// Stamps a written file's modification time with the precise clock (file systems stamp with a
// coarse one, a tick of milliseconds, which could give two writes of one size the same entity
// tag should the second reuse the first's inode).
arrow::Status Stamp(int fd, const std::string& temp) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[1]);
  times[0] = times[1];
  if (::futimens(fd, times) != 0) return ErrnoStatus("cannot set the time of", temp, errno);
  return arrow::Status::OK();
}

// Finishes a written temporary file: Stamp, then fsync.
arrow::Status Seal(int fd, const std::string& temp, const LocalStore::SyncFunction& sync) {
  ARROW_RETURN_NOT_OK(Stamp(fd, temp));
  if (SyncFd(sync, fd, temp) != 0) return ErrnoStatus("cannot fsync", temp, errno);
  return arrow::Status::OK();
}

// Releases the flock(2) on `fd` and closes it. The lock belongs to the open file description,
// which a child fork()ed meanwhile shares (Python's multiprocessing forks by default): closing
// alone would leave the lock held by the child's copy until the child exits; LOCK_UN releases it
// for every copy.
void Unlock(int fd) {
  if (fd < 0) return;
  ::flock(fd, LOCK_UN);
  ::close(fd);
}

// An exclusive flock(2) on a folder, held while the object lives. Writes that replace or remove
// an object take the lock of its folder for that step, so that PutIfMatch's compare and rename
// are one step for every thread and process using LocalStore.
class FolderLock {
 public:
  /// NotFound (IsNotFound) if the folder does not exist.
  static arrow::Result<FolderLock> Take(const std::string& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return NotFound(dir);
      return ErrnoStatus("cannot open directory", dir, errno);
    }
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoStatus("cannot lock directory", dir, err);
    }
    return FolderLock(fd);
  }
  FolderLock(FolderLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FolderLock& operator=(FolderLock&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~FolderLock() { Unlock(fd_); }

 private:
  explicit FolderLock(int fd) : fd_(fd) {}
  int fd_;
};

// Renames the finished temporary file `temp` to `full` under the folder's lock, then fsyncs the
// folder with `sync` unless it is null (not durable); the temporary file is gone either way.
arrow::Status Publish(const std::string& temp, const std::string& full,
                      const LocalStore::SyncFunction* sync) {
  const std::string dir = ParentDir(full);
  {
    auto lock = FolderLock::Take(dir);
    if (!lock.ok()) {
      ::unlink(temp.c_str());
      return lock.status();
    }
    if (::rename(temp.c_str(), full.c_str()) != 0) {
      const int err = errno;
      ::unlink(temp.c_str());
      return ErrnoStatus("cannot rename into", full, err);
    }
  }
  return sync != nullptr ? FsyncDir(dir, *sync) : arrow::Status::OK();
}

int64_t Millis(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1'000'000;
}

std::string Hex(uint64_t v) {
  char out[17];
  std::snprintf(out, sizeof(out), "%llx", static_cast<unsigned long long>(v));
  return out;
}

uint64_t Nanos(const struct timespec& t) {
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(t.tv_nsec);
}

// See local_store.h: every write makes a new file, so inode and times change with each one.
std::string EtagOf(const struct stat& st) {
  return Hex(st.st_ino) + "-" + Hex(static_cast<uint64_t>(st.st_size)) + "-" +
         Hex(Nanos(st.st_mtim)) + "-" + Hex(Nanos(st.st_ctim));
}

ObjectMeta MetaOf(std::string path, const struct stat& st) {
  return ObjectMeta{std::move(path), static_cast<int64_t>(st.st_size), Millis(st.st_mtim),
                    EtagOf(st)};
}

// Whether a folder whose objects' paths all start with `as_dir` (ending in '/') can hold objects
// of a listing of `prefix` after `start_after`.
bool FolderCanHold(const std::string& as_dir, const std::string& prefix,
                   const std::string& start_after) {
  const size_t common = std::min(as_dir.size(), prefix.size());
  if (as_dir.compare(0, common, prefix, 0, common) != 0) return false;
  // Every path below sorts after `start_after`, or `start_after` itself lies below.
  return as_dir > start_after || start_after.compare(0, as_dir.size(), as_dir) == 0;
}

arrow::Status WriteAll(int fd, const uint8_t* data, int64_t size, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, static_cast<size_t>(std::min<int64_t>(size, 1 << 30)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("cannot write", path, errno);
    }
    data += n;
    size -= n;
  }
  return arrow::Status::OK();
}

// An output stream that writes a temporary file and, on Close, fsyncs it, renames it to its
// final name and fsyncs the folder: the object appears whole or not at all. Written in place
// (OutputOptions::in_place), `temp` is the final name and Close hands the fsyncs of the file and
// the folder to the store's SyncQueue.
class DurableFileOutput : public ObjectOutput {
 public:
  DurableFileOutput(int fd, std::string temp, std::string path, LocalStore::SyncFunction sync)
      : fd_(fd), temp_(std::move(temp)), path_(std::move(path)), sync_(std::move(sync)) {}
  /// In place: Close leaves the fsyncs to `syncs`, under `scope` (SyncQueue).
  DurableFileOutput(int fd, std::string path, LocalStore::SyncFunction sync,
                    std::shared_ptr<SyncQueue> syncs, std::string scope)
      : fd_(fd),
        temp_(path),
        path_(std::move(path)),
        sync_(std::move(sync)),
        syncs_(std::move(syncs)),
        scope_(std::move(scope)) {}
  ~DurableFileOutput() override { (void)Abort(); }
  arrow::Status Write(const void* data, int64_t nbytes) override {
    if (fd_ < 0) return arrow::Status::Invalid("write to a closed file '", path_, "'");
    // Parquet writes a page header, a page, a footer field at a time: small writes are gathered
    // (a small file becomes one system call instead of twenty).
    if (nbytes < static_cast<int64_t>(kBufferBytes)) {
      if (buffer_.size() + static_cast<size_t>(nbytes) > kBufferBytes) ARROW_RETURN_NOT_OK(Flush());
      buffer_.append(static_cast<const char*>(data), static_cast<size_t>(nbytes));
      return arrow::Status::OK();
    }
    ARROW_RETURN_NOT_OK(Flush());
    return WriteThrough(data, nbytes);
  }
  arrow::Status Flush() override {
    if (buffer_.empty()) return arrow::Status::OK();
    const std::string pending = std::exchange(buffer_, {});
    buffer_.reserve(kBufferBytes);
    return WriteThrough(pending.data(), static_cast<int64_t>(pending.size()));
  }
  arrow::Result<int64_t> Tell() const override {
    return position_ + static_cast<int64_t>(buffer_.size());
  }
  bool closed() const override { return fd_ < 0; }
  arrow::Status Close() override {
    if (fd_ < 0) return arrow::Status::OK();
    if (arrow::Status flushed = Flush(); !flushed.ok()) {
      (void)Abort();
      return flushed;
    }
    if (syncs_) {
      // In place: the name is there already; the fsyncs run while the caller goes on, and the
      // store's next put waits for them.
      // The folder is opened now: it may be renamed away meanwhile (a dropped table), which is
      // no reason for its fsync to fail, and a folder already gone fails this Close.
      const int fd = std::exchange(fd_, -1);
      const std::string dir = ParentDir(path_);
      const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      arrow::Status ready = dir_fd >= 0 ? Stamp(fd, path_) : CreateError(path_, errno);
      if (!ready.ok()) {
        if (dir_fd >= 0) ::close(dir_fd);
        ::close(fd);
        ::unlink(path_.c_str());
        return ready;
      }
      // The file's and the folder's at once: one journal commit carries both.
      auto sync = [this](int handle, std::string what) {
        return [handle, what = std::move(what), sync = sync_] {
          arrow::Status st;
          if (SyncFd(sync, handle, what) != 0) st = ErrnoStatus("cannot fsync", what, errno);
          ::close(handle);
          return st;
        };
      };
      syncs_->Start(scope_, sync(fd, path_));
      syncs_->Start(scope_, sync(dir_fd, dir));
      return arrow::Status::OK();
    }
    arrow::Status sealed = Seal(fd_, temp_, sync_);
    ::close(fd_);
    fd_ = -1;
    if (!sealed.ok()) {
      ::unlink(temp_.c_str());
      return sealed;
    }
    return Publish(temp_, path_, &sync_);
  }
  arrow::Status Abort() override {
    buffer_.clear();
    if (fd_ < 0) return arrow::Status::OK();
    ::close(fd_);
    fd_ = -1;
    if (::unlink(temp_.c_str()) != 0 && errno != ENOENT) {
      return ErrnoStatus("cannot delete", temp_, errno);
    }
    return arrow::Status::OK();
  }

 private:
  static constexpr int64_t kWritebackBytes = 8LL << 20;
  static constexpr size_t kBufferBytes = 64 << 10;

  arrow::Status WriteThrough(const void* data, int64_t nbytes) {
    ARROW_RETURN_NOT_OK(WriteAll(fd_, static_cast<const uint8_t*>(data), nbytes, temp_));
    position_ += nbytes;
    // Start writing back what is written so far without waiting for it, so that the fsync in
    // Close() finds most of a large file already on disk instead of flushing it all at once
    // (the disk works while the next pages are encoded). Only a hint: errors surface in fsync.
    if (position_ - writeback_from_ >= kWritebackBytes) {
      (void)::sync_file_range(fd_, writeback_from_, position_ - writeback_from_,
                              SYNC_FILE_RANGE_WRITE);
      writeback_from_ = position_;
    }
    return arrow::Status::OK();
  }

  int fd_;  // -1 once closed or aborted
  std::string temp_;
  std::string path_;
  LocalStore::SyncFunction sync_;
  std::shared_ptr<SyncQueue> syncs_;  // in place only
  std::string scope_;
  int64_t position_ = 0;
  int64_t writeback_from_ = 0;  // where the writeback not yet started begins
  std::string buffer_;          // written, not yet handed to the file
};

}  // namespace

arrow::Result<std::shared_ptr<LocalStore>> LocalStore::Make(const std::string& root,
                                                            int fixed_depth, SyncFunction sync) {
  if (root.empty() || root[0] != '/') {
    return arrow::Status::Invalid("local store root must be an absolute path, got '", root, "'");
  }
  std::string clean = fs::path(root).lexically_normal().string();
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  ARROW_RETURN_NOT_OK(EnsureDir(clean));
  return std::shared_ptr<LocalStore>(new LocalStore(clean, fixed_depth, std::move(sync)));
}

LocalStore::LocalStore(std::string root, int fixed_depth, SyncFunction sync)
    : root_(std::move(root)),
      fixed_depth_(fixed_depth),
      sync_(std::move(sync)),
      syncs_(std::make_shared<SyncQueue>()),
      files_(std::make_shared<PosixFiles>(root_)) {}

std::shared_ptr<LocalFiles> LocalStore::AsLocalFiles() { return files_; }

arrow::Status LocalStore::FolderForWrite(const std::string& dir) const {
  if (dir.size() <= root_.size()) return arrow::Status::OK();  // the root, made by Make
  // One mkdir in the common case (the folder exists); up the tree only when its parent is
  // missing, and never making one of the top fixed_depth_ levels.
  const int depth = static_cast<int>(
      std::count(dir.begin() + static_cast<std::ptrdiff_t>(root_.size()), dir.end(), '/'));
  if (depth <= fixed_depth_) {
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return arrow::Status::OK();
    return NotFound(dir.substr(root_.size() + 1) + "/");
  }
  if (::mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST) return arrow::Status::OK();
  if (errno != ENOENT) return ErrnoStatus("cannot create directory", dir, errno);
  ARROW_RETURN_NOT_OK(FolderForWrite(ParentDir(dir)));
  if (::mkdir(dir.c_str(), 0777) == 0 || errno == EEXIST) return arrow::Status::OK();
  if (errno == ENOENT) return NotFound(dir.substr(root_.size() + 1) + "/");  // removed meanwhile
  return ErrnoStatus("cannot create directory", dir, errno);
}

arrow::Status LocalStore::MakeFolders(const std::string& prefix) {
  if (prefix.empty() || prefix.back() != '/') {
    return arrow::Status::Invalid("MakeFolders needs a folder prefix ending in '/', got '", prefix,
                                  "'");
  }
  return EnsureDir(FullPath(prefix.substr(0, prefix.size() - 1)));
}

arrow::Status LocalStore::SyncFolder(const std::string& prefix) {
  if (prefix.empty() || prefix.back() != '/') {
    return arrow::Status::Invalid("SyncFolder needs a folder prefix ending in '/', got '", prefix,
                                  "'");
  }
  return FsyncDir(FullPath(prefix.substr(0, prefix.size() - 1)), sync_);
}

std::string LocalStore::FullPath(const std::string& path) const {
  return path.empty() ? root_ : root_ + "/" + path;
}

std::string LocalStore::ScopeOf(const std::string& path) const {
  size_t end = 0;
  for (int level = 0; level < fixed_depth_; ++level) {
    const size_t slash = path.find('/', end);
    if (slash == std::string::npos) return path.substr(0, end);
    end = slash + 1;
  }
  return path.substr(0, end);
}

namespace {

class FileLock : public StoreLock {
 public:
  explicit FileLock(int fd) : fd_(fd) {}
  ~FileLock() override { Unlock(fd_); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

arrow::Result<std::unique_ptr<StoreLock>> LocalStore::LockExclusive(const std::string& path,
                                                                     int64_t wait_ms) {
  const std::string full = FullPath(path);
  const std::string dir = ParentDir(full);
  // One level only: a lock in a dropped table's folder must not bring the folder back. A lock
  // that cannot be made (no folder, a read-only or foreign folder) is no lock: it is advisory.
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) return nullptr;
  const int fd = ::open(full.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return nullptr;
  // Polled rather than blocking, so that a holder that stopped (SIGSTOP, a debugger, a hung
  // disk) holds the others up for `wait_ms` at most; they then go on without the lock.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (int64_t pause_us = 20;; pause_us = std::min<int64_t>(pause_us * 2, 250)) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return std::unique_ptr<StoreLock>(new FileLock(fd));
    if (errno != EWOULDBLOCK && errno != EINTR) break;  // no locks on this file system
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  ::close(fd);
  return nullptr;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> LocalStore::Get(const std::string& path) {
  ARROW_ASSIGN_OR_RAISE(auto meta, Head(path));
  return GetRange(path, 0, meta.size);
}

arrow::Result<std::shared_ptr<arrow::Buffer>> LocalStore::GetRange(const std::string& path,
                                                                   int64_t offset, int64_t length) {
  const std::string full = FullPath(path);
  int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path);
    return ErrnoStatus("cannot open", full, errno);
  }
  auto result = [&]() -> arrow::Result<std::shared_ptr<arrow::Buffer>> {
    ARROW_ASSIGN_OR_RAISE(auto buffer, arrow::AllocateResizableBuffer(length));
    int64_t done = 0;
    while (done < length) {
      ssize_t n = ::pread(fd, buffer->mutable_data() + done, static_cast<size_t>(length - done),
                          offset + done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("cannot read", full, errno);
      }
      if (n == 0) break;
      done += n;
    }
    ARROW_RETURN_NOT_OK(buffer->Resize(done));
    return std::shared_ptr<arrow::Buffer>(std::move(buffer));
  }();
  ::close(fd);
  return result;
}

arrow::Result<ObjectMeta> LocalStore::Head(const std::string& path) {
  struct stat st {};
  const std::string full = FullPath(path);
  if (::stat(full.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return NotFound(path);
    return ErrnoStatus("cannot stat", full, errno);
  }
  if (!S_ISREG(st.st_mode)) return NotFound(path);
  return MetaOf(path, st);
}

arrow::Result<std::string> LocalStore::WriteTemp(const std::string& full,
                                                 const std::shared_ptr<arrow::Buffer>& data,
                                                 bool durable) {
  const std::string dir = ParentDir(full);
  ARROW_RETURN_NOT_OK(FolderForWrite(dir));
  const std::string temp = dir + "/" + kTempPrefix + NewUuid();
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return CreateError(temp, errno);
  arrow::Status st = WriteAll(fd, data->data(), data->size(), temp);
  if (st.ok()) st = durable ? Seal(fd, temp, sync_) : Stamp(fd, temp);
  ::close(fd);
  if (!st.ok()) {
    ::unlink(temp.c_str());
    return st;
  }
  return temp;
}

arrow::Status LocalStore::Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) {
  const uint64_t mark = syncs_->Mark();
  const std::string full = FullPath(path);
  ARROW_ASSIGN_OR_RAISE(std::string temp, WriteTemp(full, data));
  if (arrow::Status synced = syncs_->Await(mark, ScopeOf(path)); !synced.ok()) {
    ::unlink(temp.c_str());
    return synced;
  }
  return Publish(temp, full, &sync_);
}

arrow::Status LocalStore::PutDerived(const std::string& path,
                                     const std::shared_ptr<arrow::Buffer>& data) {
  const std::string full = FullPath(path);
  ARROW_ASSIGN_OR_RAISE(std::string temp, WriteTemp(full, data, /*durable=*/false));
  return Publish(temp, full, /*sync=*/nullptr);
}

arrow::Result<bool> LocalStore::PutIfAbsent(const std::string& path,
                                            const std::shared_ptr<arrow::Buffer>& data) {
  return PutIfAbsentVisible(path, data, [] {});
}

arrow::Result<bool> LocalStore::PutIfAbsentVisible(const std::string& path,
                                                   const std::shared_ptr<arrow::Buffer>& data,
                                                   const std::function<void()>& visible) {
  const uint64_t mark = syncs_->Mark();
  const std::string full = FullPath(path);
  ARROW_ASSIGN_OR_RAISE(std::string temp, WriteTemp(full, data));
  if (arrow::Status synced = syncs_->Await(mark, ScopeOf(path)); !synced.ok()) {
    ::unlink(temp.c_str());
    return synced;
  }
  return LinkIfAbsent(temp, full, visible, /*keep_temp=*/false);
}

namespace {

// A commit's bytes in a durable temporary file of the folder they will be linked into.
class StagedFile : public ObjectStore::Staged {
 public:
  StagedFile(std::shared_ptr<arrow::Buffer> data, std::string temp, std::string dir)
      : Staged(std::move(data)), temp(std::move(temp)), dir(std::move(dir)) {}
  ~StagedFile() override {
    if (!temp.empty()) ::unlink(temp.c_str());
  }
  std::string temp;  // empty once linked
  std::string dir;
};

}  // namespace

arrow::Result<std::unique_ptr<ObjectStore::Staged>> LocalStore::Stage(
    const std::string& path, std::shared_ptr<arrow::Buffer> data) {
  const uint64_t mark = syncs_->Mark();
  const std::string full = FullPath(path);
  ARROW_ASSIGN_OR_RAISE(std::string temp, WriteTemp(full, data));
  auto staged = std::make_unique<StagedFile>(std::move(data), std::move(temp), ParentDir(full));
  // What the put would wait for, waited for now: the data files the commit names.
  ARROW_RETURN_NOT_OK(syncs_->Await(mark, ScopeOf(path)));
  return staged;
}

arrow::Result<bool> LocalStore::PutStagedIfAbsent(const std::string& path, Staged* staged,
                                                  const std::function<void()>& visible) {
  auto* file = dynamic_cast<StagedFile*>(staged);
  const std::string full = FullPath(path);
  if (file == nullptr || file->temp.empty() || file->dir != ParentDir(full)) {
    return PutIfAbsentVisible(path, staged->data, visible);
  }
  auto linked = LinkIfAbsent(file->temp, full, visible, /*keep_temp=*/true);
  // Kept only after a lost race (for a put under the next name); gone otherwise.
  if (!linked.ok() || *linked) file->temp.clear();
  return linked;
}

arrow::Result<bool> LocalStore::LinkIfAbsent(const std::string& temp, const std::string& full,
                                             const std::function<void()>& visible, bool keep_temp) {
  // The folder is opened before the link: should it be renamed away after (a dropped table),
  // its fsync still works on the folder, and a folder gone before is a NotFound.
  const std::string dir = ParentDir(full);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return err == ENOENT ? NotFound(dir + "/") : ErrnoStatus("cannot open directory", dir, err);
  }
  int rc = ::link(temp.c_str(), full.c_str());
  int err = errno;
  if (rc != 0) {
    ::close(dir_fd);
    struct stat st {};
    if (err == EEXIST && (::stat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode))) {
      // A folder (or a dangling link) at the name is no object a reader sees, so "taken"
      // would send the committer back to the same free version for ever: say what is in the
      // way instead.
      ::unlink(temp.c_str());
      return arrow::Status::IOError("cannot write ", full, ": something that is not a file (",
                                    S_ISDIR(st.st_mode) ? "a folder" : "a dangling link or a device",
                                    ") is in the way; move it out of the table's folder");
    }
    if (err == EEXIST) {
      if (!keep_temp) ::unlink(temp.c_str());
      visible();
      return false;
    }
    ::unlink(temp.c_str());
    if (err == ENOENT) return NotFound(dir + "/");
    return ErrnoStatus("cannot link into", full, err);
  }
  ::unlink(temp.c_str());
  visible();
  rc = SyncFd(sync_, dir_fd, dir);
  err = errno;
  ::close(dir_fd);
  if (rc != 0) {
    // Readers see the object, and it may not survive a crash: never acknowledge it, and
    // nothing written later may count on it either.
    arrow::Status failed = ErrnoStatus("cannot fsync directory", dir, err);
    syncs_->Fail(failed);
    return NotDurable(failed);
  }
  return true;
}

arrow::Result<int64_t> LocalStore::DeleteAbandonedTemporaries(const std::string& prefix,
                                                                int64_t older_than_ms) {
  if (prefix.empty() || prefix.back() != '/') {
    return arrow::Status::Invalid("DeleteAbandonedTemporaries needs a folder ending in '/', got '",
                                  prefix, "'");
  }
  int64_t deleted = 0;
  std::error_code ec;
  const std::string root = FullPath(prefix.substr(0, prefix.size() - 1));
  // Symlinked folders are not followed (as List does not descend them).
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kTempPrefix, 0) != 0) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const int64_t modified_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
    if (modified_ms >= older_than_ms) continue;  // maybe a writer's, still in flight
    if (::unlink(it->path().c_str()) == 0) ++deleted;
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return arrow::Status::IOError("cannot list ", root, " for abandoned temporary files: ", ec.message());
  }
  return deleted;
}

arrow::Result<bool> LocalStore::PutIfMatch(const std::string& path,
                                           const std::shared_ptr<arrow::Buffer>& data,
                                           const std::string& etag) {
  if (etag.empty()) return arrow::Status::Invalid("PutIfMatch of '", path, "' needs an entity tag");
  // A missing object cannot match: answer before creating any folder or temporary file.
  auto before = Head(path);
  if (!before.ok()) {
    if (IsNotFound(before.status())) return false;
    return before.status();
  }
  if (before->etag != etag) return false;
  const uint64_t mark = syncs_->Mark();
  const std::string full = FullPath(path);
  ARROW_ASSIGN_OR_RAISE(std::string temp, WriteTemp(full, data));
  if (arrow::Status synced = syncs_->Await(mark, ScopeOf(path)); !synced.ok()) {
    ::unlink(temp.c_str());
    return synced;
  }
  auto replaced = [&]() -> arrow::Result<bool> {
    // The compare and the rename under the folder's lock, which every replacing write takes.
    auto lock = FolderLock::Take(ParentDir(full));
    if (!lock.ok()) return IsNotFound(lock.status()) ? arrow::Result<bool>(false) : lock.status();
    auto now = Head(path);
    if (!now.ok()) return IsNotFound(now.status()) ? arrow::Result<bool>(false) : now.status();
    if (now->etag != etag) return false;
    if (::rename(temp.c_str(), full.c_str()) != 0) {
      return ErrnoStatus("cannot rename into", full, errno);
    }
    return true;
  }();
  if (!replaced.ok() || !*replaced) {
    ::unlink(temp.c_str());
    return replaced;
  }
  ARROW_RETURN_NOT_OK(FsyncDir(ParentDir(full), sync_));
  return true;
}

arrow::Result<std::shared_ptr<ObjectOutput>> LocalStore::OpenOutput(const std::string& path,
                                                                    const OutputOptions& options) {
  ARROW_RETURN_NOT_OK(options.Validate());
  const std::string full = FullPath(path);
  const std::string dir = ParentDir(full);
  ARROW_RETURN_NOT_OK(FolderForWrite(dir));
  const std::string temp = options.in_place ? full : dir + "/" + kTempPrefix + NewUuid();
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return CreateError(temp, errno);
  if (options.in_place) {
    return std::make_shared<DurableFileOutput>(fd, full, sync_, syncs_, ScopeOf(path));
  }
  return std::make_shared<DurableFileOutput>(fd, temp, full, sync_);
}

arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> LocalStore::OpenInput(
    const std::string& path) {
  // Head tells a missing object (NotFound) from one that cannot be reached (an I/O error).
  ARROW_RETURN_NOT_OK(Head(path).status());
  ARROW_ASSIGN_OR_RAISE(auto file, arrow::io::ReadableFile::Open(FullPath(path)));
  return file;
}

arrow::Result<ObjectPage> LocalStore::ListPage(const ListPageRequest& request) {
  if (request.max_keys < 1) {
    return arrow::Status::Invalid("a listing page needs max_keys >= 1, got ", request.max_keys);
  }
  // The continuation is the last path of the previous page: the listing resumes after it.
  const std::string& after = std::max(request.start_after, request.continuation);
  const size_t max_keys = static_cast<size_t>(request.max_keys);
  ObjectPage page;
  ARROW_ASSIGN_OR_RAISE(page.objects, ListScoped({request.prefix, after, max_keys + 1}));
  if (page.objects.size() > max_keys) {
    page.objects.resize(max_keys);
    page.continuation = page.objects.back().path;
  }
  return page;
}

arrow::Result<std::vector<ObjectMeta>> LocalStore::ListAfter(const std::string& prefix,
                                                             const std::string& start_after) {
  return ListScoped({prefix, start_after, std::numeric_limits<size_t>::max()});
}

arrow::Result<std::vector<ObjectMeta>> LocalStore::ListScoped(const ListScope& scope) {
  std::vector<ObjectMeta> out;
  const auto slash = scope.prefix.rfind('/');
  const std::string dir_rel = slash == std::string::npos ? "" : scope.prefix.substr(0, slash);
  ARROW_RETURN_NOT_OK(Walk(dir_rel, scope, /*top=*/true, &out));
  return out;
}

arrow::Status LocalStore::Walk(const std::string& dir_rel, const ListScope& scope, bool top,
                               std::vector<ObjectMeta>* out) {
  const std::string dir = FullPath(dir_rel);
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) {
    const int err = errno;
    // A folder that does not exist holds no objects. One that vanished while we walked its
    // parent was deleted concurrently: its objects are gone too. Anything else (permission
    // denied, a file where the folder should be, a symlink loop, I/O errors) is a real failure:
    // reporting it as "no objects" would make a table look missing or empty.
    if (err == ENOENT || (!top && err == ENOTDIR)) return arrow::Status::OK();
    return ErrnoStatus("cannot list", dir, err);
  }
  std::unique_ptr<DIR, int (*)(DIR*)> closer(handle, &::closedir);
  const int dir_fd = ::dirfd(handle);
  // First the names that can be in the listing, each with the key it sorts by (a folder's
  // objects all start with "<name>/"); only those whose kind the name alone cannot tell are
  // stat'ed here.
  struct Entry {
    std::string key;
    std::string name;
    bool folder;
  };
  std::vector<Entry> entries;
  // When the listing starts after a name in this folder (a log listed from a version on), the
  // names before it are passed over before anything is made of them: a folder of thousands of
  // commits is listed for the few after the newest checkpoint. A name that is a prefix of that
  // name may be a folder holding later paths, so it is looked at.
  const std::string dir_prefix = dir_rel.empty() ? "" : dir_rel + "/";
  std::string_view after_here;
  if (scope.start_after.size() > dir_prefix.size() &&
      scope.start_after.compare(0, dir_prefix.size(), dir_prefix) == 0 &&
      scope.start_after.find('/', dir_prefix.size()) == std::string::npos) {
    after_here = std::string_view(scope.start_after).substr(dir_prefix.size());
  }
  ARROW_RETURN_NOT_OK(ForEachEntry(handle, dir, [&](std::string_view name_view, unsigned char type)
                                                    -> arrow::Status {
    if (name_view < after_here && after_here.substr(0, name_view.size()) != name_view) {
      return arrow::Status::OK();
    }
    if (name_view.substr(0, std::string_view(kTempPrefix).size()) == kTempPrefix) {
      return arrow::Status::OK();
    }
    const std::string name(name_view);
    const std::string rel = dir_prefix + name;
    const bool as_file = InListing(rel, scope.prefix, scope.start_after);
    const bool as_folder = FolderCanHold(rel + "/", scope.prefix, scope.start_after);
    if (!as_file && !as_folder) return arrow::Status::OK();
    bool folder = type == DT_DIR;
    if (type == DT_UNKNOWN) {
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return arrow::Status::OK();  // deleted while listing
        return ErrnoStatus("cannot stat", dir + "/" + name, errno);
      }
      folder = S_ISDIR(st.st_mode);
    }
    // Symlinked folders are not descended: a link is a candidate object only.
    if (folder ? as_folder : as_file) entries.push_back({folder ? rel + "/" : rel, name, folder});
    return arrow::Status::OK();
  }));
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.key < b.key; });
  for (const auto& entry : entries) {
    if (out->size() >= scope.limit) break;
    if (entry.folder) {
      ARROW_RETURN_NOT_OK(Walk(entry.key.substr(0, entry.key.size() - 1), scope, false, out));
      continue;
    }
    struct stat st {};
    if (::fstatat(dir_fd, entry.name.c_str(), &st, 0) != 0) {
      if (errno == ENOENT) continue;  // deleted while listing, or a dangling link
      return ErrnoStatus("cannot stat", dir + "/" + entry.name, errno);
    }
    if (S_ISREG(st.st_mode)) out->push_back(MetaOf(entry.key, st));
  }
  return arrow::Status::OK();
}

arrow::Result<std::vector<std::string>> LocalStore::ListChildren(const std::string& prefix) {
  std::vector<std::string> out;
  const std::string dir = FullPath(prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1));
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) {
    const int err = errno;
    if (err == ENOENT) return out;  // see Walk: only a missing folder is an empty one
    return ErrnoStatus("cannot list", dir, err);
  }
  std::unique_ptr<DIR, int (*)(DIR*)> closer(handle, &::closedir);
  ARROW_RETURN_NOT_OK(ForEachEntry(handle, dir, [&](std::string_view name_view,
                                                    unsigned char) -> arrow::Status {
    const std::string name(name_view);
    struct stat st {};
    if (::fstatat(::dirfd(handle), name.c_str(), &st, 0) != 0) {
      if (errno == ENOENT) return arrow::Status::OK();  // deleted while listing, or dangling
      return ErrnoStatus("cannot stat", dir + "/" + name, errno);
    }
    if (S_ISDIR(st.st_mode)) out.push_back(name);
    return arrow::Status::OK();
  }));
  std::sort(out.begin(), out.end());
  return out;
}

arrow::Status LocalStore::Delete(const std::string& path) { return DeleteMany({path}); }

arrow::Status LocalStore::DeleteMany(const std::vector<std::string>& paths) {
  // One lock per folder (see FolderLock), taken once for all of its objects.
  std::map<std::string, std::vector<std::string>> by_folder;
  for (const auto& path : paths) {
    std::string full = FullPath(path);
    by_folder[ParentDir(full)].push_back(std::move(full));
  }
  for (const auto& [dir, files] : by_folder) {
    auto lock = FolderLock::Take(dir);
    if (!lock.ok()) {
      if (IsNotFound(lock.status())) continue;  // no folder: none of its objects exist
      return lock.status();
    }
    for (const auto& full : files) {
      if (::unlink(full.c_str()) != 0 && errno != ENOENT) {
        return ErrnoStatus("cannot delete", full, errno);
      }
    }
  }
  return arrow::Status::OK();
}

arrow::Status LocalStore::DeletePrefix(const std::string& prefix) {
  if (prefix.empty() || prefix.back() != '/') {
    return arrow::Status::Invalid("DeletePrefix needs a folder prefix ending in '/', got '", prefix,
                                  "'");
  }
  std::error_code ec;
  fs::remove_all(FullPath(prefix.substr(0, prefix.size() - 1)), ec);
  if (ec) return arrow::Status::IOError("cannot delete '", prefix, "': ", ec.message());
  return arrow::Status::OK();
}

arrow::Status LocalStore::RenamePrefix(const std::string& prefix, const std::string& to) {
  if (prefix.size() < 2 || prefix.back() != '/' || to.size() < 2 || to.back() != '/') {
    return arrow::Status::Invalid("RenamePrefix needs folder prefixes ending in '/', got '", prefix,
                                  "' and '", to, "'");
  }
  const std::string from_dir = FullPath(prefix.substr(0, prefix.size() - 1));
  const std::string to_dir = FullPath(to.substr(0, to.size() - 1));
  ARROW_RETURN_NOT_OK(EnsureDir(ParentDir(to_dir)));
  // RENAME_NOREPLACE semantics for directories: rename(2) replaces an empty target directory,
  // so the caller's fresh target name is what keeps this from clobbering anything.
  if (::rename(from_dir.c_str(), to_dir.c_str()) != 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound(prefix);
    return ErrnoStatus("cannot rename", from_dir, err);
  }
  ARROW_RETURN_NOT_OK(FsyncDir(ParentDir(from_dir), sync_));
  if (ParentDir(to_dir) != ParentDir(from_dir)) {
    ARROW_RETURN_NOT_OK(FsyncDir(ParentDir(to_dir), sync_));
  }
  return arrow::Status::OK();
}

std::string LocalStore::RootUrl() const { return "file://" + root_; }

std::string LocalStore::ExternalPath(const std::string& path) const { return FullPath(path); }

}  // namespace timelake
