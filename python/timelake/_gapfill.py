"""Gap filling in lake.sql(): time_bucket_gapfill / date_bin_gapfill with locf and interpolate.

DuckDB has none of these functions, so a statement that uses them is rewritten before it runs:
each SELECT whose select list holds `time_bucket_gapfill(width, time [, start, finish])` (or
InfluxDB's `date_bin_gapfill(width, time [, origin])`) becomes one SELECT of plain DuckDB SQL that

1. runs the user's own aggregate query with the gapfill call replaced by `time_bucket` (UTC
   buckets; date_bin_gapfill's origin is the Unix epoch), without its ORDER BY and LIMIT;
2. builds the grid of buckets from the window's first to its last bucket, times every group the
   aggregate returned (every GROUP BY key other than the bucket is a series), and joins the
   aggregate rows onto it, so a group that appears gets every bucket;
3. computes locf and interpolate with window functions over each group's rows in bucket order,
   with TimescaleDB's semantics (see docs/api.md, "Gap filling");
4. looks up, unless the call names its own `prev`, the last non-null value of each filled
   aggregate before the window (the same aggregate over the same buckets, the WHERE's time
   bounds replaced by "before the window's start"), so the first buckets of a group are
   filled from what came before the window;
5. applies the user's ORDER BY and LIMIT (by default, ordered by group, then bucket).

The rewrite works on DuckDB's parse tree: the generated SQL is a template of timelake's own text
with the user's expressions and SELECTs put in as parse trees, never as text (_sql_template). The
result is still one SELECT that _sql runs inside `query(?)`, so confinement is unchanged. The
bucket width is evaluated once (inside `query(?)` too) to give a clear error for a width that is
not a positive interval. (time_weighted_mean, an aggregate, is a macro: _time_weighted.)
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import duckdb

from . import _sql_template as _template, _tree
from ._sql_text import message

_GAPFILL = ("time_bucket_gapfill", "date_bin_gapfill")
_FILLS = ("locf", "interpolate")
_NAMES = frozenset(_GAPFILL + _FILLS)
# The most rows gap filling may make (buckets of the window times series): a width of a second
# over a year is 31.5 million rows per series, which is a mistake, not a chart.
MAX_ROWS = 20_000_000

_REWRITES: "OrderedDict[str, Rewritten]" = OrderedDict()
_REWRITES_SIZE = 256
_REWRITES_LOCK = threading.Lock()
_AGGREGATES: Optional[frozenset] = None
_MENTIONED = re.compile(r"(?i)gapfill|locf|interpolate")
# TimescaleDB's third argument may be a time zone ('Europe/Berlin', 'UTC'), not a start.
_ZONE = re.compile(r"^(?:[A-Za-z_]+(?:/[A-Za-z0-9_+-]+)+|UTC|GMT|Z)$")


class Rewritten(NamedTuple):
    select: str  # the statement as plain DuckDB SQL
    # What file pruning must give up, since the look-up before the window reads rows the WHERE's
    # time bounds exclude: None (nothing), "all" (every conjunct), or the time column's name
    # (its lower bounds; all its bounds when start is passed, which may lie past the WHERE's end).
    unprune: Optional[str]
    every_bound: bool


def rewrite(con: duckdb.DuckDBPyConnection, select: str, conjuncts: Optional[List[Any]]) -> Tuple[str, Optional[List[Any]]]:
    """(select, pruning conjuncts) with the statement's gap filling rewritten into plain DuckDB
    SQL; both as given when it uses none of the gapfill functions. `conjuncts` are the WHERE
    conjuncts that prune the files of the statement's table (_sql_filter.Conjunct, or None).
    Raises ValueError for a gapfill statement it cannot run."""
    if not _MENTIONED.search(select):  # most statements: no parse needed to know
        return select, conjuncts
    with _REWRITES_LOCK:
        known = _REWRITES.get(select)
        if known is not None:
            _REWRITES.move_to_end(select)
    if known is None:
        text = con.execute("SELECT json_serialize_sql(?)", [select]).fetchall()[0][0]
        tree = _tree.loads(text)
        if tree.get("error"):
            raise RuntimeError(f"SQL syntax error: {tree.get('error_message')}")
        if not any(_is_call(n, _NAMES) for n in _tree.nodes(tree)):
            known = Rewritten(select, None, False)
        else:
            known = _Rewriter(con, tree).run()
        with _REWRITES_LOCK:
            _REWRITES[select] = known
            if len(_REWRITES) > _REWRITES_SIZE:
                _REWRITES.popitem(last=False)
    if conjuncts is None or known.unprune is None:
        return known.select, conjuncts
    if known.unprune == "all":
        return known.select, None
    kept = [c for c in conjuncts
            if c.column.lower() != known.unprune or (not known.every_bound and c.op in ("<", "<="))]
    return known.select, kept or None


def _is_call(node: Any, names) -> bool:
    return (
        isinstance(node, dict)
        and node.get("class") == "FUNCTION"
        and not node.get("schema")
        and not node.get("catalog")
        and str(node.get("function_name", "")).lower() in names
    )


def _name(node: Dict[str, Any]) -> str:
    return str(node["function_name"]).lower()


def _args(call: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any]]]:
    """(name or "", expression) of a FUNCTION node's arguments."""
    if "arguments" in call:
        return [(str(a.get("name") or "").lower(), a["expression"]) for a in call["arguments"]]
    return [("", c) for c in call.get("children", [])]


