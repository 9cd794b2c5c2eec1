"""Materialized rollups: per-bucket aggregates of a time-series table, kept in a Delta table of
their own, refreshed incrementally and read exactly.

A rollup is defined by one statement (the seed system's, so its users' statements run unchanged):

    CREATE MATERIALIZED ROLLUP ns.hourly [WITH (retention = '1825d')] AS
      SELECT time_bucket(INTERVAL '1 hour', time) AS hour, device_id,
             avg(temp) AS temp, max(temp) AS peak, count(*) AS n
      FROM ns.readings GROUP BY 1, 2

It becomes a timelake table `ns.hourly` whose time column is the bucket, whose series key is the
grouping columns and whose dedup policy is "last": a refresh appends the recomputed rows of the
(group, bucket) pairs that changed, and the new row of a pair replaces the old one. Besides the
aggregates users see, each row keeps the state that makes them mergeable (`temp__sum` and
`temp__count` for an average, count/mean/M2 for a deviation, the time of a first or last value)
and `__rows`, the raw rows the pair holds (0: the pair's rows were deleted since).

Exactness. A refresh records the source version it reflects in the rollup's commit, as a Delta
txn (appId `timelake:rollup:<source table id>`, version = the source version); the core's
committer skips a refresh whose version the rollup already holds or has passed
(AppendOptions::batch_version), so refreshes land in source-version order and never twice. The
pairs a refresh recomputes are found by diffing the source's file list at the recorded version
with the one at the new version: every (group, bucket) that an added or removed file holds is
recomputed from the raw rows at the new version (appends, late rows, upserts, compaction, other
engines' deletes alike). Chunks the source's own retention dropped are the exception: their
buckets stay in the rollup (a rollup outlives the raw data; it has a retention of its own).

Invariant (every row of the rollup equals its pair's aggregate at the recorded version V): a
refresh from V to W rewrites exactly the pairs that changed in (V, W]; the others had their value
at V and still have it at W; a refresh started from an older V' < V that lands later must have a
W' > V (the committer refuses it otherwise), and it rewrote every pair changed in (V', W'], a
superset of those changed in (V, W'].

Reading: a query on the rollup sees, for the pairs that changed since V (the same diff, up to the
source's latest version), the aggregate of the raw rows, and the stored rows for every other pair,
so it always equals the raw data at the source's latest version (except for the retained buckets
of dropped chunks). Routing of source queries to rollups lives in _route.
"""

from __future__ import annotations

import random
import re
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import duckdb
import pyarrow as pa

from . import _core
from ._capsules import SchemaCapsule
from ._catalog import Reconnected, referenced_tables
from ._durations import chunk_end_us, chunk_start_us, duration_us
from ._rollup_spec import (  # noqa: F401 - re-exported: what a rollup is
    PROPERTY_QUERY, PROPERTY_SOURCE, PROPERTY_SOURCE_ID, PROPERTY_SPEC, ROWS, Aggregate, Spec, _DEVIATIONS,
    _FUNCTIONS, spec_of)
from ._sql_text import literal, message, quote

_STATEMENT = re.compile(r"\s*(CREATE|REFRESH|DROP)\s+MATERIALIZED\s+ROLLUP\b", re.IGNORECASE)
_IDENT = r'(?:"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_]*)'
_NAME = re.compile(rf"\s*({_IDENT})(?:\s*\.\s*({_IDENT}))?", re.DOTALL)

# Comments and white space before a statement.
_COMMENTS = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)+", re.DOTALL)

# parse(con, select) -> (prefix, select, parse tree): _sql's statement reader, handed in by it.
Parse = Callable[[Any, str], Tuple[str, str, Dict[str, Any]]]

# -- statements --------------------------------------------------------------------------------


def run_statement(lake: Any, query: str, namespace: str, parse: Parse) -> Optional[pa.Table]:
    """Runs CREATE / REFRESH / DROP MATERIALIZED ROLLUP; None if `query` is none of them."""
    found = _STATEMENT.match(_COMMENTS.sub(" ", query, count=1)) if _COMMENTS.match(query) else _STATEMENT.match(query)
    if found is not None and _COMMENTS.match(query):
        query = _COMMENTS.sub(" ", query, count=1)
    if found is None:
        return None
    verb = found.group(1).upper()
    rest = query[found.end():]
    if verb == "CREATE":
        return _create_statement(lake, rest, namespace, parse)
    if_exists = False
    if verb == "DROP":
        guard = re.match(r"\s*IF\s+EXISTS\b", rest, re.IGNORECASE)
        if guard:
            if_exists, rest = True, rest[guard.end():]
    name, rest = _read_name(rest, namespace, verb)
    if rest.strip().rstrip(";").strip():
        raise ValueError(f"{verb} MATERIALIZED ROLLUP {name}: unexpected text after the name: {rest.strip()[:40]!r}")
    if verb == "REFRESH":
        rows = refresh(lake, name)
        return _result(name, rows)
    try:
        rows = drop(lake, name)
    except KeyError:
        if not if_exists:
            raise
        rows = 0
    return _result(name, rows)


def _result(name: str, rows: int) -> pa.Table:
    return pa.table({"rollup": pa.array([name], pa.string()), "rows": pa.array([rows], pa.uint64())},
                    schema=pa.schema([pa.field("rollup", pa.string(), False), pa.field("rows", pa.uint64(), False)]))


def _unquote(ident: str) -> str:
    return ident[1:-1].replace('""', '"') if ident.startswith('"') else ident


def _read_name(text: str, namespace: str, verb: str) -> Tuple[str, str]:
    found = _NAME.match(text)
    if found is None:
        raise ValueError(f"{verb} MATERIALIZED ROLLUP needs a name such as ns.hourly")
    first, second = found.group(1), found.group(2)
    name = f"{_unquote(first)}.{_unquote(second)}" if second else f"{namespace}.{_unquote(first)}"
    return name, text[found.end():]


def _create_statement(lake: Any, text: str, namespace: str, parse: Parse) -> pa.Table:
    if_not_exists = False
    guard = re.match(r"\s*IF\s+NOT\s+EXISTS\b", text, re.IGNORECASE)
    if guard:
        if_not_exists, text = True, text[guard.end():]
    name, text = _read_name(text, namespace, "CREATE")
    options: Dict[str, str] = {}
    with_clause = re.match(r"\s*WITH\s*\((.*?)\)", text, re.IGNORECASE | re.DOTALL)
    if with_clause:
        for item in with_clause.group(1).split(","):
            pair = re.fullmatch(r"\s*([A-Za-z_]+)\s*=\s*'([^']*)'\s*", item)
            if pair is None:
                raise ValueError(f"CREATE MATERIALIZED ROLLUP {name}: WITH takes key = 'value' pairs, got {item.strip()!r}")
            options[pair.group(1).lower()] = pair.group(2)
        text = text[with_clause.end():]
    unknown = set(options) - {"retention", "chunk"}
    if unknown:
        raise ValueError(f"CREATE MATERIALIZED ROLLUP {name}: unknown option(s) {sorted(unknown)}: "
                         "WITH takes retention and chunk")
    as_clause = re.match(r"\s*AS\b", text, re.IGNORECASE)
    if as_clause is None:
        raise ValueError(f"CREATE MATERIALIZED ROLLUP {name}: expected AS SELECT ... after the name")
    select = text[as_clause.end():].strip().rstrip(";")
    if if_not_exists and name.lower() in {t.lower() for t in lake.tables()}:
        return _result(name, 0)
    rows = create(lake, name, select, namespace, parse, retention=options.get("retention"), chunk=options.get("chunk"))
    return _result(name, rows)


