// Classic single-file Parquet checkpoints.
//
// A checkpoint holds a snapshot's reconciled state, one action per row, in the top-level struct
// columns Spark uses (txn, add, remove, metaData, protocol). Writing produces the file body;
// reading accepts checkpoints from any engine (extra columns such as stats_parsed are ignored).
#pragma once

#include <memory>
#include <string>

#include <arrow/buffer.h>
#include <arrow/result.h>

#include "timelake/log/snapshot.h"

namespace timelake {

struct CheckpointBody {
  std::shared_ptr<arrow::Buffer> data;
  int64_t num_actions = 0;
  int64_t num_add_files = 0;
};

/// Serialises `snapshot`. Tombstones deleted before `tombstone_cutoff_ms` and transactions last
/// updated before `txn_cutoff_ms` are left out (both in milliseconds since the epoch). The rows
/// go protocol, metaData, add, then txn, then remove, each of the three parts in row groups of
/// its own, so that a reader of the live state skips the others by their statistics (every
/// Delta reader reads such a file as it reads any checkpoint). An IOError if the snapshot's
/// history cannot be read.
arrow::Result<CheckpointBody> WriteCheckpoint(const Snapshot& snapshot, int64_t tombstone_cutoff_ms,
                                              int64_t txn_cutoff_ms);

/// Which actions ReadCheckpoint reads.
enum class CheckpointActions {
  kAll,
  /// protocol, metaData and add; the transactions and tombstones stay in the bytes, as the
  /// snapshot's `history`, read when first asked for (snapshot.h).
  kLive,
  /// txn and remove only.
  kHistory,
  /// txn only, remove only (CheckpointHistory reads each when first asked for).
  kTxns,
  kTombstones,
};

/// Loads a checkpoint file's actions into `snapshot` (which should be empty). `origin` is the
/// object the bytes came from. A file that is not readable Parquet (truncated, a page checksum
/// that does not match) or that lacks the protocol or metaData every checkpoint holds is an
/// IOError naming `origin`; `snapshot` is then unspecified. Row groups without an action of the
/// kinds asked for (as their statistics tell: timelake writes the live state, the transactions
/// and the tombstones in row groups of their own) are not read, nor are the columns of others.
arrow::Status ReadCheckpoint(const std::shared_ptr<arrow::Buffer>& data, const std::string& origin,
                             Snapshot* snapshot, CheckpointActions which = CheckpointActions::kAll);

}  // namespace timelake
