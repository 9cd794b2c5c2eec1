// Group commit across processes (table/spool.h): the spool's files, and appends of handles that
// share a local lake only through its folder (as two processes do: each handle opens its own
// locks, and flock(2) locks of separate opens exclude each other within one process too).
#include "timelake/table/spool.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <arrow/api.h>
#include <gtest/gtest.h>

#include "local_files_fixture.h"
#include "temp_dir.h"
#include "test_util.h"
#include "timelake/lake.h"
#include "timelake/ingest/ingestor.h"
#include "timelake/log/delta_log.h"
#include "timelake/store/local_store.h"
#include "timelake/store/memory_store.h"
#include "timelake/store/posix_files.h"
#include "timelake/table/table.h"
#include "timelake/util/status.h"

namespace timelake::testing {
namespace {

using arrow::field;

std::shared_ptr<arrow::Schema> RowSchema() {
  return arrow::schema({field("ts", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), false),
                        field("sensor", arrow::utf8()), field("value", arrow::float64())});
}

std::shared_ptr<arrow::RecordBatch> Rows(int n, double value) {
  std::string ts = "[", sensors = "[", values = "[";
  for (int i = 0; i < n; ++i) {
    const char* sep = i ? "," : "";
    ts += sep + std::to_string(Micros(2025, 1, 1, i % 24));
    sensors += std::string(sep) + "\"s" + std::to_string(i) + "\"";
    values += sep + std::to_string(value);
  }
  return Batch(RowSchema(), {ts + "]", sensors + "]", values + "]"});
}

// A request of one append: `n` rows of value `value`, under batch id `batch_id`.
SpoolRequest OneAppend(const std::string& id, std::optional<std::string> batch_id, int n, double value) {
  SpoolRequest request;
  request.id = id;
  request.members.push_back({std::move(batch_id), {Rows(n, value)}});
  return request;
}

class SpoolTest : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(dir_.path() + "/_timelake"); }
  std::string Folder() { return dir_.path() + "/_timelake"; }
  // A spool of `folder` (relative to the test's folder) through LocalStore's files.
  Spool Over(const std::string& folder = "_timelake") { return Spool(files_, folder); }
  std::vector<std::string> Names() {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(Folder())) out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }
  TempDir dir_;
  std::shared_ptr<LocalFiles> files_ = std::make_shared<PosixFiles>(dir_.path());
};

TEST_F(SpoolTest, ARequestIsClaimedOnceAndAnsweredToItsWriter) {
  Spool writer = Over(), leader = Over();
  SpoolRequest request;
  request.id = "r1";
  request.table_id = "table-1";
  request.members.push_back({std::string("batch-1"), {Rows(3, 1)}});
  request.members.push_back({std::nullopt, {Rows(2, 2), Rows(1, 3)}});
  ASSERT_OK_AND_ASSIGN(auto ticket, writer.Submit(request));
  EXPECT_EQ(leader.Pending(), 1);
  auto claimed = leader.Claim();
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(leader.Pending(), 0);
  EXPECT_TRUE(leader.Claim().empty()) << "claimed twice";
  const SpoolRequest& got = claimed[0];
  EXPECT_EQ(got.id, "r1");
  EXPECT_EQ(got.table_id, "table-1");
  ASSERT_EQ(got.members.size(), 2u);
  EXPECT_EQ(got.members[0].batch_id, std::optional<std::string>("batch-1"));
  EXPECT_EQ(got.members[1].batch_id, std::nullopt);
  auto rows = [](const SpoolMember& m) {
    int64_t n = 0;
    for (const auto& b : m.rows) n += b->num_rows();
    return n;
  };
  EXPECT_EQ(rows(got.members[0]), 3);
  EXPECT_EQ(rows(got.members[1]), 3);
  EXPECT_TRUE(got.members[0].rows[0]->schema()->Equals(*RowSchema()));
  ASSERT_OK_AND_ASSIGN(bool withdrawn, writer.Withdraw(*ticket));
  EXPECT_FALSE(withdrawn) << "a claimed request cannot be withdrawn";
  EXPECT_FALSE(writer.TakeAnswers(*ticket)) << "no answer yet";
  SpoolAnswer a;
  a.ok = true;
  a.version = 7;
  a.rows = 3;
  a.files = 1;
  SpoolAnswer b;
  b.error = "Invalid: no \"such\" column";
  ASSERT_OK(leader.Answer("r1", {a, b}));
  auto answers = writer.TakeAnswers(*ticket);
  ASSERT_TRUE(answers);
  ASSERT_EQ(answers->size(), 2u);
  EXPECT_TRUE((*answers)[0].ok);
  EXPECT_EQ((*answers)[0].version, 7);
  EXPECT_EQ((*answers)[0].rows, 3);
  EXPECT_FALSE((*answers)[1].ok);
  EXPECT_EQ((*answers)[1].error, b.error);
  EXPECT_FALSE(writer.TakeAnswers(*ticket)) << "an answer is taken once";
  ticket.reset();
  // What is left is the writer's scratch file, for its next request.
  ASSERT_EQ(Names().size(), 1u);
  EXPECT_EQ(Names()[0].rfind(".tmp-spool-", 0), 0u) << Names()[0];
}

