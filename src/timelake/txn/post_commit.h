// PostCommitHooks: the work that follows an acknowledged commit.
//
// Once a commit is in the log the operation has succeeded, whatever happens next: a checkpoint
// that cannot be written costs only replay time, a missing index record only a slower latest(),
// failed inline upkeep only a later maintain(). So these steps run after the committer returned,
// never inside its retry loop, and a failing hook never fails the operation: its message is
// collected for the caller to report (AppendResult::maintenance_error, for one).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <arrow/status.h>

namespace timelake {

class PostCommitHooks {
 public:
  using Hook = std::function<arrow::Status()>;

  /// Adds a hook; hooks run in the order they were added.
  void Add(std::string name, Hook hook) { hooks_.emplace_back(std::move(name), std::move(hook)); }

  /// Runs every hook (a failing one does not stop the others) and returns the failures, each as
  /// "<name>: <message>"; empty when all succeeded.
  std::vector<std::string> Run() {
    std::vector<std::string> failures;
    for (auto& [name, hook] : hooks_) {
      arrow::Status st = hook();
      if (!st.ok()) failures.push_back(name + ": " + st.message());
    }
    return failures;
  }

 private:
  std::vector<std::pair<std::string, Hook>> hooks_;
};

}  // namespace timelake
