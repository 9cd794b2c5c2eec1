// PosixFiles: LocalFiles (store/local_files.h) over a folder of this machine's file system, as
// LocalStore hands them out. Shared by every process that opens the same folder.
//
//  * Publish opens the scratch file (O_CREAT, never a folder), takes flock(2) LOCK_SH on it when
//    asked to hold, pwrite(2)s over the old contents, ftruncate(2)s only when they were longer
//    (truncating to zero first would make ext4 write the file back on close, its guard for files
//    replaced by truncation), and rename(2)s it. Files are reused because making files in a folder
//    where thousands are made and deleted costs more than the rest of a hand-over (ext4's inode
//    allocator steps over recently deleted inodes).
//  * Claim is rename(2) and Withdraw unlink(2): the kernel settles their race; ENOENT is `false`.
//  * A Liveness is the open file with its LOCK_SH; its end closes the descriptor (no LOCK_UN: a
//    child fork()ed meanwhile shares it and keeps the sign of life until it exits too).
//    IsHeld tries LOCK_EX | LOCK_NB on a new open of the file and releases it at once.
//  * Ages come from the files' modification times (stat(2)), identities are inodes.
//
// Thread-safe: it keeps no state but its root.
#pragma once

#include <string>

#include "timelake/store/local_files.h"

namespace timelake {

class PosixFiles : public LocalFiles {
 public:
  /// `root`: the absolute path that paths are relative to (a LocalStore's root). Made nothing.
  explicit PosixFiles(std::string root) : root_(std::move(root)) {}

  arrow::Result<std::unique_ptr<Liveness>> Publish(const std::string& scratch,
                                                   const std::string& path,
                                                   const arrow::Buffer& data, bool hold) override;
  arrow::Result<bool> Claim(const std::string& from, const std::string& to) override;
  arrow::Result<bool> Withdraw(const std::string& path) override;
  arrow::Result<bool> IsHeld(const std::string& path) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> Read(const std::string& path) override;
  arrow::Result<std::vector<LocalFileInfo>> List(const std::string& folder,
                                                 ListDetail detail) override;

  /// The file `path` names.
  std::string FullPath(const std::string& path) const;

 private:
  std::string root_;
};

}  // namespace timelake
