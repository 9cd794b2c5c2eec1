// Schemas: declared → storage mapping, the Delta schemaString and back, and the Arrow schema that
// the table configuration keeps.
#include "timelake/log/schema.h"

#include <set>

#include <arrow/api.h>
#include <arrow/util/key_value_metadata.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include "test_util.h"

namespace timelake::testing {
namespace {

using arrow::field;

std::shared_ptr<arrow::DataType> StorageTypeOf(const std::shared_ptr<arrow::DataType>& declared) {
  auto storage = StorageSchemaOf(*arrow::schema({field("c", declared)}));
  EXPECT_TRUE(storage.ok()) << storage.status().ToString();
  return storage.ok() ? (*storage)->field(0)->type() : nullptr;
}

// The "type" entry of each top-level field of a schemaString, as JSON text.
std::map<std::string, std::string> DeltaTypes(const std::string& schema_string) {
  rapidjson::Document doc;
  doc.Parse(schema_string.c_str());
  std::map<std::string, std::string> out;
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("fields")) return out;
  for (const auto& f : doc["fields"].GetArray()) {
    const auto& type = f["type"];
    if (type.IsString()) {
      out[f["name"].GetString()] = type.GetString();
    } else {
      out[f["name"].GetString()] = std::string("<") + type["type"].GetString() + ">";
    }
  }
  return out;
}

TEST(StorageSchemaTest, Uint8WidensToInt16) {
  EXPECT_TRUE(StorageTypeOf(arrow::uint8())->Equals(arrow::int16()));
}

TEST(StorageSchemaTest, Uint16WidensToInt32) {
  EXPECT_TRUE(StorageTypeOf(arrow::uint16())->Equals(arrow::int32()));
}

TEST(StorageSchemaTest, Uint32WidensToInt64) {
  EXPECT_TRUE(StorageTypeOf(arrow::uint32())->Equals(arrow::int64()));
}

TEST(StorageSchemaTest, LargeStringBecomesString) {
  EXPECT_TRUE(StorageTypeOf(arrow::large_utf8())->Equals(arrow::utf8()));
}

TEST(StorageSchemaTest, DictionaryOfStringsBecomesString) {
  auto t = StorageTypeOf(arrow::dictionary(arrow::int32(), arrow::utf8()));
  EXPECT_TRUE(t->Equals(arrow::utf8())) << t->ToString();
}

TEST(StorageSchemaTest, ZonedNanosecondTimestampBecomesMicrosecondUtc) {
  auto t = StorageTypeOf(arrow::timestamp(arrow::TimeUnit::NANO, "Europe/Paris"));
  EXPECT_TRUE(t->Equals(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"))) << t->ToString();
}

TEST(StorageSchemaTest, NaiveTimestampStaysNaiveInMicroseconds) {
  auto t = StorageTypeOf(arrow::timestamp(arrow::TimeUnit::NANO));
  EXPECT_TRUE(t->Equals(arrow::timestamp(arrow::TimeUnit::MICRO))) << t->ToString();
}

TEST(StorageSchemaTest, NestedTypesAreMappedInside) {
  auto declared = arrow::struct_({field("u", arrow::uint8()),
                                  field("l", arrow::large_list(arrow::large_utf8()))});
  auto expected = arrow::struct_(
      {field("u", arrow::int16()), field("l", arrow::list(field("element", arrow::utf8())))});
  auto t = StorageTypeOf(declared);
  EXPECT_TRUE(t->Equals(expected)) << t->ToString();
}

TEST(StorageSchemaTest, NullabilityIsKept) {
  ASSERT_OK_AND_ASSIGN(auto storage,
                       StorageSchemaOf(*arrow::schema({field("id", arrow::uint8(), false)})));
  EXPECT_FALSE(storage->field(0)->nullable());
}

TEST(StorageSchemaTest, TimeOfDayIsInvalidNamingTheColumn) {
  auto schema = arrow::schema({field("ok", arrow::int64()),
                               field("opens_at", arrow::time64(arrow::TimeUnit::MICRO))});
  EXPECT_TRUE(IsInvalid(StorageSchemaOf(*schema), "opens_at"));
}

TEST(StorageSchemaTest, DecimalWithNegativeScaleIsInvalidNamingTheColumn) {
  auto schema = arrow::schema({field("price", arrow::decimal128(5, -2))});
  EXPECT_TRUE(IsInvalid(StorageSchemaOf(*schema), "price"));
  EXPECT_TRUE(IsInvalid(StorageSchemaOf(*arrow::schema({field("p", arrow::decimal256(5, -1))})),
                        "scale"));
}

TEST(StorageSchemaTest, StructWithoutFieldsIsInvalidNamingThePath) {
  auto schema = arrow::schema({field("s", arrow::struct_({field("empty", arrow::struct_({}))}))});
  EXPECT_TRUE(IsInvalid(StorageSchemaOf(*schema), "s.empty"));
}

TEST(StorageSchemaTest, Uint64IsInvalid) {
  EXPECT_TRUE(IsInvalid(StorageSchemaOf(*arrow::schema({field("big", arrow::uint64())})), "big"));
}

TEST(StorageSchemaTest, UnsupportedNestedTypeNamesThePath) {
  auto schema = arrow::schema(
      {field("s", arrow::struct_({field("d", arrow::duration(arrow::TimeUnit::SECOND))}))});
  EXPECT_TRUE(IsInvalid(StorageSchemaOf(*schema), "s.d"));
}

TEST(DeltaSchemaTest, PrimitiveTypesUseDeltaNames) {
  auto storage = arrow::schema({
      field("b", arrow::boolean()), field("i8", arrow::int8()), field("i16", arrow::int16()),
      field("i32", arrow::int32()), field("i64", arrow::int64()), field("f", arrow::float32()),
      field("d", arrow::float64()), field("s", arrow::utf8()), field("bin", arrow::binary()),
      field("day", arrow::date32()),
      field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
      field("ntz", arrow::timestamp(arrow::TimeUnit::MICRO)),
      field("money", arrow::decimal128(10, 2)),
  });
  ASSERT_OK_AND_ASSIGN(auto text, DeltaSchemaString(*storage));
  EXPECT_EQ(DeltaTypes(text), (std::map<std::string, std::string>{
                                  {"b", "boolean"},
                                  {"i8", "byte"},
                                  {"i16", "short"},
                                  {"i32", "integer"},
                                  {"i64", "long"},
                                  {"f", "float"},
                                  {"d", "double"},
                                  {"s", "string"},
                                  {"bin", "binary"},
                                  {"day", "date"},
                                  {"ts", "timestamp"},
                                  {"ntz", "timestamp_ntz"},
                                  {"money", "decimal(10,2)"},
                              }));
}

TEST(DeltaSchemaTest, NestedTypesUseDeltaStructArrayAndMap) {
  auto storage = arrow::schema({
      field("s", arrow::struct_({field("x", arrow::int32())})),
      field("a", arrow::list(field("element", arrow::int64(), false))),
      field("m", std::make_shared<arrow::MapType>(field("key", arrow::utf8(), false),
                                                  field("value", arrow::float64()))),
  });
  ASSERT_OK_AND_ASSIGN(auto text, DeltaSchemaString(*storage));
  EXPECT_EQ(DeltaTypes(text), (std::map<std::string, std::string>{
                                  {"s", "<struct>"}, {"a", "<array>"}, {"m", "<map>"}}));
  EXPECT_NE(text.find(R"("elementType":"long","containsNull":false)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("keyType":"string","valueType":"double","valueContainsNull":true)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"({"name":"x","type":"integer","nullable":true,"metadata":{}})"),
            std::string::npos)
      << text;
}

TEST(DeltaSchemaTest, SchemaFromDeltaInvertsDeltaSchemaString) {
  auto storage = arrow::schema({
      field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
      field("ntz", arrow::timestamp(arrow::TimeUnit::MICRO)),
      field("id", arrow::int32(), false),
      field("n", arrow::int8()),
      field("money", arrow::decimal128(10, 2)),
      field("day", arrow::date32()),
      field("s", arrow::struct_({field("x", arrow::int16()), field("y", arrow::utf8(), false)})),
      field("a", arrow::list(field("element", arrow::float32(), false))),
      field("m", std::make_shared<arrow::MapType>(field("key", arrow::utf8(), false),
                                                  field("value", arrow::binary()))),
  });
  ASSERT_OK_AND_ASSIGN(auto text, DeltaSchemaString(*storage));
  ASSERT_OK_AND_ASSIGN(auto back, SchemaFromDelta(text));
  EXPECT_TRUE(back->Equals(*storage)) << back->ToString() << "\nvs\n" << storage->ToString();
}

TEST(DeltaSchemaTest, SchemaFromDeltaReadsOtherEnginesStrings) {
  // As Spark writes it: nullable omitted nowhere, metadata with comments, bare "decimal".
  const std::string text =
      R"({"type":"struct","fields":[)"
      R"({"name":"id","type":"long","nullable":false,"metadata":{"comment":"key"}},)"
      R"({"name":"amount","type":"decimal","nullable":true,"metadata":{}}]})";
  ASSERT_OK_AND_ASSIGN(auto schema, SchemaFromDelta(text));
  ASSERT_EQ(schema->num_fields(), 2);
  EXPECT_TRUE(schema->field(0)->Equals(field("id", arrow::int64(), false)));
  EXPECT_TRUE(schema->field(1)->type()->Equals(arrow::decimal128(10, 0)));
}

TEST(DeltaSchemaTest, SchemaFromDeltaRejectsUnknownTypes) {
  const std::string text =
      R"({"type":"struct","fields":[{"name":"v","type":"variant","nullable":true,"metadata":{}}]})";
  EXPECT_TRUE(FailsWith(SchemaFromDelta(text), arrow::StatusCode::NotImplemented, "variant"));
}

TEST(DeltaSchemaTest, SchemaFromDeltaRejectsMalformedText) {
  EXPECT_FALSE(SchemaFromDelta("{\"type\":").ok());
  EXPECT_FALSE(SchemaFromDelta("[]").ok());
}

TEST(NeedsTimestampNtzTest, NaiveTimestampNeedsIt) {
  auto schema = arrow::schema({field("t", arrow::timestamp(arrow::TimeUnit::MICRO))});
  EXPECT_TRUE(NeedsTimestampNtz(*schema));
}

TEST(NeedsTimestampNtzTest, ZonedTimestampDoesNot) {
  EXPECT_FALSE(NeedsTimestampNtz(
      *arrow::schema({field("t", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
                      field("v", arrow::float64())})));
}

TEST(NeedsTimestampNtzTest, NaiveTimestampInsideAStructNeedsIt) {
  auto nested = arrow::struct_(
      {field("inner", arrow::list(field("element", arrow::timestamp(arrow::TimeUnit::MICRO))))});
  EXPECT_TRUE(NeedsTimestampNtz(*arrow::schema({field("s", nested)})));
}

TEST(ArrowSchemaCodecTest, RoundTripPreservesTypesNullabilityAndMetadata) {
  auto schema = arrow::schema(
      {
          field("ts", arrow::timestamp(arrow::TimeUnit::NANO, "Europe/Paris"), false,
                arrow::key_value_metadata({"unit"}, {"ns"})),
          field("sensor", arrow::dictionary(arrow::int16(), arrow::utf8())),
          field("reading", arrow::uint32()),
          field("tags", arrow::large_list(arrow::large_utf8())),
      },
      arrow::key_value_metadata({"owner", "pandas"}, {"ops", "{\"index\":[]}"}));
  ASSERT_OK_AND_ASSIGN(auto text, EncodeArrowSchema(*schema));
  ASSERT_OK_AND_ASSIGN(auto back, DecodeArrowSchema(text));
  EXPECT_TRUE(back->Equals(*schema, /*check_metadata=*/true))
      << back->ToString(true) << "\nvs\n" << schema->ToString(true);
}

TEST(ArrowSchemaCodecTest, RoundTripHoldsForEveryBase64PaddingLength) {
  // Growing a column name grows the IPC message; over 24 sizes every padding case occurs.
  std::set<size_t> paddings;
  for (int n = 1; n <= 24; ++n) {
    const std::string name(static_cast<size_t>(n), 'c');
    auto schema = arrow::schema({field(name, arrow::int64())},
                                arrow::key_value_metadata({"k"}, {name}));
    ASSERT_OK_AND_ASSIGN(auto text, EncodeArrowSchema(*schema));
    paddings.insert(text.size() - text.find_last_not_of('=') - 1);
    ASSERT_OK_AND_ASSIGN(auto back, DecodeArrowSchema(text));
    EXPECT_TRUE(back->Equals(*schema, true)) << "name length " << n;
  }
  EXPECT_EQ(paddings, (std::set<size_t>{0, 1, 2}));
}

TEST(ArrowSchemaCodecTest, EncodingIsPlainBase64) {
  ASSERT_OK_AND_ASSIGN(auto text, EncodeArrowSchema(*arrow::schema({field("x", arrow::int32())})));
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.size() % 4, 0u);
  EXPECT_EQ(text.find_first_not_of(
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="),
            std::string::npos);
}

TEST(ArrowSchemaCodecTest, DecodingGarbageFails) {
  EXPECT_FALSE(DecodeArrowSchema("!!not base64!!").ok());
}

}  // namespace
// Delta column mapping: top-level physical names by logical name; nested mapped names refused.
TEST(PhysicalNamesTest, TopLevelColumnsMapToTheirPhysicalNames) {
  const std::string schema =
      R"({"type":"struct","fields":[)"
      R"({"name":"id","type":"integer","nullable":true,"metadata":{"delta.columnMapping.id":1,"delta.columnMapping.physicalName":"col-1"}},)"
      R"({"name":"label","type":"string","nullable":true,"metadata":{}}]})";
  ASSERT_OK_AND_ASSIGN(auto names, PhysicalNames(schema));
  EXPECT_EQ(names, (std::map<std::string, std::string>{{"id", "col-1"}, {"label", "label"}}));
  const std::string nested =
      R"({"type":"struct","fields":[{"name":"s","type":{"type":"struct","fields":[)"
      R"({"name":"x","type":"long","nullable":true,"metadata":{"delta.columnMapping.physicalName":"col-2"}}]},)"
      R"("nullable":true,"metadata":{"delta.columnMapping.physicalName":"col-3"}}]})";
  EXPECT_TRUE(PhysicalNames(nested).status().IsNotImplemented());
  EXPECT_TRUE(PhysicalNames("not json").status().IsInvalid());
}

// Type widening: which changes Delta allows on stored types, which declared changes keep every
// value, and the delta.typeChanges history a widening writes (Spark's form: a JSON array of
// {"fromType", "toType"} in the field's metadata, oldest first).
TEST(TypeWideningTest, DeltaAllowsOnlyTheProtocolsWidenings) {
  using namespace arrow;
  EXPECT_TRUE(DeltaAllowsWidening(*int8(), *int16()));
  EXPECT_TRUE(DeltaAllowsWidening(*int16(), *int64()));
  EXPECT_TRUE(DeltaAllowsWidening(*int32(), *int64()));
  EXPECT_TRUE(DeltaAllowsWidening(*float32(), *float64()));
  EXPECT_TRUE(DeltaAllowsWidening(*int32(), *float64()));
  EXPECT_TRUE(DeltaAllowsWidening(*date32(), *timestamp(TimeUnit::MICRO)));
  EXPECT_TRUE(DeltaAllowsWidening(*decimal128(10, 2), *decimal128(12, 3)));
  EXPECT_TRUE(DeltaAllowsWidening(*int32(), *decimal128(10, 0)));
  EXPECT_TRUE(DeltaAllowsWidening(*int64(), *decimal128(22, 2)));
  EXPECT_FALSE(DeltaAllowsWidening(*int64(), *int32()));
  EXPECT_FALSE(DeltaAllowsWidening(*int64(), *float64()));  // not exact, so Delta refuses it
  EXPECT_FALSE(DeltaAllowsWidening(*int32(), *float32()));
  EXPECT_FALSE(DeltaAllowsWidening(*int32(), *utf8()));
  EXPECT_FALSE(DeltaAllowsWidening(*date32(), *timestamp(TimeUnit::MICRO, "UTC")));
  EXPECT_TRUE(DeltaAllowsWidening(*decimal128(10, 2), *decimal128(11, 3)));
  EXPECT_FALSE(DeltaAllowsWidening(*decimal128(10, 2), *decimal128(11, 4)));  // fewer integer digits
  EXPECT_FALSE(DeltaAllowsWidening(*decimal128(10, 2), *decimal128(10, 2)));
  EXPECT_FALSE(DeltaAllowsWidening(*int32(), *decimal128(9, 0)));
  EXPECT_FALSE(DeltaAllowsWidening(*int64(), *decimal128(20, 1)));
}

TEST(TypeWideningTest, LosslessWideningKeepsEveryValue) {
  using namespace arrow;
  EXPECT_TRUE(LosslessWidening(*int32(), *int64()));
  EXPECT_TRUE(LosslessWidening(*uint8(), *int16()));
  EXPECT_TRUE(LosslessWidening(*uint16(), *uint32()));
  EXPECT_FALSE(LosslessWidening(*int8(), *uint16()));  // negative values
  EXPECT_FALSE(LosslessWidening(*uint32(), *int32()));
  EXPECT_FALSE(LosslessWidening(*int64(), *float64()));
  EXPECT_TRUE(LosslessWidening(*float16(), *float32()));
  EXPECT_FALSE(LosslessWidening(*float64(), *float32()));
  EXPECT_FALSE(LosslessWidening(*int32(), *int32()));
  EXPECT_TRUE(LosslessWidening(*int16(), *decimal128(7, 2)));
  EXPECT_FALSE(LosslessWidening(*int16(), *decimal128(6, 2)));
  EXPECT_TRUE(LosslessWidening(*date32(), *timestamp(TimeUnit::MICRO)));
  EXPECT_FALSE(LosslessWidening(*date32(), *timestamp(TimeUnit::NANO)));  // years 1677-2262 only
}

TEST(TypeWideningTest, TypeChangesAppendToTheHistoryAndOtherMetadataStays) {
  ASSERT_OK_AND_ASSIGN(auto once, WithTypeChange("", *arrow::int16(), *arrow::int32()));
  EXPECT_EQ(once, R"({"delta.typeChanges":[{"fromType":"short","toType":"integer"}]})");
  ASSERT_OK_AND_ASSIGN(auto twice, WithTypeChange(R"({"comment":"x",)" + once.substr(1),
                                                  *arrow::int32(), *arrow::int64()));
  EXPECT_EQ(twice, R"({"comment":"x","delta.typeChanges":[{"fromType":"short","toType":"integer"},)"
                   R"({"fromType":"integer","toType":"long"}]})");
  // A widened field keeps its other metadata; a schemaString keeps the fields it is given.
  const auto storage = arrow::schema({field("t", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
                                      field("v", arrow::int64())});
  ASSERT_OK_AND_ASSIGN(
      auto widened,
      WidenedField(R"({"name":"v","type":"integer","nullable":true,"metadata":{"comment":"x"}})",
                   *arrow::int32(), *storage->field(1)));
  EXPECT_EQ(widened, R"({"name":"v","type":"long","nullable":true,"metadata":{"comment":"x",)"
                     R"("delta.typeChanges":[{"fromType":"integer","toType":"long"}]}})");
  ASSERT_OK_AND_ASSIGN(auto text, DeltaSchemaString(*storage, {{"v", widened}}));
  ASSERT_OK_AND_ASSIGN(auto fields, FieldsOf(text));
  EXPECT_EQ(fields.at("v"), widened);
  EXPECT_EQ(WidenedColumns(text), std::vector<std::string>{"v"});
  ASSERT_OK_AND_ASSIGN(auto parsed, SchemaFromDelta(text));
  EXPECT_TRUE(parsed->Equals(*storage));
  // Kept fields are written as they were, nested metadata included.
  const std::string nested =
      R"({"name":"s","type":{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,)"
      R"("metadata":{"delta.typeChanges":[{"toType":"long","fromType":"integer"}]}}]},"nullable":true,"metadata":{}})";
  const auto with_struct = arrow::schema({field("s", arrow::struct_({field("x", arrow::int64())}))});
  ASSERT_OK_AND_ASSIGN(auto kept, DeltaSchemaString(*with_struct, {{"s", nested}}));
  EXPECT_EQ(kept, R"({"type":"struct","fields":[)" + nested + "]}");
  EXPECT_TRUE(WidenedColumns(R"({"type":"struct","fields":[{"name":"v","type":"long","nullable":true,)"
                             R"("metadata":{"delta.typeChanges":[]}}]})").empty());
}

}  // namespace timelake::testing
