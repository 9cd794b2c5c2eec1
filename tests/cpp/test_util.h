// Helpers shared by the unit tests: status assertions, buffers and small Arrow tables.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <arrow/api.h>
#include <arrow/json/from_string.h>
#include <gtest/gtest.h>

#include "timelake/util/status.h"
#include "timelake/util/time.h"

#define TL_CONCAT_INNER(a, b) a##b
#define TL_CONCAT(a, b) TL_CONCAT_INNER(a, b)

// ASSERT_OK / EXPECT_OK take a Status or a Result; ASSERT_OK_AND_ASSIGN unwraps a Result.
#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const ::arrow::Status _st = ::arrow::ToStatus(expr);      \
    ASSERT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (false)

#define EXPECT_OK(expr)                                       \
  do {                                                        \
    const ::arrow::Status _st = ::arrow::ToStatus(expr);      \
    EXPECT_TRUE(_st.ok()) << #expr << ": " << _st.ToString(); \
  } while (false)

#define ASSERT_OK_AND_ASSIGN_IMPL(result, lhs, rexpr)                       \
  auto result = (rexpr);                                                    \
  ASSERT_TRUE(result.ok()) << #rexpr << ": " << result.status().ToString(); \
  lhs = std::move(result).ValueUnsafe()

#define ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  ASSERT_OK_AND_ASSIGN_IMPL(TL_CONCAT(_result_, __LINE__), lhs, rexpr)

namespace timelake::testing {

inline std::shared_ptr<arrow::Buffer> Buf(const std::string& s) {
  return arrow::Buffer::FromString(s);
}

inline std::string Str(const std::shared_ptr<arrow::Buffer>& b) { return b->ToString(); }

/// Passes if `status` failed with `code` and its message mentions `needle`.
inline ::testing::AssertionResult FailsWith(const arrow::Status& status, arrow::StatusCode code,
                                            const std::string& needle = "") {
  if (status.ok()) return ::testing::AssertionFailure() << "expected an error, got OK";
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "expected " << arrow::Status::CodeAsString(code) << ", got " << status.ToString();
  }
  if (status.message().find(needle) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message does not mention '" << needle << "': " << status.ToString();
  }
  return ::testing::AssertionSuccess();
}

template <typename T>
::testing::AssertionResult FailsWith(const arrow::Result<T>& result, arrow::StatusCode code,
                                     const std::string& needle = "") {
  return FailsWith(result.status(), code, needle);
}

inline ::testing::AssertionResult IsInvalid(const arrow::Status& s,
                                            const std::string& needle = "") {
  return FailsWith(s, arrow::StatusCode::Invalid, needle);
}
template <typename T>
::testing::AssertionResult IsInvalid(const arrow::Result<T>& r, const std::string& needle = "") {
  return FailsWith(r.status(), arrow::StatusCode::Invalid, needle);
}

template <typename T>
::testing::AssertionResult IsMissing(const arrow::Result<T>& r) {
  if (r.ok()) return ::testing::AssertionFailure() << "expected NotFound, got a value";
  if (!IsNotFound(r.status())) {
    return ::testing::AssertionFailure() << "expected NotFound, got " << r.status().ToString();
  }
  return ::testing::AssertionSuccess();
}

/// An array from Arrow's JSON notation; aborts the test binary on a typo in the literal.
inline std::shared_ptr<arrow::Array> Json(const std::shared_ptr<arrow::DataType>& type,
                                          const std::string& json) {
  return arrow::json::ArrayFromJSONString(type, json).ValueOrDie();
}

/// A record batch of `schema` from one JSON array literal per column.
inline std::shared_ptr<arrow::RecordBatch> Batch(const std::shared_ptr<arrow::Schema>& schema,
                                                 const std::vector<std::string>& columns) {
  arrow::ArrayVector arrays;
  for (int i = 0; i < schema->num_fields(); ++i) {
    arrays.push_back(Json(schema->field(i)->type(), columns.at(static_cast<size_t>(i))));
  }
  return arrow::RecordBatch::Make(schema, arrays.empty() ? 0 : arrays[0]->length(), arrays);
}

inline std::shared_ptr<arrow::Table> TableOf(const std::shared_ptr<arrow::Schema>& schema,
                                             const std::vector<std::string>& columns) {
  return arrow::Table::FromRecordBatches(schema, {Batch(schema, columns)}).ValueOrDie();
}

/// A reader over `batches` (all of `schema`).
inline std::shared_ptr<arrow::RecordBatchReader> Reader(
    const std::shared_ptr<arrow::Schema>& schema,
    std::vector<std::shared_ptr<arrow::RecordBatch>> batches) {
  return arrow::RecordBatchReader::Make(std::move(batches), schema).ValueOrDie();
}

/// Microseconds since the epoch of a UTC civil time.
inline int64_t Micros(int year, int month, int day, int hour = 0, int minute = 0, int second = 0,
                      int64_t micros = 0) {
  return DaysFromCivil(year, month, day) * kMicrosPerDay + hour * kMicrosPerHour +
         minute * 60 * kMicrosPerSecond + second * kMicrosPerSecond + micros;
}

}  // namespace timelake::testing
