"""Routing: a `GROUP BY time_bucket(...)` query on a table answered from one of its rollups.

A query qualifies when it reads one table that has a rollup, groups by one
`time_bucket(<width>, <time column>)` whose width is a whole multiple of the rollup's (both are
aligned to DuckDB's origin, so a coarse bucket is a union of the rollup's), and everything else
it groups, filters or returns outside its aggregates is a grouping column of the rollup; each
aggregate must be one the rollup's stored state can merge (count, sum, avg, min, max, first/last
by time, stddev/variance); its WHERE may only bound the time column by constants and filter on
grouping columns. Anything else reads the raw table, as without rollups.

The answer is the raw data's at the source's latest version, by construction: the query runs
over a relation that holds, per (rollup bucket, group), either the rollup's stored state (for a
bucket wholly inside the query's time range, unchanged since the rollup's last refresh, and not
older than the source's oldest live chunk when the source has a retention) or the same state
computed from the raw rows that pass the query's WHERE (edge buckets, pairs changed since the
refresh, and buckets whose raw chunks retention dropped). Its time column is the bucket's start
for stored rows and the group's earliest raw time for computed ones, so the query's own
time_bucket and time bounds keep working on it unchanged; each aggregate call is replaced by the
merge of the stored state (avg(x) -> sum(x__sum) / sum(x__count), ...), aliased to the name the
raw query's column would have.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from typing import Any, Dict, List, Optional, Tuple

import duckdb
import pyarrow as pa

from . import _rollup, _tree
from ._capsules import SchemaCapsule
from ._rollup import ROWS, Spec, _Session
from ._sql_text import quote

_AGGREGATES = {
    "count_star", "count", "sum", "avg", "mean", "min", "max", "first", "last", "stddev", "stddev_samp",
    "stddev_pop", "variance", "var_samp", "var_pop",
}
_NOT_ROUTABLE = {"SUBQUERY", "WINDOW", "STAR", "LAMBDA", "COLUMNS", "PARAMETER", "POSITIONAL_REFERENCE"}


class _NoRoute(Exception):
    """The query cannot be answered from a rollup: it reads the raw table."""


def route(lake: Any, catalog: Any, select: str, tree: Dict[str, Any], namespace: str,
          tables: List[Tuple[str, str]]) -> Optional[str]:
    """The SELECT rewritten to read a rollup, or None (the raw rows answer)."""
    if len(tables) != 1 or not getattr(lake, "_route_rollups", True):
        return None
    try:
        shape = _Shape(tree, select)  # first: most queries are no GROUP BY over one table
    except _NoRoute:
        return None
    source = f"{tables[0][0]}.{tables[0][1]}"
    rollups = lake._rollups.rollups_of(lake, source, max_age=5.0)
    if not rollups:
        return None
    for name, _ in sorted(rollups, key=lambda r: -(r[1].months * 10**15 + r[1].micros)):
        try:
            # The definition as the rollup's table says now (a name may have been made again).
            spec = _rollup.spec_of(lake._snapshot(name).properties)
            if spec is None or spec.source.lower() != source.lower():
                continue
            return _rewrite(lake, catalog, select, namespace, source, name, spec, shape)
        except (_NoRoute, KeyError):
            continue  # KeyError: dropped by another process since the lake's rollups were listed
    return None


class _Shape:
    """What a query asks for, as far as routing cares."""

    def __init__(self, tree: Dict[str, Any], select: str) -> None:
        statements = tree.get("statements", [])
        if len(statements) != 1:
            raise _NoRoute
        node = statements[0]["node"]
        if node.get("type") != "SELECT_NODE" or node.get("cte_map", {}).get("map"):
            raise _NoRoute
        if node.get("qualify") or node.get("sample") or len(node.get("group_sets") or []) > 1:
            raise _NoRoute
        handling = node.get("aggregate_handling")
        if handling not in (None, "STANDARD_HANDLING", "FORCE_AGGREGATES"):
            raise _NoRoute
        if not node.get("group_expressions") and handling != "FORCE_AGGREGATES":
            raise _NoRoute  # no GROUP BY: nothing is bucketed
        ref = node.get("from_table") or {}
        if ref.get("type") != "BASE_TABLE" or ref.get("at_clause") or ref.get("sample"):
            raise _NoRoute
        self.node = node
        self.select = select
        self.table_alias = ref.get("alias") or ""
        self.from_span = _span(ref)
        self.aliases = {e.get("alias", "").lower() for e in node["select_list"] if e.get("alias")}
        for modifier in node.get("modifiers") or []:
            if modifier.get("type") not in ("ORDER_MODIFIER", "LIMIT_MODIFIER", "DISTINCT_MODIFIER"):
                raise _NoRoute
            if modifier.get("type") == "LIMIT_MODIFIER" and (
                    not _is_constant(modifier.get("limit")) or not _is_constant(modifier.get("offset"))):
                raise _NoRoute


def _is_constant(expr: Any) -> bool:
    return expr is None or (isinstance(expr, dict) and expr.get("class") == "CONSTANT")


def _span(expr: Dict[str, Any]) -> Tuple[int, int]:
    start, length = expr.get("query_location"), expr.get("query_location_length")
    if not isinstance(start, int) or not isinstance(length, int) or length <= 0 or start > 1 << 40:
        raise _NoRoute
    return start, length


def _column(expr: Dict[str, Any]) -> Optional[str]:
    if expr.get("class") == "COLUMN_REF":
        return expr["column_names"][-1]
    return None


def _rewrite(lake: Any, catalog: Any, select: str, namespace: str, source: str, name: str, spec: Spec,
             shape: _Shape) -> str:
    node = shape.node
    groups = {g.lower() for g in spec.groups}
    time_column = spec.time_column.lower()
    by_function: Dict[Tuple[str, str], str] = {}  # (function, column) -> rollup alias
    for a in spec.aggregates:
        by_function[(a.function, (a.column or "").lower())] = a.alias
    edits: List[Tuple[int, int, str]] = []
    aggregates: List[Dict[str, Any]] = []
    grand_states: set = set()  # deviations merged across rows: their grand mean per output group
    buckets: List[Tuple[int, int]] = []  # where the query calls time_bucket
    widths: set = set()
    con = catalog.con

    def st(name: str) -> str:
        """A stored state column as the relation names it (apart from any name the query uses)."""
        return quote(_STATE + name)

    def merge(expr: Dict[str, Any], identity: bool = False) -> str:
        """The aggregate over the relation's state; with `identity` (each output row is one row of
        the relation) the same value as a plain expression of that row."""
        function = expr.get("function_name", "").lower()
        if expr.get("distinct") or expr.get("filter") or expr.get("export_state"):
            raise _NoRoute
        args = [a["expression"] for a in expr.get("arguments", [])]
        orders = (expr.get("order_bys") or {}).get("orders", [])
        if function == "count" and len(args) == 1 and args[0].get("class") == "STAR":
            function, args = "count_star", []
        kind = _rollup._FUNCTIONS.get(function)
        if kind is None:
            raise _NoRoute
        if kind == "count_star":
            if args or orders:
                raise _NoRoute
            return f"{st(ROWS)}::BIGINT" if identity else f"sum({st(ROWS)})::BIGINT"
        if len(args) != 1 or _column(args[0]) is None:
            raise _NoRoute
        column = _column(args[0]).lower()
        if kind in ("first", "last"):
            if len(orders) != 1 or (_column(orders[0]["expression"]) or "").lower() != time_column \
                    or orders[0].get("type") not in ("ORDER_DEFAULT", "ORDER_ASCENDING"):
                raise _NoRoute
            alias = by_function.get((kind, column))
            if alias is None:
                raise _NoRoute
            if identity:
                return st(alias)
            return f"{kind}({st(alias)} ORDER BY {st(alias + '__time')})"
        if orders:
            raise _NoRoute
        total = (lambda x: x) if identity else (lambda x: f"sum({x})")  # noqa: E731
        if kind == "count":
            alias = by_function.get(("count", column))
            if alias is not None:
                return f"{total(st(alias))}::BIGINT"
            state = _state_with_count(by_function, column)
            return f"{total(st(state + '__count'))}::BIGINT"
        if kind in ("min", "max"):
            alias = by_function.get((kind, column))
            if alias is None:
                raise _NoRoute
            return st(alias) if identity else f"{kind}({st(alias)})"
        if kind == "sum":
            alias = by_function.get(("sum", column))
            integer = _integer(spec, column, lake, source)
            if alias is None:
                alias = by_function.get(("avg", column))
                if alias is None:
                    raise _NoRoute
                alias += "__sum"
            return total(st(alias)) + ("::DECIMAL(38, 0)" if integer else "")
        if kind == "avg":
            avg = by_function.get(("avg", column))
            if avg is None:
                raise _NoRoute
            if identity:
                return st(avg)  # the stored average, as the raw rows gave it
            return f"(sum({st(avg + '__sum')})::DOUBLE / sum({st(avg + '__count')}))"
        # deviations: merged from count, mean and M2 (Chan et al.)
        state = next((by_function[(k, column)] for k in _rollup._DEVIATIONS if (k, column) in by_function), None)
        if state is None:
            raise _NoRoute
        if identity and (kind, column) in by_function:
            return st(by_function[(kind, column)])  # stored as the raw rows gave it
        n, mean, m2 = (st(state + s) for s in ("__count", "__mean", "__m2"))
        if identity:
            return _deviation(kind, m2, n)
        # M2 = sum(m2_i) + sum(n_i (mean_i - K)^2) - (sum(n_i (mean_i - K)))^2 / N, exact for any
        # pivot K and stable for a K near the data: each row carries its output group's mean over
        # the relation (a window over the group, _relation; rows the query's WHERE drops count in
        # it, so it is only a pivot). The textbook sum(n mean^2) - N grand^2 cancels
        # catastrophically far from zero.
        grand_states.add(state)
        pivot = st(state + "__grand")
        total = f"sum({n})"
        shift = f"({mean} - {pivot})"
        squares = (f"(sum({m2}) + sum({n} * {shift} * {shift}) - "
                   f"sum({n} * {shift}) * sum({n} * {shift}) / nullif({total}, 0))")
        return _deviation(kind, f"greatest({squares}, 0)", total)

    def walk(expr: Any, inside_aggregate: bool = False) -> None:
        """Checks `expr` (outside aggregates) and records the edits its aggregates need."""
        stack = [expr]
        while stack:
            e = stack.pop()
            if not isinstance(e, dict):
                continue
            cls = e.get("class")
            if cls in _NOT_ROUTABLE or e.get("type") in _NOT_ROUTABLE:
                raise _NoRoute
            if cls == "FUNCTION":
                function = e.get("function_name", "").lower()
                if function == "time_bucket":
                    args = [a["expression"] for a in e.get("arguments", [])]
                    if len(args) != 2 or (_column(args[1]) or "").lower() != time_column:
                        raise _NoRoute
                    widths.add(_width(con, select, args[0]))
                    buckets.append(_span(e))
                    continue
                if function in _AGGREGATES or function == "count_star":
                    merge(e)  # raises _NoRoute if the rollup cannot merge it
                    aggregates.append(e)
                    continue
                if function in ("time_bucket_gapfill", "date_bin_gapfill", "locf", "interpolate",
                                "time_weighted_mean"):
                    raise _NoRoute
            if cls == "COLUMN_REF":
                ref = _column(e).lower()
                if ref not in groups and ref not in shape.aliases:
                    raise _NoRoute
                if len(e["column_names"]) > 1 and e["column_names"][0].lower() not in (
                        shape.table_alias.lower(), source.split(".", 1)[1].lower()):
                    raise _NoRoute
                continue
            for value in e.values():
                if isinstance(value, dict):
                    stack.append(value)
                elif isinstance(value, list):
                    stack.extend(v for v in value if isinstance(v, dict))

    items = node["select_list"]
    for e in items:
        walk(e)
    for e in node.get("group_expressions", []):
        if e.get("class") == "CONSTANT":
            continue
        walk(e)
    if node.get("having"):
        walk(node["having"])
    for modifier in node.get("modifiers") or []:
        for order in modifier.get("orders", []) if modifier.get("type") == "ORDER_MODIFIER" else []:
            if order["expression"].get("class") != "CONSTANT":
                walk(order["expression"])
    if len(widths) != 1:
        raise _NoRoute
    months, micros = widths.pop()
    if spec.months:
        if micros or not months or months % spec.months:
            raise _NoRoute
    elif months or not micros or micros % spec.micros:
        raise _NoRoute
    if not aggregates:
        raise _NoRoute  # nothing aggregated: a plain GROUP BY reads the raw rows
    time_type = pa.schema(SchemaCapsule(lake._snapshot(source).schema_capsule())).field(spec.time_column).type
    cast = "TIMESTAMPTZ" if time_type.tz is not None else "TIMESTAMP"
    bounds = _where(con, select, node.get("where_clause"), groups, time_column, shape, cast)
    # The query's buckets and groups are the rollup's own: each output row is one row of the
    # relation, so the GROUP BY goes and each aggregate becomes an expression of its row (no
    # hash aggregation over every stored row).
    group_by = _group_by_span(select, node) if (months, micros) == (spec.months, spec.micros) \
        and not node.get("having") and _groups_of(node) == groups else None
    for e in aggregates:
        at, size = _span(e)
        edits.append((at, size, merge(e, identity=group_by is not None)))
    if group_by is not None:
        edits.append((group_by[0], group_by[1], ""))
        # Each row of the relation carries its bucket: the query's time_bucket calls read it.
        for at, size in buckets:
            edits.append((at, size, quote(_BUCKET)))

    # Unaliased select items keep the name the raw query's column would have.
    for e in items:
        if not e.get("alias") and any(_within(at, _span(e)) for at, _, _ in edits):
            at, size = _span(e)
            edits.append((at + size, 0, f" AS {quote(_default_name(con, shape.node, e))}"))
    if grand_states:
        query_groups = _groups_of(node)
        if query_groups is None:
            raise _NoRoute  # deviations need the output groups spelled out
        grand = ((months, micros), sorted(query_groups), sorted(grand_states))
    else:
        grand = None
    relation = _relation(lake, catalog, name, spec, bounds, grand, identity=group_by is not None)
    alias = shape.table_alias or source.split(".", 1)[1]
    at, size = shape.from_span
    edits.append((at, size, f"({relation}) AS {quote(alias)}"))
    text = select.encode("utf-8")
    for at, size, replacement in sorted(edits, key=lambda e: (e[0], -e[1]), reverse=True):
        text = text[:at] + replacement.encode("utf-8") + text[at + size:]
    return text.decode("utf-8")


def _deviation(kind: str, squares: str, n: str) -> str:
    """A variance or standard deviation from the sum of squared deviations and the count."""
    if kind == "var_pop":
        return f"({squares} / nullif({n}, 0))"
    if kind == "stddev_pop":
        return f"sqrt({squares} / nullif({n}, 0))"
    if kind == "var_samp":
        return f"(CASE WHEN {n} > 1 THEN {squares} / ({n} - 1) END)"
    return f"(CASE WHEN {n} > 1 THEN sqrt({squares} / ({n} - 1)) END)"


def _groups_of(node: Dict[str, Any]) -> Optional[set]:
    """The plain columns (lowercase) a query groups by besides its time_bucket, or None when it
    groups by anything else."""
    items = node["select_list"]
    aliases = {e.get("alias", "").lower(): e for e in items if e.get("alias")}
    if node.get("aggregate_handling") == "FORCE_AGGREGATES":
        keys = [e for e in items if not _has_aggregate(e)]
    else:
        keys = []
        for e in node.get("group_expressions", []):
            if e.get("class") == "CONSTANT":
                i = int(e.get("literal", {}).get("text", "0")) - 1
                if not 0 <= i < len(items):
                    return None
                e = items[i]
            elif e.get("class") == "COLUMN_REF" and len(e["column_names"]) == 1 and \
                    e["column_names"][0].lower() in aliases:
                e = aliases[e["column_names"][0].lower()]
            keys.append(e)
    out = set()
    buckets = 0
    for e in keys:
        if e.get("class") == "FUNCTION" and e.get("function_name", "").lower() == "time_bucket":
            buckets += 1
        elif e.get("class") == "COLUMN_REF":
            out.add(_column(e).lower())
        else:
            return None
    return out if buckets >= 1 else None


def _has_aggregate(expr: Dict[str, Any]) -> bool:
    return any(isinstance(n, dict) and n.get("class") == "FUNCTION"
               and n.get("function_name", "").lower() in _AGGREGATES | {"count_star"} for n in _tree.nodes(expr))


def _group_by_span(select: str, node: Dict[str, Any]) -> Optional[Tuple[int, int]]:
    """The byte range of the query's `GROUP BY ...` clause, or None if it cannot be told."""
    text = select.encode("utf-8")
    tokens = duckdb.tokenize(select)
    # Token offsets are character offsets into `select`; spans in the tree are byte offsets.
    to_byte = (lambda i: len(select[:i].encode("utf-8"))) if len(text) != len(select) else (lambda i: i)
    starts = [(to_byte(start), kind.name) for start, kind in tokens]
    words = []
    for i, (start, kind) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(text)
        words.append((start, text[start:end].strip().decode("utf-8", "replace").lower(), kind))
    found = [i for i in range(len(words) - 1)
             if words[i][1] == "group" and words[i][2] == "keyword" and words[i + 1][1] == "by"]
    if len(found) != 1:
        return None
    begin = words[found[0]][0]
    ends = [sum(_span(e)) for e in node.get("group_expressions", [])]
    if node.get("aggregate_handling") == "FORCE_AGGREGATES":
        if found[0] + 2 >= len(words) or words[found[0] + 2][1] != "all":
            return None
        ends = [words[found[0] + 2][0] + 3]
    if not ends:
        return None
    end = max(ends)
    following = [w for w in words if w[0] >= end]
    if following and following[0][1] not in ("order", "limit", "offset", ";", "having"):
        return None
    return begin, end - begin


