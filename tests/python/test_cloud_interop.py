"""Delta interop on every cloud (S3 on moto, Azure Blob on Azurite, GCS on fake-gcs-server: the
`cloud` fixture, cloud.py): deltalake (delta-rs) reads the rows of tables timelake wrote, after
plain appends, after maintain() removed duplicates, and after retention, expiry and vacuum;
timelake reads tables deltalake wrote into the lake's layout, and each reads the other's appends.

delta-rs cannot write to fake-gcs-server (cloud.DELTA_RS_CANNOT_WRITE_GCS): on GCS the table
deltalake writes is written in a local folder and its objects uploaded as they are, and the test
in which deltalake appends to a timelake table there is skipped, saying why."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pytest

import timelake
from cloud import delta_write
from helpers import IOT_SCHEMA, T0, iot_series, iot_table, sorted_rows
from test_cloud_faults import assert_log_is_whole, log_versions, table_prefix

UTC = dt.timezone.utc


def cloud_lake(cloud, bucket: str) -> "timelake.Lake":
    return timelake.Lake(cloud.url(bucket), storage_options=cloud.storage_options())


def delta_rows(cloud, bucket: str, table: str, scratch: Path) -> tuple[list[dict], int]:
    """What deltalake reads from lake table `table` ("ns.name"): sorted rows and version."""
    namespace, name = table.split(".")
    got, version = cloud.delta_read(cloud.url(bucket, f"lake/{namespace}/{name}"), scratch)
    return sorted_rows(got.select(IOT_SCHEMA.names) if "time" in got.column_names else got), version


# ------------------------------------------------------------ tables timelake writes


def test_deltalake_reads_the_rows_of_appends(cloud, cloud_bucket, tmp_path):
    lake = cloud_lake(cloud, cloud_bucket)
    t = lake.create_table("iot.readings", IOT_SCHEMA, series_key=["device_id"])
    batches = [iot_table(iot_series(T0 + dt.timedelta(days=d), 5, step=dt.timedelta(hours=7)))
               for d in (0, 3, 40)]
    for i, batch in enumerate(batches):
        t.append(batch, batch_id=f"b-{i}")
    expected = sorted_rows(pa.concat_tables(batches))

    got, version = delta_rows(cloud, cloud_bucket, "iot.readings", tmp_path)
    assert version == t.version == 3
    assert got == expected
    assert sorted_rows(lake.sql("SELECT * FROM iot.readings")) == expected


def test_deltalake_reads_a_dedup_table_after_maintain(cloud, cloud_bucket, tmp_path):
    lake = cloud_lake(cloud, cloud_bucket)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    first = iot_series(T0, 6)
    corrections = [(time_, device, temp + 100) for time_, device, temp in first[::2]]
    t.append(iot_table(first))
    t.append(iot_table(corrections))
    result = t.maintain()
    assert result["duplicates_removed"] == len(corrections)

    newest = {(r[0], r[1]): r for r in first}
    newest.update({(r[0], r[1]): r for r in corrections})
    expected = sorted_rows(iot_table(newest.values()))
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == expected
    got, version = delta_rows(cloud, cloud_bucket, "default.readings", tmp_path)
    assert version == t.version
    assert got == expected


def test_deltalake_reads_a_table_after_retention_expiry_and_vacuum(cloud, cloud_bucket, tmp_path):
    lake = cloud_lake(cloud, cloud_bucket)
    t = lake.create_table(
        "readings", IOT_SCHEMA, series_key=["device_id"], chunk="hour", retention="1d",
        properties={
            "delta.checkpointInterval": "2",
            "delta.logRetentionDuration": "interval 1 second",
            "delta.deletedFileRetentionDuration": "interval 1 second",
            "timelake.retentionDurationCheck": "false",
        })
    now = dt.datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    old = iot_series(now - dt.timedelta(days=5), 4, step=dt.timedelta(hours=1))
    recent = [iot_series(now - dt.timedelta(hours=h), 3, step=dt.timedelta(minutes=5))
              for h in (3, 2, 1)]
    t.append(iot_table(old))
    for rows in recent:
        t.append(iot_table(rows))
    dropped = t.maintain()  # retention removes the old chunks, compaction the small files
    assert dropped["partitions_dropped"] == 4
    time.sleep(1.5)  # now every commit and every removal is older than the retention durations
    expired = t.maintain()
    # The first maintain() may have expired commits already: a slow run (or a store whose
    # modification times have whole seconds, as moto's do) can make the appends' checkpoints
    # look older than the 1 s retention by then (vacuum too: it reads the clock after the drop
    # and the compaction). Together the two calls must have; the listings below check the outcome.
    assert dropped["snapshots_expired"] + expired["snapshots_expired"] > 0, (dropped, expired)
    assert dropped["objects_deleted"] + expired["objects_deleted"] > 0, (dropped, expired)

    versions = log_versions(cloud, cloud_bucket)
    assert versions[0] > 0, "expiry left commit 0"
    assert versions == list(range(versions[0], versions[-1] + 1))
    data = cloud.list_keys(cloud_bucket, table_prefix() + "data/")
    assert data, "no data objects at all"
    assert not any((now - dt.timedelta(days=5)).strftime("%Y-%m-%d") in k for k in data), data

    expected = sorted_rows(iot_table([r for rows in recent for r in rows]))
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == expected
    got, version = delta_rows(cloud, cloud_bucket, "default.readings", tmp_path)
    assert version == t.version
    assert got == expected


# ------------------------------------------------------------ tables deltalake writes


def write_with_deltalake(cloud, bucket: str, path: str, batches: list[pa.Table],
                         scratch: Path) -> None:
    """deltalake appends `batches` (one commit each) to the table at `path` in `bucket`. Where
    delta-rs cannot write to the emulator (GCS), it writes them in a local folder and the objects
    are uploaded as they are: the table timelake then reads is byte for byte delta-rs's."""
    if cloud.delta_write_unsupported is None:
        for batch in batches:
            cloud.delta_write(cloud.url(bucket, path), batch, scratch)
        return
    local = scratch / f"delta-rs-table-{time.monotonic_ns()}"
    for batch in batches:
        delta_write(str(local), batch, {}, scratch)
    files = sorted(p for p in local.rglob("*") if p.is_file())
    assert any(p.name == f"{len(batches) - 1:020d}.json" for p in files), files
    for p in files:
        cloud.put(bucket, f"{path}/{p.relative_to(local).as_posix()}", p.read_bytes())


