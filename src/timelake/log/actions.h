// The Delta log's data model: the actions a commit holds and their JSON form.
//
// One commit file (`_delta_log/<version>.json`) is one JSON object per line, each holding exactly
// one action. Parsing ignores unknown actions and unknown fields, as the Delta protocol requires;
// serialising writes commitInfo first (Spark does, and in-commit timestamps need it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <arrow/result.h>

namespace timelake {

struct Protocol {
  int32_t min_reader_version = 1;
  int32_t min_writer_version = 2;
  std::optional<std::vector<std::string>> reader_features;
  std::optional<std::vector<std::string>> writer_features;
};

struct Metadata {
  std::string id;
  std::optional<std::string> name;
  std::optional<std::string> description;
  std::string format_provider = "parquet";
  std::map<std::string, std::string> format_options;
  std::string schema_string;
  std::vector<std::string> partition_columns;
  std::map<std::string, std::string> configuration;
  std::optional<int64_t> created_time;
};

/// Partition values: a missing value (JSON null) is std::nullopt.
using PartitionValues = std::map<std::string, std::optional<std::string>>;

/// A Delta deletion vector descriptor (the rows of a data file that are deleted; see
/// log/deletion_vector.h for reading it).
struct DeletionVector {
  std::string storage_type;     // "u" (relative, by UUID), "i" (inline), "p" (absolute path)
  std::string path_or_inline;   // encoded as the storage type says
  std::optional<int64_t> offset;  // where it starts in its file (not for inline)
  int64_t size_in_bytes = 0;
  int64_t cardinality = 0;      // rows deleted
};

struct AddFile {
  std::string path;  // relative to the table root, URI-encoded
  PartitionValues partition_values;
  int64_t size = 0;
  int64_t modification_time = 0;
  bool data_change = true;
  std::optional<std::string> stats;  // the stats JSON text
  std::map<std::string, std::string> tags;
  std::optional<DeletionVector> deletion_vector;  // rows another engine deleted (read only)
};

/// The file's row count from its stats (`numRecords`), or -1 when it has none.
int64_t NumRecords(const AddFile& add);

struct RemoveFile {
  std::string path;
  std::optional<int64_t> deletion_timestamp;
  bool data_change = true;
  bool extended_file_metadata = false;
  PartitionValues partition_values;
  std::optional<int64_t> size;
  std::map<std::string, std::string> tags;
};

struct Txn {
  std::string app_id;
  int64_t version = 0;
  std::optional<int64_t> last_updated;
};

struct CommitInfo {
  int64_t timestamp = 0;
  std::string operation;
  std::map<std::string, std::string> operation_parameters;
  std::optional<int64_t> read_version;
  std::string isolation_level = "Serializable";
  bool is_blind_append = false;
  std::string engine_info;
  std::string txn_id;
  std::map<std::string, int64_t> metrics;  // written as "operationMetrics" (string values)
  /// The metaData.id of the table the writer committed to ("timelakeTableId"; timelake writes
  /// it, other engines do not). A commit whose table id is not its log's table's id is a stray
  /// of a writer whose table was dropped and created again: see IsStrayCommit().
  std::optional<std::string> table_id;
};


/// The actions of one commit.
struct Commit {
  std::optional<CommitInfo> commit_info;
  std::optional<Protocol> protocol;
  std::optional<Metadata> metadata;
  std::vector<Txn> txns;
  std::vector<AddFile> adds;
  std::vector<RemoveFile> removes;
};

/// True if `commit` names a table id (timelake commits do) other than `table_id`: a writer that
/// held a handle on a dropped table put it into the log of the table created again at the same
/// path. Readers treat it as absent, writers take it back.
bool IsStrayCommit(const Commit& commit, const std::string& table_id);

/// Newline-delimited JSON, commitInfo first, each line ending in '\n'.
std::string SerializeCommit(const Commit& commit);

/// Parses a commit file. Every non-blank line must be a JSON object holding an action, and the
/// file must hold at least one action; anything else (malformed JSON, `{}`, an empty or blank
/// file) is corruption: Status::IOError naming `origin`.
arrow::Result<Commit> ParseCommit(std::string_view text, const std::string& origin);

/// The file name of a commit: 20-digit zero-padded version plus ".json".
std::string CommitFileName(int64_t version);
/// The file name of a classic checkpoint: 20-digit zero-padded version plus ".checkpoint.parquet".
std::string CheckpointFileName(int64_t version);

/// If `name` (a file name, not a path) is a commit or a classic checkpoint file, its version.
std::optional<int64_t> CommitVersionOf(std::string_view name);
std::optional<int64_t> CheckpointVersionOf(std::string_view name);

}  // namespace timelake
