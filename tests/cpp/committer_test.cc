// The commit protocol against stores whose replies lie: a put-if-absent that landed but reported
// "exists" (an S3 client that retried its own timed-out conditional PUT gets 412) or an error (a
// lost reply) must be recognised as the writer's own commit, never as a lost race: otherwise an
// append with a batch id calls itself a duplicate and deletes the files its landed commit
// references, a compaction deletes its live outputs, and an append without a batch id commits
// twice. Also: the conflict rules, and the typed conflict error.
#include "timelake/txn/committer.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <arrow/api.h>
#include <gtest/gtest.h>

#include "lake_fixture.h"
#include "test_util.h"
#include "temp_dir.h"
#include "timelake/log/file_tags.h"
#include "timelake/store/local_store.h"
#include "timelake/txn/conflict.h"
#include "timelake/util/ids.h"
#include "timelake/util/time.h"

namespace timelake::testing {
namespace {

/// A MemoryStore whose next `lies` commit puts land and then report `false` ("exists") or an
/// error, as a client whose reply was lost would.
class LyingStore : public MemoryStore {
 public:
  enum class Lie { kExists, kError };

  LyingStore() : MemoryStore("lying") {}

  void LieOnNextCommits(int lies, Lie how) {
    lies_ = lies;
    how_ = how;
  }
  int lies_told() const { return told_; }

  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override {
    ARROW_ASSIGN_OR_RAISE(bool written, MemoryStore::PutIfAbsent(path, data));
    const bool is_commit = path.find("/_delta_log/") != std::string::npos &&
                           path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0;
    if (!written || !is_commit || lies_ <= 0) return written;
    --lies_;
    ++told_;
    if (how_ == Lie::kExists) return false;
    return arrow::Status::IOError("connection reset by peer (the put landed)");
  }

