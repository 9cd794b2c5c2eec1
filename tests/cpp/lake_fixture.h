// LakeFixture: a lake over a MemoryStore holding one table "t" of readings (ts, sensor, value)
// keyed by sensor, for tests of table behaviour. Subclasses pick the contract in SetUp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <arrow/api.h>
#include <gtest/gtest.h>

#include "timelake/lake.h"
#include "timelake/store/memory_store.h"
#include "timelake/table/table.h"

namespace timelake::testing {

class LakeFixture : public ::testing::Test {
 protected:
  /// Creates table "t" keyed by sensor with `options` (its series key is set here).
  void CreateTable(ContractOptions options = {}) {
    options.series_key = std::vector<std::string>{"sensor"};
    table_ = lake_->CreateTable("t", schema_, options).ValueOrDie();
  }

  /// Paths of the objects under `prefix`, sorted.
  std::vector<std::string> Objects(const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& meta : store_->List(prefix).ValueOrDie()) out.push_back(meta.path);
    return out;
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>("lake");
  std::shared_ptr<Lake> lake_ = Lake::OverStore(store_);
  std::shared_ptr<arrow::Schema> schema_ = arrow::schema(
      {arrow::field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
       arrow::field("sensor", arrow::utf8()), arrow::field("value", arrow::float64())});
  std::shared_ptr<Table> table_;
};

}  // namespace timelake::testing
