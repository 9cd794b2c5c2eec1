#include "timelake/scan/data_files.h"

#include <algorithm>
#include <list>
#include <mutex>
#include <unordered_map>

#include <arrow/io/file.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/schema.h>

#include "timelake/store/parquet_object.h"

namespace timelake {
namespace {

// Footers of the data files selections read, process-wide: a data file never changes once
// written (its name is new, and it is only ever deleted), so its parsed footer stays right for
// as long as a file of that name and size exists. Bounded; the least recently used go first.
class FooterCache {
 public:
  std::shared_ptr<parquet::FileMetaData> Get(const std::string& path, int64_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(path);
    if (it == entries_.end() || it->second.size != size) return nullptr;
    order_.splice(order_.begin(), order_, it->second.position);
    return it->second.footer;
  }

  void Put(const std::string& path, int64_t size, std::shared_ptr<parquet::FileMetaData> footer) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(path);
    if (it != entries_.end()) {
      order_.erase(it->second.position);
      entries_.erase(it);
    }
    order_.push_front(path);
    entries_[path] = Entry{size, std::move(footer), order_.begin()};
    while (entries_.size() > kEntries) {
      entries_.erase(order_.back());
      order_.pop_back();
    }
  }

 private:
  static constexpr size_t kEntries = 1024;
  struct Entry {
    int64_t size;
    std::shared_ptr<parquet::FileMetaData> footer;
    std::list<std::string>::iterator position;
  };
  std::mutex mutex_;
  std::list<std::string> order_;  // most recently used first
  std::unordered_map<std::string, Entry> entries_;
};

FooterCache& Footers() {
  static FooterCache* cache = new FooterCache();  // never destroyed: used until exit
  return *cache;
}

}  // namespace

const parquet::ColumnDescriptor* TopLevelLeaf(const parquet::SchemaDescriptor& schema,
                                              const std::string& name, int* leaf) {
  for (int i = 0; i < schema.num_columns(); ++i) {
    const parquet::ColumnDescriptor* descr = schema.Column(i);
    if (descr->max_repetition_level() == 0 && descr->path()->ToDotVector().size() == 1 &&
        descr->name() == name) {
      *leaf = i;
      return descr;
    }
  }
  return nullptr;
}

arrow::Result<OpenDataFile> OpenPlanFile(const ScanPlan& plan, const std::vector<std::string>& paths, size_t f,
                                         bool verify) {
  const std::string& path = paths.empty() ? plan.files[f].path : paths[f];
  if (path.empty() || path.front() != '/') return arrow::Status::NotImplemented("a file that is not local");
  OpenDataFile out;
  ARROW_ASSIGN_OR_RAISE(auto input, arrow::io::MemoryMappedFile::Open(path, arrow::io::FileMode::READ));
  // Footers are kept only for the lake's own files (a local copy of a remote file may be
  // replaced by a copy of other row groups under the same name), checked by the log's size.
  const int64_t size = plan.files[f].size;
  const bool keep_footer = paths.empty() && size >= 0;
  ARROW_ASSIGN_OR_RAISE(const int64_t actual, input->GetSize());
  std::shared_ptr<parquet::FileMetaData> footer = keep_footer && actual == size ? Footers().Get(path, size) : nullptr;
  parquet::ReaderProperties properties = VerifyingReaderProperties();
  properties.set_page_checksum_verification(verify);
  out.reader = parquet::ParquetFileReader::Open(input, properties, footer);
  if (keep_footer && actual == size && !footer) Footers().Put(path, size, out.reader->metadata());
  out.source = std::move(input);
  return out;
}

arrow::Status CoreReadable(const ScanPlan& plan, const std::vector<std::string>& columns) {
  if (plan.contract.time_column.empty()) return arrow::Status::NotImplemented("a table without a time column");
  if (!plan.physical_names.empty()) return arrow::Status::NotImplemented("column mapping");
  if (plan.evolved || plan.read_by_name || !plan.widened.empty()) {
    return arrow::Status::NotImplemented("files that differ in their columns");
  }
  if (!plan.partition_columns.empty()) return arrow::Status::NotImplemented("partition columns");
  for (const std::string& name : columns) {
    if (std::find(plan.restored.begin(), plan.restored.end(), name) != plan.restored.end()) {
      return arrow::Status::NotImplemented("column '", name, "' is restored to its declared type");
    }
  }
  const bool any_dedup = std::any_of(plan.files.begin(), plan.files.end(),
                                     [](const ScanFile& f) { return f.dedup; });
  if (any_dedup) {
    for (const std::string& key : plan.contract.series_key) {
      if (!plan.filter.key_equals.count(key)) {
        return arrow::Status::NotImplemented("read-time dedup over more than one series");
      }
    }
  }
  return arrow::Status::OK();
}

}  // namespace timelake
