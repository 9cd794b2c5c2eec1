#include "timelake/store/posix_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "timelake/util/status.h"

namespace timelake {

namespace {

arrow::Status Errno(const char* what, const std::string& path, int err) {
  return arrow::Status::IOError(what, " '", path, "': ", std::strerror(err));
}

// The open file with its shared flock(2).
class HeldFile : public LocalFiles::Liveness {
 public:
  explicit HeldFile(int fd) : fd_(fd) {}
  ~HeldFile() override { ::close(fd_); }
  HeldFile(const HeldFile&) = delete;
  HeldFile& operator=(const HeldFile&) = delete;

 private:
  int fd_;
};

arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAll(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Errno("cannot stat", path, errno);
  ARROW_ASSIGN_OR_RAISE(auto buffer, arrow::AllocateResizableBuffer(st.st_size));
  int64_t done = 0;
  while (done < st.st_size) {
    const ssize_t n =
        ::pread(fd, buffer->mutable_data() + done, static_cast<size_t>(st.st_size - done), done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno("cannot read", path, n < 0 ? errno : EIO);
    done += n;
  }
  return std::shared_ptr<arrow::Buffer>(std::move(buffer));
}

int64_t AgeMs(const struct stat& st, const struct timespec& now) {
  const int64_t ms = (static_cast<int64_t>(now.tv_sec) - st.st_mtim.tv_sec) * 1000 +
                     (now.tv_nsec - st.st_mtim.tv_nsec) / 1'000'000;
  return ms < 0 ? 0 : ms;
}

}  // namespace

std::string PosixFiles::FullPath(const std::string& path) const { return root_ + "/" + path; }

arrow::Result<std::unique_ptr<LocalFiles::Liveness>> PosixFiles::Publish(
    const std::string& scratch, const std::string& path, const arrow::Buffer& data, bool hold) {
  const std::string temp = FullPath(scratch), full = FullPath(path);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", temp, errno);
  // The lock comes before the name: nobody sees `path` without it.
  bool ok = !hold || ::flock(fd, LOCK_SH) == 0;
  // Written over the old contents, then cut to length (posix_files.h says why not truncated).
  for (int64_t done = 0; ok && done < data.size();) {
    const ssize_t n =
        ::pwrite(fd, data.data() + done, static_cast<size_t>(data.size() - done), done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += n;
  }
  struct stat st;
  ok = ok && ::fstat(fd, &st) == 0 &&
       (st.st_size <= data.size() || ::ftruncate(fd, data.size()) == 0);
  ok = ok && ::rename(temp.c_str(), full.c_str()) == 0;
  if (!ok) {
    arrow::Status failed = Errno("cannot write", full, errno);
    ::unlink(temp.c_str());
    ::close(fd);
    return failed;
  }
  if (hold) return std::unique_ptr<Liveness>(new HeldFile(fd));
  ::close(fd);
  return nullptr;
}

arrow::Result<bool> PosixFiles::Claim(const std::string& from, const std::string& to) {
  const std::string full = FullPath(from);
  if (::rename(full.c_str(), FullPath(to).c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  return Errno("cannot rename", full, errno);
}

arrow::Result<bool> PosixFiles::Withdraw(const std::string& path) {
  const std::string full = FullPath(path);
  if (::unlink(full.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  return Errno("cannot delete", full, errno);
}

arrow::Result<bool> PosixFiles::IsHeld(const std::string& path) {
  const std::string full = FullPath(path);
  const int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? NotFound(path) : Errno("cannot open", full, errno);
  // A holder's shared lock keeps an exclusive one out; taken, it ends with the close.
  const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return !free;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> PosixFiles::Read(const std::string& path) {
  const std::string full = FullPath(path);
  const int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? NotFound(path) : Errno("cannot open", full, errno);
  auto data = ReadAll(fd, full);
  ::close(fd);
  return data;
}

arrow::Result<std::vector<LocalFileInfo>> PosixFiles::List(const std::string& folder,
                                                           ListDetail detail) {
  const std::string dir = FullPath(folder);
  std::vector<LocalFileInfo> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return out;
    return Errno("cannot list", dir, errno);
  }
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) break;
    const std::string name = e->d_name;
    if (name == "." || name == ".." || e->d_type == DT_DIR) continue;
    out.push_back(LocalFileInfo{name});
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return Errno("cannot list", dir, err);
  if (detail == ListDetail::kNames) return out;
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  std::vector<LocalFileInfo> aged;
  for (auto& f : out) {
    struct stat st;
    if (::stat((dir + "/" + f.name).c_str(), &st) != 0) continue;  // deleted meanwhile
    if (!S_ISREG(st.st_mode)) continue;
    f.age_ms = AgeMs(st, now);
    f.identity = static_cast<uint64_t>(st.st_ino);
    aged.push_back(std::move(f));
  }
  return aged;
}

}  // namespace timelake
