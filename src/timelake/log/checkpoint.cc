#include "timelake/log/checkpoint.h"

#include <arrow/array.h>
#include <arrow/builder.h>
#include <arrow/io/memory.h>
#include <arrow/table.h>
#include <parquet/arrow/writer.h>

#include "timelake/store/parquet_object.h"

namespace timelake {
namespace {

std::shared_ptr<arrow::DataType> StringMap() {
  return arrow::map(arrow::utf8(), arrow::field("value", arrow::utf8(), true));
}

std::shared_ptr<arrow::Schema> CheckpointSchema() {
  using arrow::field;
  auto txn = arrow::struct_({field("appId", arrow::utf8()), field("version", arrow::int64()),
                             field("lastUpdated", arrow::int64())});
  auto add = arrow::struct_({field("path", arrow::utf8()), field("partitionValues", StringMap()),
                             field("size", arrow::int64()), field("modificationTime", arrow::int64()),
                             field("dataChange", arrow::boolean()), field("stats", arrow::utf8()),
                             field("tags", StringMap())});
  auto remove = arrow::struct_(
      {field("path", arrow::utf8()), field("deletionTimestamp", arrow::int64()),
       field("dataChange", arrow::boolean()), field("extendedFileMetadata", arrow::boolean()),
       field("partitionValues", StringMap()), field("size", arrow::int64()),
       field("tags", StringMap())});
  auto format = arrow::struct_({field("provider", arrow::utf8()), field("options", StringMap())});
  auto metadata = arrow::struct_(
      {field("id", arrow::utf8()), field("name", arrow::utf8()), field("description", arrow::utf8()),
       field("format", format), field("schemaString", arrow::utf8()),
       field("partitionColumns", arrow::list(arrow::utf8())), field("configuration", StringMap()),
       field("createdTime", arrow::int64())});
  auto protocol = arrow::struct_(
      {field("minReaderVersion", arrow::int32()), field("minWriterVersion", arrow::int32()),
       field("readerFeatures", arrow::list(arrow::utf8())),
       field("writerFeatures", arrow::list(arrow::utf8()))});
  return arrow::schema({field("txn", txn), field("add", add), field("remove", remove),
                        field("metaData", metadata), field("protocol", protocol)});
}

// Typed access to a StructBuilder's children, in schema order.
struct Fields {
  arrow::StructBuilder* b;
  template <typename T>
  T* at(int i) const {
    return static_cast<T*>(b->field_builder(i));
  }
};

arrow::Status AppendOptString(arrow::StringBuilder* b, const std::optional<std::string>& v) {
  return v ? b->Append(*v) : b->AppendNull();
}
arrow::Status AppendOptInt(arrow::Int64Builder* b, const std::optional<int64_t>& v) {
  return v ? b->Append(*v) : b->AppendNull();
}

template <typename Map>
arrow::Status AppendMap(arrow::MapBuilder* b, const Map& m) {
  ARROW_RETURN_NOT_OK(b->Append());
  auto* keys = static_cast<arrow::StringBuilder*>(b->key_builder());
  auto* items = static_cast<arrow::StringBuilder*>(b->item_builder());
  for (const auto& [k, v] : m) {
    ARROW_RETURN_NOT_OK(keys->Append(k));
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>) {
      ARROW_RETURN_NOT_OK(items->Append(v));
    } else {
      ARROW_RETURN_NOT_OK(AppendOptString(items, v));
    }
  }
  return arrow::Status::OK();
}

arrow::Status AppendList(arrow::ListBuilder* b, const std::optional<std::vector<std::string>>& v) {
  if (!v) return b->AppendNull();
  ARROW_RETURN_NOT_OK(b->Append());
  auto* values = static_cast<arrow::StringBuilder*>(b->value_builder());
  for (const auto& s : *v) ARROW_RETURN_NOT_OK(values->Append(s));
  return arrow::Status::OK();
}

// --- reading -------------------------------------------------------------------------------

std::shared_ptr<arrow::Array> Child(const arrow::StructArray& s, const char* name) {
  return s.GetFieldByName(name);
}

std::optional<std::string> StrAt(const std::shared_ptr<arrow::Array>& a, int64_t i) {
  if (!a || a->IsNull(i)) return std::nullopt;
  if (a->type_id() == arrow::Type::STRING) return static_cast<const arrow::StringArray&>(*a).GetString(i);
  if (a->type_id() == arrow::Type::LARGE_STRING) {
    return static_cast<const arrow::LargeStringArray&>(*a).GetString(i);
  }
  return std::nullopt;
}

std::optional<int64_t> IntAt(const std::shared_ptr<arrow::Array>& a, int64_t i) {
  if (!a || a->IsNull(i)) return std::nullopt;
  switch (a->type_id()) {
    case arrow::Type::INT64: return static_cast<const arrow::Int64Array&>(*a).Value(i);
    case arrow::Type::INT32: return static_cast<const arrow::Int32Array&>(*a).Value(i);
    default: return std::nullopt;
  }
}

std::optional<bool> BoolAt(const std::shared_ptr<arrow::Array>& a, int64_t i) {
  if (!a || a->IsNull(i) || a->type_id() != arrow::Type::BOOL) return std::nullopt;
  return static_cast<const arrow::BooleanArray&>(*a).Value(i);
}

template <typename Out>
Out MapAt(const std::shared_ptr<arrow::Array>& a, int64_t i) {
  Out out;
  if (!a || a->IsNull(i) || a->type_id() != arrow::Type::MAP) return out;
  const auto& m = static_cast<const arrow::MapArray&>(*a);
  auto keys = m.keys();
  auto items = m.items();
  for (int64_t j = m.value_offset(i); j < m.value_offset(i) + m.value_length(i); ++j) {
    auto k = StrAt(keys, j);
    if (!k) continue;
    auto v = StrAt(items, j);
    if constexpr (std::is_same_v<Out, std::map<std::string, std::string>>) {
      if (v) out.emplace(*k, *v);
    } else {
      out.emplace(*k, v);
    }
  }
  return out;
}

std::optional<std::vector<std::string>> ListAt(const std::shared_ptr<arrow::Array>& a, int64_t i) {
  if (!a || a->IsNull(i) || a->type_id() != arrow::Type::LIST) return std::nullopt;
  const auto& l = static_cast<const arrow::ListArray&>(*a);
  std::vector<std::string> out;
  auto values = l.values();
  for (int64_t j = l.value_offset(i); j < l.value_offset(i) + l.value_length(i); ++j) {
    if (auto s = StrAt(values, j)) out.push_back(*s);
  }
  return out;
}

const arrow::StructArray* StructColumn(const arrow::Table& table, const char* name,
                                       std::shared_ptr<arrow::Array>* holder) {
  auto column = table.GetColumnByName(name);
  if (!column || column->num_chunks() != 1 || column->type()->id() != arrow::Type::STRUCT) {
    return nullptr;
  }
  *holder = column->chunk(0);
  return static_cast<const arrow::StructArray*>(holder->get());
}

}  // namespace

