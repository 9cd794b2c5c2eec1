#include "timelake/scan/bucket_scan.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include <arrow/array/builder_binary.h>
#include <arrow/array/builder_primitive.h>
#include <arrow/builder.h>
#include <arrow/io/interfaces.h>
#include <parquet/column_reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/page_index.h>
#include <parquet/schema.h>
#include <parquet/statistics.h>

#include "timelake/scan/data_files.h"

namespace timelake {
namespace {

constexpr int64_t kBatch = 8192;             // rows decoded at a time, per column
// Groups one worker may hold: beyond, the query engine answers (it can spill to disk; this scan
// keeps its groups in memory).
constexpr size_t kMaxGroups = size_t{1} << 21;
// Times this far from 1970 (146,000 years) are bucketed by the query engine: it reads the ends of
// the int64 range as infinities.
constexpr int64_t kFarTime = int64_t{1} << 62;

enum class Kind { kCountRows, kCount, kSum, kAvg, kMin, kMax };

// The running state of one aggregate in one bucket.
struct Acc {
  int64_t count = 0;  // values seen (NaN included; nulls not)
  double sum = 0;     // floating-point values, in the order folded
  __int128 exact = 0;  // integer values
  int64_t ilow = 0, ihigh = 0;  // integers, dates and times
  double dlow = 0, dhigh = 0;   // floats and doubles other than NaN
  bool ends = false;            // ilow/ihigh or dlow/dhigh hold a value
  bool nan = false;

  void Merge(const Acc& o, bool floating) {
    count += o.count;
    sum += o.sum;
    exact += o.exact;
    nan = nan || o.nan;
    if (!o.ends) return;
    if (!ends) {
      ilow = o.ilow, ihigh = o.ihigh, dlow = o.dlow, dhigh = o.dhigh, ends = true;
    } else if (floating) {
      if (o.dlow <= dlow) dlow = o.dlow;
      if (o.dhigh >= dhigh) dhigh = o.dhigh;
    } else {
      ilow = std::min(ilow, o.ilow);
      ihigh = std::max(ihigh, o.ihigh);
    }
  }
};

// One aggregate of the statement, resolved against the table's declared columns.
struct Fold {
  Kind kind = Kind::kCountRows;
  int input = -1;  // index into Inputs, -1 for count(*) and the bucket
  std::shared_ptr<arrow::DataType> type;  // the result's
};

// A column the scan decodes: its name, declared type and the physical type files must have.
struct Input {
  std::string name;
  std::shared_ptr<arrow::DataType> type;
  parquet::Type::type physical = parquet::Type::UNDEFINED;
  bool floating = false;
};

// A group's key value: of the grouped column (kNone without one; kNull for its null values).
struct KeyValue {
  enum Kind : int { kNone = 0, kValue = 1, kNull = 2 } kind = kNone;
  int64_t integer = 0;
  std::string text;

  bool operator<(const KeyValue& o) const {  // values (integers, then bytes) before NULL
    return std::tie(kind, integer, text) < std::tie(o.kind, o.integer, o.text);
  }
};

// What one worker folded: the buckets and keys met, numbered as met, and a slot per group (a
// bucket and a key) with its row count and its aggregates' states (`stride` of them per slot).
class Groups {
 public:
  Groups(size_t stride, bool text_keys) : stride_(stride), text_keys_(text_keys) {}

  int32_t Bucket(int64_t start) {
    auto [it, added] = bucket_index_.emplace(start, static_cast<int32_t>(bucket_starts_.size()));
    if (added) bucket_starts_.push_back(start);
    return it->second;
  }
  int32_t Text(std::string_view text) {
    auto it = text_index_.find(std::string(text));
    if (it != text_index_.end()) return it->second;
    return Add(text_index_, std::string(text), KeyValue{KeyValue::kValue, 0, std::string(text)});
  }
  int32_t Integer(int64_t value) {
    auto it = integer_index_.find(value);
    if (it != integer_index_.end()) return it->second;
    return Add(integer_index_, value, KeyValue{KeyValue::kValue, value, {}});
  }
  int32_t Null() {
    if (null_key_ < 0) {
      null_key_ = static_cast<int32_t>(keys_.size());
      keys_.push_back({KeyValue::kNull, 0, {}});
    }
    return null_key_;
  }
  int32_t None() {
    if (none_key_ < 0) {
      none_key_ = static_cast<int32_t>(keys_.size());
      keys_.push_back({});
    }
    return none_key_;
  }
  int32_t Key(const KeyValue& value) {
    switch (value.kind) {
      case KeyValue::kNone:
        return None();
      case KeyValue::kNull:
        return Null();
      default:
        return text_keys_ ? Text(value.text) : Integer(value.integer);
    }
  }

  // The slot of (bucket number, key number), made on first use.
  int32_t Slot(int32_t bucket, int32_t key) {
    const uint64_t id = (static_cast<uint64_t>(static_cast<uint32_t>(bucket)) << 32) | static_cast<uint32_t>(key);
    auto [it, added] = slot_index_.emplace(id, static_cast<int32_t>(slots_.size()));
    if (added) {
      slots_.emplace_back(bucket, key);
      accs_.resize(slots_.size() * stride_);
      rows_.push_back(0);
    }
    return it->second;
  }

  size_t size() const { return slots_.size(); }
  int64_t bucket_start(size_t slot) const { return bucket_starts_[static_cast<size_t>(slots_[slot].first)]; }
  const KeyValue& key(size_t slot) const { return keys_[static_cast<size_t>(slots_[slot].second)]; }
  int32_t key_number(size_t slot) const { return slots_[slot].second; }
  const std::vector<KeyValue>& keys() const { return keys_; }
  int64_t& rows(size_t slot) { return rows_[slot]; }
  int64_t rows(size_t slot) const { return rows_[slot]; }
  std::vector<int64_t>& all_rows() { return rows_; }
  std::vector<Acc>& accs() { return accs_; }
  const Acc* accs(size_t slot) const { return accs_.data() + slot * stride_; }

 private:
  template <typename Map, typename K>
  int32_t Add(Map& index, K key, KeyValue value) {
    const auto number = static_cast<int32_t>(keys_.size());
    index.emplace(std::move(key), number);
    keys_.push_back(std::move(value));
    return number;
  }

  size_t stride_;
  bool text_keys_;
  std::unordered_map<int64_t, int32_t> bucket_index_;
  std::vector<int64_t> bucket_starts_;
  std::unordered_map<std::string, int32_t> text_index_;
  std::unordered_map<int64_t, int32_t> integer_index_;
  int32_t null_key_ = -1, none_key_ = -1;
  std::vector<KeyValue> keys_;
  std::unordered_map<uint64_t, int32_t> slot_index_;
  std::vector<std::pair<int32_t, int32_t>> slots_;  // slot -> (bucket number, key number)
  std::vector<Acc> accs_;
  std::vector<int64_t> rows_;
};

// Do the `n` bytes at `a` equal those at `b`? (Keys of a table are short and mostly differ at
// their end: the last 8 bytes first.)
inline bool SameBytes(const uint8_t* a, const char* b, size_t n) {
  if (n >= 8) {
    uint64_t x, y;
    std::memcpy(&x, a + n - 8, 8);
    std::memcpy(&y, b + n - 8, 8);
    if (x != y) return false;
    if (n <= 16) {
      std::memcpy(&x, a, 8);
      std::memcpy(&y, b, 8);
      return x == y;
    }
    return std::memcmp(a, b, n - 8) == 0;
  }
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != static_cast<uint8_t>(b[i])) return false;
  }
  return true;
}

