// LocalFiles: the files of a store that the processes of this machine share, for protocols between
// those processes that ObjectStore cannot carry (the group-commit spool, table/spool.h).
//
// ObjectStore gives what every store can give, object stores included. A hand-over between the
// writer processes of one machine needs what only a local file system gives: a rename whose
// caller learns whether it won the race against a delete (claim against withdraw), a delete that
// says whether the file was there, a shared lock held on a file as a sign of life of its holder
// with a probe that never waits, the age of a file, and a file overwritten in place to be reused.
// A store whose objects are such files hands them out (ObjectStore::AsLocalFiles); other stores
// hand out nullptr, and the protocols that need them are not used there.
//
// Paths are ObjectStore's: relative to the store's root, '/'-separated. Nothing here makes a
// folder: a write into a missing folder fails, a listing of one is empty. Nothing here is durable
// (no fsync): these files only live while the processes that made them wait on each other.
//
// Threads: every method may be called from any number of threads at once. Races between callers
// (threads or processes) are settled as each method says: of a Claim and a Withdraw of one file,
// or of two Claims, exactly one gets `true`.
//
// Implementations: LocalStore's (store/posix_files.h: rename(2), unlink(2), flock(2), readdir(3)
// on the store's folder, shared with other processes) and MemoryStore's (store/memory_files.h:
// the same rules within one process, for tests).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <arrow/buffer.h>
#include <arrow/result.h>
#include <arrow/status.h>

namespace timelake {

/// A file of a folder, as LocalFiles::List sees it.
struct LocalFileInfo {
  std::string name;  // within the folder listed
  /// Only with LocalFiles::ListDetail::kAges (0 otherwise):
  int64_t age_ms = 0;     // since the file was last written (never negative)
  uint64_t identity = 0;  // the file's own: kept through renames and writes in place (an inode)
};

class LocalFiles {
 public:
  virtual ~LocalFiles() = default;

  /// A shared lock on a file, held while this lives (and only by the process that took it):
  /// the sign of life of a process waiting on the file (IsHeld). It follows the file through
  /// renames and writes in place, and goes with its holder (a process that dies loses it).
  class Liveness {
   public:
    virtual ~Liveness() = default;
  };

  /// Writes `data` into the file `scratch`, reused when it exists (overwritten in place and cut
  /// to `data`'s length: the same file, its identity kept) and made otherwise, then renames it
  /// to `path` (replacing what was there). With `hold`, the file is locked shared before it
  /// takes `path` (nobody sees `path` without the lock) and the lock is returned; otherwise
  /// nullptr. Fails where the folder is missing, making nothing; on failure `scratch` is deleted
  /// and `path` is as it was. Readers of `path` see the old file or the whole new one; `scratch`
  /// itself is not for readers.
  virtual arrow::Result<std::unique_ptr<Liveness>> Publish(const std::string& scratch,
                                                           const std::string& path,
                                                           const arrow::Buffer& data,
                                                           bool hold) = 0;

  /// Renames the file `from` to `to` (replacing what was there): true when this call moved it,
  /// false when `from` was not there (claimed or withdrawn by another caller first, or never
  /// made). An error status for any other failure (nothing moved).
  virtual arrow::Result<bool> Claim(const std::string& from, const std::string& to) = 0;

  /// Deletes the file `path`: true when this call deleted it, false when it was not there.
  virtual arrow::Result<bool> Withdraw(const std::string& path) = 0;

  /// Whether a Liveness is held on the file `path`, by any holder; never waits. True also where
  /// the file system cannot tell (locks unsupported). NotFound when the file is missing.
  virtual arrow::Result<bool> IsHeld(const std::string& path) = 0;

  /// The whole file; NotFound when it is missing.
  virtual arrow::Result<std::shared_ptr<arrow::Buffer>> Read(const std::string& path) = 0;

  enum class ListDetail {
    kNames,  // names only (LocalStore: a read of the folder, no stat(2) per file)
    kAges,   // names, ages and identities
  };
  /// The files of the folder `folder` (not its subfolders; with kNames, a file system that does
  /// not tell entry types may list them too), in no promised order; empty when the folder is
  /// missing. A file deleted while the listing runs may be left out.
  virtual arrow::Result<std::vector<LocalFileInfo>> List(const std::string& folder,
                                                         ListDetail detail) = 0;
};

}  // namespace timelake
