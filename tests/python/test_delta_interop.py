"""Every timelake table is a Delta table: delta-rs (deltalake) reads what timelake writes."""

import datetime as dt
import decimal
import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import timelake
from helpers import (
    NO_BACKGROUND,
    IOT_SCHEMA,
    T0,
    at,
    commit_versions,
    data_files,
    delta_read,
    delta_write,
    iot_series,
    iot_table,
    log_actions,
    sorted_rows,
    table_dir,
)

# ------------------------------------------------------------------ tables timelake writes

NAIVE_SCHEMA = pa.schema([("time", pa.timestamp("us")), ("device_id", pa.string()), ("temp", pa.float64())])

TYPED_SCHEMA = pa.schema(
    [
        ("time", pa.timestamp("us", tz="UTC")),
        ("device_id", pa.string()),
        ("level", pa.int32()),
        ("count", pa.int64()),
        ("ratio", pa.float32()),
        ("ok", pa.bool_()),
        ("day", pa.date32()),
        ("price", pa.decimal128(10, 3)),
    ]
)

PLAIN_SCHEMA = pa.schema([("device_id", pa.string()), ("model", pa.string()), ("installed", pa.int64())])


def _iot(rows):
    return iot_table(rows)


def _naive(rows):
    return pa.table(
        {
            "time": [r[0].replace(tzinfo=None) for r in rows],
            "device_id": [r[1] for r in rows],
            "temp": [r[2] for r in rows],
        },
        schema=NAIVE_SCHEMA,
    )


def _typed(rows):
    return pa.table(
        {
            "time": [r[0] for r in rows],
            "device_id": [r[1] for r in rows],
            "level": [i % 7 for i in range(len(rows))],
            "count": [i * 1000 for i in range(len(rows))],
            "ratio": [i / 4 for i in range(len(rows))],
            "ok": [i % 2 == 0 for i in range(len(rows))],
            "day": [r[0].date() for r in rows],
            "price": [decimal.Decimal(i) / 8 for i in range(len(rows))],
        },
        schema=TYPED_SCHEMA,
    )


def _plain(rows):
    return pa.table(
        {
            "device_id": [f"{r[1]}-{i}" for i, r in enumerate(rows)],
            "model": [r[1] for r in rows],
            "installed": list(range(len(rows))),
        },
        schema=PLAIN_SCHEMA,
    )


# name -> (schema, create_table kwargs, rows -> pa.Table)
CASES = {
    "iot_day_chunk": (IOT_SCHEMA, {"series_key": ["device_id"]}, _iot),
    "iot_hour_chunk_no_series_key": (IOT_SCHEMA, {"chunk": "hour"}, _iot),
    "iot_month_chunk_dedup_last": (IOT_SCHEMA, {"series_key": ["device_id"], "chunk": "month", "dedup": "last"}, _iot),
    "naive_timestamps": (NAIVE_SCHEMA, {"series_key": ["device_id"]}, _naive),
    "several_types": (TYPED_SCHEMA, {"series_key": ["device_id"]}, _typed),
    "plain_table": (PLAIN_SCHEMA, {}, _plain),
}

BATCHES = [
    iot_series(T0, 6, step=dt.timedelta(hours=5)),
    iot_series(T0 + dt.timedelta(days=40), 4, step=dt.timedelta(minutes=7)),
]


def build(lake, case, batches=BATCHES):
    schema, kwargs, make = CASES[case]
    t = lake.create_table(case, schema, **kwargs)
    appended = [make(rows) for rows in batches]
    for data in appended:
        t.append(data)
    return t, (pa.concat_tables(appended) if appended else None)


@pytest.mark.parametrize("case", list(CASES))
def test_deltalake_reads_identical_rows(lake, tmp_path, case):
    t, expected = build(lake, case)
    got, _ = delta_read(table_dir(t), tmp_path)
    assert sorted_rows(got.select(expected.column_names)) == sorted_rows(expected)


@pytest.mark.parametrize("case", list(CASES))
def test_deltalake_reads_same_column_names_and_types(lake, tmp_path, case):
    t, expected = build(lake, case)
    got, _ = delta_read(table_dir(t), tmp_path)
    assert list(zip(got.schema.names, got.schema.types)) == list(zip(expected.schema.names, expected.schema.types))


@pytest.mark.parametrize("case", list(CASES))
def test_deltalake_reads_same_version(lake, tmp_path, case):
    t, _ = build(lake, case)
    _, meta = delta_read(table_dir(t), tmp_path)
    assert meta["version"] == t.version == 2


def test_deltalake_reads_properties_as_configuration(lake, tmp_path):
    t = lake.create_table("readings", IOT_SCHEMA, properties={"owner": "team-iot"})
    _, meta = delta_read(table_dir(t), tmp_path)
    assert meta["configuration"].get("owner") == "team-iot"


