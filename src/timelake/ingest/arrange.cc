#include "timelake/ingest/arrange.h"

#include <arrow/array.h>
#include <arrow/array/concatenate.h>
#include <arrow/buffer.h>
#include <arrow/builder.h>
#include <arrow/compute/api.h>
#include <arrow/util/bit_util.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "timelake/ingest/key_dictionary.h"
#include "timelake/rows/sorted_rows.h"
#include "timelake/util/parallel.h"

namespace timelake {
namespace {

namespace cp = arrow::compute;

std::atomic<bool> force_wide_positions{false};  // ForceWideArrangePositionsForTesting

// Rows per slice below which a pass is not worth splitting over threads.
constexpr int64_t kParallelSliceRows = 1 << 20;

// Contiguous slices of [0, n) for the parallel passes; the slices keep row order.
struct Slices {
  explicit Slices(int64_t n)
      : n(n), count(std::max<int64_t>(1, std::min<int64_t>(CpuParallelism(), n / kParallelSliceRows))) {}
  int64_t begin(size_t s) const { return n * static_cast<int64_t>(s) / count; }
  int64_t end(size_t s) const { return n * static_cast<int64_t>(s + 1) / count; }
  // Runs `pass(slice, begin, end)` for every slice, on all cores.
  template <typename Pass>
  arrow::Status Run(Pass&& pass) const {
    return RunParallel(static_cast<size_t>(count), CpuParallelism(),
                       [&](size_t s) { return pass(s, begin(s), end(s)); });
  }
  int64_t n;
  int64_t count;
};

// The series key as ids into one dictionary of its distinct values, and the sort rank of each
// dictionary entry. Each slice is hashed on its own thread, then the slices' dictionaries (one
// entry per series: small) are unified. Nullopt for a key type the hash kernels lack.
struct EncodedKey {
  std::shared_ptr<arrow::Array> dictionary;
  std::shared_ptr<arrow::Buffer> id_buffer;  // per row; -1 for null (not zero-filled first)
  int32_t* ids = nullptr;                    // id_buffer's values
  std::vector<int32_t> rank_of;  // per dictionary entry
  int64_t nulls = 0;             // rows of a null key (id -1)
};

// The sort rank of every dictionary entry.
arrow::Status RankEntries(EncodedKey* key) {
  ARROW_ASSIGN_OR_RAISE(auto order_array, cp::SortIndices(*key->dictionary));
  const auto& order = static_cast<const arrow::UInt64Array&>(*order_array);
  key->rank_of.resize(static_cast<size_t>(key->dictionary->length()));
  for (int64_t j = 0; j < order.length(); ++j) key->rank_of[order.Value(j)] = static_cast<int32_t>(j);
  return arrow::Status::OK();
}

arrow::Status AllocateIds(int64_t n, EncodedKey* key) {
  ARROW_ASSIGN_OR_RAISE(key->id_buffer, arrow::AllocateBuffer(n * static_cast<int64_t>(sizeof(int32_t))));
  key->ids = reinterpret_cast<int32_t*>(key->id_buffer->mutable_data());
  return arrow::Status::OK();
}

// String and binary keys: each slice writes its ids straight into the row ids; a slice whose
// values first appear in another order than the first slice's is renumbered afterwards. (Arrow's
// DictionaryEncode builds each slice's ids in an array of its own through a builder, then copied
// into place, and hashes at about twice the cost per row: bench/README.md.)
template <typename T>
arrow::Result<std::optional<EncodedKey>> EncodeBinaryKey(const std::shared_ptr<arrow::Array>& key,
                                                         const Slices& slices) {
  using ArrayType = typename arrow::TypeTraits<T>::ArrayType;
  using BuilderType = typename arrow::TypeTraits<T>::BuilderType;
  const auto& values = static_cast<const ArrayType&>(*key);
  EncodedKey out;
  ARROW_RETURN_NOT_OK(AllocateIds(slices.n, &out));
  std::vector<KeyDictionary> dictionaries(static_cast<size_t>(slices.count));
  const bool has_nulls = values.null_count() > 0;
  out.nulls = values.null_count();
  const auto* offsets = values.raw_value_offsets();
  const char* data = reinterpret_cast<const char*>(values.raw_data());
  ARROW_RETURN_NOT_OK(slices.Run([&](size_t s, int64_t begin, int64_t end) {
    KeyDictionary& dictionary = dictionaries[s];
    int32_t* ids = out.ids;
    for (int64_t i = begin; i < end; ++i) {
      ids[i] = has_nulls && values.IsNull(i)
                   ? -1
                   : dictionary.IdOf(data + offsets[i], static_cast<size_t>(offsets[i + 1] - offsets[i]));
    }
    return arrow::Status::OK();
  }));
  // The first slice's numbering is the unified one; the others' entries are looked up in it.
  KeyDictionary& unified = dictionaries[0];
  std::vector<std::vector<int32_t>> remap(dictionaries.size());
  bool renumber = false;
  for (size_t s = 1; s < dictionaries.size(); ++s) {
    const auto& local = dictionaries[s].entries();
    for (size_t e = 0; e < local.size(); ++e) {
      const int32_t id = unified.IdOf(local[e].data, local[e].size, local[e].hash);
      remap[s].push_back(id);
      renumber = renumber || id != static_cast<int32_t>(e);
    }
  }
  if (unified.entries().size() >= static_cast<size_t>(INT32_MAX)) return std::nullopt;
  if (renumber) {
    ARROW_RETURN_NOT_OK(slices.Run([&](size_t s, int64_t begin, int64_t end) {
      const auto& map = remap[s];
      if (s == 0) return arrow::Status::OK();
      for (int64_t i = begin; i < end; ++i) {
        if (out.ids[i] >= 0) out.ids[i] = map[static_cast<size_t>(out.ids[i])];
      }
      return arrow::Status::OK();
    }));
  }
  BuilderType builder(key->type(), arrow::default_memory_pool());
  ARROW_RETURN_NOT_OK(builder.Reserve(static_cast<int64_t>(unified.entries().size())));
  for (const auto& entry : unified.entries()) {
    ARROW_RETURN_NOT_OK(builder.Append(std::string_view(entry.data, entry.size)));
  }
  ARROW_RETURN_NOT_OK(builder.Finish(&out.dictionary));
  ARROW_RETURN_NOT_OK(RankEntries(&out));
  return out;
}

arrow::Result<std::optional<EncodedKey>> EncodeKey(const std::shared_ptr<arrow::Array>& key,
                                                   const Slices& slices) {
  switch (key->type_id()) {
    case arrow::Type::STRING:
      return EncodeBinaryKey<arrow::StringType>(key, slices);
    case arrow::Type::LARGE_STRING:
      return EncodeBinaryKey<arrow::LargeStringType>(key, slices);
    case arrow::Type::BINARY:
      return EncodeBinaryKey<arrow::BinaryType>(key, slices);
    case arrow::Type::LARGE_BINARY:
      return EncodeBinaryKey<arrow::LargeBinaryType>(key, slices);
    default:
      break;  // other types: Arrow's hash kernels
  }
  std::vector<std::shared_ptr<arrow::DictionaryArray>> parts(static_cast<size_t>(slices.count));
  std::atomic<bool> unsupported{false};
  ARROW_RETURN_NOT_OK(slices.Run([&](size_t s, int64_t begin, int64_t end) {
    auto encoded = cp::DictionaryEncode(key->Slice(begin, end - begin));
    if (!encoded.ok()) {
      unsupported = true;  // a key type the hash kernels lack: not an error
      return arrow::Status::OK();
    }
    parts[s] = std::static_pointer_cast<arrow::DictionaryArray>(encoded->make_array());
    if (parts[s]->indices()->type_id() != arrow::Type::INT32) unsupported = true;
    return arrow::Status::OK();
  }));
  if (unsupported) return std::nullopt;
  EncodedKey out;
  // Each slice's entries as entries of the unified dictionary.
  std::vector<std::vector<int32_t>> remap(parts.size());
  if (parts.size() == 1) {
    out.dictionary = parts[0]->dictionary();
    remap[0].resize(static_cast<size_t>(out.dictionary->length()));
    for (size_t e = 0; e < remap[0].size(); ++e) remap[0][e] = static_cast<int32_t>(e);
  } else {
    arrow::ArrayVector dictionaries;
    for (const auto& part : parts) dictionaries.push_back(part->dictionary());
    ARROW_ASSIGN_OR_RAISE(auto all, arrow::Concatenate(dictionaries));
    ARROW_ASSIGN_OR_RAISE(auto unified_datum, cp::DictionaryEncode(all));
    auto unified = std::static_pointer_cast<arrow::DictionaryArray>(unified_datum.make_array());
    if (unified->indices()->type_id() != arrow::Type::INT32) return std::nullopt;
    out.dictionary = unified->dictionary();
    const auto& ids = static_cast<const arrow::Int32Array&>(*unified->indices());
    int64_t at = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      for (int64_t e = 0; e < parts[p]->dictionary()->length(); ++e) {
        remap[p].push_back(ids.Value(at++));
      }
    }
  }
  ARROW_RETURN_NOT_OK(RankEntries(&out));
  ARROW_RETURN_NOT_OK(AllocateIds(slices.n, &out));
  out.nulls = key->null_count();
  ARROW_RETURN_NOT_OK(slices.Run([&](size_t s, int64_t begin, int64_t) {
    const auto& local = static_cast<const arrow::Int32Array&>(*parts[s]->indices());
    const auto& map = remap[s];
    for (int64_t i = 0; i < local.length(); ++i) {
      out.ids[begin + i] = local.IsNull(i) ? -1 : map[local.Value(i)];
    }
    return arrow::Status::OK();
  }));
  return out;
}

// A key read as dictionary arrays (compaction reads the key column of data files so: Parquet
// stores it dictionary-encoded). A chunk's dictionary entries are hashed as rows first refer to
// them, not every row's value, and a row's id is its entry's. Nullopt for indices other than
// int32 or values other than string and binary (the caller decodes the column then).
arrow::Result<std::optional<EncodedKey>> EncodeDictionaryKey(const arrow::ChunkedArray& key, int64_t n) {
  const auto& type = static_cast<const arrow::DictionaryType&>(*key.type());
  const auto values = type.value_type()->id();
  if (type.index_type()->id() != arrow::Type::INT32 ||
      (values != arrow::Type::STRING && values != arrow::Type::BINARY)) {
    return std::nullopt;
  }
  EncodedKey out;
  ARROW_RETURN_NOT_OK(AllocateIds(n, &out));
  KeyDictionary unified;  // views into the chunks' dictionaries, which `key` keeps alive
  // Entry of the current chunk's dictionary -> unified id: -1 for a null entry, kUnmapped until a
  // row refers to it. A batch read from Parquet carries every key its row group has met so far,
  // most of which may be in no row of the batch (or of the slice being rewritten): only the keys
  // rows use are hashed, and ranked.
  constexpr int32_t kUnmapped = -2;
  std::vector<int32_t> map;
  const arrow::ArrayData* mapped = nullptr;  // the dictionary `map` is of
  int64_t at = 0;
  for (const auto& chunk : key.chunks()) {
    const auto& encoded = static_cast<const arrow::DictionaryArray&>(*chunk);
    // StringArray is a BinaryArray: one view for both.
    const auto& dictionary = static_cast<const arrow::BinaryArray&>(*encoded.dictionary());
    if (chunk->data()->dictionary.get() != mapped) {
      map.assign(static_cast<size_t>(dictionary.length()), kUnmapped);
      mapped = chunk->data()->dictionary.get();
    }
    const auto& indices = static_cast<const arrow::Int32Array&>(*encoded.indices());
    const int32_t* raw = indices.raw_values();
    const uint32_t entries = static_cast<uint32_t>(map.size());
    const bool has_nulls = indices.null_count() > 0;
    for (int64_t i = 0; i < indices.length(); ++i) {
      if (has_nulls && indices.IsNull(i)) {
        out.ids[at + i] = -1;
        ++out.nulls;
        continue;
      }
      const auto e = static_cast<uint32_t>(raw[i]);
      if (e >= entries) {
        return arrow::Status::Invalid("a dictionary index (", raw[i], ") is outside its dictionary of ",
                                      entries, " entries: the data is damaged");
      }
      int32_t& id = map[e];
      if (id == kUnmapped) {
        const std::string_view v = dictionary.GetView(e);
        id = dictionary.IsNull(e) ? -1 : unified.IdOf(v.data(), v.size());
      }
      out.ids[at + i] = id;
      out.nulls += id < 0;  // a null dictionary entry
    }
    at += indices.length();
  }
  if (unified.entries().size() >= static_cast<size_t>(INT32_MAX)) return std::nullopt;
  std::unique_ptr<arrow::ArrayBuilder> builder;
  ARROW_RETURN_NOT_OK(arrow::MakeBuilder(arrow::default_memory_pool(), type.value_type(), &builder));
  auto& binary = static_cast<arrow::BinaryBuilder&>(*builder);  // StringBuilder is one too
  ARROW_RETURN_NOT_OK(binary.Reserve(static_cast<int64_t>(unified.entries().size())));
  for (const auto& entry : unified.entries()) {
    ARROW_RETURN_NOT_OK(binary.Append(std::string_view(entry.data, entry.size)));
  }
  ARROW_RETURN_NOT_OK(binary.Finish(&out.dictionary));
  ARROW_RETURN_NOT_OK(RankEntries(&out));
  return out;
}

// ChunkOrdinal of times that mostly stay in one chunk (rows arrive in about time order): the
// bounds of the last chunk met are kept, so a row inside it costs two compares instead of a call
// (a division, calendar arithmetic for months).
class ChunkOfTime {
 public:
  explicit ChunkOfTime(ChunkWidth width)
      : width_(width),
        min_ordinal_(ChunkOrdinal(width, INT64_MIN)),
        max_ordinal_(ChunkOrdinal(width, INT64_MAX)) {}
  int64_t operator()(int64_t t) {
    if (t >= lo_ && t < hi_) return ordinal_;
    ordinal_ = ChunkOrdinal(width_, t);
    // The bounds of the first and the last chunk would not fit in 64 bits: open-ended.
    lo_ = ordinal_ > min_ordinal_ ? ChunkStart(width_, ordinal_) : INT64_MIN;
    hi_ = ordinal_ < max_ordinal_ ? ChunkEnd(width_, ordinal_) : INT64_MAX;
    if (width_ == ChunkWidth::kNone) {
      lo_ = INT64_MIN;
      hi_ = INT64_MAX;
    }
    return ordinal_;
  }

