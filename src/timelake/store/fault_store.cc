#include "timelake/store/fault_store.h"

#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <type_traits>
#include <variant>

#include "timelake/util/status.h"

namespace timelake {
namespace {

class FaultOutput;

std::string Describe(const StoreOperation& op) {
  return "#" + std::to_string(op.index) + " " + op.name + " " + op.path;
}

arrow::Status InjectedError(const char* what, const StoreOperation& op) {
  return arrow::Status::IOError("injected fault: ", what, " of operation ", Describe(op));
}

arrow::Status CrashedError(int64_t since) {
  return arrow::Status::IOError("injected crash: the store has been down since operation #",
                                since);
}

}  // namespace

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kFail:
      return "fail";
    case FaultKind::kLoseReply:
      return "lose reply";
    case FaultKind::kLandButRefuse:
      return "land but refuse";
    case FaultKind::kCrash:
      return "crash before";
    case FaultKind::kCrashAfter:
      return "crash after";
  }
  return "unknown";
}

// The fault state of one FaultStore, shared with its output streams (which may outlive it).
class FaultStore::Injector {
 public:
  struct Decision {
    StoreOperation op;
    std::optional<FaultKind> fault;
  };

  explicit Injector(uint64_t seed) : rng_(seed) {}

  /// Numbers the operation and decides its fault; the crash error if the store is down.
  arrow::Result<Decision> Begin(const char* name, const std::string& path, bool write) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (crashed_) return CrashedError(crash_index_);
    Decision decision{StoreOperation{count_, name, path, write}, std::nullopt};
    const bool counted = counting_ == Counting::kAllOperations || write;
    if (counted) {
      auto it = at_.find(count_);
      if (it != at_.end()) {
        decision.fault = it->second;
        at_.erase(it);
      }
      ++count_;
    }
    for (auto rule = rules_.begin(); !decision.fault && rule != rules_.end(); ++rule) {
      if (!rule->match(decision.op)) continue;
      decision.fault = rule->kind;
      if (--rule->remaining == 0) rules_.erase(rule);
      break;
    }
    if (!decision.fault && counted && probability_ > 0 &&
        std::uniform_real_distribution<double>(0, 1)(rng_) < probability_) {
      decision.fault = std::bernoulli_distribution(0.5)(rng_) ? FaultKind::kFail
                                                             : FaultKind::kLoseReply;
    }
    return decision;
  }

  void Record(const StoreOperation& op, FaultKind kind, const std::string& outcome) {
    std::lock_guard<std::mutex> lock(mutex_);
    log_.push_back(Describe(op) + ": " + FaultKindName(kind) +
                   (outcome.empty() ? "" : " (" + outcome + ")"));
  }

  void Crash(int64_t at) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (crashed_) return;
      crashed_ = true;
      crash_index_ = at;
    }
    DropUnsynced();
  }

  /// Keeps `stream` to drop it in a crash; the crash error (having aborted it) if one happened.
  arrow::Status Register(const std::shared_ptr<FaultOutput>& stream);
  void DropUnsynced();

  // The FaultStore's own settings, taken under the lock.
  void SetCounting(Counting counting) {
    std::lock_guard<std::mutex> lock(mutex_);
    counting_ = counting;
  }
  int64_t operations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return count_;
  }
  void InjectAt(int64_t index, FaultKind kind) {
    std::lock_guard<std::mutex> lock(mutex_);
    at_[index] = kind;
  }
  void InjectWhen(FaultKind kind, std::function<bool(const StoreOperation&)> match, int times) {
    if (times < 1) return;
    std::lock_guard<std::mutex> lock(mutex_);
    rules_.push_back({kind, std::move(match), times});
  }
  void InjectRandomly(double probability) {
    std::lock_guard<std::mutex> lock(mutex_);
    probability_ = probability;
  }
  bool crashed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return crashed_;
  }
  void Revive() {
    std::lock_guard<std::mutex> lock(mutex_);
    crashed_ = false;
    at_.clear();
    rules_.clear();
    probability_ = 0;
  }
  std::vector<std::string> injected() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return log_;
  }
  void Note(std::string line) {
    std::lock_guard<std::mutex> lock(mutex_);
    log_.push_back(std::move(line));
  }

 private:
  struct Rule {
    FaultKind kind;
    std::function<bool(const StoreOperation&)> match;
    int remaining;
  };

  mutable std::mutex mutex_;
  Counting counting_ = Counting::kAllOperations;  // GUARDED_BY(mutex_), as is all below
  int64_t count_ = 0;
  std::map<int64_t, FaultKind> at_;
  std::vector<Rule> rules_;
  double probability_ = 0;
  std::mt19937_64 rng_;
  bool crashed_ = false;
  int64_t crash_index_ = 0;
  std::vector<std::string> log_;
  std::vector<std::weak_ptr<FaultOutput>> streams_;
};