def _within(at: int, span: Tuple[int, int]) -> bool:
    return span[0] <= at < span[0] + span[1]


def _state_with_count(by_function: Dict[Tuple[str, str], str], column: str) -> str:
    for kind in ("avg",) + _rollup._DEVIATIONS:
        if (kind, column) in by_function:
            return by_function[(kind, column)]
    raise _NoRoute


def _integer(spec: Spec, column: str, lake: Any, source: str) -> bool:
    declared = pa.schema(SchemaCapsule(lake._snapshot(source).schema_capsule()))
    for f in declared:
        if f.name.lower() == column:
            return pa.types.is_integer(f.type)
    raise _NoRoute


def _width(con: duckdb.DuckDBPyConnection, select: str, expr: Dict[str, Any]) -> Tuple[int, int]:
    if expr.get("class") not in ("CONSTANT", "CAST"):
        raise _NoRoute
    at, size = _span(expr)
    text = select.encode("utf-8")[at:at + size].decode("utf-8", "replace")
    try:
        return _rollup._width(con, text, "")
    except ValueError:
        raise _NoRoute from None


def _default_name(con: duckdb.DuckDBPyConnection, node: Dict[str, Any], item: Dict[str, Any]) -> str:
    """The column name DuckDB gives an unaliased select item (its expression's rendering)."""
    shell = copy.deepcopy({k: v for k, v in node.items() if k != "select_list"})
    shell.update(select_list=[item], where_clause=None, group_expressions=[], group_sets=[], having=None,
                 aggregate_handling="STANDARD_HANDLING",
                 modifiers=[], from_table={"type": "EMPTY", "alias": "", "sample": None, "query_location": 0})
    try:
        rendered = con.execute("SELECT json_deserialize_sql(?)",
                               [_tree.dumps({"error": False, "statements": [{"node": shell, "named_param_map": []}]})]
                               ).fetchall()[0][0]
    except duckdb.Error:
        raise _NoRoute from None
    if not rendered.startswith("SELECT "):
        raise _NoRoute
    return rendered[len("SELECT "):]