TEST_F(SpoolTest, ARequestAndItsAnswerReuseOneFile) {
  // Making files where thousands are made and deleted is what handing appends over cost most
  // (ext4's inode allocation): a round trip makes no file once a writer has made its first.
  auto inode = [&](const std::string& name) {
    struct stat st;
    return ::stat((Folder() + "/" + name).c_str(), &st) == 0 ? static_cast<int64_t>(st.st_ino) : -1;
  };
  auto writer = std::make_unique<Spool>(files_, "_timelake");
  Spool leader = Over();
  int64_t first = -1;
  for (int round = 0; round < 3; ++round) {
    SpoolRequest request = OneAppend("r" + std::to_string(round), "b" + std::to_string(round), 2, round);
    request.table_id = "table-1";
    ASSERT_OK_AND_ASSIGN(auto ticket, writer->Submit(request));
    ASSERT_EQ(Names(), std::vector<std::string>{"spool-" + request.id + ".req"});
    const int64_t ino = inode("spool-" + request.id + ".req");
    if (round == 0) first = ino;
    EXPECT_EQ(ino, first) << "round " << round << " made a new file";
    auto claimed = leader.Claim();
    ASSERT_EQ(claimed.size(), 1u);
    ASSERT_EQ(claimed[0].members.size(), 1u);
    EXPECT_EQ(claimed[0].members[0].batch_id, std::string("b") + std::to_string(round));
    SpoolAnswer a;
    a.ok = true;
    a.version = round;
    ASSERT_OK(leader.Answer(request.id, {a}));
    EXPECT_EQ(inode("spool-" + request.id + ".ans"), first) << "the answer made a new file";
    auto answers = writer->TakeAnswers(*ticket);
    ASSERT_TRUE(answers);
    ASSERT_EQ(answers->size(), 1u);
    EXPECT_EQ((*answers)[0].version, round);
  }
  writer.reset();
  EXPECT_TRUE(Names().empty()) << "a spool deletes its scratch file: " << Names()[0];
}

