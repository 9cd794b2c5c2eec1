#include "timelake/index/last_value_index.h"

#include <charconv>
#include <map>
#include <set>

#include <arrow/array.h>
#include <arrow/array/concatenate.h>
#include <arrow/builder.h>
#include <arrow/array/util.h>
#include <arrow/compute/api.h>
#include <arrow/io/memory.h>
#include <arrow/scalar.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>

#include "timelake/ingest/arrange.h"
#include "timelake/log/actions.h"
#include "timelake/log/file_tags.h"
#include "timelake/store/parquet_object.h"

namespace timelake {
namespace {

namespace cp = arrow::compute;

constexpr const char* kBasePrefix = "base-";

std::string FileName(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "<20 digits>.parquet" → version, with an optional prefix before the digits.
std::optional<int64_t> RecordVersion(const std::string& name, const std::string& prefix) {
  const std::string suffix = ".parquet";
  if (name.size() != prefix.size() + 20 + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(prefix.size() + 20, suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  int64_t v = 0;
  const char* begin = name.data() + prefix.size();
  auto [p, ec] = std::from_chars(begin, begin + 20, v);
  if (ec != std::errc() || p != begin + 20) return std::nullopt;
  return v;
}

std::string RecordName(int64_t version, const std::string& prefix) {
  return prefix + CommitFileName(version).substr(0, 20) + ".parquet";
}

arrow::Result<std::shared_ptr<arrow::Buffer>> ToParquet(const arrow::Table& table) {
  ARROW_ASSIGN_OR_RAISE(auto sink, arrow::io::BufferOutputStream::Create());
  auto props = parquet::WriterProperties::Builder().compression(parquet::Compression::ZSTD)->build();
  ARROW_RETURN_NOT_OK(parquet::arrow::WriteTable(table, arrow::default_memory_pool(), sink,
                                                 /*chunk_size=*/1 << 20, props));
  return sink->Finish();
}

}  // namespace

arrow::Result<std::shared_ptr<arrow::Table>> ReadParquetObject(ObjectStore* store,
                                                               const std::string& path) {
  return ReadParquetTable(store, path);
}

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

LastValueIndex::LastValueIndex(std::shared_ptr<ObjectStore> store, std::string table_path,
                               Contract contract, std::shared_ptr<arrow::Schema> storage)
    : store_(std::move(store)),
      table_path_(std::move(table_path)),
      contract_(std::move(contract)),
      storage_(std::move(storage)) {}

arrow::Status LastValueIndex::Record(int64_t version, const std::shared_ptr<arrow::Table>& newest) {
  ARROW_ASSIGN_OR_RAISE(auto data, ToParquet(*newest));
  return store_->Put(Dir() + RecordName(version, ""), data);
}

arrow::Result<IndexState> LastValueIndex::Read(const Snapshot& snapshot) {
  IndexState state;
  ARROW_ASSIGN_OR_RAISE(auto listing, store_->List(Dir()));
  std::map<int64_t, ObjectMeta> deltas;
  std::optional<ObjectMeta> base;
  for (const auto& meta : listing) {
    const std::string name = FileName(meta.path);
    if (auto v = RecordVersion(name, ""); v && *v <= snapshot.version) {
      deltas.emplace(*v, meta);
    } else if (auto b = RecordVersion(name, kBasePrefix); b && *b <= snapshot.version) {
      if (*b > state.base_version) {
        state.base_version = *b;
        base = meta;
      }
    }
  }
  std::vector<std::shared_ptr<arrow::Table>> records;
  auto add_record = [&](const ObjectMeta& meta) -> arrow::Status {
    ARROW_ASSIGN_OR_RAISE(auto rows, ReadParquetObject(store_.get(), meta.path));
    records.push_back(std::move(rows));
    state.bytes += meta.size;
    return arrow::Status::OK();
  };
  if (base) ARROW_RETURN_NOT_OK(add_record(*base));
  state.covered_version = state.base_version;
  std::set<int64_t> covered;
  for (const auto& [v, meta] : deltas) {
    if (v <= state.base_version) continue;
    ARROW_RETURN_NOT_OK(add_record(meta));
    state.records.push_back(meta.path);
    covered.insert(v);
    state.covered_version = std::max(state.covered_version, v);
  }
  // Commits without a record: read their files.
  std::set<int64_t> live_chunks;
  for (const auto& [path, add] : snapshot.files) {
    const int64_t seq = TagInt(add, kSeqTag, -1);
    if (auto it = add.tags.find(kMinTimeTag); it != add.tags.end()) {
      if (auto min_time = ParseInt64(it->second)) {
        live_chunks.insert(ChunkOrdinal(contract_.chunk, *min_time));
      }
    }
    if (seq >= 0 && (seq <= state.base_version || covered.count(seq))) continue;
    ARROW_ASSIGN_OR_RAISE(auto rows, ReadParquetObject(store_.get(), table_path_ + "/" + path));
    std::vector<cp::SortKey> keys;
    for (const auto& k : contract_.series_key) keys.emplace_back(k);
    keys.emplace_back(contract_.time_column);
    ARROW_ASSIGN_OR_RAISE(auto indices, cp::SortIndices(arrow::Datum(rows), cp::SortOptions(keys)));
    ARROW_ASSIGN_OR_RAISE(auto sorted, cp::Take(rows, indices));
    ARROW_ASSIGN_OR_RAISE(auto newest, NewestRows(sorted.table(), contract_));
    ARROW_ASSIGN_OR_RAISE(newest, WithSequence(newest, std::max<int64_t>(seq, 0)));
    records.push_back(std::move(newest));
    state.covered_version = std::max(state.covered_version, seq);
  }
  if (records.empty()) {
    arrow::FieldVector fields = storage_->fields();
    fields.push_back(arrow::field(kSeqColumn, arrow::int64(), false));
    ARROW_ASSIGN_OR_RAISE(state.rows, arrow::Table::MakeEmpty(arrow::schema(fields)));
    state.covered_version = snapshot.version;
    return state;
  }
  ARROW_ASSIGN_OR_RAISE(auto merged, MergeNewest(records, contract_));
  // Drop series rows whose chunk is gone (retention removed it).
  ARROW_ASSIGN_OR_RAISE(auto time, ContiguousColumn(merged->GetColumnByName(contract_.time_column)));
  const auto& ts = static_cast<const arrow::TimestampArray&>(*time);
  arrow::BooleanBuilder keep;
  ARROW_RETURN_NOT_OK(keep.Reserve(ts.length()));
  bool all = true;
  for (int64_t i = 0; i < ts.length(); ++i) {
    const bool live = live_chunks.count(ChunkOrdinal(contract_.chunk, ts.Value(i))) > 0;
    all = all && live;
    keep.UnsafeAppend(live);
  }
  if (!all) {
    std::shared_ptr<arrow::Array> mask;
    ARROW_RETURN_NOT_OK(keep.Finish(&mask));
    ARROW_ASSIGN_OR_RAISE(auto filtered, cp::Filter(merged, mask));
    merged = filtered.table();
  }
  state.rows = merged;
  state.covered_version = snapshot.version;
  return state;
}

arrow::Result<int64_t> LastValueIndex::Fold(const IndexState& state, int64_t version) {
  ARROW_ASSIGN_OR_RAISE(auto data, ToParquet(*state.rows));
  ARROW_RETURN_NOT_OK(store_->Put(Dir() + RecordName(version, kBasePrefix), data));
  ARROW_ASSIGN_OR_RAISE(auto listing, store_->List(Dir()));
  int64_t deleted = 0;
  for (const auto& meta : listing) {
    const std::string name = FileName(meta.path);
    auto v = RecordVersion(name, "");
    auto b = RecordVersion(name, kBasePrefix);
    if ((v && *v <= version) || (b && *b < version)) {
      ARROW_RETURN_NOT_OK(store_->Delete(meta.path));
      ++deleted;
    }
  }
  return deleted;
}

}  // namespace timelake