# ------------------------------------------------------------------ protocol and schema


def first_commit(t, action):
    found = [a[action] for a in log_actions(table_dir(t), 0) if action in a]
    assert len(found) == 1, found
    return found[0]


def test_plain_types_use_reader_1_writer_2_without_features(lake):
    t, _ = build(lake, "iot_day_chunk", batches=[])
    protocol = first_commit(t, "protocol")
    assert (protocol["minReaderVersion"], protocol["minWriterVersion"]) == (1, 2)
    assert not protocol.get("readerFeatures") and not protocol.get("writerFeatures")


def test_naive_timestamp_table_uses_timestamp_ntz_feature(lake):
    t, _ = build(lake, "naive_timestamps", batches=[])
    protocol = first_commit(t, "protocol")
    assert (protocol["minReaderVersion"], protocol["minWriterVersion"]) == (3, 7)
    assert "timestampNtz" in protocol["readerFeatures"]
    assert "timestampNtz" in protocol["writerFeatures"]


def test_naive_timestamp_table_is_read_by_deltalake_with_ntz_protocol(lake, tmp_path):
    t, _ = build(lake, "naive_timestamps")
    _, meta = delta_read(table_dir(t), tmp_path)
    assert "timestampNtz" in (meta["reader_features"] or [])


def test_schema_string_uses_delta_type_names(lake):
    t, _ = build(lake, "several_types", batches=[])
    fields = json.loads(first_commit(t, "metaData")["schemaString"])["fields"]
    assert {f["name"]: f["type"] for f in fields} == {
        "time": "timestamp",
        "device_id": "string",
        "level": "integer",
        "count": "long",
        "ratio": "float",
        "ok": "boolean",
        "day": "date",
        "price": "decimal(10,3)",
    }


def test_naive_timestamp_maps_to_timestamp_ntz(lake):
    t, _ = build(lake, "naive_timestamps", batches=[])
    fields = json.loads(first_commit(t, "metaData")["schemaString"])["fields"]
    assert fields[0]["name"] == "time" and fields[0]["type"] == "timestamp_ntz"


# ------------------------------------------------------------------ commits


def test_commit_info_is_first_line_of_every_commit(lake):
    t, _ = build(lake, "iot_day_chunk")
    t.maintain()
    for v in commit_versions(table_dir(t)):
        assert "commitInfo" in log_actions(table_dir(t), v)[0], v


def test_append_commit_info_is_blind_append_by_timelake_with_txn_id(lake):
    t, _ = build(lake, "iot_day_chunk")
    info = log_actions(table_dir(t), 1)[0]["commitInfo"]
    assert info["isBlindAppend"] is True
    assert info["engineInfo"].startswith("timelake/")
    assert info["txnId"]


def test_commit_info_txn_ids_differ_between_commits(lake):
    t, _ = build(lake, "iot_day_chunk")
    ids = {log_actions(table_dir(t), v)[0]["commitInfo"]["txnId"] for v in (1, 2)}
    assert len(ids) == 2


def test_add_actions_point_at_chunk_files_with_data_change(lake):
    t, _ = build(lake, "iot_day_chunk", batches=[BATCHES[0]])
    adds = [a["add"] for a in log_actions(table_dir(t), 1) if "add" in a]
    on_disk = sorted(str(p.relative_to(table_dir(t))) for p in data_files(table_dir(t)))
    assert sorted(a["path"] for a in adds) == on_disk
    assert all(a["dataChange"] is True and a["path"].startswith("data/") for a in adds)


def test_add_action_size_is_file_size(lake):
    t, _ = build(lake, "iot_day_chunk", batches=[BATCHES[0]])
    for add in (a["add"] for a in log_actions(table_dir(t), 1) if "add" in a):
        assert add["size"] == (table_dir(t) / add["path"]).stat().st_size


# ------------------------------------------------------------------ stats


def _strict_json(text):
    def reject(name):
        raise ValueError(f"non-JSON constant {name}")

    return json.loads(text, parse_constant=reject)


def only_add(t, version=1):
    adds = [a["add"] for a in log_actions(table_dir(t), version) if "add" in a]
    assert len(adds) == 1, adds
    return adds[0]


def test_add_stats_have_num_records_min_max_null_count(lake, readings):
    readings.append(iot_table([(at(2024, 3, 5, 1), "b", 3.5), (at(2024, 3, 5, 2), "a", -1.0), (at(2024, 3, 5, 3), "c", None)]))
    stats = _strict_json(only_add(readings)["stats"])
    assert stats["numRecords"] == 3
    assert (stats["minValues"]["temp"], stats["maxValues"]["temp"]) == (-1.0, 3.5)
    assert (stats["minValues"]["device_id"], stats["maxValues"]["device_id"]) == ("a", "c")
    assert stats["nullCount"] == {"time": 0, "device_id": 0, "temp": 1}


