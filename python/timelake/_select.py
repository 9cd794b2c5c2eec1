"""Simple selections answered by the core, without DuckDB.

The question a dashboard asks most is one series over a time range: `SELECT avg(x) AS x, max(x)
AS hi FROM ns.t WHERE device = 'd7' AND time >= TIMESTAMP '…' AND time < TIMESTAMP '…'`, or the
rows themselves `ORDER BY time`. A query engine pays a fixed cost per statement and reads whole row
groups of the series-key column to find a few hundred rows; the core's selection reader
(scan/selection_reader.h) reads only the pages that can hold them (row-group statistics, then the
page index), and computes the few aggregates such queries ask (or orders the rows by time) as
DuckDB does. Nothing here imports pyarrow.compute (~50 ms, paid by a first query otherwise).

Only statements of exactly this shape are answered here; anything else (a word more, a function,
an expression, a join, time travel, a comment) goes to DuckDB, as does a table the reader does not
handle (it says so: see selection_reader.h). Recognised by a lexer of its own, narrower than
DuckDB's (no DuckDB needed, so a new process's first such query waits for no database):

    SELECT item [, item …] FROM [ns.]table WHERE cond [AND cond …]
        [ORDER BY <time column> [ASC | DESC]] [LIMIT n] [;]
    SELECT time_bucket(INTERVAL 'n unit', <time column>) AS b, aggregate [, …] FROM … WHERE …
        GROUP BY 1 | b [ORDER BY 1 | b [ASC | DESC]] [LIMIT n] [;]

* items: all columns (`*`) or plain columns, each optionally aliased with AS (rows); or aggregates only:
  count(*), count(col), min/max(col) of numbers and times, avg(col) of numbers up to 32-bit
  integers and floats, sum(col) of doubles, each with an alias (`AS name`; DuckDB's own names
  for unaliased aggregates quote the column when it is one of its keywords).
* conds: at least one series-key column `= 'text'` or `= integer`, or `IN (v, ...)` (several
  values: the reader's key_in, refused by the core when a file needs read-time dedup), and
  comparisons of the time column with timestamp strings (`TIMESTAMP '2026-11-03 10:00'`, `'…'`,
  `TIMESTAMPTZ '…'`; dates and times without an offset or with a zero one, read as UTC as the
  sessions are), `BETWEEN` included.
* value conditions: a double column compared with a number, an integer column with an
  integer (=, <>, !=, <, <=, >, >=), evaluated in the core with DuckDB's NULL and NaN rules.
* time_bucket: widths of whole units below a month, DuckDB's origin (2000-01-03 00:00 UTC), the
  alias not a column's name (GROUP BY and ORDER BY would bind it differently).

Without a series-key condition (the WHERE optional, time comparisons only), the time_bucket shape
is a scan of every series instead (scan/bucket_scan.h), and so is

    SELECT [time_bucket(...) AS b,] <column> [AS name], aggregate [, …] FROM … [WHERE <time>]
        GROUP BY <b and the column, by position or name> [ORDER BY <b, the column> [ASC | DESC] …]
        [LIMIT n] [;]

unless a rollup of the table may answer the statement (routing, _route, reads far less). Rows of
every series are read too over a window of time (both ends given), with value conditions, and
`ORDER BY <time column> [ASC|DESC] [, <a column of text or integers> [ASC|DESC]]` (NULL last, as
DuckDB orders): TSBS's high-cpu-all.

The results are those DuckDB gives: the same column names and types, NULL aggregates over no
rows (count 0), NaN ordered above every number in min/max as DuckDB orders it. Sums and averages
of floating-point values may differ from DuckDB's in the last bits (SQL leaves the order of
summation open; DuckDB's own varies with its threads).
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import pyarrow as pa

from . import _core
from ._rollup_spec import spec_of
from ._capsules import SchemaCapsule, read_stream

# Tests and benchmarks turn the path off to compare it with DuckDB's answers; ANSWERED counts the
# statements answered here, and LAST_READ is what the last one read (files, row groups, pages).
ENABLED = True
ANSWERED = 0
LAST_READ: Dict[str, int] = {}

# DuckDB's reserved words (duckdb_keywords(), category 'reserved'): never a bare name.
_RESERVED = frozenset(
    "all analyse analyze and any array as asc asymmetric both case cast check collate column "
    "constraint create default deferrable desc describe distinct do else end except false fetch "
    "for foreign from group having in initially intersect into lambda lateral leading limit not "
    "null offset on only or order pivot pivot_longer pivot_wider placing primary qualify "
    "references returning select show some summarize symmetric table then to trailing true union "
    "unique unpivot using variadic when where window with".split()
)
# DuckDB's type_function keywords (duckdb_keywords(), duckdb 2.0.1): names of functions and
# types, never a bare column or table name (DuckDB refuses `max(left)`).
_TYPE_FUNCTION = frozenset(
    "anti asof at authorization binary by collation columns concurrently cross freeze full generated "
    "glob ilike inner is isnull join left like map natural notnull outer overlaps positional right semi "
    "similar struct tablesample try_cast tuple unpack verbose".split()
)
_AGGREGATES = frozenset({"count", "min", "max", "avg", "sum"})
# ASCII digits only (DuckDB refuses others), a zone suffix only after a time of day (DuckDB
# refuses '2026-03-01Z'), nothing after (fullmatch: no trailing newline).
_TIME_TEXT = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[ T]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,6}))?)?"
    r"(?:Z|[+-]00(?::?00)?)?)?"
)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_INT64_MAX = 2**63 - 1
# Names DuckDB keeps for its own catalogs and schemas: a lake namespace of that name is left to
# the DuckDB path (which refuses it).
_DUCKDB_NAMES = frozenset({"information_schema", "pg_catalog", "temp", "system", "memory"})
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _fold(name: str) -> str:
    """A name as DuckDB compares names: ASCII letters case-folded, nothing else."""
    return name.translate(_ASCII_LOWER)
_INTEGER_RANGES = {
    pa.int8(): (-(2**7), 2**7 - 1), pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1), pa.int64(): (-(2**63), 2**63 - 1),
}


@dataclass
class _Item:
    function: Optional[str]  # None: a plain column; "time_bucket": the grouping
    column: Optional[str]  # as written (None for count(*) and *)
    alias: Optional[str]
    width: int = 0  # time_bucket's width in microseconds


@dataclass
class _Shape:
    items: List[_Item]
    star: bool
    namespace: Optional[str]
    table: str
    keys: List[Tuple[str, Any]] = field(default_factory=list)  # (column as written, str | int)
    key_sets: List[Tuple[str, List[Any]]] = field(default_factory=list)  # IN lists of several values
    values: List[Tuple[str, str, str]] = field(default_factory=list)  # (column, op, number as written)
    times: List[Tuple[str, str, int]] = field(default_factory=list)  # (column, op, microseconds)
    order: Optional[Tuple[str, bool]] = None  # (column as written or "#<position>", descending)
    limit: Optional[int] = None
    group: Optional[str] = None  # GROUP BY's first key (a name as written or "#<position>")
    groups: List[str] = field(default_factory=list)  # every GROUP BY key
    orders: List[Tuple[str, bool]] = field(default_factory=list)  # every ORDER BY key


class _NotSimple(Exception):
    """The statement is not of the shape answered here."""


# The lexer: deliberately narrower than DuckDB's. ASCII spaces, words, quoted names, strings
# without escapes other than '', unsigned integers and a few operators; anything else (comments,
# E'' strings, dollar quoting, decimals, other characters, Unicode spaces) makes the statement
# not simple.
_LEX = re.compile(
    r"""[ \t\n\r\v\f]*(?:(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<quoted>"(?:[^"]|"")+")|(?P<string>'(?:[^']|'')*')"""
    r"""|(?P<number>[0-9]+(?:\.[0-9]+)?(?![A-Za-z0-9_.]))|(?P<op>>=|<=|<>|!=|[=<>(),.*;-]))"""
)


