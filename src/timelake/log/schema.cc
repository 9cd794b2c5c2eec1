#include "timelake/log/schema.h"

#include <openssl/evp.h>

#include <cstring>

#include <arrow/buffer.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <arrow/ipc/writer.h>
#include <arrow/type.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include "timelake/util/json.h"

namespace timelake {
namespace {

using Writer = JsonWriter;
constexpr const char* kTypeChangesKey = "delta.typeChanges";

arrow::Result<std::shared_ptr<arrow::DataType>> StorageType(const std::string& column,
                                                            const std::shared_ptr<arrow::DataType>& t) {
  using arrow::Type;
  auto unsupported = [&]() {
    return arrow::Status::Invalid("column '", column, "' has type ", t->ToString(),
                                  ", which a Delta Lake table cannot store; use a supported type "
                                  "(integers, floats, bool, string, binary, date, timestamp, "
                                  "decimal, list, struct, map)");
  };
  auto bad_scale = [&](int32_t scale) {
    return arrow::Status::Invalid("column '", column, "' has type ", t->ToString(),
                                  ": a Delta Lake decimal needs a scale from 0 to its precision, "
                                  "not ", scale, "; rescale the values first");
  };
  switch (t->id()) {
    case Type::BOOL:
    case Type::INT8:
    case Type::INT16:
    case Type::INT32:
    case Type::INT64:
    case Type::FLOAT:
    case Type::DOUBLE:
    case Type::STRING:
    case Type::BINARY:
    case Type::DATE32:
      return t;
    case Type::DECIMAL128: {
      // Delta (like Parquet and every engine reading it) needs 0 <= scale <= precision.
      const auto& d = static_cast<const arrow::Decimal128Type&>(*t);
      if (d.scale() < 0 || d.scale() > d.precision()) return bad_scale(d.scale());
      return t;
    }
    case Type::UINT8: return arrow::int16();
    case Type::UINT16: return arrow::int32();
    case Type::UINT32: return arrow::int64();
    case Type::HALF_FLOAT: return arrow::float32();
    case Type::LARGE_STRING:
    case Type::STRING_VIEW:
      return arrow::utf8();
    case Type::LARGE_BINARY:
    case Type::BINARY_VIEW:
    case Type::FIXED_SIZE_BINARY:
      return arrow::binary();
    case Type::DATE64: return arrow::date32();
    case Type::TIMESTAMP: {
      const auto& ts = static_cast<const arrow::TimestampType&>(*t);
      return ts.timezone().empty() ? arrow::timestamp(arrow::TimeUnit::MICRO)
                                   : arrow::timestamp(arrow::TimeUnit::MICRO, "UTC");
    }
    case Type::DECIMAL256: {
      const auto& d = static_cast<const arrow::Decimal256Type&>(*t);
      if (d.precision() > 38) return unsupported();
      if (d.scale() < 0 || d.scale() > d.precision()) return bad_scale(d.scale());
      return arrow::decimal128(d.precision(), d.scale());
    }
    case Type::DICTIONARY:
      return StorageType(column, static_cast<const arrow::DictionaryType&>(*t).value_type());
    case Type::LIST:
    case Type::LARGE_LIST:
    case Type::FIXED_SIZE_LIST:
    case Type::LIST_VIEW:
    case Type::LARGE_LIST_VIEW: {
      auto value_field = static_cast<const arrow::BaseListType&>(*t).value_field();
      ARROW_ASSIGN_OR_RAISE(auto value, StorageType(column, value_field->type()));
      return arrow::list(arrow::field("element", value, value_field->nullable()));
    }
    case Type::MAP: {
      const auto& m = static_cast<const arrow::MapType&>(*t);
      ARROW_ASSIGN_OR_RAISE(auto key, StorageType(column, m.key_type()));
      ARROW_ASSIGN_OR_RAISE(auto item, StorageType(column, m.item_type()));
      return std::make_shared<arrow::MapType>(arrow::field("key", key, false),
                                              arrow::field("value", item, m.item_field()->nullable()));
    }
    case Type::STRUCT: {
      if (t->num_fields() == 0) {
        return arrow::Status::Invalid("column '", column,
                                      "' is a struct without fields, which Parquet cannot store; "
                                      "give it a field or leave the column out");
      }
      arrow::FieldVector fields;
      for (const auto& f : t->fields()) {
        ARROW_ASSIGN_OR_RAISE(auto ft, StorageType(column + "." + f->name(), f->type()));
        fields.push_back(arrow::field(f->name(), ft, f->nullable()));
      }
      return arrow::struct_(fields);
    }
    default:
      return unsupported();
  }
}

void WriteDeltaType(Writer& w, const arrow::DataType& t);

// `metadata`: the field's metadata as JSON object text (empty: none).
void WriteDeltaField(Writer& w, const arrow::Field& f, const std::string& metadata = {}) {
  w.StartObject();
  w.Key("name");
  w.String(f.name());
  w.Key("type");
  WriteDeltaType(w, *f.type());
  w.Key("nullable");
  w.Bool(f.nullable());
  w.Key("metadata");
  if (metadata.empty()) {
    w.StartObject();
    w.EndObject();
  } else {
    w.RawValue(metadata.data(), metadata.size(), rapidjson::kObjectType);
  }
  w.EndObject();
}

void WriteDeltaType(Writer& w, const arrow::DataType& t) {
  using arrow::Type;
  switch (t.id()) {
    case Type::BOOL: w.String("boolean"); return;
    case Type::INT8: w.String("byte"); return;
    case Type::INT16: w.String("short"); return;
    case Type::INT32: w.String("integer"); return;
    case Type::INT64: w.String("long"); return;
    case Type::FLOAT: w.String("float"); return;
    case Type::DOUBLE: w.String("double"); return;
    case Type::STRING: w.String("string"); return;
    case Type::BINARY: w.String("binary"); return;
    case Type::DATE32: w.String("date"); return;
    case Type::TIMESTAMP:
      w.String(static_cast<const arrow::TimestampType&>(t).timezone().empty() ? "timestamp_ntz"
                                                                              : "timestamp");
      return;
    case Type::DECIMAL128: {
      const auto& d = static_cast<const arrow::Decimal128Type&>(t);
      w.String("decimal(" + std::to_string(d.precision()) + "," + std::to_string(d.scale()) + ")");
      return;
    }
    case Type::LIST: {
      const auto& l = static_cast<const arrow::ListType&>(t);
      w.StartObject();
      w.Key("type");
      w.String("array");
      w.Key("elementType");
      WriteDeltaType(w, *l.value_type());
      w.Key("containsNull");
      w.Bool(l.value_field()->nullable());
      w.EndObject();
      return;
    }
    case Type::MAP: {
      const auto& m = static_cast<const arrow::MapType&>(t);
      w.StartObject();
      w.Key("type");
      w.String("map");
      w.Key("keyType");
      WriteDeltaType(w, *m.key_type());
      w.Key("valueType");
      WriteDeltaType(w, *m.item_type());
      w.Key("valueContainsNull");
      w.Bool(m.item_field()->nullable());
      w.EndObject();
      return;
    }
    case Type::STRUCT: {
      w.StartObject();
      w.Key("type");
      w.String("struct");
      w.Key("fields");
      w.StartArray();
      for (const auto& f : t.fields()) WriteDeltaField(w, *f);
      w.EndArray();
      w.EndObject();
      return;
    }
    default:
      w.String("string");  // unreachable for storage schemas
  }
}

arrow::Result<std::shared_ptr<arrow::DataType>> ArrowTypeOfDelta(const rapidjson::Value& v) {
  if (v.IsString()) {
    const std::string s(v.GetString(), v.GetStringLength());
    if (s == "boolean") return arrow::boolean();
    if (s == "byte") return arrow::int8();
    if (s == "short") return arrow::int16();
    if (s == "integer") return arrow::int32();
    if (s == "long") return arrow::int64();
    if (s == "float") return arrow::float32();
    if (s == "double") return arrow::float64();
    if (s == "string") return arrow::utf8();
    if (s == "binary") return arrow::binary();
    if (s == "date") return arrow::date32();
    if (s == "timestamp") return arrow::timestamp(arrow::TimeUnit::MICRO, "UTC");
    if (s == "timestamp_ntz") return arrow::timestamp(arrow::TimeUnit::MICRO);
    int p = 0, sc = 0;
    if (std::sscanf(s.c_str(), "decimal(%d,%d)", &p, &sc) == 2) return arrow::decimal128(p, sc);
    if (s == "decimal") return arrow::decimal128(10, 0);
    return arrow::Status::NotImplemented("Delta type '", s, "' is not supported");
  }
  if (!v.IsObject() || !v.HasMember("type") || !v["type"].IsString()) {
    return arrow::Status::IOError("malformed Delta schema type");
  }
  const std::string kind = v["type"].GetString();
  if (kind == "array") {
    ARROW_ASSIGN_OR_RAISE(auto element, ArrowTypeOfDelta(v["elementType"]));
    bool nullable = !v.HasMember("containsNull") || v["containsNull"].GetBool();
    return arrow::list(arrow::field("element", element, nullable));
  }
  if (kind == "map") {
    ARROW_ASSIGN_OR_RAISE(auto key, ArrowTypeOfDelta(v["keyType"]));
    ARROW_ASSIGN_OR_RAISE(auto value, ArrowTypeOfDelta(v["valueType"]));
    bool nullable = !v.HasMember("valueContainsNull") || v["valueContainsNull"].GetBool();
    return std::make_shared<arrow::MapType>(arrow::field("key", key, false),
                                            arrow::field("value", value, nullable));
  }
  if (kind == "struct") {
    arrow::FieldVector fields;
    for (const auto& f : v["fields"].GetArray()) {
      ARROW_ASSIGN_OR_RAISE(auto ft, ArrowTypeOfDelta(f["type"]));
      bool nullable = !f.HasMember("nullable") || f["nullable"].GetBool();
      fields.push_back(arrow::field(f["name"].GetString(), ft, nullable));
    }
    return arrow::struct_(fields);
  }
  return arrow::Status::NotImplemented("Delta type '", kind, "' is not supported");
}

bool TypeNeedsNtz(const arrow::DataType& t) {
  if (t.id() == arrow::Type::TIMESTAMP) {
    return static_cast<const arrow::TimestampType&>(t).timezone().empty();
  }
  for (const auto& f : t.fields()) {
    if (TypeNeedsNtz(*f->type())) return true;
  }
  return false;
}

}  // namespace

namespace {

// True if a struct field below `type` (a Delta type JSON value) carries a physical name.
bool NestedPhysicalName(const rapidjson::Value& type) {
  if (!type.IsObject()) return false;
  if (type.HasMember("fields") && type["fields"].IsArray()) {
    for (const auto& f : type["fields"].GetArray()) {
      if (f.HasMember("metadata") && f["metadata"].IsObject() &&
          f["metadata"].HasMember("delta.columnMapping.physicalName")) {
        return true;
      }
      if (f.HasMember("type") && NestedPhysicalName(f["type"])) return true;
    }
  }
  for (const char* child : {"elementType", "keyType", "valueType"}) {
    if (type.HasMember(child) && NestedPhysicalName(type[child])) return true;
  }
  return false;
}

}  // namespace

arrow::Result<std::map<std::string, std::string>> PhysicalNames(const std::string& schema_string) {
  rapidjson::Document doc;
  doc.Parse(schema_string.c_str(), schema_string.size());
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("fields") || !doc["fields"].IsArray()) {
    return arrow::Status::Invalid("schemaString is not a Delta struct type");
  }
  std::map<std::string, std::string> out;
  for (const auto& f : doc["fields"].GetArray()) {
    if (!f.HasMember("name") || !f["name"].IsString()) continue;
    std::string name = f["name"].GetString();
    std::string physical = name;
    if (f.HasMember("metadata") && f["metadata"].IsObject() &&
        f["metadata"].HasMember("delta.columnMapping.physicalName") &&
        f["metadata"]["delta.columnMapping.physicalName"].IsString()) {
      physical = f["metadata"]["delta.columnMapping.physicalName"].GetString();
    }
    if (f.HasMember("type") && f["type"].IsObject() && NestedPhysicalName(f["type"])) {
      return arrow::Status::NotImplemented("column '", name,
                                           "' has nested fields with column-mapped names, which "
                                           "timelake cannot read yet (top-level columns only)");
    }
    out[name] = physical;
  }
  return out;
}

