#include "timelake/util/status.h"

#include <memory>

namespace timelake {
namespace {

class NotFoundDetail : public arrow::StatusDetail {
 public:
  static constexpr const char* kTypeId = "timelake::NotFound";
  const char* type_id() const override { return kTypeId; }
  std::string ToString() const override { return "object not found"; }
};

class TableNotFoundDetail : public arrow::StatusDetail {
 public:
  static constexpr const char* kTypeId = "timelake::TableNotFound";
  const char* type_id() const override { return kTypeId; }
  std::string ToString() const override { return "table not found"; }
};

class VersionNotFoundDetail : public arrow::StatusDetail {
 public:
  static constexpr const char* kTypeId = "timelake::VersionNotFound";
  const char* type_id() const override { return kTypeId; }
  std::string ToString() const override { return "version not found"; }
};

class CommitConflictDetail : public arrow::StatusDetail {
 public:
  static constexpr const char* kTypeId = "timelake::CommitConflict";
  const char* type_id() const override { return kTypeId; }
  std::string ToString() const override { return "commit conflict"; }
};

class OutcomeUnknownDetail : public arrow::StatusDetail {
 public:
  static constexpr const char* kTypeId = "timelake::OutcomeUnknown";
  const char* type_id() const override { return kTypeId; }
  std::string ToString() const override { return "outcome unknown"; }
};

class NotDurableDetail : public arrow::StatusDetail {
 public:
  static constexpr const char* kTypeId = "timelake::NotDurable";
  const char* type_id() const override { return kTypeId; }
  std::string ToString() const override { return "not durable"; }
};

class StoreUnavailableDetail : public arrow::StatusDetail {
 public:
  static constexpr const char* kTypeId = "timelake::StoreUnavailable";
  const char* type_id() const override { return kTypeId; }
  std::string ToString() const override { return "store unavailable"; }
};

bool HasDetail(const arrow::Status& status, const char* type_id) {
  return status.detail() != nullptr && std::string(status.detail()->type_id()) == type_id;
}

}  // namespace

arrow::Status CommitConflict(const std::string& message) {
  return arrow::Status(arrow::StatusCode::IOError, message,
                       std::make_shared<CommitConflictDetail>());
}

bool IsCommitConflict(const arrow::Status& status) {
  return HasDetail(status, CommitConflictDetail::kTypeId);
}

arrow::Status OutcomeUnknown(const arrow::Status& status) {
  return status.WithDetail(std::make_shared<OutcomeUnknownDetail>());
}

bool IsOutcomeUnknown(const arrow::Status& status) {
  return HasDetail(status, OutcomeUnknownDetail::kTypeId);
}

arrow::Status NotDurable(const arrow::Status& status) {
  return status.WithDetail(std::make_shared<NotDurableDetail>());
}

bool IsNotDurable(const arrow::Status& status) { return HasDetail(status, NotDurableDetail::kTypeId); }

arrow::Status StoreUnavailable(const arrow::Status& status) {
  return status.WithDetail(std::make_shared<StoreUnavailableDetail>());
}

bool IsStoreUnavailable(const arrow::Status& status) {
  return HasDetail(status, StoreUnavailableDetail::kTypeId) || IsOutcomeUnknown(status);
}

arrow::Status TableNotFound(const std::string& name) {
  return arrow::Status(arrow::StatusCode::KeyError, "table '" + name + "' does not exist",
                       std::make_shared<TableNotFoundDetail>());
}

arrow::Status TableDropped(const std::string& name) {
  return arrow::Status(arrow::StatusCode::KeyError,
                       "table '" + name + "' was dropped (and maybe created again) after this "
                       "handle was opened; nothing was written. Open it again with lake.table('" +
                       name + "')",
                       std::make_shared<TableNotFoundDetail>());
}

bool IsTableNotFound(const arrow::Status& status) {
  return status.IsKeyError() && HasDetail(status, TableNotFoundDetail::kTypeId);
}

arrow::Status VersionNotFound(const std::string& message) {
  return arrow::Status(arrow::StatusCode::KeyError, message, std::make_shared<VersionNotFoundDetail>());
}

bool IsVersionNotFound(const arrow::Status& status) {
  return status.IsKeyError() && HasDetail(status, VersionNotFoundDetail::kTypeId);
}

arrow::Status NotFound(const std::string& path) {
  return arrow::Status(arrow::StatusCode::IOError, "object not found: " + path,
                       std::make_shared<NotFoundDetail>());
}

bool IsNotFound(const arrow::Status& status) {
  return HasDetail(status, NotFoundDetail::kTypeId);
}

}  // namespace timelake
