#include "timelake/store/cloud/ranged_input.h"

#include <cstring>

namespace timelake {

arrow::Status RangedInput::Seek(int64_t position) {
  if (position < 0) return arrow::Status::Invalid("negative seek position");
  position_ = position;
  return arrow::Status::OK();
}

arrow::Result<int64_t> RangedInput::GetSize() {
  std::lock_guard<std::mutex> lock(size_mutex_);
  if (size_ < 0) {
    ARROW_ASSIGN_OR_RAISE(auto meta, store_->Head(path_));
    size_ = meta.size;
  }
  return size_;
}

arrow::Result<std::shared_ptr<arrow::Buffer>> RangedInput::ReadAt(int64_t position, int64_t nbytes) {
  if (closed_) return arrow::Status::Invalid("read from a closed file (", path_, ")");
  return store_->GetRange(path_, position, nbytes);
}

arrow::Result<int64_t> RangedInput::ReadAt(int64_t position, int64_t nbytes, void* out) {
  ARROW_ASSIGN_OR_RAISE(auto buffer, ReadAt(position, nbytes));
  std::memcpy(out, buffer->data(), static_cast<size_t>(buffer->size()));
  return buffer->size();
}

arrow::Result<std::shared_ptr<arrow::Buffer>> RangedInput::Read(int64_t nbytes) {
  ARROW_ASSIGN_OR_RAISE(auto buffer, ReadAt(position_, nbytes));
  position_ += buffer->size();
  return buffer;
}

arrow::Result<int64_t> RangedInput::Read(int64_t nbytes, void* out) {
  ARROW_ASSIGN_OR_RAISE(int64_t n, ReadAt(position_, nbytes, out));
  position_ += n;
  return n;
}

}  // namespace timelake
