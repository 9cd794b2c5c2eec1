"""Stats and file tags at the edges: values other engines must be able to parse and prune with,
and series-key tags cut like the string stats without breaking read-time deduplication."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pyarrow as pa

from helpers import IOT_SCHEMA, UTC, delta_read, iot_table, log_actions, sorted_rows, table_dir

LAST_MICROSECOND = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)

_DELTA_FILTERED_COUNT = r"""
import datetime as dt, os, sys
import deltalake
d = deltalake.DeltaTable(sys.argv[1])
ts = dt.datetime.fromisoformat(sys.argv[2])
n = d.to_pyarrow_table(filters=[("time", "=", ts)]).num_rows
print(n)
sys.stdout.flush()
os._exit(0)
"""


def _delta_rows_at(path, ts: dt.datetime) -> int:
    """Rows delta-rs returns for `time = ts`, pruning files by their stats."""
    proc = subprocess.run(
        [sys.executable, "-c", _DELTA_FILTERED_COUNT, str(path), ts.isoformat()],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.strip().splitlines()[-1])


def _add_actions(t, version):
    return [a["add"] for a in log_actions(table_dir(t), version) if "add" in a]


def test_a_year_9999_timestamp_leaves_stats_delta_rs_can_use(lake, tmp_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], chunk="month")
    t.append(iot_table([(LAST_MICROSECOND, "a", 1.0), (dt.datetime(9999, 12, 1, tzinfo=UTC), "b", 2.0)]))

    [add] = _add_actions(t, 1)
    stats = json.loads(add["stats"])
    assert stats["minValues"]["time"] == "9999-12-01T00:00:00.000Z"
    # Ceiled, the max would be year 10000, which no reader parses; truncated is the protocol's
    # own form (readers add 1 ms to a max before comparing).
    assert stats["maxValues"]["time"] == "9999-12-31T23:59:59.999Z"
    assert "10000" not in add["stats"]

    rows, _ = delta_read(table_dir(t), tmp_path)
    assert rows.num_rows == 2
    # With the year-10000 max, delta-rs pruned this file and answered 0 rows.
    assert _delta_rows_at(table_dir(t), LAST_MICROSECOND) == 1
    assert _delta_rows_at(table_dir(t), dt.datetime(9999, 12, 1, tzinfo=UTC)) == 1
    assert _delta_rows_at(table_dir(t), LAST_MICROSECOND.replace(microsecond=999000)) == 0
    assert lake.sql("SELECT count(*) AS n FROM readings WHERE time = TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'").column("n")[0].as_py() == 1


def test_the_last_millisecond_of_9999_is_an_exact_max(lake, tmp_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    last_ms = LAST_MICROSECOND.replace(microsecond=999000)
    t.append(iot_table([(last_ms, "a", 1.0)]))
    [add] = _add_actions(t, 1)
    assert json.loads(add["stats"])["maxValues"]["time"] == "9999-12-31T23:59:59.999Z"
    assert _delta_rows_at(table_dir(t), last_ms) == 1


def test_series_key_tags_are_cut_like_the_string_stats(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    prefix = "building-7/floor-3/room-12/sensor"  # 33 characters
    t.append(iot_table([(dt.datetime(2024, 3, 5, h, tzinfo=UTC), f"{prefix}-{h:02d}", float(h)) for h in range(3)]))

    [add] = _add_actions(t, 1)
    stats = json.loads(add["stats"])
    assert add["tags"]["timelake.minKey"] == stats["minValues"]["device_id"] == prefix[:32]
    assert add["tags"]["timelake.maxKey"] == stats["maxValues"]["device_id"] == prefix[:32] + "\U0010ffff"


def test_dedup_stays_exact_with_long_keys_that_share_the_cut_prefix(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    prefix = "x" * 32
    at = [dt.datetime(2024, 3, 5, h, tzinfo=UTC) for h in range(3)]
    t.append(iot_table([(ts, prefix + "-a", 1.0) for ts in at] + [(ts, prefix + "-b", 1.0) for ts in at]))
    t.append(iot_table([(ts, prefix + "-b", 2.0) for ts in at]))  # replaces b's rows
    t.append(iot_table([(ts, prefix + "-c", 3.0) for ts in at]))

    got = sorted_rows(lake.sql("SELECT device_id, temp FROM readings"), ["device_id", "temp"])
    assert [(r["device_id"][-1], r["temp"]) for r in got] == [("a", 1.0)] * 3 + [("b", 2.0)] * 3 + [("c", 3.0)] * 3
