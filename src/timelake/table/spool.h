// Spool: group commit across the writer processes of one machine (local lakes).
//
// Threads of one process already share commits (GroupCommit, table/group_commit.h). Processes
// cannot share a queue in memory, so on a local lake they share one through files in the table's
// `_timelake/` folder, under the advisory lock `_timelake/spool.lock`:
//
//  * The process holding the lock leads: it claims every request it finds, commits their rows
//    together with its own appends (one shared file per chunk, one Delta commit, a `txn` per batch
//    id), writes each request's answer and releases the lock.
//  * A process that finds the lock held writes its appends' rows as a request
//    (`spool-<id>.req`, Arrow IPC) and waits for the lock. Once it holds it, the leader before it
//    is done (or dead): the request is either still there (nobody claimed it: this process leads
//    now, its own appends first) or claimed, and then answered (`spool-<id>.ans`).
//
// Every file goes through the store's LocalFiles (store/local_files.h), and nothing else: a store
// without them (an object store) has no spool. Claiming is a LocalFiles::Claim of the request (to
// `spool-<id>.claimed`) and withdrawing a LocalFiles::Withdraw of it: whichever comes first wins,
// and each side knows whether it did. A writer holds a Liveness on its request while it waits; a
// request whose writer died (IsHeld says nobody holds it) is deleted unread, never committed. A
// claimed request without an answer means the leader died, or failed it: the writer looks for its
// id in the commits (commitInfo.operationParameters["timelake.spooled"]) and, not finding it,
// commits itself. Nothing here is durable or needs to be: requests and answers only live while
// their writer waits, and an append is acknowledged only once the commit holding it is.
//
// Files are reused rather than made and deleted (LocalFiles::Publish writes in place): a leader
// writes the answer into the claimed request's file, and the writer keeps the answer's file for
// its next request (under a scratch name of its Spool, `.tmp-spool-<id>`). Leaders delete
// answers, claimed requests and scratch files untouched for a minute: those of writers that died
// or stopped appending.
//
// On LocalStore these are files of the table's folder shared by every process (PosixFiles); on a
// machine-local MemoryStore, records shared by the handles of one process (MemoryFiles).
//
// Threads: Submit, Withdraw and TakeAnswers of one Spool are called by one thread at a time (one
// request of a Spool at a time); Claim and Answer only by the holder of the spool lock; Pending
// from any thread. Spools of one folder in any number of threads and processes may run at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <arrow/record_batch.h>
#include <arrow/result.h>

#include "timelake/store/local_files.h"

namespace timelake {

/// One append handed to another process's commit: its batch id and its rows (aligned to the
/// table's storage schema).
struct SpoolMember {
  std::optional<std::string> batch_id;
  std::vector<std::shared_ptr<arrow::RecordBatch>> rows;
};

/// The appends of one process's group, as one request.
struct SpoolRequest {
  std::string id;
  std::string table_id;  // the metaData.id of the table its writer appends to
  std::vector<SpoolMember> members;
};

/// What a leader's commit did with one member of a request.
struct SpoolAnswer {
  bool ok = false;  // false: the leader failed it (`error` says why): the writer commits itself
  int64_t version = -1;
  bool duplicate = false;
  int64_t rows = 0;
  int64_t files = 0;
  int64_t bytes = 0;
  int64_t attempts = 0;
  double commit_ms = 0;
  std::string error;
};

class Spool {
 public:
  /// `folder`: the table's `_timelake` folder among `files` (a path relative to the store's
  /// root). Nothing is made outside it: a missing folder (a dropped table) makes every request
  /// fail. `files` must not be null.
  Spool(std::shared_ptr<LocalFiles> files, std::string folder);
  /// Deletes this spool's scratch file.
  ~Spool();
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  /// A submitted request: holds the Liveness that tells leaders its writer is alive.
  class Ticket {
   public:
    Ticket(std::unique_ptr<LocalFiles::Liveness> alive, std::string id)
        : alive_(std::move(alive)), id_(std::move(id)) {}
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    const std::string& id() const { return id_; }

   private:
    std::unique_ptr<LocalFiles::Liveness> alive_;
    std::string id_;
  };

  /// Writes `request` for a leader to claim. One request of a Spool at a time: Submit,
  /// Withdraw and TakeAnswers of one Spool are not called from two threads at once.
  arrow::Result<std::unique_ptr<Ticket>> Submit(const SpoolRequest& request);
  /// Takes the request back unless a leader claimed it: true when withdrawn.
  arrow::Result<bool> Withdraw(const Ticket& ticket);
  /// The answers to a claimed request (one per member, in order), read and deleted; nullopt when
  /// there are none (its leader died or could not read it).
  std::optional<std::vector<SpoolAnswer>> TakeAnswers(const Ticket& ticket);

  /// The number of requests waiting to be claimed.
  int Pending() const;
  /// Claims every request whose writer is alive (deleting those of dead writers). Call only
  /// holding the spool lock. A request that cannot be read is skipped (its writer commits itself).
  std::vector<SpoolRequest> Claim();
  /// Answers request `id`. Best effort: a writer without its answer looks in the log.
  arrow::Status Answer(const std::string& id, const std::vector<SpoolAnswer>& answers);

  /// The operationParameters key of a commit listing the requests it holds, comma-separated.
  static constexpr const char* kCommitParameter = "timelake.spooled";

 private:
  std::string Path(const std::string& id, const char* suffix) const;
  std::shared_ptr<LocalFiles> files_;
  std::string folder_;
  /// This spool's file between requests (one per process: see Scratch()).
  const std::string& Scratch();
  std::string scratch_;
  int scratch_pid_ = 0;  // the process that named scratch_
};

}  // namespace timelake