def test_add_stats_num_records_matches_parquet_file(lake, readings):
    readings.append(iot_table(iot_series(T0, 4)))
    add = only_add(readings)
    assert _strict_json(add["stats"])["numRecords"] == pq.ParquetFile(table_dir(readings) / add["path"]).metadata.num_rows


def _parse_utc(text):
    assert text.endswith("Z"), text
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_timestamp_stats_are_utc_floored_and_ceiled_to_millisecond(lake, readings):
    lo = dt.datetime(2024, 3, 5, 1, 0, 0, 123456, tzinfo=dt.timezone.utc)
    hi = dt.datetime(2024, 3, 5, 2, 0, 5, 1, tzinfo=dt.timezone.utc)
    readings.append(iot_table([(lo, "a", 1.0), (hi, "a", 2.0)]))
    stats = _strict_json(only_add(readings)["stats"])
    assert _parse_utc(stats["minValues"]["time"]) == lo.replace(microsecond=123000)
    assert _parse_utc(stats["maxValues"]["time"]) == hi.replace(microsecond=1000)


def test_stats_never_contain_nan_or_infinity(lake, readings):
    readings.append(iot_table([(at(2024, 3, 5, 1), "a", math.nan), (at(2024, 3, 5, 2), "a", math.inf), (at(2024, 3, 5, 3), "a", 1.0)]))
    stats = _strict_json(only_add(readings)["stats"])
    assert stats["numRecords"] == 3


def test_long_string_stats_are_truncated_and_still_bound_values(lake, readings):
    long_a = "sensor-" + "a" * 40
    long_z = "sensor-" + "z" * 40
    readings.append(iot_table([(at(2024, 3, 5, 1), long_a, 1.0), (at(2024, 3, 5, 2), long_z, 2.0)]))
    stats = _strict_json(only_add(readings)["stats"])
    lo, hi = stats["minValues"]["device_id"], stats["maxValues"]["device_id"]
    assert len(lo) <= 32 and long_a.startswith(lo)
    assert len(hi) <= 33 and hi >= long_z


# ------------------------------------------------------------------ checkpoints


