#include "timelake/scan/selection_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>
#include <limits>
#include <optional>
#include <utility>

#include <arrow/array/builder_base.h>
#include <arrow/array/builder_binary.h>
#include <arrow/array/builder_primitive.h>
#include <arrow/array/concatenate.h>
#include <arrow/array/util.h>
#include <arrow/compute/api_vector.h>
#include <arrow/compute/cast.h>
#include <arrow/scalar.h>
#include <arrow/buffer.h>
#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <parquet/column_reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/page_index.h>
#include <parquet/schema.h>
#include <parquet/statistics.h>

#include "timelake/scan/data_files.h"
#include "timelake/store/parquet_object.h"
#include "timelake/util/parallel.h"

namespace timelake {
namespace {

// Selections of at least this many rows read their columns on several threads.
constexpr int64_t kParallelRows = 32 * 1024;

// Rows of a row group, as sorted disjoint [first, end) runs.
using Runs = std::vector<std::pair<int64_t, int64_t>>;

Runs Intersect(const Runs& a, const Runs& b) {
  Runs out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first);
    const int64_t hi = std::min(a[i].second, b[j].second);
    if (lo < hi) out.emplace_back(lo, hi);
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return out;
}

Runs RunsOf(const std::vector<int64_t>& rows) {
  Runs out;
  for (const int64_t row : rows) {
    if (!out.empty() && out.back().second == row) {
      ++out.back().second;
    } else {
      out.emplace_back(row, row + 1);
    }
  }
  return out;
}

// One condition of the filter on one column: the values it admits.
struct Condition {
  std::string column;
  int leaf = -1;
  parquet::Type::type physical = parquet::Type::UNDEFINED;
  // Integers (keys) and times: lo <= v <= hi, and v one of `ints` when that is not empty (an IN
  // list: sorted, lo and hi its ends). Strings: v one of `texts` (sorted, distinct).
  int64_t lo = std::numeric_limits<int64_t>::min();
  int64_t hi = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> ints;
  std::vector<std::string> texts;

  bool Admits(int64_t v) const {
    if (v < lo || v > hi) return false;
    return ints.size() <= 1 || std::binary_search(ints.begin(), ints.end(), v);
  }
  bool Admits(const parquet::ByteArray& v) const {
    if (texts.size() == 1) return Equal(v, texts.front());
    const std::string_view value(reinterpret_cast<const char*>(v.ptr), v.len);
    // Parquet orders UTF-8 and binary values as unsigned bytes, as string_view compares.
    const auto at = std::lower_bound(texts.begin(), texts.end(), value,
                                     [](const std::string& a, std::string_view b) { return std::string_view(a) < b; });
    return at != texts.end() && std::string_view(*at) == value;
  }
  // Could a page or row group whose values lie in [min, max] hold an admitted value?
  bool Overlaps(int64_t min, int64_t max) const {
    if (max < lo || min > hi) return false;
    if (ints.size() <= 1) return true;
    const auto at = std::lower_bound(ints.begin(), ints.end(), min);
    return at != ints.end() && *at <= max;
  }
  bool Overlaps(const parquet::ByteArray& min, const parquet::ByteArray& max) const {
    const std::string_view a(reinterpret_cast<const char*>(min.ptr), min.len);
    const std::string_view b(reinterpret_cast<const char*>(max.ptr), max.len);
    const auto at = std::lower_bound(texts.begin(), texts.end(), a,
                                     [](const std::string& x, std::string_view y) { return std::string_view(x) < y; });
    return at != texts.end() && std::string_view(*at) <= b;
  }

