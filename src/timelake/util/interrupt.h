// Interruption: how the caller of a long operation asks it to stop.
//
// The core never looks at signals. A caller that wants an operation to be stoppable (the Python
// binding does, for Ctrl-C) hands it an InterruptCheck. Long operations call the check between
// units of work (input batches, compaction groups, lock waits), always from the thread that
// started the operation, and when it returns an error they undo what they have not committed
// and return that error (Status::Cancelled by convention). Work that has been committed stays
// committed: a check is never made between a commit and the work that belongs to it.
#pragma once

#include <functional>

#include <arrow/status.h>

namespace timelake {

/// Returns OK to go on, or the status to stop with. May block briefly (it may take a lock of
/// the caller's, such as Python's GIL); it must not call back into the operation's object.
using InterruptCheck = std::function<arrow::Status()>;

/// OK when `check` is empty (nobody can interrupt), else what it returns.
inline arrow::Status CheckInterrupt(const InterruptCheck& check) {
  return check ? check() : arrow::Status::OK();
}

}  // namespace timelake
