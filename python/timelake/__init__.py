"""timelake: an embedded time-series lakehouse.

Tables are Delta Lake tables on a local disk (or, later, object storage); appends are idempotent
Arrow batches; ``Lake.sql`` answers SQL (DuckDB, with ``time_bucket``); ``Lake.latest`` returns the
newest row of every series. See README.md and docs/ for the contract this package implements.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

import pyarrow as pa  # loads the Arrow C++ libraries that _core links against

from . import _core
from ._capsules import SchemaCapsule
from . import _confine

_confine.warm()  # the first catalog's DuckDB database, made while the rest of the process starts
from ._catalog import Catalog
from . import _rollup

# Background rollup refreshes stop before the upkeep drains (atexit runs in reverse order).
atexit.register(_rollup.stop_refreshers)
from ._sql import run_latest, run_sql

__all__ = ["Lake", "Table", "__version__"]
__version__ = _core.__version__

# Appends leave their checkpoint and index record to their Lake's upkeep threads (one per table
# handle); let that work finish before the interpreter tears down (cutting it off would be safe,
# only wasteful). The core drains every live Lake's runtime.
atexit.register(_core._drain_upkeep)


# fork(): a child process inherits every handle in whatever state the parent's other threads left
# it: an operation's lock held, a group commit half done, a DuckDB connection whose threads stayed
# in the parent. A Lake or Table used in a child therefore opens its core objects anew there (once,
# on first use), and the inherited ones are abandoned: kept alive for good, since even their
# destructors could wait for threads that exist only in the parent.
def _abandon(inherited: Any) -> None:
    if inherited is not None:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(inherited))


# Arguments are checked here, before they reach the core, so that a wrong type or text the core
# cannot take (a lone surrogate has no UTF-8 form) is a ValueError naming the argument rather than
# a TypeError from the bindings or a UnicodeEncodeError from pyarrow.


def _schema_from_capsule(capsule: Any) -> pa.Schema:
    return pa.schema(SchemaCapsule(capsule))


def _text(value: Any, what: str) -> str:
    """`value` if it is a str the core can take (encodable as UTF-8), else ValueError."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{what} {value!r} is not valid text ({e.reason}: {value[e.start:e.end]!r} at "
            f"position {e.start}); use a str without lone surrogates"
        ) from None
    return value


def _optional_str(value: Any, what: str) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string or None, got {type(value).__name__}")
    return _text(value, what)


def _flag(value: Any, what: str) -> bool:
    """True or False (numpy booleans too); anything else is a ValueError, not a truth test."""
    if isinstance(value, bool):
        return value
    kind = type(value)
    if kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"):
        return bool(value)
    raise ValueError(f"{what} must be True or False, got {value!r}")


def _string_map(values: Optional[Mapping[str, Any]], what: str) -> dict:
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ValueError(f"{what} must be a dict of str to str, got {type(values).__name__}")
    out = {}
    for key, value in values.items():
        if not isinstance(key, str):
            raise ValueError(f"{what} keys must be strings, got {key!r}")
        _text(key, f"{what} key")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (int, float)):
            value = str(value)
        elif not isinstance(value, str):
            raise ValueError(f"{what}[{key!r}] must be a string, got {type(value).__name__}")
        out[key] = _text(value, f"{what}[{key!r}]")
    return out


def _column_names(value: Any, what: str) -> Optional[list]:
    """None, a column name, or an iterable of names -> None or a list of names."""
    if value is None:
        return None
    if isinstance(value, str):
        return [_text(value, what)]
    if isinstance(value, (bytes, bytearray, Mapping)):
        raise ValueError(f"{what} must be a column name or a list of names, got {value!r}")
    try:
        names = list(value)
    except TypeError:
        raise ValueError(f"{what} must be a column name or a list of names, got {value!r}") from None
    if not all(isinstance(n, str) for n in names):
        raise ValueError(f"{what} must be a column name or a list of names, got {value!r}")
    return [_text(n, what) for n in names]


def _check_names(schema: pa.Schema) -> None:
    """Column names cross into the core as C strings: one with a NUL would be cut short there."""
    def walk(fields, where):
        for f in fields:
            if "\x00" in f.name:
                raise ValueError(f"schema: the column name {f.name!r}{where} contains a NUL character")
            if pa.types.is_struct(f.type):
                walk(list(f.type), f" (in {f.name!r})")
    walk(list(schema), "")


