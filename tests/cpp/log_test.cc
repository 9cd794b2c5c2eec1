// DeltaLog over a MemoryStore: put-if-absent commits, replay, checkpoints and incremental update.
#include "timelake/log/delta_log.h"

#include <atomic>
#include <set>

#include <gtest/gtest.h>

#include "test_util.h"
#include <arrow/io/memory.h>
#include <parquet/arrow/writer.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>

#include "timelake/log/checkpoint.h"
#include "timelake/store/memory_store.h"
#include "timelake/store/parquet_object.h"
#include "timelake/util/time.h"

namespace timelake::testing {
namespace {

// A commit holding only commitInfo: the smallest valid commit.
Commit InfoOnly() {
  Commit c;
  c.commit_info = CommitInfo{};
  c.commit_info->operation = "WRITE";
  return c;
}

AddFile Add(const std::string& path, int64_t size = 100) {
  AddFile a;
  a.path = path;
  a.size = size;
  a.modification_time = 1700000000000;
  a.stats = R"({"numRecords":)" + std::to_string(size) + "}";
  a.tags = {{"timelake.seq", "1"}};
  a.partition_values = {{"p", std::nullopt}};
  return a;
}

RemoveFile Remove(const std::string& path, int64_t deleted_ms) {
  RemoveFile r;
  r.path = path;
  r.deletion_timestamp = deleted_ms;
  r.size = 100;
  return r;
}

class DeltaLogTest : public ::testing::Test {
 protected:
  Commit Create() {
    Commit c;
    c.commit_info = CommitInfo{};
    c.commit_info->operation = "CREATE TABLE";
    Protocol p;
    p.min_reader_version = 3;
    p.min_writer_version = 7;
    p.reader_features = std::vector<std::string>{"timestampNtz"};
    p.writer_features = std::vector<std::string>{"appendOnly", "timestampNtz"};
    c.protocol = p;
    Metadata m;
    m.id = "table-id";
    m.schema_string = R"({"type":"struct","fields":[]})";
    m.configuration = {{"delta.checkpointInterval", "10"}, {"timelake.chunk", "day"}};
    c.metadata = m;
    return c;
  }
  void WriteCommit(int64_t version, const Commit& commit) {
    ASSERT_OK_AND_ASSIGN(bool won, log_.TryCommit(version, SerializeCommit(commit)));
    ASSERT_TRUE(won) << "version " << version << " was taken";
  }
  // v0 creates the table with files a and b; v1 removes a and adds c; v2 records two txns.
  void WriteThreeCommits() {
    Commit v0 = Create();
    v0.adds = {Add("a"), Add("b")};
    WriteCommit(0, v0);
    Commit v1;
    v1.removes = {Remove("a", NowMillis())};
    v1.adds = {Add("c")};
    v1.txns = {{"writer", 1, NowMillis()}};
    WriteCommit(1, v1);
    Commit v2;
    v2.txns = {{"writer", 2, NowMillis()}, {"other", 7, NowMillis()}};
    WriteCommit(2, v2);
  }
  static std::set<std::string> Paths(const std::map<std::string, AddFile>& files) {
    std::set<std::string> out;
    for (const auto& [path, add] : files) out.insert(path);
    return out;
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
  DeltaLog log_{store_, "ns/t"};
};

TEST_F(DeltaLogTest, FirstCommitOfAVersionWinsAndLaterOnesLose) {
  ASSERT_OK_AND_ASSIGN(bool first, log_.TryCommit(0, SerializeCommit(Create())));
  Commit other = Create();
  other.metadata->id = "someone-else";
  ASSERT_OK_AND_ASSIGN(bool second, log_.TryCommit(0, SerializeCommit(other)));
  EXPECT_TRUE(first);
  EXPECT_FALSE(second);
  ASSERT_OK_AND_ASSIGN(auto commit, log_.ReadCommit(0));
  EXPECT_EQ(commit.metadata->id, "table-id");
}

TEST_F(DeltaLogTest, CommitsAreWrittenUnderTheTableLogFolder) {
  WriteCommit(0, Create());
  EXPECT_OK(store_->Head("ns/t/_delta_log/00000000000000000000.json").status());
  EXPECT_EQ(log_.LogPath("x"), "ns/t/_delta_log/x");
}

TEST_F(DeltaLogTest, TryCommitReportsStoreFailureAsError) {
  store_->SetFaultHook([](const std::string& op, const std::string&) {
    return op == "put_if_absent" ? arrow::Status::IOError("disk on fire") : arrow::Status::OK();
  });
  EXPECT_TRUE(FailsWith(log_.TryCommit(0, SerializeCommit(InfoOnly())), arrow::StatusCode::IOError,
                        "disk on fire"));
}

TEST_F(DeltaLogTest, ExistsOnlyOnceACommitIsWritten) {
  ASSERT_OK_AND_ASSIGN(bool before, log_.Exists());
  WriteCommit(0, Create());
  ASSERT_OK_AND_ASSIGN(bool after, log_.Exists());
  EXPECT_FALSE(before);
  EXPECT_TRUE(after);
}

TEST_F(DeltaLogTest, LoadWithoutLogIsKeyError) {
  EXPECT_TRUE(FailsWith(log_.Load(), arrow::StatusCode::KeyError, "ns/t"));
}

TEST_F(DeltaLogTest, LoadReplaysAddsThenRemoves) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  EXPECT_EQ(snapshot.version, 2);
  EXPECT_EQ(Paths(snapshot.files), (std::set<std::string>{"b", "c"}));
  ASSERT_EQ(snapshot.Tombstones().ValueOrDie().size(), 1u);
  EXPECT_EQ(snapshot.Tombstones().ValueOrDie().begin()->first, "a");
  EXPECT_EQ(snapshot.checkpoint_version, -1);
  EXPECT_EQ(snapshot.oldest_version, 0);
}

TEST_F(DeltaLogTest, LoadKeepsTheLatestTxnPerApp) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  ASSERT_EQ(snapshot.Txns().ValueOrDie().size(), 2u);
  EXPECT_EQ(snapshot.Txns().ValueOrDie().at("writer").version, 2);
  EXPECT_EQ(snapshot.Txns().ValueOrDie().at("other").version, 7);
}

TEST_F(DeltaLogTest, ReAddingARemovedFileClearsItsTombstone) {
  WriteThreeCommits();
  Commit v3;
  v3.adds = {Add("a", 5)};
  WriteCommit(3, v3);
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  EXPECT_TRUE(snapshot.Tombstones().ValueOrDie().empty());
  EXPECT_EQ(snapshot.files.at("a").size, 5);
}

TEST_F(DeltaLogTest, LoadUsesTheLatestMetadataAndProtocol) {
  WriteThreeCommits();
  Commit v3;
  v3.metadata = *Create().metadata;
  v3.metadata->configuration["delta.appendOnly"] = "true";
  v3.protocol = Protocol{};
  WriteCommit(3, v3);
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  EXPECT_EQ(snapshot.Config("delta.appendOnly"), "true");
  EXPECT_EQ(snapshot.protocol.min_reader_version, 1);
  EXPECT_EQ(snapshot.Config("missing.key", "fallback"), "fallback");
}

TEST_F(DeltaLogTest, LoadWithAGapInVersionsFails) {
  WriteCommit(0, Create());
  WriteCommit(1, InfoOnly());
  WriteCommit(3, InfoOnly());
  EXPECT_TRUE(FailsWith(log_.Load(), arrow::StatusCode::IOError,
                        "ns/t/_delta_log/00000000000000000002.json is missing"));
}

TEST_F(DeltaLogTest, LoadWithoutCommitZeroOrCheckpointIsNoTable) {
  // What a writer whose table was just dropped leaves for an instant: no start to read from.
  WriteCommit(1, InfoOnly());
  EXPECT_TRUE(FailsWith(log_.Load(), arrow::StatusCode::KeyError, "no Delta table"));
}

TEST_F(DeltaLogTest, LoadOfACorruptCommitNamesIt) {
  WriteCommit(0, Create());
  ASSERT_OK(store_->Put("ns/t/_delta_log/00000000000000000001.json", Buf("{not json\n")));
  EXPECT_TRUE(FailsWith(log_.Load(), arrow::StatusCode::IOError, "00000000000000000001.json"));
}

// Replay reads commits ahead, a window at a time, in parallel: a long log is applied in order
// whatever order the reads finish in, and a gap, a corrupt commit or a failed read deep in a
// later window stops the load as it would one read at a time.
class LongLogTest : public DeltaLogTest {
 protected:
  static constexpr int64_t kCommits = 300;
  // v0 creates; commit v adds file "f<v>" and removes "f<v-1>", so exactly one file is live and
  // it names the version that added it.
  void WriteLongLog(int64_t skip = -1) {
    Commit v0 = Create();
    v0.metadata->configuration["delta.checkpointInterval"] = "100000";
    v0.adds = {Add("f0")};
    WriteCommit(0, v0);
    for (int64_t v = 1; v < kCommits; ++v) {
      if (v == skip) continue;
      Commit c;
      c.removes = {Remove("f" + std::to_string(v - 1), NowMillis())};
      c.adds = {Add("f" + std::to_string(v), v + 1)};
      c.txns = {{"writer", v, NowMillis()}};
      WriteCommit(v, c);
    }
  }
};

TEST_F(LongLogTest, AppliesEveryCommitInOrder) {
  WriteLongLog();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  EXPECT_EQ(snapshot.version, kCommits - 1);
  EXPECT_EQ(Paths(snapshot.files), std::set<std::string>{"f" + std::to_string(kCommits - 1)});
  EXPECT_EQ(snapshot.files.begin()->second.size, kCommits);
  ASSERT_OK_AND_ASSIGN(const Txn* txn, snapshot.FindTxn("writer"));
  ASSERT_NE(txn, nullptr);
  EXPECT_EQ(txn->version, kCommits - 1);
  ASSERT_OK_AND_ASSIGN(const RemoveFile* tombstone, snapshot.FindTombstone("f150"));
  ASSERT_NE(tombstone, nullptr);
  // The head's fingerprint is the last commit's: an update finds nothing new and keeps it.
  ASSERT_OK_AND_ASSIGN(auto head, store_->Get("ns/t/_delta_log/00000000000000000299.json"));
  EXPECT_EQ(snapshot.head_fingerprint, CommitFingerprint(head->ToString()));
}

TEST_F(LongLogTest, AGapInALaterWindowFails) {
  WriteLongLog(/*skip=*/200);
  EXPECT_TRUE(FailsWith(log_.Load(), arrow::StatusCode::IOError,
                        "ns/t/_delta_log/00000000000000000200.json is missing"));
}

TEST_F(LongLogTest, ACorruptCommitInALaterWindowIsNamed) {
  WriteLongLog(/*skip=*/231);
  ASSERT_OK(store_->Put("ns/t/_delta_log/00000000000000000231.json", Buf("{not json\n")));
  EXPECT_TRUE(FailsWith(log_.Load(), arrow::StatusCode::IOError, "00000000000000000231.json"));
}

TEST_F(LongLogTest, AFailedReadInALaterWindowIsReported) {
  WriteLongLog();
  store_->SetFaultHook([](const std::string& op, const std::string& path) {
    return op == "get" && path.find("00000000000000000177.json") != std::string::npos
               ? arrow::Status::IOError("flaky read")
               : arrow::Status::OK();
  });
  EXPECT_TRUE(FailsWith(log_.Load(), arrow::StatusCode::IOError, "flaky read"));
}

TEST_F(DeltaLogTest, LoadPropagatesStoreFailure) {
  WriteThreeCommits();
  store_->SetFaultHook([](const std::string& op, const std::string& path) {
    return op == "get" && path.find("00000000000000000001.json") != std::string::npos
               ? arrow::Status::IOError("flaky read")
               : arrow::Status::OK();
  });
  EXPECT_TRUE(FailsWith(log_.Load(), arrow::StatusCode::IOError, "flaky read"));
}

TEST_F(DeltaLogTest, ReadCommitOfMissingVersionIsNotFound) {
  WriteCommit(0, Create());
  EXPECT_TRUE(IsMissing(log_.ReadCommit(1)));
}

TEST_F(DeltaLogTest, CheckpointThenLoadGivesTheSameSnapshot) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto replayed, log_.Load());
  ASSERT_OK(log_.Checkpoint(replayed));
  ASSERT_OK_AND_ASSIGN(auto loaded, log_.Load());
  EXPECT_EQ(loaded.version, 2);
  EXPECT_EQ(loaded.checkpoint_version, 2);
  EXPECT_EQ(Paths(loaded.files), Paths(replayed.files));
  for (const auto& [path, add] : replayed.files) {
    const AddFile& got = loaded.files.at(path);
    EXPECT_EQ(got.size, add.size);
    EXPECT_EQ(got.modification_time, add.modification_time);
    EXPECT_EQ(got.stats, add.stats);
    EXPECT_EQ(got.tags, add.tags);
    EXPECT_EQ(got.partition_values, add.partition_values);
  }
  ASSERT_EQ(loaded.Txns().ValueOrDie().size(), replayed.Txns().ValueOrDie().size());
  for (const auto& [app, txn] : replayed.Txns().ValueOrDie()) EXPECT_EQ(loaded.Txns().ValueOrDie().at(app).version, txn.version);
  EXPECT_EQ(loaded.metadata.id, replayed.metadata.id);
  EXPECT_EQ(loaded.metadata.configuration, replayed.metadata.configuration);
  EXPECT_EQ(loaded.metadata.schema_string, replayed.metadata.schema_string);
  EXPECT_EQ(loaded.protocol.min_reader_version, 3);
  EXPECT_EQ(loaded.protocol.min_writer_version, 7);
  EXPECT_EQ(loaded.protocol.reader_features, replayed.protocol.reader_features);
  EXPECT_EQ(loaded.protocol.writer_features, replayed.protocol.writer_features);
  EXPECT_EQ(loaded.Tombstones().ValueOrDie().size(), 1u);
}

