// The last-value index is derived data: whatever happened to its objects (never written, deleted
// by a racing fold, corrupt, left by a dropped table) and whatever other engines did to the
// table, latest() equals the newest row per series of the live files.
#include "timelake/index/last_value_index.h"

#include <map>
#include <set>

#include <arrow/api.h>
#include <gtest/gtest.h>

#include "lake_fixture.h"
#include "test_util.h"
#include "timelake/ingest/ingestor.h"
#include "timelake/lake.h"
#include "timelake/log/delta_log.h"
#include "timelake/log/schema.h"
#include "timelake/store/memory_store.h"
#include "timelake/table/context.h"
#include "timelake/util/ids.h"

namespace timelake::testing {
namespace {

using arrow::field;

class LastValueIndexTest : public LakeFixture {
 protected:
  void SetUp() override { CreateTable(); }

  // Appends one row for `sensor` at 2025-01-`day` `hour`:00 with `value`. Unless `small`, older
  // rows of the series come with it, enough for the commit to get an index record (small
  // appends get none: LastValueIndex::kRecordMinFileRows).
  int64_t Append(const std::string& sensor, int day, int hour, double value, Table* table = nullptr,
                 bool small = false) {
    const int64_t at = Micros(2025, 1, day, hour);
    const int64_t older = small ? 0 : LastValueIndex::kRecordMinFileRows;
    arrow::TimestampBuilder times(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"),
                                  arrow::default_memory_pool());
    arrow::StringBuilder sensors;
    arrow::DoubleBuilder values;
    for (int64_t i = older; i >= 0; --i) {  // a millisecond apart, within the hour
      EXPECT_TRUE(times.Append(at - i * 1000).ok());
      EXPECT_TRUE(sensors.Append(sensor).ok());
      EXPECT_TRUE(values.Append(i == 0 ? value : -1).ok());
    }
    auto batch = arrow::RecordBatch::Make(schema_, older + 1,
                                          {times.Finish().ValueOrDie(), sensors.Finish().ValueOrDie(),
                                           values.Finish().ValueOrDie()});
    auto reader = Reader(schema_, {batch});
    Table* target = table ? table : table_.get();
    auto result = target->Append(reader.get(), {});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    // The index record is written by the handle's upkeep thread: these tests look at it.
    EXPECT_TRUE(target->WaitForUpkeep().ok());
    return result.ok() ? result->version : -1;
  }

  // sensor -> value of latest().
  std::map<std::string, double> Latest(Table* table = nullptr) {
    auto rows = (table ? table : table_.get())->Latest().ValueOrDie()->CombineChunks().ValueOrDie();
    std::map<std::string, double> out;
    auto sensors = std::static_pointer_cast<arrow::StringArray>(rows->GetColumnByName("sensor")->chunk(0));
    auto values = std::static_pointer_cast<arrow::DoubleArray>(rows->GetColumnByName("value")->chunk(0));
    for (int64_t i = 0; i < rows->num_rows(); ++i) out[sensors->GetString(i)] = values->Value(i);
    return out;
  }

  std::string IndexDir() { return "default/t/_timelake/lvi/"; }
  std::string RecordOf(int64_t version) {
    for (const auto& path : Objects(IndexDir())) {
      if (path.size() > 28 && path.compare(path.size() - 28, 28, CommitFileName(version).substr(0, 20) + ".parquet") == 0 &&
          path.find("base-") == std::string::npos) {
        return path;
      }
    }
    return "";
  }

  // Commits `commit` as the next version, as another engine would (no timelake tags).
  void CommitForeign(Commit commit) {
    DeltaLog log(store_, "default/t");
    auto snapshot = log.Load().ValueOrDie();
    CommitInfo info;
    info.operation = "WRITE";
    info.engine_info = "other-engine/1.0";
    commit.commit_info = info;
    ASSERT_OK_AND_ASSIGN(bool won, log.TryCommit(snapshot.version + 1, SerializeCommit(commit)));
    ASSERT_TRUE(won);
  }

