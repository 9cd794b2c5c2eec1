"""SQL over a lake: DuckDB views built from the core's scan plans.

Every table a query names becomes a DuckDB view over exactly the Parquet files of the table's
latest snapshot (taken when the call starts), as the core's typed scan plan lists them; when the
statement's WHERE bounds the time column or fixes series keys, the plan lists only the files that
can match (see _sql_filter for when that is safe). Chunks whose files overlap in time are deduplicated
at read time, newest commit first, when the table's contract asks for dedup; all other files are
scanned plainly. Results are cast back to the declared Arrow types where DuckDB widened them.

Confinement. Each catalog is its own DuckDB database, locked before any user text reaches it:
external access off except the lake's folder, no extension loading, no Python replacement scans,
configuration locked. A user statement runs only as `SELECT * FROM query(?)` with its text as a
parameter, so DuckDB itself refuses anything but one SELECT: nothing the user writes can create,
replace, copy, attach, export or set anything. The statement-type check before it only gives a
friendlier error.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import weakref
import tempfile
import threading
import uuid
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple
from urllib.parse import unquote

import duckdb
import pyarrow as pa

from . import _tree
from ._sql_filter import Conjunct, ScanFilter, filter_conjuncts
from ._sql_filter import resolve as resolve_filter
from ._types import restore_declared

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# DuckDB's time_bucket on TIMESTAMPTZ goes through ICU calendars (it honours the session time
# zone), which costs 10-20x more than the same bucketing on a plain TIMESTAMP. Sessions here are
# always UTC, so bucketing the UTC wall-clock time and labelling the result UTC is the same
# function: this macro does exactly that (checked equal to the built-in for widths from
# milliseconds to years, before and after 1970). It returns TIMESTAMPTZ for every input, so it is
# only installed while a statement reads no table with naive timestamps or dates, whose users
# expect DuckDB's own result types. Calls with an offset, origin or time zone use the built-in.
_FAST_TIME_BUCKET = (
    "CREATE OR REPLACE TEMP MACRO time_bucket(w, t) AS "
    "to_timestamp(epoch_us(system.main.time_bucket(w, make_timestamp(epoch_us(t)))) / 1000000), "
    "(w, t, o) AS system.main.time_bucket(w, t, o)"
)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _duckdb_type(t: pa.DataType) -> str:
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_int8(t):
        return "TINYINT"
    if pa.types.is_int16(t):
        return "SMALLINT"
    if pa.types.is_int32(t):
        return "INTEGER"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_float32(t):
        return "REAL"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "VARCHAR"
    if pa.types.is_binary(t):
        return "BLOB"
    if pa.types.is_date32(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    return "VARCHAR"


def _confined_connection(directories: Iterable[str], files: Iterable[str]) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB database that can read the given folders and files and nothing else.

    Settings are global to the database and locked at the end, so no later statement can change
    them. `allowed_directories` also admits writes, which is why user statements must never run
    as anything but a SELECT (see run_sql). Spill files go to a fresh folder that DuckDB creates
    when it first spills, also admits reads of, and removes when the database closes. Paths with
    glob characters are admitted in both spellings, as read_parquet is given them escaped (see
    _file_list).
    """
    allowed = sorted({spelling for d in directories for spelling in (d, _glob_literal(d))})
    allowed_files = sorted({spelling for f in files for spelling in (f, _glob_literal(f))})
    spill = os.path.join(tempfile.gettempdir(), f"timelake-duckdb-{uuid.uuid4().hex}")
    con = duckdb.connect(":memory:")
    for setting, value in (
        ("TimeZone", _literal("UTC")),
        ("parquet_metadata_cache", "true"),
        ("temp_directory", _literal(spill)),
        ("allowed_directories", "[" + ", ".join(_literal(d) for d in allowed) + "]::VARCHAR[]"),
        ("allowed_paths", "[" + ", ".join(_literal(f) for f in allowed_files) + "]::VARCHAR[]"),
        ("enable_external_access", "false"),
        ("autoload_known_extensions", "false"),
        ("autoinstall_known_extensions", "false"),
        ("python_enable_replacements", "false"),
        ("lock_configuration", "true"),
    ):
        con.execute(f"SET {setting} = {value}")
    return con


def _lake_directory(location: str) -> Optional[str]:
    """The local folder of a file:// lake, with a trailing slash; None for other stores."""
    if not location.startswith("file://"):
        return None
    return unquote(location[len("file://"):]).rstrip("/") + "/"


class _Reconnected(Exception):
    """The catalog took a new connection to admit more files: the statement starts over."""


class _View:
    """What a catalog knows of the view it made for one table."""

    __slots__ = ("version", "declared", "empty_name", "handle", "scan_filter", "files", "plan", "paths")

    def __init__(self, version: int, declared: pa.Schema, empty_name: Any, handle: Any,
                 scan_filter: Optional[ScanFilter], files: int, plan: Any, paths: Optional[List[str]]) -> None:
        self.version = version
        self.declared = declared
        self.empty_name = empty_name  # the Arrow tables the view reads (a name or a list), if any
        self.handle = handle
        self.scan_filter = scan_filter  # the filter the plan was made with (None: every file)
        self.files = files  # data files the view reads
        self.plan = plan  # the core ScanPlan
        self.paths = paths  # local copies the view reads (remote lakes), None for local lakes