def eleven_commits_after_create(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    expected = []
    for i in range(11):
        rows = iot_series(T0 + dt.timedelta(hours=i), 2, devices=("a", "b"))
        t.append(iot_table(rows), batch_id=f"batch-{i}")
        expected += rows
    t.info()  # info() waits for the checkpoints and index records appends leave to the handle's upkeep thread
    return t, iot_table(expected)


def test_a_checkpoint_that_fails_in_the_background_is_reported_by_the_next_append(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    # A folder where checkpoint 10 should go: writing it fails after append 10 returned.
    (table_dir(t) / "_delta_log" / "00000000000000000010.checkpoint.parquet").mkdir()
    results = []
    for i in range(11):
        rows = iot_series(T0 + dt.timedelta(hours=i), 2, devices=("a", "b"))
        results.append(t.append(iot_table(rows), batch_id=f"batch-{i}"))
        if i == 9:
            t.info()  # let the upkeep try (and fail) before the next append
    assert all("maintenance" not in r for r in results[:10])
    assert results[10]["version"] == 11  # the append itself committed
    assert "earlier append's checkpoint" in results[10]["maintenance"]["error"]
    assert lake.sql("SELECT count(*) AS n FROM readings").column("n")[0].as_py() == 44


def test_checkpoint_is_written_at_version_ten(lake):
    t, _ = eleven_commits_after_create(lake)
    assert (table_dir(t) / "_delta_log" / "00000000000000000010.checkpoint.parquet").is_file()


def test_last_checkpoint_names_version_ten_without_parts(lake):
    t, _ = eleven_commits_after_create(lake)
    hint = json.loads((table_dir(t) / "_delta_log" / "_last_checkpoint").read_text())
    assert hint["version"] == 10
    assert "parts" not in hint


def test_checkpoint_holds_protocol_metadata_and_live_adds(lake):
    t, _ = eleven_commits_after_create(lake)
    cp = pq.read_table(table_dir(t) / "_delta_log" / "00000000000000000010.checkpoint.parquet")
    adds = [r for r in cp.column("add").to_pylist() if r is not None]
    live = [a["add"]["path"] for v in range(1, 11) for a in log_actions(table_dir(t), v) if "add" in a]
    assert sorted(a["path"] for a in adds) == sorted(live)
    assert sum(r is not None for r in cp.column("protocol").to_pylist()) == 1
    assert sum(r is not None for r in cp.column("metaData").to_pylist()) == 1


def test_checkpoint_holds_no_commit_info(lake):
    t, _ = eleven_commits_after_create(lake)
    cp = pq.read_table(table_dir(t) / "_delta_log" / "00000000000000000010.checkpoint.parquet")
    assert "commitInfo" not in cp.column_names or cp.column("commitInfo").null_count == cp.num_rows


def test_deltalake_reads_identical_rows_after_checkpoint(lake, tmp_path):
    t, expected = eleven_commits_after_create(lake)
    got, meta = delta_read(table_dir(t), tmp_path)
    assert meta["version"] == 11
    assert sorted_rows(got) == sorted_rows(expected)


def test_deltalake_reads_checkpoint_without_earlier_commits(lake, tmp_path):
    t, expected = eleven_commits_after_create(lake)
    for v in range(0, 10):
        (table_dir(t) / "_delta_log" / f"{v:020d}.json").unlink()
    got, _ = delta_read(table_dir(t), tmp_path)
    assert sorted_rows(got) == sorted_rows(expected)


def test_timelake_reads_checkpoint_without_earlier_commits(lake, lake_path):
    t, expected = eleven_commits_after_create(lake)
    for v in range(0, 10):
        (table_dir(t) / "_delta_log" / f"{v:020d}.json").unlink()
    fresh = timelake.Lake(str(lake_path))
    assert sorted_rows(fresh.sql("SELECT * FROM readings")) == sorted_rows(expected)


def test_fresh_lake_reopens_table_after_25_commits_at_same_version_and_rows(lake, lake_path, tmp_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    expected = []
    for i in range(25):
        rows = [(T0 + dt.timedelta(minutes=i), d, float(i)) for d in ("a", "b")]
        t.append(iot_table(rows))
        expected += rows
    fresh = timelake.Lake(str(lake_path))
    assert fresh.table("readings").version == 25
    assert sorted_rows(fresh.sql("SELECT * FROM readings")) == sorted_rows(iot_table(expected))
    got, meta = delta_read(table_dir(t), tmp_path)
    assert meta["version"] == 25
    assert sorted_rows(got) == sorted_rows(iot_table(expected))


# ------------------------------------------------------------------ tables other engines wrote


def test_table_written_by_deltalake_is_listed_and_queryable(lake, lake_path, tmp_path):
    data = pa.table({"device_id": ["a", "b", "c"], "temp": [1.0, 2.0, 3.0]})
    delta_write(lake_path / "ext" / "made_by_delta_rs", data, tmp_path)
    assert "ext.made_by_delta_rs" in lake.tables()
    got = lake.sql("SELECT * FROM ext.made_by_delta_rs")
    assert sorted_rows(got) == sorted_rows(data)


def test_timelake_append_to_deltalake_table_is_read_by_deltalake(lake, lake_path, tmp_path):
    path = lake_path / "ext" / "shared"
    first = pa.table({"device_id": ["a"], "temp": [1.0]})
    delta_write(path, first, tmp_path)
    lake.table("ext.shared").append(pa.table({"device_id": ["b"], "temp": [2.0]}))
    got, meta = delta_read(path, tmp_path)
    assert meta["version"] == 1
    assert sorted_rows(got) == [{"device_id": "a", "temp": 1.0}, {"device_id": "b", "temp": 2.0}]


@pytest.mark.parametrize("dedup", ["last", "first"])
def test_a_checkpoint_another_engine_writes_keeps_which_append_wins(lake_path, dedup):
    """delta-rs writes a checkpoint of a dedup table (legal Delta: it copies each add's tags and
    nothing else). The order of the appends must survive it: their sequence tags are in the
    commits themselves, so sql(), latest() and maintain() still agree on the winner."""
    import deltalake

    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup=dedup, properties=NO_BACKGROUND)
    for i in range(5):
        t.append(iot_table([(T0, "a", float(i)), (T0, "b", float(i))]), batch_id=f"x{i}", maintain=False)
    want = {"a": 4.0, "b": 4.0} if dedup == "last" else {"a": 0.0, "b": 0.0}
    deltalake.DeltaTable(str(table_dir(t))).create_checkpoint()
    fresh = timelake.Lake(str(lake_path))
    assert {r["device_id"]: r["temp"] for r in fresh.sql("SELECT device_id, temp FROM readings").to_pylist()} == want
    assert {r["device_id"]: r["temp"] for r in fresh.latest("readings").to_pylist()} == want
    fresh.table("readings").maintain()
    again = timelake.Lake(str(lake_path))
    assert {r["device_id"]: r["temp"] for r in again.sql("SELECT device_id, temp FROM readings").to_pylist()} == want