TEST_F(DeltaLogTest, CheckpointWritesTheLastCheckpointHint) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  ASSERT_OK(log_.Checkpoint(snapshot));
  ASSERT_OK_AND_ASSIGN(auto hint, store_->Get("ns/t/_delta_log/_last_checkpoint"));
  EXPECT_NE(Str(hint).find("\"version\":2"), std::string::npos) << Str(hint);
  EXPECT_OK(store_->Head("ns/t/_delta_log/00000000000000000002.checkpoint.parquet").status());
}

TEST_F(DeltaLogTest, LoadWorksWhenCommitsBeforeTheCheckpointAreDeleted) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  ASSERT_OK(log_.Checkpoint(snapshot));
  // Delta's log cleanup deletes what comes before the checkpoint, and keeps its commit.
  for (int v = 0; v <= 1; ++v) ASSERT_OK(store_->Delete(log_.LogPath(CommitFileName(v))));
  ASSERT_OK_AND_ASSIGN(auto loaded, log_.Load());
  EXPECT_EQ(loaded.version, 2);
  EXPECT_EQ(loaded.oldest_version, -1);  // opened from the checkpoint: not listed yet
  EXPECT_EQ(log_.OldestVersion().ValueOrDie(), 2);
  EXPECT_EQ(Paths(loaded.files), (std::set<std::string>{"b", "c"}));
  // Without the hint the whole log is listed, and the oldest version is known at once.
  ASSERT_OK(store_->Delete(log_.LogPath("_last_checkpoint")));
  ASSERT_OK_AND_ASSIGN(loaded, log_.Load());
  EXPECT_EQ(loaded.oldest_version, 2);
  // With the commit after it, a checkpoint stands without its own commit (a cleanup that took
  // that one too).
  Commit v3;
  v3.adds = {Add("d")};
  WriteCommit(3, v3);
  ASSERT_OK(store_->Delete(log_.LogPath(CommitFileName(2))));
  ASSERT_OK_AND_ASSIGN(loaded, log_.Load());
  EXPECT_EQ(loaded.version, 3);
  EXPECT_EQ(Paths(loaded.files), (std::set<std::string>{"b", "c", "d"}));
  // A checkpoint with no commit at or after it is what a dropped table's stale writer leaves in
  // an object store after the drop: no table.
  ASSERT_OK(store_->Delete(log_.LogPath(CommitFileName(3))));
  EXPECT_TRUE(log_.Load().status().IsKeyError());
  EXPECT_FALSE(log_.Exists().ValueOrDie());
}

