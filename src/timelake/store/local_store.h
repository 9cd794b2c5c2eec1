// LocalStore: an ObjectStore over a directory of the local file system.
//
// Objects are files below the root; "directories" are created on demand. Put-if-absent writes a
// temporary file in the target directory, fsyncs it, then link(2)s it to the final name (which
// fails with EEXIST if the name is taken, atomically), then fsyncs the directory. Temporary files
// are named ".tmp-<uuid>" so that listings skip them. Streams from OpenOutput also write a temporary
// file and rename it into place on Close.
//
// Only a missing file or folder means "no such object" (NotFound, an empty listing). Every other
// failure to reach one (permission denied, a file where a folder should be, a symlink loop, I/O
// errors) is an IOError naming the path, so that an unreadable lake never passes for an empty one.
// Listings do not descend into symlinked folders; symlinked files are listed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "timelake/store/object_store.h"

namespace timelake {

class LocalStore : public ObjectStore {
 public:
  /// `root` must be an absolute path; it is created if missing.
  static arrow::Result<std::shared_ptr<LocalStore>> Make(const std::string& root);

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
  std::string RootUrl() const override;
  std::string ExternalPath(const std::string& path) const override;

  const std::string& root() const { return root_; }

 private:
  explicit LocalStore(std::string root) : root_(std::move(root)) {}
  std::string FullPath(const std::string& path) const;
  /// Appends the regular files under folder `dir_rel` whose paths start with `prefix` to `out`.
  /// `top`: `dir_rel` is the listing's own folder (not one found while walking).
  arrow::Status Walk(const std::string& dir_rel, const std::string& prefix, bool top,
                     std::vector<ObjectMeta>* out);
  /// Writes `data` to a fresh temporary file next to `full` and fsyncs it; returns its path.
  arrow::Result<std::string> WriteTemp(const std::string& full,
                                       const std::shared_ptr<arrow::Buffer>& data);

  std::string root_;
};

}  // namespace timelake