class _Tokens:
    def __init__(self, query: str) -> None:
        self.items: List[Tuple[str, str]] = []
        at = 0
        while True:
            m = _LEX.match(query, at)
            if m is None:
                if query[at:].strip(" \t\n\r\v\f"):
                    raise _NotSimple  # other characters, or spaces DuckDB may not take as such
                break
            at = m.end()
            kind = m.lastgroup
            text = m.group(kind)
            if kind == "word":
                folded = text.lower()
                kind = "keyword" if folded in _RESERVED or folded in _TYPE_FUNCTION else "identifier"
            elif kind == "quoted":
                kind = "identifier"
            elif kind == "string":
                kind = "string_const"
            elif kind == "number":
                kind = "numeric_const"
            else:
                kind = "operator"
            self.items.append((text, kind))
        self.at = 0

    def peek(self) -> Tuple[str, str]:
        return self.items[self.at] if self.at < len(self.items) else ("", "end")

    def take(self) -> Tuple[str, str]:
        token = self.peek()
        self.at += 1
        return token

    def word(self, *words: str) -> Optional[str]:
        """Takes the next token if it is one of the (keyword) words; returns it lower-cased."""
        text, kind = self.peek()
        if kind in ("keyword", "identifier") and text.lower() in words:
            self.at += 1
            return text.lower()
        return None

    def expect(self, *words: str) -> str:
        found = self.word(*words)
        if found is None:
            raise _NotSimple
        return found

    def symbol(self, text: str) -> bool:
        token, kind = self.peek()
        if kind == "operator" and token == text:
            self.at += 1
            return True
        return False

    def name(self) -> str:
        """An identifier, quoted or not (never a reserved word)."""
        text, kind = self.take()
        if kind != "identifier":
            raise _NotSimple
        return text[1:-1].replace('""', '"') if text.startswith('"') else text