namespace {

// Runs one operation through the injector. `call` performs it on the target; `skip` undoes
// what the caller set up for it when the fault says it does not happen (an output stream's
// Close aborts the stream instead).
template <typename T, typename Call, typename Skip>
arrow::Result<T> Run(FaultStore::Injector* injector, const char* name, const std::string& path,
                     bool write, Call&& call, Skip&& skip) {
  auto decision = injector->Begin(name, path, write);
  if (!decision.ok()) {
    skip();
    return decision.status();
  }
  if (!decision->fault) return call();
  const StoreOperation& op = decision->op;
  const FaultKind kind = *decision->fault;
  if (kind == FaultKind::kFail || kind == FaultKind::kCrash) {
    skip();
    injector->Record(op, kind, "not performed");
    if (kind == FaultKind::kFail) return InjectedError("failure", op);
    injector->Crash(op.index);
    return CrashedError(op.index);
  }
  arrow::Result<T> result = call();
  if constexpr (std::is_same_v<T, bool>) {
    if (kind == FaultKind::kLandButRefuse && result.ok() && *result) {
      injector->Record(op, kind, "landed, reported false");
      return false;
    }
  }
  injector->Record(op, kind,
                   result.ok() ? "the call returned OK"
                               : "the call failed: " + result.status().ToString());
  // The operation was performed: the caller cannot know that, as with a real lost reply.
  if (kind == FaultKind::kCrashAfter) {
    injector->Crash(op.index);
    return OutcomeUnknown(CrashedError(op.index));
  }
  return OutcomeUnknown(InjectedError("lost reply", op));
}

template <typename T, typename Call>
arrow::Result<T> Run(FaultStore::Injector* injector, const char* name, const std::string& path,
                     bool write, Call&& call) {
  return Run<T>(injector, name, path, write, std::forward<Call>(call), [] {});
}

// Status-returning operations go through Run as results without a value.
template <typename Call, typename Skip>
arrow::Status RunStatus(FaultStore::Injector* injector, const char* name, const std::string& path,
                        bool write, Call&& call, Skip&& skip) {
  return Run<std::monostate>(
             injector, name, path, write,
             [&]() -> arrow::Result<std::monostate> {
               ARROW_RETURN_NOT_OK(call());
               return std::monostate{};
             },
             std::forward<Skip>(skip))
      .status();
}

template <typename Call>
arrow::Status RunStatus(FaultStore::Injector* injector, const char* name, const std::string& path,
                        bool write, Call&& call) {
  return RunStatus(injector, name, path, write, std::forward<Call>(call), [] {});
}

// An output stream of a FaultStore: writes go to the target's stream; Close is an operation;
// a crash drops it (aborts the target's stream).
class FaultOutput : public ObjectOutput {
 public:
  FaultOutput(std::shared_ptr<ObjectOutput> inner, std::string path,
              std::shared_ptr<FaultStore::Injector> injector)
      : inner_(std::move(inner)), path_(std::move(path)), injector_(std::move(injector)) {}