// The grouped key column (a series-key column of text or integers), if any.
struct KeyColumn {
  std::string name;
  std::shared_ptr<arrow::DataType> type;
  parquet::Type::type physical = parquet::Type::UNDEFINED;  // BYTE_ARRAY, INT32 or INT64
};

// floor((t - origin) / width) * width + origin, without overflow for any time and width.
int64_t BucketOf(int64_t t, int64_t width, int64_t origin) {
  const __int128 offset = static_cast<__int128>(t) - origin;
  __int128 q = offset / width;
  if (offset % width != 0 && offset < 0) --q;
  return static_cast<int64_t>(q * width + origin);
}

// Does the file store the column as the declared type reads it (the selection reader's rule)?
bool StoredAs(const parquet::ColumnDescriptor& descr, const arrow::DataType& type) {
  const parquet::Type::type physical = descr.physical_type();
  const auto& logical = descr.logical_type();
  switch (type.id()) {
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::DATE32:
      return physical == parquet::Type::INT32;
    case arrow::Type::INT64:
      return physical == parquet::Type::INT64 && (!logical || logical->is_none() || logical->is_int());
    case arrow::Type::TIMESTAMP:
      return physical == parquet::Type::INT64 && logical && logical->is_timestamp() &&
             static_cast<const parquet::TimestampLogicalType&>(*logical).time_unit() ==
                 parquet::LogicalType::TimeUnit::MICROS &&
             static_cast<const arrow::TimestampType&>(type).unit() == arrow::TimeUnit::MICRO;
    case arrow::Type::FLOAT:
      return physical == parquet::Type::FLOAT;
    case arrow::Type::DOUBLE:
      return physical == parquet::Type::DOUBLE;
    case arrow::Type::BOOL:
      return physical == parquet::Type::BOOLEAN;
    case arrow::Type::STRING:
    case arrow::Type::BINARY:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::LARGE_BINARY:
      return physical == parquet::Type::BYTE_ARRAY;
    default:
      return false;
  }
}

parquet::Type::type PhysicalOf(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::DATE32:
      return parquet::Type::INT32;
    case arrow::Type::INT64:
    case arrow::Type::TIMESTAMP:
      return parquet::Type::INT64;
    case arrow::Type::FLOAT:
      return parquet::Type::FLOAT;
    case arrow::Type::DOUBLE:
      return parquet::Type::DOUBLE;
    case arrow::Type::BOOL:
      return parquet::Type::BOOLEAN;
    case arrow::Type::STRING:
    case arrow::Type::BINARY:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::LARGE_BINARY:
      return parquet::Type::BYTE_ARRAY;
    default:
      return parquet::Type::UNDEFINED;
  }
}

// Reads exactly `n` levels (rows: the columns are flat): `defs` (null when the column is
// required) and the non-null values, packed.
template <typename DType>
arrow::Status ReadExactly(parquet::TypedColumnReader<DType>* reader, int64_t n, int16_t* defs,
                          typename DType::c_type* values, int64_t* values_read, const std::string& name) {
  int64_t levels = 0;
  *values_read = 0;
  while (levels < n) {
    int64_t got_values = 0;
    const int64_t got = reader->ReadBatch(n - levels, defs != nullptr ? defs + levels : nullptr, nullptr,
                                          values + *values_read, &got_values);
    if (got <= 0) return arrow::Status::IOError("column '", name, "' ends early");
    levels += got;
    *values_read += got_values;
  }
  return arrow::Status::OK();
}

// A run of consecutive rows of one batch in the same bucket (slot).
struct Run {
  int32_t slot;
  int32_t begin, end;
};

// Folds the rows of `runs` into the local buckets for one aggregate of kind K. `values` are at
// their rows' positions; `defs` (null for a required column) says which rows hold one.
template <Kind K, typename T>
void FoldRuns(const std::vector<Run>& runs, const T* values, const int16_t* defs, int16_t max_def, Acc* base,
              size_t stride) {
  constexpr bool kFloating = std::is_floating_point_v<T>;
  for (const Run& run : runs) {
    Acc& acc = base[static_cast<size_t>(run.slot) * stride];
    if constexpr (K == Kind::kCount) {
      if (defs == nullptr) {
        acc.count += run.end - run.begin;
      } else {
        for (int32_t i = run.begin; i < run.end; ++i) acc.count += defs[i] == max_def ? 1 : 0;
      }
    } else if constexpr (K == Kind::kSum) {
      if (defs == nullptr) {
        // Four partial sums: independent additions (the order of a sum is open in SQL).
        if constexpr (kFloating) {
          double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
          int32_t i = run.begin;
          for (; i + 4 <= run.end; i += 4) {
            s0 += static_cast<double>(values[i]);
            s1 += static_cast<double>(values[i + 1]);
            s2 += static_cast<double>(values[i + 2]);
            s3 += static_cast<double>(values[i + 3]);
          }
          for (; i < run.end; ++i) s0 += static_cast<double>(values[i]);
          acc.sum += (s0 + s1) + (s2 + s3);
        } else {
          int64_t total = 0;  // a batch of 32-bit values cannot overflow it
          for (int32_t i = run.begin; i < run.end; ++i) total += static_cast<int64_t>(values[i]);
          acc.exact += total;
        }
        acc.count += run.end - run.begin;
      } else {
        double sum = 0;
        int64_t total = 0, count = 0;
        for (int32_t i = run.begin; i < run.end; ++i) {
          if (defs[i] != max_def) continue;
          ++count;
          if constexpr (kFloating) {
            sum += static_cast<double>(values[i]);
          } else {
            total += static_cast<int64_t>(values[i]);
          }
        }
        acc.sum += sum;
        acc.exact += total;
        acc.count += count;
      }
    } else {
      // min / max, in locals (the bucket's state is written once per run): NaN counted apart, the
      // comparisons without branches; of equal values the last one wins (-0.0 against 0.0), as
      // in the selection reader.
      int64_t count = 0, real = 0;
      bool nan = false;
      if constexpr (kFloating) {
        double low = std::numeric_limits<double>::infinity(), high = -low;
        for (int32_t i = run.begin; i < run.end; ++i) {
          if (defs != nullptr && defs[i] != max_def) continue;
          const auto d = static_cast<double>(values[i]);
          const bool is_nan = std::isnan(d);
          ++count;
          real += is_nan ? 0 : 1;
          nan = nan || is_nan;
          if constexpr (K == Kind::kMin) {
            low = d <= low ? d : low;
          } else {
            high = d >= high ? d : high;
          }
        }
        if (real > 0) {
          if (!acc.ends) {
            acc.dlow = low, acc.dhigh = high;
            acc.ends = true;
          } else if constexpr (K == Kind::kMin) {
            acc.dlow = low <= acc.dlow ? low : acc.dlow;
          } else {
            acc.dhigh = high >= acc.dhigh ? high : acc.dhigh;
          }
        }
      } else {
        int64_t low = std::numeric_limits<int64_t>::max(), high = std::numeric_limits<int64_t>::min();
        for (int32_t i = run.begin; i < run.end; ++i) {
          if (defs != nullptr && defs[i] != max_def) continue;
          const auto x = static_cast<int64_t>(values[i]);
          ++count;
          low = std::min(low, x);
          high = std::max(high, x);
        }
        if (count > 0) {
          if (!acc.ends) {
            acc.ilow = low, acc.ihigh = high;
            acc.ends = true;
          } else {
            acc.ilow = std::min(acc.ilow, low);
            acc.ihigh = std::max(acc.ihigh, high);
          }
        }
      }
      acc.count += count;
      acc.nan = acc.nan || nan;
    }
  }
}

