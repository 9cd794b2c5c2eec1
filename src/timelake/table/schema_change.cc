// Table schema changes: add_columns and widen_columns, each one metaData commit.
#include "timelake/table/table.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <arrow/type.h>
#include <arrow/type_traits.h>

#include "timelake/log/features.h"
#include "timelake/log/file_tags.h"
#include "timelake/log/schema.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace timelake {

arrow::Result<int64_t> Table::AddColumns(const arrow::FieldVector& fields) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("add_columns"));
  ARROW_RETURN_NOT_OK(UpdateWhole(ctx_));
  ARROW_RETURN_NOT_OK(CheckWritable(ctx_));
  if (fields.empty()) return arrow::Status::Invalid("add_columns needs at least one column");
  std::set<std::string> taken;
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  for (const auto& f : ctx_.declared->fields()) taken.insert(lower(f->name()));
  for (const auto& f : fields) {
    if (!f || f->name().empty()) return arrow::Status::Invalid("add_columns: a column needs a name");
    if (f->name().find('\0') != std::string::npos) {
      return arrow::Status::Invalid("add_columns: column names must not contain NUL characters");
    }
    if (!f->nullable()) {
      return arrow::Status::Invalid("add_columns: column '", f->name(),
                                    "' must be nullable: the rows already in the table have no value "
                                    "for it and read it as null");
    }
    if (!taken.insert(lower(f->name())).second) {
      return arrow::Status::Invalid("add_columns: table '", ctx_.name, "' already has a column named '",
                                    f->name(), "' (names are unique ignoring case)");
    }
  }
  arrow::FieldVector all = ctx_.declared->fields();
  all.insert(all.end(), fields.begin(), fields.end());
  auto declared = arrow::schema(all, ctx_.declared->metadata());
  auto storage = StorageSchemaOf(*declared);
  if (!storage.ok()) return arrow::Status::Invalid("add_columns: ", storage.status().message());
  const Protocol& protocol = ctx_.snapshot.protocol;
  const bool has_ntz = protocol.reader_features &&
                       std::count(protocol.reader_features->begin(), protocol.reader_features->end(),
                                  std::string("timestampNtz")) > 0;
  if (NeedsTimestampNtz(**storage) && !has_ntz) {
    return arrow::Status::Invalid(
        "add_columns: a timestamp column without a time zone needs the Delta feature timestampNtz, "
        "which table '", ctx_.name, "' was created without (timelake does not upgrade a table's "
        "protocol); give the column a time zone (e.g. pa.timestamp('us', tz='UTC'))");
  }
  ARROW_ASSIGN_OR_RAISE(auto kept, FieldsOf(ctx_.snapshot.metadata.schema_string));
  std::string names;
  for (const auto& f : fields) names += (names.empty() ? "" : ", ") + f->name();
  return CommitSchemaChange(declared, **storage, kept, std::nullopt, {}, "ADD COLUMNS",
                            {{"columns", names}}, "add_columns");
}

