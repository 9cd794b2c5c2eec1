// Status conventions shared by the core.
//
// The core reports failures as arrow::Status. The binding layer maps status codes to the Python
// exceptions of the API contract: KeyError -> KeyError, AlreadyExists -> FileExistsError,
// Invalid/TypeError -> ValueError, everything else -> RuntimeError. Only KeyErrors made by
// TableNotFound() or VersionNotFound() become KeyError. Stores report a missing object
// with NotFound(), which carries a detail so callers can tell it from other I/O errors; it is never
// meant to surface to users as-is.
#pragma once

#include <string>

#include <arrow/status.h>

namespace timelake {

/// An I/O status saying that `path` does not exist in a store.
arrow::Status NotFound(const std::string& path);

/// True if `status` was made by NotFound().
bool IsNotFound(const arrow::Status& status);

/// A KeyError status saying that table `name` does not exist. Only statuses made here become
/// Python KeyErrors; Arrow's own KeyErrors (unknown functions, fields) are internal failures.
arrow::Status TableNotFound(const std::string& name);

/// A KeyError status, like TableNotFound(), for a handle whose table was dropped (and maybe
/// created again) after the handle was opened.
arrow::Status TableDropped(const std::string& name);

/// True if `status` was made by TableNotFound() or TableDropped().
bool IsTableNotFound(const arrow::Status& status);

/// A KeyError status for a table version that cannot be read (time travel): `message` says which
/// can. Becomes a Python KeyError like TableNotFound().
arrow::Status VersionNotFound(const std::string& message);

/// True if `status` was made by VersionNotFound().
bool IsVersionNotFound(const arrow::Status& status);

/// A commit that could not be rebased over what concurrent writers committed (they changed the
/// schema, removed the files it rewrites, or won too many races). Distinct from I/O errors:
/// nothing is wrong with storage, and the caller may retry the operation. Python: RuntimeError.
arrow::Status CommitConflict(const std::string& message);

/// True if `status` was made by CommitConflict().
bool IsCommitConflict(const arrow::Status& status);

/// `status` (an error) marked as one after which the write it reports may still have taken
/// effect, or take effect later: a request that timed out or lost its connection after it was
/// sent. Stores mark such errors; errors without the mark mean the write did not happen.
arrow::Status OutcomeUnknown(const arrow::Status& status);

/// True if `status` was marked by OutcomeUnknown().
bool IsOutcomeUnknown(const arrow::Status& status);

/// `status` (an error) marked as a write that took effect (readers can see it) but could not be
/// made durable (an fsync failed after the rename or link): it must not be acknowledged.
arrow::Status NotDurable(const arrow::Status& status);

/// True if `status` was marked by NotDurable().
bool IsNotDurable(const arrow::Status& status);

/// `status` (an error) marked as the store being unreachable or failing (timeouts, resets, 5xx,
/// throttling) after every retry: nothing is known to be wrong with what is stored, and the call
/// may work later. Readers report such errors as they are, never as damage.
arrow::Status StoreUnavailable(const arrow::Status& status);

/// True if `status` was marked by StoreUnavailable() or OutcomeUnknown() (a write that failed
/// the same way).
bool IsStoreUnavailable(const arrow::Status& status);

}  // namespace timelake
