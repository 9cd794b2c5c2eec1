"""Scan filters from SQL: the WHERE conjuncts that let the core's scan planner skip files.

A statement gets a filtered view of a lake table only when pruning cannot change its result:

* it is one SELECT (no set operation, no CTE) whose FROM is that table, named once: no join, no
  subquery, no table function anywhere in the statement, so no other part of it reads the table;
  and no sample of it (a sample is drawn before the WHERE applies);
* the filter is made of top-level AND conjuncts of its WHERE, each comparing the table's time
  column to a constant (=, <, <=, >, >=, BETWEEN) or a series-key column stored as a string or an
  integer to a literal of that kind (=). Other conjuncts are left out, which only widens it.

DuckDB still evaluates the whole WHERE over the filtered view, so the filter only has to admit
every row the WHERE admits. Time constants are evaluated by DuckDB itself in the column's type
(strings, dates and timestamps with or without zone, as DuckDB would compare them), and each bound
is checked against DuckDB's own comparison at the bound and one microsecond either side; a
constant whose bound does not check out is not used. Constants are rendered from the parsed tree
(string literals and casts to date and timestamp types only), never taken from the query text.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import duckdb
import pyarrow as pa

from . import _tree

# Comparison node type -> operator, and the operator seen from the other side.
_COMPARISONS = {
    "COMPARE_EQUAL": "=",
    "COMPARE_LESSTHAN": "<",
    "COMPARE_LESSTHANOREQUALTO": "<=",
    "COMPARE_GREATERTHAN": ">",
    "COMPARE_GREATERTHANOREQUALTO": ">=",
}
_FLIPPED = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
# Casts a time constant may go through (DuckDB type names as the parser spells them).
_TIME_CASTS = frozenset(
    {"DATE", "TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_S", "TIMESTAMP_MS", "VARCHAR"}
)
# Parts of a statement that may read a table other than through its one FROM.
_OTHER_READS = frozenset({"JOIN", "SUBQUERY", "TABLE_FUNCTION", "EXPRESSION_LIST", "PIVOT", "SHOW_REF"})
_INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class ScanFilter:
    """What the core's Table.scan prunes by: time bounds (inclusive, microseconds as the time
    column stores them) and series-key equalities."""

    min_time: Optional[int] = None
    max_time: Optional[int] = None
    key_equals: Tuple[Tuple[str, Union[int, str]], ...] = ()

    def arguments(self) -> Dict[str, Any]:
        return {"min_time": self.min_time, "max_time": self.max_time, "key_equals": dict(self.key_equals)}


@dataclass(frozen=True)
class Conjunct:
    """`column op constant` from a WHERE, before the table's schema is known."""

    column: str  # as written (SQL identifiers compare ignoring case)
    op: str
    constant: Dict[str, Any]  # the constant's parse tree


def filter_conjuncts(tree: Dict[str, Any]) -> Optional[Tuple[Tuple[str, str], List[Conjunct]]]:
    """For a statement that may be pruned: ((schema or "", table) as written, its conjuncts)."""
    statements = tree.get("statements") or []
    if len(statements) != 1:
        return None
    node = statements[0].get("node") or {}
    if node.get("type") != "SELECT_NODE" or (node.get("cte_map") or {}).get("map"):
        return None
    source = node.get("from_table") or {}
    if source.get("type") != "BASE_TABLE" or source.get("catalog_name") or not source.get("table_name"):
        return None
    if source.get("sample") or node.get("sample") or source.get("at_clause"):
        return None  # a sample is drawn before the WHERE applies: from other files, other rows
    if _count_table_reads(tree) != 1:
        return None
    qualifiers = {source["alias"].lower()} if source.get("alias") else {source["table_name"].lower()}
    conjuncts = []
    for expr in _and_children(node.get("where_clause")):
        conjuncts.extend(_conjuncts_of(expr, qualifiers))
    if not conjuncts:
        return None
    return (source.get("schema_name") or "", source["table_name"]), conjuncts


