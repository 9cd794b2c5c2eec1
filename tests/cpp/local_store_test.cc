// LocalStore: the ObjectStore contract over a temporary directory, plus what only a file system
// store does (temporary files, absolute paths other engines can open).
#include "timelake/store/local_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <gtest/gtest.h>

#include "store_contract.h"
#include "temp_dir.h"
#include "test_util.h"

namespace timelake::testing {
namespace {

namespace fs = std::filesystem;

struct LocalStoreFactory {
  TempDir dir;
  std::shared_ptr<ObjectStore> Make() { return LocalStore::Make(dir.path()).ValueOrDie(); }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Local, ObjectStoreContract, LocalStoreFactory);

class LocalStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = LocalStore::Make(dir_.path()).ValueOrDie(); }

  std::string ReadFile(const std::string& relative) {
    std::ifstream in(dir_.path() + "/" + relative, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  void WriteFile(const std::string& relative, const std::string& text) {
    fs::create_directories(fs::path(dir_.path() + "/" + relative).parent_path());
    std::ofstream(dir_.path() + "/" + relative, std::ios::binary) << text;
  }
  std::vector<std::string> TempFilesBelowRoot() {
    std::vector<std::string> out;
    for (const auto& entry : fs::recursive_directory_iterator(dir_.path())) {
      if (entry.path().filename().string().rfind(".tmp-", 0) == 0) out.push_back(entry.path());
    }
    return out;
  }

  TempDir dir_;
  std::shared_ptr<LocalStore> store_;
};

TEST_F(LocalStoreTest, MakeRejectsRelativeRoot) {
  EXPECT_TRUE(IsInvalid(LocalStore::Make("relative/lake"), "absolute"));
}

TEST_F(LocalStoreTest, MakeCreatesMissingRoot) {
  const std::string root = dir_.path() + "/nested/lake";
  ASSERT_OK_AND_ASSIGN(auto store, LocalStore::Make(root));
  EXPECT_TRUE(fs::is_directory(root));
  EXPECT_EQ(store->root(), root);
}

TEST_F(LocalStoreTest, ObjectsAreFilesBelowTheRoot) {
  ASSERT_OK(store_->Put("ns/t/_delta_log/00.json", Buf("{}\n")));
  EXPECT_EQ(ReadFile("ns/t/_delta_log/00.json"), "{}\n");
}

TEST_F(LocalStoreTest, FilesWrittenByOthersAreObjects) {
  WriteFile("ns/t/data/x.parquet", "PAR1");
  ASSERT_OK_AND_ASSIGN(auto data, store_->Get("ns/t/data/x.parquet"));
  EXPECT_EQ(Str(data), "PAR1");
}

TEST_F(LocalStoreTest, ListSkipsTemporaryFiles) {
  ASSERT_OK(store_->Put("t/_delta_log/00000000000000000000.json", Buf("{}")));
  WriteFile("t/_delta_log/.tmp-0b6a1c2e", "half written");
  ASSERT_OK_AND_ASSIGN(auto listing, store_->List("t/_delta_log/"));
  ASSERT_EQ(listing.size(), 1u);
  EXPECT_EQ(listing[0].path, "t/_delta_log/00000000000000000000.json");
}

TEST_F(LocalStoreTest, PutIfAbsentLeavesNoTemporaryFiles) {
  ASSERT_OK_AND_ASSIGN(bool first, store_->PutIfAbsent("log/1.json", Buf("a")));
  ASSERT_OK_AND_ASSIGN(bool second, store_->PutIfAbsent("log/1.json", Buf("b")));
  EXPECT_TRUE(first);
  EXPECT_FALSE(second);
  EXPECT_TRUE(TempFilesBelowRoot().empty());
}

TEST_F(LocalStoreTest, PutLeavesNoTemporaryFiles) {
  ASSERT_OK(store_->Put("a/b", Buf("one")));
  ASSERT_OK(store_->Put("a/b", Buf("two")));
  EXPECT_TRUE(TempFilesBelowRoot().empty());
}

TEST_F(LocalStoreTest, ListChildrenOfMissingFolderIsEmpty) {
  ASSERT_OK_AND_ASSIGN(auto children, store_->ListChildren("nothing/here/"));
  EXPECT_TRUE(children.empty());
}

TEST_F(LocalStoreTest, DeletePrefixWithoutTrailingSlashIsInvalid) {
  ASSERT_OK(store_->Put("t/a/1", Buf("x")));
  EXPECT_TRUE(IsInvalid(store_->DeletePrefix("t/a"), "t/a"));
  EXPECT_EQ(ReadFile("t/a/1"), "x");
}

TEST_F(LocalStoreTest, DeletePrefixRemovesTheFolder) {
  ASSERT_OK(store_->Put("ns/t/_delta_log/0.json", Buf("x")));
  ASSERT_OK(store_->DeletePrefix("ns/t/"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/ns/t"));
}

TEST_F(LocalStoreTest, ExternalPathIsAnAbsoluteFilePath) {
  EXPECT_EQ(store_->ExternalPath("ns/t/data/x.parquet"), dir_.path() + "/ns/t/data/x.parquet");
}

TEST_F(LocalStoreTest, RootUrlIsAFileUrlWithoutTrailingSlash) {
  EXPECT_EQ(store_->RootUrl(), "file://" + dir_.path());
  ASSERT_OK_AND_ASSIGN(auto with_slash, LocalStore::Make(dir_.path() + "/"));
  EXPECT_EQ(with_slash->RootUrl(), "file://" + dir_.path());
}

TEST_F(LocalStoreTest, OpenInputOfMissingObjectIsNotFound) {
  EXPECT_TRUE(IsMissing(store_->OpenInput("absent.parquet")));
}

// --- failures that are not "missing": never an empty listing or NotFound ---------------------
// (Tests run as root, where permissions do not deny; a symlink loop and a file where a folder
// should be fail the same code paths for any user. tests/python/test_damage.py covers EACCES.)

TEST_F(LocalStoreTest, ListOfAMissingFolderIsEmpty) {
  ASSERT_OK_AND_ASSIGN(auto listing, store_->List("ns/t/_delta_log/"));
  EXPECT_TRUE(listing.empty());
}

TEST_F(LocalStoreTest, ListThroughASymlinkLoopIsIOErrorNamingThePath) {
  fs::create_directories(dir_.path() + "/ns/t");
  fs::create_directory_symlink(dir_.path() + "/ns/t/_delta_log", dir_.path() + "/ns/t/_delta_log");
  EXPECT_TRUE(FailsWith(store_->List("ns/t/_delta_log/"), arrow::StatusCode::IOError,
                        dir_.path() + "/ns/t/_delta_log"));
}

TEST_F(LocalStoreTest, ListWhereAFileStandsForTheFolderIsIOError) {
  WriteFile("ns/t/_delta_log", "not a folder");
  auto listing = store_->List("ns/t/_delta_log/");
  EXPECT_TRUE(FailsWith(listing, arrow::StatusCode::IOError, "ns/t/_delta_log"));
  EXPECT_FALSE(IsNotFound(listing.status()));
}

TEST_F(LocalStoreTest, ListChildrenWhereAFileStandsForTheFolderIsIOError) {
  WriteFile("ns", "not a folder");
  EXPECT_TRUE(FailsWith(store_->ListChildren("ns/"), arrow::StatusCode::IOError, "ns"));
}

TEST_F(LocalStoreTest, ListChildrenThroughASymlinkLoopIsIOError) {
  fs::create_directory_symlink(dir_.path() + "/loop", dir_.path() + "/loop");
  EXPECT_TRUE(FailsWith(store_->ListChildren("loop/"), arrow::StatusCode::IOError, "loop"));
  // In a listing of its parent the loop is an entry that cannot be stat'ed: an error too.
  EXPECT_TRUE(FailsWith(store_->ListChildren(""), arrow::StatusCode::IOError, "loop"));
}

TEST_F(LocalStoreTest, GetAndOpenInputThroughASymlinkLoopAreIOErrorsNotNotFound) {
  fs::create_symlink(dir_.path() + "/x.parquet", dir_.path() + "/x.parquet");
  auto got = store_->Get("x.parquet");
  EXPECT_TRUE(FailsWith(got, arrow::StatusCode::IOError, "x.parquet"));
  EXPECT_FALSE(IsNotFound(got.status()));
  auto opened = store_->OpenInput("x.parquet");
  EXPECT_TRUE(FailsWith(opened, arrow::StatusCode::IOError, "x.parquet"));
  EXPECT_FALSE(IsNotFound(opened.status()));
}

TEST_F(LocalStoreTest, ListSkipsDanglingSymlinksAndFollowsLinkedFiles) {
  WriteFile("t/real", "x");
  fs::create_symlink(dir_.path() + "/t/real", dir_.path() + "/t/linked");
  fs::create_symlink(dir_.path() + "/t/gone", dir_.path() + "/t/dangling");
  ASSERT_OK_AND_ASSIGN(auto listing, store_->List("t/"));
  ASSERT_EQ(listing.size(), 2u);
  EXPECT_EQ(listing[0].path, "t/linked");
  EXPECT_EQ(listing[1].path, "t/real");
}

TEST_F(LocalStoreTest, ListDescendsOnlyWhereThePrefixCanMatch) {
  WriteFile("ns/a/data/x", "1");
  WriteFile("ns/ab/data/y", "2");
  WriteFile("ns/b/data/z", "3");
  ASSERT_OK_AND_ASSIGN(auto listing, store_->List("ns/a"));
  ASSERT_EQ(listing.size(), 2u);
  EXPECT_EQ(listing[0].path, "ns/a/data/x");
  EXPECT_EQ(listing[1].path, "ns/ab/data/y");
}

// --- listing after a key: entries before it are never stat'ed ---------------------------------

TEST_F(LocalStoreTest, ListAfterNeverTouchesEntriesUpToTheKey) {
  // An entry that cannot be stat'ed (a symlink loop) fails any listing that reaches it; one after
  // the key does, one before it does not.
  WriteFile("t/_delta_log/00000000000000000005.json", "{}");
  WriteFile("t/_delta_log/00000000000000000006.json", "{}");
  fs::create_symlink(dir_.path() + "/t/_delta_log/00000000000000000001.json",
                     dir_.path() + "/t/_delta_log/00000000000000000001.json");
  EXPECT_FALSE(store_->List("t/_delta_log/").ok());
  ASSERT_OK_AND_ASSIGN(auto listing,
                       store_->ListAfter("t/_delta_log/", "t/_delta_log/00000000000000000004"));
  ASSERT_EQ(listing.size(), 2u);
  EXPECT_EQ(listing[0].path, "t/_delta_log/00000000000000000005.json");
  ASSERT_OK_AND_ASSIGN(auto page, store_->ListPage({"t/_delta_log/",
                                                    "t/_delta_log/00000000000000000004", "", 1}));
  ASSERT_EQ(page.objects.size(), 1u);
  EXPECT_EQ(page.objects[0].path, "t/_delta_log/00000000000000000005.json");
  EXPECT_EQ(page.continuation, page.objects[0].path);
}

TEST_F(LocalStoreTest, ListAfterSkipsWholeFoldersBeforeTheKey) {
  WriteFile("t/data/2025-01-02/a.parquet", "x");
  fs::create_directory_symlink(dir_.path() + "/t/data/2025-01-01",
                               dir_.path() + "/t/data/2025-01-01");
  ASSERT_OK_AND_ASSIGN(auto listing, store_->ListAfter("t/data/", "t/data/2025-01-01/~"));
  ASSERT_EQ(listing.size(), 1u);
  EXPECT_EQ(listing[0].path, "t/data/2025-01-02/a.parquet");
}

TEST_F(LocalStoreTest, ListAfterInALargeLogFolderReturnsTheTail) {
  char name[64];
  for (int v = 0; v < 3000; ++v) {
    std::snprintf(name, sizeof(name), "t/_delta_log/%020d.json", v);
    WriteFile(name, "{}");
  }
  std::snprintf(name, sizeof(name), "t/_delta_log/%020d.json", 2990);
  ASSERT_OK_AND_ASSIGN(auto tail, store_->ListAfter("t/_delta_log/", name));
  ASSERT_EQ(tail.size(), 9u);
  std::snprintf(name, sizeof(name), "t/_delta_log/%020d.json", 2991);
  EXPECT_EQ(tail.front().path, name);
  ASSERT_OK_AND_ASSIGN(auto all, store_->List("t/_delta_log/"));
  EXPECT_EQ(all.size(), 3000u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end(),
                             [](const auto& a, const auto& b) { return a.path < b.path; }));
}

// --- writes that leave nothing behind ----------------------------------------------------------

TEST_F(LocalStoreTest, AbortedStreamLeavesNoTemporaryFile) {
  ASSERT_OK_AND_ASSIGN(auto out, store_->OpenOutput("t/data/x.parquet"));
  ASSERT_OK(out->Write("partial", 7));
  EXPECT_EQ(TempFilesBelowRoot().size(), 1u);
  ASSERT_OK(out->Abort());
  EXPECT_TRUE(TempFilesBelowRoot().empty());
  EXPECT_FALSE(fs::exists(dir_.path() + "/t/data/x.parquet"));
}

TEST_F(LocalStoreTest, PutIfMatchLeavesNoTemporaryFilesWhetherItWinsOrNot) {
  ASSERT_OK(store_->Put("i/base", Buf("v1")));
  ASSERT_OK_AND_ASSIGN(auto meta, store_->Head("i/base"));
  ASSERT_OK_AND_ASSIGN(bool won, store_->PutIfMatch("i/base", Buf("v2"), meta.etag));
  ASSERT_OK_AND_ASSIGN(bool lost, store_->PutIfMatch("i/base", Buf("v3"), meta.etag));
  EXPECT_TRUE(won);
  EXPECT_FALSE(lost);
  EXPECT_TRUE(TempFilesBelowRoot().empty());
  EXPECT_EQ(ReadFile("i/base"), "v2");
}

TEST_F(LocalStoreTest, AStagedPutIsALinkThatMayTryOneNameAfterAnother) {
  // A commit's bytes are written before its version is known; each try links them under the
  // next name, and a lost one keeps them for the next.
  ASSERT_OK(store_->PutIfAbsent("t/_delta_log/1.json", Buf("theirs")));
  ASSERT_OK_AND_ASSIGN(auto staged, store_->Stage("t/_delta_log/1.json", Buf("mine")));
  EXPECT_EQ(TempFilesBelowRoot().size(), 1u) << "staging writes the bytes into the folder";
  int seen = 0;
  ASSERT_OK_AND_ASSIGN(bool first, store_->PutStagedIfAbsent("t/_delta_log/1.json", staged.get(), [&] { ++seen; }));
  EXPECT_FALSE(first);
  EXPECT_EQ(ReadFile("t/_delta_log/1.json"), "theirs");
  EXPECT_EQ(TempFilesBelowRoot().size(), 1u) << "a lost try keeps the staged bytes";
  ASSERT_OK_AND_ASSIGN(bool second, store_->PutStagedIfAbsent("t/_delta_log/2.json", staged.get(), [&] { ++seen; }));
  EXPECT_TRUE(second);
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(ReadFile("t/_delta_log/2.json"), "mine");
  EXPECT_TRUE(TempFilesBelowRoot().empty());
  // Published bytes stay published when the staged object goes.
  staged.reset();
  EXPECT_EQ(ReadFile("t/_delta_log/2.json"), "mine");
}

TEST_F(LocalStoreTest, StagedBytesNeverPutLeaveNothingBehind) {
  ASSERT_OK_AND_ASSIGN(auto staged, store_->Stage("t/_delta_log/1.json", Buf("mine")));
  EXPECT_EQ(TempFilesBelowRoot().size(), 1u);
  staged.reset();
  EXPECT_TRUE(TempFilesBelowRoot().empty());
  EXPECT_FALSE(fs::exists(dir_.path() + "/t/_delta_log/1.json"));
}

TEST_F(LocalStoreTest, AStagedPutIntoAnotherFolderWritesTheBytesThere) {
  ASSERT_OK_AND_ASSIGN(auto staged, store_->Stage("t/_delta_log/1.json", Buf("mine")));
  ASSERT_OK_AND_ASSIGN(bool put, store_->PutStagedIfAbsent("u/_delta_log/1.json", staged.get(), [] {}));
  EXPECT_TRUE(put);
  EXPECT_EQ(ReadFile("u/_delta_log/1.json"), "mine");
  staged.reset();
  EXPECT_TRUE(TempFilesBelowRoot().empty());
}

TEST_F(LocalStoreTest, AbandonedTemporaryFilesOlderThanTheCutoffAreDeleted) {
  // What a writer killed between staging its commit and linking it leaves behind.
  WriteFile("t/_delta_log/.tmp-old", "{}");
  WriteFile("t/data/2025-01-01/.tmp-old", "x");
  WriteFile("t/_delta_log/.tmp-new", "{}");
  WriteFile("t/_delta_log/00000000000000000000.json", "{}");
  WriteFile("u/_delta_log/.tmp-other-table", "{}");
  const auto hour_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(dir_.path() + "/t/_delta_log/.tmp-old", hour_ago);
  fs::last_write_time(dir_.path() + "/t/data/2025-01-01/.tmp-old", hour_ago);
  fs::last_write_time(dir_.path() + "/t/_delta_log/00000000000000000000.json", hour_ago);
  fs::last_write_time(dir_.path() + "/u/_delta_log/.tmp-other-table", hour_ago);
  ASSERT_OK_AND_ASSIGN(int64_t deleted,
                       store_->DeleteAbandonedTemporaries("t/", NowMillis() - 3600 * 1000));
  EXPECT_EQ(deleted, 2);
  EXPECT_FALSE(fs::exists(dir_.path() + "/t/_delta_log/.tmp-old"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/t/data/2025-01-01/.tmp-old"));
  EXPECT_TRUE(fs::exists(dir_.path() + "/t/_delta_log/.tmp-new")) << "maybe a live writer's";
  EXPECT_TRUE(fs::exists(dir_.path() + "/t/_delta_log/00000000000000000000.json"));
  EXPECT_TRUE(fs::exists(dir_.path() + "/u/_delta_log/.tmp-other-table")) << "another table's";
  ASSERT_OK_AND_ASSIGN(int64_t none, store_->DeleteAbandonedTemporaries("gone/", NowMillis()));
  EXPECT_EQ(none, 0);
  EXPECT_FALSE(store_->DeleteAbandonedTemporaries("t", NowMillis()).ok());
}

TEST_F(LocalStoreTest, FileRewrittenInPlaceByAnotherProgramChangesItsTag) {
  ASSERT_OK(store_->Put("i/base", Buf("v1")));
  ASSERT_OK_AND_ASSIGN(auto before, store_->Head("i/base"));
  WriteFile("i/base", "other program's bytes");
  ASSERT_OK_AND_ASSIGN(auto after, store_->Head("i/base"));
  EXPECT_NE(before.etag, after.etag);
  ASSERT_OK_AND_ASSIGN(bool replaced, store_->PutIfMatch("i/base", Buf("v2"), before.etag));
  EXPECT_FALSE(replaced);
}

// Processes, not threads: the folder lock must hold between separate LocalStores too.
TEST_F(LocalStoreTest, PutIfMatchLosesNoUpdateAcrossProcesses) {
  constexpr int kProcesses = 4;
  constexpr int kIncrements = 20;
  ASSERT_OK(store_->Put("counter", Buf("0")));
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto own = LocalStore::Make(dir_.path());
      if (!own.ok()) ::_exit(2);
      for (int i = 0; i < kIncrements; ++i) {
        if (!IncrementByCompareAndSwap(own->get(), "counter").ok()) ::_exit(3);
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  EXPECT_EQ(ReadFile("counter"), std::to_string(kProcesses * kIncrements));
}

// LockExclusive: one holder at a time across processes; never made outside an existing folder;
// released for good when the holder lets go, even if a child forked meanwhile still has the file
// descriptor (flock locks belong to the shared open file description).
// A lake's store (fixed_depth 2: <namespace>/<table>/): only MakeFolders makes a table's folder,
// so a write of a handle whose table was dropped fails NotFound instead of bringing it back.
TEST_F(LocalStoreTest, WritesNeverMakeTheFixedLevels) {
  ASSERT_OK_AND_ASSIGN(auto lake, LocalStore::Make(dir_.path(), /*fixed_depth=*/2));
  auto missing_everywhere = [&](const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_TRUE(IsNotFound(lake->Put("ns/t/_delta_log/00.json", Buf("{}\n"))));
    auto absent = lake->PutIfAbsent("ns/t/_delta_log/01.json", Buf("{}\n"));
    EXPECT_TRUE(IsNotFound(absent.status()));
    auto output = lake->OpenOutput("ns/t/data/day=1/part-0.parquet");
    EXPECT_TRUE(IsNotFound(output.status()));
    ASSERT_OK_AND_ASSIGN(auto lock, lake->LockExclusive("ns/t/_timelake/commit.lock", 10));
    EXPECT_EQ(lock, nullptr);
    EXPECT_FALSE(fs::exists(dir_.path() + "/ns/t"));
  };
  missing_everywhere("before create");
  // The namespace may exist: the table level is still not made.
  ASSERT_OK(lake->MakeFolders("ns/"));
  missing_everywhere("namespace only");
  EXPECT_TRUE(IsInvalid(lake->MakeFolders("ns/t"), "ending in '/'"));

  ASSERT_OK(lake->MakeFolders("ns/t/_delta_log/"));
  ASSERT_OK_AND_ASSIGN(bool won, lake->PutIfAbsent("ns/t/_delta_log/00.json", Buf("{}\n")));
  EXPECT_TRUE(won);
  // Below the table's folder, writes make what they need.
  ASSERT_OK_AND_ASSIGN(auto output, lake->OpenOutput("ns/t/data/day=1/part-0.parquet"));
  ASSERT_OK(output->Write("x", 1));
  ASSERT_OK(output->Close());
  ASSERT_OK(lake->Put("ns/t/_timelake/lvi/id/record", Buf("r")));
  ASSERT_OK(lake->Put("ns/top-level-file", Buf("f")));  // a file in an existing fixed folder
  EXPECT_EQ(ReadFile("ns/t/data/day=1/part-0.parquet"), "x");

  // Dropped: renamed away. Nothing brings it back.
  ASSERT_OK(lake->RenamePrefix("ns/t/", "ns/_dropped-1/"));
  missing_everywhere("after the drop");
  EXPECT_TRUE(fs::exists(dir_.path() + "/ns/_dropped-1/data/day=1/part-0.parquet"));
}

TEST_F(LocalStoreTest, InPlaceOutputWritesItsFinalNameAndAbortRemovesIt) {
  OutputOptions in_place;
  in_place.in_place = true;
  ASSERT_OK_AND_ASSIGN(auto output, store_->OpenOutput("t/data/part-1.parquet", in_place));
  ASSERT_OK(output->Write(std::string(100 << 10, 'x').data(), 100 << 10));
  EXPECT_TRUE(fs::exists(dir_.path() + "/t/data/part-1.parquet"));  // visible while written
  EXPECT_TRUE(TempFilesBelowRoot().empty());
  ASSERT_OK(output->Close());
  ASSERT_OK_AND_ASSIGN(auto meta, store_->Head("t/data/part-1.parquet"));
  EXPECT_EQ(meta.size, 100 << 10);
  // Never over an existing object, which stays as it was.
  EXPECT_FALSE(store_->OpenOutput("t/data/part-1.parquet", in_place).ok());
  ASSERT_OK_AND_ASSIGN(auto again, store_->Head("t/data/part-1.parquet"));
  EXPECT_EQ(again.etag, meta.etag);
  ASSERT_OK_AND_ASSIGN(auto aborted, store_->OpenOutput("t/data/part-2.parquet", in_place));
  ASSERT_OK(aborted->Write("abc", 3));
  ASSERT_OK(aborted->Abort());
  EXPECT_FALSE(fs::exists(dir_.path() + "/t/data/part-2.parquet"));
  {
    ASSERT_OK_AND_ASSIGN(auto dropped, store_->OpenOutput("t/data/part-3.parquet", in_place));
    ASSERT_OK(dropped->Write("abc", 3));
  }  // destroyed unclosed: aborted
  EXPECT_FALSE(fs::exists(dir_.path() + "/t/data/part-3.parquet"));
}

// The fsyncs of an in-place output run after its Close; the store's next put waits for them. A
// folder renamed away meanwhile (a dropped table) is no failure of theirs.
TEST_F(LocalStoreTest, InPlaceSyncsOutliveARenameOfTheirFolder) {
  OutputOptions in_place;
  in_place.in_place = true;
  for (int i = 0; i < 20; ++i) {
    const std::string table = "t" + std::to_string(i) + "/";
    ASSERT_OK_AND_ASSIGN(auto output, store_->OpenOutput(table + "data/part-0.parquet", in_place));
    ASSERT_OK(output->Write("abc", 3));
    ASSERT_OK(output->Close());
    ASSERT_OK(store_->RenamePrefix(table, "dropped-" + table));
    ASSERT_OK_AND_ASSIGN(bool won, store_->PutIfAbsent("log/" + std::to_string(i), Buf("x")));
    EXPECT_TRUE(won);
    ASSERT_OK(store_->Put("log/put-" + std::to_string(i), Buf("y")));
  }
  // Closing into a folder that is already gone fails, and makes nothing where it was (the
  // partial file went with the folder).
  ASSERT_OK_AND_ASSIGN(auto late, store_->OpenOutput("u/data/part-0.parquet", in_place));
  ASSERT_OK(late->Write("abc", 3));
  ASSERT_OK(store_->RenamePrefix("u/", "dropped-u/"));
  EXPECT_FALSE(late->Close().ok());
  EXPECT_FALSE(fs::exists(dir_.path() + "/u"));
  ASSERT_OK(store_->Put("log/after", Buf("z")));
}

TEST_F(LocalStoreTest, PutDerivedReplacesWholeAndLeavesNoTemporaryFile) {
  ASSERT_OK(store_->PutDerived("t/_timelake/lvi/id/1.parquet", Buf("first")));
  ASSERT_OK(store_->PutDerived("t/_timelake/lvi/id/1.parquet", Buf("second")));
  EXPECT_EQ(ReadFile("t/_timelake/lvi/id/1.parquet"), "second");
  EXPECT_TRUE(TempFilesBelowRoot().empty());
  ASSERT_OK_AND_ASSIGN(auto lake, LocalStore::Make(dir_.path(), /*fixed_depth=*/2));
  EXPECT_TRUE(IsNotFound(lake->PutDerived("ns/gone/_timelake/lvi/id/1.parquet", Buf("x"))));
}

// A committer lets the next writer go at `visible`: by then the object must be readable, and it
// is called for a refused put too (the outcome is decided), never for a failed one.
TEST_F(LocalStoreTest, PutIfAbsentVisibleCallsBackOnceTheOutcomeIsSeen) {
  int calls = 0;
  bool seen = false;
  ASSERT_OK_AND_ASSIGN(bool won, store_->PutIfAbsentVisible("t/_delta_log/0.json", Buf("{}"), [&] {
    ++calls;
    seen = store_->Head("t/_delta_log/0.json").ok();
  }));
  EXPECT_TRUE(won);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(seen);
  ASSERT_OK_AND_ASSIGN(bool again, store_->PutIfAbsentVisible("t/_delta_log/0.json", Buf("[]"),
                                                               [&] { ++calls; }));
  EXPECT_FALSE(again);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(ReadFile("t/_delta_log/0.json"), "{}");
  EXPECT_TRUE(TempFilesBelowRoot().empty());
  ASSERT_OK_AND_ASSIGN(auto lake, LocalStore::Make(dir_.path(), /*fixed_depth=*/2));
  EXPECT_TRUE(IsNotFound(
      lake->PutIfAbsentVisible("ns/gone/_delta_log/0.json", Buf("{}"), [&] { ++calls; }).status()));
  EXPECT_EQ(calls, 2);
}

TEST_F(LocalStoreTest, LockExclusiveExcludesOtherProcessesAndSurvivesAFork) {
  WriteFile("t/marker", "x");
  ASSERT_OK_AND_ASSIGN(auto missing, store_->LockExclusive("gone/_timelake/commit.lock", 1000));
  EXPECT_EQ(missing, nullptr);
  EXPECT_FALSE(fs::exists(dir_.path() + "/gone"));
  ASSERT_OK_AND_ASSIGN(auto held, store_->LockExclusive("t/_timelake/commit.lock", 1000));
  ASSERT_NE(held, nullptr);
  // Another holder's wait is bounded: then it goes on without the lock.
  const auto before = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(auto waited, store_->LockExclusive("t/_timelake/commit.lock", 50));
  EXPECT_EQ(waited, nullptr);
  EXPECT_GE(std::chrono::steady_clock::now() - before, std::chrono::milliseconds(50));
  // Another process cannot take it while it is held.
  const pid_t prober = fork();
  if (prober == 0) {
    auto store = LocalStore::Make(dir_.path()).ValueOrDie();
    const std::string lock = dir_.path() + "/t/_timelake/commit.lock";
    const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
    _exit(fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(prober, &status, 0), prober);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // A child forked while the lock is held keeps a copy of its descriptor, and sleeps.
  const pid_t sleeper = fork();
  if (sleeper == 0) {
    ::sleep(30);
    _exit(0);
  }
  held.reset();
  // The lock is free at once, not when the child exits.
  const pid_t taker = fork();
  if (taker == 0) {
    const std::string lock = dir_.path() + "/t/_timelake/commit.lock";
    const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
    _exit(fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : 1);
  }
  ASSERT_EQ(waitpid(taker, &status, 0), taker);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::kill(sleeper, SIGKILL);
  ASSERT_EQ(waitpid(sleeper, &status, 0), sleeper);
}

// --- failing fsyncs (an injected SyncFunction: the disk reports EIO for chosen paths) ----------

// A SyncFunction that fails (EIO) the paths for which `fails` says so and fsyncs the others.
LocalStore::SyncFunction FailingSync(std::function<bool(const std::string&)> fails,
                                     std::atomic<int>* failures) {
  return [fails = std::move(fails), failures](int fd, const std::string& path) {
    if (fails(path)) {
      ++*failures;
      errno = EIO;
      return -1;
    }
    return ::fsync(fd);
  };
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// An in-place data file's fsync runs after its Close returned: its failure must fail the commit
// that would name it, and stay: a put of another table, which does not wait for this table's
// syncs, must not make the store forget it, and every later put fails.
TEST_F(LocalStoreTest, AFailedDeferredSyncFailsTheNextPutsAndIsNeverForgotten) {
  std::atomic<int> failures{0};
  ASSERT_OK_AND_ASSIGN(
      auto store,
      LocalStore::Make(dir_.path(), /*fixed_depth=*/2,
                       FailingSync([](const std::string& p) { return EndsWith(p, "/bad.parquet"); },
                                   &failures)));
  ASSERT_OK(store->MakeFolders("ns/t/"));
  ASSERT_OK(store->MakeFolders("ns/u/"));
  OutputOptions in_place;
  in_place.in_place = true;
  ASSERT_OK_AND_ASSIGN(auto output, store->OpenOutput("ns/t/data/bad.parquet", in_place));
  ASSERT_OK(output->Write("abc", 3));
  ASSERT_OK(output->Close());  // the fsync runs after Close
  // Let the failed sync finish before another table's put looks at the queue.
  while (failures.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Another table's put does not wait for this table's data files.
  ASSERT_OK(store->Put("ns/u/_delta_log/0.json", Buf("{}")));
  auto committed = store->PutIfAbsent("ns/t/_delta_log/0.json", Buf("{}"));
  ASSERT_FALSE(committed.ok()) << "a commit naming a file that is not durable was published";
  EXPECT_NE(committed.status().message().find("could not be made durable"), std::string::npos)
      << committed.status().ToString();
  EXPECT_NE(committed.status().message().find("bad.parquet"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_.path() + "/ns/t/_delta_log/0.json"));
  // Sticky: the disk may have dropped pages, so nothing more is written through this store.
  EXPECT_FALSE(store->Put("ns/u/_delta_log/1.json", Buf("{}")).ok());
  EXPECT_FALSE(store->PutIfAbsent("ns/u/_delta_log/1.json", Buf("{}")).ok());
  EXPECT_FALSE(fs::exists(dir_.path() + "/ns/u/_delta_log/1.json"));
  EXPECT_TRUE(TempFilesBelowRoot().empty());
}

TEST_F(LocalStoreTest, StagingWaitsForTheDataFilesClosedBeforeIt) {
  // A commit names data files whose fsyncs run after their Close: staging it waits for them, so
  // that the put under the commit turn does not; a failed one fails the staging.
  std::atomic<int> failures{0};
  ASSERT_OK_AND_ASSIGN(
      auto store,
      LocalStore::Make(dir_.path(), /*fixed_depth=*/2,
                       FailingSync([](const std::string& p) { return EndsWith(p, "/bad.parquet"); },
                                   &failures)));
  ASSERT_OK(store->MakeFolders("ns/t/"));
  OutputOptions in_place;
  in_place.in_place = true;
  ASSERT_OK_AND_ASSIGN(auto output, store->OpenOutput("ns/t/data/bad.parquet", in_place));
  ASSERT_OK(output->Write("abc", 3));
  ASSERT_OK(output->Close());
  auto staged = store->Stage("ns/t/_delta_log/0.json", Buf("{}"));
  ASSERT_FALSE(staged.ok()) << "bytes naming a file that is not durable were staged";
  EXPECT_NE(staged.status().message().find("bad.parquet"), std::string::npos) << staged.status().ToString();
  EXPECT_EQ(failures.load(), 1);
  EXPECT_TRUE(TempFilesBelowRoot().empty());
}

// The commit is linked (visible) before its folder's fsync: a failed fsync then is neither a
// success nor a clean failure.
TEST_F(LocalStoreTest, AFolderSyncFailingAfterTheLinkIsNotDurableAndFailsLaterPuts) {
  std::atomic<int> failures{0};
  const std::string log_dir = dir_.path() + "/t/_delta_log";
  ASSERT_OK_AND_ASSIGN(
      auto store,
      LocalStore::Make(dir_.path(), /*fixed_depth=*/0,
                       FailingSync([&](const std::string& p) { return p == log_dir; }, &failures)));
  int visible = 0;
  auto put = store->PutIfAbsentVisible("t/_delta_log/0.json", Buf("{}"), [&] { ++visible; });
  ASSERT_FALSE(put.ok());
  EXPECT_TRUE(IsNotDurable(put.status())) << put.status().ToString();
  EXPECT_EQ(visible, 1);
  EXPECT_EQ(ReadFile("t/_delta_log/0.json"), "{}") << "linked before the fsync";
  EXPECT_FALSE(store->Put("t/other", Buf("x")).ok());
  EXPECT_FALSE(fs::exists(dir_.path() + "/t/other"));
  EXPECT_TRUE(TempFilesBelowRoot().empty());
}

// Every other write publishes only what its fsyncs made durable.
TEST_F(LocalStoreTest, WritesWhoseFsyncFailsPublishNothing) {
  std::atomic<int> failures{0};
  ASSERT_OK_AND_ASSIGN(
      auto store,
      LocalStore::Make(dir_.path(), /*fixed_depth=*/0,
                       FailingSync([](const std::string& p) { return p.find("/.tmp-") != p.npos; },
                                   &failures)));
  ASSERT_OK_AND_ASSIGN(auto output, store->OpenOutput("t/data/part.parquet"));
  ASSERT_OK(output->Write("abc", 3));
  EXPECT_FALSE(output->Close().ok());
  EXPECT_FALSE(store->Put("t/a", Buf("x")).ok());
  EXPECT_FALSE(store->PutIfAbsent("t/b", Buf("x")).ok());
  EXPECT_EQ(failures.load(), 3);
  EXPECT_FALSE(fs::exists(dir_.path() + "/t/data/part.parquet"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/t/a"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/t/b"));
  EXPECT_TRUE(TempFilesBelowRoot().empty());
}

int ThreadsOfThisProcess() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// The fsync workers belong to the store (its Lake's), not to the process: once the store and its
// outputs are gone, every deferred sync has run and no worker is left.
TEST_F(LocalStoreTest, AStoreGoingAwayRunsItsDeferredSyncsAndJoinsItsWorkers) {
  const int before = ThreadsOfThisProcess();
  std::atomic<int> synced{0};
  {
    auto counted = [&](int fd, const std::string&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ++synced;
      return ::fsync(fd);
    };
    ASSERT_OK_AND_ASSIGN(auto store, LocalStore::Make(dir_.path(), /*fixed_depth=*/0, counted));
    OutputOptions in_place;
    in_place.in_place = true;
    for (int i = 0; i < 8; ++i) {
      ASSERT_OK_AND_ASSIGN(auto output,
                           store->OpenOutput("t/data/part-" + std::to_string(i), in_place));
      ASSERT_OK(output->Write("abc", 3));
      ASSERT_OK(output->Close());  // the file's and the folder's fsyncs go to the workers
    }
    EXPECT_GT(ThreadsOfThisProcess(), before) << "no worker ran the deferred syncs";
  }
  EXPECT_EQ(synced.load(), 16);
  EXPECT_EQ(ThreadsOfThisProcess(), before);
}

// A failed deferred sync is recorded for good, in a child fork()ed afterwards too (which keeps
// none of its parent's workers or queued syncs).
TEST_F(LocalStoreTest, AChildForkedAfterASyncFailedStillRefusesToWrite) {
  std::atomic<int> failures{0};
  ASSERT_OK_AND_ASSIGN(
      auto store,
      LocalStore::Make(dir_.path(), /*fixed_depth=*/0,
                       FailingSync([](const std::string& p) { return EndsWith(p, "/bad.parquet"); },
                                   &failures)));
  OutputOptions in_place;
  in_place.in_place = true;
  ASSERT_OK_AND_ASSIGN(auto output, store->OpenOutput("t/data/bad.parquet", in_place));
  ASSERT_OK(output->Write("abc", 3));
  ASSERT_OK(output->Close());
  ASSERT_FALSE(store->Put("t/_delta_log/0.json", Buf("{}")).ok());  // waits for the failed sync
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(120);
    auto put = store->Put("t/_delta_log/1.json", Buf("{}"));
    const bool refused =
        !put.ok() && put.message().find("could not be made durable") != std::string::npos;
    _exit(refused && !fs::exists(dir_.path() + "/t/_delta_log/1.json") ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

// Deferred fsyncs run on a few worker threads of the store. A child fork()ed while other threads
// close files and wait for syncs (Python's multiprocessing forks at any moment) gets no workers
// and no queued jobs: its own writes must start workers of their own and never wait for
// the parent's syncs, nor hang on a lock a parent thread held at the fork.
TEST_F(LocalStoreTest, AChildForkedWhileSyncsRunWritesWithWorkersOfItsOwn) {
  auto slow = [](int fd, const std::string&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // queued jobs at every fork
    return ::fsync(fd);
  };
  ASSERT_OK_AND_ASSIGN(auto store, LocalStore::Make(dir_.path(), /*fixed_depth=*/0, slow));
  OutputOptions in_place;
  in_place.in_place = true;
  // One write first, as any process that has a lake open has made: the one-time set-ups of the
  // libraries below (allocators, the random generator) are not what this test forks into.
  ASSERT_OK(store->Put("t/log/first", Buf("x")));
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; !stop; ++i) {
        const std::string name = "t/data/w" + std::to_string(w) + "-" + std::to_string(i);
        auto output = store->OpenOutput(name, in_place);
        if (!output.ok() || !(*output)->Write("abc", 3).ok() || !(*output)->Close().ok()) return;
        if (!store->Put("t/log/w" + std::to_string(w) + "-" + std::to_string(i), Buf("x")).ok()) {
          return;
        }
        ++written;
      }
    });
  }
  for (int child = 0; child < 20; ++child) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(120);  // a hang is a failure, not a stuck test run
      const std::string name = "t/data/child-" + std::to_string(child);
      auto output = store->OpenOutput(name, in_place);
      const bool ok = output.ok() && (*output)->Write("abc", 3).ok() && (*output)->Close().ok() &&
                      store->Put("t/log/child-" + std::to_string(child), Buf("y")).ok();
      _exit(ok ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << child;
    EXPECT_TRUE(fs::exists(dir_.path() + "/t/log/child-" + std::to_string(child)));
  }
  stop = true;
  for (auto& t : writers) t.join();
  EXPECT_GT(written.load(), 0);
}

}  // namespace
}  // namespace timelake::testing