# -- definitions -------------------------------------------------------------------------------


def parse_definition(lake: Any, name: str, select: str, namespace: str, parse: Parse) -> Tuple[Spec, pa.Schema]:
    """The rollup's Spec and table schema from its SELECT; ValueError naming what is not a rollup."""
    where = f"rollup {name}"
    catalog = lake._catalog()
    prefix, _, tree = parse(catalog.con, select)
    if prefix:
        raise ValueError(f"{where}: the definition is a SELECT, not EXPLAIN")
    node = tree["statements"][0]["node"]
    if node.get("type") != "SELECT_NODE" or node.get("cte_map", {}).get("map"):
        raise ValueError(f"{where}: the definition must be one SELECT ... FROM <table> GROUP BY ..., without WITH or set operations")
    for clause, what in (("where_clause", "WHERE"), ("having", "HAVING"), ("qualify", "QUALIFY"), ("sample", "SAMPLE")):
        if node.get(clause):
            raise ValueError(f"{where}: {what} is not allowed in a rollup (it aggregates every row of its source)")
    if node.get("modifiers"):
        raise ValueError(f"{where}: ORDER BY, LIMIT and DISTINCT are not allowed in a rollup")
    source_ref = node.get("from_table") or {}
    if source_ref.get("type") != "BASE_TABLE" or source_ref.get("at_clause"):
        raise ValueError(f"{where}: the definition must read one table (FROM ns.table)")
    tables = referenced_tables(lake, tree, namespace)
    if len(tables) != 1:
        raise KeyError(f"{where}: source table {source_ref.get('table_name')!r} not found in lake {lake.location}")
    source = f"{tables[0][0]}.{tables[0][1]}"
    handle = lake._snapshot(source)
    if spec_of(handle.properties) is not None:
        raise ValueError(f"{where}: {source} is itself a rollup; define the rollup over the raw table")
    contract = handle.contract
    time_column = contract["time_column"]
    if not time_column:
        raise ValueError(f"{where}: {source} has no time column; rollups bucket a time-series table")
    declared = pa.schema(SchemaCapsule(handle.schema_capsule()))
    columns = {f.name.lower(): f for f in declared}
    time_type = columns[time_column.lower()].type
    if not pa.types.is_timestamp(time_type):
        raise ValueError(f"{where}: the time column {time_column!r} must be a timestamp, not {time_type}")

    def column_of(expr: Dict[str, Any], what: str) -> pa.Field:
        if expr.get("class") != "COLUMN_REF" or len(expr.get("column_names", [])) > 2:
            raise ValueError(f"{where}: {what} must be a column of {source}, got {_text(select, expr)!r}")
        ref = expr["column_names"][-1]
        found = columns.get(ref.lower())
        if found is None:
            raise ValueError(f"{where}: {source} has no column {ref!r}")
        return found

    bucket: Optional[Tuple[str, int, int]] = None
    groups: List[pa.Field] = []
    aggregates: List[Aggregate] = []
    items: List[Tuple[str, Any]] = []  # the select list: ("bucket"|"group"|"aggregate", payload)
    for expr in node["select_list"]:
        if expr.get("class") == "FUNCTION" and expr.get("function_name", "").lower() == "time_bucket":
            if bucket is not None:
                raise ValueError(f"{where}: only one time_bucket(...) per rollup")
            args = [a["expression"] for a in expr.get("arguments", [])]
            if len(args) != 2:
                raise ValueError(f"{where}: time_bucket takes (INTERVAL '<width>', {time_column}) in a rollup (no offset or origin)")
            if column_of(args[1], "time_bucket's second argument").name.lower() != time_column.lower():
                raise ValueError(f"{where}: time_bucket must bucket the time column {time_column!r}")
            months, micros = _width(catalog.con, _text(select, args[0]), where)
            alias = expr.get("alias") or ""
            if not alias:
                raise ValueError(f"{where}: name the bucket: time_bucket(...) AS bucket")
            bucket = (alias, months, micros)
            items.append(("bucket", alias))
        elif expr.get("class") == "COLUMN_REF":
            f = column_of(expr, "a grouping column")
            if f.name.lower() == time_column.lower():
                raise ValueError(f"{where}: group by time_bucket(...) of the time column, not by {f.name!r} itself")
            if expr.get("alias") and expr["alias"] != f.name:
                raise ValueError(f"{where}: grouping columns keep their names ({f.name!r} AS {expr['alias']!r} is not supported)")
            groups.append(f)
            items.append(("group", f.name))
        elif expr.get("class") in ("FUNCTION", "AGGREGATE") or expr.get("type") == "FUNCTION":
            aggregates.append(_aggregate(expr, select, where, column_of, time_column))
            items.append(("aggregate", aggregates[-1].alias))
        else:
            raise ValueError(f"{where}: {_text(select, expr)!r} is neither time_bucket(...), a grouping column nor an aggregate")
    if bucket is None:
        raise ValueError(f"{where}: the definition needs time_bucket(INTERVAL '<width>', {time_column}) AS <name>")
    if not aggregates:
        raise ValueError(f"{where}: the definition has no aggregate (count, sum, min, max, avg, first, last, stddev, variance)")
    _check_group_by(node, items, groups, bucket[0], select, where)
    names = [bucket[0]] + [g.name for g in groups] + [a.alias for a in aggregates]
    lowered = [n.lower() for n in names]
    if len(set(lowered)) != len(lowered):
        raise ValueError(f"{where}: two output columns share a name: {names}")
    spec = Spec(source, handle.id, time_column, bucket[0], bucket[1], bucket[2], [g.name for g in groups], aggregates)
    fields = [pa.field(bucket[0], time_type, False)] + [g.with_nullable(True) for g in groups]
    for a in aggregates:
        fields.extend(_state_fields(a, columns, time_type))
    fields.append(pa.field(ROWS, pa.int64(), False))
    taken = set()
    for f in fields:
        if f.name.lower() in taken:
            raise ValueError(f"{where}: the column {f.name!r} the rollup keeps clashes with another; rename an aggregate")
        taken.add(f.name.lower())
    return spec, pa.schema(fields)