arrow::Result<std::shared_ptr<arrow::Schema>> StorageSchemaOf(const arrow::Schema& declared) {
  arrow::FieldVector fields;
  for (const auto& f : declared.fields()) {
    ARROW_ASSIGN_OR_RAISE(auto t, StorageType(f->name(), f->type()));
    fields.push_back(arrow::field(f->name(), t, f->nullable()));
  }
  return arrow::schema(fields);
}

arrow::Result<std::string> DeltaSchemaString(const arrow::Schema& storage,
                                             const std::map<std::string, std::string>& kept) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("type");
  w.String("struct");
  w.Key("fields");
  w.StartArray();
  for (const auto& f : storage.fields()) {
    auto it = kept.find(f->name());
    if (it != kept.end()) {
      w.RawValue(it->second.data(), it->second.size(), rapidjson::kObjectType);
    } else {
      WriteDeltaField(w, *f);
    }
  }
  w.EndArray();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

arrow::Result<std::map<std::string, std::string>> FieldsOf(const std::string& schema_string) {
  rapidjson::Document doc;
  doc.Parse(schema_string.c_str(), schema_string.size());
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("fields") || !doc["fields"].IsArray()) {
    return arrow::Status::IOError("malformed Delta schemaString");
  }
  std::map<std::string, std::string> out;
  for (const auto& f : doc["fields"].GetArray()) {
    if (!f.IsObject() || !f.HasMember("name") || !f["name"].IsString()) continue;
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
    f.Accept(w);
    out[std::string(f["name"].GetString(), f["name"].GetStringLength())] =
        std::string(buffer.GetString(), buffer.GetSize());
  }
  return out;
}

