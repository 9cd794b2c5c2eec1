#include "timelake/store/object_store.h"

namespace timelake {

arrow::Status OutputOptions::Validate() const {
  if (part_size < kMinPartSize || part_size > kMaxPartSize) {
    return arrow::Status::Invalid("output part size ", part_size, " is out of range: use ",
                                  kMinPartSize, " to ", kMaxPartSize, " bytes");
  }
  return arrow::Status::OK();
}

arrow::Result<std::vector<ObjectMeta>> ObjectStore::ListAfter(const std::string& prefix,
                                                              const std::string& start_after) {
  std::vector<ObjectMeta> out;
  ListPageRequest request;
  request.prefix = prefix;
  request.start_after = start_after;
  for (;;) {
    ARROW_ASSIGN_OR_RAISE(ObjectPage page, ListPage(request));
    for (auto& meta : page.objects) {
      // A page must continue where the last one ended: anything else would hand callers an
      // unsorted or repeated listing, which the log reader would take for a damaged log.
      if (!out.empty() && meta.path <= out.back().path) {
        return arrow::Status::IOError("store ", RootUrl(), " listed '", meta.path, "' after '",
                                      out.back().path, "' while listing '", prefix, "'");
      }
      out.push_back(std::move(meta));
    }
    if (page.continuation.empty()) return out;
    if (page.continuation == request.continuation) {
      return arrow::Status::IOError("store ", RootUrl(), " repeated the listing page of '", prefix,
                                    "' that continues at '", page.continuation, "'");
    }
    request.continuation = std::move(page.continuation);
  }
}

arrow::Status ObjectStore::DeleteMany(const std::vector<std::string>& paths) {
  for (const auto& path : paths) ARROW_RETURN_NOT_OK(Delete(path));
  return arrow::Status::OK();
}

arrow::Status ObjectStore::RenamePrefix(const std::string& prefix, const std::string&) {
  return arrow::Status::NotImplemented("this store cannot rename '", prefix, "' atomically");
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

}  // namespace timelake
