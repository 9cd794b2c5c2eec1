#include "timelake/scan/scan_planner.h"

#include <algorithm>
#include <limits>

#include <arrow/type.h>
#include <arrow/type_traits.h>
#include <arrow/util/utf8.h>
#include <rapidjson/document.h>

#include "timelake/log/data_path.h"
#include "timelake/log/deletion_vector.h"
#include "timelake/log/file_tags.h"
#include "timelake/log/schema.h"
#include "timelake/util/time.h"

namespace timelake {
namespace {

constexpr int64_t kNoMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();
// What a cut string max ends in (StatString): the bound holds although the text was cut.
constexpr std::string_view kCutMaxEnd = "\xF4\x8F\xBF\xBF";  // U+10FFFF
// Strings of fewer code points than this cannot have been cut by any Delta writer.
constexpr int64_t kStatStringChars = 32;

/// A file's Delta stats, parsed once (an empty document when it has none).
class FileStats {
 public:
  explicit FileStats(const AddFile& add) {
    if (add.stats) doc_.Parse(add.stats->c_str());
    ok_ = !doc_.HasParseError() && doc_.IsObject();
  }

  int64_t NumRecords() const {
    if (!ok_) return -1;
    auto it = doc_.FindMember("numRecords");
    return it != doc_.MemberEnd() && it->value.IsInt64() ? it->value.GetInt64() : -1;
  }

  /// minValues/maxValues of a top-level column; nullptr when absent.
  const rapidjson::Value* Min(const std::string& column) const {
    return Bound("minValues", column);
  }
  const rapidjson::Value* Max(const std::string& column) const {
    return Bound("maxValues", column);
  }

 private:
  const rapidjson::Value* Bound(const char* which, const std::string& column) const {
    if (!ok_) return nullptr;
    auto values = doc_.FindMember(which);
    if (values == doc_.MemberEnd() || !values->value.IsObject()) return nullptr;
    auto it = values->value.FindMember(
        rapidjson::Value(column.data(), static_cast<rapidjson::SizeType>(column.size())));
    return it == values->value.MemberEnd() ? nullptr : &it->value;
  }