def _bind(call: Dict[str, Any], params: Tuple[str, ...], required: int, usage: str) -> Dict[str, Dict[str, Any]]:
    """The call's arguments by parameter name (positional first, then named)."""
    bound: Dict[str, Dict[str, Any]] = {}
    positional = 0
    for name, expr in _args(call):
        if not name:
            if bound and any(p in bound for p in params[positional:]):
                raise ValueError(f"{usage}: a positional argument after a named one")
            if positional >= len(params):
                raise ValueError(f"{usage}: too many arguments")
            bound[params[positional]] = expr
            positional += 1
        else:
            if name not in params:
                raise ValueError(f"{usage}: unknown argument {name!r}")
            if name in bound:
                raise ValueError(f"{usage}: argument {name!r} given twice")
            bound[name] = expr
    missing = [p for p in params[:required] if p not in bound]
    if missing:
        raise ValueError(f"{usage}: missing {', '.join(missing)}")
    return bound


def _walk_expression(expr: Any):
    """The nodes of an expression, not descending into subqueries (their own queries)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            if node.get("class") == "SUBQUERY":
                continue
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _has_columns(expr: Any) -> bool:
    return any(n.get("class") in ("COLUMN_REF", "SUBQUERY", "STAR") for n in _tree.nodes(expr) if isinstance(n, dict))


def _integer(expr: Any) -> Optional[int]:
    if isinstance(expr, dict) and expr.get("class") == "CONSTANT":
        value = expr.get("value") or {}
        literal = expr.get("literal") or {}
        text = literal.get("text") if literal.get("kind") == "INTEGER" else None
        if text is None and isinstance(value, dict) and value.get("type", {}).get("id") in ("INTEGER", "BIGINT"):
            text = value.get("value")
        try:
            return int(text) if text is not None else None
        except (TypeError, ValueError):
            return None
    return None


def _single_name(expr: Any) -> Optional[str]:
    if isinstance(expr, dict) and expr.get("class") == "COLUMN_REF" and len(expr.get("column_names", [])) == 1:
        return str(expr["column_names"][0])
    return None


_LOWER = {"COMPARE_GREATERTHAN": ">", "COMPARE_GREATERTHANOREQUALTO": ">="}
_UPPER = {"COMPARE_LESSTHAN": "<", "COMPARE_LESSTHANOREQUALTO": "<="}
_FLIP = {
    "COMPARE_GREATERTHAN": "COMPARE_LESSTHAN",
    "COMPARE_GREATERTHANOREQUALTO": "COMPARE_LESSTHANOREQUALTO",
    "COMPARE_LESSTHAN": "COMPARE_GREATERTHAN",
    "COMPARE_LESSTHANOREQUALTO": "COMPARE_GREATERTHANOREQUALTO",
    "COMPARE_EQUAL": "COMPARE_EQUAL",
}


class _Fill(NamedTuple):
    kind: str  # "locf" | "interpolate"
    value: Dict[str, Any]
    prev: Optional[Dict[str, Any]]  # explicit prev (None: looked up before the window)
    next: Optional[Dict[str, Any]]  # interpolate's explicit next
    treat_null_as_missing: bool


class _Rewriter:
    def __init__(self, con: duckdb.DuckDBPyConnection, tree: Dict[str, Any]) -> None:
        self.con = con
        self.tree = tree
        self.aggregates = _aggregate_names(con)
        self.unprune: Optional[str] = None
        self.every_bound = False

    def run(self) -> Rewritten:
        calls = [n for n in _tree.nodes(self.tree) if _is_call(n, _NAMES)]
        selects = [n for n in _tree.nodes(self.tree) if isinstance(n, dict) and n.get("type") == "SELECT_NODE"]
        legal = set()
        targets = []
        for node in selects:
            items = node.get("select_list") or []
            buckets = [i for i, item in enumerate(items) if _is_call(item, _GAPFILL)]
            if len(buckets) > 1:
                raise ValueError(
                    f"one {_name(items[buckets[0]])}() per SELECT: this one has {len(buckets)} "
                    "(bucket once, and refer to it by its alias or position)")
            fills = [item for item in items if _is_call(item, _FILLS)]
            if fills and not buckets:
                raise ValueError(
                    f"{_name(fills[0])}() fills the gaps that time_bucket_gapfill() (or date_bin_gapfill()) "
                    "makes: use it in a SELECT that buckets with time_bucket_gapfill(width, time) and GROUP BY")
            if buckets:
                legal.update(id(item) for item in items if _is_call(item, _NAMES))
                # ORDER BY may repeat a select item (it is ordered by that result column).
                stripped = [_template.strip(item) for item in items]
                for m in node.get("modifiers") or []:
                    for order in m.get("orders") or [] if m.get("type") == "ORDER_MODIFIER" else []:
                        if _template.strip(order.get("expression")) in stripped:
                            legal.update(id(n) for n in _tree.nodes(order["expression"]) if _is_call(n, _NAMES))
                targets.append((node, buckets[0]))
        for call in calls:
            if call.get("filter") is not None or call.get("distinct") or (call.get("order_bys") or {}).get("orders"):
                raise ValueError(f"{_name(call)}() takes no FILTER, DISTINCT or ORDER BY of its own: "
                                 f"put them on the aggregate inside, e.g. locf(avg(x) FILTER (WHERE ...))")
            if id(call) not in legal:
                raise ValueError(
                    f"{_name(call)}() must be a whole item of the SELECT list (optionally with AS name), "
                    "not part of another expression or clause: compute with its result in an outer query, "
                    "e.g. SELECT round(v, 1) FROM (SELECT time_bucket_gapfill(...) AS t, locf(avg(x)) AS v ...)")
        # Innermost first: an outer gapfill SELECT copies its FROM, which must be rewritten already.
        for node, index in reversed(targets):
            new_node, lookup, column, explicit_start = self._rewrite_node(node, index)
            if lookup:
                if column is None or self.unprune is not None:
                    self.unprune = "all"
                else:
                    self.unprune, self.every_bound = column.lower(), explicit_start
            node.clear()
            node.update(new_node)
        try:
            select = self.con.execute("SELECT json_deserialize_sql(?::JSON)", [_tree.dumps(self.tree)]).fetchall()[0][0]
        except duckdb.Error as e:
            raise ValueError(f"this gapfill statement nests too deeply to rewrite ({message(e)}): nest it less") from None
        return Rewritten(select, self.unprune, self.every_bound)

    # -- one SELECT ---------------------------------------------------------------------------

    def _rewrite_node(self, node: Dict[str, Any], index: int) -> Tuple[Dict[str, Any], bool, Optional[str], bool]:
        """(the gap-filled SELECT node, whether it looks up before the window, the name of its time
        column if it is one, whether start was passed)."""
        items = node["select_list"]
        gap = items[index]
        fn = _name(gap)
        if fn == "time_bucket_gapfill":
            usage = "time_bucket_gapfill(width, time [, start, finish])"
            params = ("bucket_width", "time", "start", "finish")
            args = _args(gap)
            zone = [e for n, e in args if n == "timezone"] + [
                e for n, e in args[2:3] if not n and _ZONE.match(str((e.get("literal") or {}).get("text", "")))]
            if zone:
                raise ValueError(f"{usage}: buckets are UTC in timelake; a timezone argument is not supported")
            bound = _bind(_renamed(gap), params, 2, usage)
        else:
            usage = "date_bin_gapfill(width, time [, origin])"
            bound = _bind(gap, ("bucket_width", "time", "origin"), 2, usage)
        width, time = bound["bucket_width"], bound["time"]
        for what in ("start", "finish"):
            if bound.get(what) is not None and _is_null(bound[what]):
                del bound[what]  # NULL: from the WHERE, as in TimescaleDB
        self._check_width(fn, width)
        origin = bound.get("origin")
        if fn == "date_bin_gapfill" and origin is None:
            origin = _template.parse_expression(self.con, "TIMESTAMPTZ '1970-01-01 00:00:00+00'")
        for what in ("start", "finish", "origin"):
            if bound.get(what) is not None and _has_columns(bound[what]):
                raise ValueError(f"{usage}: {what} must be a constant (no columns or subqueries)")
        if _has_columns(width):
            raise ValueError(f"{usage}: the width must be a constant interval")

        if node.get("qualify") is not None:
            raise ValueError(f"{fn}(): QUALIFY is not supported in a gapfill SELECT; filter in an outer query")
        group_sets = node.get("group_sets") or []
        if len(group_sets) > 1:
            raise ValueError(f"{fn}(): GROUPING SETS, ROLLUP and CUBE are not supported in a gapfill SELECT")

        # What each select item is.
        kinds: List[str] = []
        fills: Dict[int, _Fill] = {}
        for k, item in enumerate(items):
            if any(n.get("class") == "WINDOW" for n in _walk_expression(item)):
                raise ValueError(f"{fn}(): window functions are not supported in a gapfill SELECT; "
                                 "apply them in an outer query")
            if item.get("class") in ("STAR", "COLUMNS") or item.get("type") in ("STAR", "COLUMNS"):
                raise ValueError(f"{fn}(): name the columns of a gapfill SELECT (no * or COLUMNS(...))")
            if k == index:
                kinds.append("bucket")
            elif _is_call(item, _FILLS):
                fill = self._fill(item)
                if not self._has_aggregate(fill.value):
                    raise ValueError(f"{fill.kind}() fills an aggregate: write e.g. {fill.kind}(avg(x)), "
                                     f"not {fill.kind}() of a plain column")
                fills[k] = fill
                kinds.append(fill.kind)
            elif self._has_aggregate(item):
                kinds.append("agg")
            else:
                kinds.append("key")

        # The group keys other than the bucket.
        alias = str(gap.get("alias") or "").lower()
        keys: List[Dict[str, Any]] = []
        bucket_grouped = False
        if node.get("aggregate_handling") == "FORCE_AGGREGATES":  # GROUP BY ALL
            bucket_grouped = True
            keys = [_template.copy(items[k]) for k in range(len(items)) if kinds[k] == "key"]
        else:
            for expr in node.get("group_expressions") or []:
                position = _integer(expr)
                name = _single_name(expr)
                if alias and name is not None and name.lower() == alias and _same_column(expr, time):
                    raise ValueError(
                        f"GROUP BY {name} groups by the column {name}, not by the bucket named {name} (SQL "
                        f"reads a GROUP BY name as a column first): write GROUP BY {index + 1}, or give "
                        f"{fn}() another alias")
                if position == index + 1 or (alias and name is not None and name.lower() == alias) or (
                        _template.strip(expr) == _template.strip(gap)):
                    bucket_grouped = True
                elif position is not None and 1 <= position <= len(items):
                    keys.append(_template.copy(items[position - 1]))
                else:
                    keys.append(_template.copy(expr))
        if not bucket_grouped:
            raise ValueError(f"{fn}() buckets an aggregate query: add GROUP BY {index + 1} (its position) "
                             "or its alias, plus the columns of each series")
        for key in keys:
            key["alias"] = ""

        bucket_sql = "time_bucket(CAST(@w AS INTERVAL), CAST(@t AS TIMESTAMPTZ)" + (
            ", CAST(@o AS TIMESTAMPTZ))" if origin is not None else ")")
        bucket_env = {"w": width, "t": time, "o": origin}
        bucket_expr = _template.expression(self.con, bucket_sql, bucket_env)

        # The window: explicit start/finish, else the WHERE's bounds on the time column.
        lower, upper = _where_bounds(node.get("where_clause"), time)
        start_sql, finish_sql, env = None, None, {}
        if bound.get("start") is not None:
            start_sql, env["s0"] = "CAST(@s0 AS TIMESTAMPTZ)", bound["start"]
        elif lower:
            parts = []
            for n, (op, constant) in enumerate(lower):
                env[f"s{n}"] = constant
                parts.append(f"CAST(@s{n} AS TIMESTAMPTZ)" + (" + INTERVAL 1 microsecond" if op == ">" else ""))
            start_sql = parts[0] if len(parts) == 1 else f"greatest({', '.join(parts)})"
        if bound.get("finish") is not None:
            finish_sql, env["f0"] = "CAST(@f0 AS TIMESTAMPTZ)", bound["finish"]
        elif upper:
            parts = []
            for n, (op, constant) in enumerate(upper):
                env[f"f{n}"] = constant
                parts.append(f"CAST(@f{n} AS TIMESTAMPTZ)" + (" + INTERVAL 1 microsecond" if op == "<=" else ""))
            finish_sql = parts[0] if len(parts) == 1 else f"least({', '.join(parts)})"
        if start_sql is None or finish_sql is None:
            column = ".".join(time.get("column_names", [])) if time.get("class") == "COLUMN_REF" else "<time>"
            missing = " and ".join(w for w, s in (("start", start_sql), ("end", finish_sql)) if s is None)
            raise ValueError(
                f"{fn}() needs the window's start and end, and the WHERE clause gives no {missing}: "
                f"bound the time column with constants, e.g. WHERE {column} >= '2026-11-01' AND {column} < '2026-11-02'"
                + (" (or pass them as arguments: time_bucket_gapfill(width, time, start, finish))"
                   if fn == "time_bucket_gapfill" else ""))
        env.update(bucket_env)
        env.update({f"ki{k}": items[k] for k in range(len(items))})

        lookup = any(f.prev is None for f in fills.values())
        agg = self._aggregate_node(node, index, items, fills, bucket_expr, keys)
        before = None
        if lookup:
            before = self._aggregate_node(node, index, items, fills, bucket_expr, keys)
            where = [_template.copy(c) for c in _and_children(node.get("where_clause")) if not _is_bound(c, time)]
            where.append(_template.expression(self.con, f"CAST(@t AS TIMESTAMPTZ) < {start_sql}", env))
            before["where_clause"] = _conjunction(where)
        sql = self._template(node, kinds, fills, keys, start_sql, finish_sql, origin is not None, lookup)
        new = _template.parse_node(self.con, sql)
        _template.fill(new, env, {"__tl_ph_agg": agg, "__tl_ph_before": before})
        for k, item in enumerate(new["select_list"]):
            item["alias"] = self._output_name(items[k])
        self._order(new, node, items, kinds, keys)
        column = str(time["column_names"][-1]) if time.get("class") == "COLUMN_REF" else None
        return new, lookup, column, bound.get("start") is not None

    def _fill(self, item: Dict[str, Any]) -> _Fill:
        kind = _name(item)
        if kind == "locf":
            usage = "locf(value [, prev] [, treat_null_as_missing])"
            bound = _bind(item, ("value", "prev", "treat_null_as_missing"), 1, usage)
            treat = bound.get("treat_null_as_missing")
            flag = False
            if treat is not None:
                literal = treat.get("literal") or {}
                value = treat.get("value") or {}
                if treat.get("class") != "CONSTANT":
                    raise ValueError(f"{usage}: treat_null_as_missing must be true or false")
                text = literal.get("text") if literal else value.get("value")
                kind_of = literal.get("kind") if literal else (value.get("type") or {}).get("id")
                if kind_of in ("NULL", "NULL_LITERAL", "SQLNULL") or (value.get("is_null") if isinstance(value, dict) else False):
                    flag = False
                elif kind_of == "BOOLEAN":
                    flag = str(text).lower() in ("true", "1", "t")
                else:
                    raise ValueError(f"{usage}: treat_null_as_missing must be true or false")
            return _Fill("locf", bound["value"], bound.get("prev"), None, flag)
        usage = "interpolate(value [, prev] [, next])"
        bound = _bind(item, ("value", "prev", "next"), 1, usage)
        for what in ("prev", "next"):
            if bound.get(what) is not None and not _is_row(bound[what]):
                raise ValueError(f"{usage}: {what} is a (time, value) row, e.g. (SELECT (time, temp) FROM ... "
                                 "ORDER BY time DESC LIMIT 1), or NULL")
        return _Fill("interpolate", bound["value"], bound.get("prev"), bound.get("next"), False)

    def _has_aggregate(self, expr: Any) -> bool:
        return any(_is_call(n, self.aggregates) for n in _walk_expression(expr))

    def _check_width(self, fn: str, width: Dict[str, Any]) -> None:
        if _has_columns(width):
            raise ValueError(f"{fn}(): the bucket width must be a constant interval such as INTERVAL '1 hour'")
        text = _template.render(self.con, width)
        try:
            rows = self.con.execute(
                "SELECT * FROM query(?)", [f"SELECT CAST(({text}) AS INTERVAL) > INTERVAL 0 SECONDS"]).fetchall()
        except duckdb.Error:
            raise ValueError(f"{fn}(): the bucket width must be an interval such as INTERVAL '1 hour' or "
                             f"'15 minutes', got {text}") from None
        if not rows or rows[0][0] is not True:
            raise ValueError(f"{fn}(): the bucket width must be positive, got {text}")

    def _aggregate_node(self, node, index, items, fills, bucket_expr, keys) -> Dict[str, Any]:
        """The user's SELECT with the bucket as time_bucket and each fill's aggregate in its place,
        plus the keys and explicit prev/next as further items; no ORDER BY or LIMIT."""
        agg = _template.copy(node)
        agg["modifiers"] = [m for m in agg.get("modifiers") or [] if m.get("type") == "DISTINCT_MODIFIER"]
        out = []
        for k, item in enumerate(items):
            if k == index:
                expr = _template.copy(bucket_expr)
            elif k in fills:
                expr = _template.copy(fills[k].value)
            else:
                expr = _template.copy(item)
            expr["alias"] = item.get("alias") or ""
            out.append(expr)
        for key in keys:
            out.append(_template.copy(key))
        for k, fill in sorted(fills.items()):
            for extra in (fill.prev, fill.next):
                if extra is not None:
                    e = _template.copy(extra)
                    e["alias"] = ""
                    out.append(e)
        agg["select_list"] = out
        groups = []
        for expr in agg.get("group_expressions") or []:
            groups.append(_template.copy(bucket_expr) if _template.strip(expr) == _template.strip(items[index]) else expr)
        if groups:
            agg["group_expressions"] = groups
        return agg

    def _template(self, node, kinds, fills, keys, start_sql, finish_sql, origin, lookup) -> str:
        n = len(kinds)
        b = kinds.index("bucket")
        key_cols = [f"__tl_k{j}" for j in range(len(keys))]
        extras: List[str] = []
        for k, fill in sorted(fills.items()):
            if fill.prev is not None:
                extras.append(f"__tl_xp{k}")
            if fill.next is not None:
                extras.append(f"__tl_xn{k}")
        cols = [f"__tl_i{k}" for k in range(n)] + key_cols + extras
        wrap = ", ".join(f"#{p + 1} AS {c}" for p, c in enumerate(cols))
        key_items = [k for k in range(n) if kinds[k] == "key"]
        bucket_of = (lambda x: f"time_bucket(CAST(@w AS INTERVAL), {x}"
                     + (", CAST(@o AS TIMESTAMPTZ))" if origin else ")"))
        ctes = [f"__tl_agg AS MATERIALIZED (SELECT {wrap}, true AS __tl_row FROM (SELECT 1 AS __tl_ph_agg))"]
        if keys:
            group_cols = key_cols + [f"__tl_i{k}" for k in key_items]
            ctes.append(f"__tl_groups AS (SELECT DISTINCT {', '.join(group_cols)} FROM __tl_agg)")
        else:
            group_cols = [f"__tl_i{k}" for k in key_items]
            # No series: one group, whether or not the window holds rows (the grid alone).
            if key_items:
                # Without keys such items hold no columns (DuckDB refuses them otherwise): their
                # own expressions give them even when the window has no rows.
                ctes.append("__tl_groups AS (SELECT " + ", ".join(
                    (f"@ki{k}" if not _has_columns(node["select_list"][k]) else
                     f"(SELECT any_value(__tl_i{k}) FROM __tl_agg)") + f" AS __tl_i{k}" for k in key_items) + ")")
            else:
                ctes.append("__tl_groups AS (SELECT 1 AS __tl_one)")
        too_many = (f"time_bucket_gapfill/date_bin_gapfill: the gap-filled result would hold more than "
                    f"{MAX_ROWS:,} rows (buckets of the window times series); use a wider bucket, a shorter "
                    "window or fewer series")
        ctes.append(
            f"__tl_bounds AS (SELECT f AS __tl_first, l AS __tl_last FROM (SELECT {bucket_of(start_sql)} AS f, "
            f"{bucket_of('(' + finish_sql + ') - INTERVAL 1 microsecond')} AS l) "
            f"WHERE CASE WHEN l > f AND ((epoch_us(l) - epoch_us(f)) / "
            f"(epoch_us(f + CAST(@w AS INTERVAL)) - epoch_us(f)) + 1) * (SELECT count(*) FROM __tl_groups) > {MAX_ROWS} "
            f"THEN error('{too_many}') ELSE true END)")
        ctes.append(
            "__tl_grid AS (SELECT g.*, s.__tl_b FROM __tl_groups g CROSS JOIN "
            "(SELECT unnest(generate_series(__tl_first, __tl_last, CAST(@w AS INTERVAL))) AS __tl_b "
            "FROM __tl_bounds) s)")
        on = [f"grid.__tl_b = agg.__tl_i{b}"] + [f"grid.{c} IS NOT DISTINCT FROM agg.{c}" for c in key_cols]
        row_cols = [f"coalesce(grid.__tl_b, agg.__tl_i{b}) AS __tl_b"]
        for c in group_cols:
            row_cols.append(f"CASE WHEN grid.__tl_b IS NULL THEN agg.{c} ELSE grid.{c} END AS {c}")
        for k in range(n):
            if kinds[k] in ("agg", "locf", "interpolate"):
                row_cols.append(f"agg.__tl_i{k}")
        row_cols += [f"agg.{c}" for c in extras]
        row_cols.append("agg.__tl_row IS NOT NULL AS __tl_row")
        ctes.append(f"__tl_rows AS (SELECT {', '.join(row_cols)} FROM __tl_grid grid FULL JOIN __tl_agg agg "
                    f"ON {' AND '.join(on)})")
        if lookup:
            ctes.append(f"__tl_before AS MATERIALIZED (SELECT {wrap} FROM (SELECT 1 AS __tl_ph_before))")
            prev_cols = list(key_cols)
            for k, fill in sorted(fills.items()):
                if fill.prev is None:
                    prev_cols.append(f"arg_max(__tl_i{k}, __tl_i{b}) FILTER (WHERE __tl_i{k} IS NOT NULL) AS __tl_pv{k}")
                    prev_cols.append(f"max(__tl_i{b}) FILTER (WHERE __tl_i{k} IS NOT NULL) AS __tl_pt{k}")
            group_by = f" GROUP BY {', '.join(key_cols)}" if key_cols else ""
            ctes.append(f"__tl_prev AS (SELECT {', '.join(prev_cols)} FROM __tl_before{group_by})")
        partition = f"PARTITION BY {', '.join('r.' + c for c in key_cols)} " if key_cols else ""
        windows = []
        for k, fill in sorted(fills.items()):
            v = f"r.__tl_i{k}"
            if fill.kind == "locf" and fill.treat_null_as_missing:
                windows.append(f"last_value({v} IGNORE NULLS) OVER __tl_w AS __tl_l{k}")
            elif fill.kind == "locf":
                windows.append(f"last_value(CASE WHEN r.__tl_row THEN {{'v': {v}}} END IGNORE NULLS) OVER __tl_w AS __tl_l{k}")
            else:
                windows.append(f"last_value(CASE WHEN r.__tl_row THEN {{'t': r.__tl_b, 'v': {v}}} END IGNORE NULLS) "
                               f"OVER __tl_w AS __tl_l{k}")
                windows.append(f"first_value(CASE WHEN r.__tl_row THEN {{'t': r.__tl_b, 'v': {v}}} END IGNORE NULLS) "
                               f"OVER __tl_wn AS __tl_n{k}")
            if fill.prev is not None:
                windows.append(f"first_value(r.__tl_xp{k} IGNORE NULLS) OVER __tl_wg AS __tl_gp{k}")
            if fill.next is not None:
                windows.append(f"first_value(r.__tl_xn{k} IGNORE NULLS) OVER __tl_wg AS __tl_gn{k}")
            if fill.prev is None:
                windows.append(f"p.__tl_pv{k}, p.__tl_pt{k}")
        join = ""
        if lookup:
            join = (" LEFT JOIN __tl_prev p ON " + " AND ".join(f"r.{c} IS NOT DISTINCT FROM p.{c}" for c in key_cols)
                    if key_cols else " CROSS JOIN __tl_prev p")
        ctes.append(
            f"__tl_filled AS (SELECT r.*{''.join(', ' + w for w in windows)} FROM __tl_rows r{join} "
            f"WINDOW __tl_w AS ({partition}ORDER BY r.__tl_b ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW), "
            f"__tl_wn AS ({partition}ORDER BY r.__tl_b ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING), "
            f"__tl_wg AS ({partition.strip()}))")
        final: List[str] = []
        ends: List[str] = []  # interpolate's two ends, per gap row
        for k in range(n):
            name = f"__tl_out{k}"  # the real names are set on the parsed tree (no quoting)
            kind = kinds[k]
            if kind == "bucket":
                final.append(f"__tl_b AS {name}")
            elif kind in ("key", "agg"):
                final.append(f"__tl_i{k} AS {name}")
            elif kind == "locf":
                fill = fills[k]
                prev = f"__tl_gp{k}" if fill.prev is not None else f"__tl_pv{k}"
                if fill.treat_null_as_missing:
                    final.append(f"coalesce(__tl_l{k}, {prev}) AS {name}")
                else:
                    final.append(f"CASE WHEN __tl_l{k} IS NULL THEN {prev} ELSE __tl_l{k}.v END AS {name}")
            else:
                fill = fills[k]
                if fill.prev is not None:
                    pt = f"CAST(struct_extract_at(__tl_gp{k}, 1) AS TIMESTAMPTZ)"
                    pv = f"struct_extract_at(__tl_gp{k}, 2)"
                else:
                    pt, pv = f"__tl_pt{k}", f"__tl_pv{k}"
                if fill.next is not None:
                    nt = f"CAST(struct_extract_at(__tl_gn{k}, 1) AS TIMESTAMPTZ)"
                    nv = f"struct_extract_at(__tl_gn{k}, 2)"
                else:
                    nt, nv = "NULL::TIMESTAMPTZ", "NULL::DOUBLE"
                y0 = f"CAST(CASE WHEN __tl_l{k} IS NULL THEN {pv} ELSE __tl_l{k}.v END AS DOUBLE)"
                x0 = f"epoch_us(CASE WHEN __tl_l{k} IS NULL THEN {pt} ELSE __tl_l{k}.t END)"
                y1 = f"CAST(CASE WHEN __tl_n{k} IS NULL THEN {nv} ELSE __tl_n{k}.v END AS DOUBLE)"
                x1 = f"epoch_us(CASE WHEN __tl_n{k} IS NULL THEN {nt} ELSE __tl_n{k}.t END)"
                ends.append(f"{y0} AS __tl_y0_{k}, {x0} AS __tl_x0_{k}, {y1} AS __tl_y1_{k}, {x1} AS __tl_x1_{k}")
                y0, x0, y1, x1, x = f"__tl_y0_{k}", f"__tl_x0_{k}", f"__tl_y1_{k}", f"__tl_x1_{k}", "epoch_us(__tl_b)"
                final.append(
                    f"CASE WHEN __tl_row THEN CAST(__tl_i{k} AS DOUBLE) "
                    f"WHEN {y0} IS NULL OR {y1} IS NULL OR {x0} IS NULL OR {x1} IS NULL THEN NULL "
                    f"WHEN {y0} = {y1} THEN {y0} "
                    f"ELSE ({y0} * ({x1} - {x}) + {y1} * ({x} - {x0})) / ({x1} - {x0}) END AS {name}")
        order = ""
        has_order = any(m.get("type") == "ORDER_MODIFIER" for m in node.get("modifiers") or [])
        distinct = any(m.get("type") == "DISTINCT_MODIFIER" for m in node.get("modifiers") or [])
        if not has_order and not distinct:
            order = " ORDER BY " + ", ".join(key_cols + ["__tl_b"])
        source = "__tl_filled"
        if ends:
            ctes.append(f"__tl_ends AS (SELECT f.*, {', '.join(ends)} FROM __tl_filled f)")
            source = "__tl_ends"
        return f"WITH {', '.join(ctes)} SELECT {', '.join(final)} FROM {source}{order}"

    def _output_name(self, item: Dict[str, Any]) -> str:
        if item.get("alias"):
            return str(item["alias"])
        if item.get("class") == "COLUMN_REF" and item.get("column_names"):
            return str(item["column_names"][-1])  # DuckDB names m.device "device"
        return _template.render(self.con, item)

    def _order(self, new: Dict[str, Any], node: Dict[str, Any], items, kinds, keys) -> None:
        """Moves the user's ORDER BY, LIMIT and DISTINCT onto the gap-filled SELECT."""
        names = {self._output_name(item).lower() for item in items}
        mods = []
        for m in node.get("modifiers") or []:
            m = _template.copy(m)
            if m.get("type") == "ORDER_MODIFIER":
                for order in m.get("orders") or []:
                    expr = order["expression"]
                    position = _integer(expr)
                    name = _single_name(expr)
                    if position is not None or (name is not None and name.lower() in names):
                        continue
                    same = [k for k, item in enumerate(items) if _template.strip(item) == _template.strip(expr)]
                    if not same:
                        raise ValueError(
                            "ORDER BY in a gapfill SELECT names its result columns, by alias or position "
                            "(the gaps have no rows to evaluate other expressions on)")
                    order["expression"] = _template.parse_expression(self.con, str(same[0] + 1))
            elif m.get("type") == "DISTINCT_MODIFIER" and m.get("distinct_on_targets"):
                raise ValueError("DISTINCT ON is not supported in a gapfill SELECT")
            mods.append(m)
        if not any(m.get("type") == "ORDER_MODIFIER" for m in mods):
            mods = [m for m in mods if m.get("type") == "DISTINCT_MODIFIER"] + [
                m for m in new.get("modifiers") or [] if m.get("type") == "ORDER_MODIFIER"] + [
                m for m in mods if m.get("type") != "DISTINCT_MODIFIER"]
        new["modifiers"] = mods