def _string(token: Tuple[str, str]) -> str:
    text, kind = token
    if kind != "string_const" or len(text) < 2 or not text.startswith("'") or not text.endswith("'"):
        raise _NotSimple
    inner = text[1:-1]
    if "'" in inner.replace("''", ""):
        raise _NotSimple
    return inner.replace("''", "'")


def _micros(text: str) -> int:
    """A timestamp string as DuckDB reads it in a UTC session, in microseconds since the epoch."""
    m = _TIME_TEXT.fullmatch(text)
    if m is None:
        raise _NotSimple
    year, month, day, hour, minute, second, fraction = m.groups()
    try:
        date = dt.date(int(year), int(month), int(day))
        clock = dt.time(int(hour or 0), int(minute or 0), int(second or 0))
    except ValueError:
        raise _NotSimple from None
    seconds = (date.toordinal() - _EPOCH_ORDINAL) * 86_400 + clock.hour * 3600 + clock.minute * 60 + clock.second
    return seconds * 1_000_000 + int((fraction or "0").ljust(6, "0"))


def _time_constant(tokens: _Tokens) -> int:
    tokens.word("timestamp", "timestamptz")
    return _micros(_string(tokens.take()))


def _parse(query: str) -> _Shape:
    tokens = _Tokens(query)
    tokens.expect("select")
    items: List[_Item] = []
    star = False
    if tokens.symbol("*"):
        star = True
    else:
        while True:
            items.append(_item(tokens))
            if not tokens.symbol(","):
                break
    tokens.expect("from")
    first = tokens.name()
    namespace, table = (None, first)
    if tokens.symbol("."):
        namespace, table = first, tokens.name()
    shape = _Shape(items, star, namespace, table)
    if tokens.word("where") is not None:
        while True:
            _condition(tokens, shape)
            if tokens.word("and") is None:
                break
    if tokens.word("group"):
        tokens.expect("by")
        while True:
            shape.groups.append(_key(tokens))
            if not tokens.symbol(","):
                break
        shape.group = shape.groups[0]
    if tokens.word("order"):
        tokens.expect("by")
        while True:
            column = _key(tokens)
            descending = tokens.word("asc", "desc") == "desc"
            shape.orders.append((column, descending))
            if not tokens.symbol(","):
                break
        shape.order = shape.orders[0]
    if tokens.word("limit"):
        text, kind = tokens.take()
        if kind != "numeric_const" or not text.isdigit() or int(text) > _INT64_MAX:
            raise _NotSimple  # DuckDB words the error for a LIMIT out of range
        shape.limit = int(text)
    tokens.symbol(";")
    if tokens.peek()[1] != "end":
        raise _NotSimple
    return shape


