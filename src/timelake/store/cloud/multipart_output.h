// MultipartOutput: the output stream of the cloud stores, which sends a large object in parts
// through a PartUploader (S3 multipart uploads, Azure blocks, GCS resumable uploads).
#pragma once

#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <arrow/buffer_builder.h>
#include <arrow/result.h>
#include <arrow/status.h>

#include "timelake/store/object_store.h"

namespace timelake {

/// How a store sends one object in parts (S3 multipart uploads, Azure blocks, GCS resumable
/// uploads). MultipartOutput calls it: PutWhole for an object that fits one part, otherwise Begin,
/// UploadPart for each part (at most `Parallelism()` at once, in any order), then Complete or
/// Abort.
class PartUploader {
 public:
  virtual ~PartUploader() = default;
  /// The whole object in one request.
  virtual arrow::Status PutWhole(std::shared_ptr<arrow::Buffer> data) = 0;
  /// Starts an upload; returns its id ("" if the service needs none).
  virtual arrow::Result<std::string> Begin() = 0;
  /// Sends part `number` (1-based), which starts at byte `offset`; `last` is true for the final
  /// part (whose end is the object's size). Returns what Complete needs of the part (an ETag, a
  /// block id).
  virtual arrow::Result<std::string> UploadPart(const std::string& upload_id, int number,
                                                int64_t offset, std::shared_ptr<arrow::Buffer> data,
                                                bool last) = 0;
  /// Makes the object of the parts (sorted by number) visible.
  virtual arrow::Status Complete(const std::string& upload_id,
                                 const std::vector<std::pair<int, std::string>>& parts,
                                 int64_t size) = 0;
  /// Discards the upload's parts.
  virtual arrow::Status Abort(const std::string& upload_id) = 0;
  /// Parts in flight at once (1 for services whose parts must go in order).
  virtual int Parallelism() const = 0;
  /// For messages: the object's URL.
  virtual std::string Describe() const = 0;
};

/// An ObjectOutput over a PartUploader: buffers up to one part; an object that fits one part is
/// one PutWhole at Close; a larger one goes up part by part with up to Parallelism() parts in
/// flight. A full part is sent only once more bytes follow it, so the final part (sent at Close)
/// is never empty and always knows the object's size.
class MultipartOutput : public ObjectOutput {
 public:
  MultipartOutput(std::unique_ptr<PartUploader> uploader, int64_t part_size)
      : uploader_(std::move(uploader)), part_size_(part_size) {}
  ~MultipartOutput() override { (void)Abort(); }

  arrow::Status Write(const void* data, int64_t nbytes) override;
  arrow::Status Close() override;
  arrow::Status Abort() override;
  arrow::Result<int64_t> Tell() const override { return written_; }
  bool closed() const override { return closed_; }

 private:
  arrow::Status SendPart(bool last);
  arrow::Status WaitForParts(size_t at_most);
  arrow::Status Fail(arrow::Status status) {
    (void)Abort();
    failure_ = status;
    return status;
  }

  std::unique_ptr<PartUploader> uploader_;
  int64_t part_size_;
  arrow::BufferBuilder buffer_;
  int64_t written_ = 0;
  int64_t sent_ = 0;  // bytes handed to parts
  bool closed_ = false;
  arrow::Status failure_;  // why the stream failed (then Close reports it, not OK)
  bool begun_ = false;
  std::string upload_id_;
  struct Part {
    int number;
    std::future<arrow::Result<std::string>> token;
  };
  std::deque<Part> in_flight_;
  std::vector<std::pair<int, std::string>> done_;
  int next_part_ = 1;
};

}  // namespace timelake
