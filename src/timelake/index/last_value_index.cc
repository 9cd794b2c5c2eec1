#include "timelake/index/last_value_index.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <future>
#include <optional>
#include <map>
#include <set>
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <arrow/array.h>
#include <arrow/array/concatenate.h>
#include <arrow/builder.h>
#include <arrow/array/util.h>
#include <arrow/compute/api.h>
#include <arrow/io/memory.h>
#include <arrow/scalar.h>
#include <arrow/util/key_value_metadata.h>
#include <parquet/arrow/reader.h>

#include "timelake/log/deletion_vector.h"
#include <parquet/arrow/writer.h>
#include <rapidjson/document.h>

#include "timelake/log/actions.h"
#include "timelake/log/data_path.h"
#include "timelake/log/file_tags.h"
#include "timelake/log/schema.h"
#include "timelake/rows/sorted_rows.h"
#include "timelake/util/json.h"
#include "timelake/util/parallel.h"
#include "timelake/util/status.h"
#include "timelake/store/parquet_object.h"

namespace timelake {
namespace {

namespace cp = arrow::compute;

constexpr const char* kBasePrefix = "base-";
constexpr const char* kFilesKey = "timelake.files";
// Reads restarted because a racing fold deleted the base between listing and reading; the last
// attempt ignores the index objects and reads the data files.
constexpr int kReadAttempts = 4;

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

arrow::Result<std::shared_ptr<arrow::Buffer>> ToParquet(const arrow::Table& table,
                                                       const std::vector<std::string>& files) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartArray();
  for (const auto& f : files) w.String(f.data(), static_cast<rapidjson::SizeType>(f.size()));
  w.EndArray();
  auto metadata = arrow::key_value_metadata({kFilesKey}, {buffer.GetString()});
  auto with_files = table.ReplaceSchemaMetadata(metadata);
  ARROW_ASSIGN_OR_RAISE(auto sink, arrow::io::BufferOutputStream::Create());
  auto props = parquet::WriterProperties::Builder()
                   // Snappy: a record is written per commit and read by every fold. ZSTD's
                   // contexts (one per column, created and freed per file) cost more than the
                   // whole small record (bench/README.md, "Where a small append's time goes").
                   .compression(parquet::Compression::SNAPPY)
                   ->enable_page_checksum()
                   ->build();
  auto arrow_props = parquet::ArrowWriterProperties::Builder().store_schema()->build();
  ARROW_RETURN_NOT_OK(parquet::arrow::WriteTable(*with_files, arrow::default_memory_pool(), sink,
                                                 /*chunk_size=*/1 << 20, props, arrow_props));
  return sink->Finish();
}

// A folder name for the table id: the id itself when it is a plain token (a UUID), else a hash.
std::string IdFolder(const std::string& id) {
  bool plain = !id.empty() && id.size() <= 64;
  for (char c : id) {
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_');
  }
  if (plain) return id;
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ULL;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return std::string("h") + hex;
}

struct IndexObject {
  std::shared_ptr<arrow::Table> rows;
  std::vector<std::string> files;
};

// Reads an index object (one GET: they are small) and checks that it is what this table's index
// writes.
arrow::Result<IndexObject> ReadIndexObject(ObjectStore* store, const std::string& path,
                                           const arrow::Schema& expected) {
  ARROW_ASSIGN_OR_RAISE(auto bytes, store->Get(path));
  auto input = std::make_shared<arrow::io::BufferReader>(bytes);
  // Page checksums verified: index objects are not fsynced, and a torn one must fail here (then
  // its files are read from their data) rather than decode as other rows.
  parquet::arrow::FileReaderBuilder builder;
  ARROW_RETURN_NOT_OK(builder.Open(input, VerifyingReaderProperties()));
  std::unique_ptr<parquet::arrow::FileReader> reader;
  ARROW_RETURN_NOT_OK(builder.memory_pool(arrow::default_memory_pool())->Build(&reader));
  IndexObject out;
  ARROW_ASSIGN_OR_RAISE(out.rows, reader->ReadTable());
  auto kv = reader->parquet_reader()->metadata()->key_value_metadata();
  const int found = kv ? kv->FindKey(kFilesKey) : -1;
  rapidjson::Document doc;
  if (found >= 0) doc.Parse(kv->value(found).c_str());
  if (found < 0 || doc.HasParseError() || !doc.IsArray()) {
    return arrow::Status::IOError("last-value index object ", path, " has no file list");
  }
  for (const auto& v : doc.GetArray()) {
    if (!v.IsString()) return arrow::Status::IOError("bad file list in ", path);
    out.files.emplace_back(v.GetString(), v.GetStringLength());
  }
  out.rows = out.rows->ReplaceSchemaMetadata(nullptr);
  if (!out.rows->schema()->Equals(expected, /*check_metadata=*/false)) {
    // Written before add_columns or widen_columns: the same columns but for the ones added
    // since, whose values in those rows are null, and the ones widened since, which hold the
    // narrower type. Anything else is not this table's index.
    const auto& had = *out.rows->schema();
    bool older = had.num_fields() <= expected.num_fields();
    int found = 0;
    std::vector<std::shared_ptr<arrow::ChunkedArray>> columns;
    for (int i = 0; older && i < expected.num_fields(); ++i) {
      const auto& field = expected.field(i);
      const int at = had.GetFieldIndex(field->name());
      if (at >= 0 && had.field(at)->type()->Equals(*field->type())) {
        columns.push_back(out.rows->column(at));
        ++found;
      } else if (at >= 0 && DeltaAllowsWidening(*had.field(at)->type(), *field->type())) {
        ARROW_ASSIGN_OR_RAISE(auto cast, cp::Cast(out.rows->column(at), field->type()));
        columns.push_back(cast.chunked_array());
        ++found;
      } else if (at < 0 && field->nullable()) {
        ARROW_ASSIGN_OR_RAISE(auto nulls, arrow::MakeArrayOfNull(field->type(), out.rows->num_rows()));
        columns.push_back(std::make_shared<arrow::ChunkedArray>(nulls));
      } else {
        older = false;
      }
    }
    if (!older || found != had.num_fields()) {
      return arrow::Status::IOError("last-value index object ", path,
                                    " does not have the table's schema");
    }
    out.rows = arrow::Table::Make(arrow::schema(expected.fields()), columns, out.rows->num_rows());
  }
  return out;
}

// A data file's columns in the storage schema: other engines may order columns differently,
// leave out nullable ones or store other physical types.
arrow::Result<std::shared_ptr<arrow::Table>> ConformToStorage(
    const std::shared_ptr<arrow::Table>& rows, const arrow::Schema& storage) {
  if (rows->schema()->Equals(storage, /*check_metadata=*/false)) return rows;
  std::vector<std::shared_ptr<arrow::ChunkedArray>> columns;
  for (const auto& field : storage.fields()) {
    auto column = rows->GetColumnByName(field->name());
    if (!column) {
      ARROW_ASSIGN_OR_RAISE(auto nulls, arrow::MakeArrayOfNull(field->type(), rows->num_rows()));
      column = std::make_shared<arrow::ChunkedArray>(nulls);
    } else if (!column->type()->Equals(*field->type())) {
      ARROW_ASSIGN_OR_RAISE(auto cast, cp::Cast(column, field->type()));
      column = cast.chunked_array();
    }
    columns.push_back(std::move(column));
  }
  return arrow::Table::Make(arrow::schema(storage.fields()), columns, rows->num_rows());
}

arrow::Result<std::shared_ptr<arrow::Table>> EmptyState(const arrow::Schema& storage) {
  arrow::FieldVector fields = storage.fields();
  fields.push_back(arrow::field(kSeqColumn, arrow::int64(), false));
  return arrow::Table::MakeEmpty(arrow::schema(fields));
}

}  // namespace


