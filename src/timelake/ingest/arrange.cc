#include "timelake/ingest/arrange.h"

#include <arrow/array.h>
#include <arrow/array/concatenate.h>
#include <arrow/builder.h>
#include <arrow/compute/api.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "timelake/rows/sorted_rows.h"

namespace timelake {
namespace {

namespace cp = arrow::compute;

// The counting-sort arrangement for zero or one series-key column; nullopt if the key space is
// too sparse for it (then the caller uses the generic sort).
arrow::Result<std::optional<Arranged>> ArrangeByRank(const std::shared_ptr<arrow::Table>& input,
                                                     const Contract& contract,
                                                     const arrow::TimestampArray& times) {
  const int64_t n = input->num_rows();
  // Rank of each row's series key (0 for a table that is one series; nulls rank last).
  std::vector<int32_t> rank(static_cast<size_t>(n), 0);
  int64_t num_ranks = 1;
  int key_index = -1;
  std::shared_ptr<arrow::Array> key_values;
  std::shared_ptr<arrow::Int32Array> key_indices;
  if (contract.series_key.size() == 1) {
    key_index = input->schema()->GetFieldIndex(contract.series_key[0]);
    ARROW_ASSIGN_OR_RAISE(auto key, ContiguousColumn(input->column(key_index)));
    auto encoded = cp::DictionaryEncode(key);
    if (!encoded.ok()) return std::nullopt;  // a key type the hash kernels lack: generic sort
    auto dict = std::static_pointer_cast<arrow::DictionaryArray>(encoded->make_array());
    if (dict->indices()->type_id() != arrow::Type::INT32) return std::nullopt;
    key_values = dict->dictionary();
    key_indices = std::static_pointer_cast<arrow::Int32Array>(dict->indices());
    ARROW_ASSIGN_OR_RAISE(auto order_array, cp::SortIndices(*key_values));
    const auto& order = static_cast<const arrow::UInt64Array&>(*order_array);
    std::vector<int32_t> rank_of(static_cast<size_t>(key_values->length()));
    for (int64_t j = 0; j < order.length(); ++j) rank_of[order.Value(j)] = static_cast<int32_t>(j);
    const int32_t null_rank = static_cast<int32_t>(key_values->length());
    for (int64_t i = 0; i < n; ++i) {
      rank[i] = key_indices->IsNull(i) ? null_rank : rank_of[key_indices->Value(i)];
    }
    num_ranks = key_values->length() + 1;
  }

  // Compact chunk ids, in chunk order.
  std::vector<int64_t> ordinals(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ordinals[i] = ChunkOrdinal(contract.chunk, times.Value(i));
  std::vector<int64_t> distinct;
  {
    std::unordered_map<int64_t, int32_t> seen;
    for (int64_t o : ordinals) {
      if (seen.emplace(o, 0).second) distinct.push_back(o);
    }
    std::sort(distinct.begin(), distinct.end());
  }
  std::unordered_map<int64_t, int64_t> chunk_id;
  for (size_t k = 0; k < distinct.size(); ++k) chunk_id[distinct[k]] = static_cast<int64_t>(k);
  const int64_t num_buckets = static_cast<int64_t>(distinct.size()) * num_ranks;
  if (num_buckets > 4 * n + 4096) return std::nullopt;

  // Stable counting sort by bucket = (chunk id, rank).
  std::vector<int64_t> bucket(static_cast<size_t>(n));
  {
    int64_t last_ordinal = ordinals.empty() ? 0 : ordinals[0];
    int64_t last_id = chunk_id[last_ordinal];
    for (int64_t i = 0; i < n; ++i) {
      if (ordinals[i] != last_ordinal) {
        last_ordinal = ordinals[i];
        last_id = chunk_id[last_ordinal];
      }
      bucket[i] = last_id * num_ranks + rank[i];
    }
  }
  std::vector<int64_t> start(static_cast<size_t>(num_buckets) + 1, 0);
  for (int64_t b : bucket) ++start[b + 1];
  for (int64_t b = 0; b < num_buckets; ++b) start[b + 1] += start[b];
  std::vector<int64_t> perm(static_cast<size_t>(n));
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < n; ++i) perm[next[bucket[i]]++] = i;
  }
  // Within a bucket rows must be in time order; they nearly always arrive that way.
  const int64_t* t = times.raw_values();
  for (int64_t b = 0; b < num_buckets; ++b) {
    auto first = perm.begin() + start[b], last = perm.begin() + start[b + 1];
    if (!std::is_sorted(first, last, [t](int64_t x, int64_t y) { return t[x] < t[y]; })) {
      std::stable_sort(first, last, [t](int64_t x, int64_t y) { return t[x] < t[y]; });
    }
  }
  // In-batch dedup: equal (bucket, time) rows are adjacent; keep the last or the first.
  if (contract.dedup != DedupPolicy::kNone && n > 1) {
    std::vector<int64_t> kept;
    kept.reserve(perm.size());
    for (int64_t k = 0; k < n; ++k) {
      auto same = [&](int64_t a, int64_t b) {
        return bucket[perm[a]] == bucket[perm[b]] && t[perm[a]] == t[perm[b]];
      };
      const bool keep = contract.dedup == DedupPolicy::kLast ? (k == n - 1 || !same(k, k + 1))
                                                              : (k == 0 || !same(k, k - 1));
      if (keep) kept.push_back(perm[k]);
    }
    perm.swap(kept);
  }