def _fields_argument(columns: Any, call: str) -> pa.Schema:
    """add_columns / widen_columns: a pyarrow.Schema, a list of pyarrow.Field or a mapping of
    name to type, as a pyarrow.Schema."""
    if isinstance(columns, Mapping):
        try:
            columns = pa.schema([pa.field(str(name), t) for name, t in columns.items()])
        except (TypeError, ValueError, KeyError, pa.ArrowException) as e:
            raise ValueError(f"{call}: a column needs a pyarrow type ({e})") from None
    elif isinstance(columns, (list, tuple)) and all(isinstance(f, pa.Field) for f in columns):
        try:
            columns = pa.schema(list(columns))
        except (TypeError, ValueError, KeyError, pa.ArrowException) as e:
            raise ValueError(f"{call}: {e}") from None
    if not isinstance(columns, pa.Schema):
        raise ValueError(
            f"{call} takes a pyarrow.Schema, a list of pyarrow.Field or a mapping of name to type, "
            f"got {type(columns).__name__}"
        )
    return columns


def _schema_capsule(schema: Any) -> Any:
    """An ArrowSchema capsule of what `schema` describes; any failure is a ValueError."""
    try:
        if isinstance(schema, pa.Schema):
            arrow_schema = schema
        elif isinstance(getattr(schema, "schema", None), pa.Schema):
            arrow_schema = schema.schema
        elif hasattr(schema, "__arrow_c_schema__"):
            arrow_schema = pa.schema(schema)
        elif hasattr(schema, "__arrow_c_stream__"):
            arrow_schema = pa.RecordBatchReader.from_stream(schema).schema
        else:
            arrow_schema = None
        if arrow_schema is not None:
            _check_names(arrow_schema)
            return arrow_schema.__arrow_c_schema__()
    except Exception as e:  # the object's own failure, pyarrow's, or a name pyarrow cannot encode
        raise ValueError(
            f"schema: could not read an Arrow schema from {type(schema).__name__} "
            f"({type(e).__name__}: {e})"
        ) from e
    raise ValueError(
        f"schema must be a pyarrow.Schema or an object with a .schema (got {type(schema).__name__})"
    )


def _as_reader(data: Any) -> pa.RecordBatchReader:
    try:
        if isinstance(data, pa.RecordBatchReader):
            return data
        if isinstance(data, pa.Table):
            return data.to_reader()
        if isinstance(data, pa.RecordBatch):
            return pa.RecordBatchReader.from_batches(data.schema, [data])
        if hasattr(data, "__arrow_c_stream__"):
            return pa.RecordBatchReader.from_stream(data)
        if hasattr(data, "__arrow_c_array__"):
            batch = pa.record_batch(data)
            return pa.RecordBatchReader.from_batches(batch.schema, [batch])
        module = type(data).__module__.split(".")[0]
        if module == "pandas":
            table = pa.Table.from_pandas(data, preserve_index=False)
            return table.to_reader()
    except Exception as e:  # a broken __arrow_c_stream__, a capsule of the wrong kind, ...
        raise ValueError(
            f"append() could not read {type(data).__name__} as Arrow data ({type(e).__name__}: {e})"
        ) from e
    raise ValueError(
        "append() takes a pyarrow RecordBatch, Table or RecordBatchReader, a polars DataFrame, "
        f"or any object with __arrow_c_stream__ (got {type(data).__name__})"
    )


def _recording(reader: pa.RecordBatchReader, errors: list) -> Iterator[pa.RecordBatch]:
    """The batches of a reader, appending to `errors` the exception its producer raised.

    The Arrow C stream interface carries a producer's failure to the core as a message only;
    append() re-raises the producer's own exception instead (the same object, as a for loop over
    the reader would), and a KeyboardInterrupt raised while Python runs the producer stays one.
    A generator, primed by the caller: every later resumption, where Python may raise a pending
    KeyboardInterrupt, is inside the try block (a method would be entered outside it).
    """
    try:
        yield None  # primed
        while True:
            yield reader.read_next_batch()
    except StopIteration:
        return
    except BaseException as e:
        errors.append(e)
        raise


