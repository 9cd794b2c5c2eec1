// LocalStore: an ObjectStore over a directory of the local file system.
//
// Objects are files below the root; "directories" are created on demand. Every write goes to a
// temporary file in the target directory that is fsynced before it takes the object's name, and
// the directory is fsynced after: Put and output streams rename(2) it into place (Abort or a
// stream destroyed unclosed unlinks it), PutIfAbsent link(2)s it, which fails with EEXIST if the
// name is taken, atomically. Temporary files are named ".tmp-<uuid>" so that listings skip them.
// OutputOptions::part_size is checked and otherwise ignored (a file is written in place).
// With OutputOptions::in_place a stream writes its final name directly (O_EXCL: never an
// existing file), and its Close hands the fsyncs of the file and its folder to the store's sync
// workers (up to four threads, started when needed; local_store.cc) and returns: every later Put,
// PutIfAbsent and PutIfMatch of the store waits for them before it publishes anything, so a
// commit never names a data file that is not yet durable, and the data file's fsyncs overlap the
// commit's own (one disk flush less on an append's path). A failed fsync fails every later put of
// the store (the disk may have dropped written pages: open the lake again). The workers belong to
// the store (a Lake opens one of its own) and its in-place outputs: the last of them to be
// destroyed waits for the syncs still running and joins the workers. A child fork()ed meanwhile
// does not wait for its parent's syncs and starts workers of its own; no fork handlers are
// involved (util/per_process.h).
//
// Entity tags are made of the file's inode, size, modification and change times (nanoseconds):
// every write makes a new file, with a new inode or (should the inode be reused) a modification
// time that LocalStore sets from the precise clock, so every replacement changes the tag.
//
// PutIfMatch is atomic against concurrent threads and processes that use LocalStore on the same
// folder: the compare and the rename happen under an exclusive flock(2) of the object's folder,
// which Put, Delete, DeleteMany and the rename of a closing output stream also take for their
// rename or unlink (only that step: writing and fsyncing the bytes happen outside it). PutIfAbsent
// needs no lock (link(2) never replaces). DeletePrefix and RenamePrefix do not take the lock, and
// programs that write the files directly bypass it.
//
// AsLocalFiles gives PosixFiles over the root (store/posix_files.h): the group-commit spool's
// files, written, renamed and locked there directly, outside the folder locks above.
//
// Listings read each folder's names (readdir, no stat) and stat only the entries that can be in
// the listing: a listing after a key in a folder of 100,000 commits stats only the newer ones.
// ListAfter walks the tree once; ListPage walks it again for every page.
//
// Folders below the root are made on demand by writes, except the top `fixed_depth` levels
// (Make): a lake keeps tables at <namespace>/<table>/, and a write of a handle whose table was
// dropped (the folder renamed away) must fail NotFound rather than bring the folder back. Those
// levels are made by MakeFolders only (create_table).
//
// Only a missing file or folder means "no such object" (NotFound, an empty listing). Every other
// failure to reach one (permission denied, a file where a folder should be, a symlink loop, I/O
// errors) is an IOError naming the path, so that an unreadable lake never passes for an empty one.
// Listings do not descend into symlinked folders; symlinked files are listed.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "timelake/store/object_store.h"

namespace timelake {

class LocalStore : public ObjectStore {
 public:
  /// Makes the open file or folder `fd` (at the full path `path`) durable as fsync(2) does: 0,
  /// or -1 with errno set. Tests pass one that fails chosen paths; empty is fsync(2).
  using SyncFunction = std::function<int(int fd, const std::string& path)>;

  /// `root` must be an absolute path; it is created if missing. Writes make missing folders
  /// deeper than `fixed_depth` levels below the root and fail NotFound, naming the folder, where
  /// one of the top `fixed_depth` levels is missing; MakeFolders makes any. Every fsync goes
  /// through `sync`.
  static arrow::Result<std::shared_ptr<LocalStore>> Make(const std::string& root,
                                                         int fixed_depth = 0,
                                                         SyncFunction sync = nullptr);

  arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> GetRange(const std::string& path, int64_t offset,
                                                         int64_t length) override;
  arrow::Result<ObjectMeta> Head(const std::string& path) override;
  /// PosixFiles (store/posix_files.h) over the root.
  std::shared_ptr<LocalFiles> AsLocalFiles() override;
  /// flock(2) on the file `path` (created, with its folder, inside an existing folder), polled.
  bool HasLocks() const override { return true; }
  arrow::Result<std::unique_ptr<StoreLock>> LockExclusive(const std::string& path,
                                                          int64_t wait_ms) override;
  arrow::Status Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) override;
  /// A temporary file renamed into place under the folder's lock, without any fsync.
  arrow::Status PutDerived(const std::string& path,
                           const std::shared_ptr<arrow::Buffer>& data) override;
  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override;
  /// `visible` after the link(2), before the folder's fsync.
  arrow::Result<bool> PutIfAbsentVisible(const std::string& path,
                                         const std::shared_ptr<arrow::Buffer>& data,
                                         const std::function<void()>& visible) override;
  arrow::Result<int64_t> DeleteAbandonedTemporaries(const std::string& prefix,
                                                     int64_t older_than_ms) override;
  /// Writes and fsyncs `data` into a temporary file of the folder and waits for the data files
  /// closed before (the put's own wait): the put is then a link and its folder's fsync.
  arrow::Result<std::unique_ptr<Staged>> Stage(const std::string& path,
                                               std::shared_ptr<arrow::Buffer> data) override;
  arrow::Result<bool> PutStagedIfAbsent(const std::string& path, Staged* staged,
                                        const std::function<void()>& visible) override;
  arrow::Result<bool> PutIfMatch(const std::string& path,
                                 const std::shared_ptr<arrow::Buffer>& data,
                                 const std::string& etag) override;
  using ObjectStore::OpenOutput;
  arrow::Result<std::shared_ptr<ObjectOutput>> OpenOutput(const std::string& path,
                                                          const OutputOptions& options) override;
  arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInput(
      const std::string& path) override;
  arrow::Result<ObjectPage> ListPage(const ListPageRequest& request) override;
  arrow::Result<std::vector<ObjectMeta>> ListAfter(const std::string& prefix,
                                                   const std::string& start_after) override;
  arrow::Result<std::vector<std::string>> ListChildren(const std::string& prefix) override;
  arrow::Status Delete(const std::string& path) override;
  arrow::Status DeleteMany(const std::vector<std::string>& paths) override;
  arrow::Status DeletePrefix(const std::string& prefix) override;
  arrow::Status MakeFolders(const std::string& prefix) override;
  /// fsync(2) of the folder, through the store's SyncFunction.
  arrow::Status SyncFolder(const std::string& prefix) override;
  arrow::Status RenamePrefix(const std::string& prefix, const std::string& to) override;
  std::string RootUrl() const override;
  std::string ExternalPath(const std::string& path) const override;

  const std::string& root() const { return root_; }

 private:
  LocalStore(std::string root, int fixed_depth, SyncFunction sync);
  std::string FullPath(const std::string& path) const;
  /// The first fixed_depth_ levels of `path` ("ns/t/"): whose data-file syncs a put waits for.
  std::string ScopeOf(const std::string& path) const;
  /// Makes the folder (a full path below the root) for a write, as fixed_depth_ allows.
  arrow::Status FolderForWrite(const std::string& dir) const;
  struct ListScope {
    const std::string& prefix;
    const std::string& start_after;
    size_t limit;  // stop once the listing holds this many objects
  };
  /// Lists the objects of `scope` from the start: Walk from the listing's own folder.
  arrow::Result<std::vector<ObjectMeta>> ListScoped(const ListScope& scope);
  /// Appends the regular files under folder `dir_rel` that are in `scope` to `out`, in path
  /// order, until `out` holds `scope.limit` objects. `top`: `dir_rel` is the listing's own
  /// folder (not one found while walking).
  arrow::Status Walk(const std::string& dir_rel, const ListScope& scope, bool top,
                     std::vector<ObjectMeta>* out);
  /// Writes `data` to a fresh temporary file next to `full` and fsyncs it unless `durable` is
  /// false; returns its path.
  /// Links the durable temporary file `temp` as `full` if nothing is there (PutIfAbsentVisible
  /// after the write). The temporary file is removed, except after `false` with `keep_temp`.
  arrow::Result<bool> LinkIfAbsent(const std::string& temp, const std::string& full,
                                   const std::function<void()>& visible, bool keep_temp);
  arrow::Result<std::string> WriteTemp(const std::string& full,
                                       const std::shared_ptr<arrow::Buffer>& data,
                                       bool durable = true);

  std::string root_;
  int fixed_depth_;
  SyncFunction sync_;
  /// The fsyncs of closed in-place streams still running (local_store.cc); shared with them.
  std::shared_ptr<class SyncQueue> syncs_;
  std::shared_ptr<LocalFiles> files_;  // PosixFiles over root_
};

}  // namespace timelake