struct LastValueIndex::Object : IndexObject {};

struct LastValueIndex::Cached {
  int64_t size = -1;
  int64_t modified_ms = 0;
  std::shared_ptr<const Object> object;
};

LastValueIndex::~LastValueIndex() = default;

std::vector<std::shared_ptr<const LastValueIndex::Object>> LastValueIndex::ReadObjects(
    const std::vector<ObjectMeta>& metas, const arrow::Schema& expected,
    std::vector<arrow::Status>* errors) {
  constexpr size_t kParallelReads = 8;
  std::vector<std::shared_ptr<const Object>> out(metas.size());
  errors->assign(metas.size(), arrow::Status::OK());
  std::vector<size_t> missing;
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    for (size_t i = 0; i < metas.size(); ++i) {
      auto it = cache_->find(metas[i].path);
      if (it != cache_->end() && it->second.size == metas[i].size &&
          it->second.modified_ms == metas[i].modified_ms) {
        out[i] = it->second.object;
      } else {
        missing.push_back(i);
      }
    }
  }
  auto read_one = [&](size_t i) {
    auto object = ReadIndexObject(store_.get(), metas[i].path, expected);
    if (!object.ok()) {
      (*errors)[i] = object.status();
      return;
    }
    auto shared = std::make_shared<Object>();
    static_cast<IndexObject&>(*shared) = std::move(*object);
    out[i] = std::move(shared);
  };
  auto read = [&](size_t i) {
    arrow::Status thrown = NoThrow("reading an index object", [&] {
      read_one(i);
      return arrow::Status::OK();
    });
    if (!thrown.ok()) (*errors)[i] = thrown;
  };
  for (size_t start = 0; start < missing.size(); start += kParallelReads) {
    const size_t end = std::min(missing.size(), start + kParallelReads);
    std::vector<std::future<void>> running;
    for (size_t j = start + 1; j < end; ++j) running.push_back(AsyncOrDeferred([&read, &missing, j] { read(missing[j]); }));
    read(missing[start]);
    for (auto& r : running) r.get();
  }
  std::lock_guard<std::mutex> lock(cache_mutex_);
  for (size_t i : missing) {
    if (out[i]) (*cache_)[metas[i].path] = Cached{metas[i].size, metas[i].modified_ms, out[i]};
  }
  return out;
}