 private:
  std::atomic<int> lies_{0};
  std::atomic<int> told_{0};
  Lie how_ = Lie::kExists;
};

class AmbiguousPutTest : public LakeFixture,
                         public ::testing::WithParamInterface<LyingStore::Lie> {
 protected:
  void SetUp() override {
    store_ = lying_;
    lake_ = Lake::OverStore(store_);
  }

  std::shared_ptr<arrow::RecordBatchReader> Rows(const std::string& sensor, int first, int n) {
    std::string ts = "[", sensors = "[", values = "[";
    for (int i = 0; i < n; ++i) {
      const std::string sep = i ? "," : "";
      ts += sep + std::to_string(Micros(2025, 1, 1, 0) + (first + i) * 1'000'000LL);
      sensors += sep + "\"" + sensor + "\"";
      values += sep + std::to_string(first + i);
    }
    return Reader(schema_, {Batch(schema_, {ts + "]", sensors + "]", values + "]"})});
  }

  // Rows of the live files, from their stats; every live file must exist in the store.
  int64_t LiveRows() {
    EXPECT_OK(table_->Refresh());
    auto plan = table_->Scan().ValueOrDie();
    int64_t rows = 0;
    for (const auto& f : plan.files) {
      EXPECT_TRUE(store_->Head(f.path.substr(f.path.find("default/"))).ok())
          << f.path << " is referenced but missing";
      rows += f.rows;
    }
    return rows;
  }

  std::shared_ptr<LyingStore> lying_ = std::make_shared<LyingStore>();
};

TEST_P(AmbiguousPutTest, CreateTableRecognisesItsOwnCommit) {
  lying_->LieOnNextCommits(1, GetParam());
  ContractOptions options;
  options.series_key = std::vector<std::string>{"sensor"};
  auto created = lake_->CreateTable("t", schema_, options);
  ASSERT_OK(created.status());
  EXPECT_EQ(lying_->lies_told(), 1);
  EXPECT_EQ((*created)->version(), 0);
}

TEST_P(AmbiguousPutTest, AppendWithBatchIdIsNotItsOwnDuplicate) {
  CreateTable();
  lying_->LieOnNextCommits(1, GetParam());
  AppendOptions options;
  options.batch_id = "gateway-1";
  ASSERT_OK_AND_ASSIGN(auto result, table_->Append(Rows("a", 0, 10).get(), options));
  EXPECT_EQ(lying_->lies_told(), 1);
  EXPECT_FALSE(result.duplicate) << "the landed commit was taken for another writer's";
  EXPECT_EQ(result.version, 1);
  EXPECT_EQ(result.rows, 10);
  EXPECT_EQ(LiveRows(), 10);  // and its files were not deleted
  // A retry with the same batch id is the duplicate.
  ASSERT_OK_AND_ASSIGN(auto again, table_->Append(Rows("a", 0, 10).get(), options));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(LiveRows(), 10);
}

TEST_P(AmbiguousPutTest, AppendWithoutBatchIdCommitsOnce) {
  CreateTable();
  lying_->LieOnNextCommits(1, GetParam());
  ASSERT_OK_AND_ASSIGN(auto result, table_->Append(Rows("a", 0, 10).get(), {}));
  EXPECT_EQ(lying_->lies_told(), 1);
  EXPECT_EQ(result.version, 1);
  ASSERT_OK(table_->Refresh());
  EXPECT_EQ(table_->version(), 1) << "the append was committed twice";
  EXPECT_EQ(LiveRows(), 10);
}

TEST_P(AmbiguousPutTest, CompactionKeepsItsLandedOutputs) {
  CreateTable();
  for (int i = 0; i < 4; ++i) ASSERT_OK(table_->Append(Rows("a", i * 10, 10).get(), {}).status());
  lying_->LieOnNextCommits(1, GetParam());
  MaintainOptions options;
  options.expire = false;
  ASSERT_OK_AND_ASSIGN(auto result, table_->Maintain(options));
  EXPECT_EQ(lying_->lies_told(), 1);
  EXPECT_EQ(result.partitions_compacted, 1);
  EXPECT_EQ(LiveRows(), 40) << "the compaction deleted its live outputs";
  ASSERT_OK_AND_ASSIGN(auto latest, table_->Latest());
  EXPECT_EQ(latest->num_rows(), 1);
}

INSTANTIATE_TEST_SUITE_P(Lies, AmbiguousPutTest,
                         ::testing::Values(LyingStore::Lie::kExists, LyingStore::Lie::kError),
                         [](const auto& info) {
                           return info.param == LyingStore::Lie::kExists ? "ReportsExists"
                                                                         : "ReportsError";
                         });

/// A MemoryStore whose commit puts fail without landing, `failures` times.
class FailingCommitStore : public MemoryStore {
 public:
  explicit FailingCommitStore(int failures, bool mark_unknown)
      : failures_(failures), mark_unknown_(mark_unknown) {}
  arrow::Result<bool> PutIfAbsent(const std::string& path,
                                  const std::shared_ptr<arrow::Buffer>& data) override {
    if (path.find("/_delta_log/") != std::string::npos && failures_ > 0) {
      --failures_;
      arrow::Status st = arrow::Status::IOError("service unavailable");
      return mark_unknown_ ? OutcomeUnknown(st) : st;
    }
    return MemoryStore::PutIfAbsent(path, data);
  }
  std::atomic<int> failures_;
  bool mark_unknown_;
};

class CommitFailureTest : public LakeFixture {
 protected:
  void Use(std::shared_ptr<FailingCommitStore> store) {
    store_ = store;
    lake_ = Lake::OverStore(store_);
    failing_ = store;
    CreateTable();
  }
  std::shared_ptr<arrow::RecordBatchReader> OneRow() {
    return Reader(schema_, {Batch(schema_, {"[" + std::to_string(Micros(2025, 1, 1, 0)) + "]",
                                            "[\"a\"]", "[1]"})});
  }
  int DataFiles() {
    int n = 0;
    for (const auto& path : Objects("default/t/")) {
      n += path.find("_delta_log") == std::string::npos &&
           path.find("_timelake") == std::string::npos;
    }
    return n;
  }
  std::shared_ptr<FailingCommitStore> failing_;
};

TEST_F(CommitFailureTest, APutThatFailsOnceIsRetried) {
  Use(std::make_shared<FailingCommitStore>(0, false));
  failing_->failures_ = 1;
  ASSERT_OK_AND_ASSIGN(auto result, table_->Append(OneRow().get(), {}));
  EXPECT_EQ(result.version, 1);
  EXPECT_EQ(DataFiles(), 1);
}

TEST_F(CommitFailureTest, APutThatKeepsFailingFailsTheAppendAndDeletesItsFiles) {
  Use(std::make_shared<FailingCommitStore>(0, false));
  failing_->failures_ = Committer::kMaxPutErrors;
  auto result = table_->Append(OneRow().get(), {});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("service unavailable"), std::string::npos);
  EXPECT_EQ(result.status().message().find("unknown"), std::string::npos);
  EXPECT_EQ(DataFiles(), 0) << "a definite failure leaves nothing behind";
}

TEST_F(CommitFailureTest, AnOutcomeUnknownFailureKeepsTheFilesAndSaysRetryWithTheBatchId) {
  Use(std::make_shared<FailingCommitStore>(0, true));
  failing_->failures_ = Committer::kMaxPutErrors;
  AppendOptions options;
  options.batch_id = "b";
  auto result = table_->Append(OneRow().get(), options);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("same batch_id"), std::string::npos)
      << result.status().ToString();
  EXPECT_EQ(DataFiles(), 1) << "the commit may land later: its files must stay";
}