arrow::Result<CheckpointBody> WriteCheckpoint(const Snapshot& snapshot, int64_t tombstone_cutoff_ms,
                                              int64_t txn_cutoff_ms) {
  auto schema = CheckpointSchema();
  std::vector<std::unique_ptr<arrow::ArrayBuilder>> builders;
  for (const auto& f : schema->fields()) {
    std::unique_ptr<arrow::ArrayBuilder> b;
    ARROW_RETURN_NOT_OK(arrow::MakeBuilder(arrow::default_memory_pool(), f->type(), &b));
    builders.push_back(std::move(b));
  }
  auto* txn = static_cast<arrow::StructBuilder*>(builders[0].get());
  auto* add = static_cast<arrow::StructBuilder*>(builders[1].get());
  auto* remove = static_cast<arrow::StructBuilder*>(builders[2].get());
  auto* meta = static_cast<arrow::StructBuilder*>(builders[3].get());
  auto* proto = static_cast<arrow::StructBuilder*>(builders[4].get());
  ARROW_ASSIGN_OR_RAISE(const auto txns, snapshot.Txns());
  ARROW_ASSIGN_OR_RAISE(const auto tombstones, snapshot.Tombstones());
  CheckpointBody body;
  // Appends one row that is null in every column except `which`.
  auto begin_row = [&](arrow::StructBuilder* which) -> arrow::Status {
    for (auto& b : builders) {
      if (b.get() == which) {
        ARROW_RETURN_NOT_OK(which->Append());
      } else {
        ARROW_RETURN_NOT_OK(b->AppendNull());
      }
    }
    ++body.num_actions;
    return arrow::Status::OK();
  };

  {
    ARROW_RETURN_NOT_OK(begin_row(proto));
    Fields f{proto};
    const Protocol& p = snapshot.protocol;
    ARROW_RETURN_NOT_OK(f.at<arrow::Int32Builder>(0)->Append(p.min_reader_version));
    ARROW_RETURN_NOT_OK(f.at<arrow::Int32Builder>(1)->Append(p.min_writer_version));
    ARROW_RETURN_NOT_OK(AppendList(f.at<arrow::ListBuilder>(2), p.reader_features));
    ARROW_RETURN_NOT_OK(AppendList(f.at<arrow::ListBuilder>(3), p.writer_features));
  }
  {
    ARROW_RETURN_NOT_OK(begin_row(meta));
    Fields f{meta};
    const Metadata& m = snapshot.metadata;
    ARROW_RETURN_NOT_OK(f.at<arrow::StringBuilder>(0)->Append(m.id));
    ARROW_RETURN_NOT_OK(AppendOptString(f.at<arrow::StringBuilder>(1), m.name));
    ARROW_RETURN_NOT_OK(AppendOptString(f.at<arrow::StringBuilder>(2), m.description));
    auto* format = f.at<arrow::StructBuilder>(3);
    ARROW_RETURN_NOT_OK(format->Append());
    ARROW_RETURN_NOT_OK(static_cast<arrow::StringBuilder*>(format->field_builder(0))->Append(m.format_provider));
    ARROW_RETURN_NOT_OK(AppendMap(static_cast<arrow::MapBuilder*>(format->field_builder(1)), m.format_options));
    ARROW_RETURN_NOT_OK(f.at<arrow::StringBuilder>(4)->Append(m.schema_string));
    ARROW_RETURN_NOT_OK(AppendList(f.at<arrow::ListBuilder>(5), m.partition_columns));
    ARROW_RETURN_NOT_OK(AppendMap(f.at<arrow::MapBuilder>(6), m.configuration));
    ARROW_RETURN_NOT_OK(AppendOptInt(f.at<arrow::Int64Builder>(7), m.created_time));
  }
  for (const auto& [path, a] : snapshot.files) {
    ARROW_RETURN_NOT_OK(begin_row(add));
    Fields f{add};
    ARROW_RETURN_NOT_OK(f.at<arrow::StringBuilder>(0)->Append(a.path));
    ARROW_RETURN_NOT_OK(AppendMap(f.at<arrow::MapBuilder>(1), a.partition_values));
    ARROW_RETURN_NOT_OK(f.at<arrow::Int64Builder>(2)->Append(a.size));
    ARROW_RETURN_NOT_OK(f.at<arrow::Int64Builder>(3)->Append(a.modification_time));
    ARROW_RETURN_NOT_OK(f.at<arrow::BooleanBuilder>(4)->Append(a.data_change));
    ARROW_RETURN_NOT_OK(AppendOptString(f.at<arrow::StringBuilder>(5), a.stats));
    ARROW_RETURN_NOT_OK(AppendMap(f.at<arrow::MapBuilder>(6), a.tags));
    ++body.num_add_files;
  }
  const int64_t live_rows = body.num_actions;
  for (const auto& [app_id, t] : txns) {
    if (t.last_updated && *t.last_updated < txn_cutoff_ms) continue;
    ARROW_RETURN_NOT_OK(begin_row(txn));
    Fields f{txn};
    ARROW_RETURN_NOT_OK(f.at<arrow::StringBuilder>(0)->Append(t.app_id));
    ARROW_RETURN_NOT_OK(f.at<arrow::Int64Builder>(1)->Append(t.version));
    ARROW_RETURN_NOT_OK(AppendOptInt(f.at<arrow::Int64Builder>(2), t.last_updated));
  }
  const int64_t txn_rows = body.num_actions - live_rows;
  for (const auto& [path, r] : tombstones) {
    if (r.deletion_timestamp.value_or(0) < tombstone_cutoff_ms) continue;
    ARROW_RETURN_NOT_OK(begin_row(remove));
    Fields f{remove};
    ARROW_RETURN_NOT_OK(f.at<arrow::StringBuilder>(0)->Append(r.path));
    ARROW_RETURN_NOT_OK(AppendOptInt(f.at<arrow::Int64Builder>(1), r.deletion_timestamp));
    ARROW_RETURN_NOT_OK(f.at<arrow::BooleanBuilder>(2)->Append(r.data_change));
    ARROW_RETURN_NOT_OK(f.at<arrow::BooleanBuilder>(3)->Append(r.extended_file_metadata));
    ARROW_RETURN_NOT_OK(AppendMap(f.at<arrow::MapBuilder>(4), r.partition_values));
    ARROW_RETURN_NOT_OK(AppendOptInt(f.at<arrow::Int64Builder>(5), r.size));
    ARROW_RETURN_NOT_OK(AppendMap(f.at<arrow::MapBuilder>(6), r.tags));
  }

  arrow::ArrayVector columns;
  for (auto& b : builders) {
    std::shared_ptr<arrow::Array> array;
    ARROW_RETURN_NOT_OK(b->Finish(&array));
    columns.push_back(std::move(array));
  }
  auto table = arrow::Table::Make(schema, columns);
  ARROW_ASSIGN_OR_RAISE(auto sink, arrow::io::BufferOutputStream::Create());
  auto props = parquet::WriterProperties::Builder()
                   .compression(parquet::Compression::SNAPPY)
                   ->enable_page_checksum()
                   ->build();
  ARROW_ASSIGN_OR_RAISE(auto writer, parquet::arrow::FileWriter::Open(
                                         *schema, arrow::default_memory_pool(), sink, props));
  // Each part in row groups of its own (a WriteTable call starts a new one).
  const int64_t parts[] = {live_rows, txn_rows, body.num_actions - live_rows - txn_rows};
  int64_t offset = 0;
  for (int64_t rows : parts) {
    if (rows > 0) ARROW_RETURN_NOT_OK(writer->WriteTable(*table->Slice(offset, rows), 64 * 1024));
    offset += rows;
  }
  ARROW_RETURN_NOT_OK(writer->Close());
  ARROW_ASSIGN_OR_RAISE(body.data, sink->Finish());
  return body;
}