// Folds one decoded batch of input column `input` into every aggregate of it: `values` packed
// as read (`count` of them), spread here to their rows' positions.
template <typename T>
void FoldBatch(const std::vector<Fold>& folds, int input, const std::vector<Run>& runs, int64_t n,
               const int16_t* defs, int16_t max_def, T* values, int64_t count, std::vector<Acc>* local,
               size_t stride) {
  if (defs != nullptr && count < n) {
    for (int64_t i = n - 1, v = count - 1; i >= 0 && v < i; --i) {
      if (defs[i] == max_def) values[i] = values[v--];
    }
  }
  for (size_t k = 0; k < folds.size(); ++k) {
    if (folds[k].input != input) continue;
    Acc* base = local->data() + k;
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      switch (folds[k].kind) {
        case Kind::kSum:
        case Kind::kAvg:
          FoldRuns<Kind::kSum>(runs, values, defs, max_def, base, stride);
          continue;
        case Kind::kMin:
          FoldRuns<Kind::kMin>(runs, values, defs, max_def, base, stride);
          continue;
        case Kind::kMax:
          FoldRuns<Kind::kMax>(runs, values, defs, max_def, base, stride);
          continue;
        default:
          break;
      }
    }
    FoldRuns<Kind::kCount>(runs, values, defs, max_def, base, stride);
  }
}

// Rows of a row group as sorted, disjoint [first, end) spans.
using Spans = std::vector<std::pair<int64_t, int64_t>>;

// The row spans of a column chunk's pages from its offset index; empty unless the index is a
// well-formed cover of the row group's rows (the first page at row 0, each after the one before).
Spans PageSpans(const parquet::OffsetIndex* offsets, int64_t rows) {
  if (offsets == nullptr) return {};
  const auto& locations = offsets->page_locations();
  if (locations.empty() || locations.front().first_row_index != 0) return {};
  Spans spans;
  for (size_t page = 0; page < locations.size(); ++page) {
    const int64_t first = locations[page].first_row_index;
    const int64_t end = page + 1 < locations.size() ? locations[page + 1].first_row_index : rows;
    if (first >= end || end > rows) return {};
    spans.emplace_back(first, end);
  }
  return spans;
}

// The rows of the row group whose time pages may hold a time in [lo, hi] (from the time
// column's page index: each page's min and max, and its null pages); every row when the index
// does not say.
Spans TimeCandidates(parquet::RowGroupPageIndexReader* index, int time_leaf, int64_t rows, int64_t lo, int64_t hi) {
  const Spans all{{0, rows}};
  if (index == nullptr) return all;
  const std::shared_ptr<parquet::ColumnIndex> column_index = index->GetColumnIndex(time_leaf);
  const std::shared_ptr<parquet::OffsetIndex> offset_index = index->GetOffsetIndex(time_leaf);
  const Spans pages = PageSpans(offset_index.get(), rows);
  if (!column_index || pages.empty()) return all;
  const auto& times = static_cast<const parquet::Int64ColumnIndex&>(*column_index);
  const std::vector<bool>& null_pages = times.null_pages();
  if (null_pages.size() != pages.size() || times.min_values().size() != pages.size() ||
      times.max_values().size() != pages.size()) {
    return all;
  }
  Spans out;
  for (size_t page = 0; page < pages.size(); ++page) {
    if (null_pages[page] || times.max_values()[page] < lo || times.min_values()[page] > hi) continue;
    if (!out.empty() && out.back().second == pages[page].first) {
      out.back().second = pages[page].second;
    } else {
      out.push_back(pages[page]);
    }
  }
  return out;
}

// A column chunk read over the pages that hold `wanted` rows only (the others are skipped
// undecompressed, by the offset index); reads start at SeekTo(row) for a wanted row.
class PagedColumn {
 public:
  PagedColumn(parquet::RowGroupReader& group, int leaf, parquet::RowGroupPageIndexReader* index, const Spans& wanted,
              int64_t rows)
      : descr_(group.metadata()->schema()->Column(leaf)) {
    const bool every_row = wanted.size() == 1 && wanted[0].first == 0 && wanted[0].second == rows;
    const std::shared_ptr<parquet::OffsetIndex> offsets =
        every_row || index == nullptr ? nullptr : index->GetOffsetIndex(leaf);
    const Spans pages = PageSpans(offsets.get(), rows);
    if (every_row || pages.empty()) {
      reader_ = group.Column(leaf);
      kept_ = {{0, rows}};
      return;
    }
    std::vector<bool> keep;
    size_t w = 0;
    for (const auto& [first, end] : pages) {
      while (w < wanted.size() && wanted[w].second <= first) ++w;
      const bool wanted_page = w < wanted.size() && wanted[w].first < end;
      keep.push_back(wanted_page);
      if (wanted_page) kept_.emplace_back(first, end);
      pages_skipped_ += wanted_page ? 0 : 1;
    }
    std::unique_ptr<parquet::PageReader> page_reader = group.GetColumnPageReader(leaf);
    auto ordinal = std::make_shared<size_t>(0);
    page_reader->set_data_page_filter([ordinal, keep = std::move(keep)](const parquet::DataPageStats&) {
      const size_t page = (*ordinal)++;
      return page < keep.size() && !keep[page];
    });
    reader_ = parquet::ColumnReader::Make(descr_, std::move(page_reader));
  }

  parquet::ColumnReader* get() const { return reader_.get(); }
  int64_t pages_skipped() const { return pages_skipped_; }

  // Positions the reader at `row` (at or after the rows read so far, inside a kept page).
  arrow::Status SeekTo(int64_t row) {
    int64_t target = 0;
    bool found = false;
    for (const auto& [first, end] : kept_) {
      if (row < end) {
        if (row < first) break;
        target += row - first;
        found = true;
        break;
      }
      target += end - first;
    }
    if (!found || target < delivered_) {
      return arrow::Status::IOError("a page index does not cover row ", row, " of column '", descr_->name(), "'");
    }
    while (delivered_ < target) {
      const int64_t skipped = Skip(target - delivered_);
      if (skipped <= 0) return arrow::Status::IOError("column '", descr_->name(), "' ends early");
      delivered_ += skipped;
    }
    return arrow::Status::OK();
  }
  // Notes that `n` rows were read after a SeekTo.
  void Read(int64_t n) { delivered_ += n; }

 private:
  int64_t Skip(int64_t n) {
    switch (descr_->physical_type()) {
      case parquet::Type::BOOLEAN:
        return static_cast<parquet::BoolReader*>(reader_.get())->Skip(n);
      case parquet::Type::INT32:
        return static_cast<parquet::Int32Reader*>(reader_.get())->Skip(n);
      case parquet::Type::INT64:
        return static_cast<parquet::Int64Reader*>(reader_.get())->Skip(n);
      case parquet::Type::FLOAT:
        return static_cast<parquet::FloatReader*>(reader_.get())->Skip(n);
      case parquet::Type::DOUBLE:
        return static_cast<parquet::DoubleReader*>(reader_.get())->Skip(n);
      case parquet::Type::BYTE_ARRAY:
        return static_cast<parquet::ByteArrayReader*>(reader_.get())->Skip(n);
      default:
        return 0;
    }
  }

