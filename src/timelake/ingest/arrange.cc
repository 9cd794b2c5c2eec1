#include "timelake/ingest/arrange.h"

#include <arrow/array.h>
#include <arrow/array/concatenate.h>
#include <arrow/builder.h>
#include <arrow/compute/api.h>

namespace timelake {
namespace {

namespace cp = arrow::compute;

// Per row: true if the row differs from the next one in any of `columns` (null equals null).
arrow::Result<std::shared_ptr<arrow::Array>> DiffersFromNext(const arrow::Table& table,
                                                             const std::vector<std::string>& columns) {
  const int64_t n = table.num_rows();
  arrow::Datum differs;
  for (const auto& name : columns) {
    ARROW_ASSIGN_OR_RAISE(auto column, arrow::Concatenate(table.GetColumnByName(name)->chunks()));
    auto a = column->Slice(0, n - 1);
    auto b = column->Slice(1, n - 1);
    ARROW_ASSIGN_OR_RAISE(auto ne, cp::CallFunction("not_equal", {arrow::Datum(a), arrow::Datum(b)}));
    ARROW_ASSIGN_OR_RAISE(ne, cp::CallFunction("coalesce", {ne, arrow::Datum(false)}));
    if (column->null_count() > 0) {
      ARROW_ASSIGN_OR_RAISE(auto na, cp::CallFunction("is_null", {arrow::Datum(a)}));
      ARROW_ASSIGN_OR_RAISE(auto nb, cp::CallFunction("is_null", {arrow::Datum(b)}));
      ARROW_ASSIGN_OR_RAISE(auto nx, cp::CallFunction("xor", {arrow::Datum(na), arrow::Datum(nb)}));
      ARROW_ASSIGN_OR_RAISE(ne, cp::CallFunction("or", {arrow::Datum(ne), arrow::Datum(nx)}));
    }
    if (differs.is_value()) {
      ARROW_ASSIGN_OR_RAISE(differs, cp::CallFunction("or", {arrow::Datum(differs), arrow::Datum(ne)}));
    } else {
      differs = ne;
    }
  }
  return differs.make_array();
}

}  // namespace

arrow::Result<std::shared_ptr<arrow::Array>> DedupMask(const arrow::Table& sorted,
                                                       const std::vector<std::string>& key_columns,
                                                       DedupPolicy policy) {
  const int64_t n = sorted.num_rows();
  arrow::BooleanBuilder builder;
  ARROW_RETURN_NOT_OK(builder.Reserve(n));
  if (n <= 1) {
    for (int64_t i = 0; i < n; ++i) builder.UnsafeAppend(true);
  } else {
    ARROW_ASSIGN_OR_RAISE(auto differs_array, DiffersFromNext(sorted, key_columns));
    const auto& differs = static_cast<const arrow::BooleanArray&>(*differs_array);
    for (int64_t i = 0; i < n; ++i) {
      bool keep = policy == DedupPolicy::kLast ? (i == n - 1 || differs.Value(i))
                                               : (i == 0 || differs.Value(i - 1));
      builder.UnsafeAppend(keep);
    }
  }
  std::shared_ptr<arrow::Array> mask;
  ARROW_RETURN_NOT_OK(builder.Finish(&mask));
  return mask;
}

arrow::Result<Arranged> Arrange(const std::shared_ptr<arrow::Table>& input, const Contract& contract) {
  Arranged out;
  if (!contract.is_time_series() || input->num_rows() == 0) {
    out.table = input;
    if (input->num_rows() > 0) {
      ChunkRun run;
      run.length = input->num_rows();
      out.runs.push_back(run);
    }
    return out;
  }
  // Chunk ordinal per row, from the (microsecond) time column.
  ARROW_ASSIGN_OR_RAISE(auto time, arrow::Concatenate(input->GetColumnByName(contract.time_column)->chunks()));
  const auto& ts = static_cast<const arrow::TimestampArray&>(*time);
  arrow::Int64Builder ordinals;
  ARROW_RETURN_NOT_OK(ordinals.Reserve(ts.length()));
  bool single_chunk = true;
  int64_t first = 0;
  for (int64_t i = 0; i < ts.length(); ++i) {
    const int64_t o = ChunkOrdinal(contract.chunk, ts.Value(i));
    if (i == 0) first = o;
    single_chunk = single_chunk && o == first;
    ordinals.UnsafeAppend(o);
  }
  std::shared_ptr<arrow::Array> ordinal_array;
  ARROW_RETURN_NOT_OK(ordinals.Finish(&ordinal_array));

  // Sort by (chunk, series key…, time); the chunk key is skipped when all rows share one chunk.
  static const char* kChunkColumn = "__timelake_chunk";
  ARROW_ASSIGN_OR_RAISE(auto with_chunk, input->AddColumn(input->num_columns(),
                                                          arrow::field(kChunkColumn, arrow::int64()),
                                                          std::make_shared<arrow::ChunkedArray>(ordinal_array)));
  std::vector<cp::SortKey> keys;
  if (!single_chunk) keys.emplace_back(kChunkColumn);
  for (const auto& k : contract.series_key) keys.emplace_back(k);
  keys.emplace_back(contract.time_column);
  ARROW_ASSIGN_OR_RAISE(auto indices, cp::SortIndices(arrow::Datum(with_chunk), cp::SortOptions(keys)));
  ARROW_ASSIGN_OR_RAISE(auto sorted_datum, cp::Take(with_chunk, indices));
  std::shared_ptr<arrow::Table> sorted = sorted_datum.table();

  if (contract.dedup != DedupPolicy::kNone) {
    std::vector<std::string> key_columns = contract.series_key;
    key_columns.push_back(contract.time_column);
    ARROW_ASSIGN_OR_RAISE(auto mask, DedupMask(*sorted, key_columns, contract.dedup));
    if (static_cast<const arrow::BooleanArray&>(*mask).true_count() < sorted->num_rows()) {
      ARROW_ASSIGN_OR_RAISE(auto filtered, cp::Filter(sorted, mask));
      sorted = filtered.table();
    }
  }

  // Runs of equal chunk ordinal.
  ARROW_ASSIGN_OR_RAISE(auto sorted_ordinals,
                        arrow::Concatenate(sorted->GetColumnByName(kChunkColumn)->chunks()));
  const auto& so = static_cast<const arrow::Int64Array&>(*sorted_ordinals);
  for (int64_t i = 0; i < so.length(); ++i) {
    if (out.runs.empty() || out.runs.back().ordinal != so.Value(i)) {
      ChunkRun run;
      run.ordinal = so.Value(i);
      run.offset = i;
      out.runs.push_back(run);
    }
    ++out.runs.back().length;
  }
  ARROW_ASSIGN_OR_RAISE(out.table, sorted->RemoveColumn(sorted->num_columns() - 1));
  ARROW_ASSIGN_OR_RAISE(out.table, out.table->CombineChunks());
  return out;
}

}  // namespace timelake