def _text(select: str, expr: Dict[str, Any]) -> str:
    """The expression's text: its location in the tree counts bytes of the UTF-8 text."""
    start, length = expr.get("query_location"), expr.get("query_location_length")
    encoded = select.encode("utf-8")
    if not isinstance(start, int) or not isinstance(length, int) or start > len(encoded):
        return "<expression>"
    return encoded[start:start + length].decode("utf-8", "replace")


_WIDTHS: Dict[str, Tuple[int, int]] = {}  # interval text -> (months, micros): dashboards repeat theirs


def _width(con: duckdb.DuckDBPyConnection, text: str, where: str) -> Tuple[int, int]:
    known = _WIDTHS.get(text)
    if known is not None:
        return known
    try:
        months, days, micros = con.execute(
            "SELECT datepart('year', i) * 12 + datepart('month', i), datepart('day', i), "
            "datepart('hour', i)::BIGINT * 3600000000 + datepart('minute', i)::BIGINT * 60000000 + "
            f"datepart('microseconds', i) FROM (SELECT ({text})::INTERVAL AS i)").fetchall()[0]
    except duckdb.Error as e:
        raise ValueError(f"{where}: the bucket width {text!r} is not an interval: {message(e)}") from None
    micros += days * 86_400_000_000
    if months < 0 or micros < 0 or (months and micros) or not (months or micros):
        raise ValueError(f"{where}: the bucket width {text!r} must be a positive number of months, or of days/hours/"
                         "minutes/seconds (not both)")
    if len(_WIDTHS) < 1024:
        _WIDTHS[text] = (months, micros)
    return months, micros


def _aggregate(expr: Dict[str, Any], select: str, where: str, column_of: Any, time_column: str) -> Aggregate:
    name = expr.get("function_name", "").lower()
    text = _text(select, expr)
    function = _FUNCTIONS.get(name)
    if function is None:
        raise ValueError(f"{where}: {text!r} isn't an aggregate a rollup keeps: count, sum, min, max, avg, "
                         "first/last (ORDER BY the time column), stddev, stddev_pop, variance, var_pop")
    if expr.get("distinct") or expr.get("filter"):
        raise ValueError(f"{where}: {text!r}: DISTINCT and FILTER are not supported in rollups")
    alias = expr.get("alias") or ""
    if not alias:
        raise ValueError(f"{where}: name each aggregate: {text} AS <name>")
    args = [a["expression"] for a in expr.get("arguments", [])]
    orders = (expr.get("order_bys") or {}).get("orders", [])
    if function == "count_star":
        return Aggregate(alias, function, None)
    if function in ("first", "last"):
        if len(args) != 1 or len(orders) != 1 or orders[0].get("type") not in ("ORDER_DEFAULT", "ORDER_ASCENDING"):
            raise ValueError(f"{where}: write {name}(<column> ORDER BY {time_column}) AS {alias}")
        by = column_of(orders[0]["expression"], f"{name}'s ORDER BY")
        if by.name.lower() != time_column.lower():
            raise ValueError(f"{where}: {name}(...) must be ORDER BY the time column {time_column!r}")
        return Aggregate(alias, function, column_of(args[0], f"{name}'s argument").name)
    if orders:
        raise ValueError(f"{where}: {text!r}: ORDER BY only goes with first/last")
    if len(args) != 1:
        raise ValueError(f"{where}: {text!r} takes one column")
    if function == "count" and args[0].get("class") == "STAR":
        return Aggregate(alias, "count_star", None)
    return Aggregate(alias, function, column_of(args[0], f"{name}'s argument").name)


def _check_group_by(node: Dict[str, Any], items: List[Tuple[str, Any]], groups: List[pa.Field], bucket: str,
                    select: str, where: str) -> None:
    wanted = {("bucket", bucket.lower())} | {("group", g.name.lower()) for g in groups}
    got = set()
    for expr in node.get("group_expressions", []):
        if expr.get("class") == "CONSTANT" and expr.get("literal", {}).get("kind") in ("INTEGER", "BIGINT"):
            i = int(expr["literal"]["text"]) - 1
            if not 0 <= i < len(items) or items[i][0] == "aggregate":
                raise ValueError(f"{where}: GROUP BY {i + 1} does not name the bucket or a grouping column")
            got.add((items[i][0], items[i][1].lower()))
        elif expr.get("class") == "COLUMN_REF":
            ref = expr["column_names"][-1].lower()
            got.add(("bucket", ref) if ref == bucket.lower() else ("group", ref))
        elif expr.get("class") == "FUNCTION" and expr.get("function_name", "").lower() == "time_bucket":
            got.add(("bucket", bucket.lower()))
        else:
            raise ValueError(f"{where}: GROUP BY {_text(select, expr)!r}: group by the bucket and the grouping columns")
    if node.get("aggregate_handling") == "FORCE_AGGREGATES":  # GROUP BY ALL
        got = wanted
    if got != wanted:
        raise ValueError(f"{where}: GROUP BY must list exactly the bucket and the grouping columns of the SELECT")


# Sums of integer columns, as DuckDB gives them (HUGEINT, which Arrow receives as decimal128(38, 0)):
# a bucket's sum may pass 2**63.
_SUM_OF_INTEGERS = pa.decimal128(38, 0)


def _is_integer(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)


def _state_fields(a: Aggregate, columns: Dict[str, pa.Field], time_type: pa.DataType) -> List[pa.Field]:
    """The columns a rollup keeps for one aggregate: the value users see, then its state."""
    if a.function in ("count_star", "count"):
        return [pa.field(a.alias, pa.int64(), False)]
    source = columns[a.column.lower()].type
    numeric = pa.types.is_integer(source) or pa.types.is_floating(source) or pa.types.is_decimal(source)
    if a.function in ("sum", "avg") + _DEVIATIONS and not (pa.types.is_integer(source) or pa.types.is_floating(source)):
        raise ValueError(f"{a.function}({a.column}): rollups keep sums and deviations of integer and floating-point "
                         f"columns, not {source}")
    del numeric
    if a.function == "sum":
        return [pa.field(a.alias, _SUM_OF_INTEGERS if _is_integer(source) else pa.float64())]
    if a.function == "avg":
        return [pa.field(a.alias, pa.float64()),
                pa.field(f"{a.alias}__sum", _SUM_OF_INTEGERS if _is_integer(source) else pa.float64()),
                pa.field(f"{a.alias}__count", pa.int64(), False)]
    if a.function in ("min", "max"):
        return [pa.field(a.alias, source)]
    if a.function in ("first", "last"):
        return [pa.field(a.alias, source), pa.field(f"{a.alias}__time", time_type)]
    return [pa.field(a.alias, pa.float64()), pa.field(f"{a.alias}__count", pa.int64(), False),
            pa.field(f"{a.alias}__mean", pa.float64()), pa.field(f"{a.alias}__m2", pa.float64())]


