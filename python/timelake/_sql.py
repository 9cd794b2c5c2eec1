"""SQL over a lake: DuckDB views built from the core's scan plans.

Every table a query names becomes a DuckDB view over exactly the Parquet files of the table's
latest snapshot (taken when the call starts). Chunks whose files overlap in time are deduplicated
at read time, newest commit first, when the table's contract asks for dedup; all other files are
scanned plainly. Results are cast back to the declared Arrow types where DuckDB widened them.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

import duckdb
import pyarrow as pa

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
_ALLOWED_STATEMENTS = {"SELECT", "EXPLAIN"}


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


class _Catalog:
    """One DuckDB connection (per thread and lake) holding a view per lake table it has seen.

    A view is rebuilt only when its table's version changed since the view was made, and the
    connection caches Parquet footers (data files never change once written), so repeated
    queries pay neither for connecting nor for re-reading file metadata.
    """

    def __init__(self, lake: Any) -> None:
        self.lake = lake
        self.con = duckdb.connect(":memory:")
        self.con.execute("SET TimeZone='UTC'")
        self.con.execute("SET parquet_metadata_cache=true")
        self._views: Dict[str, Tuple[int, pa.Schema, Optional[str]]] = {}
        self._fast_time_bucket = False
        self._empty = 0
        self._schemas = set()
        self.declared: Dict[str, pa.Field] = {}

    def begin(self, namespace: str) -> None:
        """Starts a statement: result-type hints are per statement."""
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

    def add_table(self, ns: str, name: str) -> Tuple[Any, pa.Schema]:
        """Makes `ns.name` current in the connection; returns the core handle and declared schema."""
        qualified = f"{ns}.{name}"
        handle = self.lake._snapshot(qualified)
        version = handle.version
        cached = self._views.get(qualified)
        if cached is not None and cached[0] == version:
            declared = cached[1]
        else:
            plan = handle.scan()
            # Schema capsules can be imported once; turn them into pyarrow schemas right away.
            plan["declared_schema"] = pa.schema(_Capsule(plan["declared_schema"]))
            plan["file_schema"] = pa.schema(_Capsule(plan["file_schema"]))
            self._ensure_schema(ns)
            if cached is not None and cached[2] is not None:
                self.con.unregister(cached[2])
            view_sql, empty_name = self._view_sql(plan)
            self.con.execute(f"CREATE OR REPLACE VIEW {_quote(ns)}.{_quote(name)} AS {view_sql}")
            declared = plan["declared_schema"]
            self._views[qualified] = (plan["version"], declared, empty_name)
        for field in declared:
            self.declared.setdefault(field.name, field)
        return handle, declared

    def forget(self, qualified: str) -> None:
        self._views.pop(qualified, None)

    def _view_sql(self, plan: dict) -> Tuple[str, Optional[str]]:
        """The view's SQL, and the name of the empty Arrow table it reads (if it does)."""
        declared = plan["declared_schema"]
        file_schema = plan["file_schema"]
        partition_columns = plan["partition_columns"]
        contract = plan["contract"]
        storage_types = {f.name: f.type for f in file_schema}
        columns = ", ".join(_quote(f.name) for f in declared)
        files = plan["files"]
        if not files:
            self._empty += 1
            empty_name = f"__timelake_empty_{self._empty}"
            empty = pa.schema([pa.field(f.name, storage_types.get(f.name, f.type)) for f in declared]).empty_table()
            self.con.register(empty_name, empty)
            return f"SELECT {columns} FROM {_quote(empty_name)}", empty_name
        foreign = contract["time_column"] is None and not any(f[2] for f in files)
        union = ", union_by_name=true" if foreign else ""
        parts = []
        plain = [f for f in files if not f[5]]
        # Files of other engines' partitioned tables: partition values come from the log.
        groups: Dict[Tuple, List[str]] = {}
        for f in plain:
            key = tuple((c, f[6].get(c)) for c in partition_columns)
            groups.setdefault(key, []).append(f[0])
        for key, paths in groups.items():
            extra = "".join(
                f", {_partition_value(value, _declared_type(declared, column))} AS {_quote(column)}"
                for column, value in key
            )
            file_list = "[" + ", ".join(_literal(p) for p in paths) + "]"
            parts.append(f"SELECT *{extra} FROM read_parquet({file_list}, hive_partitioning=false{union})")
        dedup = [f for f in files if f[5]]
        if dedup:
            order = "DESC" if contract["dedup"] == "last" else "ASC"
            keys = ", ".join(_quote(k) for k in contract["series_key"] + [contract["time_column"]])
            file_list = "[" + ", ".join(_literal(f[0]) for f in dedup) + "]"
            seqs = ", ".join(f"({_literal(f[0])}, {int(f[2])}, {int(f[3])})" for f in dedup)
            parts.append(
                f"SELECT {columns} FROM (SELECT r.*, m.__tl_seq, m.__tl_ord FROM "
                f"read_parquet({file_list}, filename='__tl_file', file_row_number=true, hive_partitioning=false) r "
                f"JOIN (VALUES {seqs}) AS m(__tl_path, __tl_seq, __tl_ord) ON r.__tl_file = m.__tl_path) "
                f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY __tl_seq {order}, "
                f"__tl_ord {order}, file_row_number {order}) = 1"
            )
        if len(parts) == 1 and not dedup:
            return f"SELECT {columns} FROM ({parts[0]})", None
        return f"SELECT {columns} FROM (" + " UNION ALL BY NAME ".join(f"({p})" for p in parts) + ")", None


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