  const parquet::ColumnDescriptor* descr_;
  std::shared_ptr<parquet::ColumnReader> reader_;
  Spans kept_;             // the rows of the kept pages, in order
  int64_t delivered_ = 0;  // rows of the kept pages read or skipped so far
  int64_t pages_skipped_ = 0;
};

class Scan {
 public:
  Scan(const ScanPlan& plan, const std::vector<std::string>& paths, std::vector<Fold> folds,
       std::vector<Input> inputs, std::optional<KeyColumn> key, std::string time_column, int64_t width,
       int64_t origin, const std::atomic<bool>* cancel)
      : plan_(plan), paths_(paths), folds_(std::move(folds)), inputs_(std::move(inputs)), key_(std::move(key)),
        time_column_(std::move(time_column)), width_(width), origin_(origin), cancel_(cancel),
        lo_(plan.filter.min_time.value_or(std::numeric_limits<int64_t>::min())),
        hi_(plan.filter.max_time.value_or(std::numeric_limits<int64_t>::max())) {}

  // Folds plan file `f` into `out`.
  // One open data file and where its columns are.
  struct File {
    OpenDataFile data;
    int time_leaf = -1;
    int key_leaf = -1;
    std::vector<int> leaves;
    std::vector<int16_t> max_defs;
    const std::vector<uint64_t>* deleted = nullptr;
    std::shared_ptr<parquet::PageIndexReader> page_index;  // null without a time range
    std::mutex page_index_mutex;                          // its row groups are read one at a time
  };
  // A row group to fold: its file, ordinal, rows and first row in the file.
  struct Item {
    File* file;
    int group;
    int64_t rows, first;
  };

  // Opens plan file `f` and lists its row groups that may hold rows in the time range.
  arrow::Result<std::unique_ptr<File>> Open(size_t f, std::vector<Item>* items, SelectionCounters* counters) {
    auto file = std::make_unique<File>();
    ARROW_ASSIGN_OR_RAISE(file->data, OpenPlanFile(plan_, paths_, f, /*verify=*/false));
    ++counters->files;
    const std::shared_ptr<parquet::FileMetaData> meta = file->data.reader->metadata();
    const parquet::SchemaDescriptor& schema = *meta->schema();
    const parquet::ColumnDescriptor* time_descr = TopLevelLeaf(schema, time_column_, &file->time_leaf);
    if (time_descr == nullptr || !StoredAs(*time_descr, arrow::TimestampType(arrow::TimeUnit::MICRO))) {
      return arrow::Status::NotImplemented("a time column not stored as microseconds");
    }
    file->leaves.assign(inputs_.size(), -1);
    file->max_defs.assign(inputs_.size(), 0);
    for (size_t c = 0; c < inputs_.size(); ++c) {
      const parquet::ColumnDescriptor* descr = TopLevelLeaf(schema, inputs_[c].name, &file->leaves[c]);
      if (descr == nullptr) return arrow::Status::NotImplemented("a file without column '", inputs_[c].name, "'");
      if (!StoredAs(*descr, *inputs_[c].type)) {
        return arrow::Status::NotImplemented("column '", inputs_[c].name, "' stored as ",
                                             parquet::TypeToString(descr->physical_type()));
      }
      file->max_defs[c] = descr->max_definition_level();
    }
    if (key_) {
      const parquet::ColumnDescriptor* descr = TopLevelLeaf(schema, key_->name, &file->key_leaf);
      if (descr == nullptr || !StoredAs(*descr, *key_->type)) {
        return arrow::Status::NotImplemented("key column '", key_->name, "' stored differently");
      }
    }
    file->deleted = &plan_.files[f].deleted_rows;
    const bool ranged = plan_.filter.min_time || plan_.filter.max_time;
    // With a time range, pages outside it are skipped (files are sorted by series, then time).
    if (ranged) file->page_index = file->data.reader->GetPageIndexReader();
    int64_t group_first = 0;
    for (int g = 0; g < meta->num_row_groups(); ++g) {
      const std::unique_ptr<parquet::RowGroupMetaData> rg = meta->RowGroup(g);
      const int64_t rows = rg->num_rows();
      const int64_t first = group_first;
      group_first += rows;
      if (rows == 0) continue;
      const std::unique_ptr<parquet::ColumnChunkMetaData> chunk = rg->ColumnChunk(file->time_leaf);
      const std::shared_ptr<parquet::Statistics> stats = chunk->is_stats_set() ? chunk->statistics() : nullptr;
      const bool no_nulls = time_descr->max_definition_level() == 0 ||
                            (stats && stats->HasNullCount() && stats->null_count() == 0);
      if (!ranged && !no_nulls) {
        // Rows of null time form a bucket of their own (NULL) in SQL: left to the query engine.
        return arrow::Status::NotImplemented("a time column that may hold nulls, and no time range");
      }
      if (stats && stats->HasMinMax()) {
        const auto& times = static_cast<const parquet::Int64Statistics&>(*stats);
        if (std::max(times.min(), lo_) > std::min(times.max(), hi_)) continue;  // no time in the range
      } else if (stats && stats->HasNullCount() && stats->null_count() == rows) {
        continue;  // every time null: none in any range
      }
      items->push_back({file.get(), g, rows, first});
    }
    return file;
  }

  // Folds one row group into `out`.
  arrow::Status FoldGroup(const Item& item, Groups* out, SelectionCounters* counters) {
    ++counters->row_groups;
    File& f = *item.file;
    std::shared_ptr<parquet::RowGroupPageIndexReader> index;
    if (f.page_index) {
      std::lock_guard<std::mutex> lock(f.page_index_mutex);
      index = f.page_index->RowGroup(item.group);
    }
    return Group(*f.data.reader, item.group, item.rows, item.first, f.time_leaf, f.key_leaf, f.leaves, f.max_defs,
                 *f.deleted, lo_, hi_, index.get(), out, counters);
  }

