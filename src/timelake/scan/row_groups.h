// Row-group pruning: which row groups of a Parquet file may hold rows a ScanFilter admits, and
// which bytes of the file a reader of those row groups touches.
//
// The scan planner prunes whole files from the log's stats; for a large file that survives it,
// the row groups' own statistics (in the file's footer) prune further. sql() on a lake in an
// object store uses this to fetch only the selected row groups of a large file (FileCache). The
// rule is the planner's: a row group is left out only when its statistics prove it holds no row
// the filter admits; missing, unsigned or unfamiliar statistics keep it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "timelake/scan/scan_planner.h"

namespace parquet {
class FileMetaData;
}

namespace timelake {

/// The row groups (indices) of a Parquet file that a reader needs, given its footer.
using RowGroupChooser = std::function<std::vector<int>(const parquet::FileMetaData&)>;

/// What sql() hands the file cache for `plan`: the row groups the plan's filter may admit (by
/// RowGroupsAdmitted); null for a plan without a filter, whose files are copied whole.
RowGroupChooser ChooseRowGroups(const ScanPlan& plan);

/// Indices of the row groups of `meta` that may hold a row `filter` admits; `time_column` names
/// the table's time column ("" for a plain table).
std::vector<int> RowGroupsAdmitted(const parquet::FileMetaData& meta, const ScanFilter& filter,
                                   const std::string& time_column);

/// Byte ranges (offset, length), sorted and disjoint, that hold everything a reader of
/// `row_groups` may read other than the footer: each selected row group's pages, and what lies
/// between the last row group and the footer (page indexes, bloom filters). `footer_start` is
/// where the footer begins. nullopt when the column chunks' offsets do not describe row groups
/// laid out one after the other inside [4, footer_start) (the caller then reads the whole file).
std::optional<std::vector<std::pair<int64_t, int64_t>>> RowGroupByteRanges(
    const parquet::FileMetaData& meta, const std::vector<int>& row_groups, int64_t footer_start);

}  // namespace timelake
