// The nanobind module `timelake._core`: converts between Python and the C++ core, and only that.
//
// Arrow data crosses as Arrow C stream/schema PyCapsules (no libarrow_python). Every call into the
// core releases the GIL. Core statuses become the exceptions of the API contract here:
// table not found -> KeyError, AlreadyExists -> FileExistsError, Invalid/TypeError -> ValueError,
// Cancelled -> KeyboardInterrupt (or whatever the signal handler raised), anything else ->
// RuntimeError. Long calls (append, maintain) get an InterruptCheck that runs Python's signal
// handlers between batches, so Ctrl-C stops them.
#include <algorithm>
#include <Python.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <map>
#include <optional>
#include <type_traits>
#include <string>
#include <vector>

#include <arrow/c/abi.h>
#include <arrow/c/bridge.h>
#include <arrow/record_batch.h>
#include <arrow/table.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "timelake/lake.h"
#include "timelake/log/schema.h"
#include <arrow/compute/initialize.h>

#include "timelake/scan/file_cache.h"
#include "timelake/scan/bucket_scan.h"
#include "timelake/scan/selection_reader.h"
#include "timelake/table/table.h"
#include "timelake/table/lake_runtime.h"
#include "timelake/util/status.h"
#include "timelake/util/time.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace timelake {
namespace {

/// Ctrl-C for one core call. The check it hands to the core runs Python's signal handlers, at
/// most every kInterval (each run takes the GIL), and keeps the exception a handler raised
/// (KeyboardInterrupt for SIGINT) so that the call raises it when it returns. Handlers run in the
/// main thread only: calls from other threads get no check. Construct and destroy with the GIL.
class PythonInterrupt {
 public:
  static constexpr std::chrono::milliseconds kInterval{50};

  PythonInterrupt() {
    nb::object main = nb::module_::import_("threading").attr("main_thread")().attr("ident");
    main_thread_ = nb::cast<unsigned long>(main) == PyThread_get_thread_ident();
  }
  ~PythonInterrupt() {
    Py_XDECREF(type_);
    Py_XDECREF(value_);
    Py_XDECREF(traceback_);
  }
  PythonInterrupt(const PythonInterrupt&) = delete;
  PythonInterrupt& operator=(const PythonInterrupt&) = delete;

  /// The check for the core's options; valid while this object lives.
  InterruptCheck check() {
    if (!main_thread_) return {};
    return [this] { return Check(); };
  }

  /// If `status` is the cancellation this check caused, sets the handler's exception as the
  /// current Python error and returns true.
  bool Restore(const arrow::Status& status) {
    if (!status.IsCancelled() || type_ == nullptr) return false;
    PyErr_Restore(type_, value_, traceback_);
    type_ = value_ = traceback_ = nullptr;
    return true;
  }

 private:
  arrow::Status Check() {  // without the GIL, on the thread that made the call
    if (type_ != nullptr) return arrow::Status::Cancelled("interrupted");
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return arrow::Status::OK();
    next_ = now + kInterval;
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return arrow::Status::OK();
    PyErr_Fetch(&type_, &value_, &traceback_);
    return arrow::Status::Cancelled("interrupted");
  }

  bool main_thread_ = false;
  std::chrono::steady_clock::time_point next_{};
  PyObject* type_ = nullptr;
  PyObject* value_ = nullptr;
  PyObject* traceback_ = nullptr;
};

[[noreturn]] void Raise(const arrow::Status& status, PythonInterrupt* interrupt = nullptr) {
  if (interrupt != nullptr && interrupt->Restore(status)) throw nb::python_error();
  PyObject* type = PyExc_RuntimeError;
  switch (status.code()) {
    case arrow::StatusCode::KeyError:
      if (IsTableNotFound(status) || IsVersionNotFound(status)) type = PyExc_KeyError;
      break;
    case arrow::StatusCode::AlreadyExists: type = PyExc_FileExistsError; break;
    case arrow::StatusCode::Invalid:
    case arrow::StatusCode::TypeError:
      type = PyExc_ValueError;
      break;
    case arrow::StatusCode::Cancelled: type = PyExc_KeyboardInterrupt; break;
    default: break;
  }
  // Messages may quote user bytes (names with NULs, paths that are not UTF-8): keep all of it,
  // escaping what is not UTF-8, rather than failing with a UnicodeDecodeError.
  const std::string& message = status.message();
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()),
                                        "backslashreplace");
  if (text == nullptr) throw nb::python_error();
  PyErr_SetObject(type, text);
  Py_DECREF(text);
  throw nb::python_error();
}