class _Catalog:
    """One DuckDB connection (per thread and lake) holding a view per lake table it has seen.

    A view is rebuilt only when its table's version changed since the view was made, and the
    connection caches Parquet footers (data files never change once written), so repeated
    queries pay neither for connecting nor for re-reading file metadata.
    """

    def __init__(self, lake: Any) -> None:
        # The lake holds its catalogs (per thread); a weak reference back keeps that from being a
        # cycle, so a Lake and its core handles go as soon as the user drops the Lake.
        self._lake = weakref.ref(lake)
        self._root = _lake_directory(lake.location)
        # What DuckDB may read: the data folders of the lake's tables, and single data files that
        # lie elsewhere in a table's folder (never the log or the index). Grows as tables appear.
        self._directories: Set[str] = set()
        self._files: Set[str] = set()
        # A lake in an object store: DuckDB reads local copies of its data files, kept in the
        # lake's own cache folder (see FileCache in the core), and nothing else.
        self._cache: Optional[str] = None if self._root is not None else lake._core.cache_directory
        if self._cache is not None:
            self._directories.add(self._cache)
        if self._root is not None:
            for qualified in lake.tables():
                ns, name = qualified.split(".", 1)
                self._directories.add(f"{self._root}{ns}/{name}/data/")
        self.generation = 0  # counts connections: a new one has none of the old one's views
        self._pins: List[Any] = []  # the current statement's pins on local copies (end())
        self._connect()
        self.declared: Dict[str, pa.Field] = {}

    def _connect(self) -> None:
        self.con = _confined_connection(self._directories, self._files)
        self.generation += 1
        self._views: Dict[str, _View] = {}
        self._travel_empty: Dict[str, str] = {}  # time-travel view -> the empty table it reads
        self._fast_time_bucket = False
        self._empty = 0
        self._schemas = set()

    def _admit(self, plan: Any) -> bool:
        """Lets DuckDB read the plan's files; True if that took a new connection (configuration
        is locked), which has none of the views made before."""
        if self._root is None:
            return False
        directories, files = set(), set()
        for f in plan.files:
            path = f.path
            if not path.startswith(self._root):
                continue  # outside the lake: stays unreadable, and the query says so
            parts = path[len(self._root):].split("/")
            if ".." in parts or "." in parts:
                continue  # the core confines log paths (data_path.h); never admit one that climbs
            # <ns>/<table>/<folder>/.../<file>: admit the folder, unless it is the log, the
            # index or another hidden one (a log may name any file there; admit that file alone).
            if len(parts) > 3 and not parts[2].startswith(("_", ".")):
                directories.add(f"{self._root}{parts[0]}/{parts[1]}/{parts[2]}/")
            else:
                files.add(path)
        if directories <= self._directories and files <= self._files:
            return False
        self._directories |= directories
        self._files |= files
        self.con.close()
        self._connect()
        return True

    @property
    def lake(self) -> Any:
        return self._lake()

    def begin(self, namespace: str) -> None:
        """Starts a statement: result-type hints are per statement."""
        self.end()
        self.declared = {}
        self._ensure_schema(namespace)
        self.con.execute(f"SET schema = {_literal(namespace)}")

    def use_fast_time_bucket(self, schemas: List[pa.Schema]) -> None:
        """Installs the UTC time_bucket macro unless a schema has naive timestamps or dates."""
        wanted = not any(
            (pa.types.is_timestamp(f.type) and f.type.tz is None) or pa.types.is_date(f.type)
            for schema in schemas
            for f in schema
        )
        if wanted != self._fast_time_bucket:
            self.con.execute(_FAST_TIME_BUCKET if wanted else "DROP MACRO IF EXISTS temp.time_bucket")
            self._fast_time_bucket = wanted

    def _ensure_schema(self, ns: str) -> None:
        if ns not in self._schemas:
            self.con.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(ns)}")
            self._schemas.add(ns)

    def add_table(self, ns: str, name: str, conjuncts: Optional[List[Conjunct]] = None) -> Tuple[Any, pa.Schema]:
        """Makes `ns.name` current in the connection; returns the core handle and declared schema.

        With `conjuncts` (of the statement's WHERE, see _sql_filter) the view lists only the
        files that may hold rows they admit; the statement still applies its whole WHERE.
        """
        qualified = f"{ns}.{name}"
        handle = self.lake._snapshot(qualified)
        version = handle.version
        scan_filter = self._scan_filter(handle, conjuncts) if conjuncts else None
        cached = self._views.get(qualified)
        # A view is current while its table is the same one (not dropped and created again) at
        # the same version, planned with the same filter.
        current = cached is not None and cached.version == version and cached.handle is handle
        if current and cached.scan_filter == scan_filter and cached.paths is not None:
            # Copies in the cache can be evicted between queries: the view stays only while
            # the cache still answers with the same copies (touching them as used).
            current = self._local_paths(cached.plan) == cached.paths
        if current and cached.scan_filter == scan_filter:
            declared = cached.declared
        else:
            plan = handle.scan(**scan_filter.arguments()) if scan_filter is not None else handle.scan()
            declared, registered, paths = self._make_view(ns, name, plan, cached.empty_name if cached else None)
            self._views[qualified] = _View(plan.version, declared, registered, handle, scan_filter, len(plan.files),
                                           plan, paths)
        for field in declared:
            self.declared.setdefault(field.name, field)
        return handle, declared

    def add_travel(self, ns: str, name: str, view: str, spec: Dict[str, int]) -> pa.Schema:
        """Makes `ns.view` a view of table `ns.name` as of an older version (`spec`: version= or
        timestamp_ms=, see Table::ScanAsOf); returns that version's declared schema. Planned anew
        for every statement: a timestamp names a newer version once commits arrive."""
        handle = self.lake._snapshot(f"{ns}.{name}")
        plan = handle.scan(**spec)
        key = f"{ns}.{view}"
        declared, registered, _ = self._make_view(ns, view, plan, self._travel_empty.pop(key, None))
        if registered is not None:
            self._travel_empty[key] = registered
        for field in declared:
            self.declared.setdefault(field.name, field)
        return declared

    def _make_view(self, ns: str, view: str, plan: Any, replaced: Any) -> Tuple[pa.Schema, Any, Optional[List[str]]]:
        """Creates or replaces the view `ns.view` over a core ScanPlan; returns its declared schema,
        the Arrow tables it registered (for _unregister) and the local copies it reads. `replaced`:
        what the view it replaces had registered, dropped once the new view stands."""
        if self._admit(plan):
            raise _Reconnected()
        paths = self._local_paths(plan)
        # Schema capsules can be imported once; turn them into pyarrow schemas right away.
        declared = pa.schema(_Capsule(plan.declared_schema))
        file_schema = pa.schema(_Capsule(plan.file_schema))
        self._ensure_schema(ns)
        view_sql, registered = self._view_sql(plan, declared, file_schema, paths)
        self.con.execute(f"CREATE OR REPLACE VIEW {_quote(ns)}.{_quote(view)} AS {view_sql}")
        if replaced is not None:
            self._unregister(replaced)
        return declared, registered, paths

    def _unregister(self, names: Any) -> None:
        """Drops the Arrow tables a replaced view read (a name or a list of names)."""
        for name in [names] if isinstance(names, str) else names:
            self.con.unregister(name)

    def _scan_filter(self, handle: Any, conjuncts: List[Conjunct]) -> Optional[ScanFilter]:
        declared = pa.schema(_Capsule(handle.schema_capsule()))
        storage = pa.schema([pa.field(f.name, _storage_type(f.type)) for f in declared])
        return resolve_filter(self.con, conjuncts, storage, handle.contract)

    def forget(self, qualified: str) -> None:
        self._views.pop(qualified, None)

    def _local_paths(self, plan: Any) -> Optional[List[str]]:
        """For a lake in an object store: local copies of the plan's files, in order (downloaded
        now when missing). None for local lakes, whose files DuckDB reads in place."""
        if self._cache is None:
            return None
        files = plan.files
        outside = [f.path for f in files if not f.store_path]
        if outside:
            raise RuntimeError(f"data file {outside[0]} lies outside the lake's store; timelake cannot read it")
        paths, pin = self.lake._core.local_copies(plan)
        self._pins.append(pin)  # no eviction takes them until the statement ends
        return paths

    def end(self) -> None:
        """Ends a statement: its local copies may be evicted again."""
        pins, self._pins = self._pins, []
        for pin in pins:
            pin.release()

    def _view_sql(self, plan: Any, declared: pa.Schema, file_schema: pa.Schema,
                  paths: Optional[List[str]] = None) -> Tuple[str, Optional[str]]:
        """The view's SQL for a core ScanPlan, and the name of the empty Arrow table it reads (if
        it does). `paths` replaces the files' own paths (local copies of remote files)."""
        partition_columns = plan.partition_columns
        contract = plan.contract
        storage_types = {f.name: f.type for f in file_schema}
        columns = ", ".join(_quote(f.name) for f in declared)
        files = plan.files if paths is None else [_Located(f, p) for f, p in zip(plan.files, paths)]
        if not files:
            self._empty += 1
            empty_name = f"__timelake_empty_{self._empty}"
            empty = pa.schema([pa.field(f.name, storage_types.get(f.name, f.type)) for f in declared]).empty_table()
            self.con.register(empty_name, empty)
            return f"SELECT {columns} FROM temp.main.{_quote(empty_name)}", empty_name
        foreign = contract["time_column"] is None and not any(f.seq for f in files)
        # Files written before add_columns lack the new columns: read by name, and the empty table
        # of the table's own schema below brings every column (null where no file has it).
        evolved = plan.evolved
        union = ", union_by_name=true" if foreign or evolved else ""
        parts = []
        physical = dict(plan.physical_names)
        if any(logical != name for logical, name in physical.items()):
            return self._mapped_view_sql(plan, declared, files, storage_types, physical)
        plain = [f for f in files if not f.dedup]
        # Files of other engines' partitioned tables: partition values come from the log.
        groups: Dict[Tuple, List[str]] = {}
        for f in plain:
            key = tuple((c, f.partition_values.get(c)) for c in partition_columns)
            groups.setdefault(key, []).append(f.path)
        deleted = self._deleted_rows_table(plain, [f.name for f in declared])
        for key, paths in groups.items():
            extra = "".join(
                f", {_partition_value(value, _declared_type(declared, column))} AS {_quote(column)}"
                for column, value in key
            )
            parts.append(f"SELECT *{extra} FROM {_read_files(paths, 'hive_partitioning=false' + union, deleted)}")
        dedup = [f for f in files if f.dedup]
        if dedup:
            deleted_dedup = self._deleted_rows_table(dedup, [])
            parts.append(_dedup_sql(dedup, contract, columns, [f.name for f in file_schema] + [f.name for f in declared],
                                    evolved, deleted_dedup and deleted_dedup[0]))
        empty_name = None
        if evolved:
            self._empty += 1
            empty_name = f"__timelake_empty_{self._empty}"
            self.con.register(empty_name, pa.schema([pa.field(f.name, storage_types.get(f.name, f.type)) for f in declared]).empty_table())
            parts.append(f"SELECT * FROM temp.main.{_quote(empty_name)}")
        registered = [n for n in (empty_name, deleted and deleted[0], dedup and deleted_dedup and deleted_dedup[0]) if n]
        columns = _select_list(declared, storage_types, plan.widened)
        if len(parts) == 1 and not dedup:
            return f"SELECT {columns} FROM ({parts[0]})", registered or None
        return f"SELECT {columns} FROM (" + " UNION ALL BY NAME ".join(f"({p})" for p in parts) + ")", registered or None


    def _mapped_view_sql(self, plan: Any, declared: pa.Schema, files: List[Any], storage_types: Dict[str, pa.DataType],
                         physical: Dict[str, str]) -> Tuple[str, Optional[str]]:
        """The view of a table with Delta column mapping: the files name their columns by physical
        name (`col-<uuid>`); the view renames them, and columns a file lacks (added later) or no
        longer in the schema (dropped) are null or left out. Such tables are other engines' (no
        read-time dedup)."""
        partition_columns = plan.partition_columns
        self._empty += 1
        empty_name = f"__timelake_empty_{self._empty}"
        stored = [f for f in declared if f.name not in partition_columns]
        self.con.register(empty_name, pa.schema(
            [pa.field(physical.get(f.name, f.name), storage_types.get(f.name, f.type)) for f in stored]).empty_table())
        renames = ", ".join(f"{_quote(physical.get(f.name, f.name))} AS {_quote(f.name)}" for f in stored)
        groups: Dict[Tuple, List[str]] = {}
        for f in files:
            key = tuple((c, f.partition_values.get(c)) for c in partition_columns)
            groups.setdefault(key, []).append(f.path)
        deleted = self._deleted_rows_table(files, list(physical.values()) + [f.name for f in declared])
        parts = []
        for key, paths in groups.items():
            extra = "".join(
                f", {_partition_value(value, _declared_type(declared, column))} AS {_quote(column)}"
                for column, value in key
            )
            source = _read_files(paths, "hive_partitioning=false, union_by_name=true", deleted)
            parts.append(
                f"SELECT {renames}{extra} FROM (SELECT * FROM {source} "
                f"UNION ALL BY NAME SELECT * FROM temp.main.{_quote(empty_name)})"
            )
        columns = _select_list(declared, storage_types, plan.widened)
        registered = [empty_name] + ([deleted[0]] if deleted else [])
        return f"SELECT {columns} FROM (" + " UNION ALL BY NAME ".join(f"({p})" for p in parts) + ")", registered

    def _deleted_rows_table(self, files: List[Any], columns: List[str]) -> Optional[Tuple[str, str]]:
        """Registers the rows deletion vectors delete, as (path, row) pairs; returns the table's name
        and a column name for the file name that no table column has (None: no file has any)."""
        # deleted_rows is converted from the core's vector on each access: read it once per file.
        marked = [(f.path, rows) for f in files if (rows := f.deleted_rows)]
        if not marked:
            return None
        self._empty += 1
        name = f"__timelake_deleted_{self._empty}"
        paths = pa.chunked_array([pa.array([path] * len(rows), pa.string()) for path, rows in marked])
        rows = pa.chunked_array([pa.array(rows, pa.uint64()).cast(pa.int64()) for _, rows in marked])
        self.con.register(name, pa.table({"path": paths, "row": rows}))
        return name, _fresh("__tl_file", {c.lower() for c in columns})