def _referenced_tables(lake: Any, query: str, namespace: str) -> List[Tuple[str, str]]:
    """Lake tables the query may name: every table whose name occurs in it as a word.

    Matching words rather than binding the query keeps this independent of DuckDB's binder
    (which cannot bind a query before its tables exist); a false match only costs loading a
    snapshot that the query then does not read.
    """
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    out = []
    for qualified in lake.tables():
        ns, name = qualified.split(".", 1)
        if name.lower() in words:
            out.append((ns, name))
    return out


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


def _check_namespace(namespace: str) -> None:
    if not isinstance(namespace, str) or not _IDENTIFIER.match(namespace):
        raise ValueError(f"invalid namespace {namespace!r}: use an identifier such as 'default'")


def _execute(catalog: _Catalog, namespace: str, query: str) -> pa.Table:
    try:
        return catalog.con.sql(query).to_arrow_table()
    except duckdb.CatalogException as e:
        if "Table with name" in str(e):
            raise KeyError(f"{e} (lake {catalog.lake.location}, namespace {namespace!r})") from None
        raise RuntimeError(f"query failed: {e}") from None
    except duckdb.Error as e:
        raise RuntimeError(f"query failed: {e}") from None


def run_sql(lake: Any, query: str, namespace: str = "default") -> pa.Table:
    if not isinstance(query, str) or not query.strip():
        raise ValueError("sql() needs a non-empty query string")
    _check_namespace(namespace)
    catalog = lake._catalog()
    try:
        statements = catalog.con.extract_statements(query)
    except duckdb.Error as e:
        raise RuntimeError(f"SQL syntax error: {e}") from None
    if len(statements) != 1:
        raise ValueError(f"sql() runs exactly one statement, got {len(statements)}")
    kind = statements[0].type.name
    if kind not in _ALLOWED_STATEMENTS:
        raise ValueError(
            f"sql() only reads: {kind} statements are not allowed; use Table.append to write"
        )
    catalog.begin(namespace)
    schemas = [catalog.add_table(ns, name)[1] for ns, name in _referenced_tables(lake, query, namespace)]
    catalog.use_fast_time_bucket(schemas)
    result = _execute(catalog, namespace, query)
    return _restore_types(result, catalog, _storage_type)


class _Stream:
    __slots__ = ("capsule",)

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.capsule


def run_latest(lake: Any, name: str) -> pa.Table:
    """The newest row per series, from the core's last-value index, in the declared types."""
    handle = lake._snapshot(name)
    rows = pa.table(_Stream(handle.latest()))
    declared = pa.schema(_Capsule(handle.schema_capsule()))
    columns = [restore_declared(rows.column(field.name), field.type) for field in declared]
    schema = pa.schema(
        [field.with_type(column.type) for field, column in zip(declared, columns)], declared.metadata
    )
    return pa.Table.from_arrays(columns, schema=schema)
