// ObjectStore: the one seam between timelake and storage.
//
// Every byte timelake reads or writes goes through an ObjectStore: the Delta log, data files,
// checkpoints, side files. The one exception are the files that the writer processes of one
// machine hand each other (the group-commit spool), which go through the store's LocalFiles
// (store/local_files.h, AsLocalFiles), a seam of its own beside this one. Paths are relative to
// the store's root, '/'-separated, never starting with '/'. Implementations: LocalStore (a
// directory), MemoryStore (tests); decorators derive from ForwardingStore
// (store/forwarding_store.h), such as FaultStore (store/fault_store.h). Stores are made from a URL
// by OpenStore (store/store_factory.h), the only code that knows URL schemes.
//
// A new store (S3, GCS, Azure, …) implements the pure virtual methods below; ListAfter and
// DeleteMany have defaults built on ListPage and Delete that it overrides where the service can do
// better (a batch delete request, a local directory read once).
//
// Threads: every method of a store may be called concurrently from any number of threads; a
// store needs no external locking. A stream returned by OpenOutput or OpenInput belongs to one
// thread at a time (like Arrow's streams).
//
// Guarantees every implementation gives:
//  * PutIfAbsent is atomic: of any number of concurrent callers for one path, exactly one gets
//    `true`, and readers never see a partial object.
//  * PutIfMatch is a compare-and-swap on the entity tag: it replaces the object only if its tag
//    is still the one given, atomically against every other write of that path.
//  * Put replaces atomically (readers see the old or the new object, never a mix).
//  * When a write call returns OK the object is durable (for LocalStore: file and directory
//    fsync); an output stream's object is visible and durable when Close returns OK, and never
//    before.
//  * Get/Head of a missing object fail with a status for which IsNotFound() is true.
//  * Listings are sorted by path and see every object whose write returned before they started.
//
// Ambiguous outcomes. A store cannot always know whether a write landed: a request can time out
// after the service applied it, and a client that retries a conditional put can be refused by
// its own first attempt. The rule for every store:
//  * A write that returns OK (or `true`) landed. A conditional write that returns `false` did not
//    write this call's bytes *in this attempt*.
//  * When a store cannot tell whether a write landed (or may still land: a request in flight when
//    the client gave up), it returns an error status that is not NotFound, marked with
//    OutcomeUnknown() from util/status.h: the object may hold the new bytes, the old ones, or
//    none. An error without the mark means the write did not happen.
//  * A retried PutIfAbsent or PutIfMatch may report `false` for an object that is the caller's
//    own earlier attempt. Stores do not try to tell these cases apart.
// So a caller for whom the difference matters (the transaction layer committing a log version)
// reads the object after any outcome other than OK/`true` and recognises its own write by its
// content (a commit's txnId), never by the reply alone.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <arrow/buffer.h>
#include <arrow/io/interfaces.h>
#include <arrow/result.h>
#include <arrow/status.h>