def _select_list(declared: pa.Schema, storage_types: Dict[str, pa.DataType], widened: List[str]) -> str:
    """The view's columns. A widened column (Delta type widening) is cast to the table's stored
    type: older files hold a narrower one, which reading by name promotes only as far as DuckDB's
    own rules go (an INTEGER and a DECIMAL meet in a DECIMAL of DuckDB's choosing)."""
    widened_set = set(widened)

    def column(f: pa.Field) -> str:
        stored = storage_types.get(f.name, f.type)
        # Nested columns (another engine widened an element, a value or a struct field) are left
        # to reading by name, which promotes them; _duckdb_type names top-level types only.
        if f.name not in widened_set or pa.types.is_nested(stored):
            return _quote(f.name)
        return f"CAST({_quote(f.name)} AS {_duckdb_type(stored)}) AS {_quote(f.name)}"

    return ", ".join(column(f) for f in declared)


def _read_files(paths: List[str], options: str, deleted: Optional[Tuple[str, str]]) -> str:
    """A FROM item reading `paths`, without the rows deletion vectors delete (`deleted`: the
    registered (path, row) table and a free column name for the file name)."""
    if deleted is None:
        return f"read_parquet({_file_list(paths)}, {options})"
    table, file_col = deleted
    return (
        f"(SELECT r.* EXCLUDE ({_quote(file_col)}, file_row_number) FROM read_parquet({_file_list(paths)}, "
        f"{options}, filename={_literal(file_col)}, file_row_number=true) r "
        f"ANTI JOIN temp.main.{_quote(table)} d ON r.{_quote(file_col)} = d.path AND r.file_row_number = d.row)"
    )