def _key(tokens: _Tokens) -> str:
    """A GROUP BY or ORDER BY key: a name, or "#n" for the n-th result column."""
    text, kind = tokens.peek()
    if kind == "numeric_const":
        if not text.isdigit():
            raise _NotSimple
        tokens.take()
        return f"#{int(text)}"
    return tokens.name()


# time_bucket widths this path takes (whole units below a month; DuckDB's origin for them is
# 2000-01-03 00:00 UTC, a Monday).
_UNITS = {"microsecond": 1, "millisecond": 1_000, "second": 1_000_000, "minute": 60_000_000,
          "hour": 3_600_000_000, "day": 86_400_000_000, "week": 604_800_000_000}
# Spaces, tabs and newlines only: DuckDB refuses other white space in an interval's text.
_WIDTH = re.compile(r"[ \t\n]*([0-9]{1,9})[ \t\n]+([a-z]+?)s?[ \t\n]*")
_BUCKET_ORIGIN = 946_857_600_000_000


def _width(text: str) -> int:
    m = _WIDTH.fullmatch(text.lower())
    if m is None or m.group(2) not in _UNITS or int(m.group(1)) == 0:
        raise _NotSimple
    return int(m.group(1)) * _UNITS[m.group(2)]


def _item(tokens: _Tokens) -> _Item:
    text, kind = tokens.peek()
    following = tokens.items[tokens.at + 1] if tokens.at + 1 < len(tokens.items) else ("", "end")
    if kind == "identifier" and text.lower() == "time_bucket" and following == ("(", "operator"):
        tokens.take()
        tokens.take()
        tokens.expect("interval")
        width = _width(_string(tokens.take()))
        if not tokens.symbol(","):
            raise _NotSimple
        column = tokens.name()
        if not tokens.symbol(")") or not tokens.word("as"):
            raise _NotSimple  # the two-argument form, with an alias
        return _Item("time_bucket", column, tokens.name(), width)
    if kind == "identifier" and text.lower() in _AGGREGATES and following == ("(", "operator"):
        function = text.lower()
        tokens.take()
        tokens.take()
        if tokens.symbol("*"):
            if function != "count":
                raise _NotSimple
            column = None
        else:
            column = tokens.name()
        if not tokens.symbol(")"):
            raise _NotSimple
        item = _Item(function, column, None)
    else:
        item = _Item(None, tokens.name(), None)
    if tokens.word("as"):  # an alias without AS is left to DuckDB (which words it may be)
        item.alias = tokens.name()
    return item


def _condition(tokens: _Tokens, shape: _Shape) -> None:
    column = tokens.name()
    if tokens.word("between"):
        low = _time_constant(tokens)
        tokens.expect("and")
        high = _time_constant(tokens)
        shape.times += [(column, ">=", low), (column, "<=", high)]
        return
    if tokens.word("in"):
        if not tokens.symbol("("):
            raise _NotSimple
        values = [_literal(tokens)]
        while tokens.symbol(","):
            values.append(_literal(tokens))
        if not tokens.symbol(")"):
            raise _NotSimple
        if len(set(values)) == 1:
            shape.keys.append((column, values[0]))
        else:
            shape.key_sets.append((column, values))
        return
    op, kind = tokens.take()
    if kind != "operator" or op not in ("=", "<", "<=", ">", ">=", "<>", "!="):
        raise _NotSimple
    op = "<>" if op == "!=" else op
    text, kind = tokens.peek()
    if kind == "numeric_const" or (kind == "operator" and text == "-"):
        # A number: a key's value (=) or a condition on a numeric column, told apart later.
        negative = tokens.symbol("-")
        number, kind = tokens.take()
        if kind != "numeric_const":
            raise _NotSimple
        shape.values.append((column, op, ("-" if negative else "") + number))
    elif op == "<>":
        raise _NotSimple
    elif kind == "keyword" or kind == "identifier":
        shape.times.append((column, op, _time_constant(tokens)))
    elif op == "=":
        # A key's value; or a time as a plain string, told apart once the columns are known.
        shape.keys.append((column, _literal(tokens)))
    elif kind == "string_const":
        shape.times.append((column, op, _micros(_string(tokens.take()))))
    else:
        raise _NotSimple


def _literal(tokens: _Tokens) -> Any:
    negative = tokens.symbol("-")
    text, kind = tokens.take()
    if kind == "numeric_const" and text.isdigit():
        value = int(text)
        return -value if negative else value
    if negative:
        raise _NotSimple
    return _string((text, kind))