 private:
  ChunkWidth width_;
  int64_t min_ordinal_;
  int64_t max_ordinal_;
  int64_t ordinal_ = 0;
  int64_t lo_ = 1;  // empty until the first call
  int64_t hi_ = 0;
};

// A row's position in the input with its time beside it: the sort's passes read times in sorted
// order without going back to the input. 12 bytes with 32-bit positions.
#pragma pack(push, 4)
template <typename Row>
struct TimedRow {
  int64_t time;
  Row row;
};
#pragma pack(pop)
static_assert(sizeof(TimedRow<int32_t>) == 12);

// A row's bucket: (the index of its chunk among the distinct chunks) * ranks + the rank of its
// key. Rows are visited in order, and consecutive rows mostly share a chunk, whose index is kept.
class BucketOf {
 public:
  BucketOf(ChunkWidth width, const std::vector<int64_t>& distinct, int64_t num_ranks, const int64_t* t,
           const EncodedKey* key)
      : chunk_of_(width), distinct_(distinct), num_ranks_(num_ranks), t_(t), key_(key) {}
  int32_t operator()(int64_t i) {
    const int64_t o = chunk_of_(t_[i]);
    if (!known_ || o != ordinal_) {
      known_ = true;
      ordinal_ = o;
      base_ = (std::lower_bound(distinct_.begin(), distinct_.end(), o) - distinct_.begin()) * num_ranks_;
    }
    int32_t rank = 0;
    if (key_) rank = key_->ids[i] < 0 ? static_cast<int32_t>(num_ranks_ - 1) : key_->rank_of[key_->ids[i]];
    return static_cast<int32_t>(base_ + rank);
  }