class _Located:
    """A ScanFile read from another path (its local copy)."""

    __slots__ = ("path", "seq", "order", "dedup", "partition_values", "deleted_rows")

    def __init__(self, f: Any, path: str) -> None:
        self.path = path
        self.seq = f.seq
        self.order = f.order
        self.dedup = f.dedup
        self.partition_values = f.partition_values
        self.deleted_rows = f.deleted_rows


def _dedup_sql(files: List[Any], contract: dict, columns: str, table_columns: List[str], evolved: bool = False,
               deleted: Optional[str] = None) -> str:
    """One row per (series key, time) of `files`: newest commit first for "last", oldest for "first".

    The view's own columns get names no table column has (DuckDB compares names ignoring case),
    so a table may have columns called `filename`, `__tl_seq` or anything else. DuckDB's
    `file_row_number` cannot be renamed: a table with a column of that name orders rows of one
    file by nothing more (timelake's own files never hold two rows of one key and time).
    """
    taken = {c.lower() for c in table_columns}
    file_col, path, seq, ord_ = (_fresh(base, taken) for base in ("__tl_file", "__tl_path", "__tl_seq", "__tl_ord"))
    order = "DESC" if contract["dedup"] == "last" else "ASC"
    keys = ", ".join(_quote(k) for k in contract["series_key"] + [contract["time_column"]])
    row_number = "file_row_number" not in taken
    options = f"filename={_literal(file_col)}" + (", file_row_number=true" if row_number else "")
    seqs = ", ".join(f"({_literal(f.path)}, {f.seq}, {f.order})" for f in files)
    ordering = f"{_quote(seq)} {order}, {_quote(ord_)} {order}" + (f", file_row_number {order}" if row_number else "")
    if evolved:
        # Some columns may be in none of these files: keep whatever they hold, by name.
        helpers = [file_col, seq, ord_] + (["file_row_number"] if row_number else [])
        columns = "* EXCLUDE (" + ", ".join(_quote(h) for h in helpers) + ")"
        options += ", union_by_name=true"
    if deleted is not None and not row_number:
        raise RuntimeError("a table with a column named file_row_number cannot be read with deletion vectors")
    # Rows deletion vectors delete (another engine's DELETE/UPDATE/MERGE) are left out first.
    anti = (f"ANTI JOIN temp.main.{_quote(deleted)} d ON r.{_quote(file_col)} = d.path "
            f"AND r.file_row_number = d.row " if deleted is not None else "")
    return (
        f"SELECT {columns} FROM (SELECT r.*, m.{_quote(seq)}, m.{_quote(ord_)} FROM "
        f"read_parquet({_file_list([f.path for f in files])}, {options}, hive_partitioning=false) r "
        f"{anti}JOIN (VALUES {seqs}) AS m({_quote(path)}, {_quote(seq)}, {_quote(ord_)}) "
        f"ON r.{_quote(file_col)} = m.{_quote(path)}) "
        f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {ordering}) = 1"
    )