TEST_F(SpoolTest, AForkedChildWritesItsRequestsIntoAFileOfItsOwn) {
  // A handle used on both sides of a fork(): the child must not write into the file its parent
  // keeps for its next request (the parent's request would hold the child's rows).
  Spool writer = Over(), leader = Over();
  auto round_trip = [&](const std::string& id) -> bool {
    auto ticket = writer.Submit(OneAppend(id, id, 1, 1));
    if (!ticket.ok()) return false;
    auto claimed = leader.Claim();
    if (claimed.size() != 1 || claimed[0].members.at(0).batch_id != id) return false;
    if (!leader.Answer(id, {SpoolAnswer{}}).ok()) return false;
    return writer.TakeAnswers(**ticket).has_value();
  };
  ASSERT_TRUE(round_trip("parent-1"));
  ASSERT_EQ(Names().size(), 1u);
  const std::string scratch = Folder() + "/" + Names()[0];
  struct stat before;
  ASSERT_EQ(::stat(scratch.c_str(), &before), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    auto ticket = writer.Submit(OneAppend("child", "child", 2, 2));
    struct stat after;
    // The parent's file is still there, still its own; the child's request is another file.
    const bool ok = ticket.ok() && ::stat(scratch.c_str(), &after) == 0 && after.st_ino == before.st_ino &&
                    after.st_size == before.st_size;
    ::_exit(ok ? 0 : 1);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child wrote into its parent's file";
  auto claimed = leader.Claim();  // the child's request (its writer is gone: deleted unread)
  EXPECT_TRUE(claimed.empty());
  EXPECT_TRUE(round_trip("parent-2"));
}

TEST_F(SpoolTest, AScratchFileDeletedByALeaderIsMadeAgain) {
  // A leader deletes scratch files untouched for a minute; the writer's next request then
  // makes its file again.
  Spool writer = Over(), leader = Over();
  for (int round = 0; round < 2; ++round) {
    const SpoolRequest request = OneAppend("r" + std::to_string(round), std::nullopt, 1, round);
    ASSERT_OK_AND_ASSIGN(auto ticket, writer.Submit(request));
    ASSERT_EQ(leader.Claim().size(), 1u);
    ASSERT_OK(leader.Answer(request.id, {SpoolAnswer{}}));
    ASSERT_TRUE(writer.TakeAnswers(*ticket));
    for (const auto& name : Names()) std::filesystem::remove(Folder() + "/" + name);
  }
  EXPECT_TRUE(Names().empty());
}

TEST_F(SpoolTest, AWithdrawnRequestIsNeverClaimed) {
  Spool writer = Over(), leader = Over();
  SpoolRequest request = OneAppend("r1", std::nullopt, 1, 1);
  ASSERT_OK_AND_ASSIGN(auto ticket, writer.Submit(request));
  ASSERT_OK_AND_ASSIGN(bool withdrawn, writer.Withdraw(*ticket));
  EXPECT_TRUE(withdrawn);
  EXPECT_TRUE(leader.Claim().empty());
}

TEST_F(SpoolTest, TheRequestOfAWriterThatIsGoneIsDeletedUnclaimed) {
  // Its writer never learns of a commit: committing its rows would make them appear unasked.
  Spool writer = Over(), leader = Over();
  SpoolRequest request = OneAppend("r1", std::nullopt, 1, 1);
  ASSERT_OK_AND_ASSIGN(auto ticket, writer.Submit(request));
  ticket.reset();  // the writer's lock goes with it, as with a process that died
  EXPECT_TRUE(leader.Claim().empty());
  EXPECT_TRUE(Names().empty()) << Names()[0];
}

TEST_F(SpoolTest, ADamagedRequestIsSkipped) {
  Spool leader = Over();
  std::ofstream(Folder() + "/spool-bad.req") << "not arrow";
  EXPECT_TRUE(leader.Claim().empty());
}

TEST_F(SpoolTest, NoRequestIsMadeOutsideAnExistingFolder) {
  // A dropped table's folder must not come back because a writer of it handed over an append.
  Spool writer = Over("gone/_timelake");
  SpoolRequest request = OneAppend("r1", std::nullopt, 1, 1);
  EXPECT_FALSE(writer.Submit(request).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/gone"));
}

// The spool's rules through either LocalFiles (local_files_fixture.h): LocalStore's and a
// machine-local MemoryStore's.
class SpoolOverFilesTest : public ::testing::TestWithParam<FilesFactory> {
 protected:
  void SetUp() override { where_->MakeFolder("t/_timelake"); }
  Spool Over(const std::string& folder = "t/_timelake") { return Spool(where_->files(), folder); }
  std::vector<std::string> Names(const std::string& suffix) {
    std::vector<std::string> out;
    auto files =
        where_->files()->List("t/_timelake", LocalFiles::ListDetail::kNames).ValueOrDie();
    for (const auto& f : files) {
      const size_t n = suffix.size();
      if (f.name.size() >= n && f.name.compare(f.name.size() - n, n, suffix) == 0) {
        out.push_back(f.name);
      }
    }
    return out;
  }
  std::unique_ptr<FilesUnderTest> where_ = GetParam()();
};

TEST_P(SpoolOverFilesTest, ARequestIsClaimedOnceAndAnsweredToItsWriter) {
  Spool writer = Over(), leader = Over();
  SpoolRequest request = OneAppend("r1", "batch-1", 3, 1);
  request.table_id = "table-1";
  ASSERT_OK_AND_ASSIGN(auto ticket, writer.Submit(request));
  EXPECT_EQ(leader.Pending(), 1);
  auto claimed = leader.Claim();
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_TRUE(leader.Claim().empty()) << "claimed twice";
  EXPECT_EQ(claimed[0].table_id, "table-1");
  ASSERT_EQ(claimed[0].members.size(), 1u);
  EXPECT_EQ(claimed[0].members[0].batch_id, std::optional<std::string>("batch-1"));
  ASSERT_OK_AND_ASSIGN(bool withdrawn, writer.Withdraw(*ticket));
  EXPECT_FALSE(withdrawn) << "a claimed request cannot be withdrawn";
  EXPECT_FALSE(writer.TakeAnswers(*ticket)) << "no answer yet";
  SpoolAnswer a;
  a.ok = true;
  a.version = 7;
  ASSERT_OK(leader.Answer("r1", {a}));
  auto answers = writer.TakeAnswers(*ticket);
  ASSERT_TRUE(answers);
  ASSERT_EQ(answers->size(), 1u);
  EXPECT_EQ((*answers)[0].version, 7);
  EXPECT_FALSE(writer.TakeAnswers(*ticket)) << "an answer is taken once";
  EXPECT_TRUE(Names("").size() == 1 && Names(".ans").empty()) << "only the scratch file is left";
}

TEST_P(SpoolOverFilesTest, AWithdrawnRequestIsNeverClaimed) {
  Spool writer = Over(), leader = Over();
  ASSERT_OK_AND_ASSIGN(auto ticket, writer.Submit(OneAppend("r1", std::nullopt, 1, 1)));
  ASSERT_OK_AND_ASSIGN(bool withdrawn, writer.Withdraw(*ticket));
  EXPECT_TRUE(withdrawn);
  EXPECT_EQ(leader.Pending(), 0);
  EXPECT_TRUE(leader.Claim().empty());
}

TEST_P(SpoolOverFilesTest, TheRequestOfAWriterThatIsGoneIsDeletedUnclaimed) {
  Spool writer = Over(), leader = Over();
  ASSERT_OK_AND_ASSIGN(auto ticket, writer.Submit(OneAppend("r1", std::nullopt, 1, 1)));
  ticket.reset();  // its Liveness goes with it, as with a process that died
  EXPECT_TRUE(leader.Claim().empty());
  EXPECT_TRUE(Names(".req").empty());
  EXPECT_TRUE(Names(".claimed").empty());
}

TEST_P(SpoolOverFilesTest, ADamagedRequestIsSkippedAndDeleted) {
  Spool leader = Over();
  // Its writer is alive (holds it): the request is read, and cannot be.
  ASSERT_OK_AND_ASSIGN(auto alive,
                       where_->files()->Publish("t/_timelake/.x", "t/_timelake/spool-bad.req",
                                                *arrow::Buffer::FromString("not arrow"), true));
  EXPECT_TRUE(leader.Claim().empty());
  EXPECT_TRUE(Names(".req").empty());
  EXPECT_TRUE(Names(".claimed").empty());
}

TEST_P(SpoolOverFilesTest, LeftoversUntouchedForAMinuteAreDeletedByALeader) {
  // An answer its writer never took (it died), and the scratch file of a writer that stopped.
  Spool writer = Over(), leader = Over(), stopped = Over();
  ASSERT_OK_AND_ASSIGN(auto ticket, writer.Submit(OneAppend("r1", std::nullopt, 1, 1)));
  ASSERT_EQ(leader.Claim().size(), 1u);
  ASSERT_OK(leader.Answer("r1", {SpoolAnswer{}}));
  {
    ASSERT_OK_AND_ASSIGN(auto other, stopped.Submit(OneAppend("r2", std::nullopt, 1, 1)));
    ASSERT_EQ(leader.Claim().size(), 1u);
    ASSERT_OK(leader.Answer("r2", {SpoolAnswer{}}));
    ASSERT_TRUE(stopped.TakeAnswers(*other));  // its file is now its scratch file
  }
  ASSERT_EQ(Names(".ans").size(), 1u);
  ASSERT_EQ(Names("").size(), 2u);
  EXPECT_TRUE(leader.Claim().empty());
  EXPECT_EQ(Names("").size(), 2u) << "fresh leftovers are kept";
  for (const auto& name : Names("")) where_->AgeFile("t/_timelake/" + name, 61'000);
  EXPECT_TRUE(leader.Claim().empty());
  EXPECT_TRUE(Names("").empty());
}

TEST_P(SpoolOverFilesTest, NoRequestIsMadeOutsideAnExistingFolder) {
  Spool writer = Over("gone/_timelake");
  EXPECT_FALSE(writer.Submit(OneAppend("r1", std::nullopt, 1, 1)).ok());
  EXPECT_TRUE(where_->files()->List("gone/_timelake", LocalFiles::ListDetail::kNames)->empty());
}

INSTANTIATE_TEST_SUITE_P(Files, SpoolOverFilesTest,
                         ::testing::Values(&PosixFilesForTest, &MemoryFilesForTest), FilesName);

// Handles of one table over a machine-local MemoryStore share commits through its MemoryFiles
// as processes do on a local lake (each handle stands for a process).
class SpoolOverMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ContractOptions options;
    options.series_key = std::vector<std::string>{"sensor"};
    table_ = Lake::OverStore(store_)->CreateTable("t", RowSchema(), options).ValueOrDie();
    ASSERT_OK(Append(table_.get(), "first", 0).status());
  }
  arrow::Result<AppendResult> Append(Table* table, const std::string& batch, int hour,
                                     const std::string& sensor = "a") {
    auto reader = Reader(RowSchema(), {Batch(RowSchema(), {"[" + std::to_string(Micros(2025, 1, 1, hour)) + "]",
                                                           "[\"" + sensor + "\"]", "[1.0]"})});
    AppendOptions options;
    options.batch_id = batch;
    return table->Append(reader.get(), options);
  }
  std::shared_ptr<Table> Handle() { return Lake::OverStore(store_)->OpenTable("t").ValueOrDie(); }
  void WaitForRequests(int n) {
    Spool spool(store_->AsLocalFiles(), "default/t/_timelake");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (spool.Pending() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(spool.Pending(), n);
  }

  std::shared_ptr<MemoryStore> store_ =
      std::make_shared<MemoryStore>("spool", /*machine_local=*/true);
  std::shared_ptr<Table> table_;
};

TEST_F(SpoolOverMemoryTest, AppendsWaitingForAnotherHandlesCommitShareTheNextOne) {
  auto one = Handle(), two = Handle();
  auto held = store_->LockExclusive("default/t/_timelake/spool.lock", 0).ValueOrDie();
  ASSERT_TRUE(held) << "another writer is committing";
  arrow::Result<AppendResult> r1 = arrow::Status::UnknownError("not run"), r2 = r1;
  std::thread t1([&] { r1 = Append(one.get(), "one", 1, "b"); });
  std::thread t2([&] { r2 = Append(two.get(), "two", 2, "c"); });
  WaitForRequests(2);
  held.reset();
  t1.join();
  t2.join();
  ASSERT_OK(r1.status());
  ASSERT_OK(r2.status());
  EXPECT_EQ(r1->version, r2->version) << "one commit for both";
  auto commit = DeltaLog(store_, "default/t").ReadCommit(r1->version).ValueOrDie();
  ASSERT_TRUE(commit.commit_info);
  EXPECT_EQ(commit.commit_info->operation_parameters.count(Spool::kCommitParameter), 1u);
  EXPECT_EQ(commit.txns.size(), 2u);
  EXPECT_EQ(Handle()->Info().ValueOrDie().rows, 3);
  ASSERT_OK_AND_ASSIGN(auto again, Append(one.get(), "two", 2, "c"));
  EXPECT_TRUE(again.duplicate);
}

TEST_F(SpoolOverMemoryTest, AMemoryStoreThatIsNotMachineLocalHasNoSpool) {
  MemoryStore plain("plain");
  EXPECT_EQ(plain.AsLocalFiles(), nullptr);
  EXPECT_FALSE(plain.HasLocks());
  EXPECT_EQ(plain.LockExclusive("a/b", 0).ValueOrDie(), nullptr);
}

class CrossProcessCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // fsyncs of the log folder fail while fail_log_sync_ is set (a disk reporting EIO).
    auto sync = [this](int fd, const std::string& path) {
      if (fail_log_sync_ && path.size() >= 10 && path.compare(path.size() - 10, 10, "_delta_log") == 0) {
        errno = EIO;
        return -1;
      }
      return ::fsync(fd);
    };
    store_ = LocalStore::Make(dir_.path(), /*fixed_depth=*/2, sync).ValueOrDie();
    ContractOptions options;
    options.series_key = std::vector<std::string>{"sensor"};
    table_ = Lake::OverStore(store_)->CreateTable("t", RowSchema(), options).ValueOrDie();
    // Every commit takes the spool's folder: make it before the test holds the lock.
    EXPECT_OK(Append(table_.get(), "first", 0).status());
  }

  // One row of sensor `sensor`.
  arrow::Result<AppendResult> Append(Table* table, const std::string& batch, int hour,
                                     const std::string& sensor = "a") {
    auto reader = Reader(RowSchema(), {Batch(RowSchema(), {"[" + std::to_string(Micros(2025, 1, 1, hour)) + "]",
                                                           "[\"" + sensor + "\"]", "[1.0]"})});
    AppendOptions options;
    options.batch_id = batch;
    return table->Append(reader.get(), options);
  }
  std::shared_ptr<Table> Handle() { return Lake::OverStore(store_)->OpenTable("t").ValueOrDie(); }
  std::unique_ptr<StoreLock> HoldSpoolLock() {
    return store_->LockExclusive("default/t/_timelake/spool.lock", 0).ValueOrDie();
  }
  Spool SpoolOfTable() { return Spool(store_->AsLocalFiles(), "default/t/_timelake"); }
  void WaitForRequests(int n) {
    Spool spool = SpoolOfTable();
    // 20 s at most: less than the writers' own wait for the spool (30 s), after which they
    // would withdraw their requests.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (spool.Pending() < n && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(spool.Pending(), n);
  }
  int64_t Rows() { return Handle()->Info().ValueOrDie().rows; }

  void TearDown() override {
    if (writer_.joinable()) writer_.join();
  }
  // The first steps of a leader that will die unanswered: holds the spool lock (in held_) while
  // a handle of its own appends batch "w" (sensor "d", hour 3) and hands the append over, then
  // claims the request and returns it. WriterResult releases the lock (the leader is dead) and
  // gives the append's result.
  SpoolRequest ClaimAWaitingAppend() {
    held_ = HoldSpoolLock();
    EXPECT_TRUE(held_);
    writer_ = std::thread([this, writer = Handle()] { writer_result_ = Append(writer.get(), "w", 3, "d"); });
    WaitForRequests(1);
    auto claimed = SpoolOfTable().Claim();
    EXPECT_EQ(claimed.size(), 1u);
    return claimed.empty() ? SpoolRequest{} : std::move(claimed[0]);
  }
  arrow::Result<AppendResult> WriterResult() {
    held_.reset();
    writer_.join();
    return writer_result_;
  }
  // Commits the rows of `request` as a leader does, naming it among the requests it took in.
  int64_t CommitAsLeader(const SpoolRequest& request) {
    EXPECT_EQ(request.members.size(), 1u);
    auto rows = arrow::Table::FromRecordBatches(request.members.at(0).rows).ValueOrDie();
    DeltaLog log(store_, "default/t");
    auto snapshot = log.Load().ValueOrDie();
    AddFile add;
    add.path = "data/2025-01-01/part-leader.parquet";
    add.size = WriteParquetFile(store_.get(), "default/t/" + add.path, *rows, IngestOptions{}).ValueOrDie();
    add.stats = R"({"numRecords":1})";
    Commit commit;
    commit.adds.push_back(add);
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
    commit.txns.push_back({"timelake:w", 0, now_ms});
    CommitInfo info;
    info.operation = "WRITE";
    info.operation_parameters[Spool::kCommitParameter] = "other-id," + request.id;
    commit.commit_info = info;
    EXPECT_TRUE(log.TryCommit(snapshot.version + 1, SerializeCommit(commit)).ValueOr(false));
    return snapshot.version + 1;
  }

  TempDir dir_;
  std::atomic<bool> fail_log_sync_{false};
  std::unique_ptr<StoreLock> held_;
  std::thread writer_;
  arrow::Result<AppendResult> writer_result_ = arrow::Status::UnknownError("not run");
  std::shared_ptr<LocalStore> store_;
  std::shared_ptr<Table> table_;
};