  // A data file written by "another engine": the rows, no tags.
  AddFile ForeignFile(const std::string& sensor, int day, int hour, double value) {
    auto rows = TableOf(schema_, {"[" + std::to_string(Micros(2025, 1, day, hour)) + "]",
                                  "[\"" + sensor + "\"]", "[" + std::to_string(value) + "]"});
    AddFile add;
    add.path = "foreign-" + NewUuid() + ".parquet";
    add.size = WriteParquetFile(store_.get(), "default/t/" + add.path, *rows, IngestOptions{}).ValueOrDie();
    add.stats = R"({"numRecords":1})";
    return add;
  }

};

TEST_F(LastValueIndexTest, LatestIsTheNewestRowOfEverySeries) {
  Append("a", 1, 1, 1);
  Append("a", 1, 2, 2);
  Append("b", 1, 1, 3);
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 2}, {"b", 3}}));
}

TEST_F(LastValueIndexTest, MissingRecordIsRebuiltFromTheCommitsFiles) {
  Append("a", 1, 1, 1);
  const int64_t v = Append("b", 1, 1, 2);
  ASSERT_FALSE(RecordOf(v).empty());
  ASSERT_OK(store_->Delete(RecordOf(v)));  // a crash between commit and record
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}, {"b", 2}}));
  ASSERT_OK(table_->Maintain(MaintainOptions{false, false, false}).status());  // folds
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}, {"b", 2}}));
  Append("c", 1, 1, 3);
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}, {"b", 2}, {"c", 3}}));
}

TEST_F(LastValueIndexTest, CorruptRecordIsRebuiltFromTheCommitsFiles) {
  const int64_t v = Append("a", 1, 1, 1);
  ASSERT_OK(store_->Put(RecordOf(v), Buf("not parquet")));
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}}));
}

// Index objects are written without fsync (PutDerived): after a crash a record or a base can be
// there with nothing in it. Those files are read from their data instead.
TEST_F(LastValueIndexTest, EmptyRecordAndBaseLeftByACrashAreRebuilt) {
  Append("a", 1, 1, 1);
  Append("b", 1, 2, 2);
  ASSERT_OK(table_->Maintain(MaintainOptions{false, false, false}).status());  // folds
  const int64_t v = Append("c", 1, 3, 3);
  std::string base;
  for (const auto& p : Objects(IndexDir())) {
    if (p.find("base-") != std::string::npos) base = p;
  }
  ASSERT_FALSE(base.empty());
  ASSERT_FALSE(RecordOf(v).empty());
  ASSERT_OK(store_->Put(base, Buf("")));
  ASSERT_OK(store_->Put(RecordOf(v), Buf("")));
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}, {"b", 2}, {"c", 3}}));
}

TEST_F(LastValueIndexTest, CompactionOfACommitWithoutRecordKeepsItsSeries) {
  Append("a", 1, 1, 1);
  const int64_t missing = Append("b", 1, 2, 2);
  Append("c", 1, 3, 3);
  ASSERT_OK(store_->Delete(RecordOf(missing)));
  // Compaction merges the three files into one whose sequence number is the newest input's,
  // which has a record: the series of the commit without a record must survive that.
  ASSERT_OK_AND_ASSIGN(auto result, table_->Maintain(MaintainOptions{true, false, false}));
  ASSERT_EQ(result.files_rewritten, 3);
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}, {"b", 2}, {"c", 3}}));
}

