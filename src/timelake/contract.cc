#include "timelake/contract.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>

#include <arrow/type.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "timelake/log/schema.h"
#include "timelake/log/snapshot.h"
#include "timelake/util/time.h"
#include "timelake/util/json.h"

namespace timelake {
namespace {

constexpr const char* kTimeColumn = "timelake.timeColumn";
constexpr const char* kSeriesKey = "timelake.seriesKey";
constexpr const char* kChunk = "timelake.chunk";
constexpr const char* kRetention = "timelake.retention";
constexpr const char* kDedup = "timelake.dedup";

constexpr const char* kRetentionCheck = kRetentionCheckKey;

// Keys a user may set through `properties` under the timelake namespace. The timelake.rollup.*
// keys describe a rollup table (python/timelake/_rollup.py); the Python API sets them only when
// it creates a rollup.
const std::set<std::string>& UserTimelakeKeys() {
  static const std::set<std::string> keys = {"timelake.autoMaintain", "timelake.backgroundCompaction",
                                             "timelake.targetFileSize", kRetentionCheck,
                                             "timelake.rollup.source", "timelake.rollup.sourceId",
                                             "timelake.rollup.spec", "timelake.rollup.query"};
  return keys;
}

// Delta duration properties timelake acts on.
const std::set<std::string>& IntervalKeys() {
  static const std::set<std::string> keys = {"delta.deletedFileRetentionDuration",
                                             "delta.logRetentionDuration",
                                             "delta.setTransactionRetentionDuration"};
  return keys;
}

// Delta properties that switch on a table feature timelake does not implement, and the value
// that leaves it off. Stored verbatim they would make the table claim a feature its protocol and
// its files do not have: other engines would misread it, and timelake may refuse to open it.
struct FeatureSwitch {
  const char* key;
  const char* off;
  const char* feature;
};
constexpr FeatureSwitch kFeatureSwitches[] = {
    {"delta.enableChangeDataFeed", "false", "changeDataFeed"},
    {"delta.enableDeletionVectors", "false", "deletionVectors"},
    {"delta.enableRowTracking", "false", "rowTracking"},
    {"delta.enableInCommitTimestamps", "false", "inCommitTimestamp"},
    {"delta.enableIcebergCompatV1", "false", "icebergCompatV1"},
    {"delta.enableIcebergCompatV2", "false", "icebergCompatV2"},
    {"delta.columnMapping.mode", "none", "columnMapping"},
    {"delta.checkpointPolicy", "classic", "v2Checkpoint"},
};
// Key prefixes (and keys) that ask for protocol changes or features outright.
constexpr const char* kFeatureRequests[] = {"delta.feature.", "delta.constraints.",
                                            "delta.minReaderVersion", "delta.minWriterVersion",
                                            "delta.universalFormat.enabledFormats"};

bool IsTrueOrFalse(const std::string& v) { return v == "true" || v == "false"; }

std::string JoinNames(const arrow::Schema& schema) {
  std::string out;
  for (const auto& f : schema.fields()) {
    if (!out.empty()) out += ", ";
    out += f->name();
  }
  return out;
}

bool IsSeriesKeyType(const arrow::DataType& t) {
  using arrow::Type;
  switch (t.id()) {
    case Type::BOOL:
    case Type::INT8:
    case Type::INT16:
    case Type::INT32:
    case Type::INT64:
    case Type::UINT8:
    case Type::UINT16:
    case Type::UINT32:
    case Type::STRING:
    case Type::LARGE_STRING:
    case Type::STRING_VIEW:
    case Type::BINARY:
    case Type::LARGE_BINARY:
    case Type::FIXED_SIZE_BINARY:
    case Type::DATE32:
    case Type::TIMESTAMP:
    case Type::DECIMAL128:
      return true;
    case Type::DICTIONARY:
      return IsSeriesKeyType(*static_cast<const arrow::DictionaryType&>(t).value_type());
    default:
      return false;
  }
}

bool ParsePositiveInt(const std::string& text, int64_t* out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && p == text.data() + text.size() && *out > 0;
}

}  // namespace

arrow::Status ValidateProperties(const std::map<std::string, std::string>& properties) {
  for (const auto& [key, value] : properties) {
    if (key.empty()) return arrow::Status::Invalid("table property names must not be empty");
    if (key.rfind("timelake.", 0) == 0 && !UserTimelakeKeys().count(key)) {
      return arrow::Status::Invalid("unknown table property '", key,
                                    "': the timelake.* namespace is reserved; settable keys are "
                                    "timelake.autoMaintain, timelake.backgroundCompaction, "
                                    "timelake.targetFileSize and ",
                                    kRetentionCheck);
    }
    int64_t n = 0;
    if ((key == "delta.checkpointInterval" || key == "timelake.targetFileSize") &&
        !ParsePositiveInt(value, &n)) {
      return arrow::Status::Invalid("table property '", key, "' must be a positive integer, got '",
                                    value, "'");
    }
    if ((key == "timelake.autoMaintain" || key == "timelake.backgroundCompaction" ||
         key == kRetentionCheck || key == "delta.appendOnly" || key == "delta.enableTypeWidening") &&
        !IsTrueOrFalse(value)) {
      return arrow::Status::Invalid("table property '", key, "' must be \"true\" or \"false\", got '",
                                    value, "'");
    }
    if (IntervalKeys().count(key)) {
      auto parsed = ParseDeltaInterval(value);
      if (!parsed.ok()) {
        return arrow::Status::Invalid("table property '", key, "': ", parsed.status().message());
      }
    }
    for (const auto& f : kFeatureSwitches) {
      if (key == f.key && value != f.off) {
        return arrow::Status::Invalid(
            "table property '", key, "' = '", value, "' needs the Delta table feature '", f.feature,
            "', which timelake does not implement; leave it out (or set it to '", f.off, "')");
      }
    }
    for (const char* request : kFeatureRequests) {
      if (key.rfind(request, 0) == 0) {
        return arrow::Status::Invalid("table property '", key,
                                      "' asks for a Delta protocol version or table feature; "
                                      "timelake chooses the protocol from the schema and "
                                      "implements no optional features but timestampNtz and typeWidening");
      }
    }
  }
  // Vacuum deletes removed data files once they are this old, and never-committed files too.
  // A reader still scanning an older snapshot, or a writer whose files are not committed yet,
  // needs them for as long as it runs: Delta refuses less than 7 days unless told otherwise.
  auto deleted = properties.find("delta.deletedFileRetentionDuration");
  auto check = properties.find(kRetentionCheck);
  const bool checked = check == properties.end() || check->second != "false";
  if (deleted != properties.end() && checked) {
    const int64_t ms = ParseDeltaInterval(deleted->second).ValueOrDie();  // validated above
    if (ms < kMinDeletedFileRetentionMs) {
      return arrow::Status::Invalid(
          "table property 'delta.deletedFileRetentionDuration' = '", deleted->second,
          "' is below the safe minimum of 7 days: maintain() would delete data files that a "
          "concurrent reader or writer may still need. Use at least \"interval 7 days\", or, if "
          "no reader or writer ever runs longer than the duration, set '", kRetentionCheck,
          "' to \"false\"");
    }
  }
  return arrow::Status::OK();
}

arrow::Result<Contract> MakeContract(const arrow::Schema& declared, const ContractOptions& options) {
  Contract c;
  // Column names must be unique ignoring case (a Delta rule).
  std::set<std::string> lowered;
  for (const auto& f : declared.fields()) {
    std::string low = f->name();
    std::transform(low.begin(), low.end(), low.begin(), ::tolower);
    if (f->name().empty()) return arrow::Status::Invalid("schema has a column with an empty name");
    if (f->name().find('\0') != std::string::npos) {
      return arrow::Status::Invalid("schema has a column name with a NUL character");
    }
    if (!lowered.insert(low).second) {
      return arrow::Status::Invalid("schema has two columns named '", f->name(),
                                    "' (names must be unique ignoring case)");
    }
  }
  if (declared.num_fields() == 0) return arrow::Status::Invalid("schema has no columns");

  if (options.time_column) {
    auto field = declared.GetFieldByName(*options.time_column);
    if (!field) {
      return arrow::Status::Invalid("time_column '", *options.time_column,
                                    "' is not in the schema (columns: ", JoinNames(declared), ")");
    }
    if (field->type()->id() != arrow::Type::TIMESTAMP) {
      return arrow::Status::Invalid("time_column '", *options.time_column, "' has type ",
                                    field->type()->ToString(), "; it must be a timestamp");
    }
    c.time_column = *options.time_column;
  } else {
    std::vector<std::string> candidates;
    for (const auto& f : declared.fields()) {
      if (f->type()->id() == arrow::Type::TIMESTAMP) candidates.push_back(f->name());
    }
    if (candidates.size() > 1) {
      std::string names;
      for (const auto& n : candidates) names += (names.empty() ? "" : ", ") + n;
      return arrow::Status::Invalid("schema has several timestamp columns (", names,
                                    "): name the time column with time_column=...");
    }
    if (candidates.size() == 1) c.time_column = candidates[0];
  }

  if (options.series_key) {
    std::set<std::string> seen;
    for (const auto& name : *options.series_key) {
      auto field = declared.GetFieldByName(name);
      if (!field) {
        return arrow::Status::Invalid("series_key column '", name,
                                      "' is not in the schema (columns: ", JoinNames(declared), ")");
      }
      if (!seen.insert(name).second) {
        return arrow::Status::Invalid("series_key names column '", name, "' twice");
      }
      if (name == c.time_column) {
        return arrow::Status::Invalid("series_key column '", name,
                                      "' is the time column; a series key identifies a series "
                                      "apart from time");
      }
      // Keys are sorted, compared and indexed as stored: a declared type is a key type when its
      // Delta storage type is one (date64 is stored as a date, string and binary views as
      // strings and binary, decimal256 of up to 38 digits as decimal128).
      auto stored = StorageSchemaOf(arrow::Schema({field}));
      const arrow::DataType& key_type = stored.ok() ? *(*stored)->field(0)->type() : *field->type();
      if (!IsSeriesKeyType(key_type)) {
        return arrow::Status::Invalid("series_key column '", name, "' has type ",
                                      field->type()->ToString(),
                                      "; use strings, integers, booleans, binary, dates, "
                                      "timestamps or decimals");
      }
      c.series_key.push_back(name);
    }
  }

  const bool ts = c.is_time_series();
  auto needs_time = [&](const char* what) {
    return arrow::Status::Invalid(what, " needs a time column, but the schema has no timestamp "
                                        "column (this would be a plain table)");
  };
  if (options.chunk) {
    if (!ts) return needs_time("chunk");
    if (*options.chunk == "hour") {
      c.chunk = ChunkWidth::kHour;
    } else if (*options.chunk == "day") {
      c.chunk = ChunkWidth::kDay;
    } else if (*options.chunk == "month") {
      c.chunk = ChunkWidth::kMonth;
    } else {
      return arrow::Status::Invalid("chunk must be \"hour\", \"day\" or \"month\", got '",
                                    *options.chunk, "'");
    }
  } else if (ts) {
    c.chunk = ChunkWidth::kDay;
  }
  if (options.retention) {
    if (!ts) return needs_time("retention");
    ARROW_ASSIGN_OR_RAISE(c.retention_us, ParseDuration(*options.retention));
    c.retention = *options.retention;
  }
  if (options.dedup && *options.dedup != "none") {
    if (!ts) return needs_time("dedup");
    if (*options.dedup == "last") {
      c.dedup = DedupPolicy::kLast;
    } else if (*options.dedup == "first") {
      c.dedup = DedupPolicy::kFirst;
    } else {
      return arrow::Status::Invalid("dedup must be None, \"none\", \"last\" or \"first\", got '",
                                    *options.dedup, "'");
    }
  }
  ARROW_RETURN_NOT_OK(ValidateProperties(options.properties));
  auto append_only = options.properties.find("delta.appendOnly");
  if (append_only != options.properties.end() && append_only->second == "true" &&
      (c.retention_us > 0 || c.dedup != DedupPolicy::kNone)) {
    // Delta's appendOnly forbids removing rows (a remove with dataChange: true), which is what
    // retention does, and what compaction does when deduplication drops rows.
    return arrow::Status::Invalid(
        "table property 'delta.appendOnly' = 'true' forbids removing rows, but ",
        c.retention_us > 0 ? "retention drops old chunks" : "dedup drops duplicate rows",
        "; leave one of them out");
  }
  return c;
}

std::map<std::string, std::string> ContractConfiguration(const Contract& c) {
  std::map<std::string, std::string> out;
  if (!c.is_time_series()) return out;
  out[kTimeColumn] = c.time_column;
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartArray();
  for (const auto& k : c.series_key) w.String(k);
  w.EndArray();
  out[kSeriesKey] = std::string(buffer.GetString(), buffer.GetSize());
  out[kChunk] = ChunkWidthName(c.chunk);
  if (!c.retention.empty()) out[kRetention] = c.retention;
  out[kDedup] = DedupPolicyName(c.dedup);
  return out;
}

arrow::Result<Contract> ContractFromConfiguration(const std::map<std::string, std::string>& config) {
  Contract c;
  auto get = [&](const char* key) -> std::string {
    auto it = config.find(key);
    return it == config.end() ? "" : it->second;
  };
  c.time_column = get(kTimeColumn);
  if (c.time_column.empty()) return c;
  rapidjson::Document doc;
  const std::string keys = get(kSeriesKey);
  doc.Parse(keys.empty() ? "[]" : keys.c_str());
  if (doc.HasParseError() || !doc.IsArray()) {
    return arrow::Status::IOError("corrupt ", kSeriesKey, " in table configuration: ", keys);
  }
  for (const auto& k : doc.GetArray()) {
    if (k.IsString()) c.series_key.emplace_back(k.GetString(), k.GetStringLength());
  }
  const std::string chunk = get(kChunk);
  c.chunk = chunk == "hour" ? ChunkWidth::kHour : chunk == "month" ? ChunkWidth::kMonth : ChunkWidth::kDay;
  c.retention = get(kRetention);
  if (!c.retention.empty()) {
    ARROW_ASSIGN_OR_RAISE(c.retention_us, ParseDuration(c.retention));
  }
  const std::string dedup = get(kDedup);
  c.dedup = dedup == "last" ? DedupPolicy::kLast : dedup == "first" ? DedupPolicy::kFirst : DedupPolicy::kNone;
  return c;
}

std::string ChunkWidthName(ChunkWidth chunk) {
  switch (chunk) {
    case ChunkWidth::kHour: return "hour";
    case ChunkWidth::kDay: return "day";
    case ChunkWidth::kMonth: return "month";
    default: return "";
  }
}

std::string DedupPolicyName(DedupPolicy dedup) {
  switch (dedup) {
    case DedupPolicy::kLast: return "last";
    case DedupPolicy::kFirst: return "first";
    default: return "none";
  }
}

int64_t ChunkOrdinal(ChunkWidth chunk, int64_t micros) {
  switch (chunk) {
    case ChunkWidth::kHour: return FloorDiv(micros, kMicrosPerHour);
    case ChunkWidth::kDay: return FloorDiv(micros, kMicrosPerDay);
    case ChunkWidth::kMonth: {
      const CivilDate d = CivilFromDays(FloorDiv(micros, kMicrosPerDay));
      return (d.year - 1970) * 12 + (d.month - 1);
    }
    default: return 0;
  }
}

int64_t ChunkStart(ChunkWidth chunk, int64_t ordinal) {
  switch (chunk) {
    case ChunkWidth::kHour: return ordinal * kMicrosPerHour;
    case ChunkWidth::kDay: return ordinal * kMicrosPerDay;
    case ChunkWidth::kMonth: {
      const int64_t year = 1970 + FloorDiv(ordinal, 12);
      const int month = static_cast<int>(ordinal - FloorDiv(ordinal, 12) * 12) + 1;
      return DaysFromCivil(year, month, 1) * kMicrosPerDay;
    }
    default: return INT64_MIN;
  }
}

int64_t ChunkEnd(ChunkWidth chunk, int64_t ordinal) {
  return chunk == ChunkWidth::kNone ? INT64_MAX : ChunkStart(chunk, ordinal + 1);
}

std::string ChunkLabel(ChunkWidth chunk, int64_t ordinal) {
  if (chunk == ChunkWidth::kNone) return "";
  const int64_t start = ChunkStart(chunk, ordinal);
  const int64_t days = FloorDiv(start, kMicrosPerDay);
  const CivilDate d = CivilFromDays(days);
  char buf[48];
  switch (chunk) {
    case ChunkWidth::kHour:
      std::snprintf(buf, sizeof(buf), "%04lld-%02d-%02dT%02lld", static_cast<long long>(d.year),
                    d.month, d.day, static_cast<long long>((start - days * kMicrosPerDay) / kMicrosPerHour));
      break;
    case ChunkWidth::kDay:
      std::snprintf(buf, sizeof(buf), "%04lld-%02d-%02d", static_cast<long long>(d.year), d.month, d.day);
      break;
    default:
      std::snprintf(buf, sizeof(buf), "%04lld-%02d", static_cast<long long>(d.year), d.month);
  }
  return buf;
}

}  // namespace timelake
