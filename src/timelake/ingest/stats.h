// Delta file statistics: the `stats` JSON of an `add` action.
//
// numRecords; minValues/maxValues for primitive leaf columns (nested like the schema); nullCount
// for every column. Strings are cut to 32 characters (a cut max gets U+10FFFF appended so it still
// bounds every value); NaN and infinities are never written; timestamps are ISO-8601 with the min
// floored and the max ceiled to the millisecond (readers that do not adjust for the protocol's
// truncation stay correct), except that a max is never ceiled into year 10000; only instants
// within the years 0001–9999 that Spark and delta-rs parse get stats.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <arrow/result.h>
#include <arrow/type_fwd.h>

namespace timelake {

/// Stats of a table in storage types; only the first `max_indexed_columns` leaf columns get
/// min/max (Delta's delta.dataSkippingNumIndexedCols, default 32). Values other readers cannot
/// hold are left out rather than written wrong: timestamps and dates outside years 0001–9999,
/// NaN and infinities.
arrow::Result<std::string> FileStatsJson(const arrow::Table& table, int max_indexed_columns = 32);

/// The stats of a file written in parts (each part's FileStatsJson over `schema`, the same
/// `max_indexed_columns`), as FileStatsJson of the whole would give them: numRecords and
/// nullCount summed, each min/max the least/greatest of the parts' (exact: numbers compare by
/// their decimal text). A column with values in a part that has no min (or max) for it (values
/// that get no stats: NaN, infinities, instants outside 0001–9999) gets none in the result.
arrow::Result<std::string> MergeFileStats(const arrow::Schema& schema, const std::vector<std::string>& parts);

/// `value` as a string min (`is_max` false) or max: at most 32 UTF-8 characters. A cut min is
/// the value's prefix (still a lower bound); a cut max is the prefix followed by U+10FFFF, which
/// bounds every string with that prefix except one going on with U+10FFFF itself: such a value
/// has no short upper bound and is returned whole. Used for the stats and for the series-key
/// range tags alike.
std::string StatString(std::string_view value, bool is_max);

}  // namespace timelake
