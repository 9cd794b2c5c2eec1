// The newest row of every series, and merging such summaries by sequence number.
//
// What the last-value index stores and what ingestion computes for it while writing files: both
// use these, so neither depends on the other.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <arrow/result.h>
#include <arrow/table.h>

#include "timelake/contract.h"

namespace timelake {

/// Name of the sequence column in index records.
constexpr const char* kSeqColumn = "__timelake_seq";

/// The newest row per series of `rows`, which must be sorted by (series key, time).
arrow::Result<std::shared_ptr<arrow::Table>> NewestRows(const std::shared_ptr<arrow::Table>& rows,
                                                        const Contract& contract);

/// `rows` with the sequence column appended, holding `seq` in every row.
arrow::Result<std::shared_ptr<arrow::Table>> WithSequence(const std::shared_ptr<arrow::Table>& rows,
                                                          int64_t seq);

/// Merges index records (each with the sequence column) into one row per series: the newest
/// time wins; equal times are resolved by the dedup policy (first: lowest seq, else highest).
arrow::Result<std::shared_ptr<arrow::Table>> MergeNewest(
    const std::vector<std::shared_ptr<arrow::Table>>& records, const Contract& contract);

}  // namespace timelake
