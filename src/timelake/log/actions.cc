#include "timelake/log/actions.h"

#include <charconv>
#include <cstdio>

#include <arrow/status.h>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include "timelake/util/json.h"

namespace timelake {
namespace {

using Writer = JsonWriter;
using Value = rapidjson::Value;

void WriteStringMap(Writer& w, const std::map<std::string, std::string>& m) {
  w.StartObject();
  for (const auto& [k, v] : m) {
    w.Key(k);
    w.String(v);
  }
  w.EndObject();
}

void WritePartitionValues(Writer& w, const PartitionValues& m) {
  w.StartObject();
  for (const auto& [k, v] : m) {
    w.Key(k);
    if (v) {
      w.String(*v);
    } else {
      w.Null();
    }
  }
  w.EndObject();
}

void WriteStringList(Writer& w, const std::vector<std::string>& list) {
  w.StartArray();
  for (const auto& s : list) w.String(s);
  w.EndArray();
}

void WriteCommitInfo(Writer& w, const CommitInfo& c) {
  w.StartObject();
  w.Key("commitInfo");
  w.StartObject();
  w.Key("timestamp");
  w.Int64(c.timestamp);
  w.Key("operation");
  w.String(c.operation);
  w.Key("operationParameters");
  WriteStringMap(w, c.operation_parameters);
  if (c.read_version) {
    w.Key("readVersion");
    w.Int64(*c.read_version);
  }
  w.Key("isolationLevel");
  w.String(c.isolation_level);
  w.Key("isBlindAppend");
  w.Bool(c.is_blind_append);
  if (!c.metrics.empty()) {
    w.Key("operationMetrics");
    w.StartObject();
    for (const auto& [k, v] : c.metrics) {
      w.Key(k);
      w.String(std::to_string(v));
    }
    w.EndObject();
  }
  w.Key("engineInfo");
  w.String(c.engine_info);
  w.Key("txnId");
  w.String(c.txn_id);
  if (c.table_id) {
    w.Key("timelakeTableId");
    w.String(*c.table_id);
  }
  w.EndObject();
  w.EndObject();
}

void WriteProtocol(Writer& w, const Protocol& p) {
  w.StartObject();
  w.Key("protocol");
  w.StartObject();
  w.Key("minReaderVersion");
  w.Int(p.min_reader_version);
  w.Key("minWriterVersion");
  w.Int(p.min_writer_version);
  if (p.reader_features) {
    w.Key("readerFeatures");
    WriteStringList(w, *p.reader_features);
  }
  if (p.writer_features) {
    w.Key("writerFeatures");
    WriteStringList(w, *p.writer_features);
  }
  w.EndObject();
  w.EndObject();
}

void WriteMetadata(Writer& w, const Metadata& m) {
  w.StartObject();
  w.Key("metaData");
  w.StartObject();
  w.Key("id");
  w.String(m.id);
  if (m.name) {
    w.Key("name");
    w.String(*m.name);
  }
  if (m.description) {
    w.Key("description");
    w.String(*m.description);
  }
  w.Key("format");
  w.StartObject();
  w.Key("provider");
  w.String(m.format_provider);
  w.Key("options");
  WriteStringMap(w, m.format_options);
  w.EndObject();
  w.Key("schemaString");
  w.String(m.schema_string);
  w.Key("partitionColumns");
  WriteStringList(w, m.partition_columns);
  w.Key("configuration");
  WriteStringMap(w, m.configuration);
  if (m.created_time) {
    w.Key("createdTime");
    w.Int64(*m.created_time);
  }
  w.EndObject();
  w.EndObject();
}

void WriteTxn(Writer& w, const Txn& t) {
  w.StartObject();
  w.Key("txn");
  w.StartObject();
  w.Key("appId");
  w.String(t.app_id);
  w.Key("version");
  w.Int64(t.version);
  if (t.last_updated) {
    w.Key("lastUpdated");
    w.Int64(*t.last_updated);
  }
  w.EndObject();
  w.EndObject();
}

void WriteAdd(Writer& w, const AddFile& a) {
  w.StartObject();
  w.Key("add");
  w.StartObject();
  w.Key("path");
  w.String(a.path);
  w.Key("partitionValues");
  WritePartitionValues(w, a.partition_values);
  w.Key("size");
  w.Int64(a.size);
  w.Key("modificationTime");
  w.Int64(a.modification_time);
  w.Key("dataChange");
  w.Bool(a.data_change);
  if (a.stats) {
    w.Key("stats");
    w.String(*a.stats);
  }
  if (!a.tags.empty()) {
    w.Key("tags");
    WriteStringMap(w, a.tags);
  }
  w.EndObject();
  w.EndObject();
}

void WriteRemove(Writer& w, const RemoveFile& r) {
  w.StartObject();
  w.Key("remove");
  w.StartObject();
  w.Key("path");
  w.String(r.path);
  if (r.deletion_timestamp) {
    w.Key("deletionTimestamp");
    w.Int64(*r.deletion_timestamp);
  }
  w.Key("dataChange");
  w.Bool(r.data_change);
  w.Key("extendedFileMetadata");
  w.Bool(r.extended_file_metadata);
  w.Key("partitionValues");
  WritePartitionValues(w, r.partition_values);
  if (r.size) {
    w.Key("size");
    w.Int64(*r.size);
  }
  if (!r.tags.empty()) {
    w.Key("tags");
    WriteStringMap(w, r.tags);
  }
  w.EndObject();
  w.EndObject();
}

// --- parsing -------------------------------------------------------------------------------

const Value* Member(const Value& obj, const char* name) {
  auto it = obj.FindMember(name);
  if (it == obj.MemberEnd() || it->value.IsNull()) return nullptr;
  return &it->value;
}

std::string GetString(const Value& obj, const char* name) {
  const Value* v = Member(obj, name);
  return v && v->IsString() ? std::string(v->GetString(), v->GetStringLength()) : std::string();
}

std::optional<std::string> GetOptString(const Value& obj, const char* name) {
  const Value* v = Member(obj, name);
  if (!v || !v->IsString()) return std::nullopt;
  return std::string(v->GetString(), v->GetStringLength());
}

std::optional<int64_t> GetOptInt(const Value& obj, const char* name) {
  const Value* v = Member(obj, name);
  if (!v) return std::nullopt;
  if (v->IsInt64()) return v->GetInt64();
  if (v->IsUint64()) return static_cast<int64_t>(v->GetUint64());
  if (v->IsDouble()) return static_cast<int64_t>(v->GetDouble());
  if (v->IsString()) {
    int64_t out = 0;
    const char* s = v->GetString();
    auto [p, ec] = std::from_chars(s, s + v->GetStringLength(), out);
    if (ec == std::errc()) return out;
  }
  return std::nullopt;
}

bool GetBool(const Value& obj, const char* name, bool fallback) {
  const Value* v = Member(obj, name);
  return v && v->IsBool() ? v->GetBool() : fallback;
}

std::map<std::string, std::string> GetStringMap(const Value& obj, const char* name) {
  std::map<std::string, std::string> out;
  const Value* v = Member(obj, name);
  if (!v || !v->IsObject()) return out;
  for (auto it = v->MemberBegin(); it != v->MemberEnd(); ++it) {
    if (it->value.IsString()) {
      out.emplace(it->name.GetString(), std::string(it->value.GetString(), it->value.GetStringLength()));
    }
  }
  return out;
}

PartitionValues GetPartitionValues(const Value& obj, const char* name) {
  PartitionValues out;
  const Value* v = Member(obj, name);
  if (!v || !v->IsObject()) return out;
  for (auto it = v->MemberBegin(); it != v->MemberEnd(); ++it) {
    if (it->value.IsString()) {
      out.emplace(it->name.GetString(),
                  std::string(it->value.GetString(), it->value.GetStringLength()));
    } else {
      out.emplace(it->name.GetString(), std::nullopt);
    }
  }
  return out;
}

std::optional<std::vector<std::string>> GetStringList(const Value& obj, const char* name) {
  const Value* v = Member(obj, name);
  if (!v || !v->IsArray()) return std::nullopt;
  std::vector<std::string> out;
  for (const auto& item : v->GetArray()) {
    if (item.IsString()) out.emplace_back(item.GetString(), item.GetStringLength());
  }
  return out;
}

}  // namespace

std::string SerializeCommit(const Commit& commit) {
  std::string out;
  auto line = [&out](auto&& write_fn) {
    rapidjson::StringBuffer buffer;
    Writer w(buffer);
    write_fn(w);
    out.append(buffer.GetString(), buffer.GetSize());
    out.push_back('\n');
  };
  if (commit.commit_info) line([&](Writer& w) { WriteCommitInfo(w, *commit.commit_info); });
  if (commit.protocol) line([&](Writer& w) { WriteProtocol(w, *commit.protocol); });
  if (commit.metadata) line([&](Writer& w) { WriteMetadata(w, *commit.metadata); });
  for (const auto& t : commit.txns) line([&](Writer& w) { WriteTxn(w, t); });
  for (const auto& r : commit.removes) line([&](Writer& w) { WriteRemove(w, r); });
  for (const auto& a : commit.adds) line([&](Writer& w) { WriteAdd(w, a); });
  return out;
}

arrow::Result<Commit> ParseCommit(std::string_view text, const std::string& origin) {
  Commit commit;
  size_t pos = 0;
  int line_no = 0;
  int64_t actions = 0;
  auto damaged = [&origin](int line, const std::string& why) {
    return arrow::Status::IOError("corrupt Delta log file ", origin, " line ", line, ": ", why,
                                  "; the table's log is damaged");
  };
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    rapidjson::Document doc;
    doc.Parse(line.data(), line.size());
    if (doc.HasParseError() || !doc.IsObject()) {
      return damaged(line_no, doc.HasParseError() ? rapidjson::GetParseError_En(doc.GetParseError())
                                                  : "not a JSON object");
    }
    bool has_action = false;
    for (auto it = doc.MemberBegin(); it != doc.MemberEnd(); ++it) {
      const std::string_view kind(it->name.GetString(), it->name.GetStringLength());
      const Value& v = it->value;
      if (!v.IsObject()) continue;
      has_action = true;
      if (kind == "add") {
        AddFile a;
        a.path = GetString(v, "path");
        a.partition_values = GetPartitionValues(v, "partitionValues");
        a.size = GetOptInt(v, "size").value_or(0);
        a.modification_time = GetOptInt(v, "modificationTime").value_or(0);
        a.data_change = GetBool(v, "dataChange", true);
        a.stats = GetOptString(v, "stats");
        a.tags = GetStringMap(v, "tags");
        if (v.HasMember("deletionVector") && v["deletionVector"].IsObject()) {
          const Value& d = v["deletionVector"];
          DeletionVector dv;
          dv.storage_type = GetString(d, "storageType");
          dv.path_or_inline = GetString(d, "pathOrInlineDv");
          dv.offset = GetOptInt(d, "offset");
          dv.size_in_bytes = GetOptInt(d, "sizeInBytes").value_or(0);
          dv.cardinality = GetOptInt(d, "cardinality").value_or(0);
          a.deletion_vector = std::move(dv);
        }
        commit.adds.push_back(std::move(a));
      } else if (kind == "remove") {
        RemoveFile r;
        r.path = GetString(v, "path");
        r.deletion_timestamp = GetOptInt(v, "deletionTimestamp");
        r.data_change = GetBool(v, "dataChange", true);
        r.extended_file_metadata = GetBool(v, "extendedFileMetadata", false);
        r.partition_values = GetPartitionValues(v, "partitionValues");
        r.size = GetOptInt(v, "size");
        r.tags = GetStringMap(v, "tags");
        commit.removes.push_back(std::move(r));
      } else if (kind == "txn") {
        Txn t;
        t.app_id = GetString(v, "appId");
        t.version = GetOptInt(v, "version").value_or(0);
        t.last_updated = GetOptInt(v, "lastUpdated");
        commit.txns.push_back(std::move(t));
      } else if (kind == "metaData") {
        Metadata m;
        m.id = GetString(v, "id");
        m.name = GetOptString(v, "name");
        m.description = GetOptString(v, "description");
        if (const Value* f = Member(v, "format"); f && f->IsObject()) {
          m.format_provider = GetString(*f, "provider");
          m.format_options = GetStringMap(*f, "options");
        }
        m.schema_string = GetString(v, "schemaString");
        m.partition_columns = GetStringList(v, "partitionColumns").value_or(std::vector<std::string>{});
        m.configuration = GetStringMap(v, "configuration");
        m.created_time = GetOptInt(v, "createdTime");
        commit.metadata = std::move(m);
      } else if (kind == "protocol") {
        Protocol p;
        p.min_reader_version = static_cast<int32_t>(GetOptInt(v, "minReaderVersion").value_or(1));
        p.min_writer_version = static_cast<int32_t>(GetOptInt(v, "minWriterVersion").value_or(2));
        p.reader_features = GetStringList(v, "readerFeatures");
        p.writer_features = GetStringList(v, "writerFeatures");
        commit.protocol = std::move(p);
      } else if (kind == "commitInfo") {
        CommitInfo c;
        c.timestamp = GetOptInt(v, "timestamp").value_or(0);
        c.operation = GetString(v, "operation");
        c.operation_parameters = GetStringMap(v, "operationParameters");
        c.read_version = GetOptInt(v, "readVersion");
        c.isolation_level = GetString(v, "isolationLevel");
        c.is_blind_append = GetBool(v, "isBlindAppend", false);
        c.engine_info = GetString(v, "engineInfo");
        c.txn_id = GetString(v, "txnId");
        if (const Value* id = Member(v, "timelakeTableId"); id && id->IsString()) {
          c.table_id = std::string(id->GetString(), id->GetStringLength());
        }
        if (const Value* m = Member(v, "operationMetrics"); m && m->IsObject()) {
          for (auto mi = m->MemberBegin(); mi != m->MemberEnd(); ++mi) {
            if (auto n = GetOptInt(*m, mi->name.GetString())) c.metrics[mi->name.GetString()] = *n;
          }
        }
        commit.commit_info = std::move(c);
      }
      // Unknown actions (cdc, domainMetadata, checkpointMetadata, …) are ignored.
    }
    // Every line of a commit is one action: `{}` or `{"add": null}` is not a commit's content.
    if (!has_action) return damaged(line_no, "the line holds no action");
    ++actions;
  }
  // Every commit holds at least one action (a commitInfo alone is a valid commit). An empty or
  // blank file is what a torn or truncated write leaves; taking it for an empty commit would
  // silently lose whatever the real commit held.
  if (actions == 0) {
    return arrow::Status::IOError("corrupt Delta log file ", origin,
                                  ": it holds no action (empty or blank); the table's log is "
                                  "damaged");
  }
  return commit;
}

