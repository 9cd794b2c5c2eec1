// Compaction: rewrites crowded chunks into fewer, larger files, sorted and deduplicated.
//
// Planning picks, per chunk, the files worth rewriting: the small ones (under half the target
// size, unless a rewrite already filled its memory budget with them) and, for tables with dedup,
// every file whose rows may share a (series, time) with another file. Passes that run without
// the user asking (background, inline) pick by size tier instead (CompactionOptions::tiered). Outputs carry the newest input's sequence number, so for dedup tables any older file that
// overlaps the inputs in time is pulled in as well; then no file left outside can hold a duplicate
// that should have won, and read-time deduplication stays correct. Inputs are grouped in arrival
// order (commit version, then write order) under a memory budget, never splitting one commit's
// files; dedup tables rewrite one group per chunk per pass.
//
// Rewriting streams a group's files, in arrival order, through the same Ingestor appends use, so
// outputs are chunked, sorted and deduplicated exactly like fresh appends.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <arrow/result.h>

#include "timelake/contract.h"
#include "timelake/ingest/ingestor.h"
#include "timelake/log/snapshot.h"
#include "timelake/store/object_store.h"

namespace timelake {

struct CompactionOptions {
  int64_t target_file_bytes = 128LL << 20;
  int64_t group_budget_bytes = 256LL << 20;  // Parquet bytes read per rewrite
  int64_t memory_budget = 256LL << 20;        // decoded rows held at once (RewriteGroup)
  int min_files = 2;                          // fewer candidate files: leave the chunk alone
  size_t max_groups = SIZE_MAX;               // bound for inline maintenance
  // Size tiers (background and inline passes): only the files of the smallest tier that holds
  // min_files of them are rewritten, and overlap alone does not make a file a candidate. Tier 0
  // is every file under tier_floor_bytes; each tier above holds files tier_factor times larger.
  bool tiered = false;
  int64_t tier_floor_bytes = 1LL << 20;
  int64_t tier_factor = 8;
};

struct CompactionGroup {
  std::string chunk;
  std::vector<AddFile> inputs;  // in arrival order
  int64_t bytes = 0;
  int64_t seq = 0;  // the newest input's commit version
  // Times (microseconds, ascending) where the chunk's other files start or end: outputs are cut
  // there, so that merging files apart in time never makes an output that overlaps a file left
  // out of the group (which would send both through read-time deduplication).
  std::vector<int64_t> cuts;
};

/// The groups worth rewriting in `snapshot` (timelake-written files only).
std::vector<CompactionGroup> PlanCompaction(const Snapshot& snapshot, const Contract& contract,
                                            const CompactionOptions& options);

struct RewrittenGroup {
  std::vector<WrittenFile> outputs;
  std::vector<bool> full;  // per output: its rows filled the memory budget (kFullTag)
  int64_t rows_in = 0;
  int64_t rows_out = 0;
  int64_t slices_read = 0;  // time slices read (an overflowing slice, cut and read again, counts)
};

struct RewriteOptions {
  int64_t memory_budget = 256LL << 20;  // decoded rows held at once
  // Files up to this size (Parquet bytes) are decoded several at a time on all cores; larger
  // ones stream through one at a time.
  int64_t parallel_read_below = 8LL << 20;
};

/// Reads the group's files and writes them again as new files (not yet committed). On failure
/// the files written so far are deleted.
///
/// The group streams through in time slices: the rows of one slice (every row of the group at
/// those times) are arranged and written as one file, and a slice holds at most about
/// `options.memory_budget` bytes of decoded rows, so memory stays bounded whatever the group's size.
/// A file is read for each slice its time range meets; the slices are cut from the files' time
/// ranges and row counts, and cut again when one turns out to hold more than the budget. Every
/// copy of a (series, time) falls in one slice, so deduplication is exact; the outputs are
/// disjoint in time.
arrow::Result<RewrittenGroup> RewriteGroup(const std::shared_ptr<ObjectStore>& store,
                                           const std::string& table_path, const Contract& contract,
                                           const std::shared_ptr<arrow::Schema>& declared,
                                           const std::shared_ptr<arrow::Schema>& storage,
                                           const CompactionGroup& group,
                                           const RewriteOptions& options = {});

}  // namespace timelake
