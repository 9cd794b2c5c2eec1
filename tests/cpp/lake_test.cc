// Lake: table names, creating, opening, listing and dropping tables over a MemoryStore.
#include "timelake/lake.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include <arrow/api.h>
#include <gtest/gtest.h>

#include "lake_fixture.h"
#include "test_util.h"
#include "timelake/store/memory_store.h"

namespace timelake::testing {
namespace {

using arrow::field;

std::shared_ptr<arrow::Schema> Readings() {
  return arrow::schema({field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
                        field("sensor", arrow::utf8()), field("value", arrow::float64())});
}

class LakeTest : public LakeFixture {};

TEST(ParseTableNameTest, BareNameIsInTheDefaultNamespace) {
  ASSERT_OK_AND_ASSIGN(auto name, ParseTableName("t"));
  EXPECT_EQ(name.ns, "default");
  EXPECT_EQ(name.table, "t");
  EXPECT_EQ(name.qualified(), "default.t");
  EXPECT_EQ(name.path(), "default/t");
}

TEST(ParseTableNameTest, QualifiedNameNamesTheNamespace) {
  ASSERT_OK_AND_ASSIGN(auto name, ParseTableName("iot.readings_2"));
  EXPECT_EQ(name.ns, "iot");
  EXPECT_EQ(name.table, "readings_2");
}

TEST(ParseTableNameTest, BadNamesAreInvalidQuotingTheName) {
  for (const std::string bad : {"a.b.c", "../x", "1abc", "", "x.", ".x", "a-b", "ns/t", "t n"}) {
    EXPECT_TRUE(IsInvalid(ParseTableName(bad), "'" + bad + "'")) << "'" << bad << "'";
  }
}

TEST(ParseTableNameTest, PartsMayHaveUpTo128Bytes) {
  EXPECT_OK(ParseTableName(std::string(128, 'a')).status());
  EXPECT_TRUE(IsInvalid(ParseTableName(std::string(129, 'a'))));
  EXPECT_TRUE(IsInvalid(ParseTableName("ns." + std::string(129, 'a'))));
}

TEST_F(LakeTest, CreateTableWritesCommitZero) {
  ASSERT_OK_AND_ASSIGN(auto table, lake_->CreateTable("iot.readings", Readings(), {}));
  EXPECT_EQ(table->name(), "iot.readings");
  EXPECT_EQ(table->version(), 0);
  EXPECT_EQ(table->location(), "memory://lake/iot/readings");
  EXPECT_EQ(Objects("iot/readings/_delta_log/"),
            (std::vector<std::string>{"iot/readings/_delta_log/00000000000000000000.json"}));
}

TEST_F(LakeTest, CreatedTableKeepsTheDeclaredSchemaAndContract) {
  ContractOptions options;
  options.series_key = std::vector<std::string>{"sensor"};
  options.dedup = "last";
  ASSERT_OK(lake_->CreateTable("t", Readings(), options).status());
  ASSERT_OK_AND_ASSIGN(auto table, lake_->OpenTable("t"));
  EXPECT_TRUE(table->schema()->Equals(*Readings()));
  EXPECT_EQ(table->contract().time_column, "ts");
  EXPECT_EQ(table->contract().series_key, (std::vector<std::string>{"sensor"}));
  EXPECT_EQ(table->contract().dedup, DedupPolicy::kLast);
}

TEST_F(LakeTest, SecondCreateTableIsAlreadyExists) {
  ASSERT_OK(lake_->CreateTable("t", Readings(), {}).status());
  EXPECT_TRUE(FailsWith(lake_->CreateTable("t", Readings(), {}), arrow::StatusCode::AlreadyExists,
                        "default.t"));
}

TEST_F(LakeTest, CreateTableLosingTheCommitRaceIsAlreadyExists) {
  // Another process creates the table between our existence check and our commit.
  bool raced = false;
  store_->SetFaultHook([&](const std::string& op, const std::string&) {
    if (op == "put_if_absent" && !raced) {
      raced = true;
      auto other = Lake::OverStore(store_);
      EXPECT_OK(other->CreateTable("t", Readings(), {}).status());
    }
    return arrow::Status::OK();
  });
  EXPECT_TRUE(FailsWith(lake_->CreateTable("t", Readings(), {}), arrow::StatusCode::AlreadyExists));
}

TEST_F(LakeTest, CreateTableWithBadContractWritesNothing) {
  ContractOptions options;
  options.series_key = std::vector<std::string>{"value"};
  EXPECT_TRUE(IsInvalid(lake_->CreateTable("t", Readings(), options), "value"));
  EXPECT_TRUE(Objects("").empty());
}

TEST_F(LakeTest, CreateTableWithBadNameIsInvalid) {
  EXPECT_TRUE(IsInvalid(lake_->CreateTable("../escape", Readings(), {})));
  EXPECT_TRUE(Objects("").empty());
}

TEST_F(LakeTest, CreateTableStoresUserProperties) {
  ContractOptions options;
  options.properties = {{"delta.checkpointInterval", "5"}};
  ASSERT_OK(lake_->CreateTable("t", Readings(), options).status());
  ASSERT_OK_AND_ASSIGN(auto data, store_->Get("default/t/_delta_log/00000000000000000000.json"));
  EXPECT_NE(Str(data).find(R"("delta.checkpointInterval":"5")"), std::string::npos);
}

TEST_F(LakeTest, NaiveTimestampTableNeedsTheTimestampNtzFeature) {
  auto schema = arrow::schema({field("ts", arrow::timestamp(arrow::TimeUnit::MICRO))});
  ASSERT_OK(lake_->CreateTable("t", schema, {}).status());
  ASSERT_OK_AND_ASSIGN(auto data, store_->Get("default/t/_delta_log/00000000000000000000.json"));
  EXPECT_NE(Str(data).find(R"("readerFeatures":["timestampNtz"])"), std::string::npos) << Str(data);
}

TEST_F(LakeTest, OpenTableOfMissingTableIsKeyError) {
  auto opened = lake_->OpenTable("iot.nothing");
  EXPECT_TRUE(FailsWith(opened, arrow::StatusCode::KeyError, "iot.nothing"));
  EXPECT_TRUE(IsTableNotFound(opened.status()));
}

TEST_F(LakeTest, TablesListsQualifiedNamesSorted) {
  for (const char* name : {"b.t2", "t", "a.t1"}) {
    ASSERT_OK(lake_->CreateTable(name, Readings(), {}).status());
  }
  ASSERT_OK(store_->Put("a/not_a_table/data/x.parquet", Buf("x")));
  ASSERT_OK(store_->Put("stray.txt", Buf("x")));
  ASSERT_OK_AND_ASSIGN(auto tables, lake_->Tables());
  EXPECT_EQ(tables, (std::vector<std::string>{"a.t1", "b.t2", "default.t"}));
}

TEST_F(LakeTest, DropTableRemovesEverything) {
  ASSERT_OK_AND_ASSIGN(auto table, lake_->CreateTable("iot.t", Readings(), {}));
  ASSERT_OK(store_->Put("iot/t/data/2025-01-01/part-x.parquet", Buf("x")));
  ASSERT_OK(lake_->CreateTable("iot.kept", Readings(), {}).status());
  ASSERT_OK(lake_->DropTable("iot.t"));
  EXPECT_TRUE(Objects("iot/t/").empty());
  EXPECT_FALSE(Objects("iot/kept/").empty());
  EXPECT_TRUE(FailsWith(lake_->OpenTable("iot.t"), arrow::StatusCode::KeyError));
  ASSERT_OK_AND_ASSIGN(auto tables, lake_->Tables());
  EXPECT_EQ(tables, (std::vector<std::string>{"iot.kept"}));
}

TEST_F(LakeTest, DropTableHidesTheWholeTableInOneStepBeforeDeleting) {
  ASSERT_OK(lake_->CreateTable("t", Readings(), {}).status());
  std::vector<std::string> changes;
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "delete" || op == "rename") changes.push_back(op + " " + path);
    return arrow::Status::OK();
  });
  ASSERT_OK(lake_->DropTable("t"));
  ASSERT_FALSE(changes.empty());
  EXPECT_EQ(changes.front(), "rename default/t/");
  EXPECT_TRUE(Objects("default/").empty());  // nothing left, not even the hidden folder
}