 private:
  static bool Equal(const parquet::ByteArray& v, const std::string& text) {
    if (v.len != text.size()) return false;
    const size_t n = v.len;
    if (n >= 8) {
      // Keys of one table mostly differ at the end ("dev-00333"): compare the last 8 bytes first.
      uint64_t a, b;
      std::memcpy(&a, v.ptr + n - 8, 8);
      std::memcpy(&b, text.data() + n - 8, 8);
      if (a != b) return false;
    }
    return std::memcmp(v.ptr, text.data(), n) == 0;
  }
};

// Does the column chunk's statistics allow a value the condition admits? (true when unknown)
bool ChunkMayMatch(const parquet::ColumnChunkMetaData& chunk, const Condition& cond) {
  if (!chunk.is_stats_set()) return true;
  const std::shared_ptr<parquet::Statistics> stats = chunk.statistics();
  if (!stats) return true;
  if (stats->HasNullCount() && stats->null_count() == chunk.num_values()) return false;
  if (!stats->HasMinMax()) return true;
  switch (cond.physical) {
    case parquet::Type::INT32: {
      const auto& s = static_cast<const parquet::Int32Statistics&>(*stats);
      return cond.Overlaps(s.min(), s.max());
    }
    case parquet::Type::INT64: {
      const auto& s = static_cast<const parquet::Int64Statistics&>(*stats);
      return cond.Overlaps(s.min(), s.max());
    }
    case parquet::Type::BYTE_ARRAY: {
      const auto& s = static_cast<const parquet::ByteArrayStatistics&>(*stats);
      return cond.Overlaps(s.min(), s.max());
    }
    default:
      return true;
  }
}

// The offset index's pages, if they are a well-formed cover of the row group's rows: the first
// starts at row 0 and each starts after the one before, inside the row group.
bool CoversRows(const parquet::OffsetIndex* offsets, int64_t rows) {
  if (offsets == nullptr) return false;
  const auto& locations = offsets->page_locations();
  if (locations.empty() || locations.front().first_row_index != 0) return false;
  for (size_t page = 1; page < locations.size(); ++page) {
    const int64_t first = locations[page].first_row_index;
    if (first <= locations[page - 1].first_row_index || first >= rows) return false;
  }
  return true;
}

// The rows of a row group whose pages may hold a value the condition admits, from the page index
// (the column index's per-page min/max and null pages, the offset index's first rows). All rows
// when the index is missing.
Runs PagesMayMatch(parquet::RowGroupPageIndexReader* index, const Condition& cond, int64_t rows,
                   bool stats_trusted) {
  const Runs all{{0, rows}};
  if (index == nullptr || !stats_trusted) return all;
  std::shared_ptr<parquet::ColumnIndex> column_index = index->GetColumnIndex(cond.leaf);
  std::shared_ptr<parquet::OffsetIndex> offset_index = index->GetOffsetIndex(cond.leaf);
  if (!column_index || !CoversRows(offset_index.get(), rows)) return all;
  const auto& locations = offset_index->page_locations();
  const std::vector<bool>& null_pages = column_index->null_pages();
  if (locations.empty() || null_pages.size() != locations.size()) return all;
  auto admitted = [&](size_t page) -> bool {
    if (null_pages[page]) return false;
    switch (cond.physical) {
      case parquet::Type::INT32: {
        const auto& ci = static_cast<const parquet::Int32ColumnIndex&>(*column_index);
        return cond.Overlaps(ci.min_values()[page], ci.max_values()[page]);
      }
      case parquet::Type::INT64: {
        const auto& ci = static_cast<const parquet::Int64ColumnIndex&>(*column_index);
        return cond.Overlaps(ci.min_values()[page], ci.max_values()[page]);
      }
      case parquet::Type::BYTE_ARRAY: {
        const auto& ci = static_cast<const parquet::ByteArrayColumnIndex&>(*column_index);
        return cond.Overlaps(ci.min_values()[page], ci.max_values()[page]);
      }
      default:
        return true;
    }
  };
  Runs out;
  for (size_t page = 0; page < locations.size(); ++page) {
    const int64_t first = locations[page].first_row_index;
    const int64_t end = page + 1 < locations.size() ? locations[page + 1].first_row_index : rows;
    if (first >= end || !admitted(page)) continue;
    if (!out.empty() && out.back().second == first) {
      out.back().second = end;
    } else {
      out.emplace_back(first, end);
    }
  }
  return out;
}

// One row group of one open file.
struct Group {
  parquet::ParquetFileReader* file = nullptr;
  std::shared_ptr<parquet::RowGroupPageIndexReader> index;
  int ordinal = 0;
  int64_t rows = 0;
  arrow::io::RandomAccessFile* source = nullptr;  // the file's bytes
};

// A page reader over the column chunk's dictionary page (if any) and its data pages `first`
// to `last` only, so that the pages before `first` are not even parsed: their bytes are never
// read. `*values` gets the number of values (rows: the columns are flat) those pages hold.
// Null when the chunk's layout does not allow it (the caller then reads the whole chunk).
std::unique_ptr<parquet::PageReader> PagesFrom(const Group& group, int leaf, const parquet::OffsetIndex& offsets,
                                               size_t first, size_t last, int64_t* values) {
  if (group.source == nullptr) return nullptr;
  const auto& locations = offsets.page_locations();
  const std::unique_ptr<parquet::ColumnChunkMetaData> chunk =
      group.file->metadata()->RowGroup(group.ordinal)->ColumnChunk(leaf);
  if (chunk->crypto_metadata() != nullptr) return nullptr;  // encrypted: the whole chunk, as Parquet reads it
  const int64_t data_start = locations[first].offset;
  const int64_t data_end = locations[last].offset + locations[last].compressed_page_size;
  int64_t dictionary_start = locations[0].offset, dictionary_end = locations[0].offset;
  if (chunk->has_dictionary_page()) {
    dictionary_start = chunk->dictionary_page_offset();
    if (dictionary_start <= 0 || dictionary_start >= dictionary_end) return nullptr;
  } else if (chunk->data_page_offset() != locations[0].offset) {
    return nullptr;  // something between the chunk's start and its first data page
  }
  auto size = group.source->GetSize();
  if (!size.ok() || data_start < dictionary_end || data_end <= data_start || data_end > *size) return nullptr;
  auto buffer = arrow::AllocateResizableBuffer((dictionary_end - dictionary_start) + (data_end - data_start));
  if (!buffer.ok()) return nullptr;
  // Both ranges read straight into the one buffer (no copy of the pages' bytes).
  uint8_t* out = (*buffer)->mutable_data();
  const int64_t dictionary_size = dictionary_end - dictionary_start;
  auto dictionary = group.source->ReadAt(dictionary_start, dictionary_size, out);
  auto data = group.source->ReadAt(data_start, data_end - data_start, out + dictionary_size);
  if (!dictionary.ok() || !data.ok() || *dictionary != dictionary_size || *data != data_end - data_start) {
    return nullptr;
  }
  const int64_t end_row = last + 1 < locations.size() ? locations[last + 1].first_row_index : group.rows;
  *values = end_row - locations[first].first_row_index;
  auto stream = std::make_shared<arrow::io::BufferReader>(std::shared_ptr<arrow::Buffer>(std::move(*buffer)));
  return parquet::PageReader::Open(stream, *values, chunk->compression(), VerifyingReaderProperties(),
                                   *group.file->metadata()->schema()->Column(leaf));
}

// Reads a flat column's values at `runs` (rows of the row group), decoding only the pages that
// hold them: visit(row, value*) for every row of the runs in order, a null pointer for nulls.
template <typename DType, typename Visit>
arrow::Status ReadEveryRun(const Group& group, int leaf, const Runs& runs, SelectionCounters* counters,
                           Visit&& visit) {
  using T = typename DType::c_type;
  if (runs.empty()) return arrow::Status::OK();
  const parquet::ColumnDescriptor* descr = group.file->metadata()->schema()->Column(leaf);
  // The pages the runs touch, from the offset index; without one, every page is read.
  std::vector<std::pair<int64_t, int64_t>> spans;  // kept pages' rows, in order
  std::vector<bool> keep;
  std::shared_ptr<parquet::OffsetIndex> offsets = group.index ? group.index->GetOffsetIndex(leaf) : nullptr;
  if (CoversRows(offsets.get(), group.rows)) {
    const auto& locations = offsets->page_locations();
    size_t r = 0;
    for (size_t page = 0; page < locations.size(); ++page) {
      const int64_t first = locations[page].first_row_index;
      const int64_t end = page + 1 < locations.size() ? locations[page + 1].first_row_index : group.rows;
      while (r < runs.size() && runs[r].second <= first) ++r;
      const bool wanted = r < runs.size() && runs[r].first < end;
      keep.push_back(wanted);
      if (wanted) spans.emplace_back(first, end);
    }
  } else {
    spans.emplace_back(0, group.rows);
  }
  std::unique_ptr<parquet::PageReader> pages;
  size_t first_page = 0;
  if (!keep.empty()) {
    // From the first page wanted to the last: the pages before are never parsed.
    first_page = static_cast<size_t>(std::find(keep.begin(), keep.end(), true) - keep.begin());
    const size_t last_page = keep.size() - 1 - static_cast<size_t>(std::find(keep.rbegin(), keep.rend(), true) - keep.rbegin());
    int64_t values = 0;
    pages = PagesFrom(group, leaf, *offsets, first_page, last_page, &values);
    if (!pages) first_page = 0;
  }
  if (!pages) pages = group.file->RowGroup(group.ordinal)->GetColumnPageReader(leaf);
  if (!keep.empty()) {
    if (counters != nullptr) {
      const auto kept = static_cast<int64_t>(spans.size());
      counters->pages += kept;
      counters->pages_skipped += static_cast<int64_t>(keep.size()) - kept;
    }
    auto ordinal = std::make_shared<size_t>(first_page);
    pages->set_data_page_filter([ordinal, keep](const parquet::DataPageStats&) {
      const size_t page = (*ordinal)++;
      return page < keep.size() && !keep[page];
    });
  } else if (counters != nullptr) {
    counters->pages += 1;  // no offset index: the page count is unknown, counted as one
  }
  std::shared_ptr<parquet::ColumnReader> base = parquet::ColumnReader::Make(descr, std::move(pages));
  auto* reader = static_cast<parquet::TypedColumnReader<DType>*>(base.get());
  const int16_t max_def = descr->max_definition_level();

  constexpr int64_t kBatch = 4096;
  auto values = std::make_unique<T[]>(kBatch);  // not a vector: vector<bool> has no data()
  std::vector<int16_t> defs(max_def > 0 ? kBatch : 0);
  int64_t delivered = 0;  // levels the reader has given (or skipped) so far
  int64_t before = 0;     // levels of the kept spans before span s
  size_t s = 0;
  for (const auto& [first, end] : runs) {
    int64_t row = first;
    while (row < end) {
      while (s < spans.size() && spans[s].second <= row) {
        before += spans[s].second - spans[s].first;
        ++s;
      }
      if (s == spans.size() || spans[s].first > row) {
        return arrow::Status::IOError("a page index does not cover row ", row, " of column '",
                                      descr->name(), "'");
      }
      const int64_t piece_end = std::min(end, spans[s].second);
      const int64_t at = before + (row - spans[s].first);
      while (delivered < at) {
        const int64_t skipped = reader->Skip(at - delivered);
        if (skipped <= 0) return arrow::Status::IOError("column '", descr->name(), "' ends early");
        delivered += skipped;
      }
      while (row < piece_end) {
        int64_t values_read = 0;
        const int64_t levels = reader->ReadBatch(std::min(kBatch, piece_end - row),
                                                 max_def > 0 ? defs.data() : nullptr, nullptr,
                                                 values.get(), &values_read);
        if (levels <= 0) return arrow::Status::IOError("column '", descr->name(), "' ends early");
        int64_t v = 0;
        for (int64_t i = 0; i < levels; ++i) {
          if (max_def > 0 && defs[i] < max_def) {
            visit(row + i, static_cast<const T*>(nullptr));
          } else {
            visit(row + i, &values[v++]);
          }
        }
        row += levels;
        delivered += levels;
      }
    }
  }
  return arrow::Status::OK();
}

// ReadEveryRun, for runs with gaps between them (rows a value condition left out): a gap of a
// few rows is read through and its values dropped, as skipping it costs more than decoding it.
template <typename DType, typename Visit>
arrow::Status ReadRuns(const Group& group, int leaf, const Runs& runs, SelectionCounters* counters,
                       Visit&& visit) {
  constexpr int64_t kGap = 256;  // rows
  Runs cover;
  for (const auto& run : runs) {
    if (!cover.empty() && run.first - cover.back().second <= kGap) {
      cover.back().second = run.second;
    } else {
      cover.push_back(run);
    }
  }
  if (cover.size() == runs.size()) return ReadEveryRun<DType>(group, leaf, runs, counters, visit);
  size_t r = 0;
  return ReadEveryRun<DType>(group, leaf, cover, counters, [&](int64_t row, const auto* value) {
    while (runs[r].second <= row) ++r;  // the cover ends with the last run: r stays in range
    if (runs[r].first <= row) visit(row, value);
  });
}

// Keeps the rows of `runs` whose value of the condition's column it admits; `times`, when
// given, gets the kept rows' values (the time column's), in order.
arrow::Status FilterRuns(const Group& group, const Condition& cond, Runs* runs, std::vector<int64_t>* times,
                         SelectionCounters* counters) {
  Runs kept;
  auto keep = [&kept](int64_t row) {
    if (!kept.empty() && kept.back().second == row) {
      ++kept.back().second;
    } else {
      kept.emplace_back(row, row + 1);
    }
  };
  switch (cond.physical) {
    case parquet::Type::INT32:
      ARROW_RETURN_NOT_OK(ReadRuns<parquet::Int32Type>(group, cond.leaf, *runs, counters,
                                                       [&](int64_t row, const int32_t* v) {
                                                         if (v && cond.Admits(*v)) keep(row);
                                                       }));
      break;
    case parquet::Type::INT64:
      ARROW_RETURN_NOT_OK(ReadRuns<parquet::Int64Type>(group, cond.leaf, *runs, counters,
                                                       [&](int64_t row, const int64_t* v) {
                                                         if (v && cond.Admits(*v)) {
                                                           keep(row);
                                                           if (times) times->push_back(*v);
                                                         }
                                                       }));
      break;
    case parquet::Type::BYTE_ARRAY:
      ARROW_RETURN_NOT_OK(ReadRuns<parquet::ByteArrayType>(
          group, cond.leaf, *runs, counters, [&](int64_t row, const parquet::ByteArray* v) {
            if (v && cond.Admits(*v)) keep(row);
          }));
      break;
    default:
      return arrow::Status::NotImplemented("a filter on a column stored as ",
                                           parquet::TypeToString(cond.physical));
  }
  *runs = std::move(kept);
  return arrow::Status::OK();
}

// An output column: the Arrow builder of its storage type and how each physical value enters it.
class Output {
 public:
  static arrow::Result<Output> Make(const std::shared_ptr<arrow::Field>& field,
                                    const parquet::ColumnDescriptor& descr) {
    Output out;
    out.type_ = field->type();
    ARROW_RETURN_NOT_OK(arrow::MakeBuilder(arrow::default_memory_pool(), out.type_, &out.builder_));
    const arrow::Type::type id = out.type_->id();
    const parquet::Type::type physical = descr.physical_type();
    const auto& logical = descr.logical_type();
    bool fits = false;
    switch (id) {
      case arrow::Type::BOOL:
        fits = physical == parquet::Type::BOOLEAN;
        break;
      case arrow::Type::INT8:
      case arrow::Type::INT16:
      case arrow::Type::INT32:
      case arrow::Type::DATE32:
        fits = physical == parquet::Type::INT32;
        break;
      case arrow::Type::INT64:
        fits = physical == parquet::Type::INT64 && (!logical || logical->is_none() || logical->is_int());
        break;
      case arrow::Type::TIMESTAMP:
        fits = physical == parquet::Type::INT64 && logical && logical->is_timestamp() &&
               static_cast<const parquet::TimestampLogicalType&>(*logical).time_unit() ==
                   parquet::LogicalType::TimeUnit::MICROS &&
               static_cast<const arrow::TimestampType&>(*out.type_).unit() == arrow::TimeUnit::MICRO;
        break;
      case arrow::Type::FLOAT:
        fits = physical == parquet::Type::FLOAT;
        break;
      case arrow::Type::DOUBLE:
        fits = physical == parquet::Type::DOUBLE;
        break;
      case arrow::Type::STRING:
      case arrow::Type::BINARY:
      case arrow::Type::LARGE_STRING:
      case arrow::Type::LARGE_BINARY:
        fits = physical == parquet::Type::BYTE_ARRAY;
        break;
      default:
        break;
    }
    if (!fits) {
      return arrow::Status::NotImplemented("column '", field->name(), "' of type ", out.type_->ToString(),
                                           " stored as ", parquet::TypeToString(physical));
    }
    out.physical_ = physical;
    return out;
  }