namespace timelake {

class LocalFiles;  // store/local_files.h

struct ObjectMeta {
  std::string path;  // relative to the store root
  int64_t size = 0;
  int64_t modified_ms = 0;  // last modification, milliseconds since the epoch
  /// The entity tag: opaque, different after every write that replaces the object with other
  /// bytes (an S3 ETag, a GCS generation, …; S3's tag is the content's MD5, so a write of
  /// identical bytes may keep it). Compare it only for equality, only with tags of the same store.
  std::string etag;
};

/// An object's bytes with the times its GET reply gave (ObjectStore::GetDated).
struct DatedObject {
  std::shared_ptr<arrow::Buffer> data;
  /// When the object was last written, by the service's clock (ms since the epoch); -1: unknown.
  int64_t modified_ms = -1;
  /// When the service answered, by the same clock (the reply's Date); -1: unknown.
  int64_t served_ms = -1;
};

/// One page of a listing (see ObjectStore::ListPage).
struct ListPageRequest {
  std::string prefix;
  /// Only objects whose path is greater than this (byte-wise); "" for all.
  std::string start_after;
  /// "" for the first page, then the `continuation` of the previous page.
  std::string continuation;
  /// At most this many objects (a store may return fewer, even none, before the last page).
  int64_t max_keys = 1000;
};

struct ObjectPage {
  std::vector<ObjectMeta> objects;  // sorted by path
  /// Where the next page starts; "" when this was the last page.
  std::string continuation;
};

/// How an output stream writes its object.
struct OutputOptions {
  static constexpr int64_t kMinPartSize = int64_t{5} << 20;  // S3's minimum part
  static constexpr int64_t kMaxPartSize = int64_t{5} << 30;  // S3's maximum part
  /// Bytes per part of a multipart upload: a stream buffers this much before sending a part, so
  /// it bounds the memory a stream holds. Stores that write in place (LocalStore, MemoryStore)
  /// check it and otherwise ignore it.
  int64_t part_size = int64_t{8} << 20;
  /// The path is a new, unique name that nobody reads before the caller publishes it another
  /// way (a data file, before the commit that adds it): the store may write it at its final name
  /// as it goes, so a listing can show it partial and a crash can leave it partial (unreferenced,
  /// for vacuum). LocalStore then skips the temporary file and the rename, which makes the sync
  /// of the folder after the file's cheap. Object stores write in parts as always (an upload is
  /// invisible until it completes); S3 takes it to mean that every other upload of the name was
  /// started by this stream (a CreateMultipartUpload whose reply was lost), and aborts those.
  bool in_place = false;

  /// Invalid (naming the value and the bounds) unless kMinPartSize <= part_size <= kMaxPartSize.
  arrow::Status Validate() const;
};

/// A stream that writes one new object. Nothing is visible at the path until Close returns OK;
/// then the whole object is, durably. Abort discards the object (a temporary file is deleted, a
/// multipart upload is aborted so that no parts are left behind) and leaves whatever the path
/// held before untouched. A stream destroyed without Close aborts. After Close or Abort the
/// stream is closed: writes fail, and a further Close or Abort returns OK and does nothing.
class ObjectOutput : public arrow::io::OutputStream {
 public:
  /// Arrow's default Abort closes the stream, which here would publish a partial object.
  arrow::Status Abort() override = 0;
};

/// An advisory lock, held while the object lives (ObjectStore::LockExclusive).
class StoreLock {
 public:
  virtual ~StoreLock() = default;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  /// Takes the exclusive advisory lock named `path`, shared by every process of this machine,
  /// waiting for it up to `wait_ms`; nullptr when the wait ran out, where the store has none
  /// (object stores) or where it cannot be made (the parent of `path`'s folder does not exist:
  /// the lock never makes a folder outside an existing one; a read-only folder; a file system
  /// without locks). Writers take turns with it where turns are cheap; correctness never
  /// depends on it, and nobody waits on a holder that stopped for longer than `wait_ms`.
  virtual arrow::Result<std::unique_ptr<StoreLock>> LockExclusive(const std::string& path,
                                                                  int64_t wait_ms) {
    (void)path;
    (void)wait_ms;
    return nullptr;
  }

  /// The store's files as files of this machine shared by its processes (store/local_files.h),
  /// for stores whose objects are such files (LocalStore; a MemoryStore made machine-local);
  /// nullptr for every other store, and from decorators (ForwardingStore), which would not see
  /// those calls. A store that gives them also has locks (HasLocks).
  virtual std::shared_ptr<LocalFiles> AsLocalFiles() { return nullptr; }

  /// Whether LockExclusive can take locks at all here: a nullptr from a store that has them
  /// means the lock is held (or could not be made in that folder).
  virtual bool HasLocks() const { return false; }

  /// The whole object.
  virtual arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) = 0;
  /// `length` bytes from `offset` (fewer at the end of the object).
  virtual arrow::Result<std::shared_ptr<arrow::Buffer>> GetRange(const std::string& path,
                                                                 int64_t offset,
                                                                 int64_t length) = 0;
  /// Size, modification time and entity tag of the object.
  virtual arrow::Result<ObjectMeta> Head(const std::string& path) = 0;
  /// Get() with the object's modification time and the time of the reply, both by the
  /// service's clock, from the one reply (HTTP Last-Modified and Date: whole seconds). A store
  /// whose reply does not carry both leaves them -1 (the default: local stores), and callers
  /// then cannot judge the object's age.
  virtual arrow::Result<DatedObject> GetDated(const std::string& path) {
    DatedObject out;
    ARROW_ASSIGN_OR_RAISE(out.data, Get(path));
    return out;
  }