TEST_F(LakeTest, DropTableThatCannotDeleteStillHidesTheTable) {
  ASSERT_OK(lake_->CreateTable("t", Readings(), {}).status());
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    return op == "delete" ? arrow::Status::IOError("disk gone") : arrow::Status::OK();
  });
  ASSERT_OK(lake_->DropTable("t"));
  store_->SetFaultHook(nullptr);
  EXPECT_TRUE(FailsWith(lake_->OpenTable("t"), arrow::StatusCode::KeyError));
  ASSERT_OK_AND_ASSIGN(auto tables, lake_->Tables());
  EXPECT_TRUE(tables.empty());
  // The next drop in the namespace sweeps the leftovers.
  ASSERT_OK(lake_->CreateTable("u", Readings(), {}).status());
  ASSERT_OK(lake_->DropTable("u"));
  EXPECT_TRUE(Objects("default/").empty());
}

TEST_F(LakeTest, HandleOpenedBeforeDropCannotCommitAfterIt) {
  ASSERT_OK_AND_ASSIGN(auto old, lake_->CreateTable("t", Readings(), {}));
  ASSERT_OK(lake_->DropTable("t"));
  auto batch = Batch(Readings(), {R"(["2025-01-01 00:00:00"])", R"(["a"])", "[1.5]"});
  auto reader = Reader(Readings(), {batch});
  EXPECT_TRUE(FailsWith(old->Append(reader.get(), {}), arrow::StatusCode::KeyError, "dropped"));
  EXPECT_TRUE(Objects("default/").empty());  // the table did not come back
  ASSERT_OK_AND_ASSIGN(auto tables, lake_->Tables());
  EXPECT_TRUE(tables.empty());
}