arrow::Result<std::string> WidenedField(const std::string& field, const arrow::DataType& from,
                                        const arrow::Field& storage) {
  std::string metadata;
  if (!field.empty()) {
    rapidjson::Document doc;
    doc.Parse(field.c_str(), field.size());
    if (doc.HasParseError() || !doc.IsObject()) return arrow::Status::IOError("malformed Delta field");
    if (doc.HasMember("metadata") && doc["metadata"].IsObject() && doc["metadata"].MemberCount() > 0) {
      rapidjson::StringBuffer buffer;
      rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
      doc["metadata"].Accept(w);
      metadata.assign(buffer.GetString(), buffer.GetSize());
    }
  }
  ARROW_ASSIGN_OR_RAISE(metadata, WithTypeChange(metadata, from, *storage.type()));
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  WriteDeltaField(w, storage, metadata);
  return std::string(buffer.GetString(), buffer.GetSize());
}

arrow::Result<std::string> WithTypeChange(const std::string& metadata, const arrow::DataType& from,
                                          const arrow::DataType& to) {
  rapidjson::Document doc;
  if (metadata.empty()) {
    doc.SetObject();
  } else {
    doc.Parse(metadata.c_str(), metadata.size());
    if (doc.HasParseError() || !doc.IsObject()) return arrow::Status::IOError("malformed field metadata");
  }
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  bool recorded = false;
  auto write_change = [&] {
    w.StartObject();
    w.Key("fromType");
    WriteDeltaType(w, from);
    w.Key("toType");
    WriteDeltaType(w, to);
    w.EndObject();
  };
  for (const auto& m : doc.GetObject()) {
    w.Key(m.name.GetString(), m.name.GetStringLength());
    if (std::strcmp(m.name.GetString(), kTypeChangesKey) == 0 && m.value.IsArray()) {
      // The history, oldest first, then this change.
      w.StartArray();
      for (const auto& change : m.value.GetArray()) change.Accept(w);
      write_change();
      w.EndArray();
      recorded = true;
    } else {
      m.value.Accept(w);
    }
  }
  if (!recorded) {
    w.Key(kTypeChangesKey);
    w.StartArray();
    write_change();
    w.EndArray();
  }
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::vector<std::string> WidenedColumns(const std::string& schema_string) {
  std::vector<std::string> out;
  rapidjson::Document doc;
  doc.Parse(schema_string.c_str(), schema_string.size());
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("fields") || !doc["fields"].IsArray()) {
    return out;
  }
  for (const auto& f : doc["fields"].GetArray()) {
    if (f.IsObject() && f.HasMember("name") && f["name"].IsString() && f.HasMember("metadata") &&
        f["metadata"].IsObject() && f["metadata"].HasMember(kTypeChangesKey) &&
        f["metadata"][kTypeChangesKey].IsArray() && !f["metadata"][kTypeChangesKey].Empty()) {
      out.emplace_back(f["name"].GetString(), f["name"].GetStringLength());
    }
  }
  return out;
}