class _Bounds:
    """The query's time range as lo <= t < hi, in microseconds (None: unbounded)."""

    def __init__(self, lo: Optional[int] = None, hi: Optional[int] = None) -> None:
        self.lo = lo  # inclusive lower bound
        self.hi = hi  # exclusive upper bound


def _where(con: duckdb.DuckDBPyConnection, select: str, where: Any, groups: set, time_column: str,
           shape: _Shape, cast: str) -> _Bounds:
    bounds = _Bounds()
    if not where:
        return bounds
    conjuncts, stack = [], [where]
    while stack:
        e = stack.pop()
        if e.get("class") == "CONJUNCTION" and e.get("type") == "CONJUNCTION_AND":
            stack.extend(e["children"])
        else:
            conjuncts.append(e)
    for c in conjuncts:
        refs = [_column(n).lower() for n in _tree.nodes(c) if isinstance(n, dict) and n.get("class") == "COLUMN_REF"]
        bad = [n for n in _tree.nodes(c) if isinstance(n, dict) and (
            n.get("class") in _NOT_ROUTABLE or n.get("type") in _NOT_ROUTABLE
            or (n.get("class") == "FUNCTION" and n.get("function_name", "").lower() in _AGGREGATES))]
        if bad:
            raise _NoRoute
        if refs and all(r in groups for r in refs):
            continue  # applies to stored and computed rows alike
        if refs != [time_column]:
            raise _NoRoute
        _time_bound(con, select, c, bounds, time_column, cast)
    return bounds


