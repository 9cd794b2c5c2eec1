#include "timelake/scan/bucket_scan.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include <arrow/array/builder_primitive.h>
#include <arrow/builder.h>
#include <arrow/io/interfaces.h>
#include <parquet/column_reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/schema.h>
#include <parquet/statistics.h>

#include "timelake/scan/data_files.h"

namespace timelake {
namespace {

constexpr int64_t kBatch = 8192;             // rows decoded at a time, per column

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

struct Bucketed {
  int64_t rows = 0;
  std::vector<Acc> accs;
};

// Everything a worker folded: bucket start -> state.
using Partial = std::map<int64_t, Bucketed>;

// floor((t - origin) / width) * width + origin, without overflow for any time and width.
int64_t BucketOf(int64_t t, int64_t width, int64_t origin) {
  const __int128 offset = static_cast<__int128>(t) - origin;
  __int128 q = offset / width;
  if (offset % width != 0 && offset < 0) --q;
  return static_cast<int64_t>(q * width + origin);
}

const parquet::ColumnDescriptor* Leaf(const parquet::SchemaDescriptor& schema, const std::string& name, int* leaf) {
  for (int i = 0; i < schema.num_columns(); ++i) {
    const parquet::ColumnDescriptor* descr = schema.Column(i);
    if (descr->max_repetition_level() == 0 && descr->path()->ToDotVector().size() == 1 && descr->name() == name) {
      *leaf = i;
      return descr;
    }
  }
  return nullptr;
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
      // min / max, in locals (the bucket's state is written once per run).
      int64_t count = 0;
      bool ends = acc.ends, nan = acc.nan;
      double dlow = acc.dlow, dhigh = acc.dhigh;
      int64_t ilow = acc.ilow, ihigh = acc.ihigh;
      for (int32_t i = run.begin; i < run.end; ++i) {
        if (defs != nullptr && defs[i] != max_def) continue;
        ++count;
        if constexpr (kFloating) {
          if (std::isnan(values[i])) {
            nan = true;
            continue;
          }
          const auto d = static_cast<double>(values[i]);
          // Of equal values the last one folded wins (-0.0 against 0.0), as in the selection reader.
          if (!ends) {
            dlow = dhigh = d;
            ends = true;
          } else if constexpr (K == Kind::kMin) {
            dlow = d <= dlow ? d : dlow;
          } else {
            dhigh = d >= dhigh ? d : dhigh;
          }
        } else {
          const auto x = static_cast<int64_t>(values[i]);
          if (!ends) {
            ilow = ihigh = x;
            ends = true;
          } else if constexpr (K == Kind::kMin) {
            ilow = std::min(ilow, x);
          } else {
            ihigh = std::max(ihigh, x);
          }
        }
      }
      acc.count += count;
      acc.ends = ends, acc.nan = nan;
      acc.dlow = dlow, acc.dhigh = dhigh, acc.ilow = ilow, acc.ihigh = ihigh;
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

class Scan {
 public:
  Scan(const ScanPlan& plan, const std::vector<std::string>& paths, std::vector<Fold> folds,
       std::vector<Input> inputs, std::string time_column, int64_t width, int64_t origin,
       const std::atomic<bool>* cancel)
      : plan_(plan), paths_(paths), folds_(std::move(folds)), inputs_(std::move(inputs)),
        time_column_(std::move(time_column)), width_(width), origin_(origin), cancel_(cancel) {}

  // Folds plan file `f` into `out`.
  arrow::Status File(size_t f, Partial* out, SelectionCounters* counters) {
    ARROW_ASSIGN_OR_RAISE(OpenDataFile file, OpenPlanFile(plan_, paths_, f, /*verify=*/false));
    ++counters->files;
    const std::shared_ptr<parquet::FileMetaData> meta = file.reader->metadata();
    const parquet::SchemaDescriptor& schema = *meta->schema();
    int time_leaf = -1;
    const parquet::ColumnDescriptor* time_descr = Leaf(schema, time_column_, &time_leaf);
    if (time_descr == nullptr || !StoredAs(*time_descr, arrow::TimestampType(arrow::TimeUnit::MICRO))) {
      return arrow::Status::NotImplemented("a time column not stored as microseconds");
    }
    std::vector<int> leaves(inputs_.size(), -1);
    std::vector<int16_t> max_defs(inputs_.size(), 0);
    for (size_t c = 0; c < inputs_.size(); ++c) {
      const parquet::ColumnDescriptor* descr = Leaf(schema, inputs_[c].name, &leaves[c]);
      if (descr == nullptr) return arrow::Status::NotImplemented("a file without column '", inputs_[c].name, "'");
      if (!StoredAs(*descr, *inputs_[c].type)) {
        return arrow::Status::NotImplemented("column '", inputs_[c].name, "' stored as ",
                                             parquet::TypeToString(descr->physical_type()));
      }
      max_defs[c] = descr->max_definition_level();
    }
    const std::vector<uint64_t>& deleted = plan_.files[f].deleted_rows;
    const int64_t lo = plan_.filter.min_time.value_or(std::numeric_limits<int64_t>::min());
    const int64_t hi = plan_.filter.max_time.value_or(std::numeric_limits<int64_t>::max());
    const bool ranged = plan_.filter.min_time || plan_.filter.max_time;
    int64_t group_first = 0;
    for (int g = 0; g < meta->num_row_groups(); ++g) {
      const std::unique_ptr<parquet::RowGroupMetaData> rg = meta->RowGroup(g);
      const int64_t rows = rg->num_rows();
      const int64_t first = group_first;
      group_first += rows;
      if (rows == 0) continue;
      const std::unique_ptr<parquet::ColumnChunkMetaData> chunk = rg->ColumnChunk(time_leaf);
      const std::shared_ptr<parquet::Statistics> stats = chunk->is_stats_set() ? chunk->statistics() : nullptr;
      const bool no_nulls = time_descr->max_definition_level() == 0 ||
                            (stats && stats->HasNullCount() && stats->null_count() == 0);
      if (!ranged && !no_nulls) {
        // Rows of null time form a bucket of their own (NULL) in SQL: left to the query engine.
        return arrow::Status::NotImplemented("a time column that may hold nulls, and no time range");
      }
      if (stats && stats->HasMinMax()) {
        const auto& times = static_cast<const parquet::Int64Statistics&>(*stats);
        if (std::max(times.min(), lo) > std::min(times.max(), hi)) continue;  // no time in the range
      } else if (stats && stats->HasNullCount() && stats->null_count() == rows) {
        continue;  // every time null: none in any range
      }
      ++counters->row_groups;
      ARROW_RETURN_NOT_OK(
          Group(*file.reader, g, rows, first, time_leaf, leaves, max_defs, deleted, lo, hi, out));
    }
    return arrow::Status::OK();
  }

 private:
  arrow::Status Group(parquet::ParquetFileReader& reader, int g, int64_t rows, int64_t first, int time_leaf,
                      const std::vector<int>& leaves, const std::vector<int16_t>& max_defs,
                      const std::vector<uint64_t>& deleted, int64_t lo, int64_t hi, Partial* out) {
    const bool bucketed = width_ > 0;
    const size_t stride = folds_.size();
    // Slots of the buckets met so far in this row group, numbered as met.
    std::unordered_map<int64_t, int32_t> slot_of;
    std::vector<int64_t> starts;
    std::vector<Acc> local;
    std::vector<int64_t> local_rows;
    auto slot_for = [&](int64_t start) -> int32_t {
      auto [it, added] = slot_of.emplace(start, static_cast<int32_t>(starts.size()));
      if (added) {
        starts.push_back(start);
        local.resize(starts.size() * stride);
        local_rows.push_back(0);
      }
      return it->second;
    };
    if (!bucketed) slot_for(0);

    std::shared_ptr<parquet::RowGroupReader> group = reader.RowGroup(g);
    std::shared_ptr<parquet::ColumnReader> time_base = group->Column(time_leaf);
    auto* time_reader = static_cast<parquet::Int64Reader*>(time_base.get());
    const int16_t time_max_def = reader.metadata()->schema()->Column(time_leaf)->max_definition_level();
    std::vector<std::shared_ptr<parquet::ColumnReader>> columns;
    for (const int leaf : leaves) columns.push_back(leaf == time_leaf ? nullptr : group->Column(leaf));

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
    auto deleted_at = std::lower_bound(deleted.begin(), deleted.end(), static_cast<uint64_t>(first));
    // The bucket of the row before: [bucket_lo, bucket_hi) is slot bucket_slot.
    int64_t bucket_lo = 1, bucket_hi = 0;
    int32_t bucket_slot = 0;

    for (int64_t done = 0; done < rows; done += kBatch) {
      if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) {
        return arrow::Status::Cancelled("the scan was interrupted");
      }
      const int64_t n = std::min(kBatch, rows - done);
      int64_t read = 0;
      ARROW_RETURN_NOT_OK(ReadExactly(time_reader, n, time_max_def > 0 ? time_defs.data() : nullptr,
                                      time_values.data(), &read, time_column_));
      const int64_t times_read = read;
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
        if (!bucketed) {
          slot[i] = 0;
        } else if (t >= bucket_lo && t < bucket_hi) {
          slot[i] = bucket_slot;
        } else {
          const int64_t start = BucketOf(t, width_, origin_);
          bucket_slot = slot_for(start);
          bucket_lo = start;
          bucket_hi = static_cast<int64_t>(std::min<__int128>(static_cast<__int128>(start) + width_,
                                                              std::numeric_limits<int64_t>::max()));
          slot[i] = bucket_slot;
        }
      }
      // Rows deletion vectors delete are in no bucket.
      const auto end_position = static_cast<uint64_t>(first + done + n);
      while (deleted_at != deleted.end() && *deleted_at < end_position) {
        slot[static_cast<size_t>(*deleted_at - static_cast<uint64_t>(first + done))] = -1;
        ++deleted_at;
      }
      runs.clear();
      for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (j < n && slot[j] == slot[i]) ++j;
        if (slot[i] >= 0) {
          runs.push_back({slot[i], static_cast<int32_t>(i), static_cast<int32_t>(j)});
          local_rows[static_cast<size_t>(slot[i])] += j - i;
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
          FoldBatch(folds_, input, runs, n, d, max_def, longs.data(), times_read, &local, stride);
          continue;
        }
        switch (inputs_[c].physical) {
          case parquet::Type::DOUBLE:
            ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::DoubleReader*>(columns[c].get()), n, d,
                                            doubles.data(), &read, name));
            FoldBatch(folds_, input, runs, n, d, max_def, doubles.data(), read, &local, stride);
            break;
          case parquet::Type::FLOAT:
            ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::FloatReader*>(columns[c].get()), n, d,
                                            floats.data(), &read, name));
            FoldBatch(folds_, input, runs, n, d, max_def, floats.data(), read, &local, stride);
            break;
          case parquet::Type::INT64:
            ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::Int64Reader*>(columns[c].get()), n, d,
                                            longs.data(), &read, name));
            FoldBatch(folds_, input, runs, n, d, max_def, longs.data(), read, &local, stride);
            break;
          case parquet::Type::INT32:
            ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::Int32Reader*>(columns[c].get()), n, d,
                                            ints.data(), &read, name));
            FoldBatch(folds_, input, runs, n, d, max_def, ints.data(), read, &local, stride);
            break;
          case parquet::Type::BOOLEAN:
            ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::BoolReader*>(columns[c].get()), n, d, bools.get(),
                                            &read, name));
            FoldBatch(folds_, input, runs, n, d, max_def, bools.get(), read, &local, stride);
            break;
          case parquet::Type::BYTE_ARRAY:
            ARROW_RETURN_NOT_OK(ReadExactly(static_cast<parquet::ByteArrayReader*>(columns[c].get()), n, d,
                                            bytes.data(), &read, name));
            FoldBatch(folds_, input, runs, n, d, max_def, bytes.data(), read, &local, stride);
            break;
          default:
            return arrow::Status::NotImplemented("column '", name, "' of physical type ",
                                                 parquet::TypeToString(inputs_[c].physical));
        }
      }
    }
    for (size_t s = 0; s < starts.size(); ++s) {
      if (local_rows[s] == 0) continue;
      Bucketed& into = (*out)[starts[s]];
      if (into.accs.empty()) into.accs.resize(stride);
      into.rows += local_rows[s];
      for (size_t k = 0; k < stride; ++k) {
        const bool floating = folds_[k].input >= 0 && inputs_[static_cast<size_t>(folds_[k].input)].floating;
        into.accs[k].Merge(local[s * stride + k], floating);
      }
    }
    return arrow::Status::OK();
  }

  const ScanPlan& plan_;
  const std::vector<std::string>& paths_;
  const std::vector<Fold> folds_;
  const std::vector<Input> inputs_;
  const std::string time_column_;
  const int64_t width_;
  const int64_t origin_;
  const std::atomic<bool>* cancel_;
};