TEST_F(DeltaLogTest, LoadReplaysCommitsAfterTheCheckpoint) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  ASSERT_OK(log_.Checkpoint(snapshot));
  Commit v3;
  v3.removes = {Remove("b", NowMillis())};
  v3.adds = {Add("d")};
  WriteCommit(3, v3);
  ASSERT_OK_AND_ASSIGN(auto loaded, log_.Load());
  EXPECT_EQ(loaded.version, 3);
  EXPECT_EQ(loaded.checkpoint_version, 2);
  EXPECT_EQ(Paths(loaded.files), (std::set<std::string>{"c", "d"}));
}

// --- damaged logs: fall back where the state can still be rebuilt, else name the damage ------

TEST_F(DeltaLogTest, LoadReplaysFromCommitZeroWhenTheCheckpointIsTruncated) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  ASSERT_OK(log_.Checkpoint(snapshot));
  Commit v3;
  v3.removes = {Remove("b", NowMillis())};
  v3.adds = {Add("d")};
  WriteCommit(3, v3);
  const std::string cp = log_.LogPath(CheckpointFileName(2));
  ASSERT_OK_AND_ASSIGN(auto body, store_->Get(cp));
  ASSERT_OK(store_->Put(cp, SliceBuffer(body, 0, body->size() / 2)));

  ASSERT_OK_AND_ASSIGN(auto loaded, log_.Load());
  EXPECT_EQ(loaded.version, 3);
  EXPECT_EQ(loaded.checkpoint_version, -1);  // replayed: the damaged checkpoint was not used
  EXPECT_EQ(Paths(loaded.files), (std::set<std::string>{"c", "d"}));
  EXPECT_EQ(loaded.Txns().ValueOrDie().at("writer").version, 2);
  EXPECT_EQ(loaded.metadata.id, "table-id");
}