# Query text -> its shape (None: not simple). Bounded, least recently used first out.
_SHAPES: "OrderedDict[str, Optional[_Shape]]" = OrderedDict()
_SHAPES_SIZE = 512
_SHAPES_LOCK = threading.Lock()


def _shape(query: str) -> Optional[_Shape]:
    with _SHAPES_LOCK:
        if query in _SHAPES:
            _SHAPES.move_to_end(query)
            return _SHAPES[query]
    try:
        shape: Optional[_Shape] = _parse(query)
    except _NotSimple:
        shape = None
    with _SHAPES_LOCK:
        _SHAPES[query] = shape
        if len(_SHAPES) > _SHAPES_SIZE:
            _SHAPES.popitem(last=False)
    return shape


def _column(declared: pa.Schema, written: str) -> pa.Field:
    """The declared column a name binds to (names bind ignoring case, as in DuckDB)."""
    found = [f for f in declared if _fold(f.name) == _fold(written)]
    if len(found) != 1:
        raise _NotSimple
    return found[0]


def _plain_type(t: pa.DataType) -> bool:
    """Types DuckDB gives back unchanged (so a selection's rows need no conversion)."""
    return (
        pa.types.is_boolean(t)
        or t in _INTEGER_RANGES
        or pa.types.is_float32(t)
        or pa.types.is_float64(t)
        or pa.types.is_date32(t)
        or pa.types.is_string(t)
        or pa.types.is_binary(t)
        or (pa.types.is_timestamp(t) and t.unit == "us" and t.tz in (None, "UTC"))
    )


def answer(lake: Any, query: str, namespace: str, rollups: bool = True) -> Optional[pa.Table]:
    """The statement's result if it is a simple selection the core can read, else None (the
    caller asks DuckDB)."""
    if not ENABLED:
        return None
    shape = _shape(query)
    if shape is None:
        return None
    try:
        return _answer(lake, shape, namespace, rollups and getattr(lake, "_route_rollups", True))
    except _NotSimple:
        return None