def _fresh(base: str, taken: set) -> str:
    """`base`, or `base_N`: a column name no name in `taken` (lower case) equals ignoring case."""
    name, n = base, 0
    while name.lower() in taken:
        n += 1
        name = f"{base}_{n}"
    taken.add(name.lower())
    return name


def _file_list(paths: List[str]) -> str:
    """A DuckDB list of file paths that read_parquet opens literally.

    read_parquet expands glob patterns in every path it is given, so a lake folder named
    `lake[1]*` would read other folders' files (or the same file twice). Each special character
    becomes a one-character class (`[*]`), which matches exactly that character.
    """
    return "[" + ", ".join(_literal(_glob_literal(p)) for p in paths) + "]"


def _glob_literal(path: str) -> str:
    return "".join(f"[{c}]" if c in _GLOB_CHARS else c for c in path)


_GLOB_CHARS = frozenset("*?[{}")


def _partition_value(value: Optional[str], t: pa.DataType) -> str:
    """A Delta partition value (text in the log) as a typed DuckDB expression."""
    duck = _duckdb_type(t)
    if value is None:
        return f"CAST(NULL AS {duck})"
    if duck == "BLOB":
        return f"encode({_literal(value)})"
    return f"CAST({_literal(value)} AS {duck})"


def _declared_type(schema: pa.Schema, column: str) -> pa.DataType:
    index = schema.get_field_index(column)
    return schema.field(index).type if index >= 0 else pa.string()


class _Capsule:
    """Hands a core-exported ArrowSchema capsule to pyarrow (PyCapsule protocol)."""

    __slots__ = ("capsule",)

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __arrow_c_schema__(self) -> Any:
        return self.capsule


def _restore_types(result: pa.Table, catalog: _Catalog, storage_of) -> pa.Table:
    """Casts columns that came straight from a table column back to its declared type."""
    columns = []
    changed = False
    for field, column in zip(result.schema, result.columns):
        declared = catalog.declared.get(field.name)
        if declared is not None and field.type != declared.type and field.type == storage_of(declared.type):
            try:
                column = restore_declared(column, declared.type)
                field = pa.field(field.name, column.type, field.nullable)
                changed = True
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        columns.append(column)
    if not changed:
        return result
    return pa.Table.from_arrays(columns, names=result.column_names)


def _storage_type(t: pa.DataType) -> pa.DataType:
    """Mirror of the core's storage mapping, for the result-type check."""
    if pa.types.is_dictionary(t):
        return _storage_type(t.value_type)
    if pa.types.is_uint8(t):
        return pa.int16()
    if pa.types.is_uint16(t):
        return pa.int32()
    if pa.types.is_uint32(t):
        return pa.int64()
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    return t


def _check_namespace(namespace: Any) -> None:
    if not isinstance(namespace, str) or not _IDENTIFIER.match(namespace):
        raise ValueError(f"invalid namespace {namespace!r}: use an identifier such as 'default'")


def _check_query(query: Any) -> None:
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"sql() needs a non-empty query string, got {type(query).__name__}")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"the query holds text that is not valid Unicode ({e.reason} at character {e.start})") from None


