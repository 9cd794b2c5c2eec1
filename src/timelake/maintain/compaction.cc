#include "timelake/maintain/compaction.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include <arrow/array.h>
#include <arrow/builder.h>
#include <arrow/compute/api.h>
#include <arrow/record_batch.h>
#include <arrow/table.h>
#include <arrow/util/byte_size.h>

#include "timelake/log/data_path.h"
#include "timelake/log/file_tags.h"
#include "timelake/store/parquet_object.h"
#include "timelake/util/parallel.h"

namespace timelake {

namespace {

// `batch` with the columns of `storage`, by name: a file written before add_columns lacks the
// columns added since, which read as null (slices gather batches of several files in one reader).
// A null in a column declared not nullable (a damaged or foreign file) is Invalid.
arrow::Result<std::shared_ptr<arrow::RecordBatch>> WithColumnsOf(
    const std::shared_ptr<arrow::RecordBatch>& batch, const std::shared_ptr<arrow::Schema>& storage) {
  if (batch->num_columns() == storage->num_fields()) {
    bool same = true;
    for (int i = 0; i < storage->num_fields() && same; ++i) {
      same = batch->schema()->field(i)->name() == storage->field(i)->name() &&
             batch->column(i)->type()->Equals(*storage->field(i)->type()) &&
             (storage->field(i)->nullable() || batch->column(i)->null_count() == 0);
    }
    if (same) return batch;
  }
  arrow::ArrayVector columns;
  for (const auto& field : storage->fields()) {
    std::shared_ptr<arrow::Array> column = batch->GetColumnByName(field->name());
    if (!column) {
      ARROW_ASSIGN_OR_RAISE(column, arrow::MakeArrayOfNull(field->type(), batch->num_rows()));
    } else if (!column->type()->Equals(*field->type())) {
      if (field->type()->id() == arrow::Type::DICTIONARY) {
        // A key read dictionary-encoded (SliceReader) that the file stores otherwise: its values
        // as the table's type, then encoded (Arrow casts into a dictionary from strings only).
        const auto& values = static_cast<const arrow::DictionaryType&>(*field->type()).value_type();
        ARROW_ASSIGN_OR_RAISE(auto plain, arrow::compute::Cast(column, values));
        ARROW_ASSIGN_OR_RAISE(auto encoded, arrow::compute::DictionaryEncode(plain));
        column = encoded.make_array();
      } else {
        ARROW_ASSIGN_OR_RAISE(auto cast, arrow::compute::Cast(column, field->type()));
        column = cast.make_array();
      }
    }
    if (!field->nullable() && column->null_count() > 0) {
      return arrow::Status::Invalid("column '", field->name(), "' is declared not nullable but holds nulls");
    }
    columns.push_back(std::move(column));
  }
  return arrow::RecordBatch::Make(storage, batch->num_rows(), std::move(columns));
}

}  // namespace

namespace {

struct Candidate {
  const AddFile* add;
  int64_t seq, order, min_time, max_time;
};

// Files of one chunk whose time ranges overlap another's (they may share a (series, time)).
std::vector<bool> Overlapping(const std::vector<Candidate>& files) {
  std::vector<size_t> by_time(files.size());
  for (size_t i = 0; i < files.size(); ++i) by_time[i] = i;
  std::sort(by_time.begin(), by_time.end(),
            [&](size_t a, size_t b) { return files[a].min_time < files[b].min_time; });
  std::vector<bool> out(files.size(), false);
  for (size_t i = 0; i < by_time.size(); ++i) {
    for (size_t j = i + 1; j < by_time.size() && files[by_time[j]].min_time <= files[by_time[i]].max_time; ++j) {
      out[by_time[i]] = out[by_time[j]] = true;
    }
  }
  return out;
}

// Files under tier_floor_bytes are tier 0; each tier above holds files tier_factor times larger.
int TierOf(int64_t size, const CompactionOptions& options) {
  int tier = 0;
  for (int64_t bound = options.tier_floor_bytes; size >= bound && tier < 62; bound *= options.tier_factor) ++tier;
  return tier;
}

}  // namespace

std::vector<CompactionGroup> PlanCompaction(const Snapshot& snapshot, const Contract& contract,
                                            const CompactionOptions& options) {
  std::map<std::string, std::vector<Candidate>> by_chunk;
  for (const auto& [path, add] : snapshot.files) {
    const int64_t seq = TagInt(add, kSeqTag, -1);
    if (seq < 0) continue;  // another engine's file: its layout is not ours to assume
    auto chunk = add.tags.find(kChunkTag);
    by_chunk[chunk == add.tags.end() ? "" : chunk->second].push_back(
        {&add, seq, TagInt(add, kOrderTag, 0), TagInt(add, kMinTimeTag, INT64_MIN),
         TagInt(add, kMaxTimeTag, INT64_MAX)});
  }
  std::vector<CompactionGroup> groups;
  for (auto& [chunk, files] : by_chunk) {
    std::sort(files.begin(), files.end(), [](const Candidate& a, const Candidate& b) {
      return a.seq != b.seq ? a.seq < b.seq : a.order < b.order;
    });
    const bool dedup = contract.dedup != DedupPolicy::kNone;
    const std::vector<bool> overlapping = dedup ? Overlapping(files) : std::vector<bool>(files.size());
    std::vector<bool> take(files.size(), false);
    for (size_t i = 0; i < files.size(); ++i) {
      const bool small = files[i].add->size < options.target_file_bytes / 2 && !files[i].add->tags.count(kFullTag);
      take[i] = small || (overlapping[i] && !options.tiered);
    }
    if (options.tiered) {
      // Only the smallest tier holding min_files files: a file is rewritten about once per tier
      // it climbs, not once per pass.
      std::map<int, int> per_tier;
      std::vector<int> tier(files.size(), -1);
      for (size_t i = 0; i < files.size(); ++i) {
        if (take[i]) ++per_tier[tier[i] = TierOf(files[i].add->size, options)];
      }
      int chosen = -1;
      for (const auto& [t, n] : per_tier) {
        if (n >= options.min_files) {
          chosen = t;
          break;
        }
      }
      for (size_t i = 0; i < files.size(); ++i) take[i] = take[i] && tier[i] == chosen;
    }
    if (dedup) {
      // The outputs will carry the newest input's sequence number, so an older file left out
      // must not hold any (series, time) the inputs hold: pull such files in until none is left.
      for (bool changed = true; changed;) {
        changed = false;
        int64_t newest = -1;
        for (size_t i = 0; i < files.size(); ++i) {
          if (take[i]) newest = std::max(newest, files[i].seq);
        }
        for (size_t i = 0; i < files.size(); ++i) {
          if (take[i] || files[i].seq >= newest) continue;
          for (size_t j = 0; j < files.size(); ++j) {
            if (take[j] && files[i].min_time <= files[j].max_time &&
                files[j].min_time <= files[i].max_time) {
              take[i] = changed = true;
              break;
            }
          }
        }
      }
    }
    std::vector<Candidate> picked;
    for (size_t i = 0; i < files.size(); ++i) {
      if (take[i]) picked.push_back(files[i]);
    }
    if (static_cast<int>(picked.size()) < options.min_files) continue;
    // The chunk's other files bound where a group's outputs may reach (CompactionGroup::cuts).
    auto finish = [&](CompactionGroup& g) {
      std::set<const AddFile*> in;
      for (const auto& f : g.inputs) in.insert(snapshot.files.count(f.path) ? &snapshot.files.at(f.path) : nullptr);
      std::set<int64_t> cuts;
      for (const auto& f : files) {
        if (in.count(f.add)) continue;
        if (f.min_time > INT64_MIN) cuts.insert(f.min_time);
        if (f.max_time < INT64_MAX) cuts.insert(f.max_time + 1);
      }
      g.cuts.assign(cuts.begin(), cuts.end());
      groups.push_back(std::move(g));
    };
    // Cut into groups under the budget, never between two files of one commit.
    CompactionGroup group;
    group.chunk = chunk;
    for (size_t i = 0; i < picked.size(); ++i) {
      const bool same_commit = !group.inputs.empty() && picked[i].seq == group.seq;
      if (!same_commit && !group.inputs.empty() && group.bytes + picked[i].add->size > options.group_budget_bytes) {
        if (group.inputs.size() >= 2) finish(group);
        group = CompactionGroup{};
        group.chunk = chunk;
        if (contract.dedup != DedupPolicy::kNone) break;  // later groups would overtake this one
      }
      group.inputs.push_back(*picked[i].add);
      group.bytes += picked[i].add->size;
      group.seq = picked[i].seq;
    }
    if (group.inputs.size() >= 2) finish(group);
    if (groups.size() >= options.max_groups) break;
  }
  if (groups.size() > options.max_groups) groups.resize(options.max_groups);
  return groups;
}

namespace {

// Rewriting a group in time slices. A slice [lo, hi) holds every row of the group at those
// times, so every copy of a (series, time) is in one slice, and one arrangement per slice
// deduplicates exactly as one arrangement of the whole group would. Slices are cut so that the
// rows of one fit the memory budget; a file is read only for the slices its time range meets.
struct SliceReader {
  const std::shared_ptr<ObjectStore>& store;
  const std::string& table_path;
  const Contract& contract;
  // The storage schema, but for a single string or binary series key, which is read as the
  // files hold it, dictionary-encoded: its values are not built row by row, and the sort maps
  // each file's dictionary instead of hashing every row's key (Arrange).
  std::shared_ptr<arrow::Schema> storage;
  std::vector<std::string> as_dictionary;
  const CompactionGroup& group;
  int64_t budget;
  int64_t parallel_read_below;

