// ObjectStore: the one seam between timelake and storage.
//
// Every byte timelake reads or writes goes through an ObjectStore: the Delta log, data files,
// checkpoints, side files. Paths are relative to the store's root, '/'-separated, never starting
// with '/'. Implementations: LocalStore (a directory), MemoryStore (tests, fault injection); the
// cloud stores come later behind the same interface.
//
// Guarantees every implementation gives:
//  * PutIfAbsent is atomic: of any number of concurrent callers for one path, exactly one gets
//    `true`, and readers never see a partial object.
//  * Put replaces atomically (readers see the old or the new object, never a mix).
//  * When a write call returns OK the object is durable (for LocalStore: file and directory fsync).
//  * Get/Head of a missing object fail with a status for which IsNotFound() is true.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <arrow/buffer.h>
#include <arrow/io/interfaces.h>
#include <arrow/result.h>
#include <arrow/status.h>

namespace timelake {

struct ObjectMeta {
  std::string path;  // relative to the store root
  int64_t size = 0;
  int64_t modified_ms = 0;  // last modification, milliseconds since the epoch
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  /// The whole object.
  virtual arrow::Result<std::shared_ptr<arrow::Buffer>> Get(const std::string& path) = 0;
  /// `length` bytes from `offset` (fewer at the end of the object).
  virtual arrow::Result<std::shared_ptr<arrow::Buffer>> GetRange(const std::string& path,
                                                                 int64_t offset,
                                                                 int64_t length) = 0;
  virtual arrow::Result<ObjectMeta> Head(const std::string& path) = 0;

  /// Creates or replaces the object.
  virtual arrow::Status Put(const std::string& path, const std::shared_ptr<arrow::Buffer>& data) = 0;
  /// Creates the object only if nothing exists at `path`; returns false (and writes nothing)
  /// if something does.
  virtual arrow::Result<bool> PutIfAbsent(const std::string& path,
                                          const std::shared_ptr<arrow::Buffer>& data) = 0;
  /// A stream that writes a new object (for large files); the object becomes visible and durable
  /// when the stream is closed successfully. The caller must not write the same path twice.
  virtual arrow::Result<std::shared_ptr<arrow::io::OutputStream>> OpenOutput(
      const std::string& path) = 0;
  /// Random access for readers such as the Parquet reader.
  virtual arrow::Result<std::shared_ptr<arrow::io::RandomAccessFile>> OpenInput(
      const std::string& path) = 0;

  /// Every object whose path starts with `prefix`, sorted by path.
  virtual arrow::Result<std::vector<ObjectMeta>> List(const std::string& prefix) = 0;
  /// Names of the immediate "directories" under `prefix` (which is "" or ends in '/'), sorted.
  virtual arrow::Result<std::vector<std::string>> ListChildren(const std::string& prefix) = 0;

  /// Deletes the object; deleting a missing object is not an error.
  virtual arrow::Status Delete(const std::string& path) = 0;
  /// Deletes every object under `prefix` (which must end in '/').
  virtual arrow::Status DeletePrefix(const std::string& prefix) = 0;
  /// Moves every object under `prefix` to the same relative path under `to` in one atomic step:
  /// a reader sees all of them at the old place or all of them at the new one. Both must end in
  /// '/' and `to` must not exist. NotFound if nothing is under `prefix`; NotImplemented on stores
  /// that cannot do this atomically (object stores), where callers need another protocol.
  virtual arrow::Status RenamePrefix(const std::string& prefix, const std::string& to) {
    return arrow::Status::NotImplemented("this store cannot rename '", prefix, "' atomically");
  }

  /// The URL of the store root, without a trailing slash (file:///abs/path, memory://name, …).
  virtual std::string RootUrl() const = 0;
  /// A path other engines can open: an absolute file path for LocalStore, the URL otherwise.
  virtual std::string ExternalPath(const std::string& path) const = 0;
};

/// Joins path segments with '/', skipping empty ones.
std::string JoinPath(const std::string& a, const std::string& b);

}  // namespace timelake