def _read_statement(con: duckdb.DuckDBPyConnection, query: str) -> Tuple[str, str]:
    """(prefix, select): the statement as `prefix SELECT * FROM query(select)`.

    Only parses. SELECT and EXPLAIN [ANALYZE] of a SELECT pass; anything else is a ValueError
    naming the statement. This check is a courtesy: query() accepts nothing but one SELECT anyway.
    """
    statements = _parse(con, query)
    if len(statements) != 1:
        raise ValueError(f"sql() runs exactly one statement, got {len(statements)}")
    statement = statements[0]
    if statement.named_parameters:
        raise ValueError("sql() takes no parameters ($1, ?): write the values into the query")
    kind = statement.type.name
    text = statement.query
    prefix = ""
    if kind == "EXPLAIN":
        tokens = duckdb.tokenize(text)
        analyze = len(tokens) > 2 and text[tokens[1][0]:tokens[2][0]].strip().upper() == "ANALYZE"
        start = tokens[2 if analyze else 1][0] if len(tokens) > 1 else len(text)
        if text[start:start + 1] == "(":
            raise ValueError("sql() runs EXPLAIN and EXPLAIN ANALYZE without options")
        prefix = "EXPLAIN ANALYZE " if analyze else "EXPLAIN "
        text = text[start:]
        inner = _parse(con, text)
        kind = inner[0].type.name if len(inner) == 1 else "MULTI"
    if kind != "SELECT":
        raise ValueError(f"sql() only reads: {kind} statements are not allowed; use Table.append to write")
    return prefix, text


def _parse(con: duckdb.DuckDBPyConnection, query: str) -> list:
    try:
        return con.extract_statements(query)
    except duckdb.Error as e:
        quoted = _quote_default_namespace(query)
        if quoted != query:
            try:
                return con.extract_statements(quoted)
            except duckdb.Error:
                pass
        raise RuntimeError(f"SQL syntax error: {e}") from None


def _quote_default_namespace(query: str) -> str:
    """`default.name` as `"default".name`: DEFAULT is a reserved word, so the qualified name of
    the default namespace does not parse unquoted. Tokens, not text: strings and comments that
    say default.x stay as they are. Only used on text that failed to parse."""
    tokens = duckdb.tokenize(query)
    out, last = [], 0
    for (start, kind), following in zip(tokens, tokens[1:]):
        word = query[start:following[0]].rstrip()
        if (
            kind.name == "keyword"
            and word.lower() == "default"
            and following[1].name == "operator"
            and query[following[0]] == "."
        ):
            out.append(query[last:start] + '"default"')
            last = start + len(word)
    return "".join(out) + query[last:]


def _parse_tree(con: duckdb.DuckDBPyConnection, select: str) -> Dict[str, Any]:
    """DuckDB's parse tree of the SELECT (json_serialize_sql)."""
    try:
        return _tree.loads(con.execute("SELECT json_serialize_sql(?)", [select]).fetchall()[0][0])
    except duckdb.Error as e:
        raise RuntimeError(f"SQL syntax error: {e}") from None


def _referenced_tables(lake: Any, tree: Dict[str, Any], namespace: str) -> List[Tuple[str, str]]:
    """The lake tables (namespace, name) that the SELECT's parse tree names.

    Names compare ignoring case, as SQL identifiers do. A name that matches no lake table is left
    for DuckDB to report (KeyError); a CTE that shares a table's name only costs loading that
    table. Names inside strings (query('...')) are not seen, so such tables stay unknown.
    """
    names = set()
    _collect_tables(tree, namespace, names)
    if not names:
        return []
    by_lower: Dict[Tuple[str, str], List[Tuple[str, str]]] = {}
    for qualified in lake.tables():
        ns, name = qualified.split(".", 1)
        by_lower.setdefault((ns.lower(), name.lower()), []).append((ns, name))
    out = []
    for ref in sorted(names):
        found = by_lower.get(ref, [])
        if len(found) > 1:
            listed = " and ".join(f"{ns}.{name}" for ns, name in found)
            raise ValueError(f"{listed} differ only in case, so SQL cannot tell them apart; rename one")
        out.extend(found)
    return out


def _as_of_spec(as_of: Any) -> Optional[Dict[str, int]]:
    """sql(as_of=...) as a scan argument: an int is a version, a datetime an instant (naive: UTC)."""
    if as_of is None:
        return None
    if isinstance(as_of, bool) or not isinstance(as_of, (int, dt.datetime)):
        raise ValueError(
            f"as_of must be a table version (int) or a datetime, got {type(as_of).__name__}"
        )
    if isinstance(as_of, int):
        if not 0 <= as_of <= _MAX_VERSION:
            raise ValueError(f"as_of must be a version from 0 to {_MAX_VERSION}, got {as_of}")
        return {"version": as_of}
    return {"timestamp_ms": _epoch_ms(as_of)}


def _epoch_ms(instant: dt.datetime) -> int:
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=dt.timezone.utc)
    delta = instant - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_MAX_VERSION = 2**63 - 1


def _reads_a_table(node: Any) -> bool:
    """True if a parse-tree expression holds a subquery or names a table."""
    return any(
        isinstance(n, dict) and (n.get("class") == "SUBQUERY" or n.get("type") in ("BASE_TABLE", "SUBQUERY"))
        for n in _tree.nodes(node)
    )