 private:
  ChunkOfTime chunk_of_;
  const std::vector<int64_t>& distinct_;
  int64_t num_ranks_;
  const int64_t* t_;
  const EncodedKey* key_;
  bool known_ = false;
  int64_t ordinal_ = 0;
  int64_t base_ = 0;
};

// Calls emit(entry) for the entries of one bucket (sorted by time, equal times in arrival order)
// that the dedup policy keeps: of rows of equal time, the last or the first.
template <typename Entry, typename Emit>
void EmitKept(const Entry* first, const Entry* last, DedupPolicy policy, Emit&& emit) {
  for (const Entry* e = first; e != last; ++e) {
    if (policy == DedupPolicy::kLast && e + 1 != last && e[1].time == e->time) continue;
    if (policy == DedupPolicy::kFirst && e != first && e[-1].time == e->time) continue;
    emit(*e);
  }
}

// Rows in arranged order: positions into the input, and their runs of one chunk each.
struct Order {
  std::shared_ptr<arrow::Buffer> perm;
  int64_t rows = 0;  // positions in perm (fewer than the input's rows after dedup)
  std::vector<ChunkRun> runs;
};

// Adds the bucket just emitted (perm rows [from, m)) to `runs`: the run of its chunk, and its
// last row as its series' newest.
void CloseBucket(int64_t ordinal, int64_t from, int64_t m, std::vector<ChunkRun>* runs) {
  if (runs->empty() || runs->back().ordinal != ordinal) {
    ChunkRun run;
    run.ordinal = ordinal;
    run.offset = from;
    runs->push_back(run);
  }
  ChunkRun& run = runs->back();
  run.length += m - from;
  run.newest.push_back(m - 1 - run.offset);
}

std::atomic<int64_t> merges{0};  // ArrangeMergesForTesting
std::atomic<int64_t> calls{0};   // ArrangeCallsForTesting

// The order of an input made of parts that are each sorted by (bucket, time) already, such as the
// data files a compaction reads: each part is cut into runs of one bucket, the runs are ordered
// by bucket (stably: arrival order within a bucket), and a bucket whose runs do not overlap in
// time is its runs one after another, in time order. A bucket whose runs overlap (rows sent
// twice, late rows) is sorted and deduplicated as the counting sort would. Nullopt when a part
// is not sorted, holds two rows of one series and time in a dedup table, or is cut into so many
// runs that keeping them would cost more than the counting sort.
template <typename Row>
arrow::Result<std::optional<Order>> MergeSortedParts(const std::vector<int64_t>& parts, int64_t n,
                                                     const int64_t* t, const BucketOf& bucket_of_rows,
                                                     const std::vector<int64_t>& distinct, int64_t num_ranks,
                                                     int64_t num_buckets, DedupPolicy policy) {
  struct Run {
    int64_t begin, end;  // rows of one part and one bucket, in time order
    int64_t first_time, last_time;
    int32_t bucket;
  };
  const bool dedup = policy != DedupPolicy::kNone;
  const size_t max_runs = static_cast<size_t>(n / 3 + 16);
  std::vector<Run> runs;
  int64_t begin = 0;
  for (int64_t length : parts) {
    const int64_t end = begin + length;
    if (length < 0 || end > n) break;
    BucketOf bucket_of = bucket_of_rows;  // a fresh copy: rows of another part come next
    for (int64_t i = begin; i < end; ++i) {
      const int32_t b = bucket_of(i);
      if (i > begin) {
        Run& run = runs.back();
        if (b == run.bucket) {
          if (t[i] < run.last_time || (dedup && t[i] == run.last_time)) return std::nullopt;
          run.last_time = t[i];
          run.end = i + 1;
          continue;
        }
        if (b < run.bucket) return std::nullopt;
      }
      if (runs.size() >= max_runs) return std::nullopt;
      runs.push_back(Run{i, i + 1, t[i], t[i], b});
    }
    begin = end;
  }
  if (begin != n) {
    return arrow::Status::Invalid("the parts of an arrangement hold ", begin, " rows, not the input's ", n);
  }
  // The runs by bucket, each bucket's in arrival order: a counting sort, which is stable.
  std::vector<int64_t> first(static_cast<size_t>(num_buckets) + 1, 0);
  for (const Run& run : runs) ++first[static_cast<size_t>(run.bucket) + 1];
  for (size_t b = 0; b < static_cast<size_t>(num_buckets); ++b) first[b + 1] += first[b];
  std::vector<size_t> by_bucket(runs.size());
  {
    std::vector<int64_t> next(first.begin(), first.end() - 1);
    for (size_t r = 0; r < runs.size(); ++r) by_bucket[static_cast<size_t>(next[runs[r].bucket]++)] = r;
  }
  Order out;
  ARROW_ASSIGN_OR_RAISE(auto perm_buffer, arrow::AllocateBuffer(n * static_cast<int64_t>(sizeof(Row))));
  Row* perm = reinterpret_cast<Row*>(perm_buffer->mutable_data());
  int64_t m = 0;
  std::vector<size_t> in_time;  // one bucket's runs, in time order
  std::vector<TimedRow<Row>> entries;
  auto by_first_time = [&](size_t x, size_t y) { return runs[x].first_time < runs[y].first_time; };
  auto apart = [&] {
    for (size_t j = 1; j < in_time.size(); ++j) {
      if (runs[in_time[j - 1]].last_time >= runs[in_time[j]].first_time) return false;
    }
    return true;
  };
  for (int64_t b = 0; b < num_buckets; ++b) {
    const auto a = static_cast<size_t>(first[b]), z = static_cast<size_t>(first[b + 1]);
    if (a == z) continue;
    const int64_t from = m;
    in_time.assign(by_bucket.begin() + static_cast<std::ptrdiff_t>(a),
                   by_bucket.begin() + static_cast<std::ptrdiff_t>(z));
    bool ordered = apart();
    if (!ordered) {
      std::stable_sort(in_time.begin(), in_time.end(), by_first_time);
      ordered = apart();
    }
    if (ordered) {
      for (size_t r : in_time) {
        for (int64_t i = runs[r].begin; i < runs[r].end; ++i) perm[m++] = static_cast<Row>(i);
      }
    } else {
      entries.clear();
      for (size_t k = a; k < z; ++k) {  // arrival order: equal times keep it through the stable sort
        const Run& run = runs[by_bucket[k]];
        for (int64_t i = run.begin; i < run.end; ++i) entries.push_back({t[i], static_cast<Row>(i)});
      }
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto& x, const auto& y) { return x.time < y.time; });
      EmitKept(entries.data(), entries.data() + entries.size(), policy,
               [&](const TimedRow<Row>& e) { perm[m++] = e.row; });
    }
    CloseBucket(distinct[static_cast<size_t>(b / num_ranks)], from, m, &out.runs);
  }
  out.perm = std::shared_ptr<arrow::Buffer>(std::move(perm_buffer));
  out.rows = m;
  return out;
}

