#include "timelake/ingest/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <cstdio>
#include <limits>

#include <arrow/builder.h>
#include <arrow/array.h>
#include <arrow/chunked_array.h>
#include <arrow/compute/api.h>
#include <arrow/scalar.h>
#include <arrow/table.h>
#include <arrow/type.h>
#include <arrow/type_traits.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "timelake/util/time.h"
#include "timelake/util/json.h"

namespace timelake {
namespace {

using Writer = JsonWriter;
constexpr size_t kMaxStringChars = 32;

// Cuts `s` after `n` UTF-8 characters; returns true if anything was cut.
bool TruncateUtf8(std::string* s, size_t n) {
  size_t chars = 0;
  for (size_t i = 0; i < s->size(); ++i) {
    if ((static_cast<unsigned char>((*s)[i]) & 0xC0) != 0x80) {
      if (chars == n) {
        s->resize(i);
        return true;
      }
      ++chars;
    }
  }
  return false;
}

constexpr const char* kMaxCodePoint = "\xF4\x8F\xBF\xBF";  // U+10FFFF

// The range of dates and instants Delta readers parse (Spark: 0001-01-01 to 9999-12-31).
const int64_t kFirstStatDay = DaysFromCivil(1, 1, 1);
const int64_t kLastStatDay = DaysFromCivil(9999, 12, 31);

std::string FormatDate(int32_t days) {
  const CivilDate d = CivilFromDays(days);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04lld-%02d-%02d", static_cast<long long>(d.year), d.month, d.day);
  return buf;
}

// Writes a min or max scalar as a stats value; returns false (writing nothing) if it can't.
bool WriteValue(Writer& w, const std::string& key, const arrow::Scalar& s, bool is_max) {
  if (!s.is_valid) return false;
  using arrow::Type;
  switch (s.type->id()) {
    case Type::INT8: w.Key(key); w.Int(static_cast<const arrow::Int8Scalar&>(s).value); return true;
    case Type::INT16: w.Key(key); w.Int(static_cast<const arrow::Int16Scalar&>(s).value); return true;
    case Type::INT32: w.Key(key); w.Int(static_cast<const arrow::Int32Scalar&>(s).value); return true;
    case Type::INT64: w.Key(key); w.Int64(static_cast<const arrow::Int64Scalar&>(s).value); return true;
    case Type::FLOAT:
    case Type::DOUBLE: {
      const double v = s.type->id() == Type::FLOAT ? static_cast<const arrow::FloatScalar&>(s).value
                                                   : static_cast<const arrow::DoubleScalar&>(s).value;
      if (!std::isfinite(v)) return false;
      w.Key(key);
      w.Double(v);
      return true;
    }
    case Type::DATE32: {
      const int32_t days = static_cast<const arrow::Date32Scalar&>(s).value;
      if (days < kFirstStatDay || days > kLastStatDay) return false;
      w.Key(key);
      w.String(FormatDate(days));
      return true;
    }
    case Type::TIMESTAMP: {
      const auto& ts = static_cast<const arrow::TimestampScalar&>(s);
      int64_t micros = ts.value;  // storage timestamps are microseconds
      int64_t ms = FloorDiv(micros, 1000);
      // The protocol's max is the value truncated to the millisecond, and compliant readers add
      // 1 ms before comparing (Spark, Delta Kernel, delta-rs ≥ 0.25). Ceiling it as well keeps
      // readers that do not adjust correct too, except where that would reach year 10000
      // (9999-12-31T23:59:59.999001 and later), which no reader parses: there the truncated
      // value is the right max. Instants outside years 0001–9999 get no stat at all.
      if (is_max && ms * 1000 != micros && FloorDiv(ms + 1, 86'400'000) <= kLastStatDay) ++ms;
      const int64_t day = FloorDiv(ms, 86'400'000);
      if (day < kFirstStatDay || day > kLastStatDay) return false;
      std::string text = FormatIsoMillis(ms * 1000);
      if (static_cast<const arrow::TimestampType&>(*s.type).timezone().empty()) text.pop_back();
      w.Key(key);
      w.String(text);
      return true;
    }
    case Type::STRING: {
      w.Key(key);
      w.String(StatString(static_cast<const arrow::StringScalar&>(s).view(), is_max));
      return true;
    }
    case Type::DECIMAL128: {
      const auto& d = static_cast<const arrow::Decimal128Scalar&>(s);
      const auto& dt = static_cast<const arrow::Decimal128Type&>(*s.type);
      w.Key(key);
      w.RawValue(d.value.ToString(dt.scale()).c_str(), d.value.ToString(dt.scale()).size(),
                 rapidjson::kNumberType);
      return true;
    }
    default:
      return false;
  }
}

bool HasMinMax(const arrow::DataType& t) {
  using arrow::Type;
  if (t.id() == Type::DICTIONARY) {
    return HasMinMax(*static_cast<const arrow::DictionaryType&>(t).value_type());
  }
  switch (t.id()) {
    case Type::INT8: case Type::INT16: case Type::INT32: case Type::INT64:
    case Type::FLOAT: case Type::DOUBLE: case Type::DATE32: case Type::TIMESTAMP:
    case Type::STRING: case Type::DECIMAL128:
      return true;
    default:
      return false;
  }
}

struct MinMax {
  std::shared_ptr<arrow::Scalar> min, max;
};

// Min and max of a float column, skipping nulls and NaN: one branch-free pass (Arrow's kernel
// calls fmin/fmax per value, the slowest part of summarising a file of measurements).
template <typename ArrowType>
MinMax FloatMinMax(const arrow::ChunkedArray& column) {
  using T = typename ArrowType::c_type;
  using ScalarType = typename arrow::TypeTraits<ArrowType>::ScalarType;
  T lo = std::numeric_limits<T>::infinity();
  T hi = -std::numeric_limits<T>::infinity();
  for (const auto& chunk : column.chunks()) {
    const auto& a = static_cast<const arrow::NumericArray<ArrowType>&>(*chunk);
    const T* v = a.raw_values();
    const int64_t n = a.length();
    if (a.null_count() == 0) {
      // Independent lanes: one running min/max each is a chain of compares a value long; eight
      // let the core (or the vectorizer) work on eight values at once.
      constexpr int kLanes = 8;
      T los[kLanes], his[kLanes];
      for (int k = 0; k < kLanes; ++k) {
        los[k] = lo;
        his[k] = hi;
      }
      int64_t i = 0;
      for (; i + kLanes <= n; i += kLanes) {
        for (int k = 0; k < kLanes; ++k) {
          los[k] = v[i + k] < los[k] ? v[i + k] : los[k];  // false for NaN: skipped
          his[k] = v[i + k] > his[k] ? v[i + k] : his[k];
        }
      }
      for (; i < n; ++i) {
        los[0] = v[i] < los[0] ? v[i] : los[0];
        his[0] = v[i] > his[0] ? v[i] : his[0];
      }
      for (int k = 0; k < kLanes; ++k) {
        lo = los[k] < lo ? los[k] : lo;
        hi = his[k] > hi ? his[k] : hi;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        if (a.IsNull(i)) continue;
        lo = v[i] < lo ? v[i] : lo;
        hi = v[i] > hi ? v[i] : hi;
      }
    }
  }
  if (lo > hi) {  // no value but nulls and NaN
    return MinMax{arrow::MakeNullScalar(column.type()), arrow::MakeNullScalar(column.type())};
  }
  return MinMax{std::make_shared<ScalarType>(lo), std::make_shared<ScalarType>(hi)};
}

// The positions of the dictionary entries that `dict`'s non-null indices use, ascending.
arrow::Result<std::shared_ptr<arrow::Array>> UsedEntries(const arrow::DictionaryArray& dict) {
  const int64_t entries = dict.dictionary()->length();
  std::vector<uint8_t> mark(static_cast<size_t>(entries), 0);
  const arrow::Array& indices = *dict.indices();
  auto visit = [&](auto* values) -> arrow::Status {
    for (int64_t i = 0; i < indices.length(); ++i) {
      if (indices.IsNull(i)) continue;
      const int64_t e = static_cast<int64_t>(values[i]);
      if (e < 0 || e >= entries) {
        return arrow::Status::Invalid("dictionary index ", e, " out of range [0, ", entries, ")");
      }
      mark[static_cast<size_t>(e)] = 1;
    }
    return arrow::Status::OK();
  };
  switch (indices.type_id()) {
    case arrow::Type::INT8: ARROW_RETURN_NOT_OK(visit(indices.data()->GetValues<int8_t>(1))); break;
    case arrow::Type::UINT8: ARROW_RETURN_NOT_OK(visit(indices.data()->GetValues<uint8_t>(1))); break;
    case arrow::Type::INT16: ARROW_RETURN_NOT_OK(visit(indices.data()->GetValues<int16_t>(1))); break;
    case arrow::Type::UINT16: ARROW_RETURN_NOT_OK(visit(indices.data()->GetValues<uint16_t>(1))); break;
    case arrow::Type::INT32: ARROW_RETURN_NOT_OK(visit(indices.data()->GetValues<int32_t>(1))); break;
    case arrow::Type::UINT32: ARROW_RETURN_NOT_OK(visit(indices.data()->GetValues<uint32_t>(1))); break;
    case arrow::Type::INT64: ARROW_RETURN_NOT_OK(visit(indices.data()->GetValues<int64_t>(1))); break;
    case arrow::Type::UINT64: ARROW_RETURN_NOT_OK(visit(indices.data()->GetValues<uint64_t>(1))); break;
    default:
      return arrow::Status::TypeError("dictionary indices of type ", indices.type()->ToString());
  }
  arrow::Int64Builder positions;
  for (int64_t e = 0; e < entries; ++e) {
    if (mark[static_cast<size_t>(e)]) ARROW_RETURN_NOT_OK(positions.Append(e));
  }
  return positions.Finish();
}

arrow::Result<MinMax> ComputeMinMax(std::shared_ptr<arrow::ChunkedArray> column) {
  if (column->type()->id() == arrow::Type::DOUBLE) return FloatMinMax<arrow::DoubleType>(*column);
  if (column->type()->id() == arrow::Type::FLOAT) return FloatMinMax<arrow::FloatType>(*column);
  if (column->type()->id() == arrow::Type::DICTIONARY) {
    // Min/max over the dictionary values the column actually uses: a mark per entry (one pass
    // over the indices, no hashing), then the marked entries.
    arrow::ArrayVector used;
    for (const auto& chunk : column->chunks()) {
      const auto& dict = static_cast<const arrow::DictionaryArray&>(*chunk);
      ARROW_ASSIGN_OR_RAISE(auto marked, UsedEntries(dict));
      ARROW_ASSIGN_OR_RAISE(auto values, arrow::compute::Take(*dict.dictionary(), *marked));
      used.push_back(std::move(values));
    }
    column = std::make_shared<arrow::ChunkedArray>(
        used, static_cast<const arrow::DictionaryType&>(*column->type()).value_type());
  }
  arrow::compute::ScalarAggregateOptions options(/*skip_nulls=*/true);
  ARROW_ASSIGN_OR_RAISE(auto datum, arrow::compute::MinMax(column, options));
  const auto& pair = static_cast<const arrow::StructScalar&>(*datum.scalar());
  return MinMax{pair.value[0], pair.value[1]};
}

// One level of the stats objects; `columns` are the columns (or struct children) at this level.
struct Level {
  std::vector<std::string> names;
  std::vector<std::shared_ptr<arrow::ChunkedArray>> columns;
};

Level ChildrenOf(const arrow::ChunkedArray& column) {
  Level level;
  const auto& type = static_cast<const arrow::StructType&>(*column.type());
  for (int i = 0; i < type.num_fields(); ++i) {
    arrow::ArrayVector chunks;
    for (const auto& chunk : column.chunks()) {
      chunks.push_back(static_cast<const arrow::StructArray&>(*chunk).field(i));
    }
    level.names.push_back(type.field(i)->name());
    level.columns.push_back(std::make_shared<arrow::ChunkedArray>(chunks, type.field(i)->type()));
  }
  return level;
}

// Writes min or max values of a level; `budget` counts the leaf columns still to index.
arrow::Status WriteMinOrMax(Writer& w, const Level& level, bool is_max, int* budget,
                            std::vector<MinMax>* cache, size_t* cursor) {
  w.StartObject();
  for (size_t i = 0; i < level.columns.size(); ++i) {
    const auto& column = level.columns[i];
    if (column->type()->id() == arrow::Type::STRUCT) {
      w.Key(level.names[i]);
      ARROW_RETURN_NOT_OK(WriteMinOrMax(w, ChildrenOf(*column), is_max, budget, cache, cursor));
      continue;
    }
    if (*budget <= 0) continue;
    --*budget;
    if (!HasMinMax(*column->type()) || column->null_count() == column->length()) continue;
    if (*cursor == cache->size()) {
      ARROW_ASSIGN_OR_RAISE(auto mm, ComputeMinMax(column));
      cache->push_back(std::move(mm));
    }
    const MinMax& mm = (*cache)[(*cursor)++];
    WriteValue(w, level.names[i], is_max ? *mm.max : *mm.min, is_max);
  }
  w.EndObject();
  return arrow::Status::OK();
}

void WriteNullCounts(Writer& w, const Level& level) {
  w.StartObject();
  for (size_t i = 0; i < level.columns.size(); ++i) {
    w.Key(level.names[i]);
    if (level.columns[i]->type()->id() == arrow::Type::STRUCT) {
      WriteNullCounts(w, ChildrenOf(*level.columns[i]));
    } else {
      w.Int64(level.columns[i]->null_count());
    }
  }
  w.EndObject();
}

}  // namespace

std::string StatString(std::string_view value, bool is_max) {
  std::string out(value);
  if (!TruncateUtf8(&out, kMaxStringChars) || !is_max) return out;
  out += kMaxCodePoint;
  // A value going on with U+10FFFF after the cut has no short upper bound: keep it whole.
  if (out < value) return std::string(value);
  return out;
}

arrow::Result<std::string> FileStatsJson(const arrow::Table& table, int max_indexed_columns) {
  Level top;
  for (int i = 0; i < table.num_columns(); ++i) {
    top.names.push_back(table.field(i)->name());
    top.columns.push_back(table.column(i));
  }
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("numRecords");
  w.Int64(table.num_rows());
  std::vector<MinMax> cache;  // min and max come from one pass per column
  size_t cursor = 0;
  int budget = max_indexed_columns;
  w.Key("minValues");
  ARROW_RETURN_NOT_OK(WriteMinOrMax(w, top, false, &budget, &cache, &cursor));
  cursor = 0;
  budget = max_indexed_columns;
  w.Key("maxValues");
  ARROW_RETURN_NOT_OK(WriteMinOrMax(w, top, true, &budget, &cache, &cursor));
  w.Key("nullCount");
  WriteNullCounts(w, top);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

namespace {

// -1, 0, 1 as the JSON number `a` is less than, equal to or greater than `b`, exactly, from their
// text (integers, decimals with many digits, exponent forms).
int CompareNumberText(std::string_view a, std::string_view b) {
  struct Parsed {
    bool negative = false;
    std::string digits;    // significant digits, no leading or trailing zeros ("" for zero)
    int64_t exponent = 0;  // value = 0.digits × 10^exponent
  };
  auto parse = [](std::string_view t) {
    Parsed p;
    size_t i = 0;
    if (i < t.size() && (t[i] == '-' || t[i] == '+')) p.negative = t[i++] == '-';
    int64_t point = -1, count = 0;
    std::string all;
    for (; i < t.size() && t[i] != 'e' && t[i] != 'E'; ++i) {
      if (t[i] == '.') {
        point = count;
      } else {
        all += t[i];
        ++count;
      }
    }
    int64_t exp = 0;
    if (i < t.size()) exp = std::strtoll(std::string(t.substr(i + 1)).c_str(), nullptr, 10);
    const int64_t int_digits = point < 0 ? count : point;
    const size_t first = all.find_first_not_of('0');
    if (first == std::string::npos) return Parsed{};  // zero (either sign)
    const size_t last = all.find_last_not_of('0');
    p.digits = all.substr(first, last - first + 1);
    p.exponent = int_digits - static_cast<int64_t>(first) + exp;
    return p;
  };
  const Parsed x = parse(a), y = parse(b);
  const int sx = x.digits.empty() ? 0 : (x.negative ? -1 : 1);
  const int sy = y.digits.empty() ? 0 : (y.negative ? -1 : 1);
  if (sx != sy) return sx < sy ? -1 : 1;
  if (sx == 0) return 0;
  int magnitude = 0;  // of |x| against |y|
  if (x.exponent != y.exponent) {
    magnitude = x.exponent < y.exponent ? -1 : 1;
  } else {
    const int c = x.digits.compare(y.digits);
    magnitude = c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  return sx > 0 ? magnitude : -magnitude;
}

bool IsNumberStat(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::INT8: case arrow::Type::INT16: case arrow::Type::INT32: case arrow::Type::INT64:
    case arrow::Type::FLOAT: case arrow::Type::DOUBLE: case arrow::Type::DECIMAL128:
      return true;
    case arrow::Type::DICTIONARY:
      return IsNumberStat(*static_cast<const arrow::DictionaryType&>(type).value_type());
    default:
      return false;
  }
}

using JsonValue = rapidjson::Value;

const JsonValue* Member(const JsonValue* object, const std::string& name) {
  if (object == nullptr || !object->IsObject()) return nullptr;
  auto it = object->FindMember(rapidjson::StringRef(name.data(), name.size()));
  return it == object->MemberEnd() ? nullptr : &it->value;
}

std::string_view Text(const JsonValue& v) { return {v.GetString(), v.GetStringLength()}; }

// One level of the parts' stats: each part's min or max object and nullCount object there.
struct PartLevel {
  std::vector<const JsonValue*> bounds;
  std::vector<const JsonValue*> nulls;
  std::vector<int64_t> records;
};

int64_t NullsOf(const JsonValue* nulls) {
  if (nulls == nullptr || !nulls->IsString()) return 0;
  return std::strtoll(std::string(Text(*nulls)).c_str(), nullptr, 10);
}

void MergeBounds(Writer& w, const arrow::FieldVector& fields, const PartLevel& level, bool is_max) {
  w.StartObject();
  for (const auto& field : fields) {
    const std::string& name = field->name();
    PartLevel child;
    for (size_t p = 0; p < level.bounds.size(); ++p) {
      child.bounds.push_back(Member(level.bounds[p], name));
      child.nulls.push_back(Member(level.nulls[p], name));
      child.records.push_back(level.records[p]);
    }
    if (field->type()->id() == arrow::Type::STRUCT) {
      const bool present = std::any_of(child.bounds.begin(), child.bounds.end(),
                                       [](const JsonValue* v) { return v != nullptr; });
      if (!present) continue;
      w.Key(name);
      MergeBounds(w, field->type()->fields(), child, is_max);
      continue;
    }
    const JsonValue* best = nullptr;
    bool unknown = false;  // a part has values here but no bound: the whole has none either
    const bool number = IsNumberStat(*field->type());
    for (size_t p = 0; p < child.bounds.size(); ++p) {
      const JsonValue* v = child.bounds[p];
      if (v == nullptr || !v->IsString()) {
        if (child.records[p] - NullsOf(child.nulls[p]) > 0) unknown = true;
        continue;
      }
      if (best == nullptr) {
        best = v;
        continue;
      }
      const int c = number ? CompareNumberText(Text(*v), Text(*best)) : Text(*v).compare(Text(*best));
      if (is_max ? c > 0 : c < 0) best = v;
    }
    if (best == nullptr || unknown) continue;
    w.Key(name);
    if (number) {
      w.RawValue(best->GetString(), best->GetStringLength(), rapidjson::kNumberType);
    } else {
      w.String(best->GetString(), best->GetStringLength());
    }
  }
  w.EndObject();
}

void MergeNulls(Writer& w, const arrow::FieldVector& fields, const std::vector<const JsonValue*>& parts) {
  w.StartObject();
  for (const auto& field : fields) {
    std::vector<const JsonValue*> child;
    for (const JsonValue* part : parts) child.push_back(Member(part, field->name()));
    w.Key(field->name());
    if (field->type()->id() == arrow::Type::STRUCT) {
      MergeNulls(w, field->type()->fields(), child);
    } else {
      int64_t total = 0;
      for (const JsonValue* v : child) total += NullsOf(v);
      w.Int64(total);
    }
  }
  w.EndObject();
}

}  // namespace

arrow::Result<std::string> MergeFileStats(const arrow::Schema& schema, const std::vector<std::string>& parts) {
  if (parts.size() == 1) return parts[0];
  std::vector<rapidjson::Document> docs(parts.size());
  PartLevel mins, maxes;
  std::vector<const JsonValue*> nulls;
  int64_t records = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    // Numbers as their text: a decimal's digits survive, and compare exactly.
    docs[p].Parse<rapidjson::kParseNumbersAsStringsFlag>(parts[p].c_str());
    if (docs[p].HasParseError() || !docs[p].IsObject()) {
      return arrow::Status::Invalid("stats of a file part are not a JSON object");
    }
    const JsonValue* n = Member(&docs[p], "numRecords");
    const int64_t part_records = n && n->IsString() ? std::strtoll(std::string(Text(*n)).c_str(), nullptr, 10) : 0;
    records += part_records;
    const JsonValue* part_nulls = Member(&docs[p], "nullCount");
    nulls.push_back(part_nulls);
    mins.bounds.push_back(Member(&docs[p], "minValues"));
    maxes.bounds.push_back(Member(&docs[p], "maxValues"));
    mins.nulls.push_back(part_nulls);
    maxes.nulls.push_back(part_nulls);
    mins.records.push_back(part_records);
    maxes.records.push_back(part_records);
  }
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("numRecords");
  w.Int64(records);
  w.Key("minValues");
  MergeBounds(w, schema.fields(), mins, false);
  w.Key("maxValues");
  MergeBounds(w, schema.fields(), maxes, true);
  w.Key("nullCount");
  MergeNulls(w, schema.fields(), nulls);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace timelake
