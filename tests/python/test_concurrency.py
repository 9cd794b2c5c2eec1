"""Many writers, one table: real processes appending at once through the commit protocol."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import timelake
from helpers import NO_BACKGROUND, IOT_SCHEMA, commit_versions, table_dir

WRITER = textwrap.dedent(
    """
    import datetime as dt, os, sys, time
    import pyarrow as pa
    import timelake
    lake_path, writer, appends, batch_prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    t = timelake.Lake(lake_path).table("readings")
    # Start barrier: report ready, then wait for the parent's go, so the writers really overlap.
    open(os.path.join(lake_path, f"ready-{writer}"), "w").close()
    while not os.path.exists(os.path.join(lake_path, "go")):
        time.sleep(0.005)
    schema = t.schema
    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(appends):
        rows = 5
        batch = pa.table({
            "time": [base + dt.timedelta(seconds=i * 10 + k) for k in range(rows)],
            "device_id": [f"w{writer}"] * rows,
            "temp": [float(writer * 1000 + i)] * rows,
        }).select(["time", "device_id", "temp"])
        batch_id = f"{batch_prefix}-{i}" if batch_prefix != "-" else f"w{writer}-{i}"
        r = t.append(batch, batch_id=batch_id)
        print(r["version"], r["attempts"], r["duplicate"], flush=True)
    """
)


def _spawn(lake_path: Path, writer: int, appends: int, batch_prefix: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(lake_path), str(writer), str(appends), batch_prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _start(lake_path: Path, procs) -> None:
    """Releases the writers once all of them are ready."""
    import time

    deadline = time.monotonic() + 120
    while not all((lake_path / f"ready-{w}").exists() for w in range(len(procs))):
        assert all(p.poll() is None for p in procs), "a writer exited before the start barrier"
        assert time.monotonic() < deadline, "writers did not start"
        time.sleep(0.01)
    (lake_path / "go").touch()


def _results(procs):
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        out.append([line.split() for line in stdout.strip().splitlines()])
    return out


def test_concurrent_processes_lose_no_append_and_double_none(lake, lake_path):
    # Versions are counted: one per append, no background compaction commits in between.
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    writers, appends = 4, 15
    procs = [_spawn(lake_path, w, appends, "-") for w in range(writers)]
    _start(lake_path, procs)
    results = _results(procs)

    versions = [int(v) for per_writer in results for v, _, _ in per_writer]
    assert sorted(versions) == list(range(1, writers * appends + 1))  # one version per append
    assert commit_versions(table_dir(t)) == list(range(0, writers * appends + 1))
    rows = lake.sql("SELECT device_id, count(*) AS n FROM readings GROUP BY 1 ORDER BY 1").to_pylist()
    assert rows == [{"device_id": f"w{w}", "n": appends * 5} for w in range(writers)]


def test_concurrent_writers_are_rebased_not_failed(lake, lake_path):
    lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    procs = [_spawn(lake_path, w, 25, "-") for w in range(4)]
    _start(lake_path, procs)
    results = _results(procs)
    attempts = [int(a) for per_writer in results for _, a, _ in per_writer]
    # With four processes racing, some commits must have lost a race and been rebased.
    assert max(attempts) > 1
    assert all(a >= 1 for a in attempts)


def test_same_batch_ids_racing_commit_exactly_once(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    # Every writer sends the same 10 batch ids (each with its own rows): one commit per id wins.
    procs = [_spawn(lake_path, w, 10, "shared") for w in range(3)]
    _start(lake_path, procs)
    results = _results(procs)
    committed = [(int(v), d == "False") for per_writer in results for v, _, d in per_writer]
    assert sum(1 for _, ok in committed if ok) == 10
    t.refresh()
    assert t.version == 10
    assert lake.sql("SELECT count(*) AS n FROM readings").column("n")[0].as_py() == 10 * 5


def test_threads_share_one_handle_safely(lake):
    import threading

    import pyarrow as pa
    import datetime as dt

    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    errors = []

    def work(n):
        try:
            for i in range(10):
                t.append(
                    pa.table({"time": [base + dt.timedelta(seconds=i)], "device_id": [f"t{n}"], "temp": [1.0]}),
                    batch_id=f"t{n}-{i}",
                )
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert t.version == 40
    assert lake.sql("SELECT count(*) AS n FROM readings").column("n")[0].as_py() == 40