  arrow::Status Read(const Group& group, int leaf, const Runs& runs, SelectionCounters* counters) {
    const parquet::ColumnDescriptor* descr = group.file->metadata()->schema()->Column(leaf);
    if (descr->physical_type() != physical_) {
      return arrow::Status::NotImplemented("files that store column '", descr->name(), "' differently");
    }
    switch (physical_) {
      case parquet::Type::BOOLEAN:
        return ReadRuns<parquet::BooleanType>(group, leaf, runs, counters, [&](int64_t, const bool* v) {
          status_ &= v ? static_cast<arrow::BooleanBuilder&>(*builder_).Append(*v) : builder_->AppendNull();
        });
      case parquet::Type::INT32:
        return ReadRuns<parquet::Int32Type>(group, leaf, runs, counters, [&](int64_t, const int32_t* v) {
          status_ &= v ? AppendInteger(*v) : builder_->AppendNull();
        });
      case parquet::Type::INT64:
        return ReadRuns<parquet::Int64Type>(group, leaf, runs, counters, [&](int64_t, const int64_t* v) {
          status_ &= v ? AppendInteger(*v) : builder_->AppendNull();
        });
      case parquet::Type::FLOAT:
        return ReadRuns<parquet::FloatType>(group, leaf, runs, counters, [&](int64_t, const float* v) {
          status_ &= v ? static_cast<arrow::FloatBuilder&>(*builder_).Append(*v) : builder_->AppendNull();
        });
      case parquet::Type::DOUBLE:
        return ReadRuns<parquet::DoubleType>(group, leaf, runs, counters, [&](int64_t, const double* v) {
          status_ &= v ? static_cast<arrow::DoubleBuilder&>(*builder_).Append(*v) : builder_->AppendNull();
        });
      case parquet::Type::BYTE_ARRAY:
        return ReadRuns<parquet::ByteArrayType>(
            group, leaf, runs, counters, [&](int64_t, const parquet::ByteArray* v) {
              status_ &= v ? AppendBytes(std::string_view(reinterpret_cast<const char*>(v->ptr), v->len))
                           : builder_->AppendNull();
            });
      default:
        return arrow::Status::NotImplemented("physical type ", parquet::TypeToString(physical_));
    }
  }

