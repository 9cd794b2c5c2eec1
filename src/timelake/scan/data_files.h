// Opening a scan plan's data files for the core's own readers (selection_reader.h,
// bucket_scan.h), and what those readers share: which plans they can read at all.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <arrow/io/interfaces.h>
#include <arrow/result.h>

#include "timelake/scan/scan_planner.h"

namespace parquet {
class ColumnDescriptor;
class ParquetFileReader;
class SchemaDescriptor;
}

namespace timelake {

/// One open data file: its reader and the bytes under it.
struct OpenDataFile {
  std::shared_ptr<arrow::io::RandomAccessFile> source;
  std::unique_ptr<parquet::ParquetFileReader> reader;
};

/// Opens plan file `f` (from `paths[f]`, a local copy, when `paths` is not empty), memory
/// mapped, with page checksums verified if `verify` (a fifth of a full scan's time: the scans
/// skip it, as the query engine does). Parsed footers of the lake's own files are kept
/// process-wide (data files never change once written), keyed by path and the log's size.
/// NotImplemented for a path that is not local.
arrow::Result<OpenDataFile> OpenPlanFile(const ScanPlan& plan, const std::vector<std::string>& paths, size_t f,
                                         bool verify = true);

/// The flat top-level column `name` of a file's schema and its leaf index (`*leaf`); null when
/// the file has no such column.
const parquet::ColumnDescriptor* TopLevelLeaf(const parquet::SchemaDescriptor& schema, const std::string& name,
                                              int* leaf);

/// OK when the core's readers can read `columns` of the plan as the query engine would:
/// NotImplemented for tables without a time column, column mapping, differing files, partition
/// columns, restored columns, and read-time dedup unless the filter fixes every series-key column.
arrow::Status CoreReadable(const ScanPlan& plan, const std::vector<std::string>& columns);

}  // namespace timelake
