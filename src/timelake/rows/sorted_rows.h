// Rows sorted by (series key, time): finding the runs of rows that share a key.
//
// Shared by ingestion (in-batch deduplication), the last-value index (newest row per series) and
// compaction, which all work on tables in this order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <arrow/result.h>
#include <arrow/table.h>

#include "timelake/contract.h"

namespace timelake {

/// The column as one array: its only chunk as is, or the chunks concatenated.
arrow::Result<std::shared_ptr<arrow::Array>> ContiguousColumn(
    const std::shared_ptr<arrow::ChunkedArray>& column);

/// Row positions (in a table sorted by series key and time) that `policy` keeps: for "last" the
/// final row of each (series key, time) run, for "first" the first one.
arrow::Result<std::shared_ptr<arrow::Array>> DedupMask(const arrow::Table& sorted,
                                                       const std::vector<std::string>& key_columns,
                                                       DedupPolicy policy);

}  // namespace timelake
