// A handle on a table that is dropped and created again at the same path while the handle's
// commit put is in flight lands that commit in the new table's log: a stray. Commits carry their
// table's metaData.id, so readers of the new table ignore the stray, its writer takes it back
// (only its own), and the next writer of the table takes back a stray whose writer died.
#include <sys/time.h>

#include <functional>
#include <map>
#include <string>

#include <arrow/api.h>
#include <gtest/gtest.h>

#include "temp_dir.h"
#include "test_util.h"
#include "timelake/lake.h"
#include "timelake/log/delta_log.h"
#include "timelake/store/local_store.h"
#include "timelake/store/memory_store.h"
#include "timelake/txn/committer.h"

namespace timelake::testing {
namespace {

std::shared_ptr<arrow::Schema> Schema() {
  return arrow::schema({arrow::field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
                        arrow::field("sensor", arrow::utf8()), arrow::field("value", arrow::float64())});
}

std::shared_ptr<arrow::RecordBatchReader> OneRow(int hour) {
  return Reader(Schema(), {Batch(Schema(), {"[" + std::to_string(Micros(2025, 1, 1, hour)) + "]",
                                            "[\"a\"]", "[1]"})});
}

ContractOptions Keyed() {
  ContractOptions options;
  options.series_key = std::vector<std::string>{"sensor"};
  return options;
}

/// Runs `during` inside the put of `path`, after the object landed and before the put returns.
class InFlightStore : public MemoryStore {
 public:
  std::string path;
  std::function<void()> before, during;
  arrow::Result<bool> PutIfAbsent(const std::string& p,
                                  const std::shared_ptr<arrow::Buffer>& data) override {
    if (p != path || fired_) return MemoryStore::PutIfAbsent(p, data);
    fired_ = true;
    if (before) before();
    auto result = MemoryStore::PutIfAbsent(p, data);
    if (during) during();
    return result;
  }

