// MemoryFiles: LocalFiles (store/local_files.h) held in process memory, as a MemoryStore hands
// them out: the rules of PosixFiles within one process, for tests of the protocols built on them.
//
// A file is a record that names point at: Claim moves it to another name, Publish writes into it
// in place (its identity kept, like an inode), a Liveness counts on it wherever it moves. Every
// call is atomic under one mutex, so of a Claim and a Withdraw of one file exactly one finds it.
// A folder exists where the store says it does (the function given: the MemoryStore's objects
// under it) or where a file of these is; the root always does.
//
// Thread-safe. A Liveness may outlive its MemoryFiles.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "timelake/store/local_files.h"

namespace timelake {

class MemoryFiles : public LocalFiles {
 public:
  /// `folder_exists(folder)` (a path without the trailing '/'): whether the store holds that
  /// folder. It is called with this object's mutex held and must not call back into it.
  explicit MemoryFiles(std::function<bool(const std::string& folder)> folder_exists)
      : folder_exists_(std::move(folder_exists)) {}

  arrow::Result<std::unique_ptr<Liveness>> Publish(const std::string& scratch,
                                                   const std::string& path,
                                                   const arrow::Buffer& data, bool hold) override;
  arrow::Result<bool> Claim(const std::string& from, const std::string& to) override;
  arrow::Result<bool> Withdraw(const std::string& path) override;
  arrow::Result<bool> IsHeld(const std::string& path) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> Read(const std::string& path) override;
  arrow::Result<std::vector<LocalFileInfo>> List(const std::string& folder,
                                                 ListDetail detail) override;

  /// For tests: makes the file `path` `ms` older, as if last written that long before.
  /// NotFound when it is missing.
  arrow::Status Age(const std::string& path, int64_t ms);

 private:
  struct File {
    std::shared_ptr<arrow::Buffer> data;
    int64_t modified_ms = 0;
    uint64_t identity = 0;
    std::shared_ptr<std::atomic<int>> holders = std::make_shared<std::atomic<int>>(0);
  };
  /// REQUIRES: mutex_ held.
  bool FolderExists(const std::string& folder) const;

  std::function<bool(const std::string&)> folder_exists_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<File>> files_;  // GUARDED_BY(mutex_)
  uint64_t identities_ = 0;                              // GUARDED_BY(mutex_): the last one given
};

}  // namespace timelake