TEST_F(DeltaLogTest, LoadFallsBackToAnOlderCheckpointWhenTheNewestIsCorrupt) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto at2, log_.Load());
  ASSERT_OK(log_.Checkpoint(at2));
  Commit v3;
  v3.adds = {Add("d")};
  WriteCommit(3, v3);
  Commit v4;
  v4.adds = {Add("e")};
  WriteCommit(4, v4);
  ASSERT_OK_AND_ASSIGN(auto at4, log_.Load());
  ASSERT_OK(log_.Checkpoint(at4));
  // Log expiry removed the commits before checkpoint 2: only checkpoint 2 can rebuild the state.
  for (int v = 0; v <= 2; ++v) ASSERT_OK(store_->Delete(log_.LogPath(CommitFileName(v))));
  ASSERT_OK(store_->Put(log_.LogPath(CheckpointFileName(4)), Buf("PAR1 torn write")));

  ASSERT_OK_AND_ASSIGN(auto loaded, log_.Load());
  EXPECT_EQ(loaded.version, 4);
  EXPECT_EQ(loaded.checkpoint_version, 2);
  EXPECT_EQ(Paths(loaded.files), (std::set<std::string>{"b", "c", "d", "e"}));
}

TEST_F(DeltaLogTest, LoadFailsNamingTheDamageWhenNothingCanRebuildTheState) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  ASSERT_OK(log_.Checkpoint(snapshot));
  for (int v = 0; v <= 1; ++v) ASSERT_OK(store_->Delete(log_.LogPath(CommitFileName(v))));
  ASSERT_OK(store_->Put(log_.LogPath(CheckpointFileName(2)), Buf("")));

  auto loaded = log_.Load();
  EXPECT_TRUE(FailsWith(loaded, arrow::StatusCode::IOError, "damaged"));
  EXPECT_TRUE(FailsWith(loaded, arrow::StatusCode::IOError,
                        "ns/t/_delta_log/00000000000000000002.checkpoint.parquet"));
  EXPECT_TRUE(FailsWith(loaded, arrow::StatusCode::IOError,
                        "ns/t/_delta_log/00000000000000000000.json is missing"));
}

