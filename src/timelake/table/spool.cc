#include "timelake/table/spool.h"

#include <unistd.h>

#include <cstring>

#include <arrow/buffer.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <arrow/ipc/writer.h>
#include <arrow/util/key_value_metadata.h>
#include <rapidjson/document.h>

#include "timelake/util/ids.h"
#include "timelake/util/json.h"
#include "timelake/util/status.h"

namespace timelake {

namespace {

constexpr const char* kPrefix = "spool-";
constexpr const char* kRequest = ".req";
constexpr const char* kClaimed = ".claimed";
constexpr const char* kAnswer = ".ans";
constexpr const char* kMembersKey = "timelake.spool.members";
constexpr const char* kTableKey = "timelake.spool.table";
// Answers and temporaries this old belong to writers that died waiting: deleted by leaders.
constexpr int64_t kLeftoverMs = 60'000;

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> Serialize(const SpoolRequest& request) {
  std::shared_ptr<arrow::Schema> schema;
  rapidjson::StringBuffer json;
  JsonWriter w(json);
  w.StartArray();
  for (const auto& m : request.members) {
    int64_t rows = 0;
    for (const auto& b : m.rows) {
      if (!schema) schema = b->schema();
      if (!b->schema()->Equals(*schema)) {
        return arrow::Status::Invalid("the appends of one spool request differ in schema");
      }
      rows += b->num_rows();
    }
    w.StartObject();
    w.Key("batch_id");
    if (m.batch_id) {
      w.String(m.batch_id->data(), static_cast<rapidjson::SizeType>(m.batch_id->size()));
    } else {
      w.Null();
    }
    w.Key("rows");
    w.Int64(rows);
    w.EndObject();
  }
  w.EndArray();
  if (!schema) return arrow::Status::Invalid("a spool request without rows");
  schema = schema->WithMetadata(
      arrow::key_value_metadata({kMembersKey, kTableKey}, {json.GetString(), request.table_id}));
  ARROW_ASSIGN_OR_RAISE(auto sink, arrow::io::BufferOutputStream::Create());
  ARROW_ASSIGN_OR_RAISE(auto writer, arrow::ipc::MakeStreamWriter(sink, schema));
  for (const auto& m : request.members) {
    for (const auto& b : m.rows) {
      ARROW_ASSIGN_OR_RAISE(auto with_schema, b->ReplaceSchema(schema));
      ARROW_RETURN_NOT_OK(writer->WriteRecordBatch(*with_schema));
    }
  }
  ARROW_RETURN_NOT_OK(writer->Close());
  return sink->Finish();
}

arrow::Result<SpoolRequest> Deserialize(const std::string& id, const std::shared_ptr<arrow::Buffer>& data) {
  auto input = std::make_shared<arrow::io::BufferReader>(data);
  ARROW_ASSIGN_OR_RAISE(auto reader, arrow::ipc::RecordBatchStreamReader::Open(input));
  auto metadata = reader->schema()->metadata();
  if (!metadata || metadata->FindKey(kMembersKey) < 0) {
    return arrow::Status::Invalid("spool request ", id, " has no member list");
  }
  const std::string members_json = metadata->value(metadata->FindKey(kMembersKey));
  rapidjson::Document doc;
  doc.Parse(members_json.c_str());
  if (doc.HasParseError() || !doc.IsArray()) {
    return arrow::Status::Invalid("spool request ", id, " has a damaged member list");
  }
  auto plain = reader->schema()->RemoveMetadata();
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  for (;;) {
    std::shared_ptr<arrow::RecordBatch> batch;
    ARROW_RETURN_NOT_OK(reader->ReadNext(&batch));
    if (!batch) break;
    ARROW_ASSIGN_OR_RAISE(batch, batch->ReplaceSchema(plain));
    batches.push_back(std::move(batch));
  }
  SpoolRequest request;
  request.id = id;
  if (metadata->FindKey(kTableKey) >= 0) request.table_id = metadata->value(metadata->FindKey(kTableKey));
  size_t next = 0;
  int64_t offset = 0;  // rows of batches[next] already taken
  for (const auto& m : doc.GetArray()) {
    if (!m.IsObject() || !m.HasMember("rows") || !m["rows"].IsInt64() || !m.HasMember("batch_id")) {
      return arrow::Status::Invalid("spool request ", id, " has a damaged member list");
    }
    SpoolMember member;
    if (m["batch_id"].IsString()) member.batch_id = std::string(m["batch_id"].GetString(), m["batch_id"].GetStringLength());
    for (int64_t want = m["rows"].GetInt64(); want > 0;) {
      if (next >= batches.size()) return arrow::Status::Invalid("spool request ", id, " is truncated");
      const int64_t take = std::min(want, batches[next]->num_rows() - offset);
      member.rows.push_back(batches[next]->Slice(offset, take));
      want -= take;
      offset += take;
      if (offset == batches[next]->num_rows()) {
        ++next;
        offset = 0;
      }
    }
    request.members.push_back(std::move(member));
  }
  return request;
}

std::string SerializeAnswers(const std::vector<SpoolAnswer>& answers) {
  rapidjson::StringBuffer json;
  JsonWriter w(json);
  w.StartArray();
  for (const auto& a : answers) {
    w.StartObject();
    w.Key("ok");
    w.Bool(a.ok);
    w.Key("version");
    w.Int64(a.version);
    w.Key("duplicate");
    w.Bool(a.duplicate);
    w.Key("rows");
    w.Int64(a.rows);
    w.Key("files");
    w.Int64(a.files);
    w.Key("bytes");
    w.Int64(a.bytes);
    w.Key("attempts");
    w.Int64(a.attempts);
    w.Key("commit_ms");
    w.Double(a.commit_ms);
    w.Key("error");
    w.String(a.error.data(), static_cast<rapidjson::SizeType>(a.error.size()));
    w.EndObject();
  }
  w.EndArray();
  return json.GetString();
}

std::optional<std::vector<SpoolAnswer>> ParseAnswers(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str());
  if (doc.HasParseError() || !doc.IsArray()) return std::nullopt;
  std::vector<SpoolAnswer> out;
  for (const auto& v : doc.GetArray()) {
    if (!v.IsObject()) return std::nullopt;
    auto i64 = [&](const char* key) -> std::optional<int64_t> {
      if (!v.HasMember(key) || !v[key].IsInt64()) return std::nullopt;
      return v[key].GetInt64();
    };
    SpoolAnswer a;
    auto version = i64("version"), rows = i64("rows"), files = i64("files"), bytes = i64("bytes"),
         attempts = i64("attempts");
    if (!v.HasMember("ok") || !v["ok"].IsBool() || !v.HasMember("duplicate") || !v["duplicate"].IsBool() ||
        !version || !rows || !files || !bytes || !attempts || !v.HasMember("commit_ms") ||
        !v["commit_ms"].IsNumber() || !v.HasMember("error") || !v["error"].IsString()) {
      return std::nullopt;
    }
    a.ok = v["ok"].GetBool();
    a.duplicate = v["duplicate"].GetBool();
    a.version = *version;
    a.rows = *rows;
    a.files = *files;
    a.bytes = *bytes;
    a.attempts = *attempts;
    a.commit_ms = v["commit_ms"].GetDouble();
    a.error = v["error"].GetString();
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

Spool::Spool(std::shared_ptr<LocalFiles> files, std::string folder)
    : files_(std::move(files)), folder_(std::move(folder)) {}

const std::string& Spool::Scratch() {
  // Named anew in a child made by fork(), which must not write into its parent's file.
  const pid_t pid = ::getpid();
  if (scratch_.empty() || scratch_pid_ != pid) {
    scratch_ = folder_ + "/.tmp-" + kPrefix + NewUuid();
    scratch_pid_ = pid;
  }
  return scratch_;
}

Spool::~Spool() {
  if (!scratch_.empty() && scratch_pid_ == ::getpid()) (void)files_->Withdraw(scratch_);
}

std::string Spool::Path(const std::string& id, const char* suffix) const {
  return folder_ + "/" + kPrefix + id + suffix;
}

arrow::Result<std::unique_ptr<Spool::Ticket>> Spool::Submit(const SpoolRequest& request) {
  ARROW_ASSIGN_OR_RAISE(auto data, Serialize(request));
  // Written into this spool's scratch file (the last answer's file, when there was one), held
  // before it takes the request's name.
  ARROW_ASSIGN_OR_RAISE(auto alive, files_->Publish(Scratch(), Path(request.id, kRequest), *data,
                                                    /*hold=*/true));
  return std::make_unique<Ticket>(std::move(alive), request.id);
}

arrow::Result<bool> Spool::Withdraw(const Ticket& ticket) {
  return files_->Withdraw(Path(ticket.id(), kRequest));
}

std::optional<std::vector<SpoolAnswer>> Spool::TakeAnswers(const Ticket& ticket) {
  const std::string path = Path(ticket.id(), kAnswer);
  auto data = files_->Read(path);
  if (!data.ok() && IsNotFound(data.status())) return std::nullopt;
  // Kept as the file of this spool's next request.
  auto kept = files_->Claim(path, Scratch());
  if (!kept.ok()) (void)files_->Withdraw(path);
  if (!data.ok()) return std::nullopt;
  return ParseAnswers((*data)->ToString());
}

namespace {

bool IsRequest(const std::string& name) {
  return name.compare(0, std::strlen(kPrefix), kPrefix) == 0 && EndsWith(name, kRequest);
}

}  // namespace

int Spool::Pending() const {
  auto files = files_->List(folder_, LocalFiles::ListDetail::kNames);
  if (!files.ok()) return 0;
  int n = 0;
  for (const auto& f : *files) n += IsRequest(f.name);
  return n;
}

std::vector<SpoolRequest> Spool::Claim() {
  std::vector<SpoolRequest> out;
  auto files = files_->List(folder_, LocalFiles::ListDetail::kAges);
  if (!files.ok()) return out;
  std::vector<std::string> requests;
  for (const auto& f : *files) {
    const std::string& name = f.name;
    const bool ours = name.compare(0, std::strlen(kPrefix), kPrefix) == 0;
    if (IsRequest(name)) {
      requests.push_back(name.substr(std::strlen(kPrefix), name.size() - std::strlen(kPrefix) - std::strlen(kRequest)));
    } else if (((ours && (EndsWith(name, kAnswer) || EndsWith(name, kClaimed))) ||
                name.compare(0, 5 + std::strlen(kPrefix), std::string(".tmp-") + kPrefix) == 0) &&
               f.age_ms > kLeftoverMs) {
      (void)files_->Withdraw(folder_ + "/" + name);
    }
  }
  for (const auto& id : requests) {
    const std::string claimed = Path(id, kClaimed);
    auto won = files_->Claim(Path(id, kRequest), claimed);
    if (!won.ok() || !*won) continue;  // withdrawn meanwhile
    // The writer holds a Liveness while it waits: none means it is gone.
    auto held = files_->IsHeld(claimed);
    if (!held.ok()) continue;
    auto data = *held ? files_->Read(claimed)
                      : arrow::Result<std::shared_ptr<arrow::Buffer>>(arrow::Status::Cancelled(""));
    auto request = data.ok() ? Deserialize(id, *data) : arrow::Result<SpoolRequest>(data.status());
    if (!request.ok()) {
      (void)files_->Withdraw(claimed);
      continue;
    }
    // Kept for the answer, which is written into it (Answer).
    out.push_back(std::move(*request));
  }
  return out;
}

arrow::Status Spool::Answer(const std::string& id, const std::vector<SpoolAnswer>& answers) {
  const std::string text = SerializeAnswers(answers);
  // Into the claimed request's file, renamed to the answer's name once written.
  return files_->Publish(Path(id, kClaimed), Path(id, kAnswer), *arrow::Buffer::FromString(text),
                         /*hold=*/false)
      .status();
}

}  // namespace timelake
