// Schemas: what the user declared, what the files store, and what the Delta log says.
//
//  * The declared schema is the Arrow schema given to create_table. It is what Table.schema and
//    query results give back, and it is kept in the table configuration (IPC, base64) because the
//    Delta type system is narrower than Arrow's.
//  * The storage schema is the declared one mapped onto types Delta Lake can describe (unsigned
//    integers widen, large/view strings become string, dictionaries their value type, every
//    timestamp becomes microseconds). Data files are written in it, so every Delta reader agrees
//    with them.
//  * The Delta schema string describes the storage schema in the log's JSON.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <arrow/result.h>
#include <arrow/type_fwd.h>

namespace timelake {

/// Maps a declared schema to the storage schema; Status::Invalid names a column whose type
/// Delta Lake cannot store (time of day, durations, intervals, unions, uint64, …).
arrow::Result<std::shared_ptr<arrow::Schema>> StorageSchemaOf(const arrow::Schema& declared);

/// The Delta `schemaString` for a storage schema. `kept`: Delta field JSON (FieldsOf) to write
/// as it is for the columns it names, so that a new schemaString keeps what the old one said
/// of unchanged columns (metadata at any depth: type change history, comments, other engines'
/// keys).
arrow::Result<std::string> DeltaSchemaString(const arrow::Schema& storage,
                                             const std::map<std::string, std::string>& kept = {});

/// Each top-level field of `schema_string` as its JSON text, by column name.
arrow::Result<std::map<std::string, std::string>> FieldsOf(const std::string& schema_string);

/// Field metadata `metadata` (JSON object text, or empty) with a change of the column's type
/// from `from` to `to` (storage types) appended to its `delta.typeChanges` history.
arrow::Result<std::string> WithTypeChange(const std::string& metadata, const arrow::DataType& from,
                                          const arrow::DataType& to);

/// The Delta field JSON of a column widened from `from` to `storage`'s type: `field` (its old
/// JSON, or empty) with the new type and the change appended to its `delta.typeChanges`.
arrow::Result<std::string> WidenedField(const std::string& field, const arrow::DataType& from,
                                        const arrow::Field& storage);

/// The top-level columns of `schema_string` whose type was widened (a non-empty
/// `delta.typeChanges`): files written before hold an older, narrower type.
std::vector<std::string> WidenedColumns(const std::string& schema_string);

/// Delta type widening (the typeWidening feature): true if a column stored as `from` may become
/// `to` without rewriting files (byte < short < int < long; float and byte/short/int to double;
/// date to timestamp_ntz; decimals to more precision and scale; integers to wide decimals).
bool DeltaAllowsWidening(const arrow::DataType& from, const arrow::DataType& to);

/// True if every value of Arrow type `from` is exactly a value of `to` (a declared type change
/// the user asks for; the storage types must also satisfy DeltaAllowsWidening or stay the same).
bool LosslessWidening(const arrow::DataType& from, const arrow::DataType& to);

/// Parses a Delta `schemaString` (from any engine) into the Arrow schema its files hold.
arrow::Result<std::shared_ptr<arrow::Schema>> SchemaFromDelta(const std::string& schema_string);

/// True if any column (at any depth) is a timestamp without time zone (Delta timestamp_ntz).
bool NeedsTimestampNtz(const arrow::Schema& storage);

/// Delta column mapping: the physical (file) name of each top-level column of `schema_string`,
/// by logical name, from `delta.columnMapping.physicalName` (columns without one keep their
/// name). NotImplemented when a nested field has a physical name of its own (timelake maps
/// top-level columns only).
arrow::Result<std::map<std::string, std::string>> PhysicalNames(const std::string& schema_string);

/// The declared schema as base64 of its Arrow IPC form, and back.
arrow::Result<std::string> EncodeArrowSchema(const arrow::Schema& schema);
arrow::Result<std::shared_ptr<arrow::Schema>> DecodeArrowSchema(const std::string& text);

}  // namespace timelake
