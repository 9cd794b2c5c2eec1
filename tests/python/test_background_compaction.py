"""Background compaction: a table fed by small appends keeps few files per chunk without anyone
calling maintain(). The passes run on the handle's upkeep thread after appends are acknowledged
(info() waits for them); they change no row a reader sees, race safely with other writers and
never bring a dropped table back."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import deltalake
import pytest

import timelake
from helpers import (
    IOT_SCHEMA,
    T0,
    commit_versions,
    count_rows,
    data_files,
    delta_read,
    iot_table,
    log_actions,
    sorted_rows,
    table_dir,
)

# A pass is queued every 8 appended files and compacts a chunk once one size tier of it holds 16
# small files: after any number of small appends to one chunk, at most this many files of one
# tier remain (the tests' files are all in the smallest tier, under 1 MiB).
MAX_FILES_PER_CHUNK = 16 + 8


def _batch(i: int, *, overlap: bool = False) -> list[tuple]:
    """Append `i`'s rows: two devices, three readings each, all in T0's day. With `overlap` every
    batch writes the same times again, with value i (a dedup table keeps the last)."""
    start = T0 + dt.timedelta(minutes=0 if overlap else 30 * i)
    return [(start + dt.timedelta(minutes=m), d, float(i)) for m in range(3) for d in ("a", "b")]


def _optimize_commits(t) -> list[int]:
    return [
        v
        for v in commit_versions(table_dir(t))
        if log_actions(table_dir(t), v)[0].get("commitInfo", {}).get("operation") == "OPTIMIZE"
    ]


def test_small_appends_are_compacted_in_the_background(lake, tmp_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    expected = []
    for i in range(40):
        rows = _batch(i)
        result = t.append(iot_table(rows), batch_id=f"b{i}")
        assert "maintenance" not in result  # nothing inline: the work is the upkeep thread's
        expected += rows

    info = t.info()  # waits for the queued passes

    assert info["size"]["files"] <= MAX_FILES_PER_CHUNK
    assert info["size"]["rows"] == len(expected)
    assert len(_optimize_commits(t)) >= 1
    want = sorted_rows(iot_table(expected))
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == want
    delta_rows, _ = delta_read(table_dir(t), tmp_path)
    assert sorted_rows(delta_rows) == want
    newest = {d: max((r for r in expected if r[1] == d), key=lambda r: r[0]) for d in ("a", "b")}
    assert sorted_rows(lake.latest("readings")) == sorted_rows(iot_table(list(newest.values())))
    # Batch ids stay remembered across the compactions.
    assert t.append(iot_table(_batch(3)), batch_id="b3")["duplicate"] is True


def test_background_compaction_bounds_files_on_every_store(lake_location):
    lake = lake_location.open()
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    expected = {}
    for i in range(40):
        rows = _batch(i, overlap=i % 2 == 1)
        t.append(iot_table(rows), batch_id=f"b{i}")
        expected.update({(ts, d): v for ts, d, v in rows})
    assert t.info()["size"]["files"] <= MAX_FILES_PER_CHUNK  # 40 appends, so passes compacted
    want = sorted_rows(iot_table([(ts, d, v) for (ts, d), v in expected.items()]))
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == want
    assert sorted_rows(lake_location.open().sql("SELECT * FROM readings")) == want
    newest = {d: max((k for k in expected if k[1] == d)) for d in ("a", "b")}
    assert sorted_rows(lake.latest("readings")) == sorted_rows(iot_table([(ts, d, expected[(ts, d)]) for ts, d in newest.values()]))


def test_background_compaction_can_be_switched_off(lake):
    t = lake.create_table(
        "readings", IOT_SCHEMA, series_key=["device_id"], properties={"timelake.backgroundCompaction": "false"}
    )
    for i in range(40):
        t.append(iot_table(_batch(i)))
    assert t.info()["size"]["files"] == 40
    assert _optimize_commits(t) == []
    assert t.version == 40


def test_append_with_maintain_false_leaves_compaction_to_maintain(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    for i in range(40):
        t.append(iot_table(_batch(i)), maintain=False)
    assert t.info()["size"]["files"] == 40
    assert _optimize_commits(t) == []
    assert t.maintain()["files_rewritten"] == 40
    assert t.info()["size"]["files"] == 1


@pytest.mark.parametrize("value", ["yes", "1", "TRUE", ""])
def test_background_compaction_property_is_validated(lake, value):
    with pytest.raises(ValueError, match="timelake.backgroundCompaction"):
        lake.create_table(
            "readings", IOT_SCHEMA, series_key=["device_id"], properties={"timelake.backgroundCompaction": value}
        )
    assert lake.tables() == []


@pytest.mark.parametrize("dedup", ["last", "first"])
def test_background_compaction_of_a_dedup_table_keeps_what_readers_saw(lake, tmp_path, dedup):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup=dedup)
    seen_latest = []
    for i in range(40):
        t.append(iot_table(_batch(i, overlap=True)))
        if i % 5 == 4:
            seen_latest.append((i, sorted_rows(lake.latest("readings"))))
    t.info()

    winner = 39 if dedup == "last" else 0
    want = sorted_rows(iot_table([(ts, d, float(winner)) for ts, d, _ in _batch(0, overlap=True)]))
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == want
    assert len(_optimize_commits(t)) >= 1
    stored, _ = delta_read(table_dir(t), tmp_path)
    assert stored.num_rows < 40 * 6  # duplicates left storage with the compactions
    # latest() agreed with the rows at every step, compactions in between or not.
    for i, rows in seen_latest:
        value = float(i if dedup == "last" else 0)
        assert [r["temp"] for r in rows] == [value, value]
    assert [r["temp"] for r in sorted_rows(lake.latest("readings"))] == [float(winner)] * 2


def test_two_handles_appending_and_compacting_lose_nothing(lake, lake_path):
    lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    handles = [timelake.Lake(str(lake_path)).table("readings") for _ in range(2)]
    errors = []

    def work(h, w):
        try:
            for i in range(30):
                rows = [(T0 + dt.timedelta(seconds=60 * i + k), f"w{w}", float(i)) for k in range(4)]
                h.append(iot_table(rows), batch_id=f"w{w}-{i}")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(h, w)) for w, h in enumerate(handles)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    for h in handles:
        h.info()
    rows = lake.sql("SELECT device_id, count(*) AS n, count(DISTINCT time) AS d FROM readings GROUP BY 1 ORDER BY 1")
    assert rows.to_pylist() == [{"device_id": f"w{w}", "n": 120, "d": 120} for w in range(2)]
    assert handles[0].info()["size"]["files"] <= 2 * MAX_FILES_PER_CHUNK
    assert len(_optimize_commits(handles[0])) >= 1


def test_dropped_table_does_not_come_back_from_a_queued_pass(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    for i in range(16):
        t.append(iot_table(_batch(i)))  # the 16th queues a pass that has work to do
    lake.drop_table("readings")

    assert lake.tables() == []
    assert timelake.Lake(str(lake_path)).tables() == []
    with pytest.raises(KeyError):
        t.append(iot_table(_batch(99)))
    again = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    assert again.info()["size"]["rows"] == 0
    assert lake.sql("SELECT count(*) AS n FROM readings").column("n")[0].as_py() == 0


WRITER = textwrap.dedent(
    """
    import datetime as dt, sys
    import pyarrow as pa
    import timelake
    lake_path = sys.argv[1]
    t = timelake.Lake(lake_path).table("readings")
    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(10_000):
        batch = pa.table({
            "time": [base + dt.timedelta(seconds=i * 20 + k) for k in range(20)],
            "device_id": [f"batch-{i}"] * 20,
            "temp": [float(i)] * 20,
        })
        t.append(batch, batch_id=f"b-{i}")
        print("acked", i, flush=True)
    """
)


@pytest.mark.parametrize("acks_before_kill", [20, 41])
def test_kill_9_while_compacting_in_the_background_keeps_every_acknowledged_append(
    lake, lake_path, tmp_path, acks_before_kill
):
    # Every append goes to one chunk, so passes compact while the writer appends; the kill lands
    # wherever a pass happens to be, once the writer's first pass has committed (the upkeep thread
    # runs at a lower priority: on a busy machine it may lag the appends a while).
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(lake_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    acked = []
    for line in writer.stdout:
        acked.append(int(line.split()[1]))
        if len(acked) >= acks_before_kill and (len(acked) % 4 == 0 or len(acked) == acks_before_kill):
            if _optimize_commits(t) or len(acked) >= 4000:
                break
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    for line in writer.stdout:
        # Only whole acks: a CI run once read a line without its number here. One left out is
        # still covered by the all-or-nothing check of every batch below.
        if line.endswith("\n") and len(line.split()) == 2:
            acked.append(int(line.split()[1]))

    counts = {r["device_id"]: r["n"] for r in lake.sql("SELECT device_id, count(*) AS n FROM readings GROUP BY 1").to_pylist()}
    for i in acked:
        assert counts.get(f"batch-{i}") == 20, f"acknowledged append {i} lost"
    assert all(n == 20 for n in counts.values()), "an append was committed twice or partially"
    assert len(_optimize_commits(t)) >= 1  # the writer's passes really ran before the kill
    delta_rows, _ = delta_read(table_dir(t), tmp_path)
    assert delta_rows.num_rows == sum(counts.values())
    latest = {r["device_id"]: r["temp"] for r in lake.latest("readings").to_pylist()}
    assert latest == {d: float(d.split("-")[1]) for d in counts}
    # A new writer compacts the rest and loses nothing either.
    t.maintain()
    assert {r["device_id"]: r["n"] for r in lake.sql("SELECT device_id, count(*) AS n FROM readings GROUP BY 1").to_pylist()} == counts


def test_background_passes_rewrite_the_small_tier_and_leave_larger_files_alone(lake, tmp_path):
    # Size tiers bound the write amplification: a pass merges the files of the smallest tier that
    # has 16 of them, so a file once merged into a larger tier is not rewritten by every pass.
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    rng = random.Random(7)
    start = T0
    big = [(start + dt.timedelta(milliseconds=100 * i), f"d{i % 4}", rng.random()) for i in range(200_000)]
    t.append(iot_table(big))
    (big_file,) = [f for f in data_files(table_dir(t))]
    assert big_file.stat().st_size > 1 << 20  # a tier above the smallest
    expected = list(big)
    late = start + dt.timedelta(hours=12)
    for i in range(40):
        rows = [(late + dt.timedelta(seconds=60 * i + k), "d0", float(i)) for k in range(3)]
        t.append(iot_table(rows))
        expected += rows
    info = t.info()

    live = [Path(p) for p in deltalake.DeltaTable(str(table_dir(t))).file_uris()]
    assert big_file in live, "a pass rewrote the larger file"
    assert info["size"]["files"] <= 1 + MAX_FILES_PER_CHUNK
    assert len(_optimize_commits(t)) >= 1
    assert info["size"]["rows"] == len(expected)
    assert count_rows(lake, "readings") == len(expected)
    # maintain() still compacts everything on demand.
    t.maintain()
    assert t.info()["size"]["files"] == 1
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == sorted_rows(iot_table(expected))


def test_a_pass_skips_while_another_process_compacts_the_table(tmp_path):
    # Background passes of one table take turns across the processes of a machine
    # (`_timelake/compaction.lock`): a pass that finds the lock held skips, since the holder
    # compacts the same files. Here the test holds it, as another process's pass would.
    import fcntl

    lake = timelake.Lake(tmp_path)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    lock_path = table_dir(t) / "_timelake" / "compaction.lock"
    lock_path.parent.mkdir(exist_ok=True)
    with open(lock_path, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        for i in range(40):
            t.append(iot_table(_batch(i)), batch_id=f"b{i}")
        assert t.info()["size"]["files"] == 40  # every pass skipped
        assert _optimize_commits(t) == []
        fcntl.flock(held, fcntl.LOCK_UN)
    for i in range(40, 48):
        t.append(iot_table(_batch(i)), batch_id=f"b{i}")
    info = t.info()
    assert info["size"]["files"] <= MAX_FILES_PER_CHUNK  # the next pass compacted them all
    assert len(_optimize_commits(t)) >= 1
    assert info["size"]["rows"] == 48 * 6
