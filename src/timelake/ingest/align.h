// BatchAligner: turns a user's batch into a batch of the table's storage schema.
//
// Columns are matched by name (input order does not matter). Each is cast to the declared type
// with Arrow's safe casts (no overflow, no truncation, no lossy float→int), then to the storage
// type, which must also be lossless (a nanosecond timestamp that is not a whole microsecond is
// refused). Missing nullable columns become nulls. A column the table does not have, a missing
// non-nullable column, an impossible or unsafe cast, a null time, a string that is not UTF-8 (at
// any depth) and otherwise malformed arrays are Status::Invalid, naming the column.
#pragma once

#include <memory>
#include <string>

#include <arrow/record_batch.h>
#include <arrow/result.h>

namespace timelake {

class BatchAligner {
 public:
  /// Checks that batches of `input` can be aligned at all (names and castability).
  static arrow::Result<BatchAligner> Make(std::shared_ptr<arrow::Schema> declared,
                                          std::shared_ptr<arrow::Schema> storage,
                                          const arrow::Schema& input, std::string time_column);

  arrow::Result<std::shared_ptr<arrow::RecordBatch>> Align(const arrow::RecordBatch& batch) const;

 private:
  std::shared_ptr<arrow::Schema> declared_;
  std::shared_ptr<arrow::Schema> storage_;
  std::vector<int> source_index_;  // per declared column: its index in the input, or -1
  std::string time_column_;
};

}  // namespace timelake
