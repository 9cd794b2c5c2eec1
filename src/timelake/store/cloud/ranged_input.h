// RangedInput: random access to an object of a store whose objects are read over the network.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <arrow/io/interfaces.h>
#include <arrow/result.h>
#include <arrow/status.h>

#include "timelake/store/object_store.h"

namespace timelake {

/// Random access to one object of a store by ranged reads (GetRange); the size comes from one
/// Head, on first need. For stores whose objects are read over the network.
class RangedInput : public arrow::io::RandomAccessFile {
 public:
  RangedInput(std::shared_ptr<ObjectStore> store, std::string path)
      : store_(std::move(store)), path_(std::move(path)) {}

  arrow::Status Close() override {
    closed_ = true;
    return arrow::Status::OK();
  }
  bool closed() const override { return closed_; }
  arrow::Result<int64_t> Tell() const override { return position_; }
  arrow::Status Seek(int64_t position) override;
  arrow::Result<int64_t> GetSize() override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override;
  arrow::Result<int64_t> ReadAt(int64_t position, int64_t nbytes, void* out) override;
  arrow::Result<std::shared_ptr<arrow::Buffer>> Read(int64_t nbytes) override;
  arrow::Result<int64_t> Read(int64_t nbytes, void* out) override;

 private:
  std::shared_ptr<ObjectStore> store_;
  std::string path_;
  int64_t position_ = 0;
  std::mutex size_mutex_;
  int64_t size_ = -1;  // GUARDED_BY(size_mutex_)
  bool closed_ = false;
};

}  // namespace timelake