def _at_clause_spec(con: duckdb.DuckDBPyConnection, at: Dict[str, Any], table: str) -> Dict[str, int]:
    """The scan argument an `AT (VERSION => ...)` / `AT (TIMESTAMP => ...)` clause asks for; its
    expression is evaluated as a constant (`now() - INTERVAL 1 HOUR` works)."""
    unit = str(at.get("unit", "")).upper()
    if unit not in ("VERSION", "TIMESTAMP"):
        raise ValueError(f"{table} AT ({unit} => ...): timelake reads AT (VERSION => n) and AT (TIMESTAMP => t)")
    if _reads_a_table(at.get("expr")):
        raise ValueError(f"{table} AT ({unit} => ...): the value must be a constant expression, not a query")
    statement = json.loads(con.execute("SELECT json_serialize_sql('SELECT 1')").fetchall()[0][0])
    statement["statements"][0]["node"]["select_list"][0] = at["expr"]
    try:
        text = con.execute("SELECT json_deserialize_sql(?)", [_tree.dumps(statement)]).fetchall()[0][0]
        value = con.execute(text).fetchall()[0][0]
    except duckdb.Error as e:
        raise ValueError(f"{table} AT ({unit} => ...): the value could not be computed: {_message(e)}") from None
    if unit == "VERSION":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_VERSION:
            raise ValueError(f"{table} AT (VERSION => {value!r}): a version is an integer from 0 to {_MAX_VERSION}")
        return {"version": value}
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{table} AT (TIMESTAMP => {value!r}): not an ISO-8601 timestamp") from None
    elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        raise ValueError(f"{table} AT (TIMESTAMP => {value!r}): not a timestamp")
    return {"timestamp_ms": _epoch_ms(value)}


def _travel_views(con: duckdb.DuckDBPyConnection, tree: Dict[str, Any], tables: List[Tuple[str, str]],
                  namespace: str, as_of: Optional[Dict[str, int]]) -> List[Tuple[str, str, str, Dict[str, int]]]:
    """Rewrites, in `tree`, every reference to a lake table that reads an older version (its own AT
    clause, else `as_of`) into a reference to a view of that version; returns the views to make as
    (namespace, table, view, scan argument). References keep their name as alias, so qualified
    column names (t.col) still resolve."""
    by_lower = {(ns.lower(), name.lower()): (ns, name) for ns, name in tables}
    out: List[Tuple[str, str, str, Dict[str, int]]] = []

    # An explicit stack of (node, the CTE names in scope, lower case), walked in document order:
    # parse trees can nest deeper than Python's recursion limit (see _tree). An unqualified
    # reference to a CTE in scope is the CTE.
    stack: List[Tuple[Any, frozenset]] = [(tree, frozenset())]
    while stack:
        node, ctes = stack.pop()
        if isinstance(node, list):
            stack.extend((value, ctes) for value in reversed(node))
            continue
        if not isinstance(node, dict):
            continue
        entries = (node.get("cte_map") or {}).get("map") or []
        if entries:
            # A CTE's body sees the names of the CTEs before it (and the lake table it may share
            # a name with); the rest of the statement sees them all.
            seen = set(ctes)
            scoped = []
            for entry in entries:
                scoped.append((entry.get("value"), frozenset(seen)))
                seen.add(str(entry.get("key", "")).lower())
            rest = [(v, frozenset(seen)) for k, v in node.items() if k != "cte_map"]
            stack.extend(reversed(scoped + rest))
            continue
        if node.get("type") == "BASE_TABLE" and not node.get("catalog_name") and node.get("table_name"):
            if not node.get("schema_name") and node["table_name"].lower() in ctes:
                continue
            found = by_lower.get(((node.get("schema_name") or namespace).lower(), node["table_name"].lower()))
            at = node.get("at_clause")
            if found is not None and (at or as_of is not None):
                ns, name = found
                spec = _at_clause_spec(con, at, f"{ns}.{name}") if at else as_of
                kind, value = next(iter(spec.items()))
                view = f"{name}@{'v' if kind == 'version' else 't'}{value}"
                if not node.get("alias"):
                    node["alias"] = node["table_name"]
                # Where the reference stood in the text (bytes), for _rewrite_travels.
                node["timelake_travel_text"] = f"{_quote(ns)}.{_quote(view)} AS {_quote(node['alias'])}"
                node.update(schema_name=ns, table_name=view, at_clause=None,
                            qualified_name={"path": [ns, view]})
                out.append((ns, name, view, spec))
            continue
        stack.extend((value, ctes) for value in reversed(list(node.values())))
    return out


def _rewrite_travels(con: duckdb.DuckDBPyConnection, select: str, tree: Dict[str, Any]) -> str:
    """The SELECT with its time-travel references rewritten (_travel_views marked them in `tree`).

    DuckDB renders the rewritten tree back to SQL (json_deserialize_sql), which takes trees
    nested at most 256 levels deep; a deeper statement has each reference's text replaced
    instead, at the byte range the parse tree gives for it.
    """
    marked = [n for n in _tree.nodes(tree) if isinstance(n, dict) and "timelake_travel_text" in n]
    edits = [(n.get("query_location"), n.get("query_location_length"), n.pop("timelake_travel_text")) for n in marked]
    try:
        return con.execute("SELECT json_deserialize_sql(?)", [_tree.dumps(tree)]).fetchall()[0][0]
    except duckdb.SerializationException:
        pass
    text = select.encode("utf-8")
    if not all(isinstance(at, int) and isinstance(size, int) and size > 0 for at, size, _ in edits):
        raise ValueError("this statement nests too deeply for time travel to rewrite it: "
                         "nest its expressions less, or read the older version with a simpler statement")
    for at, size, replacement in sorted(edits, reverse=True):
        text = text[:at] + replacement.encode("utf-8") + text[at + size:]
    return text.decode("utf-8")


def _pruning_conjuncts(tree: Dict[str, Any], tables: List[Tuple[str, str]], namespace: str) -> Optional[List[Conjunct]]:
    """The WHERE conjuncts that may prune the files of the statement's one table (see _sql_filter)."""
    found = filter_conjuncts(tree)
    if found is None or len(tables) != 1:
        return None
    (schema, name), conjuncts = found
    ns, table = tables[0]
    if (schema or namespace).lower() != ns.lower() or name.lower() != table.lower():
        return None
    return conjuncts


