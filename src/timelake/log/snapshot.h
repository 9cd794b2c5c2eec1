// Snapshot: the reconciled state of a Delta table at one version.
//
// A snapshot is what replaying the log up to `version` yields: the protocol, the metadata, the
// live data files, the latest transaction id per application and the tombstones of removed files.
// It is a value: DeltaLog builds and advances it; nothing in it touches storage.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "timelake/log/actions.h"

namespace timelake {

/// Vacuum never deletes a removed or never-committed data file younger than this (7 days, Delta's
/// own check), whatever `delta.deletedFileRetentionDuration` says, unless the table sets
/// kRetentionCheckKey to "false": readers and writers still running may need such files.
inline constexpr int64_t kMinDeletedFileRetentionMs = 7 * 86'400'000LL;
inline constexpr const char* kRetentionCheckKey = "timelake.retentionDurationCheck";

struct Snapshot {
  int64_t version = -1;
  Protocol protocol;
  Metadata metadata;
  std::map<std::string, AddFile> files;         // live files by path
  std::map<std::string, Txn> txns;              // by appId
  std::map<std::string, RemoveFile> tombstones;  // removed files by path

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

  /// The configuration value for `key`, or `fallback` when the table does not set it.
  std::string Config(const std::string& key, const std::string& fallback = "") const;

  /// How long removed data files are kept, in milliseconds: `delta.deletedFileRetentionDuration`
  /// (default 7 days), raised to kMinDeletedFileRetentionMs unless the safety check is off.
  int64_t DeletedFileRetentionMs() const;
};

}  // namespace timelake
