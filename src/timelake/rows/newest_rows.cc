#include "timelake/rows/newest_rows.h"

#include <arrow/array/util.h>
#include <arrow/compute/api.h>
#include <arrow/scalar.h>

#include "timelake/rows/sorted_rows.h"

namespace timelake {

namespace cp = arrow::compute;

arrow::Result<std::shared_ptr<arrow::Table>> NewestRows(const std::shared_ptr<arrow::Table>& rows,
                                                        const Contract& contract) {
  if (rows->num_rows() == 0) return rows;
  if (contract.series_key.empty()) return rows->Slice(rows->num_rows() - 1, 1);
  ARROW_ASSIGN_OR_RAISE(auto combined, rows->CombineChunks());
  ARROW_ASSIGN_OR_RAISE(auto mask, DedupMask(*combined, contract.series_key, DedupPolicy::kLast));
  ARROW_ASSIGN_OR_RAISE(auto filtered, cp::Filter(combined, mask));
  return filtered.table();
}

arrow::Result<std::shared_ptr<arrow::Table>> WithSequence(const std::shared_ptr<arrow::Table>& rows,
                                                          int64_t seq) {
  ARROW_ASSIGN_OR_RAISE(auto column, arrow::MakeArrayFromScalar(arrow::Int64Scalar(seq), rows->num_rows()));
  return rows->AddColumn(rows->num_columns(), arrow::field(kSeqColumn, arrow::int64(), false),
                         std::make_shared<arrow::ChunkedArray>(column));
}

arrow::Result<std::shared_ptr<arrow::Table>> MergeNewest(
    const std::vector<std::shared_ptr<arrow::Table>>& records, const Contract& contract) {
  ARROW_ASSIGN_OR_RAISE(auto all, arrow::ConcatenateTables(records));
  if (all->num_rows() == 0) return all;
  std::vector<cp::SortKey> keys;
  for (const auto& k : contract.series_key) keys.emplace_back(k);
  keys.emplace_back(contract.time_column);
  // Within equal (series, time) the row that must win sorts last.
  keys.emplace_back(kSeqColumn, contract.dedup == DedupPolicy::kFirst ? cp::SortOrder::Descending
                                                                       : cp::SortOrder::Ascending);
  ARROW_ASSIGN_OR_RAISE(auto indices, cp::SortIndices(arrow::Datum(all), cp::SortOptions(keys)));
  ARROW_ASSIGN_OR_RAISE(auto sorted, cp::Take(all, indices));
  return NewestRows(sorted.table(), contract);
}

}  // namespace timelake