// The counting sort of any input: rows go to buckets (chunk, rank of the key) in passes over
// contiguous slices of the input, one thread per slice: bucket ids, a histogram per slice, then a
// stable scatter of each slice into its share of every bucket. The later passes (time order
// within a bucket, dedup, runs) read the scattered times sequentially, bucket by bucket.
template <typename Row>
arrow::Result<Order> CountingSort(int64_t n, const int64_t* t, const BucketOf& bucket_of_rows,
                                  const std::vector<int64_t>& distinct, int64_t num_ranks,
                                  int64_t num_buckets, DedupPolicy policy) {
  const Slices slices(n);
  // A histogram of the buckets per slice. A row's bucket is computed again by the scatter below
  // rather than kept: an array of n bucket ids is fresh memory, and fresh pages cost more than
  // the arithmetic (page clearing, and on a virtual machine the host backing them).
  std::vector<std::vector<int64_t>> count(static_cast<size_t>(slices.count));
  ARROW_RETURN_NOT_OK(slices.Run([&](size_t s, int64_t begin, int64_t end) {
    auto& histogram = count[s];
    histogram.assign(static_cast<size_t>(num_buckets), 0);
    BucketOf bucket_of = bucket_of_rows;
    for (int64_t i = begin; i < end; ++i) ++histogram[bucket_of(i)];
    return arrow::Status::OK();
  }));
  // start[b]: where bucket b begins; each slice scatters into its share of every bucket, after
  // the shares of the slices before it, so the sort is stable.
  std::vector<int64_t> start(static_cast<size_t>(num_buckets) + 1, 0);
  for (int64_t b = 0; b < num_buckets; ++b) {
    int64_t total = 0;
    for (auto& histogram : count) {
      const int64_t c = histogram[b];
      histogram[b] = start[b] + total;  // now the slice's next position in bucket b
      total += c;
    }
    start[b + 1] = start[b] + total;
  }
  // Each row lands with its time beside it: the passes below read times in sorted order without
  // going back to the input. (Not zero-filled: every entry is written.)
  using Entry = TimedRow<Row>;
  ARROW_ASSIGN_OR_RAISE(auto entry_buffer, arrow::AllocateBuffer(n * static_cast<int64_t>(sizeof(Entry))));
  Entry* entries = reinterpret_cast<Entry*>(entry_buffer->mutable_data());
  ARROW_RETURN_NOT_OK(slices.Run([&](size_t s, int64_t begin, int64_t end) {
    auto& next = count[s];
    BucketOf bucket_of = bucket_of_rows;
    for (int64_t i = begin; i < end; ++i) entries[next[bucket_of(i)]++] = Entry{t[i], static_cast<Row>(i)};
    return arrow::Status::OK();
  }));
  count = {};
  ARROW_ASSIGN_OR_RAISE(auto perm_buffer, arrow::AllocateBuffer(n * static_cast<int64_t>(sizeof(Row))));
  Row* perm = reinterpret_cast<Row*>(perm_buffer->mutable_data());

  // Bucket by bucket: time order (rows nearly always arrive in it), dedup, runs. Buckets are
  // independent: each slice of them (cut where the rows split evenly) fills its own part of
  // perm, from where its first bucket starts; the parts are then closed up (dedup keeps fewer
  // rows than the buckets hold) and runs of a chunk cut between two parts joined.
  auto by_time = [](const Entry& x, const Entry& y) { return x.time < y.time; };
  struct Part {
    int64_t first_bucket = 0, end_bucket = 0;
    int64_t kept = 0;  // rows written to perm from start[first_bucket]
    std::vector<ChunkRun> runs;  // offsets relative to the part's first row
  };
  std::vector<Part> parts(static_cast<size_t>(slices.count));
  for (size_t p = 0; p < parts.size(); ++p) {
    // The first bucket starting at or after this slice's share of the rows.
    auto at = [&](int64_t row) {
      return static_cast<int64_t>(std::lower_bound(start.begin(), start.end() - 1, row) - start.begin());
    };
    parts[p].first_bucket = p == 0 ? 0 : at(slices.begin(p));
    parts[p].end_bucket = p + 1 == parts.size() ? num_buckets : at(slices.end(p));
  }
  ARROW_RETURN_NOT_OK(RunParallel(parts.size(), CpuParallelism(), [&](size_t p) -> arrow::Status {
    Part& part = parts[p];
    Row* out_rows = perm + (part.first_bucket < num_buckets ? start[part.first_bucket] : n);
    int64_t m = 0;
    for (int64_t b = part.first_bucket; b < part.end_bucket; ++b) {
      const int64_t first = start[b];
      const int64_t last = start[b + 1];
      if (first == last) continue;
      if (!std::is_sorted(entries + first, entries + last, by_time)) {
        std::stable_sort(entries + first, entries + last, by_time);
      }
      const int64_t from = m;
      EmitKept(entries + first, entries + last, policy, [&](const Entry& e) { out_rows[m++] = e.row; });
      CloseBucket(distinct[b / num_ranks], from, m, &part.runs);
    }
    part.kept = m;
    return arrow::Status::OK();
  }));
  Order out;
  int64_t m = 0;  // rows kept, in order, in perm
  for (Part& part : parts) {
    if (part.kept > 0 && part.first_bucket < num_buckets && start[part.first_bucket] != m) {
      std::memmove(perm + m, perm + start[part.first_bucket],
                   static_cast<size_t>(part.kept) * sizeof(Row));
    }
    for (ChunkRun& run : part.runs) {
      if (!out.runs.empty() && out.runs.back().ordinal == run.ordinal) {
        // One chunk's buckets on both sides of a cut: one run.
        ChunkRun& joined = out.runs.back();
        for (int64_t newest : run.newest) joined.newest.push_back(joined.length + newest);
        joined.length += run.length;
        continue;
      }
      run.offset += m;
      out.runs.push_back(std::move(run));
    }
    m += part.kept;
  }
  out.perm = std::shared_ptr<arrow::Buffer>(std::move(perm_buffer));
  out.rows = m;
  return out;
}

