// Contract: what makes a table a time-series table.
//
// The contract names the time column, the series key, the chunk width (every data file's rows
// lie within one chunk), the retention and the deduplication policy. It is validated against the
// declared schema once, when the table is created, and lives in the Delta metadata's
// configuration under `timelake.*` keys, where every later writer reads it back.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <arrow/result.h>
#include <arrow/type_fwd.h>

namespace timelake {

enum class ChunkWidth { kNone, kHour, kDay, kMonth };
enum class DedupPolicy { kNone, kLast, kFirst };

/// What create_table was given; unset means "use the default".
struct ContractOptions {
  std::optional<std::string> time_column;
  std::optional<std::vector<std::string>> series_key;
  std::optional<std::string> chunk;
  std::optional<std::string> retention;
  std::optional<std::string> dedup;
  std::map<std::string, std::string> properties;
};

struct Contract {
  std::string time_column;  // empty: a plain table (no chunks, retention or latest)
  std::vector<std::string> series_key;
  ChunkWidth chunk = ChunkWidth::kNone;
  std::string retention;     // as given ("90d"); empty: keep forever
  int64_t retention_us = 0;  // 0: keep forever
  DedupPolicy dedup = DedupPolicy::kNone;

  bool is_time_series() const { return !time_column.empty(); }
};

/// Validates `options` against the declared schema (DESIGN §6); Status::Invalid says what is wrong.
arrow::Result<Contract> MakeContract(const arrow::Schema& declared, const ContractOptions& options);

/// The `timelake.*` configuration entries that record `contract`.
std::map<std::string, std::string> ContractConfiguration(const Contract& contract);

/// Reads the contract back from a table's configuration. A table without `timelake.*` keys
/// (written by another engine) is a plain table.
arrow::Result<Contract> ContractFromConfiguration(const std::map<std::string, std::string>& config);

/// Checks user-supplied table properties (Status::Invalid naming the key and what it expects):
/// `timelake.*` keys must be ones timelake knows; the keys timelake interprets must hold valid
/// values (positive integers, "true"/"false", Delta intervals "interval <n> <unit>");
/// `delta.deletedFileRetentionDuration` must be at least kMinDeletedFileRetentionMs (7 days) unless
/// `timelake.retentionDurationCheck` is "false"; properties that switch on Delta table features
/// timelake does not implement are refused.
arrow::Status ValidateProperties(const std::map<std::string, std::string>& properties);

std::string ChunkWidthName(ChunkWidth chunk);  // "hour", "day", "month", "" for none
std::string DedupPolicyName(DedupPolicy dedup);  // "none", "last", "first"

/// The chunk an instant (microseconds since the epoch, UTC) falls in, as an ordinal: hours, days
/// or months since 1970-01.
int64_t ChunkOrdinal(ChunkWidth chunk, int64_t micros);
/// The first instant of a chunk and the first instant after it.
int64_t ChunkStart(ChunkWidth chunk, int64_t ordinal);
int64_t ChunkEnd(ChunkWidth chunk, int64_t ordinal);
/// The chunk's folder name: "2025-01-02T03" (hour), "2025-01-02" (day), "2025-01" (month).
std::string ChunkLabel(ChunkWidth chunk, int64_t ordinal);

}  // namespace timelake