def resolve(
    con: duckdb.DuckDBPyConnection, conjuncts: List[Conjunct], storage: pa.Schema, contract: dict
) -> Optional[ScanFilter]:
    """The scan filter the conjuncts imply for a table with `storage` columns and `contract`;
    None when none of them can prune."""
    by_lower = {f.name.lower(): f for f in storage}
    time_column = (contract.get("time_column") or "").lower()
    keys = {k.lower() for k in contract.get("series_key") or []}
    low: Optional[int] = None
    high: Optional[int] = None
    equals: Dict[str, Union[int, str]] = {}
    for c in conjuncts:
        field = by_lower.get(c.column.lower())
        if field is None:
            continue
        if field.name.lower() == time_column and pa.types.is_timestamp(field.type):
            bounds = _time_bounds(con, c, field.type)
            if bounds is not None:
                lo, hi = bounds
                low = lo if low is None or (lo is not None and lo > low) else low
                high = hi if high is None or (hi is not None and hi < high) else high
        elif field.name.lower() in keys and c.op == "=" and field.name not in equals:
            value = _key_value(c.constant, field.type)
            if value is not None:
                equals[field.name] = value
    if low is None and high is None and not equals:
        return None
    return ScanFilter(low, high, tuple(sorted(equals.items())))


def _count_table_reads(tree: Any) -> int:
    """Base tables named in the statement; a large number for anything else that reads."""
    count = 0
    for node in _tree.nodes(tree):
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        if kind in _OTHER_READS or node.get("class") == "SUBQUERY":
            return 1 << 20
        count += 1 if kind == "BASE_TABLE" else 0
    return count


def _and_children(expr: Any) -> List[Dict[str, Any]]:
    """The operands of a tree of ANDs, left to right (walked without recursion: see _tree)."""
    out: List[Dict[str, Any]] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if node.get("class") == "CONJUNCTION" and node.get("type") == "CONJUNCTION_AND":
            stack.extend(reversed(node.get("children") or []))
        else:
            out.append(node)
    return out


def _column(expr: Any, qualifiers: set) -> Optional[str]:
    """The table column `expr` names, if it is a plain column reference."""
    if not isinstance(expr, dict) or expr.get("class") != "COLUMN_REF":
        return None
    names = expr.get("column_names") or []
    if len(names) == 1:
        return names[0]
    if len(names) == 2 and names[0].lower() in qualifiers:
        return names[1]
    return None


def _conjuncts_of(expr: Dict[str, Any], qualifiers: set) -> List[Conjunct]:
    if expr.get("class") == "COMPARISON" and expr.get("type") in _COMPARISONS:
        op = _COMPARISONS[expr["type"]]
        left, right = expr.get("left"), expr.get("right")
        column = _column(left, qualifiers)
        if column is not None and _is_constant(right):
            return [Conjunct(column, op, right)]
        column = _column(right, qualifiers)
        if column is not None and _is_constant(left):
            return [Conjunct(column, _FLIPPED[op], left)]
        return []
    if expr.get("class") == "BETWEEN" and expr.get("type") == "COMPARE_BETWEEN":
        column = _column(expr.get("input"), qualifiers)
        lower, upper = expr.get("lower"), expr.get("upper")
        if column is None or not _is_constant(lower) or not _is_constant(upper):
            return []
        return [Conjunct(column, ">=", lower), Conjunct(column, "<=", upper)]
    return []


def _is_constant(expr: Any) -> bool:
    return _render(expr) is not None


def _render(expr: Any, depth: int = 0) -> Optional[str]:
    """SQL for a string or integer literal, possibly cast to a date or timestamp type (a few
    casts deep: nothing prunes through a deeper pile)."""
    if not isinstance(expr, dict) or depth > 8:
        return None
    if expr.get("class") == "CONSTANT":
        literal = expr.get("literal") or {}
        text = literal.get("text")
        if not isinstance(text, str):
            return None
        if literal.get("kind") == "STRING":
            return "'" + text.replace("'", "''") + "'"
        if literal.get("kind") == "INTEGER" and text.lstrip("-").isdigit():
            return text
        return None
    if expr.get("class") == "CAST" and not expr.get("try_cast"):
        target = expr.get("type_expr") or {}
        name = (target.get("type_name") or "").upper()
        if target.get("class") != "TYPE" or target.get("children") or target.get("catalog") or target.get("schema"):
            return None
        if name not in _TIME_CASTS:
            return None
        inner = _render(expr.get("child"), depth + 1)
        return None if inner is None else f"CAST({inner} AS {name})"
    return None


