// FaultStore: a store decorator that injects the faults a real store can produce, for crash
// testing (like LevelDB's fault_injection_test environment).
//
// It counts the operations that pass through it and, at chosen operations, makes them fail
// without side effects, lose their reply after they landed, report a conditional put that
// landed as refused, or "crash" the store: from then on every call fails and every output stream
// not yet closed is dropped, as a process crash would leave an object store (a multipart upload
// that was never completed, a temporary file that was never renamed). Every acknowledged write
// of the target store is durable, so the streams are all that a crash loses. (Not quite so over a
// LocalStore: an in-place stream's file becomes durable by the next put, a PutDerived object
// never; and a real crash leaves an unclosed in-place stream's partial file under its name where
// this drops it. Readers treat both as unreferenced or derived data.) A test then calls
// Revive (a new process) or reopens the target directly, and checks what survived.
//
// What counts as one operation: each call of Get, GetRange, Head, Put, PutIfAbsent, PutIfMatch,
// OpenOutput, OpenInput, ListPage, ListAfter (so also List), ListChildren, Delete, DeleteMany,
// DeletePrefix, RenamePrefix, and the Close of an output stream (which is what publishes the
// object). Writes are Put, PutIfAbsent, PutIfMatch, the stream Close, and the deletes and renames.
// Reads through a stream from OpenInput, writes into an output stream before its Close, Abort,
// MakeFolders, SyncFolder, RootUrl and ExternalPath are not operations (after a crash, stream writes fail too).
//
// Operations are numbered from 0 in the order they reach the store; with one thread the numbering
// is deterministic, and so are random faults (seeded). Thread-safe; streams are single-threaded
// as ever.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "timelake/store/forwarding_store.h"

namespace timelake {

enum class FaultKind {
  /// The operation does not happen; the caller gets an IOError.
  kFail,
  /// The operation happens, then its reply is lost: the caller gets an IOError marked
  /// OutcomeUnknown (util/status.h), as from a real store that timed out.
  kLoseReply,
  /// A PutIfAbsent or PutIfMatch happens and lands, and the caller gets `false`, as a client
  /// that retried its own landed put would (see "Ambiguous outcomes" in object_store.h). For any
  /// other operation, or a conditional put that did not land, this is kLoseReply.
  kLandButRefuse,
  /// The store crashes before the operation: it does not happen, and see FaultStore::Crash.
  kCrash,
  /// The operation happens, then the store crashes before replying (an IOError marked
  /// OutcomeUnknown).
  kCrashAfter,
};

/// The name of a fault kind, for messages ("fail", "lose reply", …).
const char* FaultKindName(FaultKind kind);

/// One operation as a fault predicate sees it.
struct StoreOperation {
  /// Counted operations before this one: the index this operation has if it is counted.
  int64_t index = 0;
  /// "get", "get_range", "head", "put", "put_if_absent", "put_if_match", "open_output",
  /// "close_output", "open_input", "list", "list_children", "delete", "delete_many",
  /// "delete_prefix", "rename_prefix".
  std::string name;
  /// The path or prefix (for delete_many: the first path).
  std::string path;
  bool write = false;
};

class FaultStore : public ForwardingStore {
 public:
  enum class Counting {
    kAllOperations,  // every operation advances the count (the default)
    kWritesOnly,     // only writes do; reads are never chosen by index or at random
  };

  /// A store over `target` with no faults armed. `seed` drives InjectRandomly.
  explicit FaultStore(std::shared_ptr<ObjectStore> target, uint64_t seed = 0);
  ~FaultStore() override;

  void SetCounting(Counting counting);
  /// Operations counted so far: the index of the next counted operation.
  int64_t operations() const;

  /// The counted operation with index `index` gets fault `kind`.
  void InjectAt(int64_t index, FaultKind kind);
  /// The next `times` operations (counted or not) for which `match` is true get fault `kind`.
  /// Faults armed by index are decided first.
  void InjectWhen(FaultKind kind, std::function<bool(const StoreOperation&)> match, int times = 1);
  /// From now on each counted operation that no other fault chose fails (kFail) or loses its
  /// reply (kLoseReply) with this probability, decided by the seeded generator; 0 turns it off.
  void InjectRandomly(double probability);

  /// Crashes the store now: every later call fails with an IOError until Revive, and every
  /// output stream not yet closed is dropped (DropUnsynced).
  void Crash();
  /// Aborts every output stream of this store that is not closed yet: its object never appears
  /// and its temporary data is gone. Their later writes and Close fail.
  void DropUnsynced();
  bool crashed() const;
  /// After a crash: the store serves calls again, as it would to a restarted process, with no
  /// faults armed. The count goes on.
  void Revive();

  /// What was injected, one line per fault, e.g. "#12 put_if_absent t/_delta_log/3.json: lose
  /// reply (the call returned OK)", for test messages.
  std::vector<std::string> injected() const;

  arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> GetRange(const std::string& path, int64_t offset,
                                                         int64_t length) override;
  arrow::Result<ObjectMeta> Head(const std::string& path) override;
  arrow::Status Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) override;
  /// Counted and faulted as a "put_if_absent".
  arrow::Result<bool> PutIfAbsentVisible(const std::string& path,
                                         const std::shared_ptr<arrow::Buffer>& data,
                                         const std::function<void()>& visible) override;
  /// Counted and faulted as a "put".
  arrow::Status PutDerived(const std::string& path,
                           const std::shared_ptr<arrow::Buffer>& data) override;
  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override;
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
  arrow::Status RenamePrefix(const std::string& prefix, const std::string& to) override;

  /// The fault state, shared with the store's output streams (defined in fault_store.cc).
  class Injector;

 private:
  std::shared_ptr<Injector> injector_;
};

}  // namespace timelake
