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

#include <arrow/result.h>
#include <arrow/type_fwd.h>

namespace timelake {

/// Maps a declared schema to the storage schema; Status::Invalid names a column whose type
/// Delta Lake cannot store (time of day, durations, intervals, unions, uint64, …).
arrow::Result<std::shared_ptr<arrow::Schema>> StorageSchemaOf(const arrow::Schema& declared);

/// The Delta `schemaString` for a storage schema.
arrow::Result<std::string> DeltaSchemaString(const arrow::Schema& storage);

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
