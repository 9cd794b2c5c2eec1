// LocalStore: the ObjectStore contract over a temporary directory, plus what only a file system
// store does (temporary files, absolute paths other engines can open).
#include "timelake/store/local_store.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "store_contract.h"
#include "test_util.h"

namespace timelake::testing {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "timelake-test-XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) std::abort();
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

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

}  // namespace
}  // namespace timelake::testing