 private:
  arrow::Status Group(parquet::ParquetFileReader& reader, int g, int64_t rows, int64_t first, int time_leaf,
                      int key_leaf, const std::vector<int>& leaves, const std::vector<int16_t>& max_defs,
                      const std::vector<uint64_t>& deleted, int64_t lo, int64_t hi,
                      parquet::RowGroupPageIndexReader* index, Groups* out, SelectionCounters* counters) {
    const bool bucketed = width_ > 0;
    const size_t stride = folds_.size();
    const int32_t no_key = key_ ? -1 : out->None();
    if (!bucketed) out->Bucket(0);

    // The rows to read: those of the time column's pages that may hold a time in the range
    // (every row without a page index), and of every other column the pages holding them.
    const Spans wanted = TimeCandidates(index, time_leaf, rows, lo, hi);
    if (wanted.empty()) return arrow::Status::OK();
    std::shared_ptr<parquet::RowGroupReader> group = reader.RowGroup(g);
    PagedColumn time_column(*group, time_leaf, index, wanted, rows);
    auto* time_reader = static_cast<parquet::Int64Reader*>(time_column.get());
    const int16_t time_max_def = reader.metadata()->schema()->Column(time_leaf)->max_definition_level();
    std::vector<std::unique_ptr<PagedColumn>> columns;
    for (const int leaf : leaves) {
      columns.push_back(leaf == time_leaf ? nullptr : std::make_unique<PagedColumn>(*group, leaf, index, wanted, rows));
    }
    std::unique_ptr<PagedColumn> key_column =
        key_ ? std::make_unique<PagedColumn>(*group, key_leaf, index, wanted, rows) : nullptr;
    counters->pages_skipped += time_column.pages_skipped() + (key_column ? key_column->pages_skipped() : 0);
    for (const auto& column : columns) counters->pages_skipped += column ? column->pages_skipped() : 0;
    parquet::ColumnReader* key_base = key_column ? key_column->get() : nullptr;
    const int16_t key_max_def = key_ ? reader.metadata()->schema()->Column(key_leaf)->max_definition_level() : 0;
    std::vector<int16_t> key_defs(kBatch);
    std::vector<parquet::ByteArray> key_texts(key_ && key_->physical == parquet::Type::BYTE_ARRAY ? kBatch : 0);
    std::vector<int32_t> key_ints(key_ && key_->physical == parquet::Type::INT32 ? kBatch : 0);
    std::vector<int64_t> key_longs(key_ && key_->physical == parquet::Type::INT64 ? kBatch : 0);
    std::vector<int32_t> key_of(kBatch, no_key);  // each row's key number
    // The key of the row before (text keys: a copy, the values' bytes live only as long as their page).
    bool have_key = false;
    std::string last_text;
    int64_t last_integer = 0;
    int32_t last_key = 0;
    // The group of the row before.
    int32_t last_group_bucket = -1, last_group_key = -1, last_slot = -1;
    std::vector<int64_t> time_values(kBatch);
    std::vector<int16_t> time_defs(kBatch);
    std::vector<int16_t> defs(kBatch);
    std::vector<int32_t> slot(kBatch);
    std::vector<Run> runs;
    std::vector<double> doubles(kBatch);
    std::vector<float> floats(kBatch);
    std::vector<int64_t> longs(kBatch);
    std::vector<int32_t> ints(kBatch);
    auto bools = std::make_unique<bool[]>(kBatch);
    std::vector<parquet::ByteArray> bytes(kBatch);
    auto deleted_at = deleted.begin();
    // The bucket of the row before: [bucket_lo, bucket_hi) is bucket number bucket_number.
    int64_t bucket_lo = 1, bucket_hi = 0;
    int32_t bucket_number = 0;

    for (const auto& [span_first, span_end] : wanted) {
      for (int64_t done = span_first; done < span_end; done += kBatch) {
        if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) {
          return arrow::Status::Cancelled("the scan was interrupted");
        }
        const int64_t n = std::min(kBatch, span_end - done);
        ARROW_RETURN_NOT_OK(time_column.SeekTo(done));
        time_column.Read(n);
        if (key_column) {
          ARROW_RETURN_NOT_OK(key_column->SeekTo(done));
          key_column->Read(n);
        }
        for (auto& column : columns) {
          if (column) {
            ARROW_RETURN_NOT_OK(column->SeekTo(done));
            column->Read(n);
          }
        }
        int64_t read = 0;
        ARROW_RETURN_NOT_OK(ReadExactly(time_reader, n, time_max_def > 0 ? time_defs.data() : nullptr,
                                        time_values.data(), &read, time_column_));
        const int64_t times_read = read;
        if (key_) {
          // Each row's key number: the key of the row before again, mostly (rows come in runs of a series).
          int16_t* kd = key_max_def > 0 ? key_defs.data() : nullptr;
          int64_t k = 0;
          if (key_->physical == parquet::Type::BYTE_ARRAY) {
            // Batch by batch of the reader: a value's bytes live in its page (or the dictionary),
            // which the next batch may replace.
            auto* texts = static_cast<parquet::ByteArrayReader*>(key_base);
            for (int64_t levels = 0; levels < n;) {
              int64_t got_values = 0;
              const int64_t got = texts->ReadBatch(n - levels, kd != nullptr ? kd + levels : nullptr, nullptr,
                                                   key_texts.data(), &got_values);
              if (got <= 0) return arrow::Status::IOError("column '", key_->name, "' ends early");
              int64_t kv = 0;  // this batch's values, packed
              const uint8_t* same_ptr = nullptr;  // bytes of this batch known to be the last key's
              for (int64_t i = levels; i < levels + got; ++i) {
                if (kd != nullptr && kd[i] < key_max_def) {
                  key_of[i] = out->Null();
                  continue;
                }
                const parquet::ByteArray& value = key_texts[kv++];
                if (!(have_key && value.len == last_text.size() &&
                      (value.ptr == same_ptr || SameBytes(value.ptr, last_text.data(), value.len)))) {
                  last_key = out->Text(std::string_view(reinterpret_cast<const char*>(value.ptr), value.len));
                  last_text.assign(reinterpret_cast<const char*>(value.ptr), value.len);
                  have_key = true;
                }
                same_ptr = value.ptr;  // dictionary pages: equal keys share their bytes
                key_of[i] = last_key;
              }
              levels += got;
            }
          } else {
            const bool wide = key_->physical == parquet::Type::INT64;
            if (wide) {
              ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::Int64Reader*>(key_base), n, kd,
                                              key_longs.data(), &read, key_->name));
            } else {
              ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::Int32Reader*>(key_base), n, kd,
                                              key_ints.data(), &read, key_->name));
            }
            for (int64_t i = 0; i < n; ++i) {
              if (kd != nullptr && kd[i] < key_max_def) {
                key_of[i] = out->Null();
                continue;
              }
              const int64_t value = wide ? key_longs[k++] : key_ints[k++];
              if (!(have_key && value == last_integer)) {
                last_key = out->Integer(value);
                last_integer = value;
                have_key = true;
              }
              key_of[i] = last_key;
            }
          }
        }
        int64_t v = 0;
        for (int64_t i = 0; i < n; ++i) {
          if (time_max_def > 0 && time_defs[i] < time_max_def) {
            slot[i] = -1;  // a null time: in no range
            continue;
          }
          const int64_t t = time_values[v++];
          if (t < lo || t > hi) {
            slot[i] = -1;
            continue;
          }
          if (bucketed && !(t >= bucket_lo && t < bucket_hi)) {
            if (t <= -kFarTime || t >= kFarTime) {
              // DuckDB reads the ends of the range as -infinity and infinity (a NULL bucket).
              return arrow::Status::NotImplemented("a time more than 2^62 microseconds from 1970");
            }
            const int64_t start = BucketOf(t, width_, origin_);
            bucket_number = out->Bucket(start);
            bucket_lo = start;
            bucket_hi = static_cast<int64_t>(std::min<__int128>(static_cast<__int128>(start) + width_,
                                                                std::numeric_limits<int64_t>::max()));
          }
          const int32_t key = key_of[i];
          if (bucket_number != last_group_bucket || key != last_group_key) {
            last_slot = out->Slot(bucket_number, key);
            last_group_bucket = bucket_number;
            last_group_key = key;
          }
          slot[i] = last_slot;
        }
        // Rows deletion vectors delete are in no bucket.
        const auto end_position = static_cast<uint64_t>(first + done + n);
        deleted_at = std::lower_bound(deleted_at, deleted.end(), static_cast<uint64_t>(first + done));
        while (deleted_at != deleted.end() && *deleted_at < end_position) {
          slot[static_cast<size_t>(*deleted_at - static_cast<uint64_t>(first + done))] = -1;
          ++deleted_at;
        }
        if (out->size() > kMaxGroups) {
          return arrow::Status::NotImplemented("more than ", kMaxGroups, " groups");
        }
        runs.clear();
        for (int64_t i = 0; i < n;) {
          int64_t j = i + 1;
          while (j < n && slot[j] == slot[i]) ++j;
          if (slot[i] >= 0) {
            runs.push_back({slot[i], static_cast<int32_t>(i), static_cast<int32_t>(j)});
            out->rows(static_cast<size_t>(slot[i])) += j - i;
          }
          i = j;
        }
        for (size_t c = 0; c < inputs_.size(); ++c) {
          const int16_t max_def = max_defs[c];
          int16_t* d = max_def > 0 ? defs.data() : nullptr;
          const std::string& name = inputs_[c].name;
          const int input = static_cast<int>(c);
          if (leaves[c] == time_leaf) {
            // min/max/count of the time column: its values are decoded already.
            std::copy(time_values.begin(), time_values.begin() + times_read, longs.begin());
            if (d != nullptr) std::copy(time_defs.begin(), time_defs.begin() + n, defs.begin());
            FoldBatch(folds_, input, runs, n, d, max_def, longs.data(), times_read, &out->accs(), stride);
            continue;
          }
          switch (inputs_[c].physical) {
            case parquet::Type::DOUBLE:
              ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::DoubleReader*>(columns[c]->get()), n, d,
                                              doubles.data(), &read, name));
              FoldBatch(folds_, input, runs, n, d, max_def, doubles.data(), read, &out->accs(), stride);
              break;
            case parquet::Type::FLOAT:
              ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::FloatReader*>(columns[c]->get()), n, d,
                                              floats.data(), &read, name));
              FoldBatch(folds_, input, runs, n, d, max_def, floats.data(), read, &out->accs(), stride);
              break;
            case parquet::Type::INT64:
              ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::Int64Reader*>(columns[c]->get()), n, d,
                                              longs.data(), &read, name));
              FoldBatch(folds_, input, runs, n, d, max_def, longs.data(), read, &out->accs(), stride);
              break;
            case parquet::Type::INT32:
              ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::Int32Reader*>(columns[c]->get()), n, d,
                                              ints.data(), &read, name));
              FoldBatch(folds_, input, runs, n, d, max_def, ints.data(), read, &out->accs(), stride);
              break;
            case parquet::Type::BOOLEAN:
              ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::BoolReader*>(columns[c]->get()), n, d, bools.get(),
                                              &read, name));
              FoldBatch(folds_, input, runs, n, d, max_def, bools.get(), read, &out->accs(), stride);
              break;
            case parquet::Type::BYTE_ARRAY:
              ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::ByteArrayReader*>(columns[c]->get()), n, d,
                                              bytes.data(), &read, name));
              FoldBatch(folds_, input, runs, n, d, max_def, bytes.data(), read, &out->accs(), stride);
              break;
            default:
              return arrow::Status::NotImplemented("column '", name, "' of physical type ",
                                                   parquet::TypeToString(inputs_[c].physical));
          }
        }
      }
    }
    return arrow::Status::OK();
  }

  const ScanPlan& plan_;
  const std::vector<std::string>& paths_;
  const std::vector<Fold> folds_;
  const std::vector<Input> inputs_;
  const std::optional<KeyColumn> key_;
  const std::string time_column_;
  const int64_t width_;
  const int64_t origin_;
  const std::atomic<bool>* cancel_;
  const int64_t lo_, hi_;  // the time range, inclusive
};