bool IsStrayCommit(const Commit& commit, const std::string& table_id) {
  return !table_id.empty() && commit.commit_info && commit.commit_info->table_id &&
         *commit.commit_info->table_id != table_id;
}

std::string CommitFileName(int64_t version) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020lld.json", static_cast<long long>(version));
  return buf;
}

std::string CheckpointFileName(int64_t version) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%020lld.checkpoint.parquet", static_cast<long long>(version));
  return buf;
}

namespace {
std::optional<int64_t> LeadingVersion(std::string_view name, std::string_view suffix) {
  if (name.size() != 20 + suffix.size() || name.substr(20) != suffix) return std::nullopt;
  for (size_t i = 0; i < 20; ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  }
  int64_t v = 0;
  auto [p, ec] = std::from_chars(name.data(), name.data() + 20, v);
  if (ec != std::errc() || p != name.data() + 20) return std::nullopt;
  return v;
}
}  // namespace

std::optional<int64_t> CommitVersionOf(std::string_view name) {
  return LeadingVersion(name, ".json");
}

std::optional<int64_t> CheckpointVersionOf(std::string_view name) {
  return LeadingVersion(name, ".checkpoint.parquet");
}

int64_t NumRecords(const AddFile& add) {
  if (!add.stats) return -1;
  rapidjson::Document doc;
  doc.Parse(add.stats->c_str());
  if (doc.HasParseError() || !doc.IsObject()) return -1;
  auto it = doc.FindMember("numRecords");
  if (it == doc.MemberEnd() || !it->value.IsInt64()) return -1;
  return it->value.GetInt64();
}

}  // namespace timelake
