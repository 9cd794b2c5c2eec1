// Reading the rows a scan plan's filter admits inside the core, without a query engine.
//
// A dashboard's most frequent question is one series over a time range: a few hundred rows out
// of files of millions. A query engine reads whole row groups of the series-key column to find
// them; this reader uses what the files already carry to read only the pages that can hold them:
// row-group statistics, then the page index (each page's min/max of the series key and the time,
// and its first row), then only the matching rows' values of the columns asked for. Files are
// sorted by (series key, time) inside each chunk, so one series is one run of rows and touches a
// page or two of each column.
//
// Semantics are the scan's (scan_planner.h): the rows of the plan's files whose series-key
// columns equal the filter's values, or one of an IN list's (SelectionShape::key_in; null never
// equals), and whose time lies in the filter's
// range (both ends inclusive, microseconds), minus the rows deletion vectors delete, and among
// the files marked `dedup` one row per (series key, time), ranked as `plan.dedup_order` says.
// Every page read is checked against its CRC where the writer stored one.
//
// What it does not do (Status::NotImplemented, so that the caller asks its query engine
// instead): tables without a time column, column mapping, added or widened columns, partition
// columns, columns whose results are restored to another type, nested or decimal columns,
// timestamps not stored as microseconds, and read-time dedup unless the filter fixes every
// series-key column (then the rows of one (series, time) are those of one time).
//
// Thread safety: no shared state; concurrent calls are fine.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <arrow/result.h>
#include <arrow/table.h>

#include "timelake/scan/scan_planner.h"

namespace timelake {

/// What a selection read, for tests and benchmarks.
struct SelectionCounters {
  int64_t files = 0;        // files opened
  int64_t row_groups = 0;   // row groups whose pages were read
  int64_t pages = 0;          // data pages decoded (all columns; a chunk without an offset index counts one)
  int64_t pages_skipped = 0;  // data pages of the columns read that were left undecoded
};

/// The order and number of the rows a selection gives.
/// A comparison of a numeric column with a constant, as DuckDB evaluates it: NULL never passes,
/// NaN is above every number and equal to itself. Integer columns compare with `integer`,
/// floating-point ones with `number`.
struct ValueCondition {
  std::string column;
  std::string op;  // "=", "<>", "<", "<=", ">", ">="
  double number = 0;
  int64_t integer = 0;
  bool is_integer = false;  // the constant is `integer` (else `number`)
};

struct SelectionShape {
  /// Only rows whose series-key column (by name) holds one of the values (an IN list; the plan's
  /// filter.key_equals holds the equalities). The plan's files are not pruned by these.
  std::map<std::string, std::vector<ScanKeyValue>> key_in;
  /// Only rows for which every condition holds (read first, at the rows the filter and dedup
  /// kept; the conditions' columns need not be among those given back).
  std::vector<ValueCondition> where;
  enum class Order { kFile, kTimeAscending, kTimeDescending };
  /// Ordered by time: rows of equal time ordered by this column's values (a column read, of text
  /// or integers; descending if `second`), NULL last either way, as DuckDB orders them.
  std::optional<std::pair<std::string, bool>> then_by;
  /// kFile: file by file in the plan's order, row by row in each file's order. By time: rows of
  /// equal time keep that order (a stable sort) unless `then_by` orders them.
  Order order = Order::kFile;
  std::optional<int64_t> limit;  // the first rows only (after ordering)
};

/// The rows of the plan's files that `plan.filter` admits, with the columns named in `columns`
/// (declared names, in that order) in their storage types, ordered and cut as `shape` says.
/// `paths`: the file to open for each plan file (local copies of a lake in an object store), or
/// empty to open the plan's own paths (local lakes).
arrow::Result<std::shared_ptr<arrow::Table>> ReadSelection(const ScanPlan& plan,
                                                           const std::vector<std::string>& paths,
                                                           const std::vector<std::string>& columns,
                                                           const SelectionShape& shape = {},
                                                           SelectionCounters* counters = nullptr);

/// One aggregate over a selection's rows, computed as DuckDB computes it over the same rows read
/// in the same order: count(*) (empty `column`) and count(col) as int64; sum of doubles and avg
/// of floats, doubles and integers up to 32 bits as double (sums in row order; integers summed
/// exactly); min and max of integers, floats, dates and timestamps in the column's type, NaN
/// above every number. Over no (non-null) value: NULL, except count, which is 0.
///
/// "time_bucket" is the grouping instead: rows are grouped by the start of the bucket of
/// `width` microseconds their `column` (a timestamp) falls in, buckets counted from `origin`
/// (DuckDB's time_bucket: 2000-01-03 00:00 UTC for widths under a month), and every other
/// aggregate is computed per bucket.
struct SelectionAggregate {
  std::string function;  // "count", "sum", "avg", "min", "max" or "time_bucket"
  std::string column;
  std::string name;  // the result column's name
  int64_t width = 0;   // time_bucket only
  int64_t origin = 0;  // time_bucket only
};

/// Without a time_bucket: one row, each aggregate over `rows`. With one: a row per bucket that
/// holds rows, ordered by bucket (`descending` if asked), the first `limit` only. Columns in the
/// order of `aggregates`. Status::NotImplemented for an aggregate of a type listed as not handled
/// above.
arrow::Result<std::shared_ptr<arrow::Table>> AggregateSelection(const arrow::Table& rows,
                                                                const std::vector<SelectionAggregate>& aggregates,
                                                                bool descending = false,
                                                                std::optional<int64_t> limit = std::nullopt);

}  // namespace timelake