  arrow::Status Write(const void* data, int64_t nbytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ARROW_RETURN_NOT_OK(CheckOpen());
    return inner_->Write(data, nbytes);
  }
  arrow::Result<int64_t> Tell() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    ARROW_RETURN_NOT_OK(CheckOpen());
    return inner_->Tell();
  }
  bool closed() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return inner_ == nullptr;
  }
  arrow::Status Close() override {
    std::shared_ptr<ObjectOutput> inner;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (inner_ == nullptr) return dropped_ ? CheckOpen() : arrow::Status::OK();
      inner = std::move(inner_);
    }
    return RunStatus(
        injector_.get(), "close_output", path_, /*write=*/true, [&] { return inner->Close(); },
        [&] { (void)inner->Abort(); });
  }
  arrow::Status Abort() override {
    std::shared_ptr<ObjectOutput> inner;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      inner = std::move(inner_);
    }
    return inner == nullptr ? arrow::Status::OK() : inner->Abort();
  }

  /// What a crash does to a stream not closed yet.
  void Drop() {
    std::shared_ptr<ObjectOutput> inner;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      inner = std::move(inner_);
      if (inner != nullptr) dropped_ = true;
    }
    if (inner != nullptr) (void)inner->Abort();
  }

 private:
  // REQUIRES: mutex_ held.
  arrow::Status CheckOpen() const {
    if (dropped_) {
      return arrow::Status::IOError("injected crash: the output stream for '", path_,
                                    "' was dropped before it was closed");
    }
    if (inner_ == nullptr) return arrow::Status::Invalid("stream for '", path_, "' is closed");
    return arrow::Status::OK();
  }

  mutable std::mutex mutex_;
  std::shared_ptr<ObjectOutput> inner_;  // GUARDED_BY(mutex_); null once closed, aborted, dropped
  bool dropped_ = false;                 // GUARDED_BY(mutex_)
  const std::string path_;
  const std::shared_ptr<FaultStore::Injector> injector_;
};

}  // namespace

arrow::Status FaultStore::Injector::Register(const std::shared_ptr<FaultOutput>& stream) {
  int64_t crash_index;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!crashed_) {
      std::erase_if(streams_, [](const auto& s) { return s.expired(); });
      streams_.push_back(stream);
      return arrow::Status::OK();
    }
    crash_index = crash_index_;
  }
  stream->Drop();  // opened while the store crashed on another thread
  return CrashedError(crash_index);
}

void FaultStore::Injector::DropUnsynced() {
  std::vector<std::weak_ptr<FaultOutput>> streams;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    streams.swap(streams_);
  }
  for (const auto& weak : streams) {
    if (auto stream = weak.lock()) stream->Drop();
  }
}

FaultStore::FaultStore(std::shared_ptr<ObjectStore> target, uint64_t seed)
    : ForwardingStore(std::move(target)), injector_(std::make_shared<Injector>(seed)) {}

FaultStore::~FaultStore() = default;

void FaultStore::SetCounting(Counting counting) { injector_->SetCounting(counting); }
int64_t FaultStore::operations() const { return injector_->operations(); }
void FaultStore::InjectAt(int64_t index, FaultKind kind) { injector_->InjectAt(index, kind); }
void FaultStore::InjectWhen(FaultKind kind, std::function<bool(const StoreOperation&)> match,
                            int times) {
  injector_->InjectWhen(kind, std::move(match), times);
}
void FaultStore::InjectRandomly(double probability) { injector_->InjectRandomly(probability); }
void FaultStore::Crash() {
  const int64_t at = injector_->operations();
  injector_->Note("crash requested after " + std::to_string(at) + " operations");
  injector_->Crash(at);
}
void FaultStore::DropUnsynced() { injector_->DropUnsynced(); }
bool FaultStore::crashed() const { return injector_->crashed(); }
void FaultStore::Revive() { injector_->Revive(); }
std::vector<std::string> FaultStore::injected() const { return injector_->injected(); }

arrow::Result<std::shared_ptr<arrow::Buffer>> FaultStore::Get(const std::string& path) {
  return Run<std::shared_ptr<arrow::Buffer>>(injector_.get(), "get", path, false,
                                             [&] { return target()->Get(path); });
}

arrow::Result<std::shared_ptr<arrow::Buffer>> FaultStore::GetRange(const std::string& path,
                                                                   int64_t offset, int64_t length) {
  return Run<std::shared_ptr<arrow::Buffer>>(
      injector_.get(), "get_range", path, false,
      [&] { return target()->GetRange(path, offset, length); });
}