def _answer(lake: Any, shape: _Shape, namespace: str, rollups: bool) -> Optional[pa.Table]:
    ns = shape.namespace if shape.namespace is not None else namespace
    if _fold(ns) in _DUCKDB_NAMES:
        raise _NotSimple
    # Opened by name (names are case-insensitive in the core, and no two tables differ only in
    # case): on an object store one GET of the table head, not a listing of the lake.
    try:
        handle = lake._snapshot(f"{ns}.{shape.table}")
    except (KeyError, ValueError):
        raise _NotSimple from None  # unknown or not a table name: DuckDB words the error
    if spec_of(handle.properties) is not None:
        raise _NotSimple  # a rollup reads through its view (stored rows and changed pairs)
    contract = handle.contract
    time_name = contract.get("time_column")
    series_key = contract.get("series_key") or []
    if not time_name or not series_key:
        raise _NotSimple
    declared = pa.schema(SchemaCapsule(handle.schema_capsule()))
    time_field = declared.field(time_name)
    if not (pa.types.is_timestamp(time_field.type) and time_field.type.unit == "us"
            and time_field.type.tz in (None, "UTC")):
        raise _NotSimple

    # The filter: key equalities and time bounds (inclusive microseconds).
    key_equals: Dict[str, Any] = {}
    low, high = None, None
    times = list(shape.times)
    for written, value in shape.keys:
        f = _column(declared, written)
        if f.name == time_name and isinstance(value, str):
            times.append((written, "=", _micros(value)))
            continue
        _check_key_value(f, series_key, value)
        if key_equals.get(f.name, value) != value:
            raise _NotSimple  # contradicting equalities: left to DuckDB
        key_equals[f.name] = value
    key_in: Dict[str, set] = {}  # IN lists of several values: the column's value is one of them
    for written, values in shape.key_sets:
        f = _column(declared, written)
        for value in values:
            _check_key_value(f, series_key, value)
        key_in[f.name] = key_in.get(f.name, set(values)) & set(values)
    where = []  # (column, op, number, integer, is_integer) for the core
    for written, op, text in shape.values:
        f = _column(declared, written)
        integral = "." not in text
        if f.name == time_name or len(text.lstrip("-").replace(".", "")) > 15:
            raise _NotSimple
        if op == "=" and integral and f.name in series_key:
            value = int(text)
            bounds = _INTEGER_RANGES.get(f.type)
            if bounds is None or not bounds[0] <= value <= bounds[1] or key_equals.get(f.name, value) != value:
                raise _NotSimple
            key_equals[f.name] = value
        elif pa.types.is_float64(f.type):
            where.append((f.name, op, float(text), 0, False))
        elif f.type in _INTEGER_RANGES and integral:
            where.append((f.name, op, 0.0, int(text), True))
        else:
            raise _NotSimple  # float32 against a decimal, an integer against a fraction, ...
    for name in list(key_in):
        if name in key_equals:
            if key_equals[name] not in key_in[name]:
                raise _NotSimple  # contradicting conditions: left to DuckDB
            del key_in[name]
        elif not key_in[name]:
            raise _NotSimple
        elif len(key_in[name]) == 1:
            key_equals[name] = key_in.pop(name).pop()
    every_series = not key_equals and not key_in
    for written, op, micros in times:
        if _column(declared, written).name != time_name:
            raise _NotSimple
        if op in (">=", ">", "="):
            bound = micros + 1 if op == ">" else micros
            low = bound if low is None else max(low, bound)
        if op in ("<=", "<", "="):
            bound = micros - 1 if op == "<" else micros
            high = bound if high is None else min(high, bound)

    rows_wanted = shape.star or all(item.function is None for item in shape.items)
    if every_series and rows_wanted:
        # Rows of every series: a window of time (both ends given), read as one series is; a
        # whole table is DuckDB's to stream.
        if low is None or high is None or shape.group is not None:
            raise _NotSimple
    elif every_series:
        # Aggregates over every series are a scan of a few columns (scan/bucket_scan.h); value
        # conditions over them are DuckDB's. A query a rollup of the table may answer is left to
        # the routing (_route), which reads far less.
        if where or (rollups and lake._rollups.rollups_of(lake, f"{ns}.{shape.table}", max_age=5.0)):
            raise _NotSimple
        if any(item.function is None for item in shape.items):
            return _by_key(lake, handle, shape, declared, time_name, low, high)
    if len(shape.groups) > 1 or len(shape.orders) > (2 if rows_wanted else 1):
        raise _NotSimple

    # What to read and give back.
    if shape.star:
        outputs = [(f.name, f, None) for f in declared]
    else:
        outputs = []
        aggregates = {item.function is not None for item in shape.items}
        if len(aggregates) != 1:
            raise _NotSimple  # columns beside aggregates need a GROUP BY
        for item in shape.items:
            f = _column(declared, item.column) if item.column is not None else None
            if item.function is None:
                outputs.append((item.alias or f.name, f, None))
            else:
                if item.alias is None:
                    raise _NotSimple  # DuckDB's own names for it depend on its keyword list
                outputs.append((item.alias, f, item.function))
    if len({name.lower() for name, _, _ in outputs}) != len(outputs):
        raise _NotSimple
    aggregate = any(function is not None for _, _, function in outputs)
    if every_series and aggregate and shape.group is None:
        # Aggregates of every row without a GROUP BY: DuckDB is faster at them (it takes counts
        # from the files' metadata, and there is no grouping to save).
        raise _NotSimple
    buckets = [i for i, item in enumerate(shape.items) if item.function == "time_bucket"]
    if buckets or shape.group is not None:
        # GROUP BY the one time_bucket: named by its position or its alias (an alias that is
        # also a column's name would bind differently in GROUP BY and ORDER BY: left to DuckDB).
        if len(buckets) != 1 or shape.group is None:
            raise _NotSimple
        position = buckets[0]
        bucket = shape.items[position]
        if _column(declared, bucket.column).name != time_name:
            raise _NotSimple
        if any(_fold(f.name) == _fold(bucket.alias) for f in declared):
            raise _NotSimple

        def names_bucket(key: str) -> bool:
            return key == f"#{position + 1}" or (not key.startswith("#") and _fold(key) == _fold(bucket.alias))

        if not names_bucket(shape.group):
            raise _NotSimple
        if shape.order is not None and not names_bucket(shape.order[0]):
            raise _NotSimple
    elif aggregate and (shape.order is not None or shape.limit is not None):
        raise _NotSimple
    elif shape.order is not None and shape.order[0].startswith("#"):
        raise _NotSimple
    if shape.order is not None and not buckets:
        # ORDER BY binds to a result column of that name first (an alias may be called "time").
        for name, f, _ in outputs:
            if _fold(name) == _fold(shape.order[0]) and (f is None or f.name != time_name):
                raise _NotSimple
        if _column(declared, shape.order[0]).name != time_name:
            raise _NotSimple
    then_by = None
    if len(shape.orders) == 2:
        # ORDER BY time, <column>: rows of equal time by a column of text or integers given back
        # under its own name (an alias named like another column would bind differently).
        key, descending = shape.orders[1]
        if key.startswith("#"):
            raise _NotSimple
        f = _column(declared, key)
        named = [(name, g) for name, g, _ in outputs if _fold(name) == _fold(key)]
        if len(named) != 1 or named[0][1] is None or named[0][1].name != f.name or f.name == time_name:
            raise _NotSimple
        if not (pa.types.is_string(f.type) or f.type in _INTEGER_RANGES):
            raise _NotSimple
        then_by = (f.name, descending)
    for _, f, function in outputs:
        if function == "time_bucket":
            continue
        if f is not None and not _plain_type(f.type):
            raise _NotSimple
        if function in ("avg",) and not (f.type in (pa.int8(), pa.int16(), pa.int32())
                                         or pa.types.is_floating(f.type)):
            raise _NotSimple
        if function == "sum" and not pa.types.is_float64(f.type):
            raise _NotSimple
        if function in ("min", "max") and not (f.type in _INTEGER_RANGES or pa.types.is_floating(f.type)
                                               or pa.types.is_timestamp(f.type) or pa.types.is_date32(f.type)):
            raise _NotSimple
    columns = []
    for _, f, function in outputs:
        if f is not None and f.name not in columns and function != "time_bucket":
            columns.append(f.name)
    if time_name not in columns:  # for ORDER BY, and so that count(*) has a column to count
        columns.append(time_name)
    for name, _, _, _, _ in where:  # the conditions' columns are read too
        if name not in columns:
            columns.append(name)

    plan = handle.scan(min_time=low, max_time=high, key_equals=key_equals)
    order = "file" if shape.order is None else ("desc" if shape.order[1] else "asc")
    widths = {item.alias: item.width for item in shape.items if item.function == "time_bucket"}
    folds = [
        (function, f.name if f is not None else "", name, widths.get(name, 0) if function == "time_bucket" else 0,
         _BUCKET_ORIGIN)
        for name, f, function in outputs
    ] if aggregate else []
    rows = _read(lake, plan, columns, folds, shape.limit, [], order=order, where=where,
                 key_in={name: sorted(values) for name, values in key_in.items()}, then_by=then_by)
    if aggregate:
        return rows
    fields = [pa.field(name, f.type) for name, f, _ in outputs]
    return pa.Table.from_arrays([rows.column(f.name) for _, f, _ in outputs], schema=pa.schema(fields))


