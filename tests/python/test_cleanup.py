"""maintain(expire=True): log expiry and vacuum delete only what no snapshot needs."""

from __future__ import annotations

import os
import shutil
import time

from helpers import NO_BACKGROUND, IOT_SCHEMA, T0, commit_versions, data_files, delta_read, iot_series, iot_table, sorted_rows, table_dir

import timelake

NO_RETENTION = {
    "delta.deletedFileRetentionDuration": "interval 0 seconds",
    "delta.logRetentionDuration": "interval 0 seconds",
    "timelake.retentionDurationCheck": "false",  # below 7 days only when asked for explicitly
    **NO_BACKGROUND,  # the tests count log versions
}


def _small_appends(t, n):
    for i in range(n):
        t.append(iot_table(iot_series(T0, 1, devices=(f"d{i}",))), batch_id=f"b{i}")


def test_vacuum_deletes_files_compaction_replaced_once_retention_passed(lake, tmp_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_RETENTION)
    _small_appends(t, 6)
    before = sorted_rows(lake.sql("SELECT * FROM readings"))
    t.maintain(expire=False)  # compacts 6 files into 1
    assert len(data_files(table_dir(t))) == 7

    result = t.maintain()

    assert result["objects_deleted"] >= 6
    assert len(data_files(table_dir(t))) == 1
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == before
    rows, _ = delta_read(table_dir(t), tmp_path)
    assert sorted_rows(rows) == before


def test_vacuum_keeps_removed_files_within_the_default_retention(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    _small_appends(t, 4)
    t.maintain()
    t.maintain()
    assert len(data_files(table_dir(t))) == 5  # 4 removed (kept for 7 days) + 1 live


def test_vacuum_deletes_old_unreferenced_files_but_not_fresh_ones(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    _small_appends(t, 1)
    [live] = data_files(table_dir(t))
    orphan_old = live.with_name("part-orphan-old.parquet")
    orphan_new = live.with_name("part-orphan-new.parquet")
    shutil.copy(live, orphan_old)
    shutil.copy(live, orphan_new)
    eight_days_ago = time.time() - 8 * 86400
    os.utime(orphan_old, (eight_days_ago, eight_days_ago))

    t.maintain()

    assert not orphan_old.exists()  # a crashed writer's leftover
    assert orphan_new.exists()  # may belong to a writer that is about to commit
    assert live.exists()


def test_log_expiry_keeps_the_newest_old_checkpoint_and_everything_after(lake, lake_path, tmp_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_RETENTION)
    _small_appends(t, 25)
    before = sorted_rows(lake.sql("SELECT * FROM readings"))

    result = t.maintain(compact=False)

    assert result["snapshots_expired"] == 20
    assert commit_versions(table_dir(t)) == list(range(20, 26))
    assert (table_dir(t) / "_delta_log" / "00000000000000000020.checkpoint.parquet").exists()
    assert not (table_dir(t) / "_delta_log" / "00000000000000000010.checkpoint.parquet").exists()
    assert t.info()["snapshots"] == 6
    fresh = timelake.Lake(str(lake_path))
    assert fresh.table("readings").version == 25
    assert sorted_rows(fresh.sql("SELECT * FROM readings")) == before
    rows, meta = delta_read(table_dir(t), tmp_path)
    assert sorted_rows(rows) == before
    # Batch ids survive expiry: they live in the checkpoint.
    assert t.append(iot_table(iot_series(T0, 1, devices=("d3",))), batch_id="b3")["duplicate"] is True


def test_log_expiry_keeps_everything_within_the_default_retention(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    _small_appends(t, 12)
    result = t.maintain(compact=False)
    assert result["snapshots_expired"] == 0
    assert commit_versions(table_dir(t))[0] == 0
