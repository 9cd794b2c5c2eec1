#include "timelake/util/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace timelake {

int CpuParallelism() {
  // hardware_concurrency() reads /sys/devices/system/cpu/online on every call (three system
  // calls, several times per append): the core count is read once.
  static const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return cores;
}

arrow::Status RunParallel(size_t n, int parallelism,
                          const std::function<arrow::Status(size_t)>& task) {
  std::atomic<size_t> next{0};
  std::mutex mutex;
  arrow::Status first;
  auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      arrow::Status status = NoThrow("a parallel task", [&] { return task(i); });
      if (!status.ok()) {
        std::lock_guard<std::mutex> lock(mutex);
        if (first.ok()) first = std::move(status);
      }
    }
  };
  const size_t threads = std::min<size_t>(n, static_cast<size_t>(std::max(1, parallelism)));
  std::vector<std::thread> pool;
  try {
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  } catch (const std::exception&) {
    // Fewer threads than asked: the ones running (and this one) do all the work.
  }
  work();
  for (auto& t : pool) t.join();
  return first;
}

}  // namespace timelake