TEST_F(LastValueIndexTest, CompactionWhoseRecordWasLostKeepsEverySeries) {
  Append("a", 1, 1, 1);
  const int64_t missing = Append("b", 1, 2, 2);
  Append("c", 1, 3, 3);
  ASSERT_OK(store_->Delete(RecordOf(missing)));
  // The compaction commits, then its record and the fold are lost (the process died).
  store_->SetFaultHook([](const std::string& op, const std::string& path) {
    return op == "put" && path.find("_timelake/") != std::string::npos
               ? arrow::Status::IOError("disk full")
               : arrow::Status::OK();
  });
  (void)table_->Maintain(MaintainOptions{true, false, false});  // its fold fails: fine
  store_->SetFaultHook(nullptr);
  ASSERT_EQ(DeltaLog(store_, "default/t").Load().ValueOrDie().files.size(), 1u);  // compacted
  auto fresh = lake_->OpenTable("t").ValueOrDie();
  EXPECT_EQ(Latest(fresh.get()), (std::map<std::string, double>{{"a", 1}, {"b", 2}, {"c", 3}}));
}

TEST_F(LastValueIndexTest, RecordDeletedByARacingFoldIsNotAnError) {
  Append("a", 1, 1, 1);
  const int64_t v = Append("b", 1, 1, 2);
  const std::string record = RecordOf(v);
  bool deleted = false;
  // A fold in another process deletes the record between our listing and our read.
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "get" && path == record && !deleted) {
      deleted = true;
      (void)store_->Delete(record);
    }
    return arrow::Status::OK();
  });
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}, {"b", 2}}));
  EXPECT_TRUE(deleted);
  ASSERT_OK(table_->Info().status());
  ASSERT_OK(table_->Maintain({}).status());
}

TEST_F(LastValueIndexTest, AWarmHandleReadsOnlyTheRecordsOfNewCommits) {
  Append("a", 1, 1, 1);
  Append("b", 1, 1, 2);
  auto reader = lake_->OpenTable("t").ValueOrDie();  // appends come from another handle
  int gets = 0;
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "get" && path.rfind(IndexDir(), 0) == 0) ++gets;
    return arrow::Status::OK();
  });
  EXPECT_EQ(Latest(reader.get()), (std::map<std::string, double>{{"a", 1}, {"b", 2}}));
  gets = 0;
  EXPECT_EQ(Latest(reader.get()), (std::map<std::string, double>{{"a", 1}, {"b", 2}}));
  EXPECT_EQ(gets, 0) << "nothing changed: the handle's state answers";
  Append("c", 1, 1, 3);
  Append("a", 1, 2, 4);
  gets = 0;
  EXPECT_EQ(Latest(reader.get()), (std::map<std::string, double>{{"a", 4}, {"b", 2}, {"c", 3}}));
  EXPECT_EQ(gets, 2) << "the state advances by the two new commits' records";
  // The appending handle's own commits need no record at all.
  Latest();  // its state starts here
  gets = 0;
  Append("b", 1, 3, 5);
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 4}, {"b", 5}, {"c", 3}}));
  EXPECT_EQ(gets, 0);
  // A missing record (a crash before the upkeep wrote it) is not guessed: the index is read.
  const int64_t v = Append("c", 1, 4, 6);
  ASSERT_OK(store_->Delete(RecordOf(v)));
  EXPECT_EQ(Latest(reader.get()), (std::map<std::string, double>{{"a", 4}, {"b", 5}, {"c", 6}}));
}

TEST_F(LastValueIndexTest, AnIndexReadKeepsTheObjectsItReadAndChecksThemAgainstTheListing) {
  Append("a", 1, 1, 1);
  Append("b", 1, 1, 2);
  auto snapshot = DeltaLog(store_, "default/t").Load().ValueOrDie();
  auto contract = ContractFromConfiguration(snapshot.metadata.configuration).ValueOrDie();
  auto storage = StorageSchemaOf(*table_->schema()).ValueOrDie();
  LastValueIndex index(store_, "default/t", snapshot.metadata.id, contract, storage);
  int gets = 0;
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "get" && path.rfind(IndexDir(), 0) == 0) ++gets;
    return arrow::Status::OK();
  });
  ASSERT_OK_AND_ASSIGN(auto first, index.Read(snapshot));
  EXPECT_EQ(first.rows->num_rows(), 2);
  gets = 0;
  ASSERT_OK(index.Read(snapshot).status());
  EXPECT_EQ(gets, 0) << "index objects never change: a warm index keeps them";
  // An object replaced under the same name (another size or time) is read again, not trusted.
  const std::string record = RecordOf(1);
  auto bytes = store_->Get(record).ValueOrDie();
  ASSERT_OK(store_->Put(record, arrow::Buffer::FromString(bytes->ToString() + "junk")));
  gets = 0;
  ASSERT_OK(index.Read(snapshot).status());
  EXPECT_EQ(gets, 1);
}

