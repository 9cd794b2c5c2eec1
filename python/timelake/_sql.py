"""SQL over a lake: one user statement, checked, planned through the catalog, run in DuckDB.

Every table a query names becomes a DuckDB view over exactly the Parquet files of the table's
latest snapshot (taken when the call starts), as the core's typed scan plan lists them
(_catalog, rendered by _render); when the statement's WHERE bounds the time column or fixes
series keys, the plan lists only the files that can match (see _sql_filter for when that is
safe); tables read at an older version go through _travel. Results are cast back to the declared
Arrow types where the plan says the files hold another type (_types).

Confinement (_confine): each catalog is its own locked DuckDB database that reads only the lake's
data files. A user statement runs only as `SELECT * FROM query(?)` with its text as a parameter,
so DuckDB itself refuses anything but one SELECT: nothing the user writes can create, replace,
copy, attach, export or set anything. The statement-type check before it only gives a friendlier
error.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any, Dict, Tuple

import duckdb
import pyarrow as pa

from . import _gapfill, _rollup, _route, _select, _tree
from ._capsules import SchemaCapsule, read_stream
from ._catalog import Catalog, Reconnected, names_table, pruning_conjuncts, referenced_tables
from ._sql_text import message, quote
from ._travel import as_of_spec, rewrite_travels, travel_views
from ._types import restore_declared, restore_result

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


def _parse_tree(con: duckdb.DuckDBPyConnection, select: str) -> str:
    """DuckDB's parse tree of the SELECT (json_serialize_sql), as JSON text."""
    try:
        return con.execute("SELECT json_serialize_sql(?)", [select]).fetchall()[0][0]
    except duckdb.Error as e:
        raise RuntimeError(f"SQL syntax error: {e}") from None


# Query text -> (prefix, select, parse tree as JSON text) of statements that passed
# _read_statement, for every catalog of the process: parsing depends on the text alone (DuckDB's
# parser, no catalog), and dashboards send the same texts again and again. The tree is kept as
# text and read anew per statement, since time travel edits the tree it is given. Bounded; the
# least recently used go first.
_STATEMENTS: "OrderedDict[str, Tuple[str, str, str]]" = OrderedDict()
_STATEMENTS_SIZE = 512
_STATEMENTS_LOCK = threading.Lock()


def _statement(con: duckdb.DuckDBPyConnection, query: str) -> Tuple[str, str, Dict[str, Any]]:
    """(prefix, select, tree): _read_statement and _parse_tree, remembered per query text."""
    with _STATEMENTS_LOCK:
        known = _STATEMENTS.get(query)
        if known is not None:
            _STATEMENTS.move_to_end(query)
    if known is None:
        prefix, select = _read_statement(con, query)
        known = (prefix, select, _parse_tree(con, select))
        with _STATEMENTS_LOCK:
            _STATEMENTS[query] = known
            if len(_STATEMENTS) > _STATEMENTS_SIZE:
                _STATEMENTS.popitem(last=False)
    prefix, select, tree = known
    return prefix, select, _tree.loads(tree)


def _execute(catalog: Catalog, namespace: str, prefix: str, select: str) -> pa.Table:
    try:
        return _interruptible(catalog.con, lambda: catalog.con.sql(prefix + "SELECT * FROM query(?)", params=[select]).to_arrow_table())
    except duckdb.CatalogException as e:
        if "Table with name" in str(e):
            raise KeyError(f"{message(e)} (lake {catalog.lake.location}, namespace {namespace!r})") from None
        raise RuntimeError(f"query failed: {message(e)}") from None
    except duckdb.Error as e:
        raise RuntimeError(f"query failed: {message(e)}") from None
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


def _add_table(lake: Any, catalog: Catalog, ns: str, name: str, conjuncts: Any) -> pa.Schema:
    """Makes `ns.name` current in the catalog: a table's view, or a rollup's (_rollup.add_view)."""
    handle = lake._snapshot(f"{ns}.{name}")
    spec = _rollup.spec_of(handle.properties)
    if spec is not None:
        return _rollup.add_view(catalog, ns, name, handle, spec)
    return catalog.add_table(ns, name, conjuncts, handle)[1]