def state_select(spec: Spec, schema: pa.Schema, source: str, extra: str = "") -> str:
    """SELECT bucket, groups, every stored column [, extra] FROM `source` GROUP BY bucket, groups."""
    t = quote(spec.time_column)
    out = [f"time_bucket({spec.width}, {t}) AS {quote(spec.bucket)}"] + [quote(g) for g in spec.groups]
    for a in spec.aggregates:
        c = quote(a.column) if a.column else None
        alias = a.alias
        kind = {f.name: f.type for f in schema}
        integer = lambda name: "DECIMAL(38, 0)" if pa.types.is_decimal(kind[name]) else "DOUBLE"  # noqa: E731
        if a.function == "count_star":
            out.append(f"count(*) AS {quote(alias)}")
        elif a.function == "count":
            out.append(f"count({c}) AS {quote(alias)}")
        elif a.function == "sum":
            out.append(f"sum({c})::{integer(alias)} AS {quote(alias)}")
        elif a.function == "avg":
            out.append(f"avg({c})::DOUBLE AS {quote(alias)}")
            out.append(f"sum({c})::{integer(alias + '__sum')} AS {quote(alias + '__sum')}")
            out.append(f"count({c}) AS {quote(alias + '__count')}")
        elif a.function in ("min", "max"):
            out.append(f"{a.function}({c}) AS {quote(alias)}")
        elif a.function in ("first", "last"):
            out.append(f"{a.function}({c} ORDER BY {t}) AS {quote(alias)}")
            out.append(f"{'min' if a.function == 'first' else 'max'}({t}) AS {quote(alias + '__time')}")
        else:
            out.append(f"{a.function}({c})::DOUBLE AS {quote(alias)}")
            out.append(f"count({c}) AS {quote(alias + '__count')}")
            out.append(f"avg({c})::DOUBLE AS {quote(alias + '__mean')}")
            out.append(f"(var_pop({c}) * count({c}))::DOUBLE AS {quote(alias + '__m2')}")
    out.append(f"count(*) AS {ROWS}")
    if extra:
        out.append(extra)
    keys = ", ".join(str(i + 1) for i in range(1 + len(spec.groups)))
    return f"SELECT {', '.join(out)} FROM {source} GROUP BY {keys}"


# -- the registry: which tables are rollups of which -----------------------------------------------


class Registry:
    """The rollups of a lake by source, from the tables' properties; the lake's tables are listed
    again when the last listing is older than the caller's `max_age` (a rollup made by another
    process is found within that; listing an object store costs a request, and each table not
    seen before is opened once). It only says which tables are rollups of which: the definition
    used is always read anew from the rollup's own handle (a name may be dropped and made again
    with another)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listed_at = -1e18
        self._known: Dict[str, Tuple[str, Optional[Spec]]] = {}  # qualified lower -> (name, spec)

    def forget(self) -> None:
        with self._lock:
            self._listed_at = -1e18
            self._known = {}

    def rollups_of(self, lake: Any, source: str, max_age: float = 0.0) -> List[Tuple[str, Spec]]:
        with self._lock:
            if time.monotonic() - self._listed_at >= max_age:
                self._list(lake)
            return [(name, spec) for name, spec in self._known.values()
                    if spec is not None and spec.source.lower() == source.lower()]

    def _list(self, lake: Any) -> None:
        names = lake.tables()
        known = {}
        for name in names:
            key = name.lower()
            if key in self._known:
                known[key] = self._known[key]
                continue
            try:
                spec = spec_of(lake._snapshot(name).properties)
            except (KeyError, RuntimeError, NotImplementedError):
                continue  # dropped meanwhile, or a table timelake cannot read
            known[key] = (name, spec)
        self._known = known
        self._listed_at = time.monotonic()


# -- create, refresh, drop ---------------------------------------------------------------------


def create(lake: Any, name: str, select: str, namespace: str, parse: Parse, retention: Optional[str] = None,
           chunk: Optional[str] = None) -> int:
    """Creates the rollup table and fills it; returns the rows written."""
    spec, schema = parse_definition(lake, name, select, namespace, parse)
    if chunk is None:
        # Day chunks below daily buckets: a refresh's rows (recent buckets) then overlap one day's
        # file, so reads deduplicate a day of rows at most, not a month.
        chunk = "month" if spec.months or spec.micros >= 86_400_000_000 else "day"
    properties = {PROPERTY_SOURCE: spec.source, PROPERTY_SOURCE_ID: spec.source_id,
                  PROPERTY_SPEC: spec.to_json(), PROPERTY_QUERY: select}
    lake._core.create_table(name, _schema_capsule(schema), spec.bucket, spec.groups or None, chunk, retention,
                            "last", properties)
    lake._rollups.forget()
    try:
        return refresh(lake, name)
    except BaseException:
        _drop_half_made(lake, name)
        raise


def _drop_half_made(lake: Any, name: str) -> None:
    """Nothing half made stays: a rollup goes with the first refresh that failed to fill it. (A
    process killed in between leaves a rollup that records no source version: it reads the raw
    rows, is not routed to, and its first refresh fills it.)"""
    try:
        lake._core.drop_table(name)
    except KeyError:
        pass
    lake._rollups.forget()


def _schema_capsule(schema: pa.Schema) -> Any:
    return schema.__arrow_c_schema__()


def drop(lake: Any, name: str) -> int:
    handle = lake._snapshot(name)
    if spec_of(handle.properties) is None:
        raise ValueError(f"{name} is a table, not a rollup: drop it with Lake.drop_table")
    rows = handle.info()["size"]["rows"]
    lake.drop_table(name)
    lake._rollups.forget()
    return rows


_LOCKS: Dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _lock_for(key: str) -> threading.Lock:
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(key, threading.Lock())


def refresh(lake: Any, name: str) -> int:
    """Brings the rollup up to the source's latest version; returns the rows it recomputed."""
    rollup = lake._snapshot(name)
    spec = spec_of(rollup.properties)
    if spec is None:
        raise ValueError(f"{name} is a table, not a rollup")
    with _lock_for(f"{lake.location}|{rollup.id}"):
        return _refresh(lake, name, rollup, spec)