void LastValueIndex::KeepOnly(const std::vector<ObjectMeta>& listing) {
  std::unordered_set<std::string> listed;
  for (const auto& meta : listing) listed.insert(meta.path);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  for (auto it = cache_->begin(); it != cache_->end();) {
    it = listed.count(it->first) ? std::next(it) : cache_->erase(it);
  }
}

LastValueIndex::LastValueIndex(std::shared_ptr<ObjectStore> store, std::string table_path,
                               const std::string& table_id, Contract contract,
                               std::shared_ptr<arrow::Schema> storage)
    : store_(std::move(store)),
      table_path_(std::move(table_path)),
      root_(table_path_ + "/_timelake/lvi/"),
      dir_(root_ + IdFolder(table_id) + "/"),
      contract_(std::move(contract)),
      storage_(std::move(storage)),
      cache_(std::make_unique<std::unordered_map<std::string, Cached>>()) {}

arrow::Status LastValueIndex::Record(int64_t version, const std::vector<std::string>& files,
                                     const std::shared_ptr<arrow::Table>& newest) {
  ARROW_ASSIGN_OR_RAISE(auto data, ToParquet(*newest, files));
  return store_->PutDerived(dir_ + RecordName(version, ""), data);
}

arrow::Result<std::shared_ptr<arrow::Table>> LastValueIndex::RecordOf(
    int64_t version, const std::vector<std::string>& files) {
  arrow::FieldVector fields = storage_->fields();
  fields.push_back(arrow::field(kSeqColumn, arrow::int64(), false));
  auto object = ReadIndexObject(store_.get(), dir_ + RecordName(version, ""), arrow::Schema(fields));
  if (!object.ok()) return nullptr;
  std::vector<std::string> want = files, have = object->files;
  std::sort(want.begin(), want.end());
  std::sort(have.begin(), have.end());
  if (want != have) return nullptr;
  return object->rows;
}

