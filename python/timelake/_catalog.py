"""The catalog: per thread and lake, one confined DuckDB connection with a view per lake table.

A statement's catalog finds the lake tables the statement reads, asks the core for each one's scan
plan (pruned by the statement's WHERE where _sql_filter finds that safe, or at an older version for
time travel, see _travel), has a lake in an object store copy the plan's files into its local
cache (the core's FileCache, pinned until the statement's result is read), and renders each plan
as a view (_render). The connection only reads the lake's data files (_confine).
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, List, Optional, Set, Tuple

import pyarrow as pa

from . import _core, _tree
from ._capsules import SchemaCapsule
from ._confine import confined_connection, lake_directory, readable, table_directory
from ._render import view_sql
from ._rollup_spec import ROWS, spec_of
from ._sql_filter import Conjunct, ScanFilter, filter_conjuncts
from ._sql_filter import resolve as resolve_filter
from ._sql_text import literal, quote
from ._time_weighted import install as install_time_weighted_mean

# DuckDB's time_bucket on TIMESTAMPTZ goes through ICU calendars (it honours the session time
# zone), which costs 10-20x more than the same bucketing on a plain TIMESTAMP. Sessions here are
# always UTC, so bucketing the UTC wall-clock time and labelling the result UTC is the same
# function: this macro does exactly that (checked equal to the built-in for widths from
# milliseconds to years, before and after 1970). It returns TIMESTAMPTZ for every input, so it is
# only installed while a statement reads no table with naive timestamps or dates, whose users
# expect DuckDB's own result types. Calls with an offset, origin or time zone use the built-in.
# Buckets of whole seconds go through to_timestamp(seconds as a double), which is exact for them;
# finer ones through make_timestamptz(microseconds), since a double of seconds loses microseconds
# more than 2^53 of them (285 years) from 1970.
_FAST_TIME_BUCKET = (
    "CREATE OR REPLACE TEMP MACRO time_bucket(w, t) AS "
    "CASE WHEN w >= INTERVAL 1 second "
    "THEN to_timestamp(epoch_us(system.main.time_bucket(w, make_timestamp(epoch_us(t)))) / 1000000) "
    "ELSE make_timestamptz(epoch_us(system.main.time_bucket(w, make_timestamp(epoch_us(t))))) END, "
    "(w, t, o) AS system.main.time_bucket(w, t, o)"
)


class Reconnected(Exception):
    """The catalog took a new connection to admit more files: the statement starts over."""


class _View:
    """What a catalog knows of the view it made for one table."""

    __slots__ = ("version", "declared", "restored", "empty_name", "handle", "scan_filter", "files", "plan", "paths")

    def __init__(self, version: int, declared: pa.Schema, restored: Dict[str, pa.DataType], empty_name: Any,
                 handle: Any, scan_filter: Optional[ScanFilter], files: int, plan: Any,
                 paths: Optional[List[str]]) -> None:
        self.version = version
        self.declared = declared
        self.restored = restored  # storage types of the columns results cast back to `declared`
        self.empty_name = empty_name  # the Arrow tables the view reads (a name or a list), if any
        self.handle = handle
        self.scan_filter = scan_filter  # the filter the plan was made with (None: every file)
        self.files = files  # data files the view reads
        self.plan = plan  # the core ScanPlan
        self.paths = paths  # local copies the view reads (remote lakes), None for local lakes


class Catalog:
    """One DuckDB connection (per thread and lake) holding a view per lake table it has seen.

    A view is rebuilt only when its table's version changed since the view was made, and the
    connection caches Parquet footers (data files never change once written), so repeated
    queries pay neither for connecting nor for re-reading file metadata.
    """

    def __init__(self, lake: Any) -> None:
        # The lake holds its catalogs (per thread); a weak reference back keeps that from being a
        # cycle, so a Lake and its core handles go as soon as the user drops the Lake.
        self._lake = weakref.ref(lake)
        self._root = lake_directory(lake.location)
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
                self._directories.add(table_directory(self._root, ns, name))
        self.generation = 0  # counts connections: a new one has none of the old one's views
        self._pins: List[Any] = []  # the current statement's pins on local copies (end())
        self._connect()
        # Per statement, by column name: the declared field of the first table that has the
        # column, and the storage type of those its plan lists as restored (_types.restore_result).
        self.declared: Dict[str, pa.Field] = {}
        self.restored: Dict[str, pa.DataType] = {}

    def _connect(self) -> None:
        self.con = confined_connection(self._directories, self._files)
        install_time_weighted_mean(self.con)  # a TEMP macro: the configuration is locked
        self.generation += 1
        self._views: Dict[str, _View] = {}
        self._rollup_reads: Dict[str, Any] = {}  # rollup -> its _rollup.Reading on this connection
        self._travel_empty: Dict[str, str] = {}  # time-travel view -> the empty table it reads
        self._fast_time_bucket = False
        self._empty = 0
        self._schemas = set()

    def _admit(self, plan: Any) -> bool:
        """Lets DuckDB read the plan's files; True if that took a new connection (configuration
        is locked), which has none of the views made before."""
        if self._root is None:
            return False
        directories, files = readable(self._root, (f.path for f in plan.files))
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
        self.restored = {}
        self._ensure_schema(namespace)
        self.con.execute(f"SET schema = {literal(namespace)}")

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
            self.con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(ns)}")
            self._schemas.add(ns)

    def add_table(self, ns: str, name: str, conjuncts: Optional[List[Conjunct]] = None,
                  handle: Any = None) -> Tuple[Any, pa.Schema]:
        """Makes `ns.name` current in the connection; returns the core handle and declared schema.

        With `conjuncts` (of the statement's WHERE, see _sql_filter) the view lists only the
        files that may hold rows they admit; the statement still applies its whole WHERE.
        """
        qualified = f"{ns}.{name}"
        if handle is None:
            handle = self.lake._snapshot(qualified)  # `handle`: the caller's, just brought up to date
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
            declared, restored = cached.declared, cached.restored
        else:
            plan = handle.scan(**scan_filter.arguments()) if scan_filter is not None else handle.scan()
            declared, restored, registered, paths = self._make_view(
                ns, name, plan, cached.empty_name if cached else None)
            self._views[qualified] = _View(plan.version, declared, restored, registered, handle, scan_filter,
                                           len(plan.files), plan, paths)
        self._note_types(declared, restored)
        return handle, declared

    @property
    def cache_directory(self) -> Optional[str]:
        """The local cache folder of a lake in an object store (None for a local lake)."""
        return self._cache

    def add_travel(self, ns: str, name: str, view: str, spec: Dict[str, int]) -> pa.Schema:
        """Makes `ns.view` a view of table `ns.name` as of an older version (`spec`: version= or
        timestamp_ms=, see Table::ScanAsOf); returns that version's declared schema. Planned anew
        for every statement: a timestamp names a newer version once commits arrive."""
        handle = self.lake._snapshot(f"{ns}.{name}")
        plan = handle.scan(**spec)
        key = f"{ns}.{view}"
        rollup = spec_of(handle.properties)
        # A rollup as it was: its stored rows under a view of their own, shown as a query on the
        # rollup shows them (its defined columns; no pair without rows).
        stored = f"{view}__stored" if rollup is not None else view
        declared, restored, registered, _ = self._make_view(ns, stored, plan, self._travel_empty.pop(key, None))
        if registered is not None:
            self._travel_empty[key] = registered
        if rollup is not None:
            visible = [n for n in rollup.visible() if n in declared.names]
            self.con.execute(
                f"CREATE OR REPLACE VIEW {quote(ns)}.{quote(view)} AS SELECT {', '.join(quote(n) for n in visible)} "
                f"FROM {quote(ns)}.{quote(stored)} WHERE {quote(ROWS)} > 0")
            declared = pa.schema([declared.field(n) for n in visible])
        self._note_types(declared, restored)
        return declared

    def _note_types(self, declared: pa.Schema, restored: Dict[str, pa.DataType]) -> None:
        for field in declared:
            if field.name not in self.declared:
                self.declared[field.name] = field
                if field.name in restored:
                    self.restored[field.name] = restored[field.name]

    def _make_view(self, ns: str, view: str, plan: Any,
                   replaced: Any) -> Tuple[pa.Schema, Dict[str, pa.DataType], Any, Optional[List[str]]]:
        """Creates or replaces the view `ns.view` over a core ScanPlan; returns its declared schema,
        the storage types of the columns its results restore, the Arrow tables it registered (for
        _unregister) and the local copies it reads. `replaced`: what the view it replaces had
        registered, dropped once the new view stands."""
        if self._admit(plan):
            raise Reconnected()
        paths = self._local_paths(plan)
        # Schema capsules can be imported once; turn them into pyarrow schemas right away.
        declared = pa.schema(SchemaCapsule(plan.declared_schema))
        file_schema = pa.schema(SchemaCapsule(plan.file_schema))
        storage = pa.schema(SchemaCapsule(plan.storage_schema))
        restored = {name: storage.field(name).type for name in plan.restored}
        self._ensure_schema(ns)
        sql, registered = view_sql(plan, declared, file_schema, paths, self._register)
        self.con.execute(f"CREATE OR REPLACE VIEW {quote(ns)}.{quote(view)} AS {sql}")
        if replaced is not None:
            self._unregister(replaced)
        return declared, restored, registered, paths

    def _register(self, kind: str, table: pa.Table) -> str:
        """Registers an Arrow table a view reads under a fresh name; returns the name."""
        self._empty += 1
        name = f"__timelake_{kind}_{self._empty}"
        self.con.register(name, table)
        return name

    def _unregister(self, names: Any) -> None:
        """Drops the Arrow tables a replaced view read (a name or a list of names)."""
        for name in [names] if isinstance(names, str) else names:
            self.con.unregister(name)

    def _scan_filter(self, handle: Any, conjuncts: List[Conjunct]) -> Optional[ScanFilter]:
        storage = pa.schema(SchemaCapsule(_core.storage_schema(handle.schema_capsule())))
        return resolve_filter(self.con, conjuncts, storage, handle.contract)

    def forget(self, qualified: str) -> None:
        self._views.pop(qualified, None)

    def _local_paths(self, plan: Any) -> Optional[List[str]]:
        """For a lake in an object store: local copies of the plan's files, in order (downloaded
        now when missing). None for local lakes, whose files DuckDB reads in place."""
        if self._cache is None:
            return None
        paths, pin = self.lake._core.local_copies(plan)
        self._pins.append(pin)  # no eviction takes them until the statement ends
        return paths

    def end(self) -> None:
        """Ends a statement: its local copies may be evicted again."""
        pins, self._pins = self._pins, []
        for pin in pins:
            pin.release()


def referenced_tables(lake: Any, tree: Dict[str, Any], namespace: str) -> List[Tuple[str, str]]:
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
    for qualified in lake._core.tables_for_read():  # within the version check interval: no request
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


def pruning_conjuncts(tree: Dict[str, Any], tables: List[Tuple[str, str]], namespace: str) -> Optional[List[Conjunct]]:
    """The WHERE conjuncts that may prune the files of the statement's one table (see _sql_filter)."""
    found = filter_conjuncts(tree)
    if found is None or len(tables) != 1:
        return None
    (schema, name), conjuncts = found
    ns, table = tables[0]
    if (schema or namespace).lower() != ns.lower() or name.lower() != table.lower():
        return None
    return conjuncts


def names_table(tree: Dict[str, Any], table: Tuple[str, str], namespace: str) -> bool:
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
