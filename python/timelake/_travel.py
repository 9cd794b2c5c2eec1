"""Time travel: the tables of a statement read at an older version.

`sql(as_of=...)` and `AT (VERSION => n)` / `AT (TIMESTAMP => t)` after a table name become scan
arguments of Table::ScanAsOf (a version, or an instant in milliseconds); every reference that reads
an older version is rewritten, in the statement's parse tree, into a reference to a view of that
version, which the catalog makes (_catalog.Catalog.add_travel).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Dict, List, Optional, Tuple

import duckdb

from . import _tree
from ._sql_text import message, quote


def as_of_spec(as_of: Any) -> Optional[Dict[str, int]]:
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
        raise ValueError(f"{table} AT ({unit} => ...): the value could not be computed: {message(e)}") from None
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


def travel_views(con: duckdb.DuckDBPyConnection, tree: Dict[str, Any], tables: List[Tuple[str, str]],
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
                # Where the reference stood in the text (bytes), for rewrite_travels.
                node["timelake_travel_text"] = f"{quote(ns)}.{quote(view)} AS {quote(node['alias'])}"
                node.update(schema_name=ns, table_name=view, at_clause=None,
                            qualified_name={"path": [ns, view]})
                out.append((ns, name, view, spec))
            continue
        stack.extend((value, ctes) for value in reversed(list(node.values())))
    return out


def rewrite_travels(con: duckdb.DuckDBPyConnection, select: str, tree: Dict[str, Any]) -> str:
    """The SELECT with its time-travel references rewritten (travel_views marked them in `tree`).

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