TEST_F(LastValueIndexTest, BaseDeletedByARacingFoldMakesTheReadStartOver) {
  Append("a", 1, 1, 1);
  ASSERT_OK(table_->Maintain({}).status());  // a base now
  Append("b", 1, 1, 2);
  std::string base;
  for (const auto& p : Objects(IndexDir())) {
    if (p.find("base-") != std::string::npos) base = p;
  }
  ASSERT_FALSE(base.empty());
  int removed = 0;
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "get" && path.find("base-") != std::string::npos && removed < 2) {
      ++removed;
      (void)store_->Delete(path);
    }
    return arrow::Status::OK();
  });
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}, {"b", 2}}));
}

TEST_F(LastValueIndexTest, AnotherEnginesFileInAChunkWithoutTimelakeFilesIsSeen) {
  Append("a", 1, 1, 1);
  Commit commit;
  commit.adds.push_back(ForeignFile("z", 20, 5, 9));  // a day timelake never wrote
  CommitForeign(commit);
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}, {"z", 9}}));
  ASSERT_OK(table_->Maintain({}).status());
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}, {"z", 9}}));
}

TEST_F(LastValueIndexTest, AnotherEnginesDeleteIsSeenEvenAfterAFold) {
  Append("a", 1, 1, 1);
  Append("b", 1, 1, 2);
  Append("b", 1, 5, 3);  // b's newest row, alone in its file
  ASSERT_OK(table_->Maintain(MaintainOptions{false, false, false}).status());  // fold into a base
  auto snapshot = DeltaLog(store_, "default/t").Load().ValueOrDie();
  std::string newest_b;
  for (const auto& [path, add] : snapshot.files) {
    if (add.tags.count("timelake.seq") && add.tags.at("timelake.seq") == "3") newest_b = path;
  }
  ASSERT_FALSE(newest_b.empty());
  Commit commit;  // DELETE FROM t WHERE ts = <b's newest>: the file goes, nothing replaces it
  RemoveFile remove;
  remove.path = newest_b;
  remove.data_change = true;
  commit.removes.push_back(remove);
  CommitForeign(commit);
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}, {"b", 2}}));
}

TEST_F(LastValueIndexTest, RecreatedTableInheritsNothingOfTheOldIndex) {
  Append("old", 1, 1, 1);
  ASSERT_OK(table_->Maintain({}).status());
  std::map<std::string, std::shared_ptr<arrow::Buffer>> leftovers;
  for (const auto& p : Objects(IndexDir())) leftovers[p] = store_->Get(p).ValueOrDie();
  ASSERT_FALSE(leftovers.empty());
  ASSERT_OK(lake_->DropTable("t"));
  ContractOptions options;
  options.series_key = std::vector<std::string>{"sensor"};
  auto fresh = lake_->CreateTable("t", schema_, options).ValueOrDie();
  // Whatever of the old index survives at the same path (a writer finishing late, an older
  // layout without the id folder) must not show in the new table.
  for (const auto& [p, data] : leftovers) ASSERT_OK(store_->Put(p, data));
  ASSERT_OK(store_->Put(IndexDir() + "00000000000000000001.parquet", leftovers.begin()->second));
  Append("new", 1, 1, 2, fresh.get());
  EXPECT_EQ(Latest(fresh.get()), (std::map<std::string, double>{{"new", 2}}));
  ASSERT_OK(fresh->Maintain({}).status());
  EXPECT_EQ(Latest(fresh.get()), (std::map<std::string, double>{{"new", 2}}));
  for (const auto& [p, data] : leftovers) EXPECT_TRUE(IsMissing(store_->Get(p))) << p;
}