  arrow::Result<std::shared_ptr<arrow::Array>> Finish() {
    ARROW_RETURN_NOT_OK(status_);
    return builder_->Finish();
  }

 private:
  arrow::Status AppendInteger(int64_t v) {
    switch (type_->id()) {
      case arrow::Type::INT8:
        return static_cast<arrow::Int8Builder&>(*builder_).Append(static_cast<int8_t>(v));
      case arrow::Type::INT16:
        return static_cast<arrow::Int16Builder&>(*builder_).Append(static_cast<int16_t>(v));
      case arrow::Type::INT32:
        return static_cast<arrow::Int32Builder&>(*builder_).Append(static_cast<int32_t>(v));
      case arrow::Type::DATE32:
        return static_cast<arrow::Date32Builder&>(*builder_).Append(static_cast<int32_t>(v));
      case arrow::Type::INT64:
        return static_cast<arrow::Int64Builder&>(*builder_).Append(v);
      case arrow::Type::TIMESTAMP:
        return static_cast<arrow::TimestampBuilder&>(*builder_).Append(v);
      default:
        return arrow::Status::NotImplemented("integer into ", type_->ToString());
    }
  }

  arrow::Status AppendBytes(std::string_view v) {
    switch (type_->id()) {
      case arrow::Type::STRING:
        return static_cast<arrow::StringBuilder&>(*builder_).Append(v);
      case arrow::Type::BINARY:
        return static_cast<arrow::BinaryBuilder&>(*builder_).Append(v);
      case arrow::Type::LARGE_STRING:
        return static_cast<arrow::LargeStringBuilder&>(*builder_).Append(v);
      case arrow::Type::LARGE_BINARY:
        return static_cast<arrow::LargeBinaryBuilder&>(*builder_).Append(v);
      default:
        return arrow::Status::NotImplemented("bytes into ", type_->ToString());
    }
  }

  std::shared_ptr<arrow::DataType> type_;
  std::unique_ptr<arrow::ArrayBuilder> builder_;
  parquet::Type::type physical_ = parquet::Type::UNDEFINED;
  arrow::Status status_;
};

// The matching rows of one row group: positions in the row group and their times.
struct Matches {
  size_t file = 0;
  Group group;
  int64_t first_row = 0;  // the row group's first row in the file (deletion vectors, dedup rank)
  std::vector<int64_t> rows;
  std::vector<int64_t> times;
};

// A series-key column's condition: its value one of `values` (one for an equality).
arrow::Result<Condition> KeyCondition(const parquet::SchemaDescriptor& schema, const std::string& column,
                                      const std::vector<ScanKeyValue>& values) {
  Condition cond;
  cond.column = column;
  const parquet::ColumnDescriptor* descr = TopLevelLeaf(schema, column, &cond.leaf);
  if (descr == nullptr) return arrow::Status::NotImplemented("a file without column '", column, "'");
  if (values.empty()) return arrow::Status::Invalid("no value for column '", column, "'");
  cond.physical = descr->physical_type();
  const auto& logical = descr->logical_type();
  const bool signed_int = !logical || logical->is_none() ||
                          (logical->is_int() && static_cast<const parquet::IntLogicalType&>(*logical).is_signed());
  for (const ScanKeyValue& value : values) {
    if (const auto* text = std::get_if<std::string>(&value)) {
      if (cond.physical != parquet::Type::BYTE_ARRAY) {
        return arrow::Status::NotImplemented("a text value for column '", column, "'");
      }
      cond.texts.push_back(*text);
    } else {
      if ((cond.physical != parquet::Type::INT32 && cond.physical != parquet::Type::INT64) || !signed_int) {
        return arrow::Status::NotImplemented("an integer value for column '", column, "'");
      }
      cond.ints.push_back(std::get<int64_t>(value));
    }
  }
  std::sort(cond.texts.begin(), cond.texts.end());
  cond.texts.erase(std::unique(cond.texts.begin(), cond.texts.end()), cond.texts.end());
  std::sort(cond.ints.begin(), cond.ints.end());
  cond.ints.erase(std::unique(cond.ints.begin(), cond.ints.end()), cond.ints.end());
  if (!cond.ints.empty()) {
    cond.lo = cond.ints.front();
    cond.hi = cond.ints.back();
  }
  return cond;
}

// Builds the conditions of the filter (the plan's and the selection's key lists) for one file's
// schema; the time column's comes last.
arrow::Result<std::vector<Condition>> ConditionsFor(const ScanPlan& plan, const SelectionShape& shape,
                                                    const parquet::SchemaDescriptor& schema, int* time_leaf) {
  std::vector<Condition> out;
  for (const auto& [column, value] : plan.filter.key_equals) {
    ARROW_ASSIGN_OR_RAISE(Condition cond, KeyCondition(schema, column, {value}));
    out.push_back(std::move(cond));
  }
  for (const auto& [column, values] : shape.key_in) {
    ARROW_ASSIGN_OR_RAISE(Condition cond, KeyCondition(schema, column, values));
    out.push_back(std::move(cond));
  }
  Condition time;
  time.column = plan.contract.time_column;
  const parquet::ColumnDescriptor* descr = TopLevelLeaf(schema, time.column, &time.leaf);
  if (descr == nullptr) return arrow::Status::NotImplemented("a file without the time column");
  const auto& logical = descr->logical_type();
  if (descr->physical_type() != parquet::Type::INT64 || !logical || !logical->is_timestamp() ||
      static_cast<const parquet::TimestampLogicalType&>(*logical).time_unit() !=
          parquet::LogicalType::TimeUnit::MICROS) {
    return arrow::Status::NotImplemented("a time column not stored as microseconds");
  }
  time.physical = parquet::Type::INT64;
  if (plan.filter.min_time) time.lo = *plan.filter.min_time;
  if (plan.filter.max_time) time.hi = *plan.filter.max_time;
  *time_leaf = time.leaf;
  out.push_back(std::move(time));  // last: its values are kept for dedup
  return out;
}

// Among the matches of files marked dedup, keeps one row per time (the filter fixes the whole
// series key): the first by the files' (seq, order) and the row's position, all ascending under
// dedup "first" and all descending under "last".
void Deduplicate(const ScanPlan& plan, std::vector<Matches>* matches) {
  struct Candidate {
    int64_t time, seq, order, position;
    size_t match, index;
  };
  std::vector<Candidate> candidates;
  for (size_t m = 0; m < matches->size(); ++m) {
    const Matches& found = (*matches)[m];
    const ScanFile& file = plan.files[found.file];
    if (!file.dedup) continue;
    for (size_t i = 0; i < found.rows.size(); ++i) {
      candidates.push_back({found.times[i], file.seq, file.order, found.first_row + found.rows[i], m, i});
    }
  }
  if (candidates.empty()) return;
  const bool newest = plan.dedup_order.newest_first;
  std::sort(candidates.begin(), candidates.end(), [newest](const Candidate& a, const Candidate& b) {
    if (a.time != b.time) return a.time < b.time;
    auto rank = std::make_tuple(a.seq, a.order, a.position);
    auto other = std::make_tuple(b.seq, b.order, b.position);
    return newest ? rank > other : rank < other;
  });
  std::vector<std::vector<bool>> dropped(matches->size());
  for (size_t m = 0; m < matches->size(); ++m) dropped[m].assign((*matches)[m].rows.size(), false);
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (candidates[i].time == candidates[i - 1].time) dropped[candidates[i].match][candidates[i].index] = true;
  }
  for (size_t m = 0; m < matches->size(); ++m) {
    Matches& found = (*matches)[m];
    size_t out = 0;
    for (size_t i = 0; i < found.rows.size(); ++i) {
      if (dropped[m][i]) continue;
      found.rows[out] = found.rows[i];
      found.times[out] = found.times[i];
      ++out;
    }
    found.rows.resize(out);
    found.times.resize(out);
  }
}

