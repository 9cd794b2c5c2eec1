#include "timelake/store/cloud/multipart_output.h"

#include <algorithm>
#include <exception>

namespace timelake {

arrow::Status MultipartOutput::Write(const void* data, int64_t nbytes) {
  if (closed_) {
    return arrow::Status::Invalid("write to a closed output stream (", uploader_->Describe(), ")");
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (nbytes > 0) {
    // A full buffer goes out only now that more bytes follow it (see the class comment).
    if (buffer_.length() == part_size_) ARROW_RETURN_NOT_OK(SendPart(/*last=*/false));
    const int64_t take = std::min(nbytes, part_size_ - buffer_.length());
    ARROW_RETURN_NOT_OK(buffer_.Append(bytes, take));
    bytes += take;
    nbytes -= take;
    written_ += take;
  }
  return arrow::Status::OK();
}

arrow::Status MultipartOutput::SendPart(bool last) {
  if (!begun_) {
    auto id = uploader_->Begin();
    if (!id.ok()) return Fail(id.status());
    upload_id_ = *id;
    begun_ = true;
  }
  auto status = WaitForParts(static_cast<size_t>(std::max(1, uploader_->Parallelism()) - 1));
  if (!status.ok()) return Fail(status);
  std::shared_ptr<arrow::Buffer> part;
  ARROW_RETURN_NOT_OK(buffer_.Finish(&part));
  const int number = next_part_++;
  const int64_t offset = sent_;
  sent_ += part->size();
  PartUploader* uploader = uploader_.get();
  const std::string id = upload_id_;
  try {
    in_flight_.push_back(Part{number, std::async(std::launch::async,
                                                 [uploader, id, number, offset, part, last] {
                                                   return uploader->UploadPart(id, number, offset,
                                                                               part, last);
                                                 })});
  } catch (const std::exception& e) {  // no thread could be started
    return Fail(arrow::Status::IOError("sending part ", number, " of ", uploader_->Describe(),
                                       ": ", e.what()));
  }
  return arrow::Status::OK();
}

arrow::Status MultipartOutput::WaitForParts(size_t at_most) {
  arrow::Status first;
  while (in_flight_.size() > at_most) {
    Part part = std::move(in_flight_.front());
    in_flight_.pop_front();
    auto token = part.token.get();
    if (!token.ok()) {
      if (first.ok()) first = token.status();
    } else {
      done_.emplace_back(part.number, *token);
    }
  }
  return first;
}

arrow::Status MultipartOutput::Close() {
  if (closed_) return failure_;
  if (!begun_) {
    std::shared_ptr<arrow::Buffer> whole;
    ARROW_RETURN_NOT_OK(buffer_.Finish(&whole));
    closed_ = true;
    failure_ = uploader_->PutWhole(std::move(whole));
    return failure_;
  }
  ARROW_RETURN_NOT_OK(SendPart(/*last=*/true));
  auto status = WaitForParts(0);
  if (!status.ok()) return Fail(status);
  std::sort(done_.begin(), done_.end());
  status = uploader_->Complete(upload_id_, done_, written_);
  if (!status.ok()) return Fail(status);
  closed_ = true;
  begun_ = false;
  return arrow::Status::OK();
}

arrow::Status MultipartOutput::Abort() {
  if (closed_) return arrow::Status::OK();
  closed_ = true;
  (void)WaitForParts(0);
  buffer_.Reset();
  if (!begun_) return arrow::Status::OK();
  begun_ = false;
  return uploader_->Abort(upload_id_);
}

}  // namespace timelake