TEST_F(LastValueIndexTest, RetentionDropsSeriesWhoseRowsAllExpired) {
  ContractOptions options;
  options.series_key = std::vector<std::string>{"sensor"};
  options.retention = "30d";
  auto table = lake_->CreateTable("r", schema_, options).ValueOrDie();
  Append("gone", 1, 1, 1, table.get());  // January 2025: long expired
  const int64_t now = NowMicros();
  auto batch = Batch(schema_, {"[" + std::to_string(now) + "]", "[\"kept\"]", "[2]"});
  ASSERT_OK(table->Append(Reader(schema_, {batch}).get(), {}).status());
  ASSERT_OK(table->Maintain({}).status());
  EXPECT_EQ(Latest(table.get()), (std::map<std::string, double>{{"kept", 2}}));
}

TEST_F(LastValueIndexTest, AppendNeverFailsAfterItsCommitWasAcknowledged) {
  Append("a", 1, 1, 1);
  // Every index object operation fails from now on: the record, the fold, inline upkeep.
  store_->SetFaultHook([](const std::string& op, const std::string& path) {
    return path.find("_timelake/") != std::string::npos ? arrow::Status::IOError("index store down")
                                                        : arrow::Status::OK();
  });
  auto batch = Batch(schema_, {"[" + std::to_string(Micros(2025, 1, 2)) + "]", "[\"b\"]", "[2]"});
  AppendOptions options;
  options.maintain = true;
  ASSERT_OK_AND_ASSIGN(auto result, table_->Append(Reader(schema_, {batch}).get(), options));
  EXPECT_EQ(result.version, 2);
  ASSERT_TRUE(result.maintenance_error.has_value());
  EXPECT_NE(result.maintenance_error->find("index store down"), std::string::npos);
  store_->SetFaultHook(nullptr);
  EXPECT_EQ(Latest(), (std::map<std::string, double>{{"a", 1}, {"b", 2}}));
}

TEST_F(LastValueIndexTest, EqualRowsOfOneCommitResolveInWriteOrderForEveryPolicy) {
  // One append written as two files of one chunk (a one-byte buffer flushes each batch), both
  // holding sensor "a" at the same instant: read-time deduplication keeps the earlier file's row
  // for "first" and the later one's for "last"; latest() must agree from the handle's state, from
  // the commit's record on a new handle, from a rebuild out of the files, and after compaction.
  for (const auto& [policy, expected] : std::vector<std::pair<std::string, double>>{{"first", 1}, {"last", 2}}) {
    SCOPED_TRACE(policy);
    ContractOptions options;
    options.series_key = std::vector<std::string>{"sensor"};
    options.dedup = policy;
    const std::string name = "tie_" + policy;
    auto table = lake_->CreateTable(name, schema_, options).ValueOrDie();
    const std::string ts = "[" + std::to_string(Micros(2025, 1, 1, 1)) + "]";
    auto reader = Reader(schema_, {Batch(schema_, {ts, "[\"a\"]", "[1]"}), Batch(schema_, {ts, "[\"a\"]", "[2]"})});
    AppendOptions append;
    append.buffer_bytes = 1;
    ASSERT_OK_AND_ASSIGN(auto result, table->Append(reader.get(), append));
    ASSERT_EQ(result.files, 2);
    ASSERT_OK(table->WaitForUpkeep());
    EXPECT_EQ(Latest(table.get()), (std::map<std::string, double>{{"a", expected}})) << "handle";
    EXPECT_EQ(Latest(lake_->OpenTable(name).ValueOrDie().get()),
              (std::map<std::string, double>{{"a", expected}})) << "record";
    for (const auto& path : Objects("default/" + name + "/_timelake/lvi/")) ASSERT_OK(store_->Delete(path));
    EXPECT_EQ(Latest(lake_->OpenTable(name).ValueOrDie().get()),
              (std::map<std::string, double>{{"a", expected}})) << "rebuild";
    ASSERT_OK_AND_ASSIGN(auto maintained, table->Maintain(MaintainOptions{true, false, false}));
    EXPECT_EQ(maintained.duplicates_removed, 1);
    EXPECT_EQ(Latest(table.get()), (std::map<std::string, double>{{"a", expected}})) << "compacted";
    EXPECT_EQ(Latest(lake_->OpenTable(name).ValueOrDie().get()),
              (std::map<std::string, double>{{"a", expected}})) << "compacted, new handle";
  }
}

