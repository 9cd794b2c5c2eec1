"""Crashes: a writer killed with SIGKILL at any instant leaves a readable table that holds every
acknowledged append exactly once, and replaying its batches afterwards adds each missing one once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from helpers import IOT_SCHEMA, delta_read, grouped_commits, table_dir

# Appends batches first..last-1 (each one device, `rows` rows, in hour `i % hours`) with batch
# ids, by `threads` threads taking every threads-th batch, printing "acked i duplicate" per append.
WRITER = textwrap.dedent(
    """
    import datetime as dt, sys, threading
    import pyarrow as pa
    import timelake
    lake_path, first, last, threads, rows, hours = sys.argv[1], *(int(a) for a in sys.argv[2:7])
    t = timelake.Lake(lake_path).table("readings")
    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    out = threading.Lock()

    def work(start):
        for i in range(start, last, threads):
            batch = pa.table({
                "time": [base + dt.timedelta(hours=i % hours, seconds=k) for k in range(rows)],
                "device_id": [f"batch-{i}"] * rows,
                "temp": [float(i)] * rows,
            })
            r = t.append(batch, batch_id=f"b-{i}")
            with out:  # one whole line per ack, never two threads' text interleaved
                sys.stdout.write(f"acked {i} {r['duplicate']}\\n")
                sys.stdout.flush()

    workers = [threading.Thread(target=work, args=(first + n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    """
)


def _start_writer(lake_path, first, last, threads=1, rows=200, hours=72):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(lake_path), *(str(a) for a in (first, last, threads, rows, hours))],
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


def _acks(lines) -> list[tuple[int, bool]]:
    """The whole ack lines among `lines` (a kill may cut the last one short)."""
    acks = []
    for line in lines:
        parts = line.split()
        if line.endswith("\n") and len(parts) == 3 and parts[0] == "acked":
            acks.append((int(parts[1]), parts[2] == "True"))
    return acks


@pytest.mark.parametrize("acks_before_kill", [9, 40])
def test_kill_9_during_group_commits_keeps_every_acknowledged_append_once(
    lake, lake_path, tmp_path, acks_before_kill
):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], chunk="hour", dedup="last")
    tdir = table_dir(t)
    # Six threads of one writer process append through one handle: their appends share commits
    # (group commit) and a group's small appends share a data file per chunk.
    writer = _start_writer(lake_path, 0, 100_000, threads=6, rows=50, hours=5)
    acked = []
    for line in writer.stdout:
        acked += [i for i, _ in _acks([line])]
        # Killed once the writer has grouped appends, while its threads keep appending (the log
        # is read every eighth ack).
        if len(acked) >= acks_before_kill and len(acked) % 8 == acks_before_kill % 8:
            if grouped_commits(tdir) > 0 or len(acked) >= 4000:
                break
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    acked += [i for i, _ in _acks(writer.stdout)]
    assert grouped_commits(tdir) > 0, "no appends were grouped before the kill: the test tested nothing"

    counts = _counts(lake)
    for i in acked:
        assert counts.get(f"batch-{i}") == 50, f"acknowledged append {i} lost"
    assert all(n == 50 for n in counts.values()), "an append was committed twice or partially"
    delta_rows, _ = delta_read(tdir, tmp_path)
    assert delta_rows.num_rows == sum(counts.values())
    latest = {r["device_id"]: r["temp"] for r in lake.latest("readings").to_pylist()}
    assert latest == {d: float(d.split("-")[1]) for d in counts}

    # Replayed by threads again, every acknowledged append is a duplicate and each lands once.
    last = max(acked) + 7
    replay = _start_writer(lake_path, 0, last, threads=6, rows=50, hours=5)
    stdout, stderr = replay.communicate(timeout=300)
    assert replay.returncode == 0, stderr
    replayed = _acks(stdout.splitlines(keepends=True))
    assert sorted(i for i, _ in replayed) == list(range(last))
    assert set(acked) <= {i for i, duplicate in replayed if duplicate}
    assert _counts(lake) == {f"batch-{i}": 50 for i in range(last)}


@pytest.mark.parametrize("acks_before_kill", [5, 17, 31])
def test_kill_9_of_one_writer_process_among_several_loses_nothing_any_of_them_acknowledged(
    lake, lake_path, tmp_path, acks_before_kill
):
    # Writer processes of one disk hand their appends to whichever of them is committing (a
    # leader), so the killed one may die as a leader holding others' appends, or as a writer
    # whose append another is committing. The others must finish, and nothing acknowledged to
    # anyone may be lost or doubled.
    lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], chunk="hour")
    victim = _start_writer(lake_path, 0, 10_000)
    survivors = [_start_writer(lake_path, 10_000 * k, 10_000 * k + 80) for k in (1, 2)]
    acked = []
    for line in victim.stdout:
        acked.append(int(line.split()[1]))
        if len(acked) >= acks_before_kill:
            break
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    for line in victim.stdout:
        if line.endswith("\n") and len(line.split()) == 3:
            acked.append(int(line.split()[1]))
    for survivor in survivors:
        _, stderr = survivor.communicate(timeout=300)
        assert survivor.returncode == 0, stderr

    counts = _counts(lake)
    for i in acked:
        assert counts.get(f"batch-{i}") == 200, f"acknowledged batch {i} lost"
    for k in (1, 2):
        for i in range(10_000 * k, 10_000 * k + 80):
            assert counts.get(f"batch-{i}") == 200, f"a survivor's batch {i} lost"
    assert all(n == 200 for n in counts.values()), "a batch was committed twice or partially"
    delta_rows, _ = delta_read(table_dir(lake.table("readings")), tmp_path)
    assert delta_rows.num_rows == sum(counts.values())
    # The writers did hand appends to each other (else this tested single writers only).
    assert grouped_commits(table_dir(lake.table("readings"))) > 0

    last = max(acked) + 3
    replay = _start_writer(lake_path, 0, last)
    stdout, stderr = replay.communicate(timeout=300)
    assert replay.returncode == 0, stderr
    assert set(acked) <= {int(l.split()[1]) for l in stdout.splitlines() if l.split()[2] == "True"}
    assert _counts(lake) == {**{f"batch-{i}": 200 for i in range(last)},
                             **{f"batch-{i}": 200 for k in (1, 2) for i in range(10_000 * k, 10_000 * k + 80)}}
