"""A handle used from inside its own append's input stream raises instead of hanging, and Ctrl-C
(SIGINT) stops long appends and maintenance with KeyboardInterrupt, leaving no partial commit.

The Ctrl-C tests run the work in a child Python process and send it a real SIGINT.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pytest

from helpers import IOT_SCHEMA, T0, commit_versions, count_rows, data_files, iot_series, iot_table, log_actions, table_dir

BUSY = r"table handle 'default.readings' is busy with append\(\) on this thread"


def _run_bounded(fn, seconds=30):
    """Runs fn() in a daemon thread; fails (instead of hanging the suite) if it does not return."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"did not return within {seconds}s (deadlock)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _reentering_stream(call, seen):
    """A reader of two batches that runs `call()` between them and records what it raised."""
    batch = iot_table(iot_series(T0, 2)).to_batches()[0]

    def gen():
        yield batch
        try:
            seen["value"] = call()
        except Exception as e:  # noqa: BLE001 - recorded for the test
            seen["error"] = e
        yield batch

    return pa.RecordBatchReader.from_batches(batch.schema, gen())


@pytest.mark.parametrize(
    "what",
    ["info", "append", "maintain", "refresh"],
)
def test_same_handle_called_from_its_append_stream_raises_runtime_error(readings, what):
    batch = iot_table(iot_series(T0, 1))
    calls = {
        "info": lambda: readings.info(),
        "append": lambda: readings.append(batch),
        "maintain": lambda: readings.maintain(),
        "refresh": lambda: readings.refresh(),
    }
    seen = {}
    result = _run_bounded(lambda: readings.append(_reentering_stream(calls[what], seen)))
    assert result["rows"] == 12  # the outer append goes on
    error = seen.get("error")
    assert type(error) is RuntimeError, seen
    assert f"{what}()" in str(error)
    assert re.search(BUSY, str(error)), str(error)
    assert "lake.table('default.readings')" in str(error)


def test_error_raised_by_the_reentrant_call_propagates_when_the_stream_does_not_catch_it(readings):
    batch = iot_table(iot_series(T0, 1)).to_batches()[0]

    def gen():
        yield batch
        readings.info()  # raises RuntimeError: not caught by the generator
        yield batch

    with pytest.raises(RuntimeError, match=BUSY):
        _run_bounded(lambda: readings.append(pa.RecordBatchReader.from_batches(batch.schema, gen())))
    assert readings.version == 0
    assert data_files(table_dir(readings)) == []


def test_version_and_other_handles_work_from_inside_the_append_stream(lake, readings):
    batch = iot_table(iot_series(T0, 1))
    second = lake.table("readings")
    seen = {}

    def call():
        return readings.version, repr(readings), second.append(batch)["version"], lake.latest(readings).num_rows

    _run_bounded(lambda: readings.append(_reentering_stream(call, seen)))
    assert "error" not in seen, seen
    version, text, second_version, latest_rows = seen["value"]
    assert version == 0 and "version=0" in text
    assert second_version == 1
    assert latest_rows == 3
    assert readings.version == 2


def _info_from_another_thread_mid_append(readings, wait_s: float, **append_kwargs) -> dict:
    """Appends two batches; between them another thread calls info(). Returns what it saw
    ("info"), whether it had finished `wait_s` later ("finished_early") and its thread."""
    batch = iot_table(iot_series(T0, 1)).to_batches()[0]
    other = {}

    def gen():
        yield batch
        thread = threading.Thread(target=lambda: other.setdefault("info", readings.info()))
        thread.start()
        thread.join(wait_s)
        other["finished_early"] = not thread.is_alive()
        other["thread"] = thread
        yield batch

    _run_bounded(lambda: readings.append(pa.RecordBatchReader.from_batches(batch.schema, gen()), **append_kwargs))
    other["thread"].join(10)
    return other


def test_other_thread_using_the_handle_is_served_during_an_append(readings):
    """While an append reads its input the handle is not locked (appends of several threads write
    their files at once, then share a commit): another thread's info() runs at once, neither
    refused nor blocked, and sees the table without the unfinished append."""
    other = _info_from_another_thread_mid_append(readings, 10)
    assert other["finished_early"] is True
    assert other["info"]["size"]["rows"] == 0
    assert readings.info()["size"]["rows"] == 6


def test_other_thread_waits_for_an_append_with_inline_maintenance(readings):
    other = _info_from_another_thread_mid_append(readings, 0.2, maintain=True)
    assert other["finished_early"] is False
    assert other["info"]["size"]["rows"] == 6


