"""A checkpoint's transactions (batch ids) and tombstones are its *history*: a table opened to be
read leaves them unread in the checkpoint's bytes (docs/format.md, "Checkpoints"), and whatever
needs them reads them there on first use. These tests check that nothing that needs them misses
them, on a Lake opened after the checkpoint was written: batch ids recorded only in a checkpoint
stay duplicates, vacuum keeps the files a checkpoint's tombstones protect, and latest() stays
exact across the compactions the checkpoint records.
"""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest

from helpers import IOT_SCHEMA, NO_BACKGROUND, T0, data_files, iot_table, sorted_rows, table_dir

# A checkpoint every 2 commits: the early batch ids and tombstones end up in one.
PROPS = {**NO_BACKGROUND, "delta.checkpointInterval": "2"}


def _count(lake) -> int:
    return lake.sql("SELECT count(*) AS n FROM readings").to_pylist()[0]["n"]


def test_batch_ids_recorded_only_in_a_checkpoint_stay_duplicates_for_a_new_lake(lake_location):
    lake = lake_location.open()
    table = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=PROPS)
    for i in range(12):
        table.append(iot_table([(T0 + dt.timedelta(minutes=i), "a", float(i))]), batch_id=f"b{i}")
    table.info()  # waits for the upkeep thread's checkpoints
    fresh = lake_location.open()
    again = fresh.table("readings")
    for i in (0, 1, 5, 11):  # in the checkpoint's history, and in the commits after it
        result = again.append(iot_table([(T0, "a", 99.0)]), batch_id=f"b{i}")
        assert result["duplicate"] is True, i
    assert _count(fresh) == 12
    assert again.append(iot_table([(T0, "a", 99.0)]), batch_id="b12")["duplicate"] is False
    assert _count(lake_location.open()) == 13


@pytest.mark.local_only
def test_vacuum_on_a_new_lake_keeps_files_a_checkpoint_tombstone_still_protects(lake_location):
    # Removed by a compaction just now, but their files look 8 days old: only the tombstones
    # (in the checkpoint written after the compaction) say they must be kept for 7 days more.
    lake = lake_location.open()
    table = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=PROPS)
    for i in range(4):
        table.append(iot_table([(T0 + dt.timedelta(minutes=i), f"d{i}", float(i))]))
    small = data_files(table_dir(table))
    assert len(small) == 4
    table.maintain(retention=False, expire=False)  # compacts them into one
    for i in range(3):  # a checkpoint after the compaction's commit
        table.append(iot_table([(T0 + dt.timedelta(hours=1, minutes=i), "e", float(i))]))
    table.info()  # waits for the upkeep thread's checkpoints
    log = table_dir(table) / "_delta_log"
    version = table.version
    assert any(p.name.endswith(".checkpoint.parquet") and int(p.name.split(".")[0]) > version - 3
               for p in log.iterdir())
    eight_days_ago = time.time() - 8 * 86400
    for f in small:
        os.utime(f, (eight_days_ago, eight_days_ago))

    lake_location.open().table("readings").maintain(compact=False, retention=False)

    assert all(f.exists() for f in small)
    assert _count(lake_location.open()) == 7


def test_latest_on_a_new_lake_is_exact_after_compactions_a_checkpoint_records(lake_location):
    lake = lake_location.open()
    table = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=PROPS)
    for i in range(6):
        table.append(iot_table([(T0 + dt.timedelta(minutes=i), d, float(i * 10 + k))
                                for k, d in enumerate(("a", "b", "c"))]), batch_id=f"b{i}")
    table.maintain(retention=False, expire=False)
    for i in range(3):
        table.append(iot_table([(T0 + dt.timedelta(minutes=10 + i), "a", 100.0 + i)]), batch_id=f"c{i}")
    table.info()  # waits for the upkeep thread's checkpoints
    fresh = lake_location.open()
    got = sorted_rows(fresh.latest("readings"))
    want = sorted_rows(fresh.sql(
        "SELECT time, device_id, temp FROM readings QUALIFY row_number() OVER "
        "(PARTITION BY device_id ORDER BY time DESC) = 1"))
    assert got == want
    assert {r["device_id"]: r["temp"] for r in got} == {"a": 102.0, "b": 51.0, "c": 52.0}