  SliceReader(const std::shared_ptr<ObjectStore>& store, const std::string& table_path,
              const Contract& contract, const std::shared_ptr<arrow::Schema>& storage_schema,
              const CompactionGroup& group, int64_t budget, int64_t parallel_read_below)
      : store(store), table_path(table_path), contract(contract), storage(storage_schema), group(group),
        budget(budget), parallel_read_below(parallel_read_below) {
    const int key = contract.series_key.size() == 1 ? storage->GetFieldIndex(contract.series_key[0]) : -1;
    if (key < 0) return;
    const auto& type = storage->field(key)->type();
    if (type->id() != arrow::Type::STRING && type->id() != arrow::Type::BINARY) return;
    auto read_as = storage->SetField(key, storage->field(key)->WithType(arrow::dictionary(arrow::int32(), type)));
    if (!read_as.ok()) return;
    storage = *read_as;
    as_dictionary.push_back(contract.series_key[0]);
  }

  struct Input {
    int64_t min_time, max_time, rows;
  };
  std::vector<Input> inputs;

  // The rows of one slice, and what reading them showed.
  struct Rows {
    std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
    int64_t rows = 0;
    int64_t bytes = 0;
    bool overflowed = false;  // stopped after `budget` bytes
  };

  arrow::Result<Rows> Read(int64_t lo, int64_t hi, int64_t limit) const {
    Rows out;
    const int time_index = storage->GetFieldIndex(contract.time_column);
    // A dictionary shared by several batches is counted once. (Batches read from Parquet each
    // carry their own copy of the row group's dictionary: `read` compacts those, see there.)
    std::set<const arrow::ArrayData*> dictionaries;
    auto bytes_of = [&](const arrow::RecordBatch& batch) {
      int64_t bytes = 0;
      for (const auto& column : batch.column_data()) {
        for (const auto& buffer : column->buffers) {
          if (buffer) bytes += buffer->size();
        }
        for (const auto& child : column->child_data) bytes += arrow::util::TotalBufferSize(*child);
        if (column->dictionary && dictionaries.insert(column->dictionary.get()).second) {
          bytes += arrow::util::TotalBufferSize(*column->dictionary);
        }
      }
      return bytes;
    };
    // Adds `batches` to the slice; false once it holds more than `limit` bytes.
    auto take = [&](std::vector<std::shared_ptr<arrow::RecordBatch>>* batches) {
      for (auto& batch : *batches) {
        out.rows += batch->num_rows();
        out.bytes += bytes_of(*batch);
        out.batches.push_back(std::move(batch));
        if (out.bytes > limit) {
          out.overflowed = true;
          return false;
        }
      }
      return true;
    };
    // The rows of input `i` in the slice, `batch_rows` at a time; with `sink`, each batch is
    // handed over as soon as it is read (false from it stops the read).
    auto read = [&](size_t i, std::vector<std::shared_ptr<arrow::RecordBatch>>* batches,
                    const std::function<bool()>& sink) -> arrow::Status {
      const bool whole = inputs[i].min_time >= lo && inputs[i].max_time < hi;
      ARROW_ASSIGN_OR_RAISE(auto path, DataFileStorePath(table_path, group.inputs[i].path));
      ARROW_ASSIGN_OR_RAISE(auto reader, ReadParquetBatches(store.get(), path, 64 * 1024, as_dictionary));
      for (;;) {
        std::shared_ptr<arrow::RecordBatch> batch;
        ARROW_RETURN_NOT_OK(reader->ReadNext(&batch));
        if (!batch) break;
        if (auto time = batch->GetColumnByName(contract.time_column); time && time->null_count() > 0) {
          return arrow::Status::Invalid("data file ", group.inputs[i].path, " has rows without a time in '",
                                        contract.time_column, "': the file is not a valid part of the table");
        }
        auto aligned = WithColumnsOf(batch, storage);
        if (!aligned.ok()) {
          return aligned.status().WithMessage("data file ", group.inputs[i].path, ": ", aligned.status().message());
        }
        batch = std::move(*aligned);
        if (!whole && time_index >= 0) {
          ARROW_ASSIGN_OR_RAISE(batch, InSlice(batch, time_index, lo, hi));
        }
        if (batch->num_rows() == 0) continue;
        ARROW_ASSIGN_OR_RAISE(batch, WithCompactDictionaries(batch));
        batches->push_back(std::move(batch));
        if (sink && !sink()) break;
      }
      return arrow::Status::OK();
    };
    // Small files (most of a group fed by small appends) are decoded several at a time on all
    // cores, in windows of bounded size; a large one streams on its own.
    const int64_t kSmallFile = parallel_read_below;
    constexpr int64_t kWindowBytes = 64LL << 20;
    constexpr size_t kWindowFiles = 64;
    std::vector<size_t> meeting;
    for (size_t i = 0; i < group.inputs.size(); ++i) {
      if (inputs[i].max_time >= lo && inputs[i].min_time < hi) meeting.push_back(i);
    }
    for (size_t m = 0; m < meeting.size();) {
      if (group.inputs[meeting[m]].size > kSmallFile) {
        std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
        bool more = true;
        ARROW_RETURN_NOT_OK(read(meeting[m], &batches, [&] {
          more = take(&batches);
          batches.clear();
          return more;
        }));
        if (!more) return out;
        ++m;
        continue;
      }
      size_t end = m;
      int64_t bytes = 0;
      while (end < meeting.size() && end - m < kWindowFiles && bytes < kWindowBytes &&
             group.inputs[meeting[end]].size <= kSmallFile) {
        bytes += group.inputs[meeting[end]].size;
        ++end;
      }
      std::vector<std::vector<std::shared_ptr<arrow::RecordBatch>>> window(end - m);
      ARROW_RETURN_NOT_OK(RunParallel(end - m, CpuParallelism(), [&](size_t k) {
        return read(meeting[m + k], &window[k], nullptr);
      }));
      for (auto& batches : window) {
        if (!take(&batches)) return out;
      }
      m = end;
    }
    return out;
  }