# --- Ctrl-C ------------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    r"""
    import datetime as dt, itertools, sys, time
    import pyarrow as pa
    import timelake

    lake_path, mode = sys.argv[1], sys.argv[2]
    lake = timelake.Lake(lake_path)
    t = lake.table("readings")
    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    n = 200_000
    batch = pa.record_batch({
        "time": pa.array([base + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us", tz="UTC")),
        "device_id": pa.array([f"d{i % 100}" for i in range(n)]),
        "temp": pa.array([float(i) for i in range(n)]),
    })

    def slow():
        while True:
            time.sleep(0.02)
            yield batch.slice(0, 100)

    def fast():
        return itertools.repeat(batch)

    if mode == "slow_generator":
        work = lambda: t.append(pa.RecordBatchReader.from_batches(batch.schema, slow()))
    elif mode == "fast_generator":
        work = lambda: t.append(pa.RecordBatchReader.from_batches(batch.schema, fast()))
    elif mode == "big_table":
        # 5,000 batches of one shared buffer: 1e9 rows, minutes of work, no Python in the loop.
        work = lambda: t.append(pa.Table.from_batches([batch] * 5000))
    elif mode == "maintain":
        work = lambda: t.maintain()
    elif mode == "sql":
        def work():
            try:
                lake.sql("SELECT sum(hash(a.range + b.range)) AS s FROM range(100000000) a, range(100000) b")
            except KeyboardInterrupt:
                # The lake is usable at once: the interrupted query has left DuckDB.
                rows = lake.sql("SELECT count(*) AS n FROM readings").column("n")[0].as_py()
                print("usable, rows:", rows, flush=True)
                raise
    elif mode == "wait_for_handle":
        # Another thread holds the handle with a long append; this thread waits for it. (An
        # append with inline maintenance holds the handle while it reads its input; a plain one
        # lets other operations run meanwhile.)
        import threading, os
        reading = threading.Event()  # the append holds the handle: it is reading its input
        def input_batches():
            for i, b in enumerate(itertools.islice(slow(), 1000)):
                if i == 1:
                    reading.set()
                yield b
        def writer():
            try:
                t.append(pa.RecordBatchReader.from_batches(batch.schema, input_batches()),
                         maintain=True)
            except BaseException:
                pass
        threading.Thread(target=writer, daemon=True).start()
        reading.wait(60)
        def work():
            try:
                t.maintain()
            except KeyboardInterrupt:
                print("KeyboardInterrupt while waiting", flush=True)
                os._exit(3)  # without waiting for the writer thread
            print("finished", flush=True)
            os._exit(0)
    started = time.monotonic()
    print("ready", flush=True)
    try:
        work()
    except KeyboardInterrupt:
        print("KeyboardInterrupt after %.2f s" % (time.monotonic() - started), flush=True)
        sys.exit(3)
    print("finished", flush=True)
    """
)


def _interrupt_child(lake_path, mode, after, limit=30, until=None):
    """Starts the child, sends SIGINT `after` seconds after it is ready (and once `until()`
    holds, if given: polled for a minute at most); returns (code, output, seconds to stop)."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(lake_path), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        time.sleep(after)
        deadline = time.monotonic() + 60
        while until is not None and not until() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGINT)
        sent = time.monotonic()
        out, err = child.communicate(timeout=limit)
        return child.returncode, out + err, time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def _referenced_files(tdir):
    """Every data file any commit of the table ever added (live or since removed)."""
    paths = set()
    for version in commit_versions(tdir):
        for action in log_actions(tdir, version):
            if "add" in action:
                paths.add(action["add"]["path"])
    return paths


@pytest.mark.parametrize("mode,after", [("slow_generator", 1.0), ("fast_generator", 4.0), ("big_table", 4.0)])
def test_ctrl_c_stops_a_long_append_and_commits_nothing(lake_path, readings, mode, after):
    code, output, took = _interrupt_child(lake_path, mode, after)
    assert code == 3, output
    assert "KeyboardInterrupt after" in output
    assert took < 15, f"took {took:.1f}s to stop"
    assert commit_versions(table_dir(readings)) == [0]
    assert data_files(table_dir(readings)) == [], "an interrupted append left data files"
    readings.refresh()
    assert readings.version == 0


@pytest.mark.parametrize("after", [0.5, 2.0])
def test_ctrl_c_stops_a_long_sql_query_with_keyboard_interrupt(lake_path, readings, after):
    code, output, took = _interrupt_child(lake_path, "sql", after)
    assert code == 3, output
    assert "usable, rows: 0" in output
    assert "KeyboardInterrupt after" in output
    assert "Query interrupted" not in output
    # (The stop includes a second query and the interpreter's exit: an ignored interrupt would
    # let the query run for minutes.)
    assert took < 20, f"took {took:.1f}s to stop"


def test_ctrl_c_stops_waiting_for_a_handle_busy_in_another_thread(lake_path, readings):
    code, output, took = _interrupt_child(lake_path, "wait_for_handle", 1.0)
    assert code == 3, output
    assert "KeyboardInterrupt while waiting" in output
    assert took < 5, f"took {took:.1f}s to stop"


def test_ctrl_c_stops_maintain_between_groups_leaving_only_committed_work(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key="device_id", chunk="hour")
    # 600 hourly chunks of two small files each: 600 compaction groups, one commit each.
    for minute in (0, 30):
        t.append(iot_table(iot_series(T0.replace(minute=minute), 600, devices=("a",), step=dt.timedelta(hours=1))))
    tdir = table_dir(t)
    assert len(data_files(tdir)) == 1200
    # Interrupted once its first group is committed (on a slow disk that may take over 0.5 s).
    code, output, took = _interrupt_child(lake_path, "maintain", 0.5,
                                          until=lambda: 3 in commit_versions(tdir))
    assert code == 3, output
    assert took < 15, f"took {took:.1f}s to stop"
    referenced = _referenced_files(tdir)
    on_disk = {str(p.relative_to(tdir)) for p in data_files(tdir)}
    assert on_disk <= referenced, f"uncommitted compaction output left behind: {sorted(on_disk - referenced)[:3]}"
    t.refresh()
    assert 2 < t.version < 602, "maintain was not interrupted midway"
    assert count_rows(lake, "readings") == 1200
    assert lake.latest("readings").num_rows == 1