TEST_F(LakeTest, HandleOpenedBeforeDropCannotCommitIntoTheRecreatedTable) {
  ASSERT_OK_AND_ASSIGN(auto old, lake_->CreateTable("t", Readings(), {}));
  auto batch = Batch(Readings(), {R"(["2025-01-01 00:00:00"])", R"(["a"])", "[1.5]"});
  ASSERT_OK(old->Append(Reader(Readings(), {batch}).get(), {}).status());  // old at version 1
  ASSERT_OK(lake_->DropTable("t"));
  ASSERT_OK_AND_ASSIGN(auto fresh, lake_->CreateTable("t", Readings(), {}));
  ASSERT_OK(fresh->Append(Reader(Readings(), {batch}).get(), {}).status());  // new at version 1
  EXPECT_TRUE(FailsWith(old->Append(Reader(Readings(), {batch}).get(), {}),
                        arrow::StatusCode::KeyError, "dropped"));
  EXPECT_TRUE(FailsWith(old->Refresh(), arrow::StatusCode::KeyError, "dropped"));
  ASSERT_OK(fresh->Refresh());
  EXPECT_EQ(fresh->version(), 1);
  ASSERT_OK_AND_ASSIGN(auto reopened, lake_->OpenTable("t"));
  EXPECT_EQ(reopened->version(), 1);
}

TEST_F(LakeTest, OldHandleWhoseHeadCommitExpiredIsNotTakenForDropped) {
  ASSERT_OK_AND_ASSIGN(auto old, lake_->CreateTable("t", Readings(), {}));
  auto batch = Batch(Readings(), {R"(["2025-01-01 00:00:00"])", R"(["a"])", "[1.5]"});
  ASSERT_OK(old->Append(Reader(Readings(), {batch}).get(), {}).status());  // old at version 1
  ASSERT_OK_AND_ASSIGN(auto busy, lake_->OpenTable("t"));
  for (int i = 0; i < 11; ++i) ASSERT_OK(busy->Append(Reader(Readings(), {batch}).get(), {}).status());
  ASSERT_OK(busy->WaitForUpkeep());  // the checkpoint at 10 is written in the background
  // Log expiry removed the commits before the checkpoint at 10, the old handle's head among them.
  for (int v = 0; v < 10; ++v) ASSERT_OK(store_->Delete("default/t/_delta_log/" + CommitFileName(v)));
  ASSERT_OK_AND_ASSIGN(auto result, old->Append(Reader(Readings(), {batch}).get(), {}));
  EXPECT_EQ(result.version, 13);
}

TEST_F(LakeTest, CreationLockLeftByADeadCreatorIsBrokenAndReleasedAfterwards) {
  ASSERT_OK(store_->Put(".timelake/create-locks/ns.sensor", Buf("1000")));  // from 1970
  ASSERT_OK(lake_->CreateTable("ns.Sensor", Readings(), {}).status());
  EXPECT_TRUE(Objects(".timelake/").empty());
  ASSERT_OK_AND_ASSIGN(auto tables, lake_->Tables());
  EXPECT_EQ(tables, (std::vector<std::string>{"ns.Sensor"}));
}