def run_sql(lake: Any, query: str, namespace: str = "default", as_of: Any = None, rollups: bool = True) -> pa.Table:
    _check_query(query)
    _check_namespace(namespace)
    wanted = as_of_spec(as_of)
    if wanted is None:
        # CREATE / REFRESH / DROP MATERIALIZED ROLLUP (_rollup): the only statements that write.
        done = _rollup.run_statement(lake, query, namespace, _statement)
        if done is not None:
            return done
    if wanted is None:
        # One series over a time range: read by the core, no DuckDB (see _select).
        answered = _select.answer(lake, query, namespace, rollups)
        if answered is not None:
            return answered
    catalog = lake._catalog()
    prefix, select, tree = _statement(catalog.con, query)
    tables = referenced_tables(lake, tree, namespace)
    travels = travel_views(catalog.con, tree, tables, namespace, wanted)
    if wanted is not None and "version" in wanted and len({(ns, name) for ns, name, _, _ in travels}) > 1:
        raise ValueError(
            "as_of=<version> is ambiguous for a query over several tables (each has its own versions): "
            "write AT (VERSION => n) after each table, or pass a datetime"
        )
    current = tables
    if travels:
        select = rewrite_travels(catalog.con, select, tree)
        traveled = {(ns, name) for ns, name, _, _ in travels}
        current = [t for t in tables if t not in traveled or names_table(tree, t, namespace)]
    conjuncts = pruning_conjuncts(tree, current, namespace) if not travels else None
    # Gap filling (time_bucket_gapfill, locf, interpolate) becomes plain DuckDB SQL (_gapfill);
    # _route never routes such a statement (its tree still names them), so it reads the raw data.
    select, conjuncts = _gapfill.rewrite(catalog.con, select, conjuncts)
    routed = None
    try:
        try:
            # A table whose files need admitting restarts the preparation on a new connection;
            # the second pass admits nothing new.
            for attempt in range(len(tables) + len(travels) + 3):
                try:
                    catalog.begin(namespace)
                    if rollups and wanted is None and not travels:
                        # A GROUP BY time_bucket(...) a rollup can answer reads it (_route).
                        routed = _route.route(lake, catalog, select, tree, namespace, tables)
                    if routed is not None:
                        declared = pa.schema(SchemaCapsule(lake._snapshot(f"{tables[0][0]}.{tables[0][1]}").schema_capsule()))
                        catalog._note_types(declared, {})
                        schemas = [declared]
                        break
                    schemas = [_add_table(lake, catalog, ns, name, conjuncts) for ns, name in current]
                    schemas += [catalog.add_travel(ns, name, view, spec) for ns, name, view, spec in travels]
                    break
                except Reconnected:
                    continue
            catalog.use_fast_time_bucket(schemas)
        except duckdb.Error as e:
            raise RuntimeError(f"could not prepare the lake's tables for the query: {e}") from None
        result = _execute(catalog, namespace, prefix, routed if routed is not None else select)
    finally:
        catalog.end()  # the result is read: the copies it came from may be evicted
    return restore_result(result, catalog.declared, catalog.restored)


def run_latest(lake: Any, name: str) -> pa.Table:
    """The newest row per series, from the core's last-value index, in the declared types."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"invalid table name {name!r}: {e.reason}") from None
    handle = lake._snapshot(name)
    # What the handle's version declares (its schema, whether it is a rollup), converted once per
    # version: a warm latest() is a few dozen microseconds, and these conversions were a third.
    version = handle.version
    known = lake._declared.get(handle.name)
    if known is None or known[0] is not handle or known[1] != version:
        known = (handle, version, _rollup.spec_of(handle.properties),
                 pa.schema(SchemaCapsule(handle.schema_capsule())))
        lake._declared[handle.name] = known
    _, _, spec, declared = known
    if spec is not None:
        # A rollup's newest bucket per group, as a query on it reads them (stored rows, and the
        # pairs changed since its refresh from the raw rows).
        ns, table = handle.name.split(".", 1)
        partition = f"PARTITION BY {', '.join(quote(g) for g in spec.groups)} " if spec.groups else ""
        return run_sql(lake, f"SELECT * FROM {quote(ns)}.{quote(table)} QUALIFY row_number() OVER "
                             f"({partition}ORDER BY {quote(spec.bucket)} DESC) = 1", ns)
    try:
        rows = read_stream(handle.latest())
        selected = rows.select(declared.names)
        if selected.schema.equals(declared, check_metadata=True):
            return selected  # stored as declared (the usual case): nothing to restore, per column
        columns = [restore_declared(rows.column(field.name), field.type) for field in declared]
        schema = pa.schema(
            [field.with_type(column.type) for field, column in zip(declared, columns)], declared.metadata
        )
        return pa.Table.from_arrays(columns, schema=schema)
    except (pa.ArrowException, UnicodeError) as e:
        raise RuntimeError(f"latest({name!r}): the last-value index could not be read as the declared schema: {e}") from None