TEST_F(CrossProcessCommitTest, AppendsWaitingForAnotherWritersCommitShareTheNextOne) {
  auto one = Handle(), two = Handle();
  auto held = HoldSpoolLock();  // another writer is committing
  ASSERT_TRUE(held);
  arrow::Result<AppendResult> r1 = arrow::Status::UnknownError("not run"), r2 = r1;
  std::thread t1([&] { r1 = Append(one.get(), "one", 1, "b"); });
  std::thread t2([&] { r2 = Append(two.get(), "two", 2, "c"); });
  WaitForRequests(2);
  held.reset();
  t1.join();
  t2.join();
  ASSERT_OK(r1.status());
  ASSERT_OK(r2.status());
  EXPECT_EQ(r1->version, r2->version) << "one commit for both";
  EXPECT_EQ(one->version(), r1->version) << "a handle shows the version its append created";
  EXPECT_EQ(two->version(), r2->version) << "a handle shows the version its append created";
  EXPECT_EQ(r1->rows, 1);
  EXPECT_EQ(r2->rows, 1);
  EXPECT_FALSE(r1->duplicate);
  auto commit = DeltaLog(store_, "default/t").ReadCommit(r1->version).ValueOrDie();
  ASSERT_TRUE(commit.commit_info);
  EXPECT_EQ(commit.commit_info->operation_parameters.at("timelake.groupedAppends"), "2");
  EXPECT_EQ(commit.commit_info->operation_parameters.count(Spool::kCommitParameter), 1u);
  EXPECT_EQ(commit.adds.size(), 1u) << "one shared file for the day";
  EXPECT_EQ(commit.txns.size(), 2u);
  EXPECT_EQ(Rows(), 3);
  // Each batch id is recorded: replays are duplicates, from either handle.
  ASSERT_OK_AND_ASSIGN(auto again, Append(one.get(), "two", 2, "c"));
  EXPECT_TRUE(again.duplicate);
  ASSERT_OK_AND_ASSIGN(again, Append(two.get(), "one", 1, "b"));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(Rows(), 3);
  EXPECT_EQ(SpoolOfTable().Pending(), 0);
}

