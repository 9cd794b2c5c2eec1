// Arranging rows for storage: chunk assignment, sort order and in-batch deduplication.
//
// A time-series table stores rows sorted by (chunk, series key…, time) so that each chunk is one
// contiguous run and each series one contiguous run inside it. The sort is stable, so rows with
// the same series key and time keep their arrival order, which is what deduplication relies on.
#pragma once

#include <memory>
#include <vector>

#include <arrow/result.h>
#include <arrow/table.h>

#include "timelake/contract.h"

namespace timelake {

/// A run of rows of one chunk within an arrangement.
struct ChunkRun {
  int64_t ordinal = 0;  // ChunkOrdinal of every row in the run
  int64_t offset = 0;   // position of the run's first row in the arranged order
  int64_t length = 0;
  /// Positions (relative to the run's first row) of the newest row of each series in the run;
  /// empty when the arrangement did not compute them (then NewestRows over the run gives them).
  std::vector<int64_t> newest;
};

/// Sorted (and deduplicated) rows, as runs of one chunk each. Either `table` holds them in order,
/// or they are still in `source` and `perm` lists their positions in order: each run is gathered
/// when it is needed (Rows), so that runs can be gathered on several threads and the whole
/// sorted table never exists at once.
struct Arranged {
  std::shared_ptr<arrow::Table> table;
  std::shared_ptr<arrow::Table> source;  // each column one array
  std::shared_ptr<arrow::Array> perm;  // int32 or int64 positions into source
  std::vector<ChunkRun> runs;  // contiguous, in order, covering every row

  /// The rows of `run`. A single series-key column may come back dictionary-encoded (its values
  /// unchanged): Parquet writes such a column faster. Thread-safe.
  arrow::Result<std::shared_ptr<arrow::Table>> Rows(const ChunkRun& run) const;
  /// Every row, in order (for tests).
  arrow::Result<std::shared_ptr<arrow::Table>> All() const;

  /// Cuts the longest runs of at least `min_rows` rows in two at a series boundary (where the
  /// rows split most evenly) until the runs divide evenly among `workers`, or no run can be cut.
  /// Each run is written as a file by one thread: seven chunks on two cores leave the seventh
  /// alone on one core. The two runs of a cut chunk hold disjoint series, each sorted. Only runs
  /// that know their series' newest rows (the counting-sort arrangement) are cut.
  void BalanceRuns(int workers, int64_t min_rows);
};

/// Sorts `table` (storage schema) by (chunk, series key, time) and applies the contract's
/// in-batch deduplication. A plain table is returned as one run, unsorted.
///
/// With at most one series-key column the sort is a counting sort on (chunk, rank of the key)
/// followed by a check that each series is already in time order (it nearly always is: data
/// arrives in time order), so arranging costs a hash of the key plus linear passes. Other keys
/// use Arrow's multi-key sort.
///
/// `parts`, when given, are the lengths of consecutive pieces of `table` (they add up to its
/// rows) that may each be sorted already: the data files a compaction reads. When every piece
/// is sorted by (chunk, key, time) (and, for a dedup table, holds no two rows of one series and
/// time), the pieces are merged series by series instead of sorted again; otherwise `parts`
/// changes nothing. The result is the same either way.
///
/// A single series-key column may be dictionary-encoded (int32 indices, string or binary values,
/// in chunks with dictionaries of their own): then each chunk's dictionary is hashed instead of
/// every row's value.
arrow::Result<Arranged> Arrange(const std::shared_ptr<arrow::Table>& table, const Contract& contract,
                                const std::vector<int64_t>& parts = {});

/// Tests only: how many Arrange calls so far merged sorted parts instead of sorting.
int64_t ArrangeMergesForTesting();
/// Tests only: how many Arrange calls so far arranged rows of a time-series table.
int64_t ArrangeCallsForTesting();

/// Tests only: makes the counting sort use 64-bit row positions (as for inputs of more than
/// 2^31 rows) whatever the input's size.
void ForceWideArrangePositionsForTesting(bool on);

}  // namespace timelake