  // `batch` with each dictionary holding only the entries its rows use, where the dictionary
  // is longer than the batch. Parquet hands every batch of a row group its own copy of the row
  // group's whole dictionary: with a million distinct keys, each 64k-row batch held a million
  // strings. Counted as they are, the copies made every slice look over budget, slices were cut
  // down to single instants, each rereading every input (compaction practically hung); kept,
  // they hold the budget's memory many times over, and the arrangement maps each one entry by
  // entry. Compacted, a batch's dictionary is at most its own length.
  static arrow::Result<std::shared_ptr<arrow::RecordBatch>> WithCompactDictionaries(
      const std::shared_ptr<arrow::RecordBatch>& batch) {
    std::shared_ptr<arrow::RecordBatch> out = batch;
    for (int c = 0; c < batch->num_columns(); ++c) {
      const auto& data = batch->column_data(c);
      if (!data->dictionary || data->dictionary->length <= batch->num_rows()) continue;
      const auto& encoded = static_cast<const arrow::DictionaryArray&>(*batch->column(c));
      ARROW_ASSIGN_OR_RAISE(auto compact, encoded.Compact());
      ARROW_ASSIGN_OR_RAISE(out, out->SetColumn(c, batch->schema()->field(c), compact));
    }
    return out;
  }

  static arrow::Result<std::shared_ptr<arrow::RecordBatch>> InSlice(
      const std::shared_ptr<arrow::RecordBatch>& batch, int time_index, int64_t lo, int64_t hi) {
    const auto& column = *batch->column(time_index);
    if (column.type_id() != arrow::Type::TIMESTAMP ||
        static_cast<const arrow::TimestampType&>(*column.type()).unit() != arrow::TimeUnit::MICRO) {
      return arrow::Status::Invalid("time column '", batch->schema()->field(time_index)->name(),
                                    "' of a data file is ", column.type()->ToString(),
                                    ", not timestamp[us]: the file is not timelake's");
    }
    const auto& times = static_cast<const arrow::TimestampArray&>(column);
    arrow::BooleanBuilder keep;
    ARROW_RETURN_NOT_OK(keep.Reserve(batch->num_rows()));
    int64_t kept = 0;
    for (int64_t r = 0; r < batch->num_rows(); ++r) {
      // The group's last slice ends at INT64_MAX at most, and holds a row at INT64_MAX too.
      const bool in = times.IsValid(r) && times.Value(r) >= lo && (times.Value(r) < hi || hi == INT64_MAX);
      keep.UnsafeAppend(in);
      kept += in;
    }
    if (kept == batch->num_rows()) return batch;
    if (kept == 0) return batch->Slice(0, 0);
    std::shared_ptr<arrow::Array> mask;
    ARROW_RETURN_NOT_OK(keep.Finish(&mask));
    ARROW_ASSIGN_OR_RAISE(auto filtered, arrow::compute::Filter(batch, mask));
    return filtered.record_batch();
  }