// A local lake whose disk fails the fsync of the log's folder after the commit was linked: the
// commit is visible and may not survive a crash, so the append is neither acknowledged nor
// called failed: it says its outcome is unknown, keeps its files, and a retry with the same batch
// id (through a healthy lake) finds the commit instead of writing the rows twice.
TEST(CommitDurabilityTest, ACommitWhoseFolderSyncFailsAfterTheLinkIsOutcomeUnknown) {
  TempDir dir;
  std::atomic<bool> failing{false};
  auto sync = [&](int fd, const std::string& path) {
    if (failing && path.size() >= 11 && path.compare(path.size() - 11, 11, "/_delta_log") == 0) {
      errno = EIO;
      return -1;
    }
    return ::fsync(fd);
  };
  ASSERT_OK_AND_ASSIGN(auto store, LocalStore::Make(dir.path(), /*fixed_depth=*/2, sync));
  auto lake = Lake::OverStore(store);
  auto schema = arrow::schema(
      {arrow::field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
       arrow::field("sensor", arrow::utf8()), arrow::field("value", arrow::float64())});
  ContractOptions contract;
  contract.series_key = std::vector<std::string>{"sensor"};
  ASSERT_OK_AND_ASSIGN(auto table, lake->CreateTable("t", schema, contract));
  auto rows = [&] {
    return Reader(schema, {Batch(schema, {"[" + std::to_string(Micros(2025, 1, 1)) + "]",
                                          "[\"a\"]", "[1]"})});
  };
  AppendOptions options;
  options.batch_id = "b-1";
  failing = true;
  auto failed = table->Append(rows().get(), options);
  ASSERT_FALSE(failed.ok()) << "acknowledged a commit that may not survive a crash";
  EXPECT_NE(failed.status().message().find("could not be made durable"), std::string::npos)
      << failed.status().ToString();
  EXPECT_NE(failed.status().message().find("same batch_id"), std::string::npos);
  // Nothing more is written through the store whose disk failed.
  EXPECT_FALSE(table->Append(rows().get(), {}).ok());

  // The disk is healthy again; a new lake retries the batch and finds it committed.
  ASSERT_OK_AND_ASSIGN(auto healthy, LocalStore::Make(dir.path(), /*fixed_depth=*/2));
  ASSERT_OK_AND_ASSIGN(auto again, Lake::OverStore(healthy)->OpenTable("t"));
  ASSERT_OK_AND_ASSIGN(auto retried, again->Append(rows().get(), options));
  EXPECT_TRUE(retried.duplicate);
  ASSERT_OK_AND_ASSIGN(auto info, again->Info());
  EXPECT_EQ(info.rows, 1);
}

// --- the conflict rules -------------------------------------------------------------------

Snapshot Before() {
  Snapshot s;
  s.version = 3;
  s.metadata.id = "table-1";
  s.metadata.schema_string = "{}";
  return s;
}

AddFile Add(const std::string& path) {
  AddFile add;
  add.path = path;
  return add;
}

RemoveFile Remove(const std::string& path) {
  RemoveFile remove;
  remove.path = path;
  return remove;
}

TEST(ConflictRulesTest, AppendsRebaseOverAppendsAndRemovals) {
  CommitIntent append{CommitKind::kAppend, {}, {{"timelake:b1", 0}}};
  Commit winner;
  winner.adds = {Add("x.parquet")};
  winner.removes = {Remove("y.parquet")};
  EXPECT_EQ(Judge(append, winner, Before()).resolution, Resolution::kRebase);
}

TEST(ConflictRulesTest, AnAppendWhoseBatchIdAWinnerRecordedIsAbandoned) {
  CommitIntent append{CommitKind::kAppend, {}, {{"timelake:b1", 0}}};
  Commit winner;
  winner.adds = {Add("x.parquet")};
  winner.txns = {{"timelake:b1", 0, 1}};
  Verdict v = Judge(append, winner, Before());
  EXPECT_EQ(v.resolution, Resolution::kAbandon);
  EXPECT_EQ(v.effect, WinnerEffect::kRecordedSameTxn);
  winner.txns = {{"timelake:b2", 0, 1}};
  EXPECT_EQ(Judge(append, winner, Before()).resolution, Resolution::kRebase);
}

// A versioned txn (a rollup refresh records the source version it reflects): a winner that
// recorded the same appId at a lower version does not make this commit redundant; the same or a
// higher version does.
TEST(ConflictRulesTest, AWinnersTxnCountsOnlyAtTheSameOrAHigherVersion) {
  CommitIntent refresh{CommitKind::kAppend, {}, {{"timelake:rollup", 7}}};
  Commit winner;
  winner.adds = {Add("x.parquet")};
  winner.txns = {{"timelake:rollup", 6, 1}};
  EXPECT_EQ(Judge(refresh, winner, Before()).resolution, Resolution::kRebase);
  winner.txns = {{"timelake:rollup", 7, 1}};
  EXPECT_EQ(Judge(refresh, winner, Before()).resolution, Resolution::kAbandon);
  winner.txns = {{"timelake:rollup", 9, 1}};
  EXPECT_EQ(Judge(refresh, winner, Before()).effect, WinnerEffect::kRecordedSameTxn);
}

TEST(RecordedTxnsTest, AVersionedTxnIsRecordedAtItsVersionAndBelow) {
  Snapshot table = Before();
  table.recent_txns["timelake:rollup"] = {"timelake:rollup", 5, NowMillis()};
  EXPECT_EQ(RecordedTxns({{"timelake:rollup", 4}}, table).ValueOrDie(), (std::set<std::string>{"timelake:rollup"}));
  EXPECT_EQ(RecordedTxns({{"timelake:rollup", 5}}, table).ValueOrDie(), (std::set<std::string>{"timelake:rollup"}));
  EXPECT_TRUE(RecordedTxns({{"timelake:rollup", 6}}, table).ValueOrDie().empty());
}