// The counting-sort arrangement for zero or one series-key column (or the merge of sorted
// parts); nullopt if the key space is too sparse for it (then the caller uses the generic sort).
// The rows themselves are not gathered here: the result holds the permutation, and each run is
// gathered when it is written (Arranged::Rows), on the thread that writes it.
//
// Row positions are 32-bit when the input allows (it nearly always does: the ingest buffer is far
// smaller), which keeps the scattered entries at 12 bytes and the permutation at 4 per row.
template <typename Row>
arrow::Result<std::optional<Arranged>> ArrangeByRank(const std::shared_ptr<arrow::Table>& input,
                                                     const Contract& contract,
                                                     const arrow::TimestampArray& times,
                                                     const std::vector<int64_t>& parts) {
  const int64_t n = input->num_rows();
  const Slices slices(n);
  const int64_t* t = times.raw_values();
  int key_index = -1;
  std::optional<EncodedKey> key;
  int64_t num_ranks = 1;  // a table that is one series has one rank; nulls rank last
  if (contract.series_key.size() == 1) {
    key_index = input->schema()->GetFieldIndex(contract.series_key[0]);
    const auto& column = input->column(key_index);
    if (column->type()->id() == arrow::Type::DICTIONARY) {
      ARROW_ASSIGN_OR_RAISE(key, EncodeDictionaryKey(*column, n));
    } else {
      ARROW_ASSIGN_OR_RAISE(auto key_column, ContiguousColumn(column));
      ARROW_ASSIGN_OR_RAISE(key, EncodeKey(key_column, slices));
    }
    if (!key) return std::nullopt;
    num_ranks = key->dictionary->length() + 1;
  }

  // The distinct chunks, in chunk order; along arrival order a row's chunk rarely changes.
  std::vector<std::unordered_set<int64_t>> seen(static_cast<size_t>(slices.count));
  ARROW_RETURN_NOT_OK(slices.Run([&](size_t s, int64_t begin, int64_t end) {
    int64_t last = 0;
    ChunkOfTime chunk_of(contract.chunk);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t o = chunk_of(t[i]);
      if (i == begin || o != last) seen[s].insert(o);
      last = o;
    }
    return arrow::Status::OK();
  }));
  std::vector<int64_t> distinct;
  for (const auto& part : seen) distinct.insert(distinct.end(), part.begin(), part.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const int64_t num_buckets = static_cast<int64_t>(distinct.size()) * num_ranks;
  if (num_buckets > 4 * n + 4096 || num_buckets >= INT32_MAX) return std::nullopt;

  const BucketOf bucket_of(contract.chunk, distinct, num_ranks, t, key ? &*key : nullptr);
  std::optional<Order> order;
  if (!parts.empty()) {
    ARROW_ASSIGN_OR_RAISE(order, MergeSortedParts<Row>(parts, n, t, bucket_of, distinct, num_ranks,
                                                       num_buckets, contract.dedup));
    if (order) ++merges;
  }
  if (!order) {
    ARROW_ASSIGN_OR_RAISE(order, CountingSort<Row>(n, t, bucket_of, distinct, num_ranks, num_buckets,
                                                   contract.dedup));
  }
  Arranged out;
  out.runs = std::move(order->runs);
  using PermArray = arrow::NumericArray<typename arrow::CTypeTraits<Row>::ArrowType>;
  out.perm = std::make_shared<PermArray>(order->rows, std::move(order->perm));

  // The source rows, each column one array; the key as dictionary ids.
  arrow::ChunkedArrayVector columns;
  arrow::FieldVector fields;
  for (int c = 0; c < input->num_columns(); ++c) {
    if (c == key_index) {
      // Rows of a null key (usually none: then no bitmap at all).
      std::shared_ptr<arrow::Buffer> validity;
      if (key->nulls > 0) {
        ARROW_ASSIGN_OR_RAISE(validity, arrow::AllocateEmptyBitmap(n));
        for (int64_t i = 0; i < n; ++i) {
          if (key->ids[i] < 0) {
            key->ids[i] = 0;
          } else {
            arrow::bit_util::SetBit(validity->mutable_data(), i);
          }
        }
      }
      auto id_array = std::make_shared<arrow::Int32Array>(
          n, std::move(key->id_buffer), key->nulls > 0 ? validity : nullptr, key->nulls);
      auto type = arrow::dictionary(arrow::int32(), key->dictionary->type());
      // The ids index the dictionary they were hashed into: checking each against its bounds
      // (FromArrays) would be a serial pass over every row for nothing.
      auto column = std::make_shared<arrow::DictionaryArray>(type, id_array, key->dictionary);
      columns.push_back(std::make_shared<arrow::ChunkedArray>(column));
      fields.push_back(arrow::field(input->field(c)->name(), type, input->field(c)->nullable()));
      continue;
    }
    ARROW_ASSIGN_OR_RAISE(auto values, ContiguousColumn(input->column(c)));
    columns.push_back(std::make_shared<arrow::ChunkedArray>(values));
    fields.push_back(input->field(c));
  }
  out.source = arrow::Table::Make(arrow::schema(fields), columns, n);
  return out;
}

}  // namespace