def _refresh(lake: Any, name: str, rollup: Any, spec: Spec) -> int:
    """One refresh: the changed pairs recomputed, the rollup files holding them rewritten with the
    new rows in one commit (a concurrent commit that removed those files makes it read again)."""
    attempts = 10
    for attempt in range(attempts):
        if attempt:
            time.sleep(random.uniform(0, 0.01 * 2 ** min(attempt, 6)))  # backoff with jitter
        source = _source_handle(lake, name, spec)
        reflected = rollup.recorded_batch_version(spec.app_id)
        plan_now = source.scan()
        target = plan_now.version
        if reflected is not None and reflected >= target:
            return 0
        if _follow_widening(rollup, spec, source):
            continue  # the rollup's schema changed: read it again
        stored = rollup.scan()
        schema = pa.schema(SchemaCapsule(stored.declared_schema))
        plan_old = None
        if reflected is not None:
            try:
                plan_old = source.scan(version=reflected)
            except KeyError:
                pass  # that version's log expired: rebuild
        try:
            with _Session(lake._catalog(), spec.source.split(".", 1)[0]) as session:
                changed = session.changed_pairs(spec, source.contract, plan_old, plan_now) if plan_old else None
                rows, replaced, recomputed = session.rewrite(spec, schema, plan_now, changed, stored, source.contract)
        except Reconnected:
            continue  # the connection was replaced to admit the source's files: once more
        try:
            result = rollup.append(rows.__arrow_c_stream__(), spec.app_id, False, False, target, replaced)
        except RuntimeError as e:
            if "commit conflict" in str(e) and attempt < attempts - 1:
                continue  # another commit rewrote (or compacted) those files: read them again
            raise
        return 0 if result["duplicate"] else recomputed
    raise RuntimeError(f"rollup {name}: could not refresh it after {attempts} attempts (its files kept changing)")


def _follow_widening(rollup: Any, spec: Spec, source: Any) -> bool:
    """Widens the rollup's columns that keep source values (min, max, first, last) when the source
    widened their column (Table.widen_columns); True if it did. Other columns keep their types:
    sums and deviations are double or decimal(38, 0) already, and grouping columns that are the
    source's series key cannot be widened."""
    declared = pa.schema(SchemaCapsule(source.schema_capsule()))
    columns = {f.name.lower(): f.type for f in declared}
    mine = pa.schema(SchemaCapsule(rollup.schema_capsule()))
    wider = []
    for a in spec.aggregates:
        if a.function in ("min", "max", "first", "last"):
            wanted = columns.get(a.column.lower())
            if wanted is not None and mine.field(a.alias).type != wanted:
                wider.append(pa.field(a.alias, wanted))
    if not wider:
        return False
    rollup.widen_columns(_schema_capsule(pa.schema(wider)))
    return True


def _source_handle(lake: Any, name: str, spec: Spec) -> Any:
    try:
        source = lake._snapshot(spec.source)
    except KeyError:
        raise RuntimeError(f"rollup {name}: its source {spec.source} no longer exists; drop the rollup") from None
    if source.id != spec.source_id:
        raise RuntimeError(f"rollup {name}: its source {spec.source} was dropped and created again since the rollup "
                           "was made; drop the rollup and create it anew")
    return source