// Versions 0..11 with a checkpoint at 10 and no `_last_checkpoint` hint (a load lists the whole
// log first); the table is dropped (and, with `recreate`, created again at its path, id
// "new-table-id") when the load reads commit 11; dropped_ says it was.
class DroppedWhileLoadingTest : public DeltaLogTest {
 protected:
  void SetUp() override {
    WriteCommit(0, Create());
    for (int v = 1; v <= 11; ++v) {
      Commit c;
      c.adds = {Add("f" + std::to_string(v))};
      WriteCommit(v, c);
    }
    ASSERT_OK_AND_ASSIGN(auto at10, log_.LoadAt(10));
    ASSERT_OK(log_.Checkpoint(at10));
    ASSERT_OK(store_->Delete(log_.LogPath("_last_checkpoint")));
  }
  void DropOnReadOfCommit11(bool recreate) {
    store_->SetFaultHook([this, recreate](const std::string& op, const std::string& path) {
      if (op == "get" && path.find(CommitFileName(11)) != std::string::npos && !dropped_.exchange(true)) {
        EXPECT_OK(store_->DeletePrefix("ns/t/"));
        if (recreate) {
          Commit created = Create();
          created.metadata->id = "new-table-id";
          EXPECT_OK(log_.TryCommit(0, SerializeCommit(created)).status());
        }
      }
      return arrow::Status::OK();
    });
  }
  std::atomic<bool> dropped_{false};
};

TEST_F(DroppedWhileLoadingTest, ALoadOfATableCreatedAgainMeanwhileReadsTheNewTable) {
  // The load lists the old table's log, then the table is dropped and created again at its path
  // before the commits after the checkpoint are read (CI found "damaged" here, 2026-12-02).
  DropOnReadOfCommit11(/*recreate=*/true);
  ASSERT_OK_AND_ASSIGN(auto loaded, log_.Load());
  EXPECT_TRUE(dropped_);
  EXPECT_EQ(loaded.version, 0);
  EXPECT_EQ(loaded.metadata.id, "new-table-id");
  EXPECT_TRUE(loaded.files.empty());
}

TEST_F(DroppedWhileLoadingTest, ALoadOfATableDroppedMeanwhileFindsNoTable) {
  DropOnReadOfCommit11(/*recreate=*/false);
  EXPECT_TRUE(FailsWith(log_.Load(), arrow::StatusCode::KeyError, "no Delta table"));
  EXPECT_TRUE(dropped_);
}

TEST_F(DeltaLogTest, ACorruptLastCheckpointHintIsIgnored) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  ASSERT_OK(log_.Checkpoint(snapshot));
  for (const char* hint : {"{\"version\":", "{\"version\":99,\"size\":1}", ""}) {
    ASSERT_OK(store_->Put(log_.LogPath("_last_checkpoint"), Buf(hint)));
    ASSERT_OK_AND_ASSIGN(auto loaded, log_.Load());
    EXPECT_EQ(loaded.version, 2) << hint;
    EXPECT_EQ(loaded.checkpoint_version, 2) << hint;
    EXPECT_EQ(Paths(loaded.files), (std::set<std::string>{"b", "c"})) << hint;
  }
}

TEST_F(DeltaLogTest, AnEmptyOrActionlessCommitFileIsDamageNotAnEmptyCommit) {
  WriteThreeCommits();
  const std::string path = log_.LogPath(CommitFileName(1));
  for (const char* text : {"", "{}\n", " \n\t\n", "{}"}) {
    ASSERT_OK(store_->Put(path, Buf(text)));
    auto loaded = log_.Load();
    EXPECT_TRUE(FailsWith(loaded, arrow::StatusCode::IOError, path)) << "'" << text << "'";
    EXPECT_TRUE(FailsWith(loaded, arrow::StatusCode::IOError, "damaged")) << "'" << text << "'";
  }
}

TEST_F(DeltaLogTest, UpdateStopsAtAnEmptyCommitFile) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  ASSERT_OK(store_->Put(log_.LogPath(CommitFileName(3)), Buf("")));
  EXPECT_TRUE(FailsWith(log_.Update(&snapshot), arrow::StatusCode::IOError,
                        log_.LogPath(CommitFileName(3))));
  EXPECT_EQ(snapshot.version, 2);
}

TEST_F(DeltaLogTest, ACommitHoldingOnlyCommitInfoIsValid) {
  WriteThreeCommits();
  WriteCommit(3, InfoOnly());
  ASSERT_OK_AND_ASSIGN(auto loaded, log_.Load());
  EXPECT_EQ(loaded.version, 3);
  EXPECT_EQ(Paths(loaded.files), (std::set<std::string>{"b", "c"}));
}

TEST_F(DeltaLogTest, TryCommitRefusesABodyWithoutActions) {
  WriteCommit(0, Create());
  EXPECT_TRUE(IsInvalid(log_.TryCommit(1, SerializeCommit(Commit{})), "no actions"));
  EXPECT_TRUE(IsMissing(store_->Head(log_.LogPath(CommitFileName(1)))));
}

TEST_F(DeltaLogTest, UpdateReadsOnlyNewCommits) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  Commit v3;
  v3.adds = {Add("d")};
  WriteCommit(3, v3);
  WriteCommit(4, InfoOnly());
  std::vector<std::string> reads;
  store_->SetFaultHook([&](const std::string& op, const std::string& path) {
    if (op == "get" || op == "list") reads.push_back(op + " " + path);
    return arrow::Status::OK();
  });
  ASSERT_OK(log_.Update(&snapshot));
  EXPECT_EQ(snapshot.version, 4);
  EXPECT_EQ(Paths(snapshot.files), (std::set<std::string>{"b", "c", "d"}));
  // The snapshot's own head first: still the commit it was built from (not a recreated table's).
  EXPECT_EQ(reads, (std::vector<std::string>{"get ns/t/_delta_log/00000000000000000002.json",
                                             "get ns/t/_delta_log/00000000000000000003.json",
                                             "get ns/t/_delta_log/00000000000000000004.json",
                                             "get ns/t/_delta_log/00000000000000000005.json"}));
}