TEST_F(LakeTest, NamesDifferingOnlyInCaseAreOneTable) {
  ASSERT_OK(lake_->CreateTable("ns.Sensor", Readings(), {}).status());
  EXPECT_TRUE(FailsWith(lake_->CreateTable("ns.sensor", Readings(), {}),
                        arrow::StatusCode::AlreadyExists, "ns.Sensor"));
  EXPECT_TRUE(FailsWith(lake_->CreateTable("NS.SENSOR", Readings(), {}),
                        arrow::StatusCode::AlreadyExists, "case-insensitive"));
  ASSERT_OK_AND_ASSIGN(auto table, lake_->OpenTable("NS.sensor"));
  EXPECT_EQ(table->name(), "ns.Sensor");
  ASSERT_OK(lake_->DropTable("ns.SENSOR"));
  ASSERT_OK_AND_ASSIGN(auto tables, lake_->Tables());
  EXPECT_TRUE(tables.empty());
}

TEST_F(LakeTest, DropOfMissingTableIsKeyError) {
  EXPECT_TRUE(FailsWith(lake_->DropTable("ghost"), arrow::StatusCode::KeyError, "default.ghost"));
}

TEST_F(LakeTest, CreateAfterDropStartsAFreshTable) {
  ASSERT_OK(lake_->CreateTable("t", Readings(), {}).status());
  ASSERT_OK(lake_->DropTable("t"));
  ASSERT_OK_AND_ASSIGN(auto table, lake_->CreateTable("t", Readings(), {}));
  EXPECT_EQ(table->version(), 0);
}

// A Lake owns the upkeep threads of the handles it opened (table/lake_runtime.h).

ContractOptions CheckpointEvery(int commits) {
  ContractOptions options;
  options.properties = {{"delta.checkpointInterval", std::to_string(commits)}};
  return options;
}

arrow::Status AppendOne(Table* table, int second) {
  char ts[32];
  std::snprintf(ts, sizeof(ts), R"(["2025-01-01 00:00:%02d"])", second % 60);
  auto batch = Batch(Readings(), {ts, R"(["a"])", "[1.5]"});
  return table->Append(Reader(Readings(), {batch}).get(), {}).status();
}

bool IsCheckpoint(const std::string& path) {
  return path.find(".checkpoint.parquet") != std::string::npos;
}

TEST_F(LakeTest, ALakeDestroyedWithQueuedUpkeepFinishesItFirst) {
  ASSERT_OK_AND_ASSIGN(auto table, lake_->CreateTable("t", Readings(), {}));
  for (int i = 0; i < 10; ++i) ASSERT_OK(AppendOne(table.get(), i));  // version 10: a checkpoint
  lake_.reset();  // runs the queued checkpoint and index records, then joins the thread
  const auto log = Objects("default/t/_delta_log/");
  EXPECT_NE(std::find(log.begin(), log.end(),
                      "default/t/_delta_log/00000000000000000010.checkpoint.parquet"),
            log.end());
  // The handle outlives its Lake and still sees a consistent table.
  ASSERT_OK_AND_ASSIGN(auto info, table->Info());
  EXPECT_EQ(info.rows, 10);
  EXPECT_EQ(info.manifests, 1);  // read from the checkpoint at 10
}

TEST_F(LakeTest, AHandleThatOutlivesItsLakeDoesItsUpkeepInline) {
  ASSERT_OK_AND_ASSIGN(auto table, lake_->CreateTable("t", Readings(), CheckpointEvery(1)));
  lake_.reset();
  std::mutex mutex;
  std::vector<std::thread::id> checkpointed_on;
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "put" && IsCheckpoint(path)) {
      std::lock_guard<std::mutex> lock(mutex);
      checkpointed_on.push_back(std::this_thread::get_id());
    }
    return arrow::Status::OK();
  });
  ASSERT_OK(AppendOne(table.get(), 0));
  ASSERT_OK(AppendOne(table.get(), 1));
  {
    std::lock_guard<std::mutex> lock(mutex);  // written before append() returned, by its caller
    EXPECT_EQ(checkpointed_on, (std::vector<std::thread::id>(2, std::this_thread::get_id())));
  }
  store_->SetFaultHook(nullptr);
  ASSERT_OK(table->WaitForUpkeep());
  ASSERT_OK_AND_ASSIGN(auto latest, table->Latest());
  EXPECT_EQ(latest->num_rows(), 1);
  ASSERT_OK_AND_ASSIGN(auto info, table->Info());
  EXPECT_EQ(info.rows, 2);
}