def _names_table(tree: Dict[str, Any], table: Tuple[str, str], namespace: str) -> bool:
    """True if the (rewritten) tree still names `table` itself, not only older versions of it."""
    names: set = set()
    _collect_tables(tree, namespace, names)
    return (table[0].lower(), table[1].lower()) in names


def _collect_tables(tree: Any, namespace: str, out: set) -> None:
    for node in _tree.nodes(tree):
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        if kind == "BASE_TABLE" or (kind == "SHOW_REF" and node.get("show_type") == "SHOW"):
            if not node.get("catalog_name") and node.get("table_name"):
                out.add(((node.get("schema_name") or namespace).lower(), node["table_name"].lower()))


def _execute(catalog: _Catalog, namespace: str, prefix: str, select: str) -> pa.Table:
    try:
        return _interruptible(catalog.con, lambda: catalog.con.sql(prefix + "SELECT * FROM query(?)", params=[select]).to_arrow_table())
    except duckdb.CatalogException as e:
        if "Table with name" in str(e):
            raise KeyError(f"{_message(e)} (lake {catalog.lake.location}, namespace {namespace!r})") from None
        raise RuntimeError(f"query failed: {_message(e)}") from None
    except duckdb.Error as e:
        raise RuntimeError(f"query failed: {_message(e)}") from None
    except (pa.ArrowException, UnicodeError) as e:
        raise RuntimeError(f"query result could not be converted to Arrow: {e}") from None


def _interruptible(con: duckdb.DuckDBPyConnection, run):
    """run(), stopped by Ctrl-C with KeyboardInterrupt, in the main thread.

    DuckDB notices SIGINT only now and then (and then raises RuntimeError "Query interrupted").
    So on the main thread the query runs in a worker thread while the main thread waits, in a wait
    that Python's signal handling interrupts; on Ctrl-C it asks DuckDB to stop the query
    (Connection.interrupt) and waits until the worker has left DuckDB before raising, so that no
    thread is still inside DuckDB when the caller (or the interpreter, at exit) goes on. Other
    threads cannot receive signals and run the query directly.
    """
    if threading.current_thread() is not threading.main_thread():
        return run()
    box: Dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = run()
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            box["error"] = e
        finally:
            done.set()

    # Waiting on an Event, not Thread.join: on Python 3.11 a KeyboardInterrupt inside join() can
    # mark a thread that is still running as finished.
    threading.Thread(target=work, name="timelake-sql", daemon=True).start()
    interrupted = False
    while not done.is_set():
        try:
            done.wait(0.25)
        except KeyboardInterrupt:
            interrupted = True
            con.interrupt()  # asked again on every further Ctrl-C until the worker stops
    if interrupted:
        raise KeyboardInterrupt
    if "error" in box:
        raise box["error"]
    return box["value"]


def _message(error: Exception) -> str:
    """DuckDB's message without its "LINE 1:" excerpt, which would show the query() wrapper."""
    return str(error).split("\n\nLINE ", 1)[0]


def run_sql(lake: Any, query: str, namespace: str = "default", as_of: Any = None) -> pa.Table:
    _check_query(query)
    _check_namespace(namespace)
    as_of_spec = _as_of_spec(as_of)
    catalog = lake._catalog()
    prefix, select = _read_statement(catalog.con, query)
    tree = _parse_tree(catalog.con, select)
    tables = _referenced_tables(lake, tree, namespace)
    travels = _travel_views(catalog.con, tree, tables, namespace, as_of_spec)
    if as_of_spec is not None and "version" in as_of_spec and len({(ns, name) for ns, name, _, _ in travels}) > 1:
        raise ValueError(
            "as_of=<version> is ambiguous for a query over several tables (each has its own versions): "
            "write AT (VERSION => n) after each table, or pass a datetime"
        )
    current = tables
    if travels:
        select = _rewrite_travels(catalog.con, select, tree)
        traveled = {(ns, name) for ns, name, _, _ in travels}
        current = [t for t in tables if t not in traveled or _names_table(tree, t, namespace)]
    conjuncts = _pruning_conjuncts(tree, current, namespace) if not travels else None
    try:
        try:
            # A table whose files need admitting restarts the preparation on a new connection;
            # the second pass admits nothing new.
            for attempt in range(len(tables) + len(travels) + 1):
                try:
                    catalog.begin(namespace)
                    schemas = [catalog.add_table(ns, name, conjuncts)[1] for ns, name in current]
                    schemas += [catalog.add_travel(ns, name, view, spec) for ns, name, view, spec in travels]
                    break
                except _Reconnected:
                    continue
            catalog.use_fast_time_bucket(schemas)
        except duckdb.Error as e:
            raise RuntimeError(f"could not prepare the lake's tables for the query: {e}") from None
        result = _execute(catalog, namespace, prefix, select)
    finally:
        catalog.end()  # the result is read: the copies it came from may be evicted
    return _restore_types(result, catalog, _storage_type)


class _Stream:
    __slots__ = ("capsule",)

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.capsule


def run_latest(lake: Any, name: str) -> pa.Table:
    """The newest row per series, from the core's last-value index, in the declared types."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"invalid table name {name!r}: {e.reason}") from None
    handle = lake._snapshot(name)
    try:
        rows = pa.table(_Stream(handle.latest()))
        declared = pa.schema(_Capsule(handle.schema_capsule()))
        columns = [restore_declared(rows.column(field.name), field.type) for field in declared]
        schema = pa.schema(
            [field.with_type(column.type) for field, column in zip(declared, columns)], declared.metadata
        )
        return pa.Table.from_arrays(columns, schema=schema)
    except (pa.ArrowException, UnicodeError) as e:
        raise RuntimeError(f"latest({name!r}): the last-value index could not be read as the declared schema: {e}") from None