TEST_F(LastValueIndexTest, RecordsOfManySeriesAreFoldedSooner) {
  // Appends that touch 16,384 series each: a new handle must not read 31 records of that size
  // (one fold every 32 commits), so such commits fold every two.
  constexpr int kSeries = 16384;
  std::string sensors = "[", values = "[";
  for (int s = 0; s < kSeries; ++s) {
    sensors += std::string(s ? "," : "") + "\"s" + std::to_string(s) + "\"";
    values += std::string(s ? "," : "") + std::to_string(s);
  }
  sensors += "]";
  values += "]";
  for (int hour = 0; hour < 9; ++hour) {
    std::string ts = "[";
    for (int s = 0; s < kSeries; ++s) ts += std::string(s ? "," : "") + std::to_string(Micros(2025, 1, 1, hour));
    auto reader = Reader(schema_, {Batch(schema_, {ts + "]", sensors, values})});
    AppendOptions options;
    options.maintain = false;
    ASSERT_OK(table_->Append(reader.get(), options).status());
  }
  ASSERT_OK(table_->WaitForUpkeep());
  int records = 0;
  for (const auto& path : Objects(IndexDir())) {
    if (path.find("base-") == std::string::npos) ++records;
  }
  EXPECT_LE(records, 2);
  auto fresh = lake_->OpenTable("t").ValueOrDie();
  EXPECT_EQ(fresh->Latest().ValueOrDie()->num_rows(), kSeries);
}

// Writer processes fold at versions they commit, each on its own upkeep thread. One whose
// upkeep lags behind (its fold of version 32 runs after another writer's fold of 64) must not
// read every file the newer base summarises only to write a base that is already out of date.
TEST_F(LastValueIndexTest, AFoldOlderThanTheNewestBaseIsSkipped) {
  std::vector<int64_t> versions;
  for (int hour = 0; hour < 70; ++hour) {
    versions.push_back(Append("d", 1 + hour / 24, hour % 24, hour, nullptr, /*small=*/true));
  }
  auto bases = [&] {
    std::set<std::string> out;
    for (const auto& path : Objects(IndexDir())) {
      if (path.find("base-") != std::string::npos) out.insert(path);
    }
    return out;
  };
  const std::set<std::string> before = bases();
  ASSERT_EQ(before.size(), 1u);
  // The newest base is of a version well after 32 (the fold interval is a few commits).
  const std::string& base = *before.begin();
  const size_t at = base.rfind("base-");
  ASSERT_NE(at, std::string::npos) << base;
  ASSERT_GE(std::stoll(base.substr(at + 5, 20)), 64) << base;
  auto at32 = DeltaLog(store_, "default/t").LoadAt(32).ValueOrDie();
  LastValueIndex index(store_, "default/t", at32.metadata.id,
                       ContractFromConfiguration(at32.metadata.configuration).ValueOrDie(),
                       StorageSchemaOf(*table_->schema()).ValueOrDie());
  int data_gets = 0;
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    const bool data = path.size() > 8 && path.compare(path.size() - 8, 8, ".parquet") == 0 &&
                      path.find("_timelake") == std::string::npos;
    if (op == "get" && data) ++data_gets;
    return arrow::Status::OK();
  });
  ASSERT_OK(RecordAndFold(index, 32, {}, nullptr, &at32));
  store_->SetFaultHook(nullptr);
  EXPECT_EQ(data_gets, 0) << "the lagging fold read data files";
  EXPECT_EQ(bases(), before) << "the lagging fold wrote an out-of-date base";
  EXPECT_EQ(Latest(lake_->OpenTable("t").ValueOrDie().get()),
            (std::map<std::string, double>{{"d", 69}}));
}