void ForceWideArrangePositionsForTesting(bool on) { force_wide_positions = on; }

arrow::Result<std::shared_ptr<arrow::Table>> Arranged::Rows(const ChunkRun& run) const {
  if (!perm) return table->Slice(run.offset, run.length);
  auto positions = perm->Slice(run.offset, run.length);
  arrow::ChunkedArrayVector columns;
  for (int c = 0; c < source->num_columns(); ++c) {
    // The positions come from the arrangement: checking each against the bounds is wasted work.
    // (A gather loop of our own that prefetched a few rows ahead was slower than Arrow's Take.)
    ARROW_ASSIGN_OR_RAISE(auto taken, cp::Take(*source->column(c)->chunk(0), *positions,
                                               cp::TakeOptions(/*boundscheck=*/false)));
    columns.push_back(std::make_shared<arrow::ChunkedArray>(std::move(taken)));
  }
  return arrow::Table::Make(source->schema(), columns, run.length);
}

void Arranged::BalanceRuns(int workers, int64_t min_rows) {
  if (workers < 2 || runs.size() < 2) return;
  while (runs.size() % static_cast<size_t>(workers) != 0) {
    // The longest run that can be cut: enough rows, and two series or more.
    size_t longest = runs.size();
    for (size_t r = 0; r < runs.size(); ++r) {
      if (runs[r].length >= min_rows && runs[r].newest.size() >= 2 &&
          (longest == runs.size() || runs[r].length > runs[longest].length)) {
        longest = r;
      }
    }
    if (longest == runs.size()) return;
    ChunkRun& run = runs[longest];
    // Series k ends at newest[k]: cut after the series whose end is nearest the middle.
    size_t cut = 1;
    for (size_t k = 1; k < run.newest.size(); ++k) {
      const int64_t at = run.newest[k - 1] + 1;
      const int64_t best = run.newest[cut - 1] + 1;
      if (std::llabs(2 * at - run.length) < std::llabs(2 * best - run.length)) cut = k;
    }
    const int64_t rows = run.newest[cut - 1] + 1;
    ChunkRun second;
    second.ordinal = run.ordinal;
    second.offset = run.offset + rows;
    second.length = run.length - rows;
    for (size_t k = cut; k < run.newest.size(); ++k) second.newest.push_back(run.newest[k] - rows);
    run.length = rows;
    run.newest.resize(cut);
    runs.insert(runs.begin() + static_cast<std::ptrdiff_t>(longest) + 1, std::move(second));
  }
}