TEST(RecordedTxnsTest, ABatchIdIsRecordedUntilTheTableForgetsItsTxn) {
  Snapshot table = Before();
  const int64_t now = NowMillis();
  table.recent_txns["timelake:fresh"] = {"timelake:fresh", 0, now};
  table.recent_txns["timelake:old"] = {"timelake:old", 0, now - 2 * 3'600'000LL};
  table.recent_txns["timelake:undated"] = {"timelake:undated", 0, std::nullopt};
  const std::map<std::string, int64_t> asked = {
      {"timelake:fresh", 0}, {"timelake:old", 0}, {"timelake:undated", 0}, {"timelake:never", 0}};
  // Without a retention every recorded txn holds.
  EXPECT_EQ(RecordedTxns(asked, table).ValueOrDie(),
            (std::set<std::string>{"timelake:fresh", "timelake:old", "timelake:undated"}));
  // A txn older than the table's retention is forgotten, as Delta readers forget it.
  table.metadata.configuration["delta.setTransactionRetentionDuration"] = "interval 1 hours";
  EXPECT_EQ(RecordedTxns(asked, table).ValueOrDie(),
            (std::set<std::string>{"timelake:fresh", "timelake:undated"}));
}

TEST(ConflictRulesTest, CompactionAndRetentionGiveUpWhenTheirInputsWereRemoved) {
  for (CommitKind kind : {CommitKind::kCompaction, CommitKind::kRetention}) {
    CommitIntent pending{kind, {"a.parquet", "b.parquet"}, {}};
    Commit winner;
    winner.removes = {Remove("b.parquet")};
    EXPECT_EQ(Judge(pending, winner, Before()).resolution, Resolution::kAbandon)
        << CommitKindName(kind);
    winner.removes = {Remove("c.parquet")};
    winner.adds = {Add("d.parquet")};
    EXPECT_EQ(Judge(pending, winner, Before()).resolution, Resolution::kRebase)
        << CommitKindName(kind);
  }
}

TEST(ConflictRulesTest, SchemaProtocolAndIdentityChangesConflictWithEverything) {
  for (CommitKind kind : {CommitKind::kAppend, CommitKind::kCompaction, CommitKind::kRetention}) {
    CommitIntent pending{kind, {"a.parquet"}, {{"timelake:b", 0}}};
    Commit schema;
    schema.metadata = Before().metadata;
    schema.metadata->schema_string = "{\"fields\":[]}";
    EXPECT_EQ(Judge(pending, schema, Before()).effect, WinnerEffect::kChangedMetadata);
    EXPECT_EQ(Judge(pending, schema, Before()).resolution, Resolution::kConflict);
    Commit replaced;
    replaced.metadata = Before().metadata;
    replaced.metadata->id = "table-2";
    EXPECT_EQ(Judge(pending, replaced, Before()).effect, WinnerEffect::kReplacedTable);
    Commit protocol;
    protocol.protocol = Protocol{3, 7, std::vector<std::string>{"deletionVectors"},
                                 std::vector<std::string>{"deletionVectors"}};
    EXPECT_EQ(Judge(pending, protocol, Before()).resolution, Resolution::kConflict);
    // The strictest effect wins: a schema change that also removed an input is a conflict.
    schema.removes = {Remove("a.parquet")};
    EXPECT_EQ(Judge(pending, schema, Before()).resolution, Resolution::kConflict);
  }
}