// The rows of `arrays` at `order`, in that order.
arrow::Result<std::vector<std::shared_ptr<arrow::Array>>> Permute(const std::vector<std::shared_ptr<arrow::Array>>& arrays,
                                                                   const std::vector<int64_t>& order) {
  const auto indices = std::make_shared<arrow::Int64Array>(
      static_cast<int64_t>(order.size()),
      arrow::Buffer::Wrap(order.data(), static_cast<int64_t>(order.size())));
  std::vector<std::shared_ptr<arrow::Array>> out(arrays.size());
  auto take = [&](size_t c) -> arrow::Status {
    ARROW_ASSIGN_OR_RAISE(arrow::Datum taken, arrow::compute::Take(arrays[c], indices));
    out[c] = taken.make_array();
    return arrow::Status::OK();
  };
  if (static_cast<int64_t>(order.size()) >= kParallelRows && arrays.size() > 1) {
    ARROW_RETURN_NOT_OK(RunParallel(arrays.size(), CpuParallelism(), take));
  } else {
    for (size_t c = 0; c < arrays.size(); ++c) ARROW_RETURN_NOT_OK(take(c));
  }
  return out;
}

// How rows of equal time compare when `shape.then_by` names a column (a strict "a before b"), or
// null: by that column's values as DuckDB orders them (bytes for text; NULL last either way).
arrow::Result<std::function<bool(int64_t, int64_t)>> TieBreak(
    const SelectionShape& shape, const std::vector<std::shared_ptr<arrow::Field>>& fields,
    const std::vector<std::shared_ptr<arrow::Array>>& arrays) {
  if (!shape.then_by) return std::function<bool(int64_t, int64_t)>{};
  const auto& [column, descending] = *shape.then_by;
  std::shared_ptr<arrow::Array> values;
  for (size_t c = 0; c < fields.size(); ++c) {
    if (fields[c]->name() == column) values = arrays[c];
  }
  if (!values) return arrow::Status::Invalid("ordering by column '", column, "', which is not read");
  auto nulls_last = [values](int64_t a, int64_t b, int* c) {
    const bool an = values->IsNull(a), bn = values->IsNull(b);
    if (!an && !bn) return false;
    *c = an == bn ? 0 : (an ? 1 : -1);
    return true;
  };
  const bool desc = descending;
  switch (values->type_id()) {
    case arrow::Type::STRING:
    case arrow::Type::BINARY: {
      auto text = std::static_pointer_cast<arrow::BinaryArray>(values);
      return std::function<bool(int64_t, int64_t)>([text, nulls_last, desc](int64_t a, int64_t b) {
        int c = 0;
        if (nulls_last(a, b, &c)) return c < 0;
        const int order = text->GetView(a).compare(text->GetView(b));
        return desc ? order > 0 : order < 0;
      });
    }
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::INT64: {
      ARROW_ASSIGN_OR_RAISE(auto wide, arrow::compute::Cast(values, arrow::int64()));
      auto ints = std::static_pointer_cast<arrow::Int64Array>(wide.make_array());
      return std::function<bool(int64_t, int64_t)>([ints, nulls_last, desc](int64_t a, int64_t b) {
        int c = 0;
        if (nulls_last(a, b, &c)) return c < 0;
        return desc ? ints->Value(a) > ints->Value(b) : ints->Value(a) < ints->Value(b);
      });
    }
    default:
      return arrow::Status::NotImplemented("ordering by column '", column, "' of type ",
                                           values->type()->ToString());
  }
}

// Three-way comparison as DuckDB orders numbers: NaN above all, equal to itself.
template <typename T>
int Compare(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool an = std::isnan(a), bn = std::isnan(b);
    if (an || bn) return an == bn ? 0 : (an ? 1 : -1);
  }
  return a < b ? -1 : (a > b ? 1 : 0);
}

// A comparison's operator, resolved once.
enum class Op { kEq, kNe, kLt, kLe, kGt, kGe };

arrow::Result<Op> OpOf(const std::string& op) {
  if (op == "=") return Op::kEq;
  if (op == "<>") return Op::kNe;
  if (op == "<") return Op::kLt;
  if (op == "<=") return Op::kLe;
  if (op == ">") return Op::kGt;
  if (op == ">=") return Op::kGe;
  return arrow::Status::Invalid("unknown comparison '", op, "'");
}

bool Passes(int c, Op op) {
  switch (op) {
    case Op::kEq: return c == 0;
    case Op::kNe: return c != 0;
    case Op::kLt: return c < 0;
    case Op::kLe: return c <= 0;
    case Op::kGt: return c > 0;
    case Op::kGe: return c >= 0;
  }
  return false;
}

// Keeps the rows of `found` whose value of the condition's column passes it (NULL never does),
// reading that column's pages at those rows only.
arrow::Status FilterValues(const arrow::Schema& storage, const ValueCondition& cond, Matches* found,
                           SelectionCounters* counters) {
  const auto field = storage.GetFieldByName(cond.column);
  if (!field) return arrow::Status::KeyError("no column '", cond.column, "'");
  ARROW_ASSIGN_OR_RAISE(const Op op, OpOf(cond.op));
  const parquet::SchemaDescriptor& schema = *found->group.file->metadata()->schema();
  int leaf = -1;
  const parquet::ColumnDescriptor* descr = TopLevelLeaf(schema, cond.column, &leaf);
  if (descr == nullptr) return arrow::Status::NotImplemented("a file without column '", cond.column, "'");
  const arrow::Type::type id = field->type()->id();
  const parquet::Type::type physical = descr->physical_type();
  const auto& logical = descr->logical_type();
  const bool plain_int = !logical || logical->is_none() || logical->is_int();
  std::vector<bool> pass;
  pass.reserve(found->rows.size());
  const Runs runs = RunsOf(found->rows);
  if (id == arrow::Type::DOUBLE && physical == parquet::Type::DOUBLE && !cond.is_integer) {
    ARROW_RETURN_NOT_OK(ReadRuns<parquet::DoubleType>(found->group, leaf, runs, counters,
                                                      [&](int64_t, const double* v) {
                                                        pass.push_back(v && Passes(Compare(*v, cond.number), op));
                                                      }));
  } else if ((id == arrow::Type::INT8 || id == arrow::Type::INT16 || id == arrow::Type::INT32) &&
             physical == parquet::Type::INT32 && plain_int && cond.is_integer) {
    ARROW_RETURN_NOT_OK(ReadRuns<parquet::Int32Type>(
        found->group, leaf, runs, counters, [&](int64_t, const int32_t* v) {
          pass.push_back(v && Passes(Compare<int64_t>(*v, cond.integer), op));
        }));
  } else if (id == arrow::Type::INT64 && physical == parquet::Type::INT64 && plain_int && cond.is_integer) {
    ARROW_RETURN_NOT_OK(ReadRuns<parquet::Int64Type>(
        found->group, leaf, runs, counters, [&](int64_t, const int64_t* v) {
          pass.push_back(v && Passes(Compare<int64_t>(*v, cond.integer), op));
        }));
  } else {
    return arrow::Status::NotImplemented("a condition on column '", cond.column, "' of type ",
                                         field->type()->ToString());
  }
  if (pass.size() != found->rows.size()) {
    return arrow::Status::IOError("column '", cond.column, "' gave ", pass.size(), " values for ",
                                  found->rows.size(), " rows");
  }
  size_t out = 0;
  for (size_t i = 0; i < found->rows.size(); ++i) {
    if (!pass[i]) continue;
    found->rows[out] = found->rows[i];
    found->times[out] = found->times[i];
    ++out;
  }
  found->rows.resize(out);
  found->times.resize(out);
  return arrow::Status::OK();
}