 private:
  bool fired_ = false;
};

TEST(StrayCommitTest, AStaleWritersCommitNeverBecomesPartOfTheRecreatedTable) {
  auto store = std::make_shared<InFlightStore>();
  auto lake = Lake::OverStore(store);
  ASSERT_OK(lake->CreateTable("t", Schema(), Keyed()).status());
  ASSERT_OK_AND_ASSIGN(auto stale, lake->OpenTable("t"));
  ASSERT_OK(stale->Append(OneRow(1).get(), {}).status());  // version 1
  std::shared_ptr<Table> fresh;
  store->path = "default/t/_delta_log/" + CommitFileName(2);
  // Between the stale writer's check of its head and its put, the table is dropped and created
  // again, and reaches version 1: the put lands version 2 in the new table's log.
  store->before = [&] {
    ASSERT_OK(lake->DropTable("t"));
    ASSERT_OK_AND_ASSIGN(fresh, lake->CreateTable("t", Schema(), Keyed()));
    ASSERT_OK(fresh->Append(OneRow(5).get(), {}).status());
  };
  store->during = [&] {
    ASSERT_TRUE(store->Head(store->path).ok()) << "the stray should be in place now";
    ASSERT_OK_AND_ASSIGN(auto seen, DeltaLog(store, "default/t").Load());
    EXPECT_EQ(seen.version, 1) << "a reader of the new table took the stray for its commit";
    EXPECT_EQ(seen.files.size(), 1u);
    ASSERT_OK(fresh->Refresh());
    EXPECT_EQ(fresh->version(), 1);
  };
  auto result = stale->Append(OneRow(2).get(), {});
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(IsTableNotFound(result.status())) << result.status().ToString();
  EXPECT_TRUE(IsNotFound(store->Head(store->path).status())) << "the stray was not taken back";
  ASSERT_OK_AND_ASSIGN(auto appended, fresh->Append(OneRow(6).get(), {}));
  EXPECT_EQ(appended.version, 2);
  ASSERT_OK_AND_ASSIGN(auto loaded, DeltaLog(store, "default/t").Load());
  EXPECT_EQ(loaded.version, 2);
  EXPECT_EQ(loaded.files.size(), 2u);
}

TEST(DroppedWhileReadingTest, LatestAndInfoReportADropDuringTheirReadsAsKeyError) {
  for (const char* call : {"latest", "info"}) {
    auto store = std::make_shared<MemoryStore>();
    auto lake = Lake::OverStore(store);
    ASSERT_OK_AND_ASSIGN(auto table, lake->CreateTable("t", Schema(), Keyed()));
    ASSERT_OK(table->Append(OneRow(1).get(), {}).status());
    ASSERT_OK(table->WaitForUpkeep());  // the record is written in the background
    // No index record: latest() reads the data file, and the table is dropped just before.
    for (const auto& meta : store->List("default/t/_timelake/").ValueOrDie()) {
      ASSERT_OK(store->Delete(meta.path));
    }
    bool dropped = false;
    store->SetFaultHook([&](const std::string& op, const std::string& path) {
      if (!dropped && path.find("/data/") != std::string::npos &&
          (op == "get" || op == "open_input")) {
        dropped = true;
        return lake->DropTable("t");
      }
      return arrow::Status::OK();
    });
    arrow::Status st = std::string(call) == "latest" ? table->Latest().status()
                                                     : table->Info().status();
    store->SetFaultHook(nullptr);
    EXPECT_TRUE(dropped) << call;
    EXPECT_TRUE(IsTableNotFound(st)) << call << ": " << st.ToString();
  }
}

// A stale writer's checkpoint in a recreated table: on object stores (no folders, no rename) a
// handle of the dropped table can put its checkpoint N and `_last_checkpoint` into the new
// table's log after the drop. Its upkeep takes them back once it sees its commit gone, but until
// then, or if it dies, readers must not take the old table's state for the new one's: below N
// (the checkpoint is beyond every commit of the new table) and at or past N (it replaced the
// new table's own checkpoint N).
class StaleCheckpointTest : public ::testing::TestWithParam<int> {};

TEST_P(StaleCheckpointTest, ReadersOfTheRecreatedTableNeverLoadIt) {
  const int fresh_versions = GetParam();
  auto store = std::make_shared<MemoryStore>();
  auto lake = Lake::OverStore(store);
  const std::string log = "default/t/_delta_log/";
  ASSERT_OK_AND_ASSIGN(auto old, lake->CreateTable("t", Schema(), Keyed()));
  for (int i = 0; i < 10; ++i) ASSERT_OK(old->Append(OneRow(i).get(), {}).status());
  ASSERT_OK(old->WaitForUpkeep());
  ASSERT_OK_AND_ASSIGN(auto checkpoint, store->Get(log + CheckpointFileName(10)));
  ASSERT_OK_AND_ASSIGN(auto hint, store->Get(log + "_last_checkpoint"));
  ASSERT_OK(lake->DropTable("t"));

  ASSERT_OK_AND_ASSIGN(auto fresh, lake->CreateTable("t", Schema(), Keyed()));
  for (int i = 0; i < fresh_versions; ++i) ASSERT_OK(fresh->Append(OneRow(20 + i).get(), {}).status());
  ASSERT_OK(fresh->WaitForUpkeep());
  ASSERT_OK_AND_ASSIGN(auto before, DeltaLog(store, "default/t").Load());
  const std::string id = before.metadata.id;
  // The stale writer's puts land now.
  ASSERT_OK(store->Put(log + CheckpointFileName(10), checkpoint));
  ASSERT_OK(store->Put(log + "_last_checkpoint", hint));

  ASSERT_OK_AND_ASSIGN(auto loaded, DeltaLog(store, "default/t").Load());
  EXPECT_EQ(loaded.version, fresh_versions);
  EXPECT_EQ(loaded.metadata.id, id) << "the dropped table's checkpoint was loaded";
  EXPECT_EQ(loaded.files.size(), static_cast<size_t>(fresh_versions));
  ASSERT_OK_AND_ASSIGN(auto reopened, lake->OpenTable("t"));
  EXPECT_EQ(reopened->version(), fresh_versions);
  ASSERT_OK_AND_ASSIGN(auto appended, reopened->Append(OneRow(40).get(), {}));
  EXPECT_EQ(appended.version, fresh_versions + 1);
  ASSERT_OK_AND_ASSIGN(auto after, DeltaLog(store, "default/t").Load());
  EXPECT_EQ(after.metadata.id, id);
  EXPECT_EQ(after.files.size(), static_cast<size_t>(fresh_versions + 1));
}

INSTANTIATE_TEST_SUITE_P(NewTableAt, StaleCheckpointTest, ::testing::Values(3, 9, 10, 12));

// Between the drop and the create, the stale writer's checkpoint (and hint) is all the log
// holds: that is no table, and the create finds the name free.
TEST(StaleCheckpointTest, ALoneCheckpointOfADroppedTableIsNoTable) {
  auto store = std::make_shared<MemoryStore>();
  auto lake = Lake::OverStore(store);
  const std::string log = "default/t/_delta_log/";
  ASSERT_OK_AND_ASSIGN(auto old, lake->CreateTable("t", Schema(), Keyed()));
  for (int i = 0; i < 10; ++i) ASSERT_OK(old->Append(OneRow(i).get(), {}).status());
  ASSERT_OK(old->WaitForUpkeep());
  ASSERT_OK_AND_ASSIGN(auto checkpoint, store->Get(log + CheckpointFileName(10)));
  ASSERT_OK_AND_ASSIGN(auto hint, store->Get(log + "_last_checkpoint"));
  ASSERT_OK(lake->DropTable("t"));
  ASSERT_OK(store->Put(log + CheckpointFileName(10), checkpoint));
  ASSERT_OK(store->Put(log + "_last_checkpoint", hint));
  ASSERT_OK_AND_ASSIGN(auto tables, lake->Tables());
  EXPECT_TRUE(tables.empty());
  EXPECT_TRUE(IsTableNotFound(lake->OpenTable("t").status()));
  auto loaded = DeltaLog(store, "default/t").Load();
  EXPECT_TRUE(loaded.status().IsKeyError()) << loaded.status().ToString();
  ASSERT_OK_AND_ASSIGN(auto fresh, lake->CreateTable("t", Schema(), Keyed()));
  EXPECT_EQ(fresh->version(), 0);
  ASSERT_OK_AND_ASSIGN(auto reloaded, DeltaLog(store, "default/t").Load());
  EXPECT_EQ(reloaded.version, 0);
  EXPECT_TRUE(reloaded.files.empty());
}

class DeadWritersStrayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = LocalStore::Make(dir_.path()).ValueOrDie();
    lake_ = Lake::OverStore(store_);
    table_ = lake_->CreateTable("t", Schema(), Keyed()).ValueOrDie();
    ASSERT_OK(table_->Append(OneRow(1).get(), {}).status());  // version 1
    // What a dead writer of a dropped incarnation left: version 2, naming another table.
    Commit stray;
    stray.commit_info = CommitInfo{};
    stray.commit_info->operation = "WRITE";
    stray.commit_info->txn_id = "dead-writer";
    stray.commit_info->table_id = "a-dropped-incarnation";
    AddFile ghost;
    ghost.path = "data/ghost.parquet";
    ghost.size = 1;
    stray.adds = {ghost};
    ASSERT_OK(store_->Put(stray_path_, arrow::Buffer::FromString(SerializeCommit(stray))));
  }
  void Age(int seconds) {
    const std::string file = dir_.path() + "/" + stray_path_;
    struct timeval times[2];
    gettimeofday(&times[0], nullptr);
    times[0].tv_sec -= seconds;
    times[1] = times[0];
    ASSERT_EQ(utimes(file.c_str(), times), 0);
  }