// add_columns commits a metaData with nullable columns after the old ones: appends, compactions
// and retention rebase over it (their files read the new columns as null); another schema change
// conflicts; anything more than added nullable columns is still a metadata change.
TEST(ConflictRulesTest, AddedNullableColumnsRebaseEverythingButAnotherSchemaChange) {
  const std::string two =
      R"({"type":"struct","fields":[{"name":"t","type":"timestamp","nullable":false,"metadata":{}},)"
      R"({"name":"v","type":"double","nullable":true,"metadata":{}}]})";
  const std::string three =
      R"({"type":"struct","fields":[{"name":"t","type":"timestamp","nullable":false,"metadata":{}},)"
      R"({"name":"v","type":"double","nullable":true,"metadata":{}},)"
      R"({"name":"h","type":"float","nullable":true,"metadata":{}}]})";
  Snapshot before = Before();
  before.metadata.schema_string = two;
  before.metadata.configuration = {{"timelake.arrowSchema", "old"}, {"delta.checkpointInterval", "10"}};
  Commit added;
  added.metadata = before.metadata;
  added.metadata->schema_string = three;
  added.metadata->configuration["timelake.arrowSchema"] = "new";
  added.metadata->configuration["timelake.schemaVersion"] = "2";
  for (CommitKind kind : {CommitKind::kAppend, CommitKind::kCompaction, CommitKind::kRetention}) {
    CommitIntent pending{kind, {"a.parquet"}, {{"timelake:b", 0}}};
    EXPECT_EQ(Judge(pending, added, before).resolution, Resolution::kRebase) << CommitKindName(kind);
  }
  CommitIntent schema_change{CommitKind::kSchemaChange, {}, {}};
  EXPECT_EQ(Judge(schema_change, added, before).resolution, Resolution::kConflict);
  // Also a property changed: not only added columns.
  Commit more = added;
  more.metadata->configuration["delta.checkpointInterval"] = "5";
  EXPECT_EQ(Judge(CommitIntent{CommitKind::kAppend, {}, {}}, more, before).effect,
            WinnerEffect::kChangedMetadata);
  // A column removed (the old schema is not a prefix): a metadata change, a conflict.
  Commit dropped = added;
  dropped.metadata->schema_string =
      R"({"type":"struct","fields":[{"name":"t","type":"timestamp","nullable":false,"metadata":{}},)"
      R"({"name":"h","type":"float","nullable":true,"metadata":{}}]})";
  EXPECT_EQ(Judge(CommitIntent{CommitKind::kAppend, {}, {}}, dropped, before).resolution,
            Resolution::kConflict);
  // A column added that is not nullable: a conflict.
  Commit required = added;
  required.metadata->schema_string =
      R"({"type":"struct","fields":[{"name":"t","type":"timestamp","nullable":false,"metadata":{}},)"
      R"({"name":"v","type":"double","nullable":true,"metadata":{}},)"
      R"({"name":"h","type":"float","nullable":false,"metadata":{}}]})";
  EXPECT_EQ(Judge(CommitIntent{CommitKind::kAppend, {}, {}}, required, before).resolution,
            Resolution::kConflict);
}

// widen_columns commits a metaData whose columns only widened as Delta allows, and (the first
// time) a protocol gaining typeWidening: appends, compactions and retention rebase (their files
// hold the older type, as older files do); another schema change conflicts; a protocol gaining a
// feature timelake does not write is still a conflict.
TEST(ConflictRulesTest, WidenedColumnsAndTheTypeWideningFeatureRebaseAllButSchemaChanges) {
  const std::string narrow =
      R"({"type":"struct","fields":[{"name":"t","type":"timestamp","nullable":false,"metadata":{}},)"
      R"({"name":"v","type":"integer","nullable":true,"metadata":{}}]})";
  const std::string wide =
      R"({"type":"struct","fields":[{"name":"t","type":"timestamp","nullable":false,"metadata":{}},)"
      R"({"name":"v","type":"long","nullable":true,"metadata":{"delta.typeChanges":)"
      R"([{"fromType":"integer","toType":"long"}]}}]})";
  Snapshot before = Before();
  before.metadata.schema_string = narrow;
  before.metadata.configuration = {{"timelake.arrowSchema", "old"}};
  Commit widened;
  widened.metadata = before.metadata;
  widened.metadata->schema_string = wide;
  widened.metadata->configuration["timelake.arrowSchema"] = "new";
  widened.metadata->configuration["timelake.schemaVersion"] = "2";
  widened.metadata->configuration["delta.enableTypeWidening"] = "true";
  widened.protocol = Protocol{3, 7, std::vector<std::string>{"typeWidening"},
                              std::vector<std::string>{"appendOnly", "invariants", "typeWidening"}};
  for (CommitKind kind : {CommitKind::kAppend, CommitKind::kCompaction, CommitKind::kRetention}) {
    CommitIntent pending{kind, {"a.parquet"}, {{"timelake:b", 0}}};
    EXPECT_EQ(Judge(pending, widened, before).resolution, Resolution::kRebase) << CommitKindName(kind);
  }
  EXPECT_EQ(Judge(CommitIntent{CommitKind::kSchemaChange, {}, {}}, widened, before).resolution,
            Resolution::kConflict);
  // long -> integer is a narrowing: a metadata change, a conflict.
  Snapshot wide_before = before;
  wide_before.metadata.schema_string = wide;
  Commit narrowed;
  narrowed.metadata = wide_before.metadata;
  narrowed.metadata->schema_string = narrow;
  EXPECT_EQ(Judge(CommitIntent{CommitKind::kAppend, {}, {}}, narrowed, wide_before).resolution,
            Resolution::kConflict);
  // The same protocol with deletion vectors as well: timelake does not write them.
  Commit more = widened;
  more.protocol->reader_features->push_back("deletionVectors");
  more.protocol->writer_features->push_back("deletionVectors");
  EXPECT_EQ(Judge(CommitIntent{CommitKind::kAppend, {}, {}}, more, before).resolution,
            Resolution::kConflict);
}

TEST(ConflictRulesTest, AnUnchangedMetadataOrProtocolActionDoesNotConflict) {
  CommitIntent append{CommitKind::kAppend, {}, {}};
  Commit winner;
  winner.metadata = Before().metadata;
  winner.protocol = Before().protocol;
  EXPECT_EQ(Judge(append, winner, Before()).resolution, Resolution::kRebase);
}