// Appends the final value of one aggregate.
arrow::Status AppendResult(arrow::ArrayBuilder* builder, const Fold& fold, const Input* input, int64_t rows,
                           const Acc& acc) {
  switch (fold.kind) {
    case Kind::kCountRows:
      return static_cast<arrow::Int64Builder*>(builder)->Append(rows);
    case Kind::kCount:
      return static_cast<arrow::Int64Builder*>(builder)->Append(acc.count);
    case Kind::kSum:
    case Kind::kAvg: {
      if (acc.count == 0) return builder->AppendNull();
      const double total = input->floating ? acc.sum : static_cast<double>(acc.exact);
      return static_cast<arrow::DoubleBuilder*>(builder)->Append(
          fold.kind == Kind::kSum ? total : total / static_cast<double>(acc.count));
    }
    case Kind::kMin:
    case Kind::kMax:
      break;
  }
  if (acc.count == 0) return builder->AppendNull();
  const bool max = fold.kind == Kind::kMax;
  switch (fold.type->id()) {
    case arrow::Type::DOUBLE:
    case arrow::Type::FLOAT: {
      // NaN orders above every number (as in DuckDB).
      double pick = max ? acc.dhigh : acc.dlow;
      if (acc.nan && (max || !acc.ends)) pick = std::numeric_limits<double>::quiet_NaN();
      if (fold.type->id() == arrow::Type::FLOAT) {
        return static_cast<arrow::FloatBuilder*>(builder)->Append(static_cast<float>(pick));
      }
      return static_cast<arrow::DoubleBuilder*>(builder)->Append(pick);
    }
    case arrow::Type::INT8:
      return static_cast<arrow::Int8Builder*>(builder)->Append(static_cast<int8_t>(max ? acc.ihigh : acc.ilow));
    case arrow::Type::INT16:
      return static_cast<arrow::Int16Builder*>(builder)->Append(static_cast<int16_t>(max ? acc.ihigh : acc.ilow));
    case arrow::Type::INT32:
      return static_cast<arrow::Int32Builder*>(builder)->Append(static_cast<int32_t>(max ? acc.ihigh : acc.ilow));
    case arrow::Type::DATE32:
      return static_cast<arrow::Date32Builder*>(builder)->Append(static_cast<int32_t>(max ? acc.ihigh : acc.ilow));
    case arrow::Type::INT64:
      return static_cast<arrow::Int64Builder*>(builder)->Append(max ? acc.ihigh : acc.ilow);
    case arrow::Type::TIMESTAMP:
      return static_cast<arrow::TimestampBuilder*>(builder)->Append(max ? acc.ihigh : acc.ilow);
    default:
      return arrow::Status::NotImplemented(fold.type->ToString());
  }
}

// Appends a group's key value (NULL for the group of null keys).
arrow::Status AppendKey(arrow::ArrayBuilder* builder, const arrow::DataType& type, const KeyValue& id) {
  if (id.kind != KeyValue::kValue) return builder->AppendNull();
  switch (type.id()) {
    case arrow::Type::STRING:
      return static_cast<arrow::StringBuilder*>(builder)->Append(id.text);
    case arrow::Type::BINARY:
      return static_cast<arrow::BinaryBuilder*>(builder)->Append(id.text);
    case arrow::Type::INT8:
      return static_cast<arrow::Int8Builder*>(builder)->Append(static_cast<int8_t>(id.integer));
    case arrow::Type::INT16:
      return static_cast<arrow::Int16Builder*>(builder)->Append(static_cast<int16_t>(id.integer));
    case arrow::Type::INT32:
      return static_cast<arrow::Int32Builder*>(builder)->Append(static_cast<int32_t>(id.integer));
    case arrow::Type::INT64:
      return static_cast<arrow::Int64Builder*>(builder)->Append(id.integer);
    default:
      return arrow::Status::NotImplemented("a key of type ", type.ToString());
  }
}