_FLIP = {"COMPARE_GREATERTHAN": "COMPARE_LESSTHAN", "COMPARE_GREATERTHANOREQUALTO": "COMPARE_LESSTHANOREQUALTO",
         "COMPARE_LESSTHAN": "COMPARE_GREATERTHAN", "COMPARE_LESSTHANOREQUALTO": "COMPARE_GREATERTHANOREQUALTO"}


def _time_bound(con: duckdb.DuckDBPyConnection, select: str, c: Dict[str, Any], bounds: _Bounds,
                time_column: str, cast: str) -> None:
    kind = c.get("type")
    if kind == "COMPARE_BETWEEN":
        if (_column(c["input"]) or "").lower() != time_column:
            raise _NoRoute
        _narrow(bounds, "COMPARE_GREATERTHANOREQUALTO", _instant(con, select, c["lower"], cast))
        _narrow(bounds, "COMPARE_LESSTHANOREQUALTO", _instant(con, select, c["upper"], cast))
        return
    if kind not in _FLIP:
        raise _NoRoute
    left, right = c["left"], c["right"]
    if (_column(left) or "").lower() == time_column:
        _narrow(bounds, kind, _instant(con, select, right, cast))
    elif (_column(right) or "").lower() == time_column:
        _narrow(bounds, _FLIP[kind], _instant(con, select, left, cast))
    else:
        raise _NoRoute