// A small append gets no record: its files are as cheap to read as a record would be, and one
// file less per commit is made (and deleted by the next fold). latest() reads its files instead:
// a new handle, a warm handle following another writer's commits, and the fold.
TEST_F(LastValueIndexTest, SmallAppendsGetNoRecordAndTheirFilesAreReadInstead) {
  auto records = [&] {
    int n = 0;
    for (const auto& path : Objects(IndexDir())) n += path.find("base-") == std::string::npos;
    return n;
  };
  Append("a", 1, 1, 1, nullptr, /*small=*/true);
  Append("b", 1, 1, 2, nullptr, /*small=*/true);
  EXPECT_EQ(records(), 0);
  auto reader = lake_->OpenTable("t").ValueOrDie();
  EXPECT_EQ(Latest(reader.get()), (std::map<std::string, double>{{"a", 1}, {"b", 2}}));
  // Another handle's small commits: the warm handle reads their files, not the whole table.
  int data_gets = 0, index_lists = 0, index_reads = 0;
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    const bool data = path.find("_delta_log") == std::string::npos &&
                      path.find("_timelake") == std::string::npos &&
                      path.size() > 8 && path.compare(path.size() - 8, 8, ".parquet") == 0;
    if (op == "get" && data) ++data_gets;
    if (op == "list" && path.find("_timelake/lvi") != std::string::npos) ++index_lists;
    if ((op == "get" || op == "head") && path.find("_timelake/lvi") != std::string::npos) {
      ++index_reads;
    }
    return arrow::Status::OK();
  });
  Append("c", 1, 1, 3, nullptr, /*small=*/true);
  Append("a", 1, 2, 4, nullptr, /*small=*/true);
  data_gets = 0;
  index_lists = 0;
  index_reads = 0;
  EXPECT_EQ(Latest(reader.get()), (std::map<std::string, double>{{"a", 4}, {"b", 2}, {"c", 3}}));
  EXPECT_EQ(data_gets, 2) << "the two new commits' files, and no others";
  EXPECT_EQ(index_lists, 0) << "no full read of the index";
  EXPECT_EQ(index_reads, 0) << "small commits have no record to look for";
  store_->SetFaultHook(nullptr);
  // Folds still come every few commits, so a new handle reads few files besides the base.
  std::vector<int64_t> small_versions;
  for (int hour = 3; hour < 40; ++hour) {
    small_versions.push_back(Append("d", 2 + hour / 24, hour % 24, hour, nullptr, /*small=*/true));
  }
  bool based = false;
  for (const auto& path : Objects(IndexDir())) based = based || path.find("base-") != std::string::npos;
  EXPECT_TRUE(based);
  for (int64_t v : small_versions) EXPECT_EQ(RecordOf(v), "") << v;
  auto fresh = lake_->OpenTable("t").ValueOrDie();
  EXPECT_EQ(Latest(fresh.get()),
            (std::map<std::string, double>{{"a", 4}, {"b", 2}, {"c", 3}, {"d", 39}}));
  auto snapshot = DeltaLog(store_, "default/t").Load().ValueOrDie();
  LastValueIndex index(store_, "default/t", snapshot.metadata.id,
                       ContractFromConfiguration(snapshot.metadata.configuration).ValueOrDie(),
                       StorageSchemaOf(*table_->schema()).ValueOrDie());
  ASSERT_OK_AND_ASSIGN(auto state, index.Read(snapshot));
  EXPECT_GE(state.base_version, 32);
  EXPECT_LT(state.files_read, 32) << "a fold covers the older commits";
  // A large append still gets its record.
  const int64_t v = Append("e", 3, 1, 5);
  EXPECT_FALSE(RecordOf(v).empty());
}

}  // namespace
}  // namespace timelake::testing
