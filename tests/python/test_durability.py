"""Crashes: a writer killed with SIGKILL at any instant leaves a readable table that holds every
acknowledged append exactly once, and replaying its batches afterwards adds each missing one once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from helpers import IOT_SCHEMA, delta_read, table_dir

WRITER = textwrap.dedent(
    """
    import datetime as dt, sys
    import pyarrow as pa
    import timelake
    lake_path, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    t = timelake.Lake(lake_path).table("readings")
    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(first, last):
        rows = 200
        batch = pa.table({
            "time": [base + dt.timedelta(hours=i % 72, seconds=k) for k in range(rows)],
            "device_id": [f"batch-{i}"] * rows,
            "temp": [float(i)] * rows,
        })
        r = t.append(batch, batch_id=f"b-{i}")
        print("acked", i, r["duplicate"], flush=True)
    """
)


def _start_writer(lake_path, first, last):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(lake_path), str(first), str(last)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _counts(lake):
    rows = lake.sql("SELECT device_id, count(*) AS n FROM readings GROUP BY 1").to_pylist()
    return {r["device_id"]: r["n"] for r in rows}


@pytest.mark.parametrize("acks_before_kill", [1, 7, 23])
def test_kill_9_mid_append_keeps_every_acknowledged_batch_once(lake, lake_path, tmp_path, acks_before_kill):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], chunk="hour")
    writer = _start_writer(lake_path, 0, 10_000)
    acked = []
    for line in writer.stdout:
        acked.append(int(line.split()[1]))
        if len(acked) >= acks_before_kill:
            break
    os.kill(writer.pid, signal.SIGKILL)  # mid-way through the next append
    writer.wait()
    for line in writer.stdout:  # acks printed before the kill landed
        acked.append(int(line.split()[1]))

    counts = _counts(lake)
    for i in acked:
        assert counts.get(f"batch-{i}") == 200, f"acknowledged batch {i} lost"
    assert all(n == 200 for n in counts.values()), "a batch was committed twice or partially"

    # Another engine agrees on the table's rows.
    delta_rows, _ = delta_read(table_dir(t), tmp_path)
    assert delta_rows.num_rows == sum(counts.values())

    # The gateway replays everything it may not have delivered: each batch lands exactly once.
    last = max(acked) + 3
    replay = _start_writer(lake_path, 0, last)
    stdout, stderr = replay.communicate(timeout=300)
    assert replay.returncode == 0, stderr
    duplicates = {int(l.split()[1]) for l in stdout.splitlines() if l.split()[2] == "True"}
    assert set(acked) <= duplicates
    assert _counts(lake) == {f"batch-{i}": 200 for i in range(last)}