arrow::Result<int64_t> Table::WidenColumns(const arrow::FieldVector& fields) {
  ARROW_ASSIGN_OR_RAISE(auto lock, mutex_.Acquire("widen_columns"));
  ARROW_RETURN_NOT_OK(UpdateWhole(ctx_));
  ARROW_RETURN_NOT_OK(CheckWritable(ctx_));
  if (fields.empty()) return arrow::Status::Invalid("widen_columns needs at least one column");
  if (ctx_.snapshot.Config("delta.enableTypeWidening") == "false") {
    return arrow::Status::Invalid("widen_columns: table '", ctx_.name, "' has the property "
                                  "delta.enableTypeWidening = \"false\", which turns type changes off "
                                  "(as in Spark); nothing was changed");
  }
  const Contract& contract = ctx_.contract;
  arrow::FieldVector all = ctx_.declared->fields();
  ARROW_ASSIGN_OR_RAISE(auto kept, FieldsOf(ctx_.snapshot.metadata.schema_string));
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  std::set<int> seen;
  std::string changes;
  bool needs_ntz = false;
  for (const auto& given : fields) {
    if (!given || given->name().empty()) return arrow::Status::Invalid("widen_columns: a column needs a name");
    // Column names match ignoring case, as in SQL and Delta.
    int at = ctx_.declared->GetFieldIndex(given->name());
    for (int i = 0; at < 0 && i < ctx_.declared->num_fields(); ++i) {
      if (lower(ctx_.declared->field(i)->name()) == lower(given->name())) at = i;
    }
    if (at < 0) {
      return arrow::Status::Invalid("widen_columns: table '", ctx_.name, "' has no column named '",
                                    given->name(), "' (add it with add_columns)");
    }
    const auto f = given->WithName(ctx_.declared->field(at)->name());
    if (!seen.insert(at).second) {
      return arrow::Status::Invalid("widen_columns: column '", f->name(), "' is given twice");
    }
    if (f->name() == contract.time_column ||
        std::count(contract.series_key.begin(), contract.series_key.end(), f->name()) > 0) {
      return arrow::Status::Invalid("widen_columns: column '", f->name(), "' is the table's ",
                                    f->name() == contract.time_column ? "time column" : "series key",
                                    ", whose type stays as created (deduplication, latest() and "
                                    "chunking compare its values across files)");
    }
    const auto& was = ctx_.declared->field(at);
    const auto& was_storage = ctx_.storage->field(at)->type();
    auto storage_type = StorageSchemaOf(*arrow::schema({arrow::field(f->name(), f->type())}));
    if (!storage_type.ok()) return arrow::Status::Invalid("widen_columns: ", storage_type.status().message());
    const auto& to_storage = (*storage_type)->field(0)->type();
    if (was->type()->Equals(*f->type())) {
      return arrow::Status::Invalid("widen_columns: column '", f->name(), "' already has type ",
                                    f->type()->ToString());
    }
    if (!LosslessWidening(*was->type(), *f->type()) ||
        (!was_storage->Equals(*to_storage) && !DeltaAllowsWidening(*was_storage, *to_storage))) {
      return arrow::Status::Invalid(
          "widen_columns: column '", f->name(), "' cannot change from ", was->type()->ToString(),
          " to ", f->type()->ToString(), "; Delta type widening allows integers to wider integers, "
          "float32 to float64, int8/int16/int32 to float64, date32 to timestamp without time zone "
          "(in s, ms or us), "
          "decimals to more precision (and scale, by no more than the precision grows) and integers "
          "to decimals with room for every value; any other change needs a new table");
    }
    if (!was_storage->Equals(*to_storage)) {
      ARROW_ASSIGN_OR_RAISE(kept[f->name()],
                            WidenedField(kept[f->name()], *was_storage,
                                         *arrow::field(f->name(), to_storage, was->nullable())));
      needs_ntz = needs_ntz || NeedsTimestampNtz(*arrow::schema({arrow::field(f->name(), to_storage)}));
    }
    all[at] = arrow::field(f->name(), f->type(), was->nullable(), was->metadata());
    changes += (changes.empty() ? "" : ", ") + f->name() + " " + was->type()->ToString() + " -> " +
               f->type()->ToString();
  }
  auto declared = arrow::schema(all, ctx_.declared->metadata());
  auto storage = StorageSchemaOf(*declared);
  if (!storage.ok()) return arrow::Status::Invalid("widen_columns: ", storage.status().message());
  // Readers must know that older files hold narrower types: the typeWidening table feature.
  std::optional<Protocol> protocol;
  Protocol wanted = ctx_.snapshot.protocol;
  if (!HasFeature(wanted.reader_features, kTypeWideningFeature) && !ctx_.storage->Equals(**storage)) {
    wanted = WithFeature(wanted, kTypeWideningFeature);
  }
  if (needs_ntz && !HasFeature(wanted.reader_features, "timestampNtz")) {
    wanted = WithFeature(wanted, "timestampNtz");
  }
  if (wanted.min_reader_version != ctx_.snapshot.protocol.min_reader_version ||
      wanted.min_writer_version != ctx_.snapshot.protocol.min_writer_version ||
      wanted.reader_features != ctx_.snapshot.protocol.reader_features ||
      wanted.writer_features != ctx_.snapshot.protocol.writer_features) {
    protocol = wanted;
  }
  std::map<std::string, std::string> config;
  if (HasFeature(wanted.writer_features, kTypeWideningFeature)) config["delta.enableTypeWidening"] = "true";
  return CommitSchemaChange(declared, **storage, kept, protocol, config, "CHANGE COLUMN",
                            {{"columns", changes}}, "widen_columns");
}

arrow::Result<int64_t> Table::CommitSchemaChange(const std::shared_ptr<arrow::Schema>& declared,
                                                 const arrow::Schema& storage,
                                                 const std::map<std::string, std::string>& kept,
                                                 const std::optional<Protocol>& protocol,
                                                 const std::map<std::string, std::string>& config,
                                                 const std::string& operation,
                                                 std::map<std::string, std::string> parameters,
                                                 const std::string& call) {
  Metadata metadata = ctx_.snapshot.metadata;
  ARROW_ASSIGN_OR_RAISE(metadata.schema_string, DeltaSchemaString(storage, kept));
  ARROW_ASSIGN_OR_RAISE(metadata.configuration["timelake.arrowSchema"], EncodeArrowSchema(*declared));
  const int64_t schema_version =
      ParseInt64(ctx_.snapshot.Config("timelake.schemaVersion", "1")).value_or(1) + 1;
  metadata.configuration["timelake.schemaVersion"] = std::to_string(schema_version);
  for (const auto& [key, value] : config) metadata.configuration[key] = value;
  Commit commit;
  commit.commit_info = NewCommitInfo(operation);
  commit.commit_info->operation_parameters = std::move(parameters);
  commit.protocol = protocol;
  commit.metadata = std::move(metadata);
  PendingCommit pending;
  pending.commit = std::move(commit);
  pending.intent.kind = CommitKind::kSchemaChange;
  CommitOutcome outcome;
  ARROW_RETURN_NOT_OK(DroppedOr(ctx_, CommitPending(ctx_, &pending, &outcome)));
  if (!outcome.version) {
    return CommitConflict("commit conflict: " + call + " on table '" + ctx_.name +
                          "' lost to a concurrent commit; retry");
  }
  ARROW_RETURN_NOT_OK(LoadDerived(ctx_));
  return *outcome.version;
}

}  // namespace timelake
