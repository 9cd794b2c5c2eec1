// Cleanup: expiring old log entries and vacuuming data files no snapshot needs.
//
// Log expiry deletes commits and checkpoints older than `delta.logRetentionDuration` (default
// 30 days), always keeping the newest readable checkpoint at or before the cutoff and everything
// after it, so every version from that checkpoint on stays readable (a damaged checkpoint is never
// made the start of the log). Vacuum deletes data files that the
// current snapshot does not reference: removed files once their tombstone is older than
// `delta.deletedFileRetentionDuration` (default 7 days, and never less than 7 days unless the
// table sets `timelake.retentionDurationCheck` to "false": Snapshot::DeletedFileRetentionMs), and
// files no commit ever referenced (a writer that crashed before committing) once they are that old
// too, so in-flight writers are never hurt. Both only ever delete; a crash midway leaves the table
// readable.
#pragma once

#include <cstdint>
#include <string>

#include <arrow/result.h>

#include "timelake/log/snapshot.h"
#include "timelake/store/object_store.h"

namespace timelake {

struct CleanupResult {
  int64_t snapshots_expired = 0;  // commit versions no longer readable
  int64_t objects_deleted = 0;    // log files and data files deleted
  int64_t oldest_version = -1;    // after expiry: the oldest version still readable
};

/// Deletes expired log files of the table at `table_path`; `snapshot` is its latest snapshot.
arrow::Result<CleanupResult> ExpireLog(ObjectStore* store, const std::string& table_path,
                                       const Snapshot& snapshot, int64_t now_ms);

/// Deletes data files under `<table_path>/data/` that `snapshot` no longer needs, and the
/// temporary files (ObjectStore::DeleteAbandonedTemporaries) of writers that died an hour ago or
/// more anywhere in the table's folder.
arrow::Result<CleanupResult> Vacuum(ObjectStore* store, const std::string& table_path,
                                    const Snapshot& snapshot, int64_t now_ms);

}  // namespace timelake
