// Where the data file named by an `add` or `remove` action lives.
//
// Delta action paths are URI-encoded (RFC 2396) and relative to the table root, or absolute URIs
// for files outside the table folder (shallow clones, imports by other engines). Everything that
// turns an action's path into something to open, list or compare goes through this file: the
// scan planner, the last-value index, compaction and vacuum.
#pragma once

#include <string>
#include <string_view>

#include <arrow/result.h>

#include "timelake/store/object_store.h"

namespace timelake {

/// Decodes %XX escapes; anything else, a '%' not followed by two hex digits included, is kept as
/// it is. The result is bytes: an escape such as %FF yields a byte that is not UTF-8 on its own.
std::string UriDecode(std::string_view text);

/// `relative` (decoded, relative to a table folder) normalized: "." and empty segments dropped,
/// ".." resolved. Status::IOError if it leaves the table folder, names its `_delta_log/` or
/// `_timelake/` folder, names no file or holds a NUL byte. Every path read from a log or
/// checkpoint goes through here before anything opens it.
arrow::Result<std::string> ConfineToTable(const std::string& relative);

/// The decoded path of a data file relative to the table folder, normalized ("." and ".."
/// resolved). A path that leaves the table folder, names its `_delta_log/` or `_timelake/`
/// folder or holds a NUL byte is Status::IOError (a damaged or hostile log): paths from a log are data, not trust. A file
/// outside the table folder given as an absolute URI or path is Status::NotImplemented:
/// timelake reaches data only through the table's store.
arrow::Result<std::string> DataFileRelativePath(const std::string& add_path);

/// The store path (relative to the store root) of data file `add_path` of the table whose folder
/// is `table_path`. Errors as DataFileRelativePath.
arrow::Result<std::string> DataFileStorePath(const std::string& table_path,
                                             const std::string& add_path);

/// What another engine (DuckDB) opens for data file `add_path`: the store's external path of the
/// file, confined as DataFileRelativePath confines it. An absolute URI (file://, Spark's file:/,
/// s3://, ...) or path is accepted only where it names a file inside the table folder as the
/// store spells it; anything else is Status::IOError. The result is bytes, possibly not UTF-8.
arrow::Result<std::string> DataFileExternalPath(const ObjectStore& store, const std::string& table_path,
                                                const std::string& add_path);

}  // namespace timelake