def _check_key_value(f: pa.Field, series_key: List[str], value: Any) -> None:
    """A series-key column compared with a value of its kind (text with text, an integer within
    the column's range): else left to DuckDB, which converts or words the error."""
    if f.name not in series_key or isinstance(value, str) != pa.types.is_string(f.type):
        raise _NotSimple
    if isinstance(value, int):
        bounds = _INTEGER_RANGES.get(f.type)
        if bounds is None or not bounds[0] <= value <= bounds[1]:
            raise _NotSimple


def _by_key(lake: Any, handle: Any, shape: _Shape, declared: pa.Schema, time_name: str, low: Optional[int],
            high: Optional[int]) -> pa.Table:
    """Aggregates of every series grouped by one column (and a time bucket):
    `SELECT [time_bucket(...) AS b,] device_id, max(temp) AS hi FROM t [WHERE <time>] GROUP BY ...
    [ORDER BY <grouped columns> [ASC | DESC], ...] [LIMIT n]`, scanned by the core."""
    plain = [i for i, item in enumerate(shape.items) if item.function is None]
    buckets = [i for i, item in enumerate(shape.items) if item.function == "time_bucket"]
    if len(plain) != 1 or len(buckets) > 1 or not shape.groups:
        raise _NotSimple
    key_item = shape.items[plain[0]]
    key_field = _column(declared, key_item.column)
    if key_item.alias is None and key_item.column != key_field.name:
        raise _NotSimple  # DuckDB names the column as written
    if not (pa.types.is_string(key_field.type) or pa.types.is_binary(key_field.type)
            or key_field.type in _INTEGER_RANGES) or key_field.name == time_name:
        raise _NotSimple
    names = {}  # result position -> the names a GROUP BY or ORDER BY may use for it
    for i, item in enumerate(shape.items):
        if item.function is not None and item.function != "time_bucket" and item.alias is None:
            raise _NotSimple  # DuckDB's own names for it depend on its keyword list
        if item.alias is not None and any(_fold(f.name) == _fold(item.alias) and (i not in plain or f.name != key_field.name)
                                          for f in declared):
            # An alias that is a column's name binds differently in GROUP BY (the column) and
            # ORDER BY (the alias): left to DuckDB (only the grouped column may keep its own name).
            raise _NotSimple
        if i in plain:
            names[i] = {_fold(key_item.alias or key_field.name), _fold(key_field.name)}
        elif i in buckets:
            if _column(declared, item.column).name != time_name:
                raise _NotSimple
            names[i] = {_fold(item.alias)}

    def position(key: str) -> int:
        if key.startswith("#"):
            at = int(key[1:]) - 1
            if at in names:
                return at
            raise _NotSimple
        found = [i for i, known in names.items() if _fold(key) in known]
        if len(found) != 1:
            raise _NotSimple
        return found[0]

    if sorted(position(key) for key in shape.groups) != sorted(names):
        raise _NotSimple  # GROUP BY exactly the bucket and the column
    sort = [(position(key), descending) for key, descending in shape.orders]
    outputs = []
    for i, item in enumerate(shape.items):
        f = _column(declared, item.column) if item.column is not None else None
        if i in plain:
            outputs.append(("group", f.name, item.alias or f.name, 0))
            continue
        if item.function == "time_bucket":
            outputs.append(("time_bucket", time_name, item.alias, item.width))
            continue
        if f is not None and not _plain_type(f.type):
            raise _NotSimple
        if item.function == "avg" and not (f.type in (pa.int8(), pa.int16(), pa.int32()) or pa.types.is_floating(f.type)):
            raise _NotSimple
        if item.function == "sum" and not pa.types.is_float64(f.type):
            raise _NotSimple
        if item.function in ("min", "max") and not (f.type in _INTEGER_RANGES or pa.types.is_floating(f.type)
                                                    or pa.types.is_timestamp(f.type) or pa.types.is_date32(f.type)):
            raise _NotSimple
        outputs.append((item.function, f.name if f is not None else "", item.alias, 0))
    if len({_fold(name) for _, _, name, _ in outputs}) != len(outputs):
        raise _NotSimple
    plan = handle.scan(min_time=low, max_time=high, key_equals={})
    folds = [(function, column, name, width, _BUCKET_ORIGIN) for function, column, name, width in outputs]
    return _read(lake, plan, [time_name], folds, shape.limit, sort)


def _read(lake: Any, plan: Any, columns: List[str], folds: list, limit: Optional[int], sort: list,
          order: str = "file", where: Optional[list] = None, key_in: Optional[dict] = None,
          then_by: Optional[Tuple[str, bool]] = None) -> pa.Table:
    """The core's answer for a plan (the files copied locally first on an object store)."""
    pin = None
    paths: List[str] = []
    if lake._core.cache_directory is not None:
        paths, pin = lake._core.local_copies(plan)
    try:
        got = _core.read_selection(plan, paths, columns, order=order, limit=limit, aggregates=folds,
                                   where=where or [], sort=sort, key_in=key_in or {}, then_by=then_by)
    finally:
        if pin is not None:
            pin.release()
    if got is None:
        raise _NotSimple
    global ANSWERED, LAST_READ
    ANSWERED += 1
    LAST_READ = got[1]
    return read_stream(got[0])