  TempDir dir_;
  std::shared_ptr<LocalStore> store_;
  std::shared_ptr<Lake> lake_;
  std::shared_ptr<Table> table_;
  const std::string stray_path_ = "default/t/_delta_log/" + CommitFileName(2);
};

TEST_F(DeadWritersStrayTest, AStrayBeyondTheHeadIsNoGapAndAStrayAloneIsNoTable) {
  // A stale writer of a long table (version 27) while the new table is at version 1.
  const std::string far = "default/t/_delta_log/" + CommitFileName(27);
  ASSERT_OK(store_->Put(far, store_->Get(stray_path_).ValueOrDie()));
  ASSERT_OK(store_->Delete(stray_path_));
  ASSERT_OK_AND_ASSIGN(auto opened, lake_->OpenTable("t"));
  EXPECT_EQ(opened->version(), 1);
  ASSERT_OK_AND_ASSIGN(auto appended, opened->Append(OneRow(3).get(), {}));
  EXPECT_EQ(appended.version, 2);
  // A folder holding nothing but a stray is no table: both lookups and creation agree.
  ASSERT_OK(store_->Put("default/u/_delta_log/" + CommitFileName(4), store_->Get(far).ValueOrDie()));
  EXPECT_TRUE(IsTableNotFound(lake_->OpenTable("u").status()));
  EXPECT_OK(lake_->CreateTable("u", Schema(), Keyed()).status());
}

