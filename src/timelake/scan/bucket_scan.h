// Aggregates over all series, by time bucket and/or series, read by the core without a query engine.
//
// A dashboard's other frequent question is the hourly (daily) average of every series together:
// `SELECT time_bucket(INTERVAL '1 hour', time) AS hour, avg(temp) AS temp FROM t GROUP BY 1`.
// That reads every row of two columns; a query engine pays for a general hash aggregation over
// them. This scan decodes only the time column and the aggregated columns, row group by row
// group in batches (memory bounded by the batch, whatever the file), skips row groups outside
// the time range by their statistics, folds each row into its bucket's running state (times
// come in runs of one series, so the bucket of the row before is nearly always the bucket of
// the next), and spreads the files over the machine's cores. Page checksums are not verified (a
// fifth of the time; the query engine that answers such statements otherwise does not either).
//
// Semantics are those of AggregateSelection (selection_reader.h) over the rows the plan's filter
// admits (a time range only: no series-key condition), minus the rows deletion vectors delete:
// count(*) and count(col) as int64; sum of doubles, avg of doubles, floats and integers up to
// 32 bits as double (integers summed exactly); min and max of integers, floats, dates and
// timestamps in the column's type, NaN above every number; NULL over no values (count: 0).
// Sums of floating-point values are added in an order SQL leaves open (files in parallel), so
// they may differ from DuckDB's in the last bits, as DuckDB's own do between runs.
//
// What it does not do (Status::NotImplemented, so that the caller asks its query engine): what
// CoreReadable refuses (data_files.h; read-time dedup among them, since several series are
// read), a key condition in the filter (ReadSelection reads those pages only), a time column
// that may hold nulls when no time range is given, and more than two million groups in one
// worker (the query engine can spill them to disk).
//
// Thread safety: no shared state; concurrent calls are fine.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include <arrow/result.h>
#include <arrow/table.h>

#include "timelake/scan/selection_reader.h"

namespace timelake {

/// One key of the result's order: result column `column` (an index into the aggregates: the
/// bucket or the grouped column), descending or not; the NULL key last either way (DuckDB's default).
struct ScanOrder {
  size_t column = 0;
  bool descending = false;
};

/// Without a "time_bucket" or "group" among `aggregates`: one row, each aggregate over every
/// admitted row. With them: a row per group that holds admitted rows, a group being a bucket
/// and/or a value of the "group" column (`column`: one column of text or integers; nulls form a
/// group), ordered by `sort` when given, else by bucket (`descending` if asked) then key, the
/// first `limit` only. Columns in the order of `aggregates`. `paths` as for ReadSelection.
/// Status::Cancelled soon after `*cancel` turns true (checked every batch: Ctrl-C in Python).
arrow::Result<std::shared_ptr<arrow::Table>> ScanAggregates(const ScanPlan& plan,
                                                            const std::vector<std::string>& paths,
                                                            const std::vector<SelectionAggregate>& aggregates,
                                                            bool descending = false,
                                                            std::optional<int64_t> limit = std::nullopt,
                                                            SelectionCounters* counters = nullptr,
                                                            const std::atomic<bool>* cancel = nullptr,
                                                            const std::vector<ScanOrder>& sort = {});

}  // namespace timelake
