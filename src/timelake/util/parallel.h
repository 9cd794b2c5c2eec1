// Running independent tasks on several threads.
#pragma once

#include <cstddef>
#include <functional>

#include <arrow/status.h>

namespace timelake {

/// The number of threads CPU-bound work should use: the machine's cores (at least 1).
int CpuParallelism();

/// Runs `task(i)` for i in [0, n) on up to `parallelism` threads (this one included); returns the
/// first failure (the others still run to their end).
arrow::Status RunParallel(size_t n, int parallelism,
                          const std::function<arrow::Status(size_t)>& task);

}  // namespace timelake
