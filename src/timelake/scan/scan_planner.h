// The scan planner: which data files of a snapshot a query engine reads, and how.
//
// Planning reads the snapshot only (the log's file list, each file's Delta stats and timelake's
// tags); it opens no data file. With a ScanFilter it leaves out every file that provably holds no
// row the filter admits; a file without the tags or stats that would prove it is kept (unless the
// filter admits no row at all: a time range whose min is above its max), so the plan may list
// files that hold no matching row, never the other way round. The engine still
// applies its own predicates: a filter only saves I/O.
//
// Read-time dedup: on a table with a dedup policy, a file is marked `dedup` when another live file
// may hold a row with the same series key and time (their time ranges meet and their key ranges,
// when known, meet). The marks are decided over every live file before the filter prunes any:
// a pruned file holds no row the filter admits, and a duplicate of an admitted row has the same
// series key and time, so it would be admitted too; the marks are therefore exact for the rows
// the filter admits and merely cautious for the others.
//
// Thread safety: PlanScan reads its inputs only; concurrent calls over the same inputs are fine.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <arrow/result.h>
#include <arrow/type_fwd.h>

#include "timelake/contract.h"
#include "timelake/log/snapshot.h"
#include "timelake/store/object_store.h"

namespace timelake {

/// A value a series-key column must equal: an integer for integer columns, text for strings.
using ScanKeyValue = std::variant<int64_t, std::string>;

/// Which rows a query wants, as far as the planner can use it to skip files.
struct ScanFilter {
  /// Rows whose time t satisfies min_time <= t <= max_time (both ends inclusive), in
  /// microseconds since the epoch as the time column stores them (the unit of kMinTimeTag and
  /// kMaxTimeTag): UTC for timestamps with a time zone, the wall-clock time read as UTC for naive
  /// ones. Unset: unbounded on that side.
  std::optional<int64_t> min_time;
  std::optional<int64_t> max_time;
  /// Rows whose series-key column (by name) equals the value. Only columns stored as integers
  /// or strings prune files; a filter on other series-key types is accepted and keeps every file.
  std::map<std::string, ScanKeyValue> key_equals;

  bool empty() const { return !min_time && !max_time && key_equals.empty(); }
};

/// A data file as a query engine should read it.
struct ScanFile {
  std::string path;  // what the engine opens (absolute local path or URL); valid UTF-8
  /// The file's path in the lake's store ("" for a file the log names outside the table folder).
  std::string store_path;
  int64_t size = -1;  // bytes, as the log records them (-1: unknown)
  int64_t modified_ms = -1;  // the add action's modificationTime (ms since the epoch)
  std::string chunk;
  int64_t seq = 0;     // commit version the rows were written at
  int64_t order = 0;   // tie-break between files of one commit
  int64_t rows = -1;   // -1: unknown (no stats)
  bool dedup = false;  // true: another file may hold the same (series, time); dedup at read time
  PartitionValues partition_values;
  /// Rows (0-based positions in the file) another engine deleted with a deletion vector, sorted.
  std::vector<uint64_t> deleted_rows;
};

/// How read-time dedup keeps one row of each (series key, time) among the files marked `dedup`:
/// rows with equal `keys` are ranked by their file's `seq`, then its `order`, then their position
/// in the file, and the first row of that ranking wins.
struct DedupOrder {
  /// The columns whose equal values make rows duplicates: the series key, then the time column.
  /// Empty for a table without a dedup policy (no file is marked).
  std::vector<std::string> keys;
  /// True under dedup "last" (rank descending: the newest commit's row wins), false under
  /// "first" (ascending: the oldest's).
  bool newest_first = false;
};

struct ScanPlan {
  int64_t version = 0;
  std::vector<ScanFile> files;
  int64_t files_pruned = 0;  // live files the filter left out
  std::shared_ptr<arrow::Schema> declared;     // what results should look like
  std::shared_ptr<arrow::Schema> file_schema;  // the columns the files hold
  /// The type each column of `declared` is stored in (log/schema.h: the storage schema, partition
  /// columns included), by name: what an engine reading the files gives back.
  std::shared_ptr<arrow::Schema> storage;
  /// The columns whose values an engine gives back in their storage type and that results cast
  /// back to the declared type (RestoredColumns).
  std::vector<std::string> restored;
  DedupOrder dedup_order;
  std::vector<std::string> partition_columns;
  Contract contract;
  ScanFilter filter;  // the filter the plan was made with
  /// Columns were added to the table (add_columns): older files lack them, and read them as null;
  /// or widened (see `widened`).
  bool evolved = false;
  /// The files may differ in the columns they hold, so an engine reads them by column name (a
  /// column a file lacks reads as null): the table evolved, or it is a plain table (no time
  /// column) none of whose listed files timelake wrote (no commit sequence tag), as another
  /// engine's files may be.
  bool read_by_name = false;
  /// Columns whose type was widened (Delta typeWidening): older files hold a narrower type that
  /// readers cast to the table's.
  std::vector<std::string> widened;
  /// Delta column mapping (name or id mode): the files' column name of each column, by the name
  /// users see; empty without column mapping.
  std::map<std::string, std::string> physical_names;
};

/// The columns of `declared` whose results come back from `storage` (same names) to the declared
/// type: top-level columns whose storage type differs and is not nested. Nested columns, and
/// decimal256 columns (stored as decimal128), keep the type the files hold.
std::vector<std::string> RestoredColumns(const arrow::Schema& declared, const arrow::Schema& storage);

/// The dedup ordering of a table with `contract` (empty keys under no dedup policy).
DedupOrder DedupOrderOf(const Contract& contract);

/// The table a plan is made for. Everything is borrowed for the duration of PlanScan.
struct ScanSource {
  ObjectStore* store = nullptr;  // reads deletion vectors
  std::string table_path;  // the table folder, relative to the store root
  const Snapshot* snapshot = nullptr;
  const Contract* contract = nullptr;
  std::shared_ptr<arrow::Schema> declared;
  std::shared_ptr<arrow::Schema> storage;
};

/// The files of `source.snapshot` that may hold rows `filter` admits, annotated for a query
/// engine. Status::Invalid for a filter the table cannot answer (a time range on a table without
/// a time column, a column that is not part of the series key, a value of the wrong kind);
/// Status::NotImplemented for a data file whose decoded path is not UTF-8 (no engine can be
/// handed it as text).
arrow::Result<ScanPlan> PlanScan(const ScanSource& source, const ScanFilter& filter = {});

}  // namespace timelake
