#include "timelake/ingest/align.h"

#include <arrow/array.h>
#include <arrow/compute/cast.h>
#include <arrow/type.h>

namespace timelake {
namespace {

// The declared type the user's values must fit, with dictionaries replaced by their values
// (dictionary encoding is a storage detail the user's input need not match).
std::shared_ptr<arrow::DataType> ValueTypeOf(const std::shared_ptr<arrow::DataType>& t) {
  if (t->id() == arrow::Type::DICTIONARY) {
    return static_cast<const arrow::DictionaryType&>(*t).value_type();
  }
  return t;
}

arrow::Result<std::shared_ptr<arrow::Array>> SafeCast(const std::shared_ptr<arrow::Array>& values,
                                                      const std::shared_ptr<arrow::DataType>& to,
                                                      const std::string& column,
                                                      const std::string& what) {
  if (values->type()->Equals(*to)) return values;
  auto result = arrow::compute::Cast(*values, to, arrow::compute::CastOptions::Safe());
  if (!result.ok()) {
    return arrow::Status::Invalid("column '", column, "': cannot convert ", values->type()->ToString(),
                                  " to ", what, " ", to->ToString(), " without losing data (",
                                  result.status().message(), ")");
  }
  return *result;
}

}  // namespace

arrow::Result<BatchAligner> BatchAligner::Make(std::shared_ptr<arrow::Schema> declared,
                                               std::shared_ptr<arrow::Schema> storage,
                                               const arrow::Schema& input, std::string time_column) {
  BatchAligner aligner;
  for (const auto& f : input.fields()) {
    if (declared->GetFieldIndex(f->name()) < 0) {
      std::string names;
      for (const auto& d : declared->fields()) names += (names.empty() ? "" : ", ") + d->name();
      return arrow::Status::Invalid("column '", f->name(),
                                    "' is not in the table (table columns: ", names,
                                    "); drop it before appending");
    }
    if (input.GetAllFieldIndices(f->name()).size() > 1) {
      return arrow::Status::Invalid("input has column '", f->name(), "' more than once");
    }
  }
  for (const auto& f : declared->fields()) {
    const int index = input.GetFieldIndex(f->name());
    if (index < 0 && !f->nullable()) {
      return arrow::Status::Invalid("column '", f->name(),
                                    "' is declared not nullable but is missing from the input");
    }
    if (index >= 0) {
      const auto& from = input.field(index)->type();
      const auto to = ValueTypeOf(f->type());
      if (!from->Equals(*to) && !arrow::compute::CanCast(*from, *to)) {
        return arrow::Status::Invalid("column '", f->name(), "' has type ", from->ToString(),
                                      ", which cannot be converted to the table's type ",
                                      f->type()->ToString());
      }
    }
    aligner.source_index_.push_back(index);
  }
  aligner.declared_ = std::move(declared);
  aligner.storage_ = std::move(storage);
  aligner.time_column_ = std::move(time_column);
  return aligner;
}

arrow::Result<std::shared_ptr<arrow::RecordBatch>> BatchAligner::Align(
    const arrow::RecordBatch& batch) const {
  arrow::ArrayVector columns;
  columns.reserve(declared_->num_fields());
  for (int i = 0; i < declared_->num_fields(); ++i) {
    const auto& field = declared_->field(i);
    const auto& storage_type = storage_->field(i)->type();
    std::shared_ptr<arrow::Array> column;
    if (source_index_[i] < 0) {
      ARROW_ASSIGN_OR_RAISE(column, arrow::MakeArrayOfNull(storage_type, batch.num_rows()));
    } else {
      column = batch.column(source_index_[i]);
      ARROW_ASSIGN_OR_RAISE(column, SafeCast(column, ValueTypeOf(field->type()), field->name(),
                                             "the declared type"));
      ARROW_ASSIGN_OR_RAISE(column, SafeCast(column, storage_type, field->name(), "the stored type"));
      if (!field->nullable() && column->null_count() > 0) {
        return arrow::Status::Invalid("column '", field->name(), "' is declared not nullable but has ",
                                      column->null_count(), " null values");
      }
    }
    if (field->name() == time_column_ && column->null_count() > 0) {
      return arrow::Status::Invalid("time column '", field->name(), "' has ", column->null_count(),
                                    " null values; every row needs a time");
    }
    columns.push_back(std::move(column));
  }
  return arrow::RecordBatch::Make(storage_, batch.num_rows(), std::move(columns));
}

}  // namespace timelake