class _Session:
    """Internal queries of one refresh or read on the thread's catalog connection: views over
    plans (or parts of plans) and registered Arrow tables, all dropped at the end."""

    def __init__(self, catalog: Any, namespace: str) -> None:
        self.catalog = catalog
        self.namespace = namespace
        self._views: List[str] = []
        self._registered: List[Any] = []
        self._count = 0

    def __enter__(self) -> "_Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
        self.catalog.end()

    def close(self) -> None:
        """Drops the session's views and registered tables."""
        con = self.catalog.con
        for view in self._views:
            try:
                con.execute(f"DROP VIEW IF EXISTS {view}")
            except duckdb.Error:
                pass
        for names in self._registered:
            try:
                self.catalog._unregister(names)
            except Exception:  # noqa: BLE001 - a connection replaced meanwhile has none of them
                pass
        self._views, self._registered = [], []

    def view(self, plan: Any) -> str:
        """A view over `plan` (a core ScanPlan); its qualified name. Reconnected (from the
        catalog) when the connection had to be replaced to admit the plan's files: the views
        made before are gone, so the caller starts over."""
        self._count += 1
        view = f"__timelake_rollup_{id(self)}_{self._count}"
        self.catalog._ensure_schema(self.namespace)
        _, _, registered, _ = self.catalog._make_view(self.namespace, view, plan, None)
        qualified = f"{quote(self.namespace)}.{quote(view)}"
        self._views.append(qualified)
        if registered is not None:
            self._registered.append(registered)
        return qualified

    def register(self, table: pa.Table) -> str:
        name = self.catalog._register("rollup", table)
        self._registered.append(name)
        return f"temp.main.{quote(name)}"

    def query(self, sql: str) -> pa.Table:
        try:
            return self.catalog.con.sql(sql).to_arrow_table()
        except duckdb.Error as e:
            raise RuntimeError(f"rollup query failed: {message(e)}") from None

    def changed_pairs(self, spec: Spec, contract: Dict[str, Any], plan_old: Any, plan_now: Any) -> pa.Table:
        """The (bucket, groups) pairs that files added or removed between the plans hold."""
        def key(f: Any) -> Tuple[str, int]:
            return f.path if not f.store_path else f.store_path, len(f.deleted_rows)

        old = {key(f): f for f in plan_old.files}
        new = {key(f): f for f in plan_now.files}
        added = {f.store_path for k, f in new.items() if k not in old}
        removed = {f.store_path for k, f in old.items() if k not in new}
        removed -= _dropped_by_retention(contract, old, new, removed)
        parts = []
        columns = ", ".join([f"time_bucket({spec.width}, {quote(spec.time_column)}) AS {quote(spec.bucket)}"]
                            + [quote(g) for g in spec.groups])
        added_view = None
        for plan, paths in ((plan_now, added), (plan_old, removed)):
            if not paths:
                continue
            subset = _core.plan_subset(plan, paths)
            if len(subset.files) != len(paths):
                # A file the log names outside the table's folder has no store path: read all.
                subset = plan
            view = self.view(subset)
            if plan is plan_now:
                added_view = view
            parts.append(f"SELECT DISTINCT {columns} FROM {view}")
        keys = [k for k in contract.get("series_key") or []]
        if added_view is not None and contract.get("dedup") in ("last", "first") and \
                not {g.lower() for g in spec.groups} <= {k.lower() for k in keys}:
            # An upsert hides the older row of its key at read time, without its file changing;
            # when the rollup groups by columns that are not the key, that row's pair changed too.
            # The hidden row has the added row's time, so it lies in a chunk of an added file.
            chunks = {new[k].chunk for k in new if k not in old}
            whole = None in chunks or "" in chunks or any(not f.store_path for f in plan_old.files)
            old_view = self.view(plan_old if whole else
                                 _core.plan_subset(plan_old, {f.store_path for f in plan_old.files
                                                              if not f.chunk or f.chunk in chunks}))
            t = quote(spec.time_column)
            on = " AND ".join([f"o.{t} = a.{t}"] + [f"o.{quote(k)} IS NOT DISTINCT FROM a.{quote(k)}" for k in keys])
            bucket = f"time_bucket({spec.width}, o.{t}) AS {quote(spec.bucket)}"
            parts.append(f"SELECT DISTINCT {', '.join([bucket] + [f'o.{quote(g)}' for g in spec.groups])} "
                         f"FROM {old_view} o SEMI JOIN {added_view} a ON {on} "
                         f"WHERE o.{t} >= (SELECT min({t}) FROM {added_view}) AND o.{t} <= (SELECT max({t}) FROM {added_view})")
        if not parts:
            return pa.table({spec.bucket: pa.array([], pa.timestamp("us", "UTC"))})
        return self.query(" UNION ".join(parts))

    def recompute(self, spec: Spec, schema: pa.Schema, plan_now: Any, changed: Optional[pa.Table]) -> pa.Table:
        """Stored rows for the `changed` pairs (every pair when None) at `plan_now`'s version; a
        changed pair without raw rows any more has none."""
        if changed is None:
            return _conform(self.query(state_select(spec, schema, self.view(plan_now))), schema)
        pairs = self.register(changed)
        lo, hi = _time_range(changed, spec)
        # Only the files of the chunks those buckets overlap can hold their rows (a file of
        # another engine, without a chunk, may hold any): a view over fewer files costs less.
        source = self.view(_overlapping(plan_now, spec, changed))
        on = " AND ".join([f"time_bucket({spec.width}, s.{quote(spec.time_column)}) = d.{quote(spec.bucket)}"]
                          + [f"s.{quote(g)} IS NOT DISTINCT FROM d.{quote(g)}" for g in spec.groups])
        filtered = (f"(SELECT s.* FROM {source} s SEMI JOIN {pairs} d ON {on} "
                    f"WHERE s.{quote(spec.time_column)} >= {lo} AND s.{quote(spec.time_column)} < {hi})")
        return _conform(self.query(state_select(spec, schema, filtered)), schema)

    def rewrite(self, spec: Spec, schema: pa.Schema, plan_now: Any, changed: Optional[pa.Table], stored: Any,
                contract: Dict[str, Any]) -> Tuple[pa.Table, List[str], int]:
        """The rows of the rollup files that hold changed pairs, with those pairs recomputed, and
        the store paths of those files, and how many rows were recomputed: written in their place,
        every pair keeps one row (what Spark and delta-rs read is the rollup, with no duplicate to
        hide)."""
        if changed is not None and changed.num_rows == 0:
            return schema.empty_table(), [], 0
        fresh = self.recompute(spec, schema, plan_now, changed)
        if changed is None:
            files = list(stored.files)  # a rebuild rewrites everything
        else:
            chunks = _chunks_of(changed.column(spec.bucket), stored.contract.get("chunk"))
            files = [f for f in stored.files if not f.chunk or f.chunk in chunks]
        if not files:
            return fresh, [], fresh.num_rows
        paths = [f.store_path for f in files]
        if any(not p for p in paths):
            raise RuntimeError("a rollup file lies outside the rollup's folder; rebuild the rollup")
        old = self.view(_core.plan_subset(stored, set(paths)))
        on = " AND ".join([f"o.{quote(spec.bucket)} = n.{quote(spec.bucket)}"]
                          + [f"o.{quote(g)} IS NOT DISTINCT FROM n.{quote(g)}" for g in spec.groups])
        if changed is None:
            # Pairs the source no longer has stay only if the source's retention dropped them.
            horizon = _horizon_us(contract, plan_now)
            keep = "FALSE" if horizon is None else (
                f"o.{quote(spec.bucket)} < {_instant_sql(horizon, schema.field(spec.bucket).type)}")
            gone = self.register(fresh)
            kept = self.query(f"SELECT o.* FROM {old} o ANTI JOIN {gone} n ON {on} WHERE o.{ROWS} > 0 AND {keep}")
        else:
            pairs = self.register(changed)
            kept = self.query(f"SELECT o.* FROM {old} o ANTI JOIN {pairs} n ON {on} WHERE o.{ROWS} > 0")
        return pa.concat_tables([_conform(kept, schema), fresh]), paths, fresh.num_rows


def _overlapping(plan: Any, spec: Spec, pairs: pa.Table) -> Any:
    """`plan` with only the files whose chunk overlaps the buckets of `pairs` (and every file
    without a chunk, or outside the table's folder)."""
    import pyarrow.compute as pc

    kind = plan.contract.get("chunk")
    buckets = pairs.column(spec.bucket).cast(pa.timestamp("us", pairs.schema.field(spec.bucket).type.tz))
    lo, hi = pc.min(buckets).value, pc.max(buckets).value
    if kind is None or lo is None or any(not f.store_path for f in plan.files):
        return plan
    hi += spec.months * 31 * 86_400_000_000 if spec.months else spec.micros  # the last bucket's end
    keep = set()
    for f in plan.files:
        start = chunk_start_us(kind, f.chunk) if f.chunk else None
        end = chunk_end_us(kind, f.chunk) if f.chunk else None
        if start is None or end is None or (start < hi and end > lo):
            keep.add(f.store_path)
    return plan if len(keep) == len(plan.files) else _core.plan_subset(plan, keep)


def _chunks_of(buckets: Any, chunk: Optional[str]) -> set:
    """The chunk labels (as the rollup's files carry them) of bucket start times."""
    fmt = {"hour": "%Y-%m-%dT%H", "day": "%Y-%m-%d", "month": "%Y-%m"}.get(chunk or "")
    if fmt is None:
        return set()
    return {b.strftime(fmt) for b in buckets.to_pylist() if b is not None}


def _horizon_us(contract: Dict[str, Any], plan: Any) -> Optional[int]:
    """For a source with a retention: the start of its oldest live chunk (microseconds)."""
    if not contract.get("retention"):
        return None
    starts = [s for f in plan.files if f.chunk and (s := chunk_start_us(contract.get("chunk"), f.chunk)) is not None]
    return min(starts) if starts else 1 << 62


def _instant_sql(us: int, kind: pa.DataType) -> str:
    return f"make_timestamp({us})" + ("::TIMESTAMPTZ" if kind.tz is not None else "")


