#include "timelake/store/cloud/location.h"

#include <algorithm>
#include <string_view>

namespace timelake {

bool HasDotSegment(const std::string& path) {
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string_view segment(path.data() + start, end - start);
    if (segment == "." || segment == "..") return true;
    start = end + 1;
  }
  return false;
}

arrow::Status SplitBucketAndPrefix(const std::string& url, const std::string& example,
                                   std::string* bucket, std::string* prefix) {
  const std::string rest = url.substr(url.find("://") + 3);
  const auto slash = rest.find('/');
  *bucket = rest.substr(0, slash);
  std::string p = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!p.empty() && p.back() == '/') p.pop_back();
  if (bucket->empty()) {
    return arrow::Status::Invalid("lake location '", url, "' names no bucket or container; write ",
                                  example);
  }
  if (p.find("//") != std::string::npos || (!p.empty() && p.front() == '/')) {
    return arrow::Status::Invalid("lake location '", url, "' has an empty path segment");
  }
  *prefix = p;
  return arrow::Status::OK();
}

}  // namespace timelake