TEST_F(CrossProcessCommitTest, AClaimedAppendWhoseLeaderDiedUnansweredIsCommittedByItsWriter) {
  // The leader claims the request, then dies before committing (its lock goes with it): the
  // writer finds no answer and no commit naming its request, and commits the append itself.
  ClaimAWaitingAppend();
  auto result = WriterResult();
  ASSERT_OK(result.status());
  EXPECT_FALSE(result->duplicate);
  EXPECT_EQ(Rows(), 2);
  ASSERT_OK_AND_ASSIGN(auto again, Append(table_.get(), "w", 3, "d"));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(Rows(), 2);
}

TEST_F(CrossProcessCommitTest, AClaimedAppendWhoseLeaderCommittedItButDiedUnansweredIsNotCommittedTwice) {
  // The leader commits the request, then dies before answering: the writer finds its request
  // named in the commit and reports that commit, without committing the rows again.
  const int64_t version = CommitAsLeader(ClaimAWaitingAppend());
  auto result = WriterResult();
  ASSERT_OK(result.status());
  EXPECT_FALSE(result->duplicate);
  EXPECT_EQ(result->version, version);
  EXPECT_EQ(result->rows, 1);
  EXPECT_EQ(Rows(), 2) << "committed twice";
}

TEST_F(CrossProcessCommitTest, AnAppendFoundInADeadLeadersCommitThatCannotBeMadeDurableIsNotAcknowledged) {
  // The dead leader's commit may not be durable (its put is visible before the log folder's
  // fsync): the writer fsyncs the folder, and when that fails it reports an unknown outcome, to
  // be retried with the same batch id, and still does not commit the rows again.
  CommitAsLeader(ClaimAWaitingAppend());
  fail_log_sync_ = true;
  auto result = WriterResult();
  fail_log_sync_ = false;
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(IsOutcomeUnknown(result.status())) << result.status().ToString();
  EXPECT_NE(result.status().message().find("_delta_log"), std::string::npos) << result.status().ToString();
  EXPECT_EQ(Rows(), 2) << "committed twice";
  ASSERT_OK_AND_ASSIGN(auto again, Append(table_.get(), "w", 3, "d"));
  EXPECT_TRUE(again.duplicate) << "the retry finds the append committed";
  EXPECT_EQ(Rows(), 2);
}

}  // namespace
}  // namespace timelake::testing