def _narrow(bounds: _Bounds, kind: str, us: int) -> None:
    if kind == "COMPARE_GREATERTHAN":
        lo = us + 1
    elif kind == "COMPARE_GREATERTHANOREQUALTO":
        lo = us
    elif kind == "COMPARE_LESSTHAN":
        bounds.hi = us if bounds.hi is None else min(bounds.hi, us)
        return
    else:
        bounds.hi = us + 1 if bounds.hi is None else min(bounds.hi, us + 1)
        return
    bounds.lo = lo if bounds.lo is None else max(bounds.lo, lo)


def _instant(con: duckdb.DuckDBPyConnection, select: str, expr: Dict[str, Any], cast: str) -> int:
    """A constant time expression in microseconds since the epoch (UTC), read as the time column
    reads it (`cast`: TIMESTAMPTZ, or TIMESTAMP for naive times, where a string's offset is
    dropped as DuckDB drops it when it compares)."""
    if any(isinstance(n, dict) and n.get("class") in ("COLUMN_REF", "SUBQUERY") for n in _tree.nodes(expr)):
        raise _NoRoute
    at, size = _span(expr)
    text = select.encode("utf-8")[at:at + size].decode("utf-8", "replace")
    known = _INSTANTS.get((text, cast))
    if known is not None:
        return known
    try:
        value = con.execute(f"SELECT epoch_us(({text})::{cast})").fetchall()[0][0]
    except duckdb.Error:
        raise _NoRoute from None
    if not isinstance(value, int):
        raise _NoRoute
    if len(_INSTANTS) < 4096 and not _VOLATILE.search(text):
        _INSTANTS[(text, cast)] = value
    return value


