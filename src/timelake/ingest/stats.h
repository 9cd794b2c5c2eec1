// Delta file statistics: the `stats` JSON of an `add` action.
//
// numRecords; minValues/maxValues for primitive leaf columns (nested like the schema); nullCount
// for every column. Strings are cut to 32 characters (a cut max gets U+10FFFF appended so it still
// bounds every value); NaN and infinities are never written; timestamps are ISO-8601 with the min
// floored and the max ceiled to the millisecond, because other readers truncate to milliseconds.
#pragma once

#include <string>

#include <arrow/result.h>
#include <arrow/type_fwd.h>

namespace timelake {

/// Stats of a table in storage types; only the first `max_indexed_columns` leaf columns get
/// min/max (Delta's delta.dataSkippingNumIndexedCols, default 32).
arrow::Result<std::string> FileStatsJson(const arrow::Table& table, int max_indexed_columns = 32);

}  // namespace timelake
