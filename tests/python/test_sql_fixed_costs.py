"""What a query costs besides reading data: nothing a Lake pays only once should be paid per call,
and nothing shared between calls or Lakes may change an answer.

* latest() and sql() never import pandas (pyarrow's `pa.table(...)` and `pa.array(...)` ask whether
  their argument is a DataFrame, which imports pandas, ~0.3 s, on first use);
* a query text is parsed once per process, and a time constant's bounds are asked of DuckDB once
  per process; both are kept by text, so the answers are those of a fresh parse;
* each catalog's DuckDB database is made ahead of need on a background thread (a spare), which
  must never outlive its process's exit in a way that aborts it, and never cross a fork.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import timelake
from timelake import _confine, _select, _sql, _sql_filter

from helpers import IOT_SCHEMA, T0, iot_table, sorted_rows

pytestmark = pytest.mark.local_only


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_latest_and_sql_never_import_pandas(tmp_path):
    # The process that writes builds its rows with pa.Table.from_pylist, which itself imports
    # pandas; the one that reads (a dashboard's first query) starts fresh and only reads.
    pytest.importorskip("pandas")  # installed with the dev tools: the check below means something
    lake = timelake.Lake(str(tmp_path / "lake"))
    lake.create_table("iot.readings", IOT_SCHEMA, series_key=["device_id"]).append(iot_table([(T0, "a", 1.0)]))
    done = _run(f"""
        import sys
        import timelake
        assert "pandas" not in sys.modules, "importing timelake imported pandas"
        lake = timelake.Lake({str(tmp_path / 'lake')!r})
        assert lake.latest("iot.readings").num_rows == 1
        assert "pandas" not in sys.modules, "latest() imported pandas"
        got = lake.sql("SELECT device_id, temp FROM iot.readings WHERE time >= TIMESTAMP '2024-03-05'")
        assert got.to_pylist() == [{{"device_id": "a", "temp": 1.0}}], got.to_pylist()
        assert "pandas" not in sys.modules, "sql() imported pandas"
        print("ok")
    """, tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_query_text_is_parsed_once_and_each_statement_gets_its_own_tree(lake, readings):
    # Time travel edits the parse tree it is given: a tree shared between two statements of the
    # same text would make the second one read the first one's edits.
    readings.append(iot_table([(T0, "a", 1.0)]))
    readings.append(iot_table([(T0 + dt.timedelta(hours=1), "a", 2.0)]))
    query = "SELECT count(*) AS n FROM readings AT (VERSION => 1) WHERE time >= TIMESTAMP '2024-03-05'"
    parsed = []
    real = _sql._parse_tree

    def counting(con, select):
        parsed.append(select)
        return real(con, select)

    _sql._STATEMENTS.clear()
    _sql._parse_tree = counting
    _select.ENABLED = False  # the second text is DuckDB's too (else the core's scan answers it unparsed)
    try:
        for _ in range(3):
            assert lake.sql(query).to_pylist() == [{"n": 1}]
            assert lake.sql(query.replace("AT (VERSION => 1) ", "")).to_pylist() == [{"n": 2}]
    finally:
        _sql._parse_tree = real
        _select.ENABLED = True
    assert len(parsed) == 2, parsed  # one parse per text, however often it runs
    first = _sql._statement(lake._catalog().con, query)[2]
    second = _sql._statement(lake._catalog().con, query)[2]
    assert first == second and first is not second


def test_time_bounds_are_asked_of_duckdb_once_per_constant_and_prune_as_before(lake, readings):
    for day in range(4):
        readings.append(iot_table([(T0 + dt.timedelta(days=day, hours=h), d, float(day * 100 + h))
                                   for h in (0, 12) for d in ("a", "b")]))
    asked = []
    real = _sql_filter._ask_time_bounds

    def counting(con, constant, op, duck):
        asked.append((constant, op, duck))
        return real(con, constant, op, duck)

    _sql_filter._BOUNDS_MEMO.clear()
    _sql_filter._ask_time_bounds = counting
    _select.ENABLED = False  # the statement is a one-series one: DuckDB's path is the subject here
    try:
        where = ("time >= TIMESTAMPTZ '2024-03-06 00:00:00+00' AND time < '2024-03-07T12:00:00Z' "
                 "AND device_id = 'a'")
        for _ in range(3):
            got = lake.sql(f"SELECT * FROM readings WHERE {where}")
            assert lake._catalog()._views["default.readings"].files == 2  # pruned to two days
            reference = lake.sql(f"SELECT * FROM (SELECT * FROM readings) WHERE {where}")
            assert sorted_rows(got) == sorted_rows(reference) and got.num_rows == 3
    finally:
        _sql_filter._ask_time_bounds = real
        _select.ENABLED = True
    assert len(asked) == 2, asked  # the two time constants, each asked once


@pytest.mark.parametrize("constant,op,expected", [
    ("'2024-03-06 00:00:00'", ">=", (1709683200000000, None)),
    ("'2024-03-06 00:00:00'", ">", (1709683200000001, None)),
    ("CAST('2024-03-06' AS DATE)", "<", (None, 1709683199999999)),
    ("'2024-03-06 00:00:00.5'", "=", (1709683200500000, 1709683200500000)),
    ("'not a time'", ">=", None),
    ("'infinity'", "<=", None),  # DuckDB's infinity is no instant to prune by
    ("'now'", ">=", None),  # no clock is read: the bounds of a text may be kept process-wide
    ("'today'", "<", None),
])
def test_one_query_finds_the_bounds_the_comparison_implies(lake, constant, op, expected):
    # The bounds checked against DuckDB's own comparison at the bound and one microsecond either
    # side, now asked in one query: the same answers as before, including "none" for constants
    # that do not cast or do not compare as an instant.
    got = _sql_filter._ask_time_bounds(lake._catalog().con, constant, op, "TIMESTAMPTZ")
    assert got == expected


def test_a_process_that_exits_while_a_spare_database_is_made_exits_cleanly(tmp_path):
    # The spare is made on a thread started by the import; a daemon thread stopped inside
    # duckdb.connect at exit aborted the interpreter ("terminate called ... exception not
    # rethrown") on most runs.
    for code in ("import timelake", f"import timelake; timelake.Lake({str(tmp_path / 'lake')!r})") * 3:
        done = _run(code, tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "terminate" not in done.stderr, done.stderr[-2000:]


def _wait_for_spare(timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with _confine._SPARES._lock:
            if _confine._SPARES._ready:
                return _confine._SPARES._ready[-1]
        time.sleep(0.01)
    raise AssertionError("no spare database was made in time")


def test_a_new_lake_takes_the_spare_made_in_the_background(lake, readings):
    readings.append(iot_table([(T0, "a", 1.0)]))
    lake.sql("SELECT 1")
    spare = _wait_for_spare()
    other = timelake.Lake(lake.location)
    assert other.sql("SELECT count(*) AS n FROM readings").to_pylist() == [{"n": 1}]
    assert other._catalog().con is spare
    # It was locked down like any other: no file outside the lake's data folders is readable.
    with pytest.raises(RuntimeError, match="(?i)permission|not allowed|disabled"):
        other.sql(f"SELECT * FROM read_text({str(__file__)!r})")


def _expect_child_to_succeed(pid: int) -> None:
    """Waits (at most a minute) for a forked child that reports through its exit status."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    pytest.fail("the forked child hung")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX-only")