void Check(const arrow::Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T Unwrap(arrow::Result<T> result) {
  if (!result.ok()) Raise(result.status());
  return std::move(result).ValueUnsafe();
}

/// Runs `call` (a core operation returning a Status or Result) without the GIL, then turns a
/// failure into the contract's Python exception and a Result into its value (GIL held again).
/// With `interrupt`, a cancellation it caused raises the signal handler's exception.
template <typename F>
auto Released(F&& call, PythonInterrupt* interrupt = nullptr) {
  using R = decltype(call());
  std::optional<R> out;
  {
    nb::gil_scoped_release release;
    out.emplace(call());
  }
  if constexpr (std::is_same_v<R, arrow::Status>) {
    if (!out->ok()) Raise(*out, interrupt);
  } else {
    if (!out->ok()) Raise(out->status(), interrupt);
    return std::move(*out).ValueUnsafe();
  }
}

void* CapsulePointer(nb::handle capsule, const char* name) {
  if (!PyCapsule_IsValid(capsule.ptr(), name)) {
    PyErr_Format(PyExc_ValueError, "expected a PyCapsule named '%s', got %s", name,
                 Py_TYPE(capsule.ptr())->tp_name);
    throw nb::python_error();
  }
  return PyCapsule_GetPointer(capsule.ptr(), name);
}

std::shared_ptr<arrow::Schema> ImportSchemaCapsule(nb::handle capsule) {
  auto* c_schema = static_cast<ArrowSchema*>(CapsulePointer(capsule, "arrow_schema"));
  // ImportSchema moves out of the struct; the capsule's destructor then sees it released.
  return Unwrap(arrow::ImportSchema(c_schema));
}

void ReleaseSchemaCapsule(PyObject* capsule) {
  auto* schema = static_cast<ArrowSchema*>(PyCapsule_GetPointer(capsule, "arrow_schema"));
  if (schema == nullptr) return;
  if (schema->release != nullptr) schema->release(schema);
  delete schema;
}

nb::object ExportSchemaCapsule(const arrow::Schema& schema) {
  auto* c_schema = new ArrowSchema();
  auto status = arrow::ExportSchema(schema, c_schema);
  if (!status.ok()) {
    delete c_schema;
    Raise(status);
  }
  return nb::steal(PyCapsule_New(c_schema, "arrow_schema", ReleaseSchemaCapsule));
}

nb::dict ContractDict(const Contract& c) {
  nb::dict d;
  d["time_column"] = c.time_column.empty() ? nb::none() : nb::cast(c.time_column);
  d["series_key"] = nb::cast(c.series_key);
  d["chunk"] = c.chunk == ChunkWidth::kNone ? nb::none() : nb::cast(ChunkWidthName(c.chunk));
  d["dedup"] = nb::cast(DedupPolicyName(c.dedup));
  d["retention"] = c.retention.empty() ? nb::none() : nb::cast(c.retention);
  return d;
}

nb::dict MaintainDict(const MaintainResult& r) {
  nb::dict d;
  d["partitions_compacted"] = r.partitions_compacted;
  d["files_rewritten"] = r.files_rewritten;
  d["files_written"] = r.files_written;
  d["rows_rewritten"] = r.rows_rewritten;
  d["duplicates_removed"] = r.duplicates_removed;
  d["partitions_dropped"] = r.partitions_dropped;
  d["snapshots_expired"] = r.snapshots_expired;
  d["objects_deleted"] = r.objects_deleted;
  d["seconds"] = r.seconds;
  return d;
}

void ReleaseStreamCapsule(PyObject* capsule) {
  auto* stream = static_cast<ArrowArrayStream*>(PyCapsule_GetPointer(capsule, "arrow_array_stream"));
  if (stream == nullptr) return;
  if (stream->release != nullptr) stream->release(stream);
  delete stream;
}

nb::object ExportTableCapsule(const std::shared_ptr<arrow::Table>& table) {
  auto* stream = new ArrowArrayStream();
  auto reader = std::make_shared<arrow::TableBatchReader>(table);
  auto status = arrow::ExportRecordBatchReader(reader, stream);
  if (!status.ok()) {
    delete stream;
    Raise(status);
  }
  return nb::steal(PyCapsule_New(stream, "arrow_array_stream", ReleaseStreamCapsule));
}

/// `held` under a deleter that lets go of the GIL while the object goes away. A Lake or Table
/// being destroyed waits for its handles' queued upkeep (checkpoints, index records, table
/// heads: requests to the store); Python destroys it wherever its last reference drops, with
/// the GIL held, which would stall every other Python thread for as long (and for ever when
/// one of them serves those requests, as the tests' in-process proxies do).
template <typename T>
std::shared_ptr<T> DroppedWithoutGil(std::shared_ptr<T> held) {
  T* object = held.get();
  return std::shared_ptr<T>(object, [held = std::move(held)](T*) mutable {
    if (PyGILState_Check()) {
      nb::gil_scoped_release release;
      held.reset();
    } else {
      held.reset();  // dropped by a thread without the GIL (a C++ thread)
    }
  });
}

std::shared_ptr<Lake> OpenLake(const std::string& location,
                               const std::map<std::string, std::string>& options) {
  return DroppedWithoutGil(Released([&] { return Lake::Open(location, options); }));
}

}  // namespace
}  // namespace timelake