  rapidjson::Document doc_;
  bool ok_ = false;
};

/// An inclusive range a file's values lie in; the ends are kNoMin/kNoMax (or empty text) when
/// unknown.
struct IntRange {
  int64_t min = kNoMin, max = kNoMax;
  bool Excludes(int64_t v) const { return v < min || v > max; }
};

struct TextRange {
  std::optional<std::string> min, max;
  bool Excludes(const std::string& v) const { return (min && v < *min) || (max && v > *max); }
};

IntRange TimeRangeOf(const AddFile& add, const FileStats& stats, const std::string& column) {
  IntRange range{TagInt(add, kMinTimeTag, kNoMin), TagInt(add, kMaxTimeTag, kNoMax)};
  // Stats are floored to the millisecond for the min and truncated to it for the max (the
  // protocol's rule; timelake ceils instead, which the widening below keeps correct).
  if (range.min == kNoMin) {
    const rapidjson::Value* min = stats.Min(column);
    if (min && min->IsString()) {
      if (auto micros = ParseIsoMicros(min->GetString())) range.min = *micros;
    }
  }
  if (range.max == kNoMax) {
    const rapidjson::Value* max = stats.Max(column);
    if (max && max->IsString()) {
      if (auto micros = ParseIsoMicros(max->GetString()); micros && *micros < kNoMax - 999) {
        range.max = *micros + 999;
      }
    }
  }
  return range;
}

IntRange IntKeyRangeOf(const AddFile& add, const FileStats& stats, const std::string& column,
                       bool tagged) {
  IntRange range;
  if (tagged) range = {TagInt(add, kMinKeyTag, kNoMin), TagInt(add, kMaxKeyTag, kNoMax)};
  if (const rapidjson::Value* min = stats.Min(column); min && min->IsInt64()) {
    range.min = std::max(range.min, min->GetInt64());
  }
  if (const rapidjson::Value* max = stats.Max(column); max && max->IsInt64()) {
    range.max = std::min(range.max, max->GetInt64());
  }
  return range;
}

// A string max from stats bounds the column only if it cannot have been cut, or was cut the way
// timelake cuts (other writers may cut a max without raising it).
bool IsTrustedStringMax(std::string_view max) {
  int64_t chars = 0;
  for (unsigned char c : max) chars += (c & 0xC0) != 0x80;
  const bool raised = max.size() >= kCutMaxEnd.size() &&
                      max.substr(max.size() - kCutMaxEnd.size()) == kCutMaxEnd;
  return chars < kStatStringChars || raised;
}

TextRange TextKeyRangeOf(const AddFile& add, const FileStats& stats, const std::string& column,
                         bool tagged) {
  TextRange range;
  if (tagged) {
    // The key tags are cut like the stats, by timelake, so both ends are bounds.
    if (auto it = add.tags.find(kMinKeyTag); it != add.tags.end()) range.min = it->second;
    if (auto it = add.tags.find(kMaxKeyTag); it != add.tags.end()) range.max = it->second;
  }
  if (const rapidjson::Value* min = stats.Min(column); min && min->IsString()) {
    std::string text(min->GetString(), min->GetStringLength());
    if (!range.min || text > *range.min) range.min = std::move(text);
  }
  if (const rapidjson::Value* max = stats.Max(column); max && max->IsString()) {
    std::string text(max->GetString(), max->GetStringLength());
    if (IsTrustedStringMax(text) && (!range.max || text < *range.max)) range.max = std::move(text);
  }
  return range;
}

/// One key equality of the filter, checked against the table.
struct KeyTest {
  std::string column;
  ScanKeyValue value;
  bool tagged;  // the series key is this one column: the key tags bound it too
};

arrow::Result<std::vector<KeyTest>> KeyTests(const ScanFilter& filter, const Contract& contract,
                                             const arrow::Schema& storage) {
  std::vector<KeyTest> tests;
  for (const auto& [column, value] : filter.key_equals) {
    if (std::find(contract.series_key.begin(), contract.series_key.end(), column) ==
        contract.series_key.end()) {
      return arrow::Status::Invalid("scan filter on column '", column,
                                    "', which is not part of the table's series key");
    }
    const auto type = storage.GetFieldByName(column)->type()->id();
    const bool is_int = arrow::is_integer(type);
    const bool is_text = type == arrow::Type::STRING;
    if (is_int && !std::holds_alternative<int64_t>(value)) {
      return arrow::Status::Invalid("scan filter on series-key column '", column,
                                    "' needs an integer: the column holds integers");
    }
    if (is_text && !std::holds_alternative<std::string>(value)) {
      return arrow::Status::Invalid("scan filter on series-key column '", column,
                                    "' needs text: the column holds strings");
    }
    if (!is_int && !is_text) continue;  // no ranges kept for other types: never prunes
    tests.push_back({column, value, contract.series_key.size() == 1});
  }
  return tests;
}

/// False when the file provably holds no row that the filter admits.
bool MayHoldMatches(const AddFile& add, const FileStats& stats, const ScanFilter& filter,
                    const std::vector<KeyTest>& keys, const std::string& time_column) {
  if (filter.min_time && filter.max_time && *filter.min_time > *filter.max_time) return false;
  if (filter.min_time || filter.max_time) {
    const IntRange time = TimeRangeOf(add, stats, time_column);
    if (filter.min_time && *filter.min_time > time.max) return false;
    if (filter.max_time && *filter.max_time < time.min) return false;
  }
  for (const auto& key : keys) {
    if (const int64_t* v = std::get_if<int64_t>(&key.value)) {
      if (IntKeyRangeOf(add, stats, key.column, key.tagged).Excludes(*v)) return false;
    } else if (TextKeyRangeOf(add, stats, key.column, key.tagged)
                   .Excludes(std::get<std::string>(key.value))) {
      return false;
    }
  }
  return true;
}

/// Marks every file that may share a (series key, time) with another file of its chunk.
/// `files[i]` is the plan entry of `adds[i]`.
void MarkOverlaps(const std::vector<const AddFile*>& adds, const Contract& contract,
                  const arrow::Schema& storage, std::vector<ScanFile>* files) {
  // What a file may hold, for deciding which files can share a (series, time) row.
  struct Range {
    int64_t min, max;  // time
    bool has_key;
    std::string min_key, max_key;
    size_t index;
  };
  const bool int_key =
      contract.series_key.size() == 1 &&
      arrow::is_integer(storage.GetFieldByName(contract.series_key[0])->type()->id());
  auto key_less = [int_key](const std::string& a, const std::string& b) {
    if (int_key) {
      auto x = ParseInt64(a), y = ParseInt64(b);
      if (x && y) return *x < *y;
    }
    return a < b;
  };
  std::map<std::string, std::vector<Range>> by_chunk;
  for (size_t i = 0; i < adds.size(); ++i) {
    const AddFile& add = *adds[i];
    auto min_key = add.tags.find(kMinKeyTag);
    auto max_key = add.tags.find(kMaxKeyTag);
    const bool has_key = min_key != add.tags.end() && max_key != add.tags.end();
    by_chunk[(*files)[i].chunk].push_back({TagInt(add, kMinTimeTag, kNoMin),
                                           TagInt(add, kMaxTimeTag, kNoMax), has_key,
                                           has_key ? min_key->second : "",
                                           has_key ? max_key->second : "", i});
  }
  // A file needs read-time deduplication only if another file may hold a row with the same
  // series key and time: their time ranges overlap and (when known) so do their key ranges.
  for (auto& [chunk, ranges] : by_chunk) {
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& a, const Range& b) { return a.min < b.min; });
    for (size_t i = 0; i < ranges.size(); ++i) {
      for (size_t j = i + 1; j < ranges.size() && ranges[j].min <= ranges[i].max; ++j) {
        const Range& a = ranges[i];
        const Range& b = ranges[j];
        const bool keys_apart = a.has_key && b.has_key &&
                                (key_less(a.max_key, b.min_key) || key_less(b.max_key, a.min_key));
        if (keys_apart) continue;
        (*files)[a.index].dedup = true;
        (*files)[b.index].dedup = true;
      }
    }
  }
}

}  // namespace

