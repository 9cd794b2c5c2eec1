// Running independent tasks on several threads.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <future>
#include <new>
#include <system_error>
#include <utility>

#include <arrow/status.h>

namespace timelake {

/// The number of threads CPU-bound work should use: the machine's cores (at least 1).
int CpuParallelism();

/// Runs `task(i)` for i in [0, n) on up to `parallelism` threads (this one included); returns the
/// first failure (the others still run to their end). A task that throws fails with the
/// exception as its status (see NoThrow).
arrow::Status RunParallel(size_t n, int parallelism,
                          const std::function<arrow::Status(size_t)>& task);

/// The status `work()` returns, or the exception it throws as a status: OutOfMemory for
/// std::bad_alloc, UnknownError for the rest. Every thread's body runs its work through this:
/// an exception that leaves a thread's function ends the process (std::terminate).
template <typename Work>
arrow::Status NoThrow(const char* what, Work&& work) noexcept {
  try {
    return std::forward<Work>(work)();
  } catch (const std::bad_alloc&) {
    return arrow::Status::OutOfMemory(what, ": out of memory (or of memory mappings)");
  } catch (const std::exception& e) {
    return arrow::Status::UnknownError(what, ": ", e.what());
  } catch (...) {
    return arrow::Status::UnknownError(what, ": an unknown exception");
  }
}

/// std::async(std::launch::async, f), or, when no thread can be started, `f` deferred: it then
/// runs on the thread that waits for its result.
template <typename F>
auto AsyncOrDeferred(F&& f) -> std::future<decltype(f())> {
  try {
    return std::async(std::launch::async, f);
  } catch (const std::system_error&) {
    return std::async(std::launch::deferred, std::forward<F>(f));
  }
}

}  // namespace timelake