# Constant time expressions already evaluated (sessions are always UTC, so a text's value never
# changes), except those that read the clock.
_INSTANTS: Dict[Tuple[str, str], int] = {}
_VOLATILE = re.compile(r"now|current|today|random|get_|epoch_ms\(\)", re.IGNORECASE)


def _us_literal(us: int, tz: bool) -> str:
    return f"make_timestamp({us})" + ("::TIMESTAMPTZ" if tz else "")


def _relation(lake: Any, catalog: Any, name: str, spec: Spec, bounds: _Bounds, grand: Any = None,
              identity: bool = False) -> str:
    """The SQL of the per-(bucket, group) relation the rewritten query reads (module docstring).

    The query's time range [lo, hi) splits into the buckets wholly inside it from `start` to
    `end`, read from the rollup except for changed pairs, and the edges [lo, start) and [end, hi),
    computed from the raw rows. Each raw read is a plain time range (so the scan skips files and
    row groups outside it), and the ranges are disjoint (so no row counts twice).
    """
    rollup = lake._snapshot(name)
    if _rollup.spec_of(rollup.properties) is None:
        raise _NoRoute
    ns, bare = name.split(".", 1)
    r = _rollup.reading(catalog, ns, bare, rollup, spec)
    if r.source is None or r.reflected is None:
        raise _NoRoute  # the source was recreated, or the rollup never refreshed
    declared = r.declared
    tz = declared.field(spec.bucket).type.tz is not None
    states = [c for c in declared.names if c not in [spec.bucket] + spec.groups]
    if spec.time_column.lower() in {c.lower() for c in states}:
        raise _NoRoute  # an aggregate named like the time column: the relation cannot hold both
    start, end = _whole_buckets(spec, bounds)
    # Buckets older than the source's oldest live chunk may hold rows its retention dropped, and
    # those older than the rollup's own oldest chunk were dropped by the rollup's retention: both
    # are read from the raw rows.
    for horizon in (_rollup._horizon_us(r.source.contract, r.plan_src), _rollup._horizon_us(rollup.contract, r.plan)):
        if horizon is not None:
            start = max(start, _whole_buckets(spec, _Bounds(horizon, None))[0])
    changed = r.changed()
    if changed is None:
        raise _NoRoute  # the changes since the refresh are unknown
    stored = r.stored()
    raw = r.raw()
    b, t, w = quote(spec.bucket), quote(spec.time_column), spec.width
    lo = bounds.lo if bounds.lo is not None else _MIN_US
    hi = bounds.hi if bounds.hi is not None else _MAX_US

    def at(us: int) -> str:
        return _us_literal(us, tz)

    parts = []
    groups = "".join(f", r.{quote(g)}" for g in spec.groups)
    anti, pairs = "", r.pairs()
    if pairs is not None:
        on = " AND ".join([f"r.{b} = d.{b}"] + [f"r.{quote(g)} IS NOT DISTINCT FROM d.{quote(g)}" for g in spec.groups])
        anti = f" ANTI JOIN {pairs} d ON {on}"
    if start < end:
        # Stored rows: the changed pairs' buckets [c_lo, c_hi) anti-joined with them, the buckets
        # before and after read as they are (no join over every stored row).
        c_lo, c_hi = _changed_range(spec, r.changed()) if pairs is not None else (end, end)
        c_lo, c_hi = min(max(c_lo, start), end), max(min(c_hi, end), start)
        select_stored = (f"SELECT r.{b} AS {t}, r.{b} AS {quote(_BUCKET)}{groups}, "
                         + ", ".join(f"r.{quote(c)} AS {quote(_STATE + c)}" for c in states) + f" FROM {stored} r")
        for s_lo, s_hi, join in ((start, c_lo, ""), (c_lo, c_hi, anti), (c_hi, end, "")):
            if s_lo < s_hi:
                parts.append(f"{select_stored}{join} WHERE r.{ROWS} > 0 AND r.{b} >= {at(s_lo)} AND r.{b} < {at(s_hi)}")
    raw_ranges = []  # (from, to, only changed pairs)
    if start >= end:
        raw_ranges.append((lo, hi, False))
    else:
        if lo < start:
            raw_ranges.append((lo, start, False))
        if end < hi:
            raw_ranges.append((end, hi, False))
        if pairs is not None:
            c_lo, c_hi = _changed_range(spec, changed)
            c_lo, c_hi = max(c_lo, start), min(c_hi, end)
            if c_lo < c_hi:
                raw_ranges.append((c_lo, c_hi, True))
    for r_lo, r_hi, only_changed in raw_ranges:
        conditions = []
        if r_lo > _MIN_US:
            conditions.append(f"s.{t} >= {at(r_lo)}")
        if r_hi < _MAX_US:
            conditions.append(f"s.{t} < {at(r_hi)}")
        rows = f"SELECT s.* FROM {raw} s"
        if only_changed:
            match = " AND ".join([f"time_bucket({w}, s.{t}) = d.{b}"]
                                 + [f"s.{quote(g)} IS NOT DISTINCT FROM d.{quote(g)}" for g in spec.groups])
            rows += f" SEMI JOIN {pairs} d ON {match}"
        if conditions:
            rows += " WHERE " + " AND ".join(conditions)
        computed = _rollup.state_select(spec, declared, f"({rows})", extra=f"min({t}) AS {quote('__timelake_first')}")
        # Computed rows carry their earliest raw time (inside both the bucket and the query's time
        # range) as the time column, and their bucket.
        columns = ", ".join([f"c.{quote('__timelake_first')} AS {t}", f"c.{b} AS {quote(_BUCKET)}"]
                            + [f"c.{quote(g)}" for g in spec.groups]
                            + [f"c.{quote(s)} AS {quote(_STATE + s)}" for s in states])
        parts.append(f"SELECT {columns} FROM ({computed}) c")
    if not parts:
        raise _NoRoute
    union = " UNION ALL BY NAME ".join(f"({p})" for p in parts)
    if grand is None:
        return union
    (months, micros), query_groups, grand_states = grand
    width = f"INTERVAL '{months} months'" if months else f"INTERVAL '{micros} microseconds'"
    window = ", ".join([f"time_bucket({width}, {t})"] + [quote(g) for g in query_groups])
    means = ", ".join(
        f"sum({quote(_STATE + s + '__count')} * {quote(_STATE + s + '__mean')}) OVER w / "
        f"nullif(sum({quote(_STATE + s + '__count')}) OVER w, 0) AS {quote(_STATE + s + '__grand')}"
        for s in grand_states)
    return f"SELECT *, {means} FROM ({union}) WINDOW w AS (PARTITION BY {window})"


