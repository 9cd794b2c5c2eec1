// The LocalFiles implementations (store/local_files.h) under test, each over a fresh root:
// LocalStore's (PosixFiles, in a temporary folder) and a machine-local MemoryStore's.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include <filesystem>
#include <memory>
#include <string>

#include <arrow/buffer.h>
#include <gtest/gtest.h>

#include "temp_dir.h"
#include "timelake/store/local_store.h"
#include "timelake/store/memory_store.h"

namespace timelake::testing {

class FilesUnderTest {
 public:
  virtual ~FilesUnderTest() = default;
  virtual std::shared_ptr<LocalFiles> files() = 0;
  /// Makes the folder `folder` (relative to the root), as a table's folder is there.
  virtual void MakeFolder(const std::string& folder) = 0;
  /// Moves the last write of the file `path` `ms` back.
  virtual void AgeFile(const std::string& path, int64_t ms) = 0;
};

class PosixFilesUnderTest : public FilesUnderTest {
 public:
  std::shared_ptr<LocalFiles> files() override { return store_->AsLocalFiles(); }
  void MakeFolder(const std::string& folder) override {
    std::filesystem::create_directories(dir_.path() + "/" + folder);
  }
  void AgeFile(const std::string& path, int64_t ms) override {
    struct timespec times[2];
    ::clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= ms / 1000;
    times[1] = times[0];
    ASSERT_EQ(::utimensat(AT_FDCWD, (dir_.path() + "/" + path).c_str(), times, 0), 0) << path;
  }

 private:
  TempDir dir_;
  std::shared_ptr<LocalStore> store_ = LocalStore::Make(dir_.path()).ValueOrDie();
};

class MemoryFilesUnderTest : public FilesUnderTest {
 public:
  std::shared_ptr<LocalFiles> files() override { return store_->AsLocalFiles(); }
  void MakeFolder(const std::string& folder) override {
    // A folder of a MemoryStore is where its objects are.
    ASSERT_TRUE(store_->Put(folder + "/object", arrow::Buffer::FromString("x")).ok());
  }
  void AgeFile(const std::string& path, int64_t ms) override {
    ASSERT_TRUE(store_->files()->Age(path, ms).ok()) << path;
  }

 private:
  std::shared_ptr<MemoryStore> store_ =
      std::make_shared<MemoryStore>("files", /*machine_local=*/true);
};

/// The parameter of suites run over every implementation.
using FilesFactory = std::unique_ptr<FilesUnderTest> (*)();

inline std::unique_ptr<FilesUnderTest> PosixFilesForTest() {
  return std::make_unique<PosixFilesUnderTest>();
}
inline std::unique_ptr<FilesUnderTest> MemoryFilesForTest() {
  return std::make_unique<MemoryFilesUnderTest>();
}

/// Names the instantiations "Posix" and "Memory".
inline std::string FilesName(const ::testing::TestParamInfo<FilesFactory>& info) {
  return info.param == &PosixFilesForTest ? "Posix" : "Memory";
}

}  // namespace timelake::testing
