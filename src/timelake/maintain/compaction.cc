#include "timelake/maintain/compaction.h"

#include <algorithm>
#include <map>

#include <arrow/compute/api.h>
#include <arrow/record_batch.h>
#include <arrow/table.h>

#include "timelake/log/data_path.h"
#include "timelake/log/file_tags.h"
#include "timelake/store/parquet_object.h"

namespace timelake {
namespace {

struct Candidate {
  const AddFile* add;
  int64_t seq, order, min_time, max_time;
};

// Files of one chunk whose time ranges overlap another's (they may share a (series, time)).
std::vector<bool> Overlapping(const std::vector<Candidate>& files) {
  std::vector<size_t> by_time(files.size());
  for (size_t i = 0; i < files.size(); ++i) by_time[i] = i;
  std::sort(by_time.begin(), by_time.end(),
            [&](size_t a, size_t b) { return files[a].min_time < files[b].min_time; });
  std::vector<bool> out(files.size(), false);
  for (size_t i = 0; i < by_time.size(); ++i) {
    for (size_t j = i + 1; j < by_time.size() && files[by_time[j]].min_time <= files[by_time[i]].max_time; ++j) {
      out[by_time[i]] = out[by_time[j]] = true;
    }
  }
  return out;
}

}  // namespace

std::vector<CompactionGroup> PlanCompaction(const Snapshot& snapshot, const Contract& contract,
                                            const CompactionOptions& options) {
  std::map<std::string, std::vector<Candidate>> by_chunk;
  for (const auto& [path, add] : snapshot.files) {
    const int64_t seq = TagInt(add, kSeqTag, -1);
    if (seq < 0) continue;  // another engine's file: its layout is not ours to assume
    auto chunk = add.tags.find(kChunkTag);
    by_chunk[chunk == add.tags.end() ? "" : chunk->second].push_back(
        {&add, seq, TagInt(add, kOrderTag, 0), TagInt(add, kMinTimeTag, INT64_MIN),
         TagInt(add, kMaxTimeTag, INT64_MAX)});
  }
  std::vector<CompactionGroup> groups;
  for (auto& [chunk, files] : by_chunk) {
    std::sort(files.begin(), files.end(), [](const Candidate& a, const Candidate& b) {
      return a.seq != b.seq ? a.seq < b.seq : a.order < b.order;
    });
    const bool dedup = contract.dedup != DedupPolicy::kNone;
    const std::vector<bool> overlapping = dedup ? Overlapping(files) : std::vector<bool>(files.size());
    std::vector<bool> take(files.size(), false);
    for (size_t i = 0; i < files.size(); ++i) {
      take[i] = files[i].add->size < options.target_file_bytes / 2 || overlapping[i];
    }
    if (dedup) {
      // The outputs will carry the newest input's sequence number, so an older file left out
      // must not hold any (series, time) the inputs hold: pull such files in until none is left.
      for (bool changed = true; changed;) {
        changed = false;
        int64_t newest = -1;
        for (size_t i = 0; i < files.size(); ++i) {
          if (take[i]) newest = std::max(newest, files[i].seq);
        }
        for (size_t i = 0; i < files.size(); ++i) {
          if (take[i] || files[i].seq >= newest) continue;
          for (size_t j = 0; j < files.size(); ++j) {
            if (take[j] && files[i].min_time <= files[j].max_time &&
                files[j].min_time <= files[i].max_time) {
              take[i] = changed = true;
              break;
            }
          }
        }
      }
    }
    std::vector<Candidate> picked;
    for (size_t i = 0; i < files.size(); ++i) {
      if (take[i]) picked.push_back(files[i]);
    }
    if (static_cast<int>(picked.size()) < options.min_files) continue;
    // Cut into groups under the budget, never between two files of one commit.
    CompactionGroup group;
    group.chunk = chunk;
    for (size_t i = 0; i < picked.size(); ++i) {
      const bool same_commit = !group.inputs.empty() && picked[i].seq == group.seq;
      if (!same_commit && !group.inputs.empty() && group.bytes + picked[i].add->size > options.group_budget_bytes) {
        if (group.inputs.size() >= 2) groups.push_back(group);
        group = CompactionGroup{};
        group.chunk = chunk;
        if (contract.dedup != DedupPolicy::kNone) break;  // later groups would overtake this one
      }
      group.inputs.push_back(*picked[i].add);
      group.bytes += picked[i].add->size;
      group.seq = picked[i].seq;
    }
    if (group.inputs.size() >= 2) groups.push_back(group);
    if (groups.size() >= options.max_groups) break;
  }
  if (groups.size() > options.max_groups) groups.resize(options.max_groups);
  return groups;
}

arrow::Result<RewrittenGroup> RewriteGroup(const std::shared_ptr<ObjectStore>& store,
                                           const std::string& table_path, const Contract& contract,
                                           const std::shared_ptr<arrow::Schema>& declared,
                                           const std::shared_ptr<arrow::Schema>& storage,
                                           const CompactionGroup& group) {
  RewrittenGroup out;
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  for (const auto& input : group.inputs) {
    ARROW_ASSIGN_OR_RAISE(auto path, DataFileStorePath(table_path, input.path));
    ARROW_ASSIGN_OR_RAISE(auto rows, ReadParquetTable(store.get(), path));
    out.rows_in += rows->num_rows();
    arrow::TableBatchReader reader(*rows);
    ARROW_ASSIGN_OR_RAISE(auto file_batches, reader.ToRecordBatches());
    for (auto& b : file_batches) batches.push_back(std::move(b));
  }
  // One flush for the whole group: the budget already bounds it, and one arrangement is what
  // makes the outputs disjoint and deduplicated.
  IngestOptions options;
  options.buffer_bytes = INT64_MAX;
  Ingestor ingestor(store, table_path, contract, declared, storage, options);
  ARROW_ASSIGN_OR_RAISE(auto reader, arrow::RecordBatchReader::Make(batches, storage));
  arrow::Status st = ingestor.Consume(reader.get());
  if (st.ok()) {
    auto written = ingestor.Finish();
    if (written.ok()) {
      out.outputs = std::move(*written);
    } else {
      st = written.status();
    }
  }
  if (!st.ok()) {
    ingestor.Abort();
    return st;
  }
  for (const auto& f : out.outputs) out.rows_out += f.rows;
  return out;
}

}  // namespace timelake