# (constant, operator, DuckDB type) -> the bounds _time_bounds found, for every connection of the
# process: a literal cast to a time type means the same instant in every session here (all are
# UTC, with their configuration locked, and DuckDB's casts read no clock: 'now' and 'today' are
# errors), so dashboards repeating a query need not ask DuckDB again. Bounded; the oldest go.
_BOUNDS_MEMO: "OrderedDict[Tuple[str, str, str], Optional[Tuple[Optional[int], Optional[int]]]]" = OrderedDict()
_BOUNDS_MEMO_SIZE = 4096
_BOUNDS_LOCK = threading.Lock()


def _time_bounds(
    con: duckdb.DuckDBPyConnection, c: Conjunct, t: pa.DataType
) -> Optional[Tuple[Optional[int], Optional[int]]]:
    """(low, high) inclusive microseconds that `column op constant` implies, checked with DuckDB."""
    duck = "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    constant = _render(c.constant)
    if constant is None:
        return None
    key = (constant, c.op, duck)
    with _BOUNDS_LOCK:
        if key in _BOUNDS_MEMO:
            _BOUNDS_MEMO.move_to_end(key)
            return _BOUNDS_MEMO[key]
    bounds = _ask_time_bounds(con, constant, c.op, duck)
    with _BOUNDS_LOCK:
        _BOUNDS_MEMO[key] = bounds
        if len(_BOUNDS_MEMO) > _BOUNDS_MEMO_SIZE:
            _BOUNDS_MEMO.popitem(last=False)
    return bounds


def _ask_time_bounds(
    con: duckdb.DuckDBPyConnection, constant: str, op: str, duck: str
) -> Optional[Tuple[Optional[int], Optional[int]]]:
    """_time_bounds from DuckDB: the constant's instant, and the comparison exactly as the
    statement makes it (a column of this type against the constant) at that instant and one
    microsecond either side, in one query."""
    probes = ", ".join(
        f"CAST(make_timestamp(CAST(v + ({d}) AS BIGINT)) AS {duck}) {op} ({constant})" for d in (-1, 0, 1)
    )
    try:
        row = con.execute(
            f"SELECT v, CASE WHEN v > {_INT64[0]} AND v < {_INT64[1]} THEN [{probes}] END "
            f"FROM (SELECT epoch_us(CAST(({constant}) AS {duck})) AS v)"
        ).fetchall()[0]
    except (duckdb.Error, OverflowError):
        return None
    value, pattern = row
    if value is None or pattern is None or not (_INT64[0] < value < _INT64[1]):
        return None
    pattern = tuple(pattern)
    if op == "=" and pattern == (False, True, False):
        return value, value
    if op in (">", ">="):
        if pattern == (False, True, True):
            return value, None
        if pattern == (False, False, True):
            return value + 1, None
    if op in ("<", "<="):
        if pattern == (True, True, False):
            return None, value
        if pattern == (True, False, False):
            return None, value - 1
    return None


def _key_value(constant: Dict[str, Any], t: pa.DataType) -> Optional[Union[int, str]]:
    """The literal a series-key column of storage type `t` is compared to, when the comparison
    is plain equality of the same kind (a string with a string, an integer with an integer)."""
    if constant.get("class") != "CONSTANT":
        return None
    literal = constant.get("literal") or {}
    text = literal.get("text")
    if not isinstance(text, str):
        return None
    if pa.types.is_string(t) and literal.get("kind") == "STRING":
        return text
    if pa.types.is_integer(t) and literal.get("kind") == "INTEGER" and text.lstrip("-").isdigit():
        value = int(text)
        return value if _INT64[0] <= value <= _INT64[1] else None
    return None
