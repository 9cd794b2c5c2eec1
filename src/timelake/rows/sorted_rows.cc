#include "timelake/rows/sorted_rows.h"

#include <arrow/array.h>
#include <arrow/array/concatenate.h>
#include <arrow/array/util.h>
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
    ARROW_ASSIGN_OR_RAISE(auto column, ContiguousColumn(table.GetColumnByName(name)));
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

arrow::Result<std::shared_ptr<arrow::Array>> ContiguousColumn(
    const std::shared_ptr<arrow::ChunkedArray>& column) {
  if (column->num_chunks() == 1) return column->chunk(0);
  if (column->num_chunks() == 0) return arrow::MakeEmptyArray(column->type());
  return arrow::Concatenate(column->chunks());
}

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

}  // namespace timelake