TEST_F(DeadWritersStrayTest, AGapBeforeACommitOfThisTableIsStillDamage) {
  ASSERT_OK(store_->Delete(stray_path_));
  ASSERT_OK(table_->Append(OneRow(2).get(), {}).status());  // version 2
  ASSERT_OK(store_->Delete("default/t/_delta_log/" + CommitFileName(1)));
  auto opened = lake_->OpenTable("t");
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("is missing"), std::string::npos)
      << opened.status().ToString();
}

TEST_F(DeadWritersStrayTest, ReadersIgnoreIt) {
  ASSERT_OK_AND_ASSIGN(auto opened, lake_->OpenTable("t"));
  EXPECT_EQ(opened->version(), 1);
  ASSERT_OK_AND_ASSIGN(auto latest, opened->Latest());
  EXPECT_EQ(latest->num_rows(), 1);
}

TEST_F(DeadWritersStrayTest, TheNextWriterTakesBackAnOldOne) {
  Age(Committer::kStrayAgeMs / 1000 + 30);
  ASSERT_OK_AND_ASSIGN(auto result, table_->Append(OneRow(2).get(), {}));
  EXPECT_EQ(result.version, 2);
  ASSERT_OK_AND_ASSIGN(auto loaded, DeltaLog(store_, "default/t").Load());
  EXPECT_EQ(loaded.version, 2);
  EXPECT_EQ(loaded.files.count("data/ghost.parquet"), 0u);
  EXPECT_EQ(loaded.files.size(), 2u);
}

TEST_F(DeadWritersStrayTest, AYoungOneIsLeftToItsWriterAndTheAppendSaysRetry) {
  // Dated an hour ahead: young however long the append's 64 rounds (and their back-offs) take
  // on a loaded machine.
  Age(-3600);
  auto result = table_->Append(OneRow(2).get(), {});
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(IsCommitConflict(result.status())) << result.status().ToString();
  EXPECT_TRUE(store_->Head(stray_path_).ok());
}


TEST(StrayCommitTest, AWriterWhoseTableWasReplacedUnderItsOwnHeadIsToldItWasDropped) {
  // The log at the writer's path now holds another table (commits 0 and 2 are a new table's),
  // while the writer's own head, commit 1, is still there byte for byte: its checks of the head
  // pass, and the commit of the other table at version 2 looks to it like a stray it must wait
  // out. The table the log holds says which of the two is stale.
  auto store = std::make_shared<MemoryStore>();
  auto lake = Lake::OverStore(store);
  ASSERT_OK(lake->CreateTable("t", Schema(), Keyed()).status());
  ASSERT_OK_AND_ASSIGN(auto stale, lake->OpenTable("t"));
  ASSERT_OK(stale->Append(OneRow(1).get(), {}).status());  // version 1
  ASSERT_OK(stale->WaitForUpkeep());
  ASSERT_OK_AND_ASSIGN(auto other, lake->CreateTable("u", Schema(), Keyed()));
  ASSERT_OK(other->Append(OneRow(2).get(), {}).status());
  const std::string t_log = "default/t/_delta_log/", u_log = "default/u/_delta_log/";
  ASSERT_OK_AND_ASSIGN(auto u0, store->Get(u_log + CommitFileName(0)));
  ASSERT_OK_AND_ASSIGN(auto u1, store->Get(u_log + CommitFileName(1)));
  ASSERT_OK(store->Put(t_log + CommitFileName(0), u0));
  ASSERT_OK(store->Put(t_log + CommitFileName(2), u1));

  auto appended = stale->Append(OneRow(3).get(), {});
  EXPECT_TRUE(IsTableNotFound(appended.status())) << appended.status().ToString();
  ASSERT_OK_AND_ASSIGN(auto two, store->Get(t_log + CommitFileName(2)));
  EXPECT_TRUE(two->Equals(*u1)) << "the other table's commit was replaced";
}

