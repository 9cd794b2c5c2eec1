"""Delta interop on S3 (moto): deltalake (delta-rs) reads the rows of tables timelake wrote,
after plain appends, after maintain() removed duplicates, and after retention, expiry and
vacuum; timelake reads tables deltalake wrote into the lake's layout, and each reads the other's
appends."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

import timelake
from helpers import IOT_SCHEMA, T0, iot_series, iot_table, sorted_rows
from test_s3_faults import (
    assert_log_is_whole,
    delta_read_s3,
    delta_storage_options,
    list_keys,
    log_versions,
    run_child,
    table_prefix,
)

UTC = dt.timezone.utc


def s3_lake(server, bucket: str) -> "timelake.Lake":
    return timelake.Lake(f"s3://{bucket}/lake", storage_options=server.storage_options())


def delta_rows(server, bucket: str, table: str, scratch: Path) -> tuple[list[dict], int]:
    """What deltalake reads from lake table `table` ("ns.name"): sorted rows and version."""
    namespace, name = table.split(".")
    got, version = delta_read_s3(server, f"s3://{bucket}/lake/{namespace}/{name}", scratch)
    return sorted_rows(got.select(IOT_SCHEMA.names) if "time" in got.column_names else got), version


# ------------------------------------------------------------ tables timelake writes


def test_deltalake_reads_the_rows_of_appends_on_s3(s3_server, s3_bucket, tmp_path):
    lake = s3_lake(s3_server, s3_bucket)
    t = lake.create_table("iot.readings", IOT_SCHEMA, series_key=["device_id"])
    batches = [iot_table(iot_series(T0 + dt.timedelta(days=d), 5, step=dt.timedelta(hours=7)))
               for d in (0, 3, 40)]
    for i, batch in enumerate(batches):
        t.append(batch, batch_id=f"b-{i}")
    expected = sorted_rows(pa.concat_tables(batches))

    got, version = delta_rows(s3_server, s3_bucket, "iot.readings", tmp_path)
    assert version == t.version == 3
    assert got == expected
    assert sorted_rows(lake.sql("SELECT * FROM iot.readings")) == expected


def test_deltalake_reads_a_dedup_table_after_maintain_on_s3(s3_server, s3_bucket, tmp_path):
    lake = s3_lake(s3_server, s3_bucket)
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
    got, version = delta_rows(s3_server, s3_bucket, "default.readings", tmp_path)
    assert version == t.version
    assert got == expected


def test_deltalake_reads_a_table_after_retention_expiry_and_vacuum_on_s3(s3_server, s3_bucket,
                                                                          tmp_path):
    lake = s3_lake(s3_server, s3_bucket)
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
    assert expired["snapshots_expired"] > 0 and expired["objects_deleted"] > 0

    client = s3_server.client()
    versions = log_versions(client, s3_bucket)
    assert versions[0] > 0, "expiry left commit 0"
    assert versions == list(range(versions[0], versions[-1] + 1))
    data = [k for k in list_keys(client, s3_bucket, table_prefix() + "data/")]
    assert not any((now - dt.timedelta(days=5)).strftime("%Y-%m-%d") in k for k in data), data

    expected = sorted_rows(iot_table([r for rows in recent for r in rows]))
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == expected
    got, version = delta_rows(s3_server, s3_bucket, "default.readings", tmp_path)
    assert version == t.version
    assert got == expected


# ------------------------------------------------------------ tables deltalake writes

_DELTA_WRITE_S3 = r"""
import json, os, sys
import pyarrow as pa
import deltalake
uri, options, src = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
with pa.OSFile(src, "rb") as f:
    t = pa.ipc.open_file(f).read_all()
deltalake.write_deltalake(uri, t, mode="append", storage_options=options)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def delta_write_s3(server, uri: str, data: pa.Table, scratch: Path) -> None:
    """deltalake.write_deltalake(uri, data, mode="append") on the server, committing with S3's
    conditional puts."""
    src = scratch / f"delta-write-{time.monotonic_ns()}.arrow"
    with pa.OSFile(str(src), "wb") as f:
        with pa.ipc.new_file(f, data.schema) as w:
            w.write_table(data)
    options = {**delta_storage_options(server), "conditional_put": "etag"}
    run_child(_DELTA_WRITE_S3, uri, json.dumps(options), str(src))


def test_timelake_reads_a_table_deltalake_wrote_on_s3(s3_server, s3_bucket, tmp_path):
    uri = f"s3://{s3_bucket}/lake/ext/made_by_delta_rs"
    first = iot_table(iot_series(T0, 4))
    second = iot_table(iot_series(T0 + dt.timedelta(days=2), 3, devices=("d", "e")))
    delta_write_s3(s3_server, uri, first, tmp_path)
    delta_write_s3(s3_server, uri, second, tmp_path)

    lake = s3_lake(s3_server, s3_bucket)
    assert "ext.made_by_delta_rs" in lake.tables()
    assert lake.table("ext.made_by_delta_rs").version == 1
    got = lake.sql("SELECT * FROM ext.made_by_delta_rs")
    expected = sorted_rows(pa.concat_tables([first, second]))
    assert sorted_rows(got.select(IOT_SCHEMA.names)) == expected


def test_each_reads_the_others_appends_on_s3(s3_server, s3_bucket, tmp_path):
    uri = f"s3://{s3_bucket}/lake/ext/shared"
    by_delta = iot_table(iot_series(T0, 3))
    delta_write_s3(s3_server, uri, by_delta, tmp_path)
    lake = s3_lake(s3_server, s3_bucket)
    by_timelake = iot_table(iot_series(T0 + dt.timedelta(days=1), 3, devices=("x",)))
    assert lake.table("ext.shared").append(by_timelake, batch_id="t-0")["version"] == 1
    again_by_delta = iot_table(iot_series(T0 + dt.timedelta(days=2), 2, devices=("y",)))
    delta_write_s3(s3_server, uri, again_by_delta, tmp_path)

    expected = sorted_rows(pa.concat_tables([by_delta, by_timelake, again_by_delta]))
    got, version = delta_rows(s3_server, s3_bucket, "ext.shared", tmp_path)
    assert version == 2
    assert got == expected
    assert sorted_rows(lake.sql("SELECT * FROM ext.shared").select(IOT_SCHEMA.names)) == expected
    assert_log_is_whole(s3_server.client(), s3_bucket, "ext.shared")
