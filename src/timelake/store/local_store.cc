#include "timelake/store/local_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include <arrow/io/file.h>

#include "timelake/util/ids.h"
#include "timelake/util/status.h"

namespace fs = std::filesystem;

namespace timelake {
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

// Calls `visit(name)` for every entry of the open folder `handle` (at `dir`) but "." and "..",
// stopping at the first failure; a failed read of the folder is an error naming it.
template <typename Visit>
arrow::Status ForEachEntry(DIR* handle, const std::string& dir, Visit&& visit) {
  for (;;) {
    errno = 0;
    const struct dirent* entry = ::readdir(handle);
    if (entry == nullptr) {
      if (errno != 0) return ErrnoStatus("cannot list", dir, errno);
      return arrow::Status::OK();
    }
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    ARROW_RETURN_NOT_OK(visit(name));
  }
}

arrow::Status FsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("cannot open directory", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus("cannot fsync directory", dir, err);
  return arrow::Status::OK();
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
// final name and fsyncs the folder: the object appears whole or not at all.
class DurableFileOutput : public arrow::io::OutputStream {
 public:
  DurableFileOutput(int fd, std::string temp, std::string path)
      : fd_(fd), temp_(std::move(temp)), path_(std::move(path)) {}
  ~DurableFileOutput() override {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(temp_.c_str());  // never closed: the object was not written
    }
  }
  arrow::Status Write(const void* data, int64_t nbytes) override {
    if (fd_ < 0) return arrow::Status::Invalid("write to a closed file '", path_, "'");
    ARROW_RETURN_NOT_OK(WriteAll(fd_, static_cast<const uint8_t*>(data), nbytes, temp_));
    position_ += nbytes;
    return arrow::Status::OK();
  }
  arrow::Result<int64_t> Tell() const override { return position_; }
  bool closed() const override { return fd_ < 0; }
  arrow::Status Close() override {
    if (fd_ < 0) return arrow::Status::OK();
    int rc = ::fsync(fd_);
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (rc != 0) {
      ::unlink(temp_.c_str());
      return ErrnoStatus("cannot fsync", temp_, err);
    }
    if (::rename(temp_.c_str(), path_.c_str()) != 0) {
      err = errno;
      ::unlink(temp_.c_str());
      return ErrnoStatus("cannot rename into", path_, err);
    }
    return FsyncDir(ParentDir(path_));
  }

 private:
  int fd_;
  std::string temp_;
  std::string path_;
  int64_t position_ = 0;
};

}  // namespace

arrow::Result<std::shared_ptr<LocalStore>> LocalStore::Make(const std::string& root) {
  if (root.empty() || root[0] != '/') {
    return arrow::Status::Invalid("local store root must be an absolute path, got '", root, "'");
  }
  std::string clean = fs::path(root).lexically_normal().string();
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  ARROW_RETURN_NOT_OK(EnsureDir(clean));
  return std::shared_ptr<LocalStore>(new LocalStore(clean));
}

std::string LocalStore::FullPath(const std::string& path) const {
  return path.empty() ? root_ : root_ + "/" + path;
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
  return ObjectMeta{path, static_cast<int64_t>(st.st_size),
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000};
}

arrow::Result<std::string> LocalStore::WriteTemp(const std::string& full,
                                                 const std::shared_ptr<arrow::Buffer>& data) {
  const std::string dir = ParentDir(full);
  ARROW_RETURN_NOT_OK(EnsureDir(dir));
  const std::string temp = dir + "/" + kTempPrefix + NewUuid();
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create", temp, errno);
  arrow::Status st = WriteAll(fd, data->data(), data->size(), temp);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoStatus("cannot fsync", temp, errno);
  ::close(fd);
  if (!st.ok()) {
    ::unlink(temp.c_str());
    return st;
  }
  return temp;
}

