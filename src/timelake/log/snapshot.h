// Snapshot: the reconciled state of a Delta table at one version.
//
// A snapshot is what replaying the log up to `version` yields: the protocol, the metadata, the
// live data files, the latest transaction id per application and the tombstones of removed files.
// It is a value: DeltaLog builds and advances it; nothing in it touches storage.
//
// The transactions and tombstones of the checkpoint a snapshot was loaded from are its *history*:
// a query needs none of them, and a table appended to with many batch ids or compacted often
// carries thousands of them (3,000 small appends: ~5,900 of 5,925 checkpoint rows). A load reads
// the checkpoint's live state only (protocol, metaData, add) and keeps its bytes; the history is
// read from them the first time it is asked for (FindTxn, FindTombstone, Txns, Tombstones), once
// per load, however many copies of the snapshot ask. Nothing is fetched again for it, so it can
// neither be found gone (log expiry) nor changed (a drop and create at the same path).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <arrow/result.h>
#include <arrow/status.h>

#include "timelake/log/actions.h"

namespace arrow {
class Buffer;
}

namespace timelake {

/// The transactions and tombstones of one checkpoint, read from its bytes on first use.
/// Thread-safe: every method may be called from any thread (each part is read once: the
/// transactions for appends with batch ids, the tombstones for vacuum and latest()).
class CheckpointHistory {
 public:
  /// `data` holds the checkpoint `origin`; `entries` is how many history rows it holds (a count
  /// read from its metadata, for the checkpoint stride).
  CheckpointHistory(std::shared_ptr<arrow::Buffer> data, std::string origin, int64_t entries);
  ~CheckpointHistory();

  int64_t entries() const { return entries_; }
  /// The checkpoint's transactions by appId; an IOError naming it if they cannot be read.
  arrow::Result<const std::map<std::string, Txn>*> txns() const;
  /// The checkpoint's tombstones by path; errors as txns().
  arrow::Result<const std::map<std::string, RemoveFile>*> tombstones() const;

 private:
  /// Reads the transactions (`txns`) or the tombstones, unless read before.
  arrow::Status Read(bool txns) const;

  const std::string origin_;
  const int64_t entries_;
  mutable std::mutex mutex_;  // guards what follows until both parts are read
  mutable std::shared_ptr<arrow::Buffer> data_;  // the checkpoint's bytes, let go once both are read
  mutable std::optional<arrow::Status> txns_read_, tombstones_read_;
  mutable std::map<std::string, Txn> txns_;
  mutable std::map<std::string, RemoveFile> tombstones_;
};

/// Vacuum never deletes a removed or never-committed data file younger than this (7 days, Delta's
/// own check), whatever `delta.deletedFileRetentionDuration` says, unless the table sets
/// kRetentionCheckKey to "false": readers and writers still running may need such files.
inline constexpr int64_t kMinDeletedFileRetentionMs = 7 * 86'400'000LL;
inline constexpr const char* kRetentionCheckKey = "timelake.retentionDurationCheck";

struct Snapshot {
  int64_t version = -1;
  Protocol protocol;
  Metadata metadata;
  std::map<std::string, AddFile> files;  // live files by path
  /// The transactions (by appId) and tombstones (removed files by path) of the commits replayed
  /// on top of `history`: all of them when `history` is null. Read them through FindTxn,
  /// FindTombstone, Txns and Tombstones, which add the history's.
  std::map<std::string, Txn> recent_txns;
  std::map<std::string, RemoveFile> recent_tombstones;
  /// The checkpoint's transactions and tombstones, not read yet (null: none to read).
  std::shared_ptr<const CheckpointHistory> history;

  /// Version of the checkpoint the log reader would start from (-1: none).
  int64_t checkpoint_version = -1;
  /// The oldest version that can still be reconstructed from the log.
  int64_t oldest_version = 0;
  /// Fingerprint of the bytes of commit `version` (0: unknown). A handle checks it before it
  /// reads on or commits, so that it never continues into a table that was dropped and created
  /// again at the same path.
  uint64_t head_fingerprint = 0;

  /// Applies the actions of the commit that produced `version`.
  void Apply(const Commit& commit, int64_t commit_version);

  /// The transaction of application `app_id` (nullptr if none), the history's included.
  arrow::Result<const Txn*> FindTxn(const std::string& app_id) const;
  /// The tombstone of the removed file `path` (nullptr if none), the history's included.
  arrow::Result<const RemoveFile*> FindTombstone(const std::string& path) const;
  /// Every transaction, by appId (a copy: the history's with the recent ones over them).
  arrow::Result<std::map<std::string, Txn>> Txns() const;
  /// Every tombstone, by path (a copy, as Txns()).
  arrow::Result<std::map<std::string, RemoveFile>> Tombstones() const;
  /// How many transactions and tombstones the snapshot holds, counted without reading the
  /// history (an entry of the history that a later commit replaced counts twice).
  int64_t HistoryEntries() const;

  /// The configuration value for `key`, or `fallback` when the table does not set it.
  std::string Config(const std::string& key, const std::string& fallback = "") const;

  /// How long removed data files are kept, in milliseconds: `delta.deletedFileRetentionDuration`
  /// (default 7 days), raised to kMinDeletedFileRetentionMs unless the safety check is off.
  int64_t DeletedFileRetentionMs() const;
};

}  // namespace timelake