// --- the committer over a log ---------------------------------------------------------------

class CommitterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Commit zero;
    zero.commit_info = Info("CREATE TABLE");
    zero.protocol = Protocol{};
    zero.metadata = Before().metadata;
    ASSERT_OK(log_.TryCommit(0, SerializeCommit(zero)));
    ASSERT_OK_AND_ASSIGN(mine_, log_.Load());
    other_ = mine_;
  }
  static CommitInfo Info(const std::string& operation) {
    CommitInfo info;
    info.operation = operation;
    info.txn_id = NewUuid();
    return info;
  }
  PendingCommit AppendOf(const std::string& path) {
    PendingCommit p;
    p.commit.commit_info = Info("WRITE");
    p.commit.adds = {Add(path)};
    return p;
  }
  PendingCommit CompactionOf(std::vector<std::string> inputs, const std::string& output) {
    PendingCommit p;
    p.intent.kind = CommitKind::kCompaction;
    p.commit.commit_info = Info("OPTIMIZE");
    for (const auto& in : inputs) {
      p.commit.removes.push_back(Remove(in));
      p.intent.removes.insert(in);
    }
    p.commit.adds = {Add(output)};
    return p;
  }
  arrow::Status Put(Snapshot* snapshot, PendingCommit p, CommitOutcome* out) {
    return committer_.Commit(snapshot, &p, out);
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
  DeltaLog log_{store_, "ns/t"};
  Committer committer_{&log_, "ns.t"};
  Snapshot mine_, other_;
};

TEST_F(CommitterTest, RebasesOverAConcurrentAppend) {
  CommitOutcome a, b;
  ASSERT_OK(Put(&other_, AppendOf("x.parquet"), &a));
  ASSERT_OK(Put(&mine_, AppendOf("y.parquet"), &b));
  EXPECT_EQ(a.version, 1);
  EXPECT_EQ(b.version, 2);
  EXPECT_EQ(b.attempts, 2);
  EXPECT_EQ(mine_.files.size(), 2u);
}

// A version the caller knows was committed (its process's background compaction) is read and
// judged before the first put: no put is lost to it, and the rules still apply.
TEST_F(CommitterTest, AKnownNewerHeadIsReadBeforeTheFirstPut) {
  CommitOutcome out;
  ASSERT_OK(Put(&mine_, AppendOf("a.parquet"), &out));
  ASSERT_OK(Put(&mine_, AppendOf("b.parquet"), &out));
  other_ = mine_;
  ASSERT_OK(Put(&other_, CompactionOf({"a.parquet", "b.parquet"}, "ab.parquet"), &out));
  ASSERT_EQ(out.version, 3);
  PendingCommit append = AppendOf("c.parquet");
  append.own_head = [] { return int64_t{3}; };
  CommitOutcome late;
  ASSERT_OK(Put(&mine_, std::move(append), &late));
  EXPECT_EQ(late.version, 4);
  EXPECT_EQ(late.attempts, 1);  // without the hint: 2 (a lost put, then the rebase)
  EXPECT_EQ(mine_.files.count("ab.parquet"), 1u);
  EXPECT_EQ(mine_.files.count("a.parquet"), 0u);
  // A compaction of the same inputs, told of the winner, is abandoned without a put.
  ASSERT_OK_AND_ASSIGN(Snapshot stale, log_.LoadAt(2));
  PendingCommit compaction = CompactionOf({"a.parquet", "b.parquet"}, "ab2.parquet");
  compaction.own_head = [] { return int64_t{3}; };
  CommitOutcome abandoned;
  ASSERT_OK(Put(&stale, std::move(compaction), &abandoned));
  EXPECT_FALSE(abandoned.version);
  ASSERT_TRUE(abandoned.abandoned);
  ASSERT_OK_AND_ASSIGN(auto head, log_.Load());
  EXPECT_EQ(head.version, 4);
}

TEST_F(CommitterTest, AbandonsACompactionWhoseInputsAConcurrentCompactionRemoved) {
  CommitOutcome out;
  ASSERT_OK(Put(&mine_, AppendOf("a.parquet"), &out));
  ASSERT_OK(Put(&mine_, AppendOf("b.parquet"), &out));
  other_ = mine_;
  ASSERT_OK(Put(&other_, CompactionOf({"a.parquet", "b.parquet"}, "ab.parquet"), &out));
  CommitOutcome late;
  ASSERT_OK(Put(&mine_, CompactionOf({"a.parquet", "b.parquet"}, "ab2.parquet"), &late));
  EXPECT_FALSE(late.version);
  ASSERT_TRUE(late.abandoned);
  EXPECT_EQ(late.abandoned->effect, WinnerEffect::kRemovedSameFile);
  EXPECT_EQ(mine_.files.count("ab2.parquet"), 0u);
  EXPECT_EQ(mine_.files.count("ab.parquet"), 1u);
}