arrow::Status LocalStore::Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) {
  const std::string full = FullPath(path);
  ARROW_ASSIGN_OR_RAISE(std::string temp, WriteTemp(full, data));
  if (::rename(temp.c_str(), full.c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    return ErrnoStatus("cannot rename into", full, err);
  }
  return FsyncDir(ParentDir(full));
}

arrow::Result<bool> LocalStore::PutIfAbsent(const std::string& path,
                                            const std::shared_ptr<arrow::Buffer>& data) {
  const std::string full = FullPath(path);
  ARROW_ASSIGN_OR_RAISE(std::string temp, WriteTemp(full, data));
  int rc = ::link(temp.c_str(), full.c_str());
  int err = errno;
  ::unlink(temp.c_str());
  if (rc != 0) {
    if (err == EEXIST) return false;
    return ErrnoStatus("cannot link into", full, err);
  }
  ARROW_RETURN_NOT_OK(FsyncDir(ParentDir(full)));
  return true;
}

arrow::Result<std::shared_ptr<arrow::io::OutputStream>> LocalStore::OpenOutput(
    const std::string& path) {
  const std::string full = FullPath(path);
  const std::string dir = ParentDir(full);
  ARROW_RETURN_NOT_OK(EnsureDir(dir));
  const std::string temp = dir + "/" + kTempPrefix + NewUuid();
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create", temp, errno);
  return std::make_shared<DurableFileOutput>(fd, temp, full);
}

arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> LocalStore::OpenInput(
    const std::string& path) {
  // Head tells a missing object (NotFound) from one that cannot be reached (an I/O error).
  ARROW_RETURN_NOT_OK(Head(path).status());
  ARROW_ASSIGN_OR_RAISE(auto file, arrow::io::ReadableFile::Open(FullPath(path)));
  return file;
}

arrow::Result<std::vector<ObjectMeta>> LocalStore::List(const std::string& prefix) {
  std::vector<ObjectMeta> out;
  const auto slash = prefix.rfind('/');
  const std::string dir_rel = slash == std::string::npos ? "" : prefix.substr(0, slash);
  ARROW_RETURN_NOT_OK(Walk(dir_rel, prefix, /*top=*/true, &out));
  std::sort(out.begin(), out.end(),
            [](const ObjectMeta& a, const ObjectMeta& b) { return a.path < b.path; });
  return out;
}

arrow::Status LocalStore::Walk(const std::string& dir_rel, const std::string& prefix, bool top,
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
  return ForEachEntry(handle, dir, [&](const std::string& name) -> arrow::Status {
    if (name.rfind(kTempPrefix, 0) == 0) return arrow::Status::OK();
    std::string rel = dir_rel.empty() ? name : dir_rel + "/" + name;
    struct stat st {};
    if (::fstatat(::dirfd(handle), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return arrow::Status::OK();  // deleted while listing
      return ErrnoStatus("cannot stat", dir + "/" + name, errno);
    }
    if (S_ISDIR(st.st_mode)) {
      // Descend only where objects matching the prefix can be.
      const std::string as_dir = rel + "/";
      if (as_dir.compare(0, std::min(as_dir.size(), prefix.size()), prefix, 0,
                         std::min(as_dir.size(), prefix.size())) == 0) {
        ARROW_RETURN_NOT_OK(Walk(rel, prefix, /*top=*/false, out));
      }
      return arrow::Status::OK();
    }
    if (rel.compare(0, prefix.size(), prefix) != 0) return arrow::Status::OK();
    if (S_ISLNK(st.st_mode) && ::fstatat(::dirfd(handle), name.c_str(), &st, 0) != 0) {
      if (errno == ENOENT) return arrow::Status::OK();  // a dangling link names no object
      return ErrnoStatus("cannot stat", dir + "/" + name, errno);
    }
    if (!S_ISREG(st.st_mode)) return arrow::Status::OK();
    out->push_back({std::move(rel), static_cast<int64_t>(st.st_size),
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000});
    return arrow::Status::OK();
  });
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
  ARROW_RETURN_NOT_OK(ForEachEntry(handle, dir, [&](const std::string& name) -> arrow::Status {
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

arrow::Status LocalStore::Delete(const std::string& path) {
  const std::string full = FullPath(path);
  if (::unlink(full.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("cannot delete", full, errno);
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
  ARROW_RETURN_NOT_OK(FsyncDir(ParentDir(from_dir)));
  if (ParentDir(to_dir) != ParentDir(from_dir)) ARROW_RETURN_NOT_OK(FsyncDir(ParentDir(to_dir)));
  return arrow::Status::OK();
}

std::string LocalStore::RootUrl() const { return "file://" + root_; }

std::string LocalStore::ExternalPath(const std::string& path) const { return FullPath(path); }

}  // namespace timelake