arrow::Result<std::shared_ptr<arrow::Table>> ReadSelectionOrThrow(const ScanPlan& plan,
                                                                  const std::vector<std::string>& paths,
                                                                  const std::vector<std::string>& columns,
                                                                  const SelectionShape& shape,
                                                                  SelectionCounters* counters) {
  ARROW_RETURN_NOT_OK(CoreReadable(plan, columns));
  std::vector<std::shared_ptr<arrow::Field>> fields;
  for (const std::string& name : columns) {
    auto field = plan.storage->GetFieldByName(name);
    if (!field) return arrow::Status::KeyError("no column '", name, "'");
    fields.push_back(field);
  }
  std::vector<std::shared_ptr<arrow::io::RandomAccessFile>> inputs;
  std::vector<std::unique_ptr<parquet::ParquetFileReader>> files;
  std::vector<Matches> matches;
  for (size_t f = 0; f < plan.files.size(); ++f) {
    ARROW_ASSIGN_OR_RAISE(OpenDataFile opened, OpenPlanFile(plan, paths, f));
    std::shared_ptr<arrow::io::RandomAccessFile> input = std::move(opened.source);
    inputs.push_back(input);
    files.push_back(std::move(opened.reader));
    if (counters) ++counters->files;
    parquet::ParquetFileReader* file = files.back().get();
    const std::shared_ptr<parquet::FileMetaData> meta = file->metadata();
    int time_leaf = -1;
    ARROW_ASSIGN_OR_RAISE(std::vector<Condition> conditions, ConditionsFor(plan, shape, *meta->schema(), &time_leaf));
    std::shared_ptr<parquet::PageIndexReader> index = file->GetPageIndexReader();
    const std::vector<uint64_t>& deleted = plan.files[f].deleted_rows;
    int64_t group_first = 0;
    for (int g = 0; g < meta->num_row_groups(); ++g) {
      const std::unique_ptr<parquet::RowGroupMetaData> rg = meta->RowGroup(g);
      const int64_t rows = rg->num_rows();
      const int64_t first = group_first;
      group_first += rows;
      if (!plan.filter.min_time && !plan.filter.max_time) {
        // Without a time range a row of null time matches too (other engines may write one):
        // this reader keeps only rows with a time, so it answers only when none can be null.
        const auto stats = rg->ColumnChunk(time_leaf)->statistics();
        if (rows > 0 && (!stats || !stats->HasNullCount() || stats->null_count() != 0)) {
          return arrow::Status::NotImplemented("a time column that may hold nulls, and no time range");
        }
      }
      bool may = rows > 0;
      for (const Condition& cond : conditions) {
        may = may && ChunkMayMatch(*rg->ColumnChunk(cond.leaf), cond);
      }
      if (!may) continue;
      Group group{file, index ? index->RowGroup(g) : nullptr, g, rows, input.get()};
      Runs candidates{{0, rows}};
      for (const Condition& cond : conditions) {
        candidates = Intersect(candidates, PagesMayMatch(group.index.get(), cond, rows,
                                                         rg->ColumnChunk(cond.leaf)->is_stats_set()));
      }
      if (candidates.empty()) continue;
      if (counters) ++counters->row_groups;
      Matches found{f, group, first, {}, {}};
      for (const Condition& cond : conditions) {
        const bool is_time = cond.leaf == time_leaf && &cond == &conditions.back();
        ARROW_RETURN_NOT_OK(FilterRuns(group, cond, &candidates, is_time ? &found.times : nullptr, counters));
        if (candidates.empty()) break;
      }
      for (const auto& [a, b] : candidates) {
        for (int64_t row = a; row < b; ++row) found.rows.push_back(row);
      }
      if (!deleted.empty() && !found.rows.empty()) {
        size_t out = 0;
        for (size_t i = 0; i < found.rows.size(); ++i) {
          const auto position = static_cast<uint64_t>(first + found.rows[i]);
          if (std::binary_search(deleted.begin(), deleted.end(), position)) continue;
          found.rows[out] = found.rows[i];
          found.times[out] = found.times[i];
          ++out;
        }
        found.rows.resize(out);
        found.times.resize(out);
      }
      if (!found.rows.empty()) matches.push_back(std::move(found));
    }
  }
  Deduplicate(plan, &matches);
  // The value conditions hold or not for the rows that dedup kept (a duplicate it dropped never
  // answers for them), read only at those rows.
  if (!shape.where.empty()) {
    for (Matches& found : matches) {
      for (const ValueCondition& cond : shape.where) {
        if (found.rows.empty()) break;
        ARROW_RETURN_NOT_OK(FilterValues(*plan.storage, cond, &found, counters));
      }
    }
    std::erase_if(matches, [](const Matches& found) { return found.rows.empty(); });
  }

  // The columns, each read over every match. Many rows (a window of every series): the columns
  // are read on several threads (the page index of each row group read first, on this one).
  int64_t matched = 0;
  for (const Matches& found : matches) matched += static_cast<int64_t>(found.rows.size());
  const bool parallel = matched >= kParallelRows && fields.size() > 1 && CpuParallelism() > 1;
  if (parallel) {
    for (const Matches& found : matches) {
      if (!found.group.index) continue;
      for (int leaf = 0; leaf < found.group.file->metadata()->num_columns(); ++leaf) {
        (void)found.group.index->GetOffsetIndex(leaf);
      }
    }
  }
  std::vector<std::shared_ptr<arrow::Array>> arrays(fields.size());
  std::vector<SelectionCounters> read(fields.size());
  auto read_column = [&](size_t c) -> arrow::Status {
    if (fields[c]->name() == plan.contract.time_column && fields[c]->type()->id() == arrow::Type::TIMESTAMP &&
        static_cast<const arrow::TimestampType&>(*fields[c]->type()).unit() == arrow::TimeUnit::MICRO) {
      // The time column's values were read by the filter (checked as microseconds there).
      arrow::TimestampBuilder times(fields[c]->type(), arrow::default_memory_pool());
      ARROW_RETURN_NOT_OK(times.Reserve(matched));
      for (const Matches& found : matches) ARROW_RETURN_NOT_OK(times.AppendValues(found.times));
      ARROW_ASSIGN_OR_RAISE(arrays[c], times.Finish());
      return arrow::Status::OK();
    }
    std::optional<Output> output;
    for (const Matches& found : matches) {
      const parquet::SchemaDescriptor& schema = *found.group.file->metadata()->schema();
      int leaf = -1;
      const parquet::ColumnDescriptor* descr = TopLevelLeaf(schema, fields[c]->name(), &leaf);
      if (descr == nullptr) return arrow::Status::NotImplemented("a file without column '", fields[c]->name(), "'");
      if (!output) {
        ARROW_ASSIGN_OR_RAISE(auto made, Output::Make(fields[c], *descr));
        output.emplace(std::move(made));
      }
      ARROW_RETURN_NOT_OK(output->Read(found.group, leaf, RunsOf(found.rows), &read[c]));
    }
    if (!output) {
      ARROW_ASSIGN_OR_RAISE(arrays[c], arrow::MakeEmptyArray(fields[c]->type()));
    } else {
      ARROW_ASSIGN_OR_RAISE(arrays[c], output->Finish());
    }
    return arrow::Status::OK();
  };
  if (parallel) {
    ARROW_RETURN_NOT_OK(RunParallel(fields.size(), CpuParallelism(), read_column));
  } else {
    for (size_t c = 0; c < fields.size(); ++c) ARROW_RETURN_NOT_OK(read_column(c));
  }
  if (counters != nullptr) {
    for (const SelectionCounters& r : read) {
      counters->pages += r.pages;
      counters->pages_skipped += r.pages_skipped;
    }
  }
  std::vector<int64_t> times;
  times.reserve(static_cast<size_t>(matched));
  for (const Matches& found : matches) times.insert(times.end(), found.times.begin(), found.times.end());
  auto total = static_cast<int64_t>(times.size());
  const bool by_time = shape.order != SelectionShape::Order::kFile;
  if (by_time || (shape.limit && *shape.limit < total)) {
    std::vector<int64_t> order(times.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    if (by_time) {
      const bool descending = shape.order == SelectionShape::Order::kTimeDescending;
      // Rows of equal time: by the then_by column's values (NULL last), else in file order.
      ARROW_ASSIGN_OR_RAISE(auto tie, TieBreak(shape, fields, arrays));
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        if (times[a] != times[b]) return descending ? times[a] > times[b] : times[a] < times[b];
        return tie ? tie(a, b) : false;
      });
    }
    if (shape.limit && *shape.limit < total) order.resize(static_cast<size_t>(std::max<int64_t>(0, *shape.limit)));
    // Rows already in that order (one series read file after file) are only cut, not copied.
    bool identity = true;
    for (size_t i = 0; i < order.size() && identity; ++i) identity = order[i] == static_cast<int64_t>(i);
    if (identity) {
      for (auto& array : arrays) array = array->Slice(0, static_cast<int64_t>(order.size()));
    } else {
      ARROW_ASSIGN_OR_RAISE(arrays, Permute(arrays, order));
    }
    total = static_cast<int64_t>(order.size());
  }
  return arrow::Table::Make(arrow::schema(fields), arrays, total);
}

