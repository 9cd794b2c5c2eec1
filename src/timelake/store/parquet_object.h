// Reading Parquet objects out of an ObjectStore.
//
// Every Parquet read in the core (checkpoints, last-value index records, data files) goes through
// here, so that every one of them verifies page checksums where the writer stored them and every
// failure names the object it came from. A file's bytes are never trusted silently: a page whose
// CRC does not match fails the read instead of decoding to wrong values. (Pages written without a
// CRC, as most engines other than timelake write them, are read unverified.)
//
// Errors: a failure to open the object is the store's status, which names it (a missing object
// stays recognisable with IsNotFound()); anything that goes wrong while reading (I/O, a truncated
// or corrupt file, a checksum mismatch) is an IOError whose message starts with "cannot read
// Parquet object '<path>'". Thread-safe: no state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <arrow/buffer.h>
#include <arrow/record_batch.h>
#include <arrow/result.h>
#include <arrow/table.h>
#include <parquet/properties.h>

#include "timelake/store/object_store.h"

namespace timelake {

/// Reader properties for every Parquet read of the core: page checksums are verified.
parquet::ReaderProperties VerifyingReaderProperties();

/// Reads the whole Parquet object at `path` (relative to the store root) into a table.
arrow::Result<std::shared_ptr<arrow::Table>> ReadParquetTable(ObjectStore* store,
                                                              const std::string& path);

/// Opens the Parquet object at `path` for reading in batches of at most `batch_rows` rows, a row
/// group's pages at a time (an object up to 32 MiB is fetched whole first). Errors as
/// ReadParquetTable's, from ReadNext() too. The top-level string or binary columns named in
/// `as_dictionary` are read as dictionary arrays (int32 indices), as Parquet's dictionary
/// encoding holds them, without building each row's value.
arrow::Result<std::shared_ptr<arrow::RecordBatchReader>> ReadParquetBatches(
    ObjectStore* store, const std::string& path, int64_t batch_rows,
    const std::vector<std::string>& as_dictionary = {});

/// Reads a Parquet file held in memory; `origin` is the object it came from, for errors.
arrow::Result<std::shared_ptr<arrow::Table>> ReadParquetBuffer(
    const std::shared_ptr<arrow::Buffer>& data, const std::string& origin);

/// Part of a Parquet file held in memory: the top-level columns named in `columns` (those the
/// file lacks are left out), of the row groups where at least one of the leaf columns named in
/// `present` (dot paths such as "add.path") may hold a value; a row group whose column chunk
/// statistics say every such leaf is null in every row is not read (nor is a leaf missing from
/// the file counted as present). `*file_rows`, when given, gets the row count of the whole file.
/// Errors as ReadParquetBuffer's.
arrow::Result<std::shared_ptr<arrow::Table>> ReadParquetBufferPart(
    const std::shared_ptr<arrow::Buffer>& data, const std::string& origin,
    const std::vector<std::string>& columns, const std::vector<std::string>& present,
    int64_t* file_rows = nullptr);

}  // namespace timelake