namespace {

bool IsInteger(const arrow::DataType& t) { return arrow::is_integer(t.id()); }

// Decimal digits a Delta integer type needs (Delta's rule for integer -> decimal widening).
int DecimalDigitsOf(const arrow::DataType& t) { return t.id() == arrow::Type::INT64 ? 20 : 10; }

// True if every value of integer type `narrow` is a value of integer type `wide`.
bool IntegerRangeContains(const arrow::DataType& wide, const arrow::DataType& narrow) {
  const auto& w = static_cast<const arrow::IntegerType&>(wide);
  const auto& n = static_cast<const arrow::IntegerType&>(narrow);
  if (w.is_signed() == n.is_signed()) return w.bit_width() >= n.bit_width();
  // Unsigned into signed needs a bit more; signed never fits unsigned (negative values).
  return w.is_signed() && w.bit_width() > n.bit_width();
}

}  // namespace

bool DeltaAllowsWidening(const arrow::DataType& from, const arrow::DataType& to) {
  using arrow::Type;
  if (IsInteger(from) && IsInteger(to)) {
    return static_cast<const arrow::IntegerType&>(to).bit_width() >
           static_cast<const arrow::IntegerType&>(from).bit_width();
  }
  if (from.id() == Type::FLOAT && to.id() == Type::DOUBLE) return true;
  if ((from.id() == Type::INT8 || from.id() == Type::INT16 || from.id() == Type::INT32) &&
      to.id() == Type::DOUBLE) {
    return true;
  }
  if (from.id() == Type::DATE32 && to.id() == Type::TIMESTAMP) {
    return static_cast<const arrow::TimestampType&>(to).timezone().empty();
  }
  if (to.id() == Type::DECIMAL128) {
    const auto& d = static_cast<const arrow::Decimal128Type&>(to);
    if (IsInteger(from)) return d.precision() - d.scale() >= DecimalDigitsOf(from);
    if (from.id() == Type::DECIMAL128) {
      const auto& f = static_cast<const arrow::Decimal128Type&>(from);
      const int k1 = d.precision() - f.precision(), k2 = d.scale() - f.scale();
      return k2 >= 0 && k1 >= k2 && (k1 > 0 || k2 > 0);
    }
  }
  return false;
}