def _time_range(pairs: pa.Table, spec: Spec) -> Tuple[str, str]:
    """SQL literals bounding the rows of `pairs`' buckets."""
    import pyarrow.compute as pc

    buckets = pairs.column(spec.bucket)
    lo, hi = pc.min(buckets).as_py(), pc.max(buckets).as_py()
    lo_text = f"TIMESTAMPTZ {literal(lo.isoformat())}" if lo.tzinfo else f"TIMESTAMP {literal(lo.isoformat())}"
    hi_text = f"TIMESTAMPTZ {literal(hi.isoformat())}" if hi.tzinfo else f"TIMESTAMP {literal(hi.isoformat())}"
    return lo_text, f"({hi_text} + {spec.width})"


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = []
    for f in schema:
        column = rows.column(f.name)
        if column.type != f.type:
            column = column.cast(f.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _dropped_by_retention(contract: Dict[str, Any], old: Dict[Any, Any], new: Dict[Any, Any], removed: set) -> set:
    """Removed files of chunks the source's retention dropped whole: their buckets stay in the
    rollup. Only chunks that ended before the retention cutoff and have no live file left."""
    retention = contract.get("retention")
    if not retention or not removed:
        return set()
    cutoff = int(time.time() * 1_000_000) - duration_us(retention)
    live_chunks = {f.chunk for f in new.values()}
    kept = set()
    for f in old.values():
        if f.store_path in removed and f.chunk and f.chunk not in live_chunks:
            end = chunk_end_us(contract.get("chunk"), f.chunk)
            if end is not None and end <= cutoff:
                kept.add(f.store_path)
    return kept


# -- reading a rollup ---------------------------------------------------------------------------

# (source id, the rollup's time column, width and groups, recorded version, source version) -> the
# pairs changed between the versions; bounded.
_CHANGED: Dict[Tuple[str, int, int], pa.Table] = {}
_CHANGED_LOCK = threading.Lock()
_CHANGED_SIZE = 64


class Reading:
    """A rollup as one catalog connection reads it: at one rollup version, the source version
    its last refresh recorded (`reflected`), and the source's latest version. Holds the views
    over the rollup's stored rows and over the source, and the pairs changed in the source since
    the refresh, each made on first use; the catalog keeps it while none of the versions changes
    (_Catalog._rollup_reads), so repeated queries make nothing again."""

    def __init__(self, catalog: Any, ns: str, spec: Spec, key: Tuple, plan: Any, reflected: Optional[int],
                 source: Any, plan_src: Any) -> None:
        self.key = key
        self.spec = spec
        self.plan = plan
        self.reflected = reflected
        self.source = source  # None: the source is gone (or was recreated)
        self.plan_src = plan_src
        self.session = _Session(catalog, ns)
        self.declared = pa.schema(SchemaCapsule(plan.declared_schema))
        self.view_sql: Optional[str] = None  # what the user-facing view was last made as
        self._stored: Optional[str] = None
        self._raw: Optional[str] = None
        self._changed: Any = False  # not computed yet
        self._pairs: Optional[str] = None

    @property
    def current(self) -> bool:
        """The rollup reflects the source's latest version."""
        return self.source is None or (self.reflected is not None and self.reflected >= self.plan_src.version)

    def stored(self) -> str:
        if self._stored is None:
            self._stored = self.session.view(self.plan)
        return self._stored

    def raw(self) -> str:
        if self._raw is None:
            self._raw = self.session.view(self.plan_src)
        return self._raw

    def changed(self) -> Optional[pa.Table]:
        """The (bucket, groups) pairs changed since the refresh; None when that is unknown (never
        refreshed, or the recorded version's log expired): then everything counts as changed."""
        if self._changed is not False:
            return self._changed
        spec = self.spec
        if self.current:
            self._changed = pa.table({spec.bucket: pa.array([], pa.timestamp("us", "UTC"))})
            return self._changed
        if self.reflected is None:
            self._changed = None
            return None
        key = (spec.source_id, spec.time_column, spec.months, spec.micros, tuple(spec.groups), self.reflected,
               self.plan_src.version)
        with _CHANGED_LOCK:
            changed = _CHANGED.get(key)
        if changed is None:
            try:
                plan_old = self.source.scan(version=self.reflected)
            except KeyError:
                self._changed = None
                return None
            changed = self.session.changed_pairs(spec, self.source.contract, plan_old, self.plan_src)
            with _CHANGED_LOCK:
                _CHANGED[key] = changed
                while len(_CHANGED) > _CHANGED_SIZE:
                    _CHANGED.pop(next(iter(_CHANGED)))
        self._changed = changed
        return changed

    def pairs(self) -> Optional[str]:
        """The changed pairs as a table the connection reads (None when there are none)."""
        changed = self.changed()
        if changed is None or changed.num_rows == 0:
            return None
        if self._pairs is None:
            self._pairs = self.session.register(changed)
        return self._pairs


def reading(catalog: Any, ns: str, name: str, handle: Any, spec: Spec) -> Reading:
    """The catalog's Reading of rollup `ns.name`, made anew when a version changed."""
    reflected = handle.recorded_batch_version(spec.app_id)  # brings the handle up to date
    plan = handle.scan()
    # The source's snapshot is taken after the rollup's: the stored rows reflect no later
    # source version than the one read, so the pairs changed since the refresh cover every
    # stored row that differs from the raw rows.
    try:
        source = catalog.lake._snapshot(spec.source)
        if source.id != spec.source_id:
            source = None
    except KeyError:
        source = None
    plan_src = source.scan() if source is not None else None
    key = (catalog.generation, plan.version, reflected, plan_src.version if plan_src is not None else -1)
    qualified = f"{ns}.{name}".lower()
    cached = catalog._rollup_reads.get(qualified)
    # A lake in an object store reads local copies that may be evicted between statements: its
    # readings are made anew each time.
    if cached is not None and cached.key == key and catalog.cache_directory is None:
        return cached
    if cached is not None:
        cached.session.close()
    made = Reading(catalog, ns, spec, key, plan, reflected, source, plan_src)
    catalog._rollup_reads[qualified] = made
    return made


def current_view(catalog: Any, ns: str, name: str, handle: Any, spec: Spec) -> Tuple[pa.Schema, str, Reading]:
    """The SQL of what a query on rollup `ns.name` reads: its stored rows for the pairs unchanged
    since the source version it reflects, and the aggregate of the raw rows at the source's latest
    version for the pairs changed since (so the answer always equals the raw data). Returns the
    declared schema of the visible columns, the SQL, and the Reading it comes from."""
    r = reading(catalog, ns, name, handle, spec)
    visible = pa.schema([r.declared.field(n) for n in spec.visible()])
    columns = ", ".join(quote(n) for n in spec.visible())
    kept = f"SELECT {columns} FROM {r.stored()} WHERE {ROWS} > 0"
    if r.current:
        return visible, kept, r
    changed = r.changed()
    if changed is None:
        # Nothing recorded yet (never refreshed, or forgotten): the raw data answers.
        return visible, f"SELECT {columns} FROM ({state_select(spec, r.declared, r.raw())})", r
    pairs = r.pairs()
    if pairs is None:
        return visible, kept, r
    lo, hi = _time_range(changed, spec)
    on = " AND ".join([f"time_bucket({spec.width}, s.{quote(spec.time_column)}) = d.{quote(spec.bucket)}"]
                      + [f"s.{quote(g)} IS NOT DISTINCT FROM d.{quote(g)}" for g in spec.groups])
    raw = (f"(SELECT s.* FROM {r.raw()} s SEMI JOIN {pairs} d ON {on} "
           f"WHERE s.{quote(spec.time_column)} >= {lo} AND s.{quote(spec.time_column)} < {hi})")
    stale = " AND ".join([f"r.{quote(spec.bucket)} = d.{quote(spec.bucket)}"]
                         + [f"r.{quote(g)} IS NOT DISTINCT FROM d.{quote(g)}" for g in spec.groups])
    sql = (f"SELECT {columns} FROM (SELECT r.* FROM {r.stored()} r ANTI JOIN {pairs} d ON {stale} "
           f"WHERE r.{ROWS} > 0) UNION ALL BY NAME SELECT {columns} FROM ({state_select(spec, r.declared, raw)})")
    return visible, sql, r


def add_view(catalog: Any, ns: str, name: str, handle: Any, spec: Spec) -> pa.Schema:
    """Makes `ns.name` in the catalog's connection the rollup's view: its stored rows, with the
    pairs changed in its source since its last refresh aggregated from the raw rows
    (current_view); made again only when the rollup, its recorded source version or the source
    changed. Returns the declared schema of its columns."""
    declared, sql, reading = current_view(catalog, ns, name, handle, spec)
    if reading.view_sql != sql:
        catalog.con.execute(f"CREATE OR REPLACE VIEW {quote(ns)}.{quote(name)} AS {sql}")
        reading.view_sql = sql
    catalog.forget(f"{ns}.{name}")  # what the catalog knew of a table of that name is stale
    catalog._note_types(declared, {})
    return declared


def _described(a: Aggregate, spec: Spec) -> str:
    if a.function == "count_star":
        return "count(*)"
    if a.function in ("first", "last"):
        return f"{a.function}({a.column} ORDER BY {spec.time_column})"
    return f"{a.function}({a.column})"


def describe(lake: Any, handle: Any, spec: Spec) -> Dict[str, Any]:
    """What info() says of a rollup: its definition and how far it is behind its source."""
    reflected = handle.recorded_batch_version(spec.app_id)
    out: Dict[str, Any] = {
        "source": spec.source,
        "bucket": spec.bucket,
        "width": spec.width,
        "group_by": list(spec.groups),
        "aggregates": {a.alias: _described(a, spec) for a in spec.aggregates},
        "source_version": reflected,
        "lag_versions": None,
        "query": handle.properties.get(PROPERTY_QUERY),
    }
    try:
        source = lake._snapshot(spec.source)
        if source.id == spec.source_id:
            out["lag_versions"] = source.version - (reflected if reflected is not None else -1)
    except KeyError:
        pass
    return out


# -- refresh after appends ------------------------------------------------------------------------

_REFRESHERS: "weakref.WeakSet[Refresher]" = None  # type: ignore[assignment]


class Refresher:
    """Refreshes a lake's rollups after appends to their sources, in one background thread per
    Lake: an append queues each rollup of its table whose last refresh from this Lake started
    `interval` ago or longer (storage option `timelake_rollup_refresh_interval`, "60s" by default,
    "off" for never; maintain() and REFRESH MATERIALIZED ROLLUP refresh regardless). A refresh
    that fails leaves the rollup as it was (queries stay exact either way) and its error in
    `errors`; the next append tries again."""

    def __init__(self, interval_text: str) -> None:
        global _REFRESHERS
        self.interval_text = interval_text
        if interval_text.strip().lower() == "off":
            self.interval: Optional[float] = None
        elif interval_text.strip() in ("0", "0s"):
            self.interval = 0.0  # after every append
        else:
            try:
                self.interval = _durations_us(interval_text) / 1e6
            except ValueError:
                raise ValueError(f"timelake_rollup_refresh_interval must be a duration such as '60s' or 'off', "
                                 f"got {interval_text!r}") from None
        self._lock = threading.Condition()
        self._last: Dict[str, float] = {}
        self._queue: List[str] = []
        self._busy = False
        self._stopped = False
        self._thread: Optional[threading.Thread] = None
        self.errors: Dict[str, str] = {}
        if _REFRESHERS is None:
            import weakref

            _REFRESHERS = weakref.WeakSet()
        _REFRESHERS.add(self)

    def appended(self, lake: Any, source: str) -> None:
        if self.interval is None:
            return
        # Rollups another process makes are found within 30 s (a listing costs a request).
        rollups = lake._rollups.rollups_of(lake, source, max_age=30.0)
        if not rollups:
            return
        now = time.monotonic()
        with self._lock:
            for name, _ in rollups:
                if name in self._queue or now - self._last.get(name, -1e18) < self.interval:
                    continue
                self._last[name] = now
                self._queue.append(name)
            if self._queue and not self._stopped and (self._thread is None or not self._thread.is_alive()):
                import weakref

                # Not a daemon: a daemon thread stopped by the interpreter's exit inside native code
                # (DuckDB, the core) aborts the process ("exception not rethrown"). The interpreter
                # stops it before it waits for it (stop_refreshers, threading's own atexit).
                self._thread = threading.Thread(target=self._run, args=(weakref.ref(lake),),
                                                name="timelake-rollups")
                self._thread.start()
            self._lock.notify_all()

    def _run(self, lake_ref: Any) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stopped:
                    if not self._lock.wait(timeout=5.0):
                        if not self._queue:
                            self._thread = None
                            return  # idle: the next append starts another
                if self._stopped:
                    return
                name = self._queue.pop(0)
                self._busy = True
            try:
                lake = lake_ref()
                if lake is None:
                    return
                refresh(lake, name)
                self.errors.pop(name, None)
            except Exception as e:  # noqa: BLE001 - kept for info(); the rollup stays as it was
                self.errors[name] = f"{type(e).__name__}: {e}"
            finally:
                del lake
                with self._lock:
                    self._busy = False
                    self._lock.notify_all()

    def wait(self, timeout: float = 60.0) -> bool:
        """Waits until every queued refresh is done; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def stop(self) -> None:
        """Drops what is queued, waits for the refresh in progress and lets the thread end (at
        interpreter exit: a thread still alive when the interpreter finalizes is killed wherever it
        is, which native code on its stack does not survive)."""
        with self._lock:
            self._stopped = True
            self._queue.clear()
            self._lock.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=600)


def _durations_us(text: str) -> int:
    return duration_us(text)


def stop_refreshers() -> None:
    for refresher in list(_REFRESHERS or ()):
        refresher.stop()


# Runs when the main thread ends, before the interpreter waits for non-daemon threads: the
# refreshers' threads end then (a refresh in progress finishes first).
if hasattr(threading, "_register_atexit"):
    threading._register_atexit(stop_refreshers)