def _is_null(expr: Dict[str, Any]) -> bool:
    while expr.get("class") == "CAST":
        expr = expr["child"]
    literal = expr.get("literal") or {}
    value = expr.get("value") or {}
    return expr.get("class") == "CONSTANT" and (
        literal.get("kind") in ("NULL", "NULL_LITERAL") or (isinstance(value, dict) and bool(value.get("is_null"))))


def _is_row(expr: Dict[str, Any]) -> bool:
    """Whether an expression can be interpolate's (time, value): a row, a struct, a subquery or NULL."""
    while expr.get("class") == "CAST":
        expr = expr["child"]
    if expr.get("class") == "SUBQUERY" or _is_null(expr):
        return True
    return expr.get("class") == "FUNCTION" and str(expr.get("function_name", "")).lower() in ("row", "struct_pack")


def _renamed(call: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(call)
    args = []
    for a in call.get("arguments", []):
        a = dict(a)
        name = str(a.get("name") or "").lower()
        a["name"] = {"width": "bucket_width", "ts": "time"}.get(name, name)
        args.append(a)
    out["arguments"] = args
    return out


def _and_children(expr: Any) -> List[Dict[str, Any]]:
    if expr is None:
        return []
    if isinstance(expr, dict) and expr.get("type") == "CONJUNCTION_AND":
        out = []
        for child in expr.get("children", []):
            out.extend(_and_children(child))
        return out
    return [expr]


def _conjunction(children: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if not children:
        return None
    if len(children) == 1:
        return children[0]
    return {"class": "CONJUNCTION", "type": "CONJUNCTION_AND", "alias": "",
            "query_location": 18446744073709551615, "children": children}


def _same_column(expr: Any, time: Dict[str, Any]) -> bool:
    if not isinstance(expr, dict) or expr.get("class") != "COLUMN_REF" or time.get("class") != "COLUMN_REF":
        return False
    a = [str(x).lower() for x in expr.get("column_names", [])]
    b = [str(x).lower() for x in time.get("column_names", [])]
    return a == b or (a[-1:] == b[-1:] and (len(a) == 1 or len(b) == 1))


def _is_constant(expr: Any) -> bool:
    return isinstance(expr, dict) and not _has_columns(expr)


def _bound_of(conjunct: Dict[str, Any], time: Dict[str, Any]) -> List[Tuple[str, str, Dict[str, Any]]]:
    """[(side, op, constant)] that one WHERE conjunct puts on the time column."""
    kind = conjunct.get("type")
    if kind == "COMPARE_BETWEEN":
        if _same_column(conjunct.get("input"), time) and _is_constant(conjunct.get("lower")) and _is_constant(conjunct.get("upper")):
            return [("lower", ">=", conjunct["lower"]), ("upper", "<=", conjunct["upper"])]
        return []
    if kind not in _FLIP:
        return []
    left, right = conjunct.get("left"), conjunct.get("right")
    if _same_column(right, time) and _is_constant(left):
        left, right, kind = right, left, _FLIP[kind]
    if not (_same_column(left, time) and _is_constant(right)):
        return []
    if kind in _LOWER:
        return [("lower", _LOWER[kind], right)]
    if kind in _UPPER:
        return [("upper", _UPPER[kind], right)]
    return [("lower", ">=", right), ("upper", "<=", right)]  # time = constant


def _is_bound(conjunct: Dict[str, Any], time: Dict[str, Any]) -> bool:
    return bool(_bound_of(conjunct, time))


def _where_bounds(where: Any, time: Dict[str, Any]):
    """([(op, constant)] lower bounds, [(op, constant)] upper bounds) the WHERE puts on `time`."""
    lower, upper = [], []
    for conjunct in _and_children(where):
        for side, op, constant in _bound_of(conjunct, time):
            (lower if side == "lower" else upper).append((op, constant))
    return lower, upper


def _aggregate_names(con: duckdb.DuckDBPyConnection) -> frozenset:
    global _AGGREGATES
    if _AGGREGATES is None:
        rows = con.execute(
            "SELECT DISTINCT lower(function_name) FROM duckdb_functions() WHERE function_type = 'aggregate'").fetchall()
        _AGGREGATES = frozenset(r[0] for r in rows) | {"count_star", "time_weighted_mean"}
    return _AGGREGATES