std::vector<std::string> RestoredColumns(const arrow::Schema& declared, const arrow::Schema& storage) {
  std::vector<std::string> out;
  for (const auto& field : declared.fields()) {
    const auto stored = storage.GetFieldByName(field->name());
    if (stored == nullptr || stored->type()->Equals(*field->type())) continue;
    if (arrow::is_nested(stored->type()->id())) continue;
    const arrow::DataType* own = field->type().get();
    if (own->id() == arrow::Type::DICTIONARY) {
      own = static_cast<const arrow::DictionaryType&>(*own).value_type().get();
    }
    if (own->id() == arrow::Type::DECIMAL256) continue;
    out.push_back(field->name());
  }
  return out;
}

DedupOrder DedupOrderOf(const Contract& contract) {
  DedupOrder order;
  if (contract.dedup == DedupPolicy::kNone) return order;
  order.keys = contract.series_key;
  order.keys.push_back(contract.time_column);
  order.newest_first = contract.dedup == DedupPolicy::kLast;
  return order;
}

arrow::Result<ScanPlan> PlanScan(const ScanSource& source, const ScanFilter& filter) {
  const Snapshot& snapshot = *source.snapshot;
  const Contract& contract = *source.contract;
  if ((filter.min_time || filter.max_time) && !contract.is_time_series()) {
    return arrow::Status::Invalid("scan filter on time, but the table has no time column");
  }
  ARROW_ASSIGN_OR_RAISE(std::vector<KeyTest> keys, KeyTests(filter, contract, *source.storage));

  ScanPlan plan;
  plan.version = snapshot.version;
  plan.widened = WidenedColumns(snapshot.metadata.schema_string);
  plan.evolved = snapshot.metadata.configuration.count("timelake.schemaVersion") > 0 ||
                 !plan.widened.empty();
  const std::string mapping = snapshot.Config("delta.columnMapping.mode", "none");
  std::map<std::string, std::string> logical_of;  // physical -> logical (partition value keys)
  if (mapping != "none") {
    ARROW_ASSIGN_OR_RAISE(plan.physical_names, PhysicalNames(snapshot.metadata.schema_string));
    for (const auto& [logical, physical] : plan.physical_names) logical_of[physical] = logical;
  }
  plan.declared = source.declared;
  plan.contract = contract;
  plan.filter = filter;
  plan.partition_columns = snapshot.metadata.partition_columns;
  arrow::FieldVector file_fields;
  for (const auto& f : source.storage->fields()) {
    if (std::find(plan.partition_columns.begin(), plan.partition_columns.end(), f->name()) ==
        plan.partition_columns.end()) {
      file_fields.push_back(f);
    }
  }
  plan.file_schema = arrow::schema(file_fields);
  plan.storage = source.storage;
  plan.restored = RestoredColumns(*source.declared, *source.storage);
  plan.dedup_order = DedupOrderOf(contract);

  arrow::util::InitializeUTF8();  // once per process; ValidateUTF8 needs its tables
  std::vector<const AddFile*> adds;
  std::vector<bool> kept;
  for (const auto& [path, add] : snapshot.files) {
    const FileStats stats(add);
    ScanFile f;
    ARROW_ASSIGN_OR_RAISE(f.path, DataFileExternalPath(*source.store, source.table_path, add.path));
    if (!arrow::util::ValidateUTF8(f.path)) {
      return arrow::Status::NotImplemented(
          "data file '", add.path, "' of the table at '", source.table_path,
          "' has a path that is not UTF-8 text once its %-escapes are decoded; a query engine "
          "cannot open it. Rewrite the file under a UTF-8 name with the engine that wrote it");
    }
    auto store_path = DataFileStorePath(source.table_path, add.path);
    if (store_path.ok()) f.store_path = *store_path;
    f.size = add.size;
    f.modified_ms = add.modification_time;
    f.seq = TagInt(add, kSeqTag, 0);
    f.order = TagInt(add, kOrderTag, 0);
    f.rows = stats.NumRecords();
    if (add.deletion_vector && f.rows >= 0) f.rows -= add.deletion_vector->cardinality;
    f.partition_values = add.partition_values;
    if (!logical_of.empty()) {
      // Partition values are keyed by physical name under column mapping.
      PartitionValues logical;
      for (const auto& [key, value] : add.partition_values) {
        auto it = logical_of.find(key);
        logical[it == logical_of.end() ? key : it->second] = value;
      }
      f.partition_values = std::move(logical);
    }
    if (auto chunk = add.tags.find(kChunkTag); chunk != add.tags.end()) f.chunk = chunk->second;
    kept.push_back(filter.empty() ||
                   MayHoldMatches(add, stats, filter, keys, contract.time_column));
    adds.push_back(&add);
    plan.files.push_back(std::move(f));
  }
  // Marks first, over every file (see the top of the header), then the filter.
  if (contract.dedup != DedupPolicy::kNone) {
    MarkOverlaps(adds, contract, *source.storage, &plan.files);
  }
  size_t out = 0;
  for (size_t i = 0; i < plan.files.size(); ++i) {
    if (!kept[i]) continue;
    if (adds[i]->deletion_vector) {
      auto rows = ReadDeletionVector(source.store, source.table_path, *adds[i]->deletion_vector);
      if (!rows.ok()) {
        return rows.status().WithMessage("deletion vector of data file ", adds[i]->path, ": ",
                                         rows.status().message());
      }
      plan.files[i].deleted_rows = std::move(*rows);
    }
    if (out != i) plan.files[out] = std::move(plan.files[i]);
    ++out;
  }
  plan.files_pruned = static_cast<int64_t>(plan.files.size() - out);
  plan.files.resize(out);
  const bool foreign = !contract.is_time_series() &&
                       std::none_of(plan.files.begin(), plan.files.end(),
                                    [](const ScanFile& f) { return f.seq != 0; });
  plan.read_by_name = plan.evolved || foreign;
  return plan;
}

}  // namespace timelake