// Sum, count, min and max of one numeric column's non-null values, in row order: of all its rows,
// or of the rows listed in `subset`.
template <typename ArrowType>
arrow::Result<std::shared_ptr<arrow::Scalar>> Fold(const arrow::Array& values, const std::string& function,
                                                   const std::shared_ptr<arrow::DataType>& type,
                                                   const std::vector<int64_t>* subset) {
  using ArrayType = typename arrow::TypeTraits<ArrowType>::ArrayType;
  using T = typename ArrowType::c_type;
  const auto& array = static_cast<const ArrayType&>(values);
  constexpr bool kFloating = std::is_floating_point_v<T>;
  int64_t count = 0;
  double sum = 0;         // floats: in row order, as DuckDB adds them
  int64_t exact = 0;      // integers (up to 32 bits: no overflow below 2^31 rows)
  std::optional<T> low, high;
  bool nan = false;
  const int64_t n = subset ? static_cast<int64_t>(subset->size()) : array.length();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = subset ? (*subset)[k] : k;
    if (array.IsNull(i)) continue;
    const T v = array.Value(i);
    ++count;
    if constexpr (kFloating) {
      sum += static_cast<double>(v);
      if (std::isnan(v)) {
        nan = true;
        continue;
      }
    } else {
      exact += static_cast<int64_t>(v);
    }
    // Of equal values the last one read wins, as in DuckDB over Arrow (-0.0 against 0.0; SQL
    // leaves that pick open, and DuckDB's varies with how it reads).
    if (!low || v <= *low) low = v;
    if (!high || v >= *high) high = v;
  }
  if (function == "sum" || function == "avg") {
    if (count == 0) return arrow::MakeNullScalar(arrow::float64());
    const double total = kFloating ? sum : static_cast<double>(exact);
    return arrow::MakeScalar(function == "sum" ? total : total / static_cast<double>(count));
  }
  // min / max: NaN orders above every number (as in DuckDB).
  if (count == 0) return arrow::MakeNullScalar(type);
  std::optional<T> pick = function == "min" ? low : high;
  if constexpr (kFloating) {
    if (nan && (function == "max" || !pick)) pick = std::numeric_limits<T>::quiet_NaN();
  }
  return arrow::MakeScalar(type, *pick);
}

// One aggregate over `values` (null for count(*)), of all `rows` rows or of those in `subset`.
arrow::Result<std::shared_ptr<arrow::Scalar>> AggregateValues(const std::shared_ptr<arrow::Array>& values,
                                                              const SelectionAggregate& agg,
                                                              const std::vector<int64_t>* subset, int64_t rows) {
  if (agg.function == "count" && agg.column.empty()) return arrow::MakeScalar(rows);
  if (!values) return arrow::Status::KeyError("no column '", agg.column, "' in the selection");
  if (agg.function == "count") {
    if (!subset) return arrow::MakeScalar(values->length() - values->null_count());
    int64_t valid = 0;
    for (const int64_t i : *subset) valid += values->IsValid(i) ? 1 : 0;
    return arrow::MakeScalar(valid);
  }
  const auto& type = values->type();
  const arrow::Type::type id = type->id();
  const bool sums = agg.function == "sum" || agg.function == "avg";
  const bool ends = agg.function == "min" || agg.function == "max";
  if (sums && (id == arrow::Type::DOUBLE || (agg.function == "avg" && id == arrow::Type::FLOAT))) {
    return id == arrow::Type::DOUBLE ? Fold<arrow::DoubleType>(*values, agg.function, type, subset)
                                     : Fold<arrow::FloatType>(*values, agg.function, type, subset);
  }
  if (agg.function == "avg" || ends) {
    switch (id) {
      case arrow::Type::INT8:
        return Fold<arrow::Int8Type>(*values, agg.function, type, subset);
      case arrow::Type::INT16:
        return Fold<arrow::Int16Type>(*values, agg.function, type, subset);
      case arrow::Type::INT32:
        return Fold<arrow::Int32Type>(*values, agg.function, type, subset);
      default:
        break;
    }
  }
  if (ends) {
    switch (id) {
      case arrow::Type::INT64:
        return Fold<arrow::Int64Type>(*values, agg.function, type, subset);
      case arrow::Type::FLOAT:
        return Fold<arrow::FloatType>(*values, agg.function, type, subset);
      case arrow::Type::DOUBLE:
        return Fold<arrow::DoubleType>(*values, agg.function, type, subset);
      case arrow::Type::DATE32:
        return Fold<arrow::Date32Type>(*values, agg.function, type, subset);
      case arrow::Type::TIMESTAMP:
        return Fold<arrow::TimestampType>(*values, agg.function, type, subset);
      default:
        break;
    }
  }
  return arrow::Status::NotImplemented(agg.function, " of ", type->ToString());
}