TEST_F(DeltaLogTest, UpdateWithoutNewCommitsChangesNothing) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  ASSERT_OK(log_.Update(&snapshot));
  EXPECT_EQ(snapshot.version, 2);
  EXPECT_EQ(snapshot.files.size(), 2u);
}

TEST_F(DeltaLogTest, UpdatePropagatesReadFailures) {
  WriteThreeCommits();
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  WriteCommit(3, InfoOnly());
  store_->SetFaultHook([](const std::string& op, const std::string&) {
    return op == "get" ? arrow::Status::IOError("timeout") : arrow::Status::OK();
  });
  EXPECT_TRUE(FailsWith(log_.Update(&snapshot), arrow::StatusCode::IOError, "timeout"));
  EXPECT_EQ(snapshot.version, 2);
}

TEST_F(DeltaLogTest, CheckpointDropsTombstonesOlderThanTheRetention) {
  Commit v0 = Create();
  v0.adds = {Add("old"), Add("new")};
  WriteCommit(0, v0);
  Commit v1;
  v1.removes = {Remove("old", NowMillis() - 8 * 86'400'000LL), Remove("new", NowMillis())};
  WriteCommit(1, v1);
  ASSERT_OK_AND_ASSIGN(auto snapshot, log_.Load());
  ASSERT_OK(log_.Checkpoint(snapshot));
  ASSERT_OK_AND_ASSIGN(auto loaded, log_.Load());
  ASSERT_EQ(loaded.Tombstones().ValueOrDie().size(), 1u);
  EXPECT_EQ(loaded.Tombstones().ValueOrDie().begin()->first, "new");
}

// --- checkpoint files, without the log ------------------------------------------------------

Snapshot RichSnapshot() {
  Snapshot s;
  s.version = 12;
  s.protocol.min_reader_version = 3;
  s.protocol.min_writer_version = 7;
  s.protocol.reader_features = std::vector<std::string>{"timestampNtz"};
  s.protocol.writer_features = std::vector<std::string>{"timestampNtz", "appendOnly"};
  s.metadata.id = "id-1";
  s.metadata.name = "readings";
  s.metadata.schema_string = R"({"type":"struct","fields":[]})";
  s.metadata.format_options = {{"k", "v"}};
  s.metadata.configuration = {{"timelake.timeColumn", "ts"}, {"delta.checkpointInterval", "10"}};
  s.metadata.created_time = 1700000000000;
  s.files["f1"] = Add("f1", 10);
  s.files["f2"] = Add("f2", 20);
  s.files["f2"].stats.reset();
  s.files["f2"].tags.clear();
  s.recent_txns["app"] = {"app", 9, 1700000000500};
  s.recent_tombstones["gone"] = Remove("gone", 1700000000000);
  return s;
}

TEST(CheckpointTest, WriteThenReadRoundTrips) {
  const Snapshot s = RichSnapshot();
  ASSERT_OK_AND_ASSIGN(auto body, WriteCheckpoint(s, /*tombstone_cutoff_ms=*/0, INT64_MIN));
  EXPECT_EQ(body.num_add_files, 2);
  EXPECT_EQ(body.num_actions, 6);  // protocol, metaData, txn, 2 adds, remove
  Snapshot back;
  ASSERT_OK(ReadCheckpoint(body.data, "cp.parquet", &back));
  EXPECT_EQ(back.protocol.reader_features, s.protocol.reader_features);
  EXPECT_EQ(back.protocol.writer_features, s.protocol.writer_features);
  EXPECT_EQ(back.metadata.id, "id-1");
  EXPECT_EQ(back.metadata.name, s.metadata.name);
  EXPECT_FALSE(back.metadata.description);
  EXPECT_EQ(back.metadata.format_options, s.metadata.format_options);
  EXPECT_EQ(back.metadata.configuration, s.metadata.configuration);
  EXPECT_EQ(back.metadata.created_time, s.metadata.created_time);
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files.at("f1").stats, s.files.at("f1").stats);
  EXPECT_EQ(back.files.at("f1").partition_values, s.files.at("f1").partition_values);
  EXPECT_EQ(back.files.at("f1").tags, s.files.at("f1").tags);
  EXPECT_FALSE(back.files.at("f2").stats);
  EXPECT_EQ(back.files.at("f2").size, 20);
  EXPECT_EQ(back.Txns().ValueOrDie().at("app").version, 9);
  EXPECT_EQ(back.Txns().ValueOrDie().at("app").last_updated, 1700000000500);
  ASSERT_EQ(back.Tombstones().ValueOrDie().size(), 1u);
  EXPECT_EQ(back.Tombstones().ValueOrDie().at("gone").deletion_timestamp, 1700000000000);
  EXPECT_EQ(back.Tombstones().ValueOrDie().at("gone").size, 100);
}