def test_timelake_reads_a_table_deltalake_wrote(cloud, cloud_bucket, tmp_path):
    first = iot_table(iot_series(T0, 4))
    second = iot_table(iot_series(T0 + dt.timedelta(days=2), 3, devices=("d", "e")))
    write_with_deltalake(cloud, cloud_bucket, "lake/ext/made_by_delta_rs", [first, second],
                         tmp_path)

    lake = cloud_lake(cloud, cloud_bucket)
    assert "ext.made_by_delta_rs" in lake.tables()
    assert lake.table("ext.made_by_delta_rs").version == 1
    got = lake.sql("SELECT * FROM ext.made_by_delta_rs")
    expected = sorted_rows(pa.concat_tables([first, second]))
    assert sorted_rows(got.select(IOT_SCHEMA.names)) == expected


def test_each_reads_the_others_appends(cloud, cloud_bucket, tmp_path):
    if cloud.delta_write_unsupported:
        pytest.skip(cloud.delta_write_unsupported)
    uri = cloud.url(cloud_bucket, "lake/ext/shared")
    by_delta = iot_table(iot_series(T0, 3))
    cloud.delta_write(uri, by_delta, tmp_path)
    lake = cloud_lake(cloud, cloud_bucket)
    by_timelake = iot_table(iot_series(T0 + dt.timedelta(days=1), 3, devices=("x",)))
    assert lake.table("ext.shared").append(by_timelake, batch_id="t-0")["version"] == 1
    again_by_delta = iot_table(iot_series(T0 + dt.timedelta(days=2), 2, devices=("y",)))
    cloud.delta_write(uri, again_by_delta, tmp_path)

    expected = sorted_rows(pa.concat_tables([by_delta, by_timelake, again_by_delta]))
    got, version = delta_rows(cloud, cloud_bucket, "ext.shared", tmp_path)
    assert version == 2
    assert got == expected
    # Another engine's commit is seen by a Lake that checks the log at every read at once, and by
    # any Lake once the version check interval (1 s by default) has passed (docs/object-stores.md).
    checking = timelake.Lake(cloud.url(cloud_bucket), storage_options={**cloud.storage_options(),
                                                                       "version_check_interval": "0"})
    assert sorted_rows(checking.sql("SELECT * FROM ext.shared").select(IOT_SCHEMA.names)) == expected
    time.sleep(2.1)  # the head's age is counted in whole seconds
    assert sorted_rows(lake.sql("SELECT * FROM ext.shared").select(IOT_SCHEMA.names)) == expected
    assert_log_is_whole(cloud, cloud_bucket, "ext.shared")