/// A store without a folder rename (as the clouds are): a drop deletes the log object by object,
/// and a prefix is deleted as the clouds do, listed once and deleted in path order. A hook of
/// `before_delete` runs once, inside the first Delete of the commit of its version, before it.
class NoRenameStore : public MemoryStore {
 public:
  std::map<int64_t, std::function<void()>> before_delete;
  arrow::Status RenamePrefix(const std::string&, const std::string&) override {
    return arrow::Status::NotImplemented("no rename");
  }
  arrow::Status Delete(const std::string& p) override {
    auto version = CommitVersionOf(p.substr(p.rfind('/') + 1));
    auto hook = version ? before_delete.find(*version) : before_delete.end();
    if (hook != before_delete.end()) {
      auto run = std::move(hook->second);
      before_delete.erase(hook);
      run();
    }
    return MemoryStore::Delete(p);
  }
  arrow::Status DeletePrefix(const std::string& prefix) override {
    ARROW_ASSIGN_OR_RAISE(auto listed, List(prefix));
    for (const auto& o : listed) ARROW_RETURN_NOT_OK(Delete(o.path));
    return arrow::Status::OK();
  }
};

TEST(DropWithoutRenameTest, CommitsLandingDuringTheDropGoWithTheLogAndTheirWriterIsToldTheTableIsGone) {
  auto store = std::make_shared<NoRenameStore>();
  auto lake = Lake::OverStore(store);
  ASSERT_OK(lake->CreateTable("t", Schema(), Keyed()).status());
  ASSERT_OK_AND_ASSIGN(auto writer, lake->OpenTable("t"));
  for (int hour = 1; hour <= 3; ++hour) ASSERT_OK(writer->Append(OneRow(hour).get(), {}).status());
  ASSERT_OK(writer->WaitForUpkeep());
  // The writer commits while the drop deletes the log: each put finds the version before it
  // still there (the drop listed the log before the put and has not reached that version yet),
  // so each stands as committed before the drop. Had the drop left the newest of them, the
  // writer would go on committing onto a log that belongs to no table.
  auto append = [&](int hour) {
    return [&, hour] { ASSERT_OK(writer->Append(OneRow(hour).get(), {}).status()); };
  };
  store->before_delete[3] = append(4);  // version 4, while 3 is still there
  store->before_delete[4] = append(5);  // version 5, while 4 is still there
  ASSERT_OK(lake->DropTable("t"));
  // Nothing of the log is left: no commit the writer could go on building on, no table.
  ASSERT_OK_AND_ASSIGN(auto left, store->List("default/t/_delta_log/"));
  EXPECT_TRUE(left.empty()) << left.size() << " log objects left, the first " << left.front().path;
  auto next = writer->Append(OneRow(6).get(), {});
  EXPECT_TRUE(IsTableNotFound(next.status())) << next.status().ToString();
  ASSERT_OK_AND_ASSIGN(left, store->List("default/t/_delta_log/"));
  EXPECT_TRUE(left.empty()) << "the stale writer's put was not taken back";
  ASSERT_OK(lake->CreateTable("t", Schema(), Keyed()).status());
}

}  // namespace
}  // namespace timelake::testing
