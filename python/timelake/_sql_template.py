"""SQL built from templates of timelake's own text with the user's parse trees put into them.

The gapfill rewrite (_gapfill) writes the SQL it needs as text, in which `@x` stands for a user
expression and `(SELECT 1 AS <name>)` for a user SELECT; DuckDB parses that text
(json_serialize_sql), `fill` puts copies of the user's parse trees in the placeholders' place, and
DuckDB renders the result back to SQL (json_deserialize_sql). So no user text is ever pasted into
SQL text: names, strings and expressions stay what the parser made of them.
"""

from __future__ import annotations

import re
from typing import Any, Dict

import duckdb

from . import _tree
from ._sql_text import message

_PLACEHOLDER = re.compile(r"@(\w+)")


def strip(node: Any) -> Any:
    """A copy without positions and aliases, for comparing expressions."""
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k not in ("query_location", "query_location_length", "alias")}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def copy(node: Any) -> Any:
    """A deep copy of a parse tree (also one nested deeper than Python's recursion limit)."""
    return _tree.loads(_tree.dumps(node))


def parse_node(con: duckdb.DuckDBPyConnection, sql: str) -> Dict[str, Any]:
    """The SELECT node of timelake's own SQL text; `@x` in it is placeholder x (see fill)."""
    sql = _PLACEHOLDER.sub(r"__tl_at_\1", sql)
    tree = _tree.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
    if tree.get("error"):  # pragma: no cover - timelake's own template
        raise RuntimeError(f"timelake built SQL DuckDB cannot parse: {tree.get('error_message')}")
    return tree["statements"][0]["node"]


def parse_expression(con: duckdb.DuckDBPyConnection, sql: str) -> Dict[str, Any]:
    """The parse tree of one expression of timelake's own text."""
    return parse_node(con, f"SELECT {sql}")["select_list"][0]


def expression(con: duckdb.DuckDBPyConnection, sql: str, env: Dict[str, Any]) -> Dict[str, Any]:
    """The parse tree of a template expression with its placeholders filled from `env`."""
    node = parse_node(con, "SELECT " + sql)
    fill(node, env, {})
    return node["select_list"][0]


def fill(tree: Any, env: Dict[str, Any], subqueries: Dict[str, Any]) -> None:
    """Puts the user's expressions (`@x` in a template, parsed as column __tl_at_x) and SELECT
    nodes (`SELECT 1 AS <name>` in a template) into a parsed template. The template's own nodes
    are collected first, so nothing inside a copied user expression is ever taken for one."""
    expr_nodes, subquery_nodes = [], []
    for node in _tree.nodes(tree):
        if not isinstance(node, dict):
            continue
        if node.get("class") == "COLUMN_REF" and len(node.get("column_names", [])) == 1 and str(
                node["column_names"][0]).startswith("__tl_at_"):
            expr_nodes.append(node)
        elif node.get("type") == "SELECT_NODE":
            items = node.get("select_list") or []
            if len(items) == 1 and items[0].get("alias") in subqueries:
                subquery_nodes.append(node)
    for node in expr_nodes:
        name = node["column_names"][0][len("__tl_at_"):]
        value = copy(env[name])
        value["alias"] = node.get("alias") or ""  # the template's AS, if any
        node.clear()
        node.update(value)
    for node in subquery_nodes:
        value = subqueries[node["select_list"][0]["alias"]]
        node.clear()
        node.update(copy(value))


def render(con: duckdb.DuckDBPyConnection, expr: Dict[str, Any]) -> str:
    """DuckDB's text of an expression (what it names an unaliased result column)."""
    node = parse_node(con, "SELECT 1")
    item = copy(expr)
    item["alias"] = ""
    node["select_list"] = [item]
    tree = {"error": False, "statements": [{"node": node, "named_param_map": []}]}
    try:
        text = con.execute("SELECT json_deserialize_sql(?::JSON)", [_tree.dumps(tree)]).fetchall()[0][0]
    except duckdb.Error as e:
        raise ValueError(f"an expression nests too deeply to render: {message(e)}") from None
    return text[len("SELECT "):] if text.startswith("SELECT ") else text