_STATE = "__tl_"  # the relation's names for stored state columns
_BUCKET = "__tl_bucket"  # the relation's column of each row's bucket (of the rollup's width)
_MIN_US = -(1 << 62)
_MAX_US = 1 << 62


def _whole_buckets(spec: Spec, bounds: _Bounds) -> Tuple[int, int]:
    """[start, end): the rollup buckets that lie wholly inside the bounds, in microseconds."""
    start, end = _MIN_US, _MAX_US
    if bounds.lo is not None:
        floor = bucket_floor(spec, bounds.lo)
        start = floor if floor == bounds.lo else bucket_floor(spec, bucket_next(spec, floor))
    if bounds.hi is not None:
        end = bucket_floor(spec, bounds.hi)  # the last whole bucket ends where hi's begins
    return start, end


def _changed_range(spec: Spec, changed: pa.Table) -> Tuple[int, int]:
    import pyarrow.compute as pc

    buckets = changed.column(spec.bucket).cast(pa.timestamp("us")).cast(pa.int64())
    return pc.min(buckets).as_py(), bucket_next(spec, pc.max(buckets).as_py())


# DuckDB's time_bucket origins: 2000-01-03 (a Monday) for widths in days and smaller units,
# 2000-01-01 for widths in months.
_ORIGIN_US = 946_857_600 * 1_000_000


def bucket_floor(spec: Spec, us: int) -> int:
    """time_bucket(spec.width, t) for t = `us` microseconds since the epoch (UTC)."""
    if not spec.months:
        return _ORIGIN_US + (us - _ORIGIN_US) // spec.micros * spec.micros
    day = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)
    months = (day.year - 2000) * 12 + day.month - 1
    months = months // spec.months * spec.months
    start = dt.datetime(2000 + months // 12, months % 12 + 1, 1)
    return (start - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)


def bucket_next(spec: Spec, floor: int) -> int:
    """The start of the bucket after the one starting at `floor`."""
    if not spec.months:
        return floor + spec.micros
    day = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=floor)
    months = (day.year - 2000) * 12 + day.month - 1 + spec.months
    start = dt.datetime(2000 + months // 12, months % 12 + 1, 1)
    return (start - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)