// A handle of the table opened by another Lake of the process may have a checkpoint queued: the
// drop waits for it (written after the drop, it would bring the table back on a store without
// folders until its writer noticed and took it back).
TEST_F(LakeTest, DropWaitsForTheUpkeepOfAnotherLakesHandleOfTheTable) {
  ASSERT_OK(lake_->CreateTable("t", Readings(), {}).status());
  auto other_lake = Lake::OverStore(store_);
  ASSERT_OK_AND_ASSIGN(auto other, other_lake->OpenTable("t"));
  std::atomic<bool> dropping{false};
  std::atomic<int> clock{0}, checkpoint_at{0}, rename_at{0};
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "put" && IsCheckpoint(path)) {
      // The other Lake's upkeep thread holds its checkpoint until the drop has begun.
      while (!dropping) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      checkpoint_at = ++clock;
    }
    if (op == "rename") rename_at = ++clock;
    return arrow::Status::OK();
  });
  for (int i = 0; i < 10; ++i) ASSERT_OK(AppendOne(other.get(), i));  // version 10: a checkpoint
  dropping = true;
  ASSERT_OK(lake_->DropTable("t"));
  EXPECT_GT(checkpoint_at.load(), 0);
  EXPECT_LT(checkpoint_at.load(), rename_at.load()) << "the drop renamed before the checkpoint";
  store_->SetFaultHook(nullptr);
  EXPECT_TRUE(FailsWith(AppendOne(other.get(), 11), arrow::StatusCode::KeyError, "dropped"));
  other.reset();
  other_lake.reset();
  EXPECT_TRUE(Objects("default/").empty());
  ASSERT_OK_AND_ASSIGN(auto tables, lake_->Tables());
  EXPECT_TRUE(tables.empty());
}

// Appends of another thread race the drop, each queueing a checkpoint: every one either commits
// before the drop or fails as dropped, and no checkpoint written behind the drop brings the
// table back.
TEST_F(LakeTest, DropWhileAnotherThreadAppendsLeavesNoTableBehind) {
  ASSERT_OK_AND_ASSIGN(auto table, lake_->CreateTable("t", Readings(), CheckpointEvery(1)));
  std::atomic<int> appended{0};
  arrow::Status stopped;
  std::thread appender([&] {
    for (int i = 0;; ++i) {
      arrow::Status st = AppendOne(table.get(), i);
      if (!st.ok()) {
        stopped = st;
        return;
      }
      ++appended;
    }
  });
  while (appended < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_OK(lake_->DropTable("t"));
  appender.join();
  EXPECT_TRUE(stopped.IsKeyError() && stopped.message().find("dropped") != std::string::npos)
      << stopped.ToString();
  (void)table->WaitForUpkeep();  // what the last appends queued: taken back if written
  table.reset();
  EXPECT_TRUE(Objects("default/t/_delta_log/").empty());
  ASSERT_OK_AND_ASSIGN(auto tables, lake_->Tables());
  EXPECT_TRUE(tables.empty());
  ASSERT_OK_AND_ASSIGN(auto fresh, lake_->CreateTable("t", Readings(), {}));
  EXPECT_EQ(fresh->version(), 0);
}

TEST(LakeOpenTest, MemoryUrlOpensAMemoryLake) {
  ASSERT_OK_AND_ASSIGN(auto lake, Lake::Open("memory://scratch", {}));
  EXPECT_EQ(lake->location(), "memory://scratch");
}

TEST(LakeOpenTest, UnknownStorageOptionIsInvalidNamingIt) {
  EXPECT_TRUE(IsInvalid(Lake::Open("memory://x", {{"aws_regoin", "eu"}}), "aws_regoin"));
}

TEST(LakeOpenTest, LocationWithNulIsInvalidRatherThanCutShort) {
  EXPECT_TRUE(IsInvalid(Lake::Open(std::string("/tmp/lake\0other", 15), {}), "NUL"));
}

TEST(LakeOpenTest, UnknownSchemeIsInvalid) {
  EXPECT_TRUE(IsInvalid(Lake::Open("ftp://host/lake", {}), "ftp"));
}

}  // namespace
}  // namespace timelake::testing