// The folds and the columns they read, checked against what the scan computes exactly.
arrow::Status Resolve(const ScanPlan& plan, const std::vector<SelectionAggregate>& aggregates, std::vector<Fold>* folds,
                      std::vector<Input>* inputs, const SelectionAggregate** bucket, const SelectionAggregate** grouped,
                      std::optional<KeyColumn>* key) {
  for (const SelectionAggregate& agg : aggregates) {
    Fold fold;
    if (agg.function == "group") {
      if (*grouped != nullptr) return arrow::Status::NotImplemented("two grouped columns");
      const std::shared_ptr<arrow::Field> field = plan.storage->GetFieldByName(agg.column);
      if (!field) return arrow::Status::KeyError("no column '", agg.column, "'");
      const arrow::Type::type id = field->type()->id();
      if (id != arrow::Type::STRING && id != arrow::Type::BINARY && id != arrow::Type::INT8 &&
          id != arrow::Type::INT16 && id != arrow::Type::INT32 && id != arrow::Type::INT64) {
        return arrow::Status::NotImplemented("grouping by a column of type ", field->type()->ToString());
      }
      *grouped = &agg;
      *key = KeyColumn{agg.column, field->type(), PhysicalOf(*field->type())};
      fold.type = field->type();
      folds->push_back(fold);  // a placeholder: its column is the group's key
      continue;
    }
    if (agg.function == "time_bucket") {
      if (*bucket != nullptr) return arrow::Status::NotImplemented("two time buckets");
      if (agg.width <= 0) return arrow::Status::Invalid("a time bucket of width ", agg.width);
      if (agg.column != plan.contract.time_column) {
        return arrow::Status::NotImplemented("time buckets of a column other than the time column");
      }
      *bucket = &agg;
      folds->push_back(fold);  // a placeholder: its column is the bucket
      continue;
    }
    if (agg.function == "count" && agg.column.empty()) {
      fold.kind = Kind::kCountRows;
      fold.type = arrow::int64();
      folds->push_back(fold);
      continue;
    }
    const std::shared_ptr<arrow::Field> field = plan.storage->GetFieldByName(agg.column);
    if (!field) return arrow::Status::KeyError("no column '", agg.column, "'");
    const arrow::Type::type id = field->type()->id();
    const bool floating = id == arrow::Type::DOUBLE || id == arrow::Type::FLOAT;
    const bool small_int = id == arrow::Type::INT8 || id == arrow::Type::INT16 || id == arrow::Type::INT32;
    if (agg.function == "count") {
      fold.kind = Kind::kCount;
      fold.type = arrow::int64();
    } else if (agg.function == "sum" && id == arrow::Type::DOUBLE) {
      fold.kind = Kind::kSum;
      fold.type = arrow::float64();
    } else if (agg.function == "avg" && (floating || small_int)) {
      fold.kind = Kind::kAvg;
      fold.type = arrow::float64();
    } else if ((agg.function == "min" || agg.function == "max") &&
               (floating || small_int || id == arrow::Type::INT64 || id == arrow::Type::DATE32 ||
                id == arrow::Type::TIMESTAMP)) {
      fold.kind = agg.function == "min" ? Kind::kMin : Kind::kMax;
      fold.type = field->type();
    } else {
      return arrow::Status::NotImplemented(agg.function, " of ", field->type()->ToString());
    }
    const parquet::Type::type physical = PhysicalOf(*field->type());
    if (physical == parquet::Type::UNDEFINED) {
      return arrow::Status::NotImplemented(agg.function, " of ", field->type()->ToString());
    }
    auto found = std::find_if(inputs->begin(), inputs->end(), [&](const Input& in) { return in.name == agg.column; });
    if (found == inputs->end()) {
      inputs->push_back({agg.column, field->type(), physical, floating});
      found = inputs->end() - 1;
    }
    fold.input = static_cast<int>(found - inputs->begin());
    folds->push_back(fold);
  }
  return arrow::Status::OK();
}