// The second group of a compaction commits on the snapshot its first group advanced: a
// concurrent compaction that removed the second group's inputs was rebased over (and judged
// against the first group's inputs only) before the second group's commit began. The winner is
// already in the snapshot, no winner is left to judge, and the commit must still not land: its
// inputs are not live (two OPTIMIZE commits removing the same files stored their rows twice).
TEST_F(CommitterTest, AbandonsARemovalWhoseFilesAreNotLiveInItsOwnSnapshot) {
  CommitOutcome out;
  for (const char* path : {"a.parquet", "b.parquet", "c.parquet", "d.parquet"}) {
    ASSERT_OK(Put(&mine_, AppendOf(path), &out));
  }
  other_ = mine_;
  ASSERT_OK(Put(&other_, CompactionOf({"a.parquet", "b.parquet"}, "ab.parquet"), &out));
  ASSERT_OK(Put(&other_, CompactionOf({"c.parquet", "d.parquet"}, "cd.parquet"), &out));
  // Group one (a, b) loses to the other compaction: abandoned, and `mine_` now includes both
  // winners.
  CommitOutcome first;
  ASSERT_OK(Put(&mine_, CompactionOf({"a.parquet", "b.parquet"}, "ab2.parquet"), &first));
  EXPECT_FALSE(first.version);
  ASSERT_EQ(mine_.version, other_.version);
  // Group two (c, d) starts on that snapshot: no commit after it, yet its inputs are gone.
  CommitOutcome second;
  ASSERT_OK(Put(&mine_, CompactionOf({"c.parquet", "d.parquet"}, "cd2.parquet"), &second));
  EXPECT_FALSE(second.version);
  ASSERT_TRUE(second.abandoned);
  EXPECT_NE(second.abandoned->reason.find("no longer live"), std::string::npos)
      << second.abandoned->reason;
  // The same for a removal of a file retention dropped, and for a file never in the table.
  PendingCommit retention = CompactionOf({"cd.parquet", "never.parquet"}, "x.parquet");
  retention.intent.kind = CommitKind::kRetention;
  CommitOutcome third;
  ASSERT_OK(Put(&mine_, std::move(retention), &third));
  EXPECT_FALSE(third.version);
  ASSERT_OK_AND_ASSIGN(auto head, log_.Load());
  EXPECT_EQ(head.version, other_.version);
  EXPECT_EQ(head.files.count("cd2.parquet"), 0u);
  EXPECT_EQ(head.files.count("cd.parquet"), 1u);
}

// An append of two batches, b1 (a.parquet) and b2 (b.parquet), whose withdraw leaves out the
// files and txns of the batches it is given, and counts its calls.
struct TwoBatches {
  PendingCommit pending;
  std::vector<std::set<std::string>> withdrawn;
};
std::unique_ptr<TwoBatches> TwoBatchesOf(const CommitInfo& info) {
  auto two = std::make_unique<TwoBatches>();
  PendingCommit& p = two->pending;
  p.commit.commit_info = info;
  p.commit.adds = {Add("a.parquet"), Add("b.parquet")};
  p.commit.txns = {{"timelake:b1", 0, NowMillis()}, {"timelake:b2", 0, NowMillis()}};
  p.intent.txn_app_ids = {{"timelake:b1", 0}, {"timelake:b2", 0}};
  p.withdraw = [raw = two.get()](const std::set<std::string>& recorded,
                                 Commit* commit) -> arrow::Result<bool> {
    raw->withdrawn.push_back(recorded);
    for (const auto& [app_id, path] : {std::pair<std::string, std::string>{"timelake:b1", "a.parquet"},
                                       {"timelake:b2", "b.parquet"}}) {
      if (!recorded.count(app_id)) continue;
      std::erase_if(commit->adds, [&](const AddFile& a) { return a.path == path; });
      std::erase_if(commit->txns, [&](const Txn& t) { return t.app_id == app_id; });
    }
    return !commit->adds.empty();
  };
  return two;
}

PendingCommit RecordingBatch(const std::string& app_id, const std::string& path) {
  PendingCommit p;
  p.commit.commit_info = CommitInfo{};
  p.commit.commit_info->operation = "WRITE";
  p.commit.commit_info->txn_id = NewUuid();
  p.commit.adds = {Add(path)};
  p.commit.txns = {{app_id, 0, NowMillis()}};
  p.intent.txn_app_ids = {{app_id, 0}};
  return p;
}

