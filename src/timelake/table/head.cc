// The table head: encoding, reading and writing it (see table/head.h).
#include "timelake/table/head.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <list>
#include <mutex>
#include <utility>

#include <arrow/buffer.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <arrow/ipc/writer.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "timelake/log/file_tags.h"
#include "timelake/util/encoding.h"
#include "timelake/util/per_process.h"
#include "timelake/util/status.h"

namespace timelake {
namespace {

constexpr std::string_view kMagic = "TLHEAD1\n";
constexpr size_t kDigestChars = 64;  // hex SHA-256
constexpr int kPutAttempts = 5;      // lost conditional puts before WriteHead gives up

arrow::Status Damaged(const std::string& origin, const std::string& why) {
  return arrow::Status::IOError("table head ", origin, " is damaged: ", why);
}

std::string_view View(const std::shared_ptr<arrow::Buffer>& b) {
  return {reinterpret_cast<const char*>(b->data()), static_cast<size_t>(b->size())};
}

arrow::Result<std::string> LatestBytes(const std::shared_ptr<arrow::Table>& latest) {
  if (!latest) return std::string();
  ARROW_ASSIGN_OR_RAISE(auto sink, arrow::io::BufferOutputStream::Create());
  ARROW_ASSIGN_OR_RAISE(auto writer, arrow::ipc::MakeStreamWriter(sink, latest->schema()));
  ARROW_RETURN_NOT_OK(writer->WriteTable(*latest));
  ARROW_RETURN_NOT_OK(writer->Close());
  ARROW_ASSIGN_OR_RAISE(auto buffer, sink->Finish());
  return buffer->ToString();
}

// The newest version of each table (location and id) the process committed or read, and when
// (steady clock, ms; -1: never) a check of the log last found it the newest.
struct SeenEntry {
  int64_t version = -1;
  int64_t checked_ms = -1;
  uint64_t changes = 0;  // CatalogChanges() at that check
};
struct SeenVersions {
  std::mutex mutex;
  std::map<std::pair<std::string, std::string>, SeenEntry> newest;  // GUARDED_BY(mutex)
};

SeenVersions& Seen() {
  static auto* seen = new PerProcess<SeenVersions>();  // never destroyed: used until exit
  return seen->Get();
}

// The state of the tables this process opened from a head lately, by location, newest last.
struct RecentHeads {
  std::mutex mutex;
  std::list<std::pair<std::string, HeadContents>> entries;  // GUARDED_BY(mutex)
};

RecentHeads& Recent() {
  static auto* recent = new PerProcess<RecentHeads>();  // never destroyed: used until exit
  return recent->Get();
}

}  // namespace

std::string HeadPath(const std::string& table_path) { return table_path + "/_timelake/head"; }

arrow::Result<std::string> EncodeHead(const Snapshot& snapshot,
                                      const std::shared_ptr<arrow::Table>& latest,
                                      const std::string& commit_etag) {
  Commit state;
  state.protocol = snapshot.protocol;
  state.metadata = snapshot.metadata;
  state.adds.reserve(snapshot.files.size());
  for (const auto& [path, add] : snapshot.files) state.adds.push_back(add);
  const std::string actions = SerializeCommit(state);
  ARROW_ASSIGN_OR_RAISE(const std::string rows, LatestBytes(latest));

  rapidjson::StringBuffer json;
  rapidjson::Writer<rapidjson::StringBuffer> w(json);
  w.StartObject();
  w.Key("version");
  w.Int64(snapshot.version);
  w.Key("tableId");
  w.String(snapshot.metadata.id.c_str());
  w.Key("fingerprint");
  w.String(std::to_string(snapshot.head_fingerprint).c_str());
  w.Key("checkpointVersion");
  w.Int64(snapshot.checkpoint_version);
  w.Key("stateBytes");
  w.Int64(static_cast<int64_t>(actions.size()));
  w.Key("latestBytes");
  w.Int64(static_cast<int64_t>(rows.size()));
  if (!commit_etag.empty()) {
    w.Key("commitEtag");
    w.String(commit_etag.c_str(), static_cast<rapidjson::SizeType>(commit_etag.size()));
  }
  w.EndObject();

  std::string out;
  out.reserve(kMagic.size() + json.GetSize() + 1 + actions.size() + rows.size() + kDigestChars);
  out.append(kMagic);
  out.append(json.GetString(), json.GetSize());
  out.push_back('\n');
  out.append(actions);
  out.append(rows);
  out.append(Sha256Hex(out));
  return out;
}

arrow::Result<HeadContents> DecodeHead(std::string_view bytes, const std::string& origin) {
  if (bytes.size() < kMagic.size() + kDigestChars || bytes.substr(0, kMagic.size()) != kMagic) {
    return Damaged(origin, "not a timelake table head");
  }
  const std::string_view body = bytes.substr(0, bytes.size() - kDigestChars);
  if (Sha256Hex(body) != bytes.substr(body.size())) return Damaged(origin, "checksum mismatch");
  const size_t header_end = body.find('\n', kMagic.size());
  if (header_end == std::string_view::npos) return Damaged(origin, "no header");
  const std::string header(body.substr(kMagic.size(), header_end - kMagic.size()));
  rapidjson::Document doc;
  doc.Parse(header.c_str());
  auto int_field = [&](const char* key) -> std::optional<int64_t> {
    if (!doc.IsObject() || !doc.HasMember(key) || !doc[key].IsInt64()) return std::nullopt;
    return doc[key].GetInt64();
  };
  auto text_field = [&](const char* key) -> std::optional<std::string> {
    if (!doc.IsObject() || !doc.HasMember(key) || !doc[key].IsString()) return std::nullopt;
    return std::string(doc[key].GetString(), doc[key].GetStringLength());
  };
  const auto version = int_field("version");
  const auto checkpoint = int_field("checkpointVersion");
  const auto state_bytes = int_field("stateBytes");
  const auto latest_bytes = int_field("latestBytes");
  const auto table_id = text_field("tableId");
  const auto fingerprint_text = text_field("fingerprint");
  if (doc.HasParseError() || !version || !checkpoint || !state_bytes || !latest_bytes ||
      !table_id || !fingerprint_text || *version < 0 || *state_bytes <= 0 || *latest_bytes < 0) {
    return Damaged(origin, "bad header");
  }
  const std::string_view rest = body.substr(header_end + 1);
  if (static_cast<uint64_t>(*state_bytes) + static_cast<uint64_t>(*latest_bytes) != rest.size()) {
    return Damaged(origin, "its parts do not add up to its size");
  }
  HeadContents out;
  if (doc.HasMember("commitEtag")) {
    const auto tag = text_field("commitEtag");
    if (!tag || tag->empty()) return Damaged(origin, "bad commit tag");
    out.commit_etag = *tag;
  }
  ARROW_ASSIGN_OR_RAISE(auto state, ParseCommit(rest.substr(0, *state_bytes), origin));
  if (!state.metadata || !state.protocol || state.metadata->id != *table_id) {
    return Damaged(origin, "its state is not of the table it names");
  }
  out.snapshot.Apply(state, *version);
  out.snapshot.checkpoint_version = *checkpoint;
  out.snapshot.oldest_version = -1;
  try {
    size_t used = 0;
    out.snapshot.head_fingerprint = std::stoull(*fingerprint_text, &used);
    if (used != fingerprint_text->size()) return Damaged(origin, "bad fingerprint");
  } catch (const std::exception&) {
    return Damaged(origin, "bad fingerprint");
  }
  if (*latest_bytes > 0) {
    // A copy: the rows must not point into the caller's bytes.
    auto buffer = arrow::Buffer::FromString(std::string(rest.substr(*state_bytes)));
    auto input = std::make_shared<arrow::io::BufferReader>(buffer);
    auto reader = arrow::ipc::RecordBatchStreamReader::Open(input);
    if (!reader.ok()) return Damaged(origin, reader.status().message());
    auto table = (*reader)->ToTable();
    if (!table.ok()) return Damaged(origin, table.status().message());
    ARROW_ASSIGN_OR_RAISE(out.latest, (*table)->CombineChunks());
  }
  return out;
}

arrow::Result<std::optional<HeadRead>> ReadHead(ObjectStore& store, const std::string& table_path) {
  const std::string path = HeadPath(table_path);
  auto read = store.GetDated(path);
  if (!read.ok()) {
    if (IsNotFound(read.status())) return std::nullopt;
    return read.status();
  }
  auto contents = DecodeHead(View(read->data), path);
  if (!contents.ok()) return std::nullopt;
  HeadRead out;
  out.contents = std::move(*contents);
  if (read->modified_ms >= 0 && read->served_ms >= 0) {
    // Both times are whole seconds: the head may be up to a second older than they say.
    out.age_ms = std::max<int64_t>(0, read->served_ms - read->modified_ms) + 1000;
  }
  return out;
}

arrow::Status WriteHead(ObjectStore& store, DeltaLog& log, Snapshot snapshot,
                        const LatestAtHead& latest) {
  const std::string path = HeadPath(log.table_path());
  for (int attempt = 0; attempt < kPutAttempts; ++attempt) {
    // The tag first: a head replaced between the two reads fails the conditional put below.
    std::string etag;
    std::optional<HeadContents> previous;
    auto meta = store.Head(path);
    if (meta.ok()) {
      etag = meta->etag;
      auto data = store.Get(path);
      if (data.ok()) {
        auto decoded = DecodeHead(View(*data), path);
        if (decoded.ok()) previous = std::move(*decoded);
      } else if (!IsNotFound(data.status())) {
        return data.status();
      }
    } else if (!IsNotFound(meta.status())) {
      return meta.status();
    }
    auto newer_head = [&] {
      return previous && previous->snapshot.metadata.id == snapshot.metadata.id &&
             previous->snapshot.version >= snapshot.version;
    };
    if (newer_head()) return arrow::Status::OK();  // a writer that got further wrote it
    // Up to the newest version: its read of the version after finds nothing, which is the
    // check the head's freshness rests on (before the put).
    ARROW_RETURN_NOT_OK(log.Update(&snapshot));
    if (newer_head()) return arrow::Status::OK();
    // The checkpoint a reader of the log would start from (another process may have written
    // it): info()'s manifests count from there.
    if (auto hint = log.store().LastCheckpointHint();
        hint && *hint > snapshot.checkpoint_version && *hint <= snapshot.version) {
      snapshot.checkpoint_version = *hint;
    }

    ARROW_ASSIGN_OR_RAISE(auto rows, latest(previous, snapshot));
    // The commit's tag, for readers that check the head with one listing (HeadStillNewest): on
    // stores that list from a name. On a local disk readers check the log by reading it (no
    // round trips), and Azure lists from the start of a prefix: no tag there.
    std::string commit_etag;
    if (store.RootUrl().rfind("file://", 0) != 0 && store.ListsFromName()) {
      auto commit = store.Head(log.LogPath(CommitFileName(snapshot.version)));
      if (commit.ok()) commit_etag = commit->etag;
    }
    ARROW_ASSIGN_OR_RAISE(std::string bytes, EncodeHead(snapshot, rows, commit_etag));
    if (static_cast<int64_t>(bytes.size()) > kMaxHeadBytes) {
      // Too large to inline: readers open from the log, not from an older head.
      if (!etag.empty()) return store.Delete(path);
      return arrow::Status::OK();
    }
    auto body = arrow::Buffer::FromString(std::move(bytes));
    bool written = false;
    if (etag.empty()) {
      ARROW_ASSIGN_OR_RAISE(written, store.PutIfAbsent(path, body));
    } else {
      ARROW_ASSIGN_OR_RAISE(written, store.PutIfMatch(path, body, etag));
    }
    if (!written) continue;  // another writer's head came first: judge it again
    // A drop between the commit and the put would leave a head of a table that is gone (object
    // stores have no folder to keep it out): take it back when the commit is definitely gone.
    arrow::Status head = log.CheckHead(snapshot.version, snapshot.head_fingerprint);
    if (IsTableNotFound(head)) {
      (void)store.Delete(path);
      return arrow::Status::OK();
    }
    return head;
  }
  return arrow::Status::OK();  // writers kept racing: one of them wrote a head
}

bool HeadStillNewest(ObjectStore& store, const std::string& table_path, int64_t version,
                     const std::string& commit_etag) {
  if (commit_etag.empty() || !store.ListsFromName()) return false;
  const std::string log = table_path + "/_delta_log/";
  const std::string commit = log + CommitFileName(version);
  // Every name of the head's version sorts after "<version>." (".checkpoint…", ".crc", ".json"),
  // a newer version's after those, and the log's other names ("_last_checkpoint", "_commits/")
  // after every version: a short page shows whether anything newer exists.
  ListPageRequest request;
  request.prefix = log;
  request.start_after = commit.substr(0, commit.size() - std::string_view("json").size());
  request.max_keys = 8;
  auto page = store.ListPage(request);
  if (!page.ok()) return false;
  bool found = false;
  for (const ObjectMeta& meta : page->objects) {
    const std::string name = meta.path.substr(std::min(meta.path.size(), log.size()));
    if (name.empty() || name[0] == '_') return found;  // past every version
    const size_t dot = name.find('.');
    auto listed = ParseInt64(name.substr(0, dot));
    if (!listed || *listed != version) return false;  // a newer version (or a name not a version's)
    if (meta.path == commit) {
      if (meta.etag != commit_etag) return false;  // rewritten: not the head's commit
      found = true;
    }
  }
  return found && page->continuation.empty();
}

namespace {
std::atomic<uint64_t>& CatalogChangeCount() {
  static auto* count = new PerProcess<std::atomic<uint64_t>>();  // used until exit
  return count->Get();
}
}  // namespace

uint64_t CatalogChanges() { return CatalogChangeCount().load(); }

void RememberHead(const std::string& location, HeadContents contents) {
  RecentHeads& recent = Recent();
  std::lock_guard<std::mutex> lock(recent.mutex);
  recent.entries.remove_if([&](const auto& entry) { return entry.first == location; });
  recent.entries.emplace_back(location, std::move(contents));
  while (recent.entries.size() > kRecentHeads) recent.entries.pop_front();
}

std::optional<HeadContents> RecentHead(const std::string& location) {
  RecentHeads& recent = Recent();
  std::lock_guard<std::mutex> lock(recent.mutex);
  for (const auto& [where, contents] : recent.entries) {
    if (where == location) return contents;
  }
  return std::nullopt;
}

void NoteCatalogChange() { ++CatalogChangeCount(); }

void NoteVersionSeen(const std::string& location, const std::string& table_id, int64_t version) {
  SeenVersions& seen = Seen();
  std::lock_guard<std::mutex> lock(seen.mutex);
  SeenEntry& entry = seen.newest[std::make_pair(location, table_id)];
  if (version > entry.version) {
    entry.version = version;
    entry.checked_ms = -1;  // not known to be the newest
  }
}

void NoteVersionChecked(const std::string& location, const std::string& table_id, int64_t version,
                        int64_t checked_ms, uint64_t changes) {
  SeenVersions& seen = Seen();
  std::lock_guard<std::mutex> lock(seen.mutex);
  SeenEntry& entry = seen.newest[std::make_pair(location, table_id)];
  if (version > entry.version || (version == entry.version && checked_ms > entry.checked_ms)) {
    entry = SeenEntry{version, checked_ms, changes};
  }
}

int64_t NewestVersionSeen(const std::string& location, const std::string& table_id) {
  SeenVersions& seen = Seen();
  std::lock_guard<std::mutex> lock(seen.mutex);
  auto it = seen.newest.find({location, table_id});
  return it == seen.newest.end() ? -1 : it->second.version;
}

int64_t CheckedAsNewest(const std::string& location, const std::string& table_id, int64_t version) {
  const uint64_t changes = CatalogChanges();
  SeenVersions& seen = Seen();
  std::lock_guard<std::mutex> lock(seen.mutex);
  auto it = seen.newest.find({location, table_id});
  if (it == seen.newest.end() || it->second.version != version || it->second.changes != changes) return -1;
  return it->second.checked_ms;
}

}  // namespace timelake
