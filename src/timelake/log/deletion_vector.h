// Reading Delta deletion vectors: which rows of a data file another engine deleted.
//
// A deletion vector (DV) is a RoaringBitmapArray of the deleted row indexes (0-based positions
// in the file), stored inline in the log (Z85 text) or in a `deletion_vector_<uuid>.bin` file
// beside the data (4-byte big-endian length, the bitmap, 4-byte big-endian CRC-32). The bitmap
// is the "portable" 64-bit Roaring format behind a magic number: a count of 32-bit bitmaps, each
// with the high 32 bits as its key, in the standard portable 32-bit Roaring serialization.
// timelake only reads DVs (tables that use them are read-only to it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <arrow/result.h>

#include "timelake/log/actions.h"

namespace timelake {

class ObjectStore;

/// Z85 (ZeroMQ base-85) decoding; the text's length must be a multiple of 5.
arrow::Result<std::string> Z85Decode(std::string_view text);

/// The sorted row indexes of a serialized RoaringBitmapArray (magic number included); an IOError,
/// before expanding anything, if its headers promise more than `limit` rows.
arrow::Result<std::vector<uint64_t>> ParseRoaringBitmapArray(std::string_view bytes,
                                                             size_t limit = SIZE_MAX);

/// The store path of the DV file `dv` names, for the table at `table_path` ("u" and "p" kinds).
arrow::Result<std::string> DeletionVectorPath(const std::string& table_path, const DeletionVector& dv);

/// The sorted row indexes `dv` deletes (read from the store unless inline); checks the length,
/// the CRC and the cardinality the log records.
arrow::Result<std::vector<uint64_t>> ReadDeletionVector(ObjectStore* store, const std::string& table_path,
                                                        const DeletionVector& dv);

}  // namespace timelake