  Arranged out;
  const int64_t m = static_cast<int64_t>(perm.size());
  for (int64_t k = 0; k < m; ++k) {
    const int64_t b = bucket[perm[k]];
    const int64_t ordinal = distinct[b / num_ranks];
    if (out.runs.empty() || out.runs.back().ordinal != ordinal) {
      ChunkRun run;
      run.ordinal = ordinal;
      run.offset = k;
      out.runs.push_back(run);
    }
    ++out.runs.back().length;
    if (k == m - 1 || bucket[perm[k + 1]] != b) out.runs.back().newest.push_back(k);
  }

  arrow::Int64Builder perm_builder;
  ARROW_RETURN_NOT_OK(perm_builder.AppendValues(perm));
  std::shared_ptr<arrow::Array> perm_array;
  ARROW_RETURN_NOT_OK(perm_builder.Finish(&perm_array));
  arrow::ChunkedArrayVector columns;
  arrow::FieldVector fields;
  for (int c = 0; c < input->num_columns(); ++c) {
    if (c == key_index) {
      ARROW_ASSIGN_OR_RAISE(auto taken, cp::Take(*key_indices, *perm_array));
      auto type = arrow::dictionary(arrow::int32(), key_values->type());
      ARROW_ASSIGN_OR_RAISE(auto column, arrow::DictionaryArray::FromArrays(type, taken, key_values));
      columns.push_back(std::make_shared<arrow::ChunkedArray>(column));
      fields.push_back(arrow::field(input->field(c)->name(), type, input->field(c)->nullable()));
      continue;
    }
    ARROW_ASSIGN_OR_RAISE(auto values, ContiguousColumn(input->column(c)));
    ARROW_ASSIGN_OR_RAISE(auto taken, cp::Take(*values, *perm_array));
    columns.push_back(std::make_shared<arrow::ChunkedArray>(taken));
    fields.push_back(input->field(c));
  }
  out.table = arrow::Table::Make(arrow::schema(fields), columns, m);
  return out;
}

}  // namespace

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
  ARROW_ASSIGN_OR_RAISE(auto time, ContiguousColumn(input->GetColumnByName(contract.time_column)));
  const auto& ts = static_cast<const arrow::TimestampArray&>(*time);
  if (contract.series_key.size() <= 1) {
    ARROW_ASSIGN_OR_RAISE(auto fast, ArrangeByRank(input, contract, ts));
    if (fast) return std::move(*fast);
  }
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
                        ContiguousColumn(sorted->GetColumnByName(kChunkColumn)));
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
