// Maintenance: retention, compaction, log expiry and vacuum of one table, and the background
// compaction passes that small appends leave to the upkeep thread.
//
// Each step commits on its own through the committer (the retention removal, each compaction
// group) or deletes only what no readable version needs (log expiry, vacuum): an interruption
// between steps leaves the table consistent, and what a stopped step wrote but did not commit
// is deleted.
//
// Thread safety: every function here REQUIRES the handle's lock held. A background pass runs on
// the handle's upkeep thread (inline, on the appending thread, once the handle's Lake is gone)
// over a table context of its own (BackgroundCompaction), never over the handle's.
#pragma once

#include <cstdint>
#include <optional>

#include <arrow/status.h>

#include "timelake/table/context.h"
#include "timelake/util/interrupt.h"

namespace timelake {

struct MaintainOptions {
  bool compact = true;
  bool retention = true;
  bool expire = true;
  InterruptCheck interrupt;  // see table/table.h
};

struct MaintainResult {
  int64_t partitions_compacted = 0;
  int64_t files_rewritten = 0;
  int64_t files_written = 0;
  int64_t rows_rewritten = 0;
  int64_t duplicates_removed = 0;
  int64_t partitions_dropped = 0;
  int64_t snapshots_expired = 0;
  int64_t objects_deleted = 0;
  double seconds = 0;
};

/// The maintenance steps (table/maintain.cc). `inline_only` keeps the work bounded: what an
/// append may do after its commit. REQUIRES: the handle's lock held.
arrow::Status MaintainLocked(TableContext& t, const MaintainOptions& options, bool inline_only,
                             MaintainResult* result);

/// After append commit(s) that added `files_added` files with no inline maintenance: once the
/// handle has appended enough files, queues a compaction pass on its upkeep thread (at most one
/// waiting at a time). The pass commits through a table context of its own, like a second
/// handle: it rewrites chunks that gathered many small files, bounded per pass, so that a table
/// fed by small appends keeps few files per chunk without anyone calling maintain(). Dying
/// midway loses nothing: a pass is one ordinary compaction commit (MaintainLocked).
void MaybeCompactInBackground(TableContext& t, int64_t files_added);
/// The newest version a background compaction pass of `t` committed (-1: none).
int64_t BackgroundCompactionVersion(const TableContext& t);

}  // namespace timelake