class Table:
    """A handle on one table at a snapshot. Methods that commit advance it to the new version."""

    __slots__ = ("_lake", "_handle", "_pid")

    def __init__(self, lake: "Lake", core: Any) -> None:
        self._lake = lake
        self._handle = core
        self._pid = os.getpid()

    @property
    def _core(self) -> Any:
        """The core handle; in a child made by fork(), one opened there (see _abandon)."""
        if self._pid != os.getpid():
            inherited = self._handle
            _abandon(inherited)
            self._handle = self._lake._core.table(inherited.name)
            self._pid = os.getpid()
        return self._handle

    @property
    def name(self) -> str:
        """The qualified name, ``namespace.table``."""
        return self._core.name

    @property
    def location(self) -> str:
        """URL of the table's folder."""
        return self._core.location

    @property
    def version(self) -> int:
        """The Delta version this handle reads."""
        return self._core.version

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema declared at create_table."""
        return _schema_from_capsule(self._core.schema_capsule())

    def append(self, data: Any, batch_id: Optional[str] = None, maintain: Optional[bool] = None) -> dict:
        """Appends rows; returns rows, files, bytes, version, commit_ms, attempts, duplicate."""
        batch_id = _optional_str(batch_id, "batch_id")
        spec = _rollup.spec_of(self._core.properties)
        if spec is not None:
            raise ValueError(f"{self.name} is a rollup: its rows come from refreshes of {spec.source} "
                             "(append to the source; REFRESH MATERIALIZED ROLLUP brings it up to date)")
        if maintain is not None:
            try:
                maintain = _flag(maintain, "maintain")
            except ValueError:
                raise ValueError(f"maintain must be True, False or None, got {maintain!r}") from None
        reader = _as_reader(data)
        errors: list = []
        streamed = isinstance(data, pa.RecordBatchReader) or (
            hasattr(data, "__arrow_c_stream__") and not isinstance(data, (pa.Table, pa.RecordBatch))
        )
        if streamed:
            # Batches a producer of the caller's makes (a generator, another library's stream)
            # may fail: keep its exception to re-raise it as is.
            batches = _recording(reader, errors)
            next(batches)
            reader = pa.RecordBatchReader.from_batches(reader.schema, batches)
            del batches
        try:
            # A stream's batches are copied as they are read (their memory is freed at once); an
            # in-memory table stays the caller's, so copying it would only add to it.
            result = self._core.append(reader.__arrow_c_stream__(), batch_id, maintain, streamed)
            if not result["duplicate"]:
                # The append is acknowledged: nothing after it may turn it into an error.
                try:
                    self._lake._refresher.appended(self._lake, self.name)
                except Exception as e:  # noqa: BLE001 - kept where the refresher keeps its errors
                    self._lake._refresher.errors[self.name] = f"{type(e).__name__}: {e}"
            return result
        except BaseException:
            # The list must not keep the exception: the exported reader (not seen by the garbage
            # collector) holds the generator, which holds the list.
            error = errors[0] if errors else None  # the first: the producer's own
            errors.clear()
            # pyarrow's exceptions are its rendering of a failure that crossed another C stream
            # inside the caller's object: the core's rendering of it is the contract's type.
            if error is None or isinstance(error, pa.ArrowException):
                del error
                raise
        # Raised outside the except block (the core's rendering is no context of it), and without
        # a reference from this frame (its traceback holds the frame).
        del reader
        try:
            raise error
        finally:
            del error

    def maintain(self, compact: bool = True, retention: bool = True, expire: bool = True,
                 rollups: bool = True) -> dict:
        """Compacts, applies retention, expires old snapshots and refreshes the table's rollups;
        returns what it did. A table with rollups also gets ``rollups_refreshed`` and
        ``rollup_rows`` (the rollups brought up to date and the rows they wrote)."""
        rollups = _flag(rollups, "rollups")
        report = dict(self._core.maintain(
            _flag(compact, "compact"), _flag(retention, "retention"), _flag(expire, "expire")
        ))
        found = self._lake._rollups.rollups_of(self._lake, self.name, max_age=5.0) if rollups else []
        if found:
            report["rollups_refreshed"], report["rollup_rows"] = 0, 0
            for name, _ in found:
                report["rollup_rows"] += _rollup.refresh(self._lake, name)
                report["rollups_refreshed"] += 1
        return report

    def info(self) -> dict:
        """Contract, size, snapshots, manifests and last-value-index figures; for a rollup also
        ``rollup`` (its source, bucket, aggregates, the source version it reflects and its lag)."""
        info = dict(self._core.info())
        spec = _rollup.spec_of(self._core.properties)
        if spec is not None:
            info["rollup"] = _rollup.describe(self._lake, self._core, spec)
        return info

    def add_columns(self, columns: Any) -> dict:
        """Adds nullable columns after the existing ones; returns {"version", "columns"}.

        `columns`: a pyarrow.Schema, a list of pyarrow.Field, or a mapping of name to type. Rows
        already in the table read the new columns as null.
        """
        columns = _fields_argument(columns, "add_columns")
        # Unique ignoring case as Spark compares (Unicode lower case; the core folds ASCII only).
        taken = {name.lower(): name for name in self.schema.names}
        for name in columns.names:
            if name.lower() in taken:
                raise ValueError(
                    f"add_columns: table {self.name!r} already has a column named {name!r} "
                    f"(names are unique ignoring case: {taken[name.lower()]!r} is taken)"
                )
            taken[name.lower()] = name
        version = self._core.add_columns(_schema_capsule(columns))
        return {"version": version, "columns": columns.names}

    def widen_columns(self, columns: Any) -> dict:
        """Changes columns to wider types (Delta type widening); returns {"version", "columns"}.

        `columns`: a mapping of column name to its new pyarrow type, a pyarrow.Schema or a list of
        pyarrow.Field (only the types count: a column keeps its nullability). Names match ignoring
        case. No file is rewritten: rows written before read in the new type.
        """
        columns = _fields_argument(columns, "widen_columns")
        # The core checks the names against the table's newest schema (this handle may be older).
        version = self._core.widen_columns(_schema_capsule(columns))
        return {"version": version, "columns": columns.names}

    def refresh(self) -> None:
        """Advances this handle to the latest committed version."""
        self._core.refresh()

    def __repr__(self) -> str:
        return f"timelake.Table({self.name!r}, version={self.version})"


class Lake:
    """A warehouse of tables under one location (a local path or file:// URL)."""

    def __init__(self, location: Union[str, "os.PathLike[str]"], storage_options: Optional[Mapping[str, Any]] = None) -> None:
        if isinstance(location, os.PathLike):
            location = os.fspath(location)
        if not isinstance(location, str):
            raise ValueError(f"location must be a path or URL string, got {type(location).__name__}")
        location = _text(location, "location")
        options = _string_map(storage_options, "storage_options")
        interval = options.pop("timelake_rollup_refresh_interval", "60s")
        routing = options.pop("timelake_rollup_routing", "on").strip().lower()
        if routing not in ("on", "off"):
            raise ValueError(f"timelake_rollup_routing must be 'on' or 'off', got {routing!r}")
        self._route_rollups = routing == "on"
        self._opened_with = (location, options)
        self._core_lake = _core.Lake.open(location, options)
        self._pid = os.getpid()
        self._handles: dict = {}
        # Per table: (handle, version, rollup spec, declared schema) for latest() (_sql.run_latest).
        self._declared: dict = {}
        self._rollups = _rollup.Registry()
        self._refresher = _rollup.Refresher(interval)
        self._local = threading.local()
        _confine.warm()  # a DuckDB database for this lake's first query, made meanwhile

    @property
    def _core(self) -> Any:
        """The core lake; in a child made by fork(), one opened there (see _abandon)."""
        self._start_over_if_forked()
        return self._core_lake

    def _start_over_if_forked(self) -> None:
        if self._pid == os.getpid():
            return
        # A memory:// lake's tables live in its core object: the child keeps its copy of them.
        if not self._opened_with[0].startswith("memory://"):
            _abandon(self._core_lake)
            self._core_lake = _core.Lake.open(*self._opened_with)
        for handle in self._handles.values():
            _abandon(handle)
        for known in self._declared.values():
            _abandon(known[0])
        self._declared = {}
        self._refresher = _rollup.Refresher(self._refresher.interval_text)
        _abandon(getattr(self._local, "catalog", None))
        self._handles = {}
        self._local = threading.local()
        self._pid = os.getpid()

    @property
    def location(self) -> str:
        """The normalized URL of the lake (file:///abs/path for local lakes)."""
        return self._core.location

    def create_table(
        self,
        name: str,
        schema: Any,
        time_column: Optional[str] = None,
        series_key: Optional[Union[str, Sequence[str]]] = None,
        chunk: Optional[str] = None,
        retention: Optional[str] = None,
        dedup: Optional[str] = None,
        properties: Optional[Mapping[str, Any]] = None,
    ) -> Table:
        """Creates a table and returns it at version 0."""
        name = _text(name, "table name")
        capsule = _schema_capsule(schema)
        series_key = _column_names(series_key, "series_key")
        properties = _string_map(properties, "properties")
        reserved = sorted(k for k in properties if k.startswith("timelake.rollup."))
        if reserved:
            raise ValueError(f"properties {reserved} describe rollups: make one with lake.sql('CREATE MATERIALIZED "
                             "ROLLUP ...')")
        core = self._core.create_table(
            name,
            capsule,
            _optional_str(time_column, "time_column"),
            series_key,
            _optional_str(chunk, "chunk"),
            _optional_str(retention, "retention"),
            _optional_str(dedup, "dedup"),
            properties,
        )
        return Table(self, core)

    def table(self, name: str) -> Table:
        """The table at its latest version; KeyError if it does not exist."""
        return Table(self, self._core.table(_text(name, "table name")))

    def tables(self) -> list:
        """Every table as ``namespace.table``, sorted."""
        return list(self._core.tables())

    def drop_table(self, name: str) -> None:
        """Deletes the table and all its files; KeyError if it does not exist. The rollups of
        the table go with it."""
        name = _text(name, "table name")
        for rollup, _ in self._rollups.rollups_of(self, self._qualify(name), max_age=5.0):
            try:
                self.drop_table(rollup)
            except KeyError:
                pass  # dropped meanwhile
        self._core.drop_table(name)
        self._rollups.forget()
        self._handles.pop(self._qualify(name).lower(), None)
        catalog = getattr(self._local, "catalog", None)
        if catalog is not None:
            catalog.forget(self._qualify(name))

    def sql(self, query: str, namespace: str = "default", as_of: Any = None, rollups: bool = True) -> pa.Table:
        """Runs a read-only SQL query (DuckDB dialect, UTC) over the lake's tables.

        `as_of` reads every table as of an older version: a version number (queries over one
        table) or a datetime (naive means UTC). `FROM t AT (VERSION => n)` and
        `AT (TIMESTAMP => t)` do the same for one table reference.

        Also runs CREATE / REFRESH / DROP MATERIALIZED ROLLUP (docs/rollups.md). A GROUP BY
        time_bucket(...) query that a rollup of its table can answer reads the rollup, with the
        same answer; ``rollups=False`` (or the lake's storage option
        ``timelake_rollup_routing = "off"``) reads the raw rows.
        """
        return run_sql(self, query, namespace, as_of, _flag(rollups, "rollups"))

    def cache_stats(self) -> Optional[dict]:
        """What the lake's cache of data-file reads did since this Lake was opened, or None for a
        local lake (which has no cache). Shared by every query of this Lake; safe to call from any
        thread.

        Every lookup of a cached object (a data file's footer, a copy of a file or of its row
        groups) counts once in ``memory_hits``, ``disk_hits`` or ``misses``; ``requests`` and
        ``bytes_fetched`` are the requests the cache sent to the store and the bytes they brought;
        ``bytes_served`` what it answered from memory or disk instead; ``memory_bytes`` what the
        memory tier holds now, of ``memory_budget``; ``disk_budget`` the disk tier's bound. See
        docs/object-stores.md, "The cache".
        """
        stats = self._core.cache_stats()
        return None if stats is None else dict(stats)

    def latest(self, table: Union[str, Table]) -> pa.Table:
        """The newest row of every series of a time-series table."""
        if isinstance(table, Table):
            table = table.name
        if not isinstance(table, str):
            raise ValueError(f"latest() takes a table name or Table, got {type(table).__name__}")
        return run_latest(self, table)

    # -- internals used by _sql -------------------------------------------------------------

    @staticmethod
    def _qualify(name: str) -> str:
        return name if "." in name else f"default.{name}"

    def _catalog(self) -> Catalog:
        """This thread's DuckDB catalog (a DuckDB connection must not be shared by threads)."""
        self._start_over_if_forked()
        catalog = getattr(self._local, "catalog", None)
        if catalog is None:
            catalog = Catalog(self)
            self._local.catalog = catalog
        return catalog

    def _snapshot(self, name: str) -> Any:
        """A core handle for `name` at its latest version (cached, refreshed incrementally)."""
        qualified = self._qualify(name).lower()  # names are case-insensitive
        self._start_over_if_forked()
        handle = self._handles.get(qualified)
        if handle is not None:
            try:
                # Within the lake's version_check_interval this sends no request
                # (docs/object-stores.md, "The table head").
                handle.refresh_if_due()
                return handle
            except KeyError:
                # Dropped (and maybe created again) since this handle was opened: open anew.
                self._handles.pop(qualified, None)
            except Exception:
                self._handles.pop(qualified, None)
                raise
        handle = self._core.table(qualified)
        self._handles[qualified] = handle
        return handle

    def __repr__(self) -> str:
        return f"timelake.Lake({self.location!r})"
