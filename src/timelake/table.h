// Table: one time-series (or plain) table of a lake, at a snapshot.
//
// A Table handle holds the snapshot it last saw. Operations that commit (append, maintain)
// advance the handle to the version they create; refresh() advances it to the latest version.
// A handle may be used from several threads: operations on one handle are serialised, and
// concurrent handles (in this or other processes or hosts) coordinate through put-if-absent
// commits only. An operation called on a handle from inside another operation of the same handle
// on the same thread (from the input stream of an append) fails with Status::ExecutionError
// instead of deadlocking; version() alone answers there.
//
// Append and Maintain take an InterruptCheck in their options: they call it between input
// batches, before committing and between compaction groups (and while waiting for the handle),
// and stop with its status. What a stopped operation wrote but did not commit is deleted.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <arrow/record_batch.h>
#include <arrow/result.h>

#include "timelake/contract.h"
#include "timelake/scan/scan_planner.h"
#include "timelake/table_context.h"
#include "timelake/util/interrupt.h"
#include "timelake/util/operation_lock.h"

namespace timelake {

class Table {
 public:
  /// Opens the table at `table_path` (relative to the store root) at its latest version.
  static arrow::Result<std::shared_ptr<Table>> Open(std::shared_ptr<ObjectStore> store,
                                                    std::string table_path, std::string name);

  const std::string& name() const { return ctx_.name; }
  std::string location() const;
  int64_t version();
  std::shared_ptr<arrow::Schema> schema() const { return ctx_.declared; }
  const Contract& contract() const { return ctx_.contract; }

  arrow::Result<AppendResult> Append(arrow::RecordBatchReader* reader, const AppendOptions& options);
  arrow::Result<MaintainResult> Maintain(const MaintainOptions& options);
  arrow::Result<TableInfo> Info();
  /// The newest row of every series (storage types), from the last-value index, at the latest
  /// version. Status::Invalid for a plain table.
  arrow::Result<std::shared_ptr<arrow::Table>> Latest();
  arrow::Status Refresh();
  /// Waits for the work earlier appends left to the handle's upkeep thread (checkpoints, index
  /// records and folds; txn/upkeep.h). latest(), info() and maintain() wait for it themselves.
  arrow::Status WaitForUpkeep();
  /// The files of the handle's current snapshot that may hold rows `filter` admits, annotated
  /// for a query engine (see scan/scan_planner.h).
  arrow::Result<ScanPlan> Scan(const ScanFilter& filter = {});

  /// The Delta txn appId that records `batch_id`.
  static std::string BatchAppId(const std::string& batch_id) { return timelake::BatchAppId(batch_id); }

 private:
  Table(std::shared_ptr<ObjectStore> store, std::string table_path, std::string name);

  OperationLock mutex_;
  TableContext ctx_;  // GUARDED_BY(mutex_)
};

}  // namespace timelake