TEST(CheckpointTest, TombstonesOlderThanTheCutoffAreDropped) {
  Snapshot s = RichSnapshot();
  s.recent_tombstones["recent"] = Remove("recent", 1700000009000);
  ASSERT_OK_AND_ASSIGN(auto body, WriteCheckpoint(s, /*tombstone_cutoff_ms=*/1700000005000,
                                                  INT64_MIN));
  Snapshot back;
  ASSERT_OK(ReadCheckpoint(body.data, "cp.parquet", &back));
  ASSERT_EQ(back.Tombstones().ValueOrDie().size(), 1u);
  EXPECT_EQ(back.Tombstones().ValueOrDie().begin()->first, "recent");
}

TEST(CheckpointTest, TxnsOlderThanTheCutoffAreDropped) {
  Snapshot s = RichSnapshot();
  s.recent_txns["fresh"] = {"fresh", 1, 1700000009000};
  s.recent_txns["undated"] = {"undated", 2, std::nullopt};
  ASSERT_OK_AND_ASSIGN(auto body, WriteCheckpoint(s, 0, /*txn_cutoff_ms=*/1700000005000));
  Snapshot back;
  ASSERT_OK(ReadCheckpoint(body.data, "cp.parquet", &back));
  EXPECT_EQ(back.Txns().ValueOrDie().count("app"), 0u);
  EXPECT_EQ(back.Txns().ValueOrDie().count("fresh"), 1u);
  EXPECT_EQ(back.Txns().ValueOrDie().count("undated"), 1u);
}

// The live state (protocol, metaData, add), the transactions and the tombstones go in row
// groups of their own, so that a load reads the first alone and leaves the rest in the bytes.
TEST(CheckpointTest, TheLiveStateTransactionsAndTombstonesHaveRowGroupsOfTheirOwn) {
  const Snapshot s = RichSnapshot();
  ASSERT_OK_AND_ASSIGN(auto body, WriteCheckpoint(s, 0, INT64_MIN));
  auto reader = parquet::ParquetFileReader::Open(std::make_shared<arrow::io::BufferReader>(body.data));
  auto meta = reader->metadata();
  ASSERT_EQ(meta->num_row_groups(), 3);
  EXPECT_EQ(meta->RowGroup(0)->num_rows(), 4);  // protocol, metaData, 2 adds
  EXPECT_EQ(meta->RowGroup(1)->num_rows(), 1);  // the txn
  EXPECT_EQ(meta->RowGroup(2)->num_rows(), 1);  // the remove

  Snapshot live;
  ASSERT_OK(ReadCheckpoint(body.data, "cp.parquet", &live, CheckpointActions::kLive));
  EXPECT_EQ(live.metadata.id, "id-1");
  EXPECT_EQ(live.files.size(), 2u);
  EXPECT_TRUE(live.recent_txns.empty());
  EXPECT_TRUE(live.recent_tombstones.empty());
  ASSERT_NE(live.history, nullptr);
  EXPECT_EQ(live.history->entries(), 2);
  EXPECT_EQ(live.HistoryEntries(), 2);
  // Asked for, the history is read from the bytes kept.
  ASSERT_OK_AND_ASSIGN(const Txn* txn, live.FindTxn("app"));
  ASSERT_NE(txn, nullptr);
  EXPECT_EQ(txn->version, 9);
  ASSERT_OK_AND_ASSIGN(const RemoveFile* gone, live.FindTombstone("gone"));
  ASSERT_NE(gone, nullptr);
  EXPECT_EQ(gone->size, 100);
  ASSERT_OK_AND_ASSIGN(const Txn* none, live.FindTxn("other"));
  EXPECT_EQ(none, nullptr);
}

// Commits after the checkpoint take precedence over its history: a newer txn of the same
// application, and a file added again (which is no longer a tombstone) or removed again.
TEST(CheckpointTest, CommitsAfterTheCheckpointOverrideItsHistory) {
  Snapshot s = RichSnapshot();
  s.recent_tombstones["back"] = Remove("back", 1700000000000);
  s.recent_tombstones["again"] = Remove("again", 1700000000000);
  ASSERT_OK_AND_ASSIGN(auto body, WriteCheckpoint(s, 0, INT64_MIN));
  Snapshot live;
  ASSERT_OK(ReadCheckpoint(body.data, "cp.parquet", &live, CheckpointActions::kLive));
  Commit later;
  later.txns.push_back({"app", 10, 1700000001000});
  later.adds.push_back(Add("back"));
  later.adds.push_back(Add("again"));
  live.Apply(later, 13);
  Commit last;
  last.removes.push_back(Remove("again", 1700000002000));
  live.Apply(last, 14);

  ASSERT_OK_AND_ASSIGN(const Txn* txn, live.FindTxn("app"));
  EXPECT_EQ(txn->version, 10);
  ASSERT_OK_AND_ASSIGN(const RemoveFile* back, live.FindTombstone("back"));
  EXPECT_EQ(back, nullptr);  // live again
  ASSERT_OK_AND_ASSIGN(const RemoveFile* again, live.FindTombstone("again"));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->deletion_timestamp, 1700000002000);
  ASSERT_OK_AND_ASSIGN(auto tombstones, live.Tombstones());
  EXPECT_EQ(tombstones.size(), 2u);  // "gone" from the history, "again" from the last commit
  EXPECT_EQ(tombstones.count("gone"), 1u);
  EXPECT_EQ(tombstones.at("again").deletion_timestamp, 1700000002000);
  ASSERT_OK_AND_ASSIGN(auto txns, live.Txns());
  EXPECT_EQ(txns.at("app").version, 10);

  // The next checkpoint holds the merged state, whether written from the loaded snapshot or not.
  ASSERT_OK_AND_ASSIGN(auto next, WriteCheckpoint(live, 0, INT64_MIN));
  Snapshot all;
  ASSERT_OK(ReadCheckpoint(next.data, "cp2.parquet", &all));
  EXPECT_EQ(all.history, nullptr);
  EXPECT_EQ(all.recent_txns.at("app").version, 10);
  EXPECT_EQ(all.recent_tombstones.size(), 2u);
  EXPECT_EQ(all.files.count("back"), 1u);
}