arrow::Result<std::shared_ptr<arrow::Table>> ScanAggregatesOrThrow(
    const ScanPlan& plan, const std::vector<std::string>& paths, const std::vector<SelectionAggregate>& aggregates,
    bool descending, std::optional<int64_t> limit, SelectionCounters* counters, const std::atomic<bool>* cancel,
    const std::vector<ScanOrder>& sort) {
  if (!plan.filter.key_equals.empty()) return arrow::Status::NotImplemented("a series-key condition");
  std::vector<Fold> folds;
  std::vector<Input> inputs;
  const SelectionAggregate* bucket = nullptr;
  const SelectionAggregate* grouped = nullptr;
  std::optional<KeyColumn> key;
  ARROW_RETURN_NOT_OK(Resolve(plan, aggregates, &folds, &inputs, &bucket, &grouped, &key));
  std::vector<std::string> columns{plan.contract.time_column};
  for (const Input& in : inputs) columns.push_back(in.name);
  if (key) columns.push_back(key->name);
  for (const ScanOrder& o : sort) {
    if (o.column >= aggregates.size() || (&aggregates[o.column] != bucket && &aggregates[o.column] != grouped)) {
      return arrow::Status::NotImplemented("ordering by a column that is not grouped");
    }
  }
  ARROW_RETURN_NOT_OK(CoreReadable(plan, columns));
  const std::shared_ptr<arrow::Field> time_field = plan.storage->GetFieldByName(plan.contract.time_column);
  if (!time_field || time_field->type()->id() != arrow::Type::TIMESTAMP ||
      static_cast<const arrow::TimestampType&>(*time_field->type()).unit() != arrow::TimeUnit::MICRO) {
    return arrow::Status::NotImplemented("a time column that is not a timestamp in microseconds");
  }

  Scan scan(plan, paths, folds, inputs, key, plan.contract.time_column, bucket ? bucket->width : 0,
            bucket ? bucket->origin : 0, cancel);
  // Files are opened a window at a time (their footers mostly cached; a window bounds the open
  // files and maps), and the window's row groups spread over the cores, each worker folding into
  // groups of its own.
  constexpr size_t kWindow = 64;
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const bool text_keys = key && key->physical == parquet::Type::BYTE_ARRAY;
  std::vector<Groups> partials(cores, Groups(folds.size(), text_keys));
  std::vector<SelectionCounters> counted(cores);
  std::vector<arrow::Status> statuses(cores);
  SelectionCounters opened;
  size_t workers = 1;
  for (size_t from = 0; from < plan.files.size() && std::all_of(statuses.begin(), statuses.end(),
                                                                  [](const arrow::Status& st) { return st.ok(); });
       from += kWindow) {
    std::vector<std::unique_ptr<Scan::File>> files;
    std::vector<Scan::Item> items;
    for (size_t f = from; f < std::min(plan.files.size(), from + kWindow); ++f) {
      ARROW_ASSIGN_OR_RAISE(auto file, scan.Open(f, &items, &opened));
      files.push_back(std::move(file));
    }
    const size_t running = std::max<size_t>(1, std::min(items.size(), cores));
    workers = std::max(workers, running);
    std::atomic<size_t> next{0};
    auto work = [&](size_t w) {
      for (size_t i = next++; i < items.size(); i = next++) {
        try {
          statuses[w] = scan.FoldGroup(items[i], &partials[w], &counted[w]);
        } catch (const parquet::ParquetException& e) {
          statuses[w] = arrow::Status::IOError("cannot read a data file of the scan: ", e.what());
        }
        if (!statuses[w].ok()) {
          next = items.size();  // the others stop too
          return;
        }
      }
    };
    std::vector<std::thread> threads;
    for (size_t w = 1; w < running; ++w) threads.emplace_back(work, w);
    work(0);
    for (std::thread& t : threads) t.join();
  }
  // NotImplemented before any other failure: the query engine then answers (and words errors).
  for (const arrow::Status& s : statuses) {
    if (s.IsNotImplemented()) return s;
  }
  for (const arrow::Status& s : statuses) ARROW_RETURN_NOT_OK(s);

  // The workers' groups folded into the first's.
  Groups& merged = partials[0];
  const size_t stride = folds.size();
  for (size_t w = 1; w < workers; ++w) {
    const Groups& other = partials[w];
    std::vector<int32_t> key_numbers(other.keys().size());
    for (size_t k = 0; k < key_numbers.size(); ++k) key_numbers[k] = merged.Key(other.keys()[k]);
    for (size_t slot = 0; slot < other.size(); ++slot) {
      if (other.rows(slot) == 0) continue;
      const auto into = static_cast<size_t>(
          merged.Slot(merged.Bucket(other.bucket_start(slot)), key_numbers[static_cast<size_t>(other.key_number(slot))]));
      merged.rows(into) += other.rows(slot);
      Acc* accs = merged.accs().data() + into * stride;
      for (size_t k = 0; k < stride; ++k) {
        const bool floating = folds[k].input >= 0 && inputs[static_cast<size_t>(folds[k].input)].floating;
        accs[k].Merge(other.accs(slot)[k], floating);
      }
    }
  }
  if (counters != nullptr) {
    counters->files += opened.files;
    for (const SelectionCounters& c : counted) {
      counters->row_groups += c.row_groups;
      counters->pages_skipped += c.pages_skipped;
    }
  }

  // The result's rows: slots that hold rows, ordered.
  std::vector<size_t> order;
  if (bucket == nullptr && grouped == nullptr) {
    // One row, rows or not.
    const int32_t slot = merged.Slot(merged.Bucket(0), merged.None());
    order.push_back(static_cast<size_t>(slot));
  } else {
    for (size_t slot = 0; slot < merged.size(); ++slot) {
      if (merged.rows(slot) > 0) order.push_back(slot);
    }
    // Keys ranked once (values in order, NULL last), so that rows compare by numbers.
    std::vector<int32_t> by_value(merged.keys().size());
    for (size_t k = 0; k < by_value.size(); ++k) by_value[k] = static_cast<int32_t>(k);
    std::sort(by_value.begin(), by_value.end(),
              [&](int32_t a, int32_t b) { return merged.keys()[static_cast<size_t>(a)] < merged.keys()[static_cast<size_t>(b)]; });
    std::vector<int32_t> rank(by_value.size());
    for (size_t r = 0; r < by_value.size(); ++r) rank[static_cast<size_t>(by_value[r])] = static_cast<int32_t>(r);
    auto key_rank = [&](size_t slot) { return rank[static_cast<size_t>(merged.key_number(slot))]; };
    std::vector<ScanOrder> keys = sort;
    if (keys.empty()) {
      // By bucket (`descending` if asked), then key.
      for (size_t k = 0; k < aggregates.size(); ++k) {
        if (&aggregates[k] == bucket) keys.push_back({k, descending});
      }
      for (size_t k = 0; k < aggregates.size(); ++k) {
        if (&aggregates[k] == grouped) keys.push_back({k, false});
      }
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      for (const ScanOrder& o : keys) {
        if (&aggregates[o.column] == bucket) {
          const int64_t x = merged.bucket_start(a), y = merged.bucket_start(b);
          if (x != y) return o.descending ? x > y : x < y;
          continue;
        }
        const bool x_null = merged.key(a).kind == KeyValue::kNull, y_null = merged.key(b).kind == KeyValue::kNull;
        if (x_null != y_null) return y_null;  // NULL last, ascending or descending (DuckDB's default)
        const int32_t x = key_rank(a), y = key_rank(b);
        if (x != y) return o.descending ? x > y : x < y;
      }
      return false;
    });
    if (limit && *limit < static_cast<int64_t>(order.size())) order.resize(static_cast<size_t>(std::max<int64_t>(0, *limit)));
  }

  std::vector<std::shared_ptr<arrow::Field>> fields;
  std::vector<std::shared_ptr<arrow::Array>> arrays;
  for (size_t k = 0; k < folds.size(); ++k) {
    const std::shared_ptr<arrow::DataType> type = &aggregates[k] == bucket ? time_field->type() : folds[k].type;
    std::unique_ptr<arrow::ArrayBuilder> builder;
    ARROW_RETURN_NOT_OK(arrow::MakeBuilder(arrow::default_memory_pool(), type, &builder));
    ARROW_RETURN_NOT_OK(builder->Reserve(static_cast<int64_t>(order.size())));
    for (const size_t slot : order) {
      if (&aggregates[k] == bucket) {
        ARROW_RETURN_NOT_OK(static_cast<arrow::TimestampBuilder&>(*builder).Append(merged.bucket_start(slot)));
      } else if (&aggregates[k] == grouped) {
        ARROW_RETURN_NOT_OK(AppendKey(builder.get(), *type, merged.key(slot)));
      } else {
        const Input* input = folds[k].input >= 0 ? &inputs[static_cast<size_t>(folds[k].input)] : nullptr;
        ARROW_RETURN_NOT_OK(AppendResult(builder.get(), folds[k], input, merged.rows(slot), merged.accs(slot)[k]));
      }
    }
    ARROW_ASSIGN_OR_RAISE(auto array, builder->Finish());
    fields.push_back(arrow::field(aggregates[k].name, type));
    arrays.push_back(std::move(array));
  }
  return arrow::Table::Make(arrow::schema(fields), arrays, static_cast<int64_t>(order.size()));
}

}  // namespace

arrow::Result<std::shared_ptr<arrow::Table>> ScanAggregates(const ScanPlan& plan, const std::vector<std::string>& paths,
                                                            const std::vector<SelectionAggregate>& aggregates,
                                                            bool descending, std::optional<int64_t> limit,
                                                            SelectionCounters* counters, const std::atomic<bool>* cancel,
                                                            const std::vector<ScanOrder>& sort) {
  if (!paths.empty() && paths.size() != plan.files.size()) {
    return arrow::Status::Invalid("ScanAggregates: ", paths.size(), " paths for ", plan.files.size(), " files");
  }
  SelectionCounters ignored;
  try {
    return ScanAggregatesOrThrow(plan, paths, aggregates, descending, limit, counters ? counters : &ignored, cancel,
                                 sort);
  } catch (const parquet::ParquetException& e) {
    return arrow::Status::IOError("cannot read a data file of the scan: ", e.what());
  }
}

}  // namespace timelake