  /// Creates or replaces the object.
  virtual arrow::Status Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) = 0;
  /// Put of an object its readers can do without: derived data that they rebuild when it is
  /// missing or unreadable (the last-value index). A store may skip making it durable: after a
  /// crash it may be missing, or there and unreadable; it is never seen partly written before.
  virtual arrow::Status PutDerived(const std::string& path,
                                   const std::shared_ptr<arrow::Buffer>& data) {
    return Put(path, data);
  }
  /// Creates the object only if nothing exists at `path`; returns false (and writes nothing)
  /// if something does. See "Ambiguous outcomes" above for what `false` can mean on a retry.
  virtual arrow::Result<bool> PutIfAbsent(const std::string& path,
                                          const std::shared_ptr<arrow::Buffer>& data) = 0;
  /// PutIfAbsent that calls `visible` as soon as the outcome is decided and readers can see the
  /// object (when written), before the store makes its name durable, and returns once it is
  /// (or fails): a caller that holds other writers up while it puts (a commit turn) lets them go
  /// at `visible`. `visible` may not be called at all (a failure before the outcome).
  virtual arrow::Result<bool> PutIfAbsentVisible(const std::string& path,
                                                 const std::shared_ptr<arrow::Buffer>& data,
                                                 const std::function<void()>& visible) {
    auto written = PutIfAbsent(path, data);
    if (written.ok()) visible();
    return written;
  }
  /// Bytes made ready for a put-if-absent whose name is not decided yet (a log's next version,
  /// which a writer learns only once it has its turn): LocalStore writes and fsyncs them into a
  /// temporary file of the folder, so that the put under the turn is only a link. Other stores
  /// keep the bytes.
  class Staged {
   public:
    explicit Staged(std::shared_ptr<arrow::Buffer> bytes) : data(std::move(bytes)) {}
    virtual ~Staged() = default;
    Staged(const Staged&) = delete;
    Staged& operator=(const Staged&) = delete;
    std::shared_ptr<arrow::Buffer> data;
  };
  /// Stages `data` for a put into the folder of `path` (the name expected; PutStagedIfAbsent may
  /// put it under another name of that folder).
  virtual arrow::Result<std::unique_ptr<Staged>> Stage(const std::string& path,
                                                       std::shared_ptr<arrow::Buffer> data) {
    return std::make_unique<Staged>(std::move(data));
  }
  /// PutIfAbsentVisible of staged bytes. After `false` (or an error) the same staged bytes may be
  /// put again, under another name of the folder.
  virtual arrow::Result<bool> PutStagedIfAbsent(const std::string& path, Staged* staged,
                                                const std::function<void()>& visible) {
    return PutIfAbsentVisible(path, staged->data, visible);
  }
  /// Replaces the object only if it exists and its entity tag is `etag` (from Head or a listing);
  /// returns false (and writes nothing) if the object is missing or has changed. Invalid if
  /// `etag` is empty.
  virtual arrow::Result<bool> PutIfMatch(const std::string& path,
                                         const std::shared_ptr<arrow::Buffer>& data,
                                         const std::string& etag) = 0;

  /// A stream that writes a new object (for large files), as ObjectOutput describes. The caller
  /// must not write the same path from two streams at once. Invalid if `options` are.
  virtual arrow::Result<std::shared_ptr<ObjectOutput>> OpenOutput(
      const std::string& path, const OutputOptions& options) = 0;
  /// OpenOutput with default options.
  arrow::Result<std::shared_ptr<ObjectOutput>> OpenOutput(const std::string& path) {
    return OpenOutput(path, OutputOptions{});
  }
  /// Random access for readers such as the Parquet reader.
  virtual arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInput(
      const std::string& path) = 0;

  /// One page of the objects whose path starts with `request.prefix` and is greater than
  /// `request.start_after`, in path order. The store decides the page boundaries; callers that
  /// want the whole listing use ListAfter.
  virtual arrow::Result<ObjectPage> ListPage(const ListPageRequest& request) = 0;
  /// Whether ListPage starts at `start_after` on the store's side, so that one short page shows
  /// what follows a name; false when the store lists from the prefix's start and the names up to
  /// `start_after` are dropped afterwards (Azure).
  virtual bool ListsFromName() const { return true; }
  /// Every object whose path starts with `prefix` and is greater than `start_after` (byte-wise;
  /// "" for all), sorted by path: ListPage followed page by page. A store that can list more
  /// cheaply in one go overrides it.
  virtual arrow::Result<std::vector<ObjectMeta>> ListAfter(const std::string& prefix,
                                                           const std::string& start_after);
  /// Every object whose path starts with `prefix`, sorted by path.
  arrow::Result<std::vector<ObjectMeta>> List(const std::string& prefix) {
    return ListAfter(prefix, "");
  }
  /// Names of the immediate "directories" under `prefix` (which is "" or ends in '/'), sorted.
  virtual arrow::Result<std::vector<std::string>> ListChildren(const std::string& prefix) = 0;

  /// Deletes the object; deleting a missing object is not an error.
  virtual arrow::Status Delete(const std::string& path) = 0;
  /// Deletes every object in `paths` (missing ones are not an error), in no promised order and
  /// perhaps in batches. On failure some of them may be deleted already. The default deletes
  /// one by one, stopping at the first failure.
  virtual arrow::Status DeleteMany(const std::vector<std::string>& paths);
  /// Deletes every object under `prefix` (which must end in '/').
  virtual arrow::Status DeletePrefix(const std::string& prefix) = 0;
  /// Makes the folder `prefix` (ending in '/') and the folders above it, where a store has
  /// folders that writes do not make themselves (LocalStore's fixed levels: a table's folder);
  /// stores without folders have nothing to do.
  virtual arrow::Status MakeFolders(const std::string& prefix) {
    (void)prefix;
    return arrow::Status::OK();
  }
  /// Makes the names of the objects put under the folder `prefix` (ending in '/') durable, for a
  /// put another process made visible and may have died before making durable (LocalStore: the
  /// folder's fsync). Stores whose puts are durable once visible have nothing to do.
  virtual arrow::Status SyncFolder(const std::string& prefix) {
    (void)prefix;
    return arrow::Status::OK();
  }
  /// Moves every object under `prefix` to the same relative path under `to` in one atomic step:
  /// a reader sees all of them at the old place or all of them at the new one. Both must end in
  /// '/' and `to` must not exist. NotFound if nothing is under `prefix`; NotImplemented on stores
  /// that cannot do this atomically (object stores), where callers need another protocol.
  virtual arrow::Status RenamePrefix(const std::string& prefix, const std::string& to);

  /// Deletes the temporary files a writer that died left under the folder `prefix` (ending in
  /// '/'): those written before `older_than_ms` (NowMillis scale). Returns how many. Stores
  /// without temporary objects have nothing to do.
  virtual arrow::Result<int64_t> DeleteAbandonedTemporaries(const std::string& prefix,
                                                             int64_t older_than_ms) {
    (void)prefix;
    (void)older_than_ms;
    return 0;
  }

  /// The URL of the store root, without a trailing slash (file:///abs/path, memory://name, …).
  virtual std::string RootUrl() const = 0;
  /// What tells this store's objects apart from another store's with the same RootUrl (the
  /// service endpoint of an object store): keys local caches of its objects.
  virtual std::string Identity() const { return RootUrl(); }
  /// A path other engines can open: an absolute file path for LocalStore, the URL otherwise.
  virtual std::string ExternalPath(const std::string& path) const = 0;
};

/// Joins path segments with '/', skipping empty ones.
std::string JoinPath(const std::string& a, const std::string& b);

/// True if `path` is a result of a listing of `prefix` after `start_after`.
inline bool InListing(const std::string& path, const std::string& prefix,
                      const std::string& start_after) {
  return path.compare(0, prefix.size(), prefix) == 0 && path > start_after;
}

}  // namespace timelake