arrow::Result<ObjectMeta> FaultStore::Head(const std::string& path) {
  return Run<ObjectMeta>(injector_.get(), "head", path, false,
                         [&] { return target()->Head(path); });
}

arrow::Status FaultStore::Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) {
  return RunStatus(injector_.get(), "put", path, true, [&] { return target()->Put(path, data); });
}

arrow::Status FaultStore::PutDerived(const std::string& path,
                                     const std::shared_ptr<arrow::Buffer>& data) {
  return RunStatus(injector_.get(), "put", path, true, [&] { return target()->PutDerived(path, data); });
}

arrow::Result<bool> FaultStore::PutIfAbsentVisible(const std::string& path,
                                                   const std::shared_ptr<arrow::Buffer>& data,
                                                   const std::function<void()>& visible) {
  return Run<bool>(injector_.get(), "put_if_absent", path, true,
                   [&] { return target()->PutIfAbsentVisible(path, data, visible); });
}

arrow::Result<bool> FaultStore::PutIfAbsent(const std::string& path,
                                            const std::shared_ptr<arrow::Buffer>& data) {
  return Run<bool>(injector_.get(), "put_if_absent", path, true,
                   [&] { return target()->PutIfAbsent(path, data); });
}

arrow::Result<bool> FaultStore::PutIfMatch(const std::string& path,
                                           const std::shared_ptr<arrow::Buffer>& data,
                                           const std::string& etag) {
  return Run<bool>(injector_.get(), "put_if_match", path, true,
                   [&] { return target()->PutIfMatch(path, data, etag); });
}

arrow::Result<std::shared_ptr<ObjectOutput>> FaultStore::OpenOutput(const std::string& path,
                                                                    const OutputOptions& options) {
  ARROW_ASSIGN_OR_RAISE(auto inner,
                        Run<std::shared_ptr<ObjectOutput>>(
                            injector_.get(), "open_output", path, false,
                            [&] { return target()->OpenOutput(path, options); }));
  auto stream = std::make_shared<FaultOutput>(std::move(inner), path, injector_);
  ARROW_RETURN_NOT_OK(injector_->Register(stream));
  return stream;
}

arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> FaultStore::OpenInput(
    const std::string& path) {
  return Run<std::shared_ptr<arrow::io::RandomAccessFile>>(
      injector_.get(), "open_input", path, false, [&] { return target()->OpenInput(path); });
}

arrow::Result<ObjectPage> FaultStore::ListPage(const ListPageRequest& request) {
  return Run<ObjectPage>(injector_.get(), "list", request.prefix, false,
                         [&] { return target()->ListPage(request); });
}

arrow::Result<std::vector<ObjectMeta>> FaultStore::ListAfter(const std::string& prefix,
                                                             const std::string& start_after) {
  return Run<std::vector<ObjectMeta>>(injector_.get(), "list", prefix, false,
                                      [&] { return target()->ListAfter(prefix, start_after); });
}

arrow::Result<std::vector<std::string>> FaultStore::ListChildren(const std::string& prefix) {
  return Run<std::vector<std::string>>(injector_.get(), "list_children", prefix, false,
                                       [&] { return target()->ListChildren(prefix); });
}

arrow::Status FaultStore::Delete(const std::string& path) {
  return RunStatus(injector_.get(), "delete", path, true, [&] { return target()->Delete(path); });
}

arrow::Status FaultStore::DeleteMany(const std::vector<std::string>& paths) {
  return RunStatus(injector_.get(), "delete_many", paths.empty() ? "" : paths.front(), true,
                   [&] { return target()->DeleteMany(paths); });
}

arrow::Status FaultStore::DeletePrefix(const std::string& prefix) {
  return RunStatus(injector_.get(), "delete_prefix", prefix, true,
                   [&] { return target()->DeletePrefix(prefix); });
}

arrow::Status FaultStore::RenamePrefix(const std::string& prefix, const std::string& to) {
  return RunStatus(injector_.get(), "rename_prefix", prefix, true,
                   [&] { return target()->RenamePrefix(prefix, to); });
}

}  // namespace timelake