  // Rows of the group in [lo, hi), assuming each file's rows spread evenly over its time range.
  double EstimatedRows(int64_t lo, int64_t hi) const {
    double rows = 0;
    for (const auto& in : inputs) {
      const int64_t a = std::max(lo, in.min_time), b = std::min(hi - 1, in.max_time);
      if (a > b) continue;
      const double span = static_cast<double>(in.max_time) - static_cast<double>(in.min_time) + 1;
      rows += static_cast<double>(in.rows) * ((static_cast<double>(b) - static_cast<double>(a) + 1) / span);
    }
    return rows;
  }

  // `pieces` slices of [lo, hi) holding about as many rows each.
  std::vector<std::pair<int64_t, int64_t>> Split(int64_t lo, int64_t hi, int pieces) const {
    std::vector<std::pair<int64_t, int64_t>> out;
    const double total = EstimatedRows(lo, hi);
    int64_t start = lo;
    for (int p = 1; p < pieces && start < hi - 1; ++p) {
      const double want = total * p / pieces;
      int64_t a = start + 1, b = hi - 1;  // the first cut past `start` with enough rows before it
      while (a < b) {
        const int64_t mid = a + static_cast<int64_t>((static_cast<uint64_t>(b) - static_cast<uint64_t>(a)) / 2);
        if (EstimatedRows(lo, mid) >= want) b = mid; else a = mid + 1;
      }
      out.push_back({start, a});
      start = a;
    }
    out.push_back({start, hi});
    return out;
  }
};

}  // namespace

arrow::Result<RewrittenGroup> RewriteGroup(const std::shared_ptr<ObjectStore>& store,
                                           const std::string& table_path, const Contract& contract,
                                           const std::shared_ptr<arrow::Schema>& declared,
                                           const std::shared_ptr<arrow::Schema>& storage,
                                           const CompactionGroup& group, const RewriteOptions& options) {
  RewrittenGroup out;
  SliceReader slices(store, table_path, contract, storage, group, std::max<int64_t>(1, options.memory_budget),
                     options.parallel_read_below);
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& add : group.inputs) {
    SliceReader::Input in{TagInt(add, kMinTimeTag, INT64_MIN), TagInt(add, kMaxTimeTag, INT64_MAX - 1),
                          std::max<int64_t>(NumRecords(add), 1)};
    if (in.min_time > in.max_time || in.max_time == INT64_MAX) {
      in = {INT64_MIN, INT64_MAX - 1, in.rows};  // no usable range: read whole in every slice
    }
    lo = std::min(lo, in.min_time);
    hi = std::max(hi, in.max_time);
    slices.inputs.push_back(in);
  }
  if (group.inputs.empty()) return out;
  if (!contract.is_time_series()) {
    // A plain table's rows are neither sorted nor deduplicated: they stream through as they come.
    IngestOptions ingest;
    ingest.buffer_bytes = slices.budget;
    ingest.copy_input = false;  // a file's batches are dropped as read: the copy would not help
    Ingestor ingestor(store, table_path, contract, declared, storage, ingest);
    arrow::Status st = [&]() -> arrow::Status {
      for (const auto& input : group.inputs) {
        ARROW_ASSIGN_OR_RAISE(auto path, DataFileStorePath(table_path, input.path));
        ARROW_ASSIGN_OR_RAISE(auto reader, ReadParquetBatches(store.get(), path, 64 * 1024));
        ARROW_RETURN_NOT_OK(ingestor.Consume(reader.get()));
      }
      ARROW_ASSIGN_OR_RAISE(out.outputs, ingestor.Finish());
      return arrow::Status::OK();
    }();
    if (!st.ok()) {
      ingestor.Abort();
      return st;
    }
    out.rows_in = ingestor.rows_in();
    for (const auto& f : out.outputs) out.rows_out += f.rows;
    out.full.assign(out.outputs.size(), true);  // each but the last was written as the buffer filled
    if (!out.full.empty()) out.full.back() = false;
    return out;
  }
  // Outputs come one file per slice (one chunk), in time order.
  IngestOptions ingest;
  ingest.buffer_bytes = INT64_MAX;
  ingest.copy_input = false;  // the slice's batches are held until they are consumed anyway
  Ingestor ingestor(store, table_path, contract, declared, storage, ingest);
  // The first slices: the group's time range, cut where the chunk's other files start and end.
  std::vector<std::pair<int64_t, int64_t>> pending;
  int64_t from = lo;
  for (int64_t cut : group.cuts) {
    if (cut <= from || cut > hi) continue;
    pending.push_back({from, cut});
    from = cut;
  }
  pending.push_back({from, hi + 1});
  std::reverse(pending.begin(), pending.end());  // the earliest is taken first, from the back
  arrow::Status st = [&]() -> arrow::Status {
    while (!pending.empty()) {
      const auto [a, b] = pending.back();
      pending.pop_back();
      // A slice of one instant cannot be cut: its rows are read whatever they hold.
      const bool cuttable = static_cast<uint64_t>(b) - static_cast<uint64_t>(a) > 1;
      ARROW_ASSIGN_OR_RAISE(auto rows, slices.Read(a, b, cuttable ? slices.budget : INT64_MAX));
      ++out.slices_read;
      if (rows.overflowed) {
        // Cut it into slices of about 3/4 of the budget each, by the rows seen so far per byte.
        const double bytes_per_row = static_cast<double>(rows.bytes) / static_cast<double>(rows.rows);
        const double estimated = std::max(slices.EstimatedRows(a, b) * bytes_per_row,
                                          2.0 * static_cast<double>(rows.bytes));
        const int pieces = static_cast<int>(std::clamp(
            estimated / (0.75 * static_cast<double>(slices.budget)), 2.0, 1024.0));
        auto cut = slices.Split(a, b, pieces);
        pending.insert(pending.end(), cut.rbegin(), cut.rend());  // the earliest is taken next
        continue;
      }
      out.rows_in += rows.rows;
      // Each batch is a piece of one data file, sorted as the table's files are: merged, not
      // sorted again, where they allow it.
      ARROW_RETURN_NOT_OK(ingestor.WriteSortedBatches(std::move(rows.batches)));
      out.full.resize(ingestor.files_written(), rows.bytes >= slices.budget / 2);
    }
    ARROW_ASSIGN_OR_RAISE(out.outputs, ingestor.Finish());
    return arrow::Status::OK();
  }();
  if (!st.ok()) {
    ingestor.Abort();
    return st;
  }
  for (const auto& f : out.outputs) out.rows_out += f.rows;
  return out;
}

}  // namespace timelake