arrow::Result<std::shared_ptr<arrow::Table>> Arranged::All() const {
  if (!perm) return table;
  std::vector<std::shared_ptr<arrow::Table>> parts;
  for (const auto& run : runs) {
    ARROW_ASSIGN_OR_RAISE(auto rows, Rows(run));
    parts.push_back(std::move(rows));
  }
  if (parts.empty()) return source->Slice(0, 0);
  return arrow::ConcatenateTables(parts);
}

int64_t ArrangeMergesForTesting() { return merges.load(); }
int64_t ArrangeCallsForTesting() { return calls.load(); }

arrow::Result<Arranged> Arrange(const std::shared_ptr<arrow::Table>& given, const Contract& contract,
                                const std::vector<int64_t>& parts) {
  Arranged out;
  std::shared_ptr<arrow::Table> input = given;
  // The counting sort takes a dictionary-encoded key as it is; everything else wants plain values.
  auto decoded = [&]() -> arrow::Status {
    for (int c = 0; c < input->num_columns(); ++c) {
      const auto& type = input->field(c)->type();
      if (type->id() != arrow::Type::DICTIONARY) continue;
      const auto& values = static_cast<const arrow::DictionaryType&>(*type).value_type();
      ARROW_ASSIGN_OR_RAISE(auto plain, cp::Cast(input->column(c), values));
      ARROW_ASSIGN_OR_RAISE(input, input->SetColumn(c, input->field(c)->WithType(values),
                                                    plain.chunked_array()));
    }
    return arrow::Status::OK();
  };
  if (!contract.is_time_series() || input->num_rows() == 0) {
    ARROW_RETURN_NOT_OK(decoded());
    out.table = input;
    if (input->num_rows() > 0) {
      ChunkRun run;
      run.length = input->num_rows();
      out.runs.push_back(run);
    }
    return out;
  }
  ++calls;
  // Chunk ordinal per row, from the (microsecond) time column.
  ARROW_ASSIGN_OR_RAISE(auto time, ContiguousColumn(input->GetColumnByName(contract.time_column)));
  const auto& ts = static_cast<const arrow::TimestampArray&>(*time);
  if (contract.series_key.size() <= 1) {
    ARROW_ASSIGN_OR_RAISE(auto fast, ts.length() <= INT32_MAX && !force_wide_positions.load()
                                         ? ArrangeByRank<int32_t>(input, contract, ts, parts)
                                         : ArrangeByRank<int64_t>(input, contract, ts, parts));
    if (fast) return std::move(*fast);
  }
  ARROW_RETURN_NOT_OK(decoded());
  arrow::Int64Builder ordinals;
  ARROW_RETURN_NOT_OK(ordinals.Reserve(ts.length()));
  bool single_chunk = true;
  int64_t first = 0;
  ChunkOfTime chunk_of(contract.chunk);
  for (int64_t i = 0; i < ts.length(); ++i) {
    const int64_t o = chunk_of(ts.Value(i));
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