def test_a_forked_child_never_uses_a_spare_made_by_its_parent(lake_path):
    lake = timelake.Lake(str(lake_path))
    table = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    table.append(iot_table([(T0, "a", 1.0)]))
    lake.sql("SELECT 1")
    parents = _wait_for_spare()
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        ok = False
        try:
            child = timelake.Lake(str(lake_path))
            ok = (child.sql("SELECT count(*) AS n FROM readings").to_pylist() == [{"n": 1}]
                  and child._catalog().con is not parents)
        finally:
            os._exit(0 if ok else 1)
    _expect_child_to_succeed(pid)
    # The parent still has its spare.
    assert _wait_for_spare() is parents


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX-only")
def test_a_forked_child_never_closes_its_parents_databases(lake_path):
    # A Lake the parent dropped but did not yet collect (it sits in a reference cycle) holds a
    # DuckDB database whose worker threads do not exist in a child: the child's garbage
    # collector must not close it (that crashed or hung the child), nor may dropping a parent's
    # Lake in the child.
    import gc

    gc.disable()
    try:
        for i in range(3):
            lake = timelake.Lake(str(lake_path))
            if i == 0:
                lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"]).append(iot_table([(T0, "a", 1.0)]))
            lake.sql("SELECT count(*) AS n FROM readings")
            cycle = [lake]
            cycle.append(cycle)  # garbage once dropped, freed only by the collector
            del cycle, lake
        kept = timelake.Lake(str(lake_path))
        kept.sql("SELECT count(*) AS n FROM readings")
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                del kept  # the parent's Lake, its last reference gone in the child
                gc.enable()
                gc.collect()
                child = timelake.Lake(str(lake_path))
                ok = child.sql("SELECT count(*) AS n FROM readings").to_pylist() == [{"n": 1}]
            finally:
                os._exit(0 if ok else 1)
    finally:
        gc.enable()
    _expect_child_to_succeed(pid)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX-only")
def test_forking_right_after_the_import_never_hangs_the_child(lake_path):
    # The import starts a thread that initialises the core and makes a spare DuckDB database; a
    # fork at that moment waits for it (before-fork hook), so the child never inherits either
    # half made. Each attempt forks at a different instant of that thread's work.
    lake = timelake.Lake(str(lake_path))
    lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"]).append(iot_table([(T0, "a", 1.0)]))
    script = (
        "import os, sys, time, timelake\n"
        "time.sleep(float(sys.argv[2]))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    ok = timelake.Lake(sys.argv[1]).sql('SELECT count(*) AS n FROM readings').to_pylist() == [{'n': 1}]\n"
        "    os._exit(0 if ok else 1)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n"
    )
    for delay in ("0", "0.002", "0.005", "0.01", "0.02"):
        done = subprocess.run([sys.executable, "-c", script, str(lake_path), delay], timeout=120,
                              capture_output=True, text=True)
        assert done.returncode == 0, (delay, done.stderr[-2000:])


def test_taking_while_a_spare_is_made_waits_for_it_rather_than_making_a_second(monkeypatch):
    # Two databases made at once on two cores each take nearly as long as both in a row: a
    # query arriving while the spare is being made waits for it.
    spares = _confine._Spares()
    made = []
    real = _confine.duckdb.connect

    def slow_connect(*args, **kwargs):
        time.sleep(0.3)
        con = real(*args, **kwargs)
        made.append((con, threading.current_thread().name))
        return con

    monkeypatch.setattr(_confine.duckdb, "connect", slow_connect)
    spares.fill()
    con = spares.take()
    # The one the background thread was making, not one of the caller's own.
    assert [thread for c, thread in made if c is con] == ["timelake-duckdb-spare"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(made) < 2:
        time.sleep(0.01)
    time.sleep(0.1)
    assert [thread for _, thread in made] == ["timelake-duckdb-spare"] * 2  # the next spare followed
    assert spares._ready == [made[1][0]]