// The concatenated values of the aggregate's column (null for count(*)).
arrow::Result<std::shared_ptr<arrow::Array>> ValuesOf(const arrow::Table& rows, const SelectionAggregate& agg) {
  if (agg.function == "count" && agg.column.empty()) return nullptr;
  auto column = rows.GetColumnByName(agg.column);
  if (!column) return arrow::Status::KeyError("no column '", agg.column, "' in the selection");
  return arrow::Concatenate(column->chunks());
}

arrow::Result<std::shared_ptr<arrow::Scalar>> AggregateOne(const arrow::Table& rows, const SelectionAggregate& agg) {
  ARROW_ASSIGN_OR_RAISE(auto values, ValuesOf(rows, agg));
  return AggregateValues(values, agg, nullptr, rows.num_rows());
}

}  // namespace

namespace {

// floor((t - origin) / width) * width + origin, without overflow for any time and width.
int64_t BucketOf(int64_t t, int64_t width, int64_t origin) {
  const __int128 offset = static_cast<__int128>(t) - origin;
  __int128 q = offset / width;
  if (offset % width != 0 && offset < 0) --q;
  return static_cast<int64_t>(q * width + origin);
}

// One row per time bucket that holds rows, in bucket order (descending if asked), cut to
// `limit`: the bucket (the time column's type) and each aggregate over the bucket's rows, which
// are folded in the order `rows` holds them.
arrow::Result<std::shared_ptr<arrow::Table>> AggregateByBucket(const arrow::Table& rows,
                                                               const std::vector<SelectionAggregate>& aggregates,
                                                               const SelectionAggregate& bucket, bool descending,
                                                               std::optional<int64_t> limit) {
  if (bucket.width <= 0) return arrow::Status::Invalid("a time bucket of width ", bucket.width);
  auto column = rows.GetColumnByName(bucket.column);
  if (!column || column->type()->id() != arrow::Type::TIMESTAMP) {
    return arrow::Status::NotImplemented("time buckets of a column that is not a timestamp");
  }
  ARROW_ASSIGN_OR_RAISE(auto times, arrow::Concatenate(column->chunks()));
  const auto& time_array = static_cast<const arrow::TimestampArray&>(*times);
  std::map<int64_t, std::vector<int64_t>> groups;  // bucket -> rows, in row order
  for (int64_t i = 0; i < time_array.length(); ++i) {
    if (time_array.IsNull(i)) return arrow::Status::NotImplemented("time buckets of null times");
    if (time_array.Value(i) <= -(int64_t{1} << 62) || time_array.Value(i) >= (int64_t{1} << 62)) {
      // DuckDB reads the ends of the int64 range as -infinity and infinity (a NULL bucket).
      return arrow::Status::NotImplemented("a time more than 2^62 microseconds from 1970");
    }
    groups[BucketOf(time_array.Value(i), bucket.width, bucket.origin)].push_back(i);
  }
  std::vector<const std::pair<const int64_t, std::vector<int64_t>>*> order;
  for (const auto& group : groups) order.push_back(&group);
  if (descending) std::reverse(order.begin(), order.end());
  if (limit && *limit < static_cast<int64_t>(order.size())) order.resize(static_cast<size_t>(std::max<int64_t>(0, *limit)));

  std::vector<std::shared_ptr<arrow::Field>> fields;
  std::vector<std::shared_ptr<arrow::Array>> arrays;
  for (const SelectionAggregate& agg : aggregates) {
    if (agg.function == "time_bucket") {
      arrow::TimestampBuilder starts(column->type(), arrow::default_memory_pool());
      for (const auto* group : order) ARROW_RETURN_NOT_OK(starts.Append(group->first));
      ARROW_ASSIGN_OR_RAISE(auto array, starts.Finish());
      fields.push_back(arrow::field(agg.name, column->type()));
      arrays.push_back(std::move(array));
      continue;
    }
    std::shared_ptr<arrow::DataType> type;
    std::unique_ptr<arrow::ArrayBuilder> builder;
    ARROW_ASSIGN_OR_RAISE(auto values, ValuesOf(rows, agg));
    for (const auto* group : order) {
      ARROW_ASSIGN_OR_RAISE(auto scalar, AggregateValues(values, agg, &group->second,
                                                         static_cast<int64_t>(group->second.size())));
      if (!builder) {
        type = scalar->type;
        ARROW_RETURN_NOT_OK(arrow::MakeBuilder(arrow::default_memory_pool(), type, &builder));
      }
      ARROW_RETURN_NOT_OK(builder->AppendScalar(*scalar));
    }
    if (!builder) {
      // No bucket: the aggregate's type from an empty fold.
      ARROW_ASSIGN_OR_RAISE(auto scalar, AggregateOne(*rows.Slice(0, 0), agg));
      type = scalar->type;
      ARROW_RETURN_NOT_OK(arrow::MakeBuilder(arrow::default_memory_pool(), type, &builder));
    }
    ARROW_ASSIGN_OR_RAISE(auto array, builder->Finish());
    fields.push_back(arrow::field(agg.name, type));
    arrays.push_back(std::move(array));
  }
  return arrow::Table::Make(arrow::schema(fields), arrays, static_cast<int64_t>(order.size()));
}

}  // namespace

arrow::Result<std::shared_ptr<arrow::Table>> AggregateSelection(const arrow::Table& rows,
                                                                const std::vector<SelectionAggregate>& aggregates,
                                                                bool descending, std::optional<int64_t> limit) {
  for (const SelectionAggregate& agg : aggregates) {
    if (agg.function == "time_bucket") return AggregateByBucket(rows, aggregates, agg, descending, limit);
  }
  std::vector<std::shared_ptr<arrow::Field>> fields;
  std::vector<std::shared_ptr<arrow::Array>> arrays;
  for (const SelectionAggregate& agg : aggregates) {
    ARROW_ASSIGN_OR_RAISE(auto scalar, AggregateOne(rows, agg));
    ARROW_ASSIGN_OR_RAISE(auto array, arrow::MakeArrayFromScalar(*scalar, 1));
    fields.push_back(arrow::field(agg.name, scalar->type));
    arrays.push_back(std::move(array));
  }
  return arrow::Table::Make(arrow::schema(fields), arrays, 1);
}

arrow::Result<std::shared_ptr<arrow::Table>> ReadSelection(const ScanPlan& plan,
                                                           const std::vector<std::string>& paths,
                                                           const std::vector<std::string>& columns,
                                                           const SelectionShape& shape,
                                                           SelectionCounters* counters) {
  if (!paths.empty() && paths.size() != plan.files.size()) {
    return arrow::Status::Invalid("ReadSelection: ", paths.size(), " paths for ", plan.files.size(), " files");
  }
  try {
    return ReadSelectionOrThrow(plan, paths, columns, shape, counters);
  } catch (const parquet::ParquetException& e) {
    return arrow::Status::IOError("cannot read a data file of the selection: ", e.what());
  }
}

}  // namespace timelake