// A winner recorded one of the commit's batch ids: the committer answers that id as recorded,
// withdraws it, and commits the other batch in the same loop (the same commit, by its txnId,
// one lost race and one won put), instead of abandoning the whole commit.
TEST_F(CommitterTest, ABatchIdAWinnerRecordedLeavesTheCommitAndTheRestCommitsInTheSameLoop) {
  CommitOutcome won;
  ASSERT_OK(Put(&other_, RecordingBatch("timelake:b1", "x.parquet"), &won));
  ASSERT_EQ(won.version, 1);
  auto two = TwoBatchesOf(Info("WRITE"));
  const std::string txn_id = two->pending.commit.commit_info->txn_id;
  CommitOutcome out;
  ASSERT_OK(committer_.Commit(&mine_, &two->pending, &out));
  ASSERT_EQ(out.version, 2);
  EXPECT_EQ(out.attempts, 2);
  EXPECT_EQ(out.recorded, (std::map<std::string, int64_t>{{"timelake:b1", 1}}));
  ASSERT_EQ(two->withdrawn.size(), 1u);
  EXPECT_EQ(two->withdrawn[0], (std::set<std::string>{"timelake:b1"}));
  EXPECT_EQ(two->pending.intent.txn_app_ids, (std::map<std::string, int64_t>{{"timelake:b2", 0}}));
  ASSERT_OK_AND_ASSIGN(auto landed, log_.ReadCommit(2));
  EXPECT_EQ(landed.commit_info->txn_id, txn_id);
  ASSERT_EQ(landed.adds.size(), 1u);
  EXPECT_EQ(landed.adds[0].path, "b.parquet");
  ASSERT_EQ(landed.txns.size(), 1u);
  EXPECT_EQ(landed.txns[0].app_id, "timelake:b2");
  ASSERT_OK_AND_ASSIGN(auto head, log_.Load());
  EXPECT_EQ(head.version, 2);
  EXPECT_EQ(head.files.count("a.parquet"), 0u);
}

// Ids the snapshot already records when the commit begins (an append planned while another
// commit was in flight, which recorded the same id) leave it before the first put.
TEST_F(CommitterTest, ABatchIdTheSnapshotAlreadyRecordsLeavesBeforeTheFirstPut) {
  CommitOutcome won;
  ASSERT_OK(Put(&mine_, RecordingBatch("timelake:b2", "x.parquet"), &won));
  auto two = TwoBatchesOf(Info("WRITE"));
  CommitOutcome out;
  ASSERT_OK(committer_.Commit(&mine_, &two->pending, &out));
  ASSERT_EQ(out.version, 2);
  EXPECT_EQ(out.attempts, 1);
  EXPECT_EQ(out.recorded, (std::map<std::string, int64_t>{{"timelake:b2", 1}}));
  ASSERT_OK_AND_ASSIGN(auto landed, log_.ReadCommit(2));
  ASSERT_EQ(landed.adds.size(), 1u);
  EXPECT_EQ(landed.adds[0].path, "a.parquet");
}

// Every batch id recorded by winners: nothing is left, the commit is abandoned without a put,
// and each id is answered as recorded at the version that showed it.
TEST_F(CommitterTest, ACommitWhoseEveryBatchIdWinnersRecordedIsAbandoned) {
  CommitOutcome won;
  ASSERT_OK(Put(&other_, RecordingBatch("timelake:b1", "x.parquet"), &won));
  ASSERT_OK(Put(&other_, RecordingBatch("timelake:b2", "y.parquet"), &won));
  auto two = TwoBatchesOf(Info("WRITE"));
  CommitOutcome out;
  ASSERT_OK(committer_.Commit(&mine_, &two->pending, &out));
  EXPECT_FALSE(out.version);
  ASSERT_TRUE(out.abandoned);
  EXPECT_EQ(out.abandoned->effect, WinnerEffect::kRecordedSameTxn);
  EXPECT_EQ(out.recorded,
            (std::map<std::string, int64_t>{{"timelake:b1", 2}, {"timelake:b2", 2}}));
  ASSERT_OK_AND_ASSIGN(auto head, log_.Load());
  EXPECT_EQ(head.version, 2);
}

// A commit that cannot withdraw (no PendingCommit::withdraw) is abandoned, as the rule says.
TEST_F(CommitterTest, ACommitThatCannotWithdrawARecordedBatchIdIsAbandoned) {
  CommitOutcome won;
  ASSERT_OK(Put(&other_, RecordingBatch("timelake:b1", "x.parquet"), &won));
  auto two = TwoBatchesOf(Info("WRITE"));
  two->pending.withdraw = nullptr;
  CommitOutcome out;
  ASSERT_OK(committer_.Commit(&mine_, &two->pending, &out));
  EXPECT_FALSE(out.version);
  ASSERT_TRUE(out.abandoned);
  EXPECT_EQ(out.abandoned->effect, WinnerEffect::kRecordedSameTxn);
  ASSERT_OK_AND_ASSIGN(auto head, log_.Load());
  EXPECT_EQ(head.version, 1);
}

TEST_F(CommitterTest, ASchemaChangeIsATypedConflictNamingWhatChanged) {
  PendingCommit schema;
  schema.commit.commit_info = Info("ADD COLUMNS");
  schema.commit.metadata = Before().metadata;
  schema.commit.metadata->schema_string = "{\"type\":\"struct\",\"fields\":[]}";
  CommitOutcome out;
  ASSERT_OK(Put(&other_, std::move(schema), &out));
  CommitOutcome late;
  arrow::Status st = Put(&mine_, AppendOf("y.parquet"), &late);
  EXPECT_TRUE(IsCommitConflict(st)) << st.ToString();
  EXPECT_NE(st.message().find("schema"), std::string::npos) << st.ToString();
  EXPECT_FALSE(late.version);
}

}  // namespace
}  // namespace timelake::testing