bool LosslessWidening(const arrow::DataType& from, const arrow::DataType& to) {
  using arrow::Type;
  if (from.Equals(to)) return false;
  if (IsInteger(from) && IsInteger(to)) return IntegerRangeContains(to, from);
  if (IsInteger(from) && to.id() == Type::DOUBLE) {
    return static_cast<const arrow::IntegerType&>(from).bit_width() <= 32;
  }
  if (from.id() == Type::HALF_FLOAT) return to.id() == Type::FLOAT || to.id() == Type::DOUBLE;
  if (from.id() == Type::FLOAT) return to.id() == Type::DOUBLE;
  if ((from.id() == Type::DATE32 || from.id() == Type::DATE64) && to.id() == Type::TIMESTAMP) {
    // Nanoseconds reach only the years 1677 to 2262: a date outside would not fit.
    const auto& ts = static_cast<const arrow::TimestampType&>(to);
    return ts.timezone().empty() && ts.unit() != arrow::TimeUnit::NANO;
  }
  if (to.id() == Type::DECIMAL128 || to.id() == Type::DECIMAL256) {
    const auto& d = static_cast<const arrow::DecimalType&>(to);
    if (IsInteger(from)) {
      const int bits = static_cast<const arrow::IntegerType&>(from).bit_width();
      const int digits = bits <= 8 ? 3 : bits <= 16 ? 5 : bits <= 32 ? 10 : 20;
      return d.precision() - d.scale() >= digits;
    }
    if (from.id() == Type::DECIMAL128 || from.id() == Type::DECIMAL256) {
      const auto& f = static_cast<const arrow::DecimalType&>(from);
      const int k1 = d.precision() - f.precision(), k2 = d.scale() - f.scale();
      return k2 >= 0 && k1 >= k2;
    }
  }
  return false;
}

arrow::Result<std::shared_ptr<arrow::Schema>> SchemaFromDelta(const std::string& schema_string) {
  rapidjson::Document doc;
  doc.Parse(schema_string.c_str());
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("fields")) {
    return arrow::Status::IOError("malformed Delta schemaString");
  }
  ARROW_ASSIGN_OR_RAISE(auto type, ArrowTypeOfDelta(doc));
  return arrow::schema(type->fields());
}

bool NeedsTimestampNtz(const arrow::Schema& storage) {
  for (const auto& f : storage.fields()) {
    if (TypeNeedsNtz(*f->type())) return true;
  }
  return false;
}

arrow::Result<std::string> EncodeArrowSchema(const arrow::Schema& schema) {
  ARROW_ASSIGN_OR_RAISE(auto buffer, arrow::ipc::SerializeSchema(schema));
  std::string out(4 * ((buffer->size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), buffer->data(),
                          static_cast<int>(buffer->size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

arrow::Result<std::shared_ptr<arrow::Schema>> DecodeArrowSchema(const std::string& text) {
  std::string raw(3 * (text.size() / 4) + 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(raw.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return arrow::Status::IOError("corrupt timelake.arrowSchema in table configuration");
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') ++pad;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++pad;
  raw.resize(static_cast<size_t>(n) - pad);
  auto buffer = arrow::Buffer::FromString(std::move(raw));
  arrow::io::BufferReader reader(buffer);
  arrow::ipc::DictionaryMemo memo;
  return arrow::ipc::ReadSchema(&reader, &memo);
}

}  // namespace timelake