arrow::Status ReadCheckpoint(const std::shared_ptr<arrow::Buffer>& data, const std::string& origin,
                             Snapshot* snapshot, CheckpointActions which) {
  // Columns we do not understand (stats_parsed, sidecar, …) are simply not looked at.
  std::shared_ptr<arrow::Table> table;
  int64_t file_rows = 0;
  if (which == CheckpointActions::kAll) {
    ARROW_ASSIGN_OR_RAISE(table, ReadParquetBuffer(data, origin));
  } else if (which == CheckpointActions::kLive) {
    ARROW_ASSIGN_OR_RAISE(table, ReadParquetBufferPart(data, origin, {"protocol", "metaData", "add"},
                                                       {"protocol.minReaderVersion", "metaData.id", "add.path"},
                                                       &file_rows));
  } else if (which == CheckpointActions::kTxns) {
    ARROW_ASSIGN_OR_RAISE(table, ReadParquetBufferPart(data, origin, {"txn"}, {"txn.appId"}));
  } else if (which == CheckpointActions::kTombstones) {
    ARROW_ASSIGN_OR_RAISE(table, ReadParquetBufferPart(data, origin, {"remove"}, {"remove.path"}));
  } else {
    ARROW_ASSIGN_OR_RAISE(table, ReadParquetBufferPart(data, origin, {"txn", "remove"},
                                                       {"txn.appId", "remove.path"}));
  }
  ARROW_ASSIGN_OR_RAISE(table, table->CombineChunks());
  bool has_protocol = false, has_metadata = false;
  int64_t live_rows = 0;  // protocol, metaData and add actions read

  std::shared_ptr<arrow::Array> holder;
  if (const auto* p = StructColumn(*table, "protocol", &holder)) {
    for (int64_t i = 0; i < p->length(); ++i) {
      if (p->IsNull(i)) continue;
      Protocol out;
      out.min_reader_version = static_cast<int32_t>(IntAt(Child(*p, "minReaderVersion"), i).value_or(1));
      out.min_writer_version = static_cast<int32_t>(IntAt(Child(*p, "minWriterVersion"), i).value_or(2));
      out.reader_features = ListAt(Child(*p, "readerFeatures"), i);
      out.writer_features = ListAt(Child(*p, "writerFeatures"), i);
      snapshot->protocol = std::move(out);
      has_protocol = true;
      ++live_rows;
    }
  }
  if (const auto* m = StructColumn(*table, "metaData", &holder)) {
    for (int64_t i = 0; i < m->length(); ++i) {
      if (m->IsNull(i)) continue;
      Metadata out;
      out.id = StrAt(Child(*m, "id"), i).value_or("");
      out.name = StrAt(Child(*m, "name"), i);
      out.description = StrAt(Child(*m, "description"), i);
      if (auto format = Child(*m, "format"); format && format->type_id() == arrow::Type::STRUCT) {
        const auto& fs = static_cast<const arrow::StructArray&>(*format);
        out.format_provider = StrAt(fs.GetFieldByName("provider"), i).value_or("parquet");
        out.format_options = MapAt<std::map<std::string, std::string>>(fs.GetFieldByName("options"), i);
      }
      out.schema_string = StrAt(Child(*m, "schemaString"), i).value_or("");
      out.partition_columns = ListAt(Child(*m, "partitionColumns"), i).value_or(std::vector<std::string>{});
      out.configuration = MapAt<std::map<std::string, std::string>>(Child(*m, "configuration"), i);
      out.created_time = IntAt(Child(*m, "createdTime"), i);
      snapshot->metadata = std::move(out);
      has_metadata = true;
      ++live_rows;
    }
  }
  if (const auto* t = StructColumn(*table, "txn", &holder)) {
    auto app_id = Child(*t, "appId"), version = Child(*t, "version"), last = Child(*t, "lastUpdated");
    for (int64_t i = 0; i < t->length(); ++i) {
      if (t->IsNull(i)) continue;
      Txn out;
      out.app_id = StrAt(app_id, i).value_or("");
      out.version = IntAt(version, i).value_or(0);
      out.last_updated = IntAt(last, i);
      snapshot->recent_txns[out.app_id] = std::move(out);
    }
  }
  if (const auto* a = StructColumn(*table, "add", &holder)) {
    auto path = Child(*a, "path"), pv = Child(*a, "partitionValues"), size = Child(*a, "size"),
         mtime = Child(*a, "modificationTime"), change = Child(*a, "dataChange"),
         stats = Child(*a, "stats"), tags = Child(*a, "tags"), dv = Child(*a, "deletionVector");
    const auto* dvs = dv && dv->type_id() == arrow::Type::STRUCT
                          ? static_cast<const arrow::StructArray*>(dv.get())
                          : nullptr;
    for (int64_t i = 0; i < a->length(); ++i) {
      if (a->IsNull(i)) continue;
      AddFile out;
      if (dvs && !dvs->IsNull(i)) {
        DeletionVector d;
        d.storage_type = StrAt(Child(*dvs, "storageType"), i).value_or("");
        d.path_or_inline = StrAt(Child(*dvs, "pathOrInlineDv"), i).value_or("");
        d.offset = IntAt(Child(*dvs, "offset"), i);
        d.size_in_bytes = IntAt(Child(*dvs, "sizeInBytes"), i).value_or(0);
        d.cardinality = IntAt(Child(*dvs, "cardinality"), i).value_or(0);
        out.deletion_vector = std::move(d);
      }
      out.path = StrAt(path, i).value_or("");
      out.partition_values = MapAt<PartitionValues>(pv, i);
      out.size = IntAt(size, i).value_or(0);
      out.modification_time = IntAt(mtime, i).value_or(0);
      out.data_change = BoolAt(change, i).value_or(true);
      out.stats = StrAt(stats, i);
      out.tags = MapAt<std::map<std::string, std::string>>(tags, i);
      std::string key = out.path;
      snapshot->files[key] = std::move(out);
      ++live_rows;
    }
  }
  if (const auto* r = StructColumn(*table, "remove", &holder)) {
    auto path = Child(*r, "path"), ts = Child(*r, "deletionTimestamp"), change = Child(*r, "dataChange"),
         ext = Child(*r, "extendedFileMetadata"), pv = Child(*r, "partitionValues"), size = Child(*r, "size"),
         tags = Child(*r, "tags");
    for (int64_t i = 0; i < r->length(); ++i) {
      if (r->IsNull(i)) continue;
      RemoveFile out;
      out.path = StrAt(path, i).value_or("");
      out.deletion_timestamp = IntAt(ts, i);
      out.data_change = BoolAt(change, i).value_or(false);
      out.extended_file_metadata = BoolAt(ext, i).value_or(false);
      out.partition_values = MapAt<PartitionValues>(pv, i);
      out.size = IntAt(size, i);
      out.tags = MapAt<std::map<std::string, std::string>>(tags, i);
      std::string key = out.path;
      snapshot->recent_tombstones[key] = std::move(out);
    }
  }
  if (which == CheckpointActions::kHistory || which == CheckpointActions::kTxns ||
      which == CheckpointActions::kTombstones) {
    return arrow::Status::OK();
  }
  if (!has_protocol || !has_metadata) {
    return arrow::Status::IOError("checkpoint ", origin, " holds no ",
                                  has_protocol ? "metaData" : "protocol",
                                  " action, which every checkpoint must hold; it is damaged");
  }
  // Every other row is a transaction or a tombstone, or an action no snapshot keeps.
  if (which == CheckpointActions::kLive && file_rows > live_rows) {
    snapshot->history = std::make_shared<CheckpointHistory>(data, origin, file_rows - live_rows);
  }
  return arrow::Status::OK();
}