arrow::Result<std::shared_ptr<arrow::Table>> LastValueIndex::NewestOfFile(const AddFile& add,
                                                                          int64_t seq) {
  ARROW_ASSIGN_OR_RAISE(auto path, DataFileStorePath(table_path_, add.path));
  ARROW_ASSIGN_OR_RAISE(auto rows, ReadParquetTable(store_.get(), path));
  if (add.deletion_vector) {
    ARROW_ASSIGN_OR_RAISE(auto deleted, ReadDeletionVector(store_.get(), table_path_, *add.deletion_vector));
    arrow::BooleanBuilder keep;
    ARROW_RETURN_NOT_OK(keep.Reserve(rows->num_rows()));
    size_t next = 0;
    for (int64_t i = 0; i < rows->num_rows(); ++i) {
      const bool gone = next < deleted.size() && deleted[next] == static_cast<uint64_t>(i);
      if (gone) ++next;
      keep.UnsafeAppend(!gone);
    }
    std::shared_ptr<arrow::Array> mask;
    ARROW_RETURN_NOT_OK(keep.Finish(&mask));
    ARROW_ASSIGN_OR_RAISE(auto kept, cp::Filter(rows, mask));
    rows = kept.table();
  }
  ARROW_ASSIGN_OR_RAISE(rows, ConformToStorage(rows, *storage_));
  // A small file (a gateway's append of a few rows) goes to MergeNewest whole: reducing it here
  // first cost a sort, a take and a filter per file, most of latest()'s time over the few dozen
  // files after the newest base.
  if (rows->num_rows() <= kMergeWholeRows) return WithSequence(rows, seq);
  std::vector<cp::SortKey> keys;
  for (const auto& k : contract_.series_key) keys.emplace_back(k);
  keys.emplace_back(contract_.time_column);
  ARROW_ASSIGN_OR_RAISE(auto indices, cp::SortIndices(arrow::Datum(rows), cp::SortOptions(keys)));
  ARROW_ASSIGN_OR_RAISE(auto sorted, cp::Take(rows, indices));
  ARROW_ASSIGN_OR_RAISE(auto newest, NewestRows(sorted.table(), contract_));
  return WithSequence(newest, seq);
}

arrow::Result<std::vector<std::shared_ptr<arrow::Table>>> LastValueIndex::NewestOf(
    const std::vector<const AddFile*>& adds, const std::vector<int64_t>& seqs) {
  // One GET each, several at a time (an object store's latency, not its bandwidth, bounds them).
  constexpr int kParallelReads = 8;
  std::vector<std::shared_ptr<arrow::Table>> out(adds.size());
  ARROW_RETURN_NOT_OK(RunParallel(adds.size(), kParallelReads, [&](size_t i) -> arrow::Status {
    ARROW_ASSIGN_OR_RAISE(out[i], NewestOfFile(*adds[i], seqs[i]));
    return arrow::Status::OK();
  }));
  return out;
}

arrow::Result<std::shared_ptr<arrow::Table>> LastValueIndex::NewestOfFiles(
    const std::vector<std::string>& paths, int64_t seq) {
  std::vector<AddFile> adds(paths.size());
  std::vector<const AddFile*> pointers;
  for (size_t i = 0; i < paths.size(); ++i) {
    adds[i].path = paths[i];
    pointers.push_back(&adds[i]);
  }
  ARROW_ASSIGN_OR_RAISE(auto pieces, NewestOf(pointers, std::vector<int64_t>(paths.size(), seq)));
  if (pieces.empty()) return nullptr;
  // Equal sequence numbers: MergeNewest keeps the row it meets last, which must be the earliest
  // write for `first` (as read-time deduplication keeps it).
  if (contract_.dedup == DedupPolicy::kFirst) std::reverse(pieces.begin(), pieces.end());
  return MergeNewest(pieces, contract_);
}

