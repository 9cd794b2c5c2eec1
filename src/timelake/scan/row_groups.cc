#include "timelake/scan/row_groups.h"

#include <algorithm>
#include <limits>

#include <parquet/metadata.h>
#include <parquet/schema.h>
#include <parquet/statistics.h>
#include <parquet/types.h>

namespace timelake {
namespace {

constexpr int64_t kNoMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

// The leaf column of a top-level field named `name`; -1 when there is none.
int LeafColumn(const parquet::SchemaDescriptor& schema, const std::string& name) {
  for (int i = 0; i < schema.num_columns(); ++i) {
    const auto* column = schema.Column(i);
    if (column->max_repetition_level() == 0 && column->path()->ToDotVector().size() == 1 &&
        column->name() == name) {
      return i;
    }
  }
  return -1;
}

// The [min, max] of a signed integer column chunk; nullopt when unknown.
std::optional<std::pair<int64_t, int64_t>> IntBounds(const parquet::ColumnChunkMetaData& chunk,
                                                     const parquet::ColumnDescriptor& column) {
  if (!chunk.is_stats_set() || column.sort_order() != parquet::SortOrder::SIGNED) return std::nullopt;
  auto stats = chunk.statistics();
  if (!stats || !stats->HasMinMax()) return std::nullopt;
  if (column.physical_type() == parquet::Type::INT64) {
    auto typed = std::static_pointer_cast<parquet::Int64Statistics>(stats);
    return std::make_pair(typed->min(), typed->max());
  }
  if (column.physical_type() == parquet::Type::INT32) {
    auto typed = std::static_pointer_cast<parquet::Int32Statistics>(stats);
    return std::make_pair(int64_t{typed->min()}, int64_t{typed->max()});
  }
  return std::nullopt;
}

// A timestamp column chunk's [min, max] in microseconds (widened outwards for nanoseconds).
std::optional<std::pair<int64_t, int64_t>> TimeBounds(const parquet::ColumnChunkMetaData& chunk,
                                                      const parquet::ColumnDescriptor& column) {
  if (column.physical_type() != parquet::Type::INT64) return std::nullopt;
  const auto& logical = column.logical_type();
  if (!logical || !logical->is_timestamp()) return std::nullopt;
  const auto unit = static_cast<const parquet::TimestampLogicalType&>(*logical).time_unit();
  auto bounds = IntBounds(chunk, column);
  if (!bounds) return std::nullopt;
  auto [min, max] = *bounds;
  switch (unit) {
    case parquet::LogicalType::TimeUnit::MICROS:
      return bounds;
    case parquet::LogicalType::TimeUnit::MILLIS: {
      constexpr int64_t kLimit = kNoMax / 1000;
      if (min < -kLimit || max > kLimit) return std::nullopt;
      return std::make_pair(min * 1000, max * 1000);  // exact: a millisecond is 1000 µs
    }
    case parquet::LogicalType::TimeUnit::NANOS: {
      // Floor the min, ceil the max: the range in microseconds covers every nanosecond value.
      const int64_t lo = min / 1000 - (min % 1000 < 0 ? 1 : 0);
      const int64_t hi = max / 1000 + (max % 1000 > 0 ? 1 : 0);
      return std::make_pair(lo, hi);
    }
    default:
      return std::nullopt;
  }
}

// A UTF-8 column chunk's [min, max] as bytes; nullopt when unknown.
std::optional<std::pair<std::string, std::string>> TextBounds(
    const parquet::ColumnChunkMetaData& chunk, const parquet::ColumnDescriptor& column) {
  if (column.physical_type() != parquet::Type::BYTE_ARRAY || !chunk.is_stats_set() ||
      column.sort_order() != parquet::SortOrder::UNSIGNED) {
    return std::nullopt;
  }
  const auto& logical = column.logical_type();
  if (!logical || !logical->is_string()) return std::nullopt;
  auto stats = chunk.statistics();
  if (!stats || !stats->HasMinMax()) return std::nullopt;
  auto typed = std::static_pointer_cast<parquet::ByteArrayStatistics>(stats);
  auto text = [](const parquet::ByteArray& v) {
    return std::string(reinterpret_cast<const char*>(v.ptr), v.len);
  };
  return std::make_pair(text(typed->min()), text(typed->max()));
}

// True when the row group's statistics prove that no row satisfies `filter`.
bool Excluded(const parquet::RowGroupMetaData& group, const ScanFilter& filter, int time_leaf,
              const std::vector<std::pair<int, const ScanKeyValue*>>& keys) {
  const auto& schema = *group.schema();
  if (time_leaf >= 0 && (filter.min_time || filter.max_time)) {
    auto chunk = group.ColumnChunk(time_leaf);
    if (auto bounds = TimeBounds(*chunk, *schema.Column(time_leaf))) {
      if (filter.min_time && bounds->second < *filter.min_time) return true;
      if (filter.max_time && bounds->first > *filter.max_time) return true;
    }
  }
  for (const auto& [leaf, value] : keys) {
    auto chunk = group.ColumnChunk(leaf);
    const auto& column = *schema.Column(leaf);
    if (const auto* v = std::get_if<int64_t>(value)) {
      if (auto bounds = IntBounds(*chunk, column); bounds && (*v < bounds->first || *v > bounds->second)) {
        return true;
      }
    } else if (const auto* s = std::get_if<std::string>(value)) {
      if (auto bounds = TextBounds(*chunk, column); bounds && (*s < bounds->first || *s > bounds->second)) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

std::vector<int> RowGroupsAdmitted(const parquet::FileMetaData& meta, const ScanFilter& filter,
                                   const std::string& time_column) {
  std::vector<int> admitted;
  const auto& schema = *meta.schema();
  const int time_leaf = time_column.empty() ? -1 : LeafColumn(schema, time_column);
  std::vector<std::pair<int, const ScanKeyValue*>> keys;
  for (const auto& [name, value] : filter.key_equals) {
    if (int leaf = LeafColumn(schema, name); leaf >= 0) keys.emplace_back(leaf, &value);
  }
  for (int i = 0; i < meta.num_row_groups(); ++i) {
    auto group = meta.RowGroup(i);
    if (!Excluded(*group, filter, time_leaf, keys)) admitted.push_back(i);
  }
  return admitted;
}

std::optional<std::vector<std::pair<int64_t, int64_t>>> RowGroupByteRanges(
    const parquet::FileMetaData& meta, const std::vector<int>& row_groups, int64_t footer_start) {
  struct Span {
    int64_t start, end;
  };
  const int n = meta.num_row_groups();
  std::vector<Span> spans(n);
  int64_t data_end = 4;
  for (int i = 0; i < n; ++i) {
    auto group = meta.RowGroup(i);
    Span span{kNoMax, kNoMin};
    for (int c = 0; c < group->num_columns(); ++c) {
      auto chunk = group->ColumnChunk(c);
      int64_t start = chunk->data_page_offset();
      if (chunk->has_dictionary_page() && chunk->dictionary_page_offset() > 0) {
        start = std::min(start, chunk->dictionary_page_offset());
      }
      const int64_t size = chunk->total_compressed_size();
      if (start < 4 || size < 0 || start > footer_start - size) return std::nullopt;
      span.start = std::min(span.start, start);
      span.end = std::max(span.end, start + size);
    }
    if (group->num_columns() == 0) return std::nullopt;
    spans[i] = span;
    data_end = std::max(data_end, span.end);
  }
  // Row groups in file order must not overlap; each one's region runs to the next one's start,
  // so padding a writer put between them is read too.
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return spans[a].start < spans[b].start; });
  std::vector<int64_t> region_end(n);
  for (int k = 0; k < n; ++k) {
    const int i = order[k];
    const int64_t next = k + 1 < n ? spans[order[k + 1]].start : data_end;
    if (spans[i].end > next) return std::nullopt;
    region_end[i] = next;
  }
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int i : row_groups) {
    if (i < 0 || i >= n) return std::nullopt;
    ranges.emplace_back(spans[i].start, region_end[i]);
  }
  if (data_end < footer_start) ranges.emplace_back(data_end, footer_start);
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<int64_t, int64_t>> merged;  // as (start, end) first
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  for (auto& r : merged) r.second -= r.first;
  return merged;
}

RowGroupChooser ChooseRowGroups(const ScanPlan& plan) {
  if (plan.filter.empty()) return nullptr;
  return [filter = plan.filter, time = plan.contract.time_column](const parquet::FileMetaData& meta) {
    return RowGroupsAdmitted(meta, filter, time);
  };
}

}  // namespace timelake