CheckpointHistory::CheckpointHistory(std::shared_ptr<arrow::Buffer> data, std::string origin,
                                     int64_t entries)
    : origin_(std::move(origin)), entries_(entries), data_(std::move(data)) {}

CheckpointHistory::~CheckpointHistory() = default;

arrow::Status CheckpointHistory::Read(bool txns) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<arrow::Status>& done = txns ? txns_read_ : tombstones_read_;
  if (!done) {
    Snapshot read;
    done = ReadCheckpoint(data_, origin_, &read,
                          txns ? CheckpointActions::kTxns : CheckpointActions::kTombstones);
    if (done->ok()) {
      if (txns) {
        txns_ = std::move(read.recent_txns);
      } else {
        tombstones_ = std::move(read.recent_tombstones);
      }
    }
    // Both read (or found unreadable, which stays the answer): the bytes are not needed.
    if (txns_read_ && tombstones_read_) data_.reset();
  }
  return *done;
}

arrow::Result<const std::map<std::string, Txn>*> CheckpointHistory::txns() const {
  ARROW_RETURN_NOT_OK(Read(/*txns=*/true));
  return &txns_;
}

arrow::Result<const std::map<std::string, RemoveFile>*> CheckpointHistory::tombstones() const {
  ARROW_RETURN_NOT_OK(Read(/*txns=*/false));
  return &tombstones_;
}

}  // namespace timelake