// A history whose pages are damaged cannot say whether a batch id was recorded: the question is
// an error, never "no" (which would let a re-sent batch in twice); the live state still loads.
TEST(CheckpointTest, ADamagedHistoryIsAnErrorWhenAskedForNotAnAbsence) {
  Snapshot s = RichSnapshot();
  for (int i = 0; i < 200; ++i) s.recent_txns["app-" + std::to_string(i)] = {"app-" + std::to_string(i), i, 1700000000500};
  ASSERT_OK_AND_ASSIGN(auto body, WriteCheckpoint(s, 0, INT64_MIN));
  auto reader = parquet::ParquetFileReader::Open(std::make_shared<arrow::io::BufferReader>(body.data));
  auto group = reader->metadata()->RowGroup(1);  // the transactions
  int app_id = -1;
  for (int c = 0; c < group->num_columns(); ++c) {
    if (group->ColumnChunk(c)->path_in_schema()->ToDotString() == "txn.appId") app_id = c;
  }
  ASSERT_GE(app_id, 0);
  auto chunk = group->ColumnChunk(app_id);
  const int64_t start = chunk->has_dictionary_page() ? chunk->dictionary_page_offset() : chunk->data_page_offset();
  std::string bytes(reinterpret_cast<const char*>(body.data->data()), static_cast<size_t>(body.data->size()));
  const int64_t at = start + chunk->total_compressed_size() - 8;  // inside the last page's body
  bytes[static_cast<size_t>(at)] = static_cast<char>(bytes[static_cast<size_t>(at)] ^ 0x5a);
  Snapshot live;
  ASSERT_OK(ReadCheckpoint(Buf(bytes), "t/_delta_log/12.checkpoint.parquet", &live, CheckpointActions::kLive));
  EXPECT_EQ(live.files.size(), 2u);
  EXPECT_TRUE(FailsWith(live.FindTxn("app-7").status(), arrow::StatusCode::IOError,
                        "t/_delta_log/12.checkpoint.parquet"));
  EXPECT_FALSE(live.Txns().ok());
  Snapshot all;
  EXPECT_FALSE(ReadCheckpoint(Buf(bytes), "t/_delta_log/12.checkpoint.parquet", &all).ok());
}

TEST(CheckpointTest, ReadingGarbageIsIOErrorNamingTheObject) {
  Snapshot back;
  EXPECT_TRUE(FailsWith(ReadCheckpoint(Buf("definitely not parquet"), "t/_delta_log/x.parquet", &back),
                        arrow::StatusCode::IOError, "t/_delta_log/x.parquet"));
}

TEST(CheckpointTest, ATruncatedCheckpointIsIOErrorNamingTheObject) {
  ASSERT_OK_AND_ASSIGN(auto body, WriteCheckpoint(RichSnapshot(), 0, INT64_MIN));
  Snapshot back;
  auto cut = SliceBuffer(body.data, 0, body.data->size() / 2);
  EXPECT_TRUE(FailsWith(ReadCheckpoint(cut, "t/_delta_log/12.checkpoint.parquet", &back),
                        arrow::StatusCode::IOError, "t/_delta_log/12.checkpoint.parquet"));
}

TEST(CheckpointTest, ACheckpointWithoutMetadataIsDamaged) {
  Snapshot s = RichSnapshot();
  ASSERT_OK_AND_ASSIGN(auto full, WriteCheckpoint(s, 0, INT64_MIN));
  // A Parquet file of the right shape holding only an add: readable, but not a checkpoint.
  ASSERT_OK_AND_ASSIGN(auto table, ReadParquetBuffer(full.data, "cp"));
  ASSERT_OK_AND_ASSIGN(auto one_row, table->CombineChunks());
  auto add_only = one_row->Slice(3, 1);  // protocol, metaData, txn, then the first add
  ASSERT_OK_AND_ASSIGN(auto sink, arrow::io::BufferOutputStream::Create());
  ASSERT_OK(parquet::arrow::WriteTable(*add_only, arrow::default_memory_pool(), sink, 1024));
  ASSERT_OK_AND_ASSIGN(auto data, sink->Finish());
  Snapshot back;
  EXPECT_TRUE(FailsWith(ReadCheckpoint(data, "t/_delta_log/3.checkpoint.parquet", &back),
                        arrow::StatusCode::IOError, "3.checkpoint.parquet"));
}

}  // namespace
}  // namespace timelake::testing