// Appends the final value of one aggregate.
arrow::Status AppendResult(arrow::ArrayBuilder* builder, const Fold& fold, const Input* input, const Bucketed& state,
                           const Acc& acc) {
  switch (fold.kind) {
    case Kind::kCountRows:
      return static_cast<arrow::Int64Builder*>(builder)->Append(state.rows);
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

// The folds and the columns they read, checked against what the scan computes exactly.
arrow::Status Resolve(const ScanPlan& plan, const std::vector<SelectionAggregate>& aggregates, std::vector<Fold>* folds,
                      std::vector<Input>* inputs, const SelectionAggregate** bucket) {
  for (const SelectionAggregate& agg : aggregates) {
    Fold fold;
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
    bool descending, std::optional<int64_t> limit, SelectionCounters* counters, const std::atomic<bool>* cancel) {
  if (!plan.filter.key_equals.empty()) return arrow::Status::NotImplemented("a series-key condition");
  std::vector<Fold> folds;
  std::vector<Input> inputs;
  const SelectionAggregate* bucket = nullptr;
  ARROW_RETURN_NOT_OK(Resolve(plan, aggregates, &folds, &inputs, &bucket));
  std::vector<std::string> columns{plan.contract.time_column};
  for (const Input& in : inputs) columns.push_back(in.name);
  ARROW_RETURN_NOT_OK(CoreReadable(plan, columns));
  const std::shared_ptr<arrow::Field> time_field = plan.storage->GetFieldByName(plan.contract.time_column);
  if (!time_field || time_field->type()->id() != arrow::Type::TIMESTAMP ||
      static_cast<const arrow::TimestampType&>(*time_field->type()).unit() != arrow::TimeUnit::MICRO) {
    return arrow::Status::NotImplemented("a time column that is not a timestamp in microseconds");
  }

  Scan scan(plan, paths, folds, inputs, plan.contract.time_column, bucket ? bucket->width : 0,
            bucket ? bucket->origin : 0, cancel);
  // The files spread over the cores, each worker folding into a partial state of its own.
  const size_t workers = std::max<size_t>(
      1, std::min<size_t>(plan.files.size(), std::max(1u, std::thread::hardware_concurrency())));
  std::vector<Partial> partials(workers);
  std::vector<SelectionCounters> counted(workers);
  std::vector<arrow::Status> statuses(workers);
  std::atomic<size_t> next{0};
  auto work = [&](size_t w) {
    for (size_t f = next++; f < plan.files.size(); f = next++) {
      try {
        statuses[w] = scan.File(f, &partials[w], &counted[w]);
      } catch (const parquet::ParquetException& e) {
        statuses[w] = arrow::Status::IOError("cannot read a data file of the scan: ", e.what());
      }
      if (!statuses[w].ok()) {
        next = plan.files.size();  // the others stop too
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t w = 1; w < workers; ++w) threads.emplace_back(work, w);
  work(0);
  for (std::thread& t : threads) t.join();
  // NotImplemented before any other failure: the query engine then answers (and words errors).
  for (const arrow::Status& s : statuses) {
    if (s.IsNotImplemented()) return s;
  }
  for (const arrow::Status& s : statuses) ARROW_RETURN_NOT_OK(s);

  Partial merged = std::move(partials[0]);
  for (size_t w = 1; w < workers; ++w) {
    for (auto& [start, state] : partials[w]) {
      Bucketed& into = merged[start];
      if (into.accs.empty()) into.accs.resize(folds.size());
      into.rows += state.rows;
      for (size_t k = 0; k < folds.size(); ++k) {
        const bool floating = folds[k].input >= 0 && inputs[static_cast<size_t>(folds[k].input)].floating;
        into.accs[k].Merge(state.accs[k], floating);
      }
    }
  }
  if (counters != nullptr) {
    for (const SelectionCounters& c : counted) {
      counters->files += c.files;
      counters->row_groups += c.row_groups;
    }
  }
  std::vector<std::pair<int64_t, const Bucketed*>> order;
  Bucketed none;
  none.accs.resize(folds.size());
  if (bucket == nullptr) {
    order.emplace_back(0, merged.empty() ? &none : &merged.begin()->second);  // one row, rows or not
  } else {
    for (const auto& [start, state] : merged) order.emplace_back(start, &state);
    if (descending) std::reverse(order.begin(), order.end());
    if (limit && *limit < static_cast<int64_t>(order.size())) order.resize(static_cast<size_t>(std::max<int64_t>(0, *limit)));
  }

  std::vector<std::shared_ptr<arrow::Field>> fields;
  std::vector<std::shared_ptr<arrow::Array>> arrays;
  for (size_t k = 0; k < folds.size(); ++k) {
    const std::shared_ptr<arrow::DataType> type = &aggregates[k] == bucket ? time_field->type() : folds[k].type;
    std::unique_ptr<arrow::ArrayBuilder> builder;
    ARROW_RETURN_NOT_OK(arrow::MakeBuilder(arrow::default_memory_pool(), type, &builder));
    ARROW_RETURN_NOT_OK(builder->Reserve(static_cast<int64_t>(order.size())));
    for (const auto& [start, state] : order) {
      if (&aggregates[k] == bucket) {
        ARROW_RETURN_NOT_OK(static_cast<arrow::TimestampBuilder&>(*builder).Append(start));
        continue;
      }
      const Input* input = folds[k].input >= 0 ? &inputs[static_cast<size_t>(folds[k].input)] : nullptr;
      ARROW_RETURN_NOT_OK(AppendResult(builder.get(), folds[k], input, *state, state->accs[k]));
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
                                                            SelectionCounters* counters, const std::atomic<bool>* cancel) {
  if (!paths.empty() && paths.size() != plan.files.size()) {
    return arrow::Status::Invalid("ScanAggregates: ", paths.size(), " paths for ", plan.files.size(), " files");
  }
  SelectionCounters ignored;
  try {
    return ScanAggregatesOrThrow(plan, paths, aggregates, descending, limit, counters ? counters : &ignored, cancel);
  } catch (const parquet::ParquetException& e) {
    return arrow::Status::IOError("cannot read a data file of the scan: ", e.what());
  }
}

}  // namespace timelake