NB_MODULE(_core, m) {
  using namespace timelake;
  m.doc() = "timelake C++ core (use the `timelake` package, not this module)";
  m.attr("__version__") = TIMELAKE_VERSION;
  m.def("_drain_upkeep", [] {
    nb::gil_scoped_release release;
    DrainEveryUpkeep();
  }, "Waits for the background upkeep of every live Lake's handles (registered with atexit).");

  m.def("duration_us", [](const std::string& text) { return Unwrap(ParseDuration(text)); },
        "A duration such as \"90d\" in microseconds (ValueError for bad text), as the contract reads it.");

  m.def("_warm", [] {
    nb::gil_scoped_release release;
    // Arrow's compute kernels register on first use (~4 ms): paid here, on the thread that
    // makes the spare DuckDB database at import, rather than by a process's first Lake.
    (void)arrow::compute::Initialize();
  }, "Initialises what the core would initialise on its first use.");

  m.def("storage_schema", [](nb::handle schema_capsule) {
    auto declared = ImportSchemaCapsule(schema_capsule);
    return ExportSchemaCapsule(*Unwrap(StorageSchemaOf(*declared)));
  }, "The schema the files of a table with this declared schema store (log/schema.h).");

  nb::class_<Table>(m, "Table")
      .def_prop_ro("name", &Table::name)
      .def_prop_ro("location", &Table::location)
      .def_prop_ro("version", [](Table& t) {
        nb::gil_scoped_release release;  // waits for an append running on another thread
        return t.version();
      })
      .def("schema_capsule", [](Table& t) { return ExportSchemaCapsule(*t.schema()); })
      .def_prop_ro("contract", [](Table& t) { return ContractDict(t.contract()); })
      .def("append",
           [](Table& t, nb::handle stream_capsule, std::optional<std::string> batch_id,
              std::optional<bool> maintain, bool streamed, int64_t batch_version,
              std::vector<std::string> replace) {
             auto* stream = static_cast<ArrowArrayStream*>(
                 CapsulePointer(stream_capsule, "arrow_array_stream"));
             auto reader = Unwrap(arrow::ImportRecordBatchReader(stream));
             PythonInterrupt interrupt;
             // The reader is released without the GIL too: a producer may hold it for long.
             AppendResult r = Released(
                 [&] {
                   AppendOptions options{batch_id, batch_version, maintain, interrupt.check()};
                   options.copy_input = streamed;  // an in-memory table is the caller's anyway
                   options.replace = std::move(replace);
                   auto result = t.Append(reader.get(), options);
                   reader.reset();
                   return result;
                 },
                 &interrupt);
             nb::dict d;
             d["rows"] = r.rows;
             d["files"] = r.files;
             d["bytes"] = r.bytes;
             d["version"] = r.version;
             d["commit_ms"] = r.commit_ms;
             d["attempts"] = r.attempts;
             d["duplicate"] = r.duplicate;
             if (r.maintenance) {
               nb::dict maintenance = MaintainDict(*r.maintenance);
               if (r.maintenance_error) maintenance["error"] = *r.maintenance_error;
               d["maintenance"] = maintenance;
             }
             return d;
           },
           "stream"_a, "batch_id"_a = nb::none(), "maintain"_a = nb::none(), "streamed"_a = true,
           "batch_version"_a = 0, "replace"_a = std::vector<std::string>{})
      .def("recorded_batch_version",
           [](Table& t, const std::string& batch_id) {
             return Released([&] { return t.RecordedBatchVersion(batch_id); });
           })
      // Both wait for the table's lock, which an append or a refresh on another thread may
      // hold across requests: waiting with the GIL would stall every Python thread meanwhile
      // (an in-process server among them) for as long as that request takes.
      .def_prop_ro("id", [](Table& t) {
        nb::gil_scoped_release release;
        return t.id();
      })
      .def_prop_ro("properties", [](Table& t) {
        nb::gil_scoped_release release;
        return t.properties();  // converted to a dict after the lambda, with the GIL again
      })
      .def("maintain",
           [](Table& t, bool compact, bool retention, bool expire) {
             PythonInterrupt interrupt;
             MaintainOptions options{compact, retention, expire, interrupt.check()};
             return MaintainDict(Released([&] { return t.Maintain(options); }, &interrupt));
           },
           "compact"_a = true, "retention"_a = true, "expire"_a = true)
      .def("info",
           [](Table& t) {
             TableInfo info = Released([&] { return t.Info(); });
             nb::dict size, index, d;
             size["rows"] = info.rows;
             size["files"] = info.files;
             size["bytes"] = info.bytes;
             if (info.index_error) {
               index["series"] = nb::none();
               index["version"] = nb::none();
               index["error"] = *info.index_error;
             } else {
               index["series"] = info.index_series;
               index["version"] = info.index_version;
             }
             index["bytes"] = info.index_bytes;
             d["contract"] = ContractDict(info.contract);
             d["size"] = size;
             d["snapshots"] = info.snapshots;
             d["manifests"] = info.manifests;
             d["last_value_index"] = index;
             return d;
           })
      .def("latest",
           [](Table& t) {
             return ExportTableCapsule(Released([&] { return t.Latest(); }));
           })
      .def("add_columns",
           [](Table& t, nb::handle schema_capsule) {
             auto schema = ImportSchemaCapsule(schema_capsule);
             return Released([&] { return t.AddColumns(schema->fields()); });
           })
      .def("widen_columns",
           [](Table& t, nb::handle schema_capsule) {
             auto schema = ImportSchemaCapsule(schema_capsule);
             return Released([&] { return t.WidenColumns(schema->fields()); });
           })
      .def("refresh",
           [](Table& t) {
             Released([&] { return t.Refresh(); });
           })
      .def("refresh_if_due",
           [](Table& t) {
             Released([&] { return t.RefreshIfDue(); });
           })
      .def(
          "scan",
          [](Table& t, std::optional<int64_t> min_time, std::optional<int64_t> max_time,
             std::map<std::string, ScanKeyValue> key_equals, std::optional<int64_t> version,
             std::optional<int64_t> timestamp_ms) {
            ScanFilter filter{min_time, max_time, std::move(key_equals)};
            return Released([&] { return t.ScanAsOf(version, timestamp_ms, filter); });
          },
          "min_time"_a = nb::none(), "max_time"_a = nb::none(),
          "key_equals"_a = std::map<std::string, ScanKeyValue>{}, "version"_a = nb::none(),
          "timestamp_ms"_a = nb::none());

  // The scan plan, read-only: what sql() renders into DuckDB views (see scan/scan_planner.h).
  nb::class_<ScanFile>(m, "ScanFile")
      .def_ro("path", &ScanFile::path)
      .def_ro("store_path", &ScanFile::store_path)
      .def_ro("size", &ScanFile::size)
      .def_ro("chunk", &ScanFile::chunk)
      .def_ro("seq", &ScanFile::seq)
      .def_ro("order", &ScanFile::order)
      .def_ro("rows", &ScanFile::rows)
      .def_ro("dedup", &ScanFile::dedup)
      .def_ro("deleted_rows", &ScanFile::deleted_rows)
      .def_ro("partition_values", &ScanFile::partition_values)
      .def("__repr__", [](const ScanFile& f) {
        return "ScanFile(path=" + nb::cast<std::string>(nb::repr(nb::cast(f.path))) +
               ", seq=" + std::to_string(f.seq) + ", dedup=" + (f.dedup ? "True" : "False") + ")";
      });

  nb::class_<DedupOrder>(m, "DedupOrder")
      .def_ro("keys", &DedupOrder::keys)
      .def_ro("newest_first", &DedupOrder::newest_first);

  nb::class_<ScanPlan>(m, "ScanPlan")
      .def_ro("version", &ScanPlan::version)
      .def_ro("evolved", &ScanPlan::evolved)
      .def_ro("read_by_name", &ScanPlan::read_by_name)
      .def_ro("widened", &ScanPlan::widened)
      .def_ro("physical_names", &ScanPlan::physical_names)
      .def_prop_ro("files", [](const ScanPlan& p) { return p.files; })
      .def_ro("files_pruned", &ScanPlan::files_pruned)
      .def_prop_ro("declared_schema",
                   [](const ScanPlan& p) { return ExportSchemaCapsule(*p.declared); })
      .def_prop_ro("file_schema",
                   [](const ScanPlan& p) { return ExportSchemaCapsule(*p.file_schema); })
      .def_prop_ro("storage_schema",
                   [](const ScanPlan& p) { return ExportSchemaCapsule(*p.storage); })
      .def_ro("restored", &ScanPlan::restored)
      .def_ro("dedup_order", &ScanPlan::dedup_order)
      .def_ro("partition_columns", &ScanPlan::partition_columns)
      .def_prop_ro("contract", [](const ScanPlan& p) { return ContractDict(p.contract); });

  // The rows a plan's filter admits, read by the core (scan/selection_reader.h): (stream capsule,
  // counters), or None when the plan needs what only the query engine does.
  m.def(
      "read_selection",
      [](const ScanPlan& plan, const std::vector<std::string>& paths, const std::vector<std::string>& columns,
         const std::string& order, std::optional<int64_t> limit,
         const std::vector<std::tuple<std::string, std::string, std::string, int64_t, int64_t>>& aggregates,
         const std::vector<std::tuple<std::string, std::string, double, int64_t, bool>>& where,
         const std::vector<std::tuple<size_t, bool>>& sort,
         std::map<std::string, std::vector<ScanKeyValue>> key_in,
         std::optional<std::tuple<std::string, bool>> then_by) -> nb::object {
        SelectionShape shape;
        shape.key_in = std::move(key_in);
        if (then_by) shape.then_by = std::make_pair(std::get<0>(*then_by), std::get<1>(*then_by));
        if (order == "asc") {
          shape.order = SelectionShape::Order::kTimeAscending;
        } else if (order == "desc") {
          shape.order = SelectionShape::Order::kTimeDescending;
        } else if (order != "file") {
          throw nb::value_error("order must be 'file', 'asc' or 'desc'");
        }
        shape.limit = limit;
        for (const auto& [column, op, number, integer, is_integer] : where) {
          if (op != "=" && op != "<>" && op != "<" && op != "<=" && op != ">" && op != ">=") {
            throw nb::value_error("unknown comparison");
          }
          shape.where.push_back({column, op, number, integer, is_integer});
        }
        std::vector<SelectionAggregate> folds;
        for (const auto& [function, column, name, width, origin] : aggregates) {
          folds.push_back({function, column, name, width, origin});
        }
        const bool grouped = std::any_of(folds.begin(), folds.end(),
                                         [](const SelectionAggregate& a) { return a.function == "time_bucket"; });
        const bool by_key = std::any_of(folds.begin(), folds.end(),
                                        [](const SelectionAggregate& a) { return a.function == "group"; });
        std::vector<ScanOrder> scan_order;
        for (const auto& [column, descending] : sort) scan_order.push_back({column, descending});
        // Grouped: the rows come in file order and the buckets are ordered after folding.
        SelectionShape read_shape = shape;
        if (grouped) {
          read_shape.order = SelectionShape::Order::kFile;
          read_shape.limit.reset();
        }
        SelectionCounters counters;
        arrow::Result<std::shared_ptr<arrow::Table>> rows;
        bool interrupted = false;
        {
          nb::gil_scoped_release release;
          const bool scanned = !folds.empty() && plan.filter.key_equals.empty() && shape.key_in.empty() &&
                               shape.where.empty();
          if (by_key && !scanned) {
            rows = arrow::Status::NotImplemented("grouping by a column with a key condition");
          } else if (scanned) {
            // Every series: a scan folding rows into buckets (scan/bucket_scan.h), as long as the
            // table. It runs on a thread of its own while this one looks for Ctrl-C every 50 ms
            // (Python runs signal handlers only on its main thread, with the GIL).
            std::atomic<bool> cancel{false};
            std::promise<void> finished;
            std::future<void> done = finished.get_future();
            std::thread worker([&] {
              rows = ScanAggregates(plan, paths, folds, shape.order == SelectionShape::Order::kTimeDescending,
                                    grouped || by_key ? shape.limit : std::nullopt, &counters, &cancel,
                                    scan_order);
              finished.set_value();
            });
            while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
              nb::gil_scoped_acquire acquire;
              if (PyErr_CheckSignals() != 0) {
                interrupted = true;
                cancel = true;
                break;
              }
            }
            worker.join();
          } else {
            rows = ReadSelection(plan, paths, columns, read_shape, &counters);
          }
          if (rows.ok() && !folds.empty() && !scanned) {
            rows = AggregateSelection(**rows, folds, shape.order == SelectionShape::Order::kTimeDescending,
                                      grouped ? shape.limit : std::nullopt);
          }
        }
        if (interrupted) throw nb::python_error();  // KeyboardInterrupt (or what the handler raised)
        if (!rows.ok() && rows.status().IsNotImplemented()) return nb::none();
        if (!rows.ok()) Raise(rows.status());
        nb::dict read;
        read["files"] = counters.files;
        read["row_groups"] = counters.row_groups;
        read["pages"] = counters.pages;
        read["pages_skipped"] = counters.pages_skipped;
        return nb::make_tuple(ExportTableCapsule(*rows), read);
      },
      "plan"_a, "paths"_a, "columns"_a, "order"_a = "file", "limit"_a = nb::none(),
      "aggregates"_a = std::vector<std::tuple<std::string, std::string, std::string, int64_t, int64_t>>{},
      "where"_a = std::vector<std::tuple<std::string, std::string, double, int64_t, bool>>{},
      "sort"_a = std::vector<std::tuple<size_t, bool>>{},
      "key_in"_a = std::map<std::string, std::vector<ScanKeyValue>>{}, "then_by"_a = nb::none());

  // The plan with only the files at `store_paths` (in the plan's order; paths it does not list are
  // ignored): a rollup refresh reads just the files a diff of two versions found changed.
  m.def("plan_subset", [](const ScanPlan& plan, const std::set<std::string>& store_paths) {
    ScanPlan subset = plan;
    std::erase_if(subset.files, [&](const ScanFile& f) { return !store_paths.count(f.store_path); });
    return subset;
  });

  // The copies of one sql() statement, kept from eviction until released (scan/file_cache.h).
  nb::class_<CachePin>(m, "CachePin").def("release", &CachePin::Release);

  nb::class_<Lake>(m, "Lake")
      .def_static("open", &OpenLake, "location"_a, "storage_options"_a)
      .def_prop_ro("location", &Lake::location)
      .def("create_table",
           [](Lake& lake, const std::string& name, nb::handle schema_capsule,
              std::optional<std::string> time_column, std::optional<std::vector<std::string>> series_key,
              std::optional<std::string> chunk, std::optional<std::string> retention,
              std::optional<std::string> dedup, std::map<std::string, std::string> properties) {
             auto schema = ImportSchemaCapsule(schema_capsule);
             ContractOptions options{time_column, series_key, chunk, retention, dedup, properties};
             return DroppedWithoutGil(Released([&] { return lake.CreateTable(name, schema, options); }));
           })
      .def("table",
           [](Lake& lake, const std::string& name) {
             return DroppedWithoutGil(Released([&] { return lake.OpenTable(name); }));
           })
      .def("tables",
           [](Lake& lake) {
             return Released([&] { return lake.Tables(); });
           })
      .def("tables_for_read",
           [](Lake& lake) {
             return Released([&] { return lake.TablesForRead(); });
           })
      .def("drop_table", [](Lake& lake, const std::string& name) {
        Released([&] { return lake.DropTable(name); });
      })
      .def_prop_ro("cache_directory",
                   [](Lake& lake) -> std::optional<std::string> {
                     auto cache = lake.cache();
                     if (!cache) return std::nullopt;
                     return cache->directory();
                   })
      .def("cache_stats",
           [](Lake& lake) -> std::optional<std::map<std::string, int64_t>> {
             auto cache = lake.cache();
             if (!cache) return std::nullopt;
             const CacheStats s = cache->Stats();
             return std::map<std::string, int64_t>{
                 {"memory_hits", s.memory_hits},     {"disk_hits", s.disk_hits},
                 {"misses", s.misses},               {"requests", s.requests},
                 {"bytes_fetched", s.bytes_fetched}, {"bytes_served", s.bytes_served},
                 {"memory_bytes", s.memory_bytes},   {"memory_budget", s.memory_budget},
                 {"disk_budget", s.disk_budget}};
           })
      .def("local_copies",
           [](Lake& lake, const ScanPlan& plan) {
             auto cache = lake.cache();
             if (!cache) throw nb::value_error("a local lake has no file cache");
             PlanCopies copies = Released([&] { return cache->MaterializePlan(plan); });
             return std::make_pair(std::move(copies.paths), std::move(copies.pin));
           });
}
