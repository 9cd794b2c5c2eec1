#include "timelake/ingest/align.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <arrow/array.h>
#include <arrow/util/bitmap_ops.h>
#include <arrow/compute/cast.h>
#include <arrow/type.h>

#include "timelake/util/parallel.h"

namespace timelake {
namespace {

// The declared type the user's values must fit, with dictionaries replaced by their values at
// any depth (dictionary encoding is a storage detail the input need not match, and casting into
// a declared dictionary would refuse a batch with more distinct values than its index type
// holds, although they are stored decoded).
std::shared_ptr<arrow::DataType> ValueTypeOf(const std::shared_ptr<arrow::DataType>& t) {
  using arrow::Type;
  auto field_of = [](const std::shared_ptr<arrow::Field>& f) {
    return f->WithType(ValueTypeOf(f->type()));
  };
  switch (t->id()) {
    case Type::DICTIONARY:
      return ValueTypeOf(static_cast<const arrow::DictionaryType&>(*t).value_type());
    case Type::LIST:
      return arrow::list(field_of(static_cast<const arrow::ListType&>(*t).value_field()));
    case Type::LARGE_LIST:
      return arrow::large_list(
          field_of(static_cast<const arrow::LargeListType&>(*t).value_field()));
    case Type::LIST_VIEW:
      return arrow::list_view(field_of(static_cast<const arrow::ListViewType&>(*t).value_field()));
    case Type::LARGE_LIST_VIEW:
      return arrow::large_list_view(
          field_of(static_cast<const arrow::LargeListViewType&>(*t).value_field()));
    case Type::FIXED_SIZE_LIST: {
      const auto& l = static_cast<const arrow::FixedSizeListType&>(*t);
      return arrow::fixed_size_list(field_of(l.value_field()), l.list_size());
    }
    case Type::MAP: {
      const auto& m = static_cast<const arrow::MapType&>(*t);
      return std::make_shared<arrow::MapType>(field_of(m.key_field()), field_of(m.item_field()),
                                              m.keys_sorted());
    }
    case Type::STRUCT: {
      arrow::FieldVector fields;
      for (const auto& f : t->fields()) fields.push_back(field_of(f));
      return arrow::struct_(std::move(fields));
    }
    default:
      return t;
  }
}

// Whether the null count `values` declares (if it declares one) is its validity bitmap's.
bool NullCountMatches(const arrow::Array& values) {
  const int64_t declared = values.data()->null_count.load();
  if (declared == arrow::kUnknownNullCount) return true;  // computed from the bitmap when asked
  const uint8_t* bitmap = values.null_bitmap_data();
  const int64_t nulls =
      bitmap == nullptr
          ? 0
          : values.length() - arrow::internal::CountSetBits(bitmap, values.offset(), values.length());
  return declared == nulls;
}

// Whether n bytes are all ASCII (then they are UTF-8 wherever offsets cut them). Word by word in
// blocks, which the compiler vectorizes: several times faster than checking UTF-8.
bool AllAscii(const uint8_t* p, int64_t n) {
  constexpr int64_t kBlock = 4096;
  constexpr uint64_t kHighBits = 0x8080808080808080ULL;
  for (; n >= kBlock; p += kBlock, n -= kBlock) {
    uint64_t any = 0;
    for (int64_t k = 0; k < kBlock; k += 8) {
      uint64_t word;
      std::memcpy(&word, p + k, 8);
      any |= word;
    }
    if ((any & kHighBits) != 0) return false;
  }
  uint8_t any = 0;
  for (int64_t k = 0; k < n; ++k) any |= p[k];
  return (any & 0x80) == 0;
}

// Array::ValidateFull, except that the UTF-8 check of a string array whose bytes are all ASCII
// (the common case: keys, labels, codes) is skipped, since it cannot fail: its buffers and
// offsets are checked on the same array viewed as binary, then its bytes for the high bit.
arrow::Status ValidateFullFast(const arrow::Array& values) {
  const auto id = values.type_id();
  if ((id != arrow::Type::STRING && id != arrow::Type::LARGE_STRING) || values.length() == 0) {
    return values.ValidateFull();
  }
  auto data = values.data()->Copy();
  data->type = id == arrow::Type::STRING ? arrow::binary() : arrow::large_binary();
  auto bytes = arrow::MakeArray(data);
  if (!bytes->ValidateFull().ok()) return values.ValidateFull();  // its own message
  int64_t first = 0, last = 0;
  if (id == arrow::Type::STRING) {
    const int32_t* offsets = static_cast<const arrow::BinaryArray&>(*bytes).raw_value_offsets();
    first = offsets[0];
    last = offsets[values.length()];
  } else {
    const int64_t* offsets = static_cast<const arrow::LargeBinaryArray&>(*bytes).raw_value_offsets();
    first = offsets[0];
    last = offsets[values.length()];
  }
  if (last == first) return arrow::Status::OK();
  if (AllAscii(data->buffers[2]->data() + first, last - first)) return arrow::Status::OK();
  return values.ValidateFull();
}

// Arrays that cross the Arrow C stream interface are not validated on import, and pyarrow lets
// users build strings that are not UTF-8. Parquet and every query engine reject such values
// later, on every read: refuse them here, with the column's name. Full validation covers strings
// at any depth (structs, lists, maps, dictionary values), string views and large strings,
// dictionary indices and offsets, in one pass over the batch.
arrow::Status CheckWellFormed(const arrow::Array& values, const std::string& column) {
  // A long string column is checked in slices on all cores (the UTF-8 check of 10M strings
  // takes tens of milliseconds). Adjacent slices share their boundary offset, so the slices'
  // checks together cover every offset and byte; what a slice cannot see of the whole array (its
  // buffers' sizes, the null count it declares) is checked on the whole array first.
  constexpr int64_t kSliceRows = 1 << 20;
  const auto id = values.type_id();
  const bool flat_text = id == arrow::Type::STRING || id == arrow::Type::LARGE_STRING ||
                         id == arrow::Type::BINARY || id == arrow::Type::LARGE_BINARY;
  const int slices = !flat_text ? 1 : static_cast<int>(std::min<int64_t>(
      CpuParallelism(), (values.length() + kSliceRows - 1) / kSliceRows));
  arrow::Status st;
  if (slices <= 1) {
    st = ValidateFullFast(values);
  } else if (st = values.Validate(); st.ok() && !NullCountMatches(values)) {
    st = arrow::Status::Invalid("null_count ", values.data()->null_count.load(),
                                " does not match the validity bitmap");
  } else if (st.ok()) {
    const int64_t per = (values.length() + slices - 1) / slices;
    std::vector<arrow::Status> found(static_cast<size_t>(slices));
    (void)RunParallel(static_cast<size_t>(slices), slices, [&](size_t s) {
      const int64_t offset = static_cast<int64_t>(s) * per;
      found[s] = ValidateFullFast(*values.Slice(offset, std::min(per, values.length() - offset)));
      return arrow::Status::OK();
    });
    for (auto& f : found) {
      if (!f.ok()) {
        st = std::move(f);
        break;
      }
    }
  }
  if (st.ok()) return st;
  if (st.message().find("UTF8") != std::string::npos) {
    return arrow::Status::Invalid("column '", column,
                                  "' has a string that is not valid UTF-8 (", st.message(),
                                  "); decode or clean the text, or declare the column as binary");
  }
  return arrow::Status::Invalid("column '", column, "' holds malformed Arrow data (",
                                st.message(), "); check the producer of the input");
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
      ARROW_RETURN_NOT_OK(CheckWellFormed(*column, field->name()));
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