arrow::Result<IndexState> LastValueIndex::Read(const Snapshot& snapshot) {
  for (int attempt = 1;; ++attempt) {
    auto state = TryRead(snapshot, /*use_objects=*/attempt < kReadAttempts);
    if (state.ok() || !IsNotFound(state.status()) || attempt >= kReadAttempts) return state;
  }
}

arrow::Result<IndexState> LastValueIndex::TryRead(const Snapshot& snapshot, bool use_objects) {
  IndexState state;
  state.version = snapshot.version;
  arrow::FieldVector fields = storage_->fields();
  fields.push_back(arrow::field(kSeqColumn, arrow::int64(), false));
  const arrow::Schema object_schema(fields);

  // The live files: timelake's (tagged with a sequence number and a time range) and others'.
  struct Live {
    const AddFile* add;
    int64_t seq;
  };
  std::unordered_map<std::string, Live> tagged;
  std::vector<const AddFile*> foreign;
  std::set<int64_t> live_chunks;
  // Rows another engine deleted with deletion vectors may still be in the index's objects (and
  // a vector keeps its file's path): with any vector live, every file is read instead.
  bool deletion_vectors = false;
  for (const auto& [path, add] : snapshot.files) {
    deletion_vectors = deletion_vectors || add.deletion_vector.has_value();
    const int64_t seq = TagInt(add, kSeqTag, -1);
    const int64_t min_time = TagInt(add, kMinTimeTag, INT64_MIN);
    if (seq >= 0 && min_time != INT64_MIN) {
      tagged.emplace(path, Live{&add, seq});
      live_chunks.insert(ChunkOrdinal(contract_.chunk, min_time));
      state.tagged_files.push_back(path);
    } else {
      foreign.push_back(&add);
    }
  }
  // A file an object summarises but the snapshot no longer has: were its rows kept (or dropped
  // with their whole chunk)?
  auto removal_explained = [&](const std::string& path) {
    // A history that cannot be read explains nothing: the files are read instead.
    auto found = snapshot.FindTombstone(path);
    if (!found.ok() || *found == nullptr) return false;
    const RemoveFile& t = **found;
    auto by = t.tags.find(kRemovedByTag);
    if (by == t.tags.end()) return !t.data_change;
    if (by->second == kRemovedByCompaction) return true;
    if (by->second == kRemovedByRetention) {
      auto min_time = t.tags.find(kMinTimeTag);
      if (min_time == t.tags.end()) return false;
      auto micros = ParseInt64(min_time->second);
      return micros && !live_chunks.count(ChunkOrdinal(contract_.chunk, *micros));
    }
    return false;
  };

  std::vector<std::shared_ptr<arrow::Table>> pieces;
  std::unordered_set<std::string> covered;
  if (use_objects) {
    ARROW_ASSIGN_OR_RAISE(auto listing, store_->List(dir_));
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
    KeepOnly(listing);
    std::vector<std::shared_ptr<const Object>> objects;
    std::vector<arrow::Status> errors;
    if (base) {
      auto read = ReadObjects({*base}, object_schema, &errors);
      if (!read[0] && IsNotFound(errors[0])) return errors[0];  // start over
      if (read[0]) {
        objects.push_back(std::move(read[0]));
        state.bytes += base->size;
      } else {
        state.base_version = -1;  // unreadable: its files are read instead
      }
    }
    std::vector<ObjectMeta> records;
    for (const auto& [v, meta] : deltas) {
      if (v > state.base_version) records.push_back(meta);
    }
    // A record that is missing (a racing fold deleted it after writing a newer base) or
    // unreadable only means its files are read.
    auto read = ReadObjects(records, object_schema, &errors);
    for (size_t i = 0; i < records.size(); ++i) {
      if (!read[i]) continue;
      objects.push_back(std::move(read[i]));
      state.bytes += records[i].size;
      ++state.records;
    }
    for (const auto& object : objects) {
      for (const auto& path : object->files) {
        if (tagged.count(path)) {
          covered.insert(path);
        } else if (!removal_explained(path)) {
          state.rebuilt = true;
        }
      }
      pieces.push_back(object->rows);
    }
    if (deletion_vectors) state.rebuilt = true;
    if (state.rebuilt) {
      pieces.clear();
      covered.clear();
      state.base_version = -1;
      state.records = 0;
    }
  }
  // In write order (sequence number, then order within the commit), so that files of one commit
  // holding the same (series, time) resolve as read-time deduplication does: MergeNewest keeps
  // the one it meets last among equal sequence numbers, which is the earliest for `first`.
  std::vector<std::pair<std::pair<int64_t, int64_t>, const Live*>> unread;
  for (const auto& [path, live] : tagged) {
    if (!covered.count(path)) unread.push_back({{live.seq, TagInt(*live.add, kOrderTag, 0)}, &live});
  }
  std::sort(unread.begin(), unread.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  if (contract_.dedup == DedupPolicy::kFirst) std::reverse(unread.begin(), unread.end());
  {
    std::vector<const AddFile*> adds;
    std::vector<int64_t> seqs;
    for (const auto& [key, live] : unread) {
      adds.push_back(live->add);
      seqs.push_back(live->seq);
    }
    ARROW_ASSIGN_OR_RAISE(auto newest, NewestOf(adds, seqs));
    for (auto& rows : newest) pieces.push_back(std::move(rows));
    state.files_read += static_cast<int64_t>(adds.size());
  }

  if (pieces.empty()) {
    ARROW_ASSIGN_OR_RAISE(state.tagged_rows, EmptyState(*storage_));
  } else {
    ARROW_ASSIGN_OR_RAISE(auto merged, MergeNewest(pieces, contract_));
    // Rows of chunks that no live file holds any more were removed by retention.
    ARROW_ASSIGN_OR_RAISE(auto time,
                          ContiguousColumn(merged->GetColumnByName(contract_.time_column)));
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
    state.tagged_rows = std::move(merged);
  }
  state.rows = state.tagged_rows;
  if (!foreign.empty()) {
    // Other engines' files carry no sequence number; like the SQL read path, treat them as oldest.
    pieces.assign(1, state.tagged_rows);
    ARROW_ASSIGN_OR_RAISE(auto newest, NewestOf(foreign, std::vector<int64_t>(foreign.size(), 0)));
    for (auto& rows : newest) pieces.push_back(std::move(rows));
    ARROW_ASSIGN_OR_RAISE(state.rows, MergeNewest(pieces, contract_));
  }
  return state;
}

arrow::Result<int64_t> LastValueIndex::NewestBase() {
  ARROW_ASSIGN_OR_RAISE(auto listing, store_->List(dir_));
  int64_t newest = -1;
  for (const auto& meta : listing) {
    if (auto b = RecordVersion(FileName(meta.path), kBasePrefix)) newest = std::max(newest, *b);
  }
  return newest;
}

arrow::Result<int64_t> LastValueIndex::Fold(const IndexState& state) {
  ARROW_ASSIGN_OR_RAISE(auto data, ToParquet(*state.tagged_rows, state.tagged_files));
  ARROW_RETURN_NOT_OK(store_->PutDerived(dir_ + RecordName(state.version, kBasePrefix), data));
  ARROW_ASSIGN_OR_RAISE(auto listing, store_->List(root_));
  std::vector<std::string> obsolete_paths;
  for (const auto& meta : listing) {
    bool obsolete = true;  // objects outside this table's folder belong to no live table
    if (meta.path.compare(0, dir_.size(), dir_) == 0) {
      const std::string name = FileName(meta.path);
      auto v = RecordVersion(name, "");
      auto b = RecordVersion(name, kBasePrefix);
      obsolete = (v && *v <= state.version) || (b && *b < state.version);
    }
    if (obsolete) obsolete_paths.push_back(meta.path);
  }
  ARROW_RETURN_NOT_OK(store_->DeleteMany(obsolete_paths));
  return static_cast<int64_t>(obsolete_paths.size());
}

}  // namespace timelake
