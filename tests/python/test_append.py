"""Table.append: input kinds, alignment and casts, rejection, chunking, idempotency, versions."""

import datetime as dt
import random
import re

import deltalake
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import timelake
from helpers import (
    IOT_SCHEMA,
    T0,
    StreamOnly,
    all_files,
    at,
    count_rows,
    data_files,
    iot_series,
    iot_table,
    log_actions,
    sorted_rows,
    table_dir,
)

RESULT_KEYS = {"rows", "files", "bytes", "version", "commit_ms", "attempts", "duplicate"}
PART_NAME = re.compile(r"^part-[0-9a-fA-F-]{32,36}\.parquet$")

ROWS = [(T0 + dt.timedelta(minutes=i), d, 20.0 + i) for i in range(3) for d in ("a", "b")]


def stored(lake, name="readings") -> list[dict]:
    return sorted_rows(lake.sql(f"SELECT * FROM {name}"), ["device_id", "time"])


# ------------------------------------------------------------------ input kinds


def _as_record_batch(t):
    return t.combine_chunks().to_batches()[0]


def _as_reader(t):
    return pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=2))


INPUT_KINDS = {
    "pyarrow_table": lambda t: t,
    "pyarrow_record_batch": _as_record_batch,
    "pyarrow_record_batch_reader": _as_reader,
    "polars_dataframe": pl.from_arrow,
    "arrow_c_stream_object": StreamOnly,
}


@pytest.mark.parametrize("kind", list(INPUT_KINDS))
def test_append_accepts_input_kind(lake, readings, kind):
    data = INPUT_KINDS[kind](iot_table(ROWS))
    result = readings.append(data)
    assert result["rows"] == len(ROWS)
    assert stored(lake) == sorted_rows(iot_table(ROWS), ["device_id", "time"])


def test_append_of_chunked_table_keeps_every_row(lake, readings):
    rows = iot_series(T0, 50)
    chunked = pa.Table.from_batches(iot_table(rows).to_batches(max_chunksize=7))
    readings.append(chunked)
    assert count_rows(lake, "readings") == len(rows)


# ------------------------------------------------------------------ alignment and casts


def test_append_matches_columns_by_name_in_any_order(lake, readings):
    data = iot_table(ROWS).select(["temp", "time", "device_id"])
    readings.append(data)
    assert stored(lake) == sorted_rows(iot_table(ROWS), ["device_id", "time"])


def _typed_table(lake):
    schema = pa.schema(
        [
            ("time", pa.timestamp("us", tz="UTC")),
            ("device_id", pa.string()),
            ("count", pa.int64()),
            ("temp", pa.float64()),
        ]
    )
    return lake.create_table("typed", schema, series_key=["device_id"])


def test_append_casts_int32_into_int64_column(lake):
    t = _typed_table(lake)
    t.append(pa.table({"time": [T0], "device_id": ["a"], "count": pa.array([7], pa.int32()), "temp": [1.0]}))
    result = lake.sql("SELECT count FROM typed")
    assert result.schema.field("count").type == pa.int64()
    assert result.column("count").to_pylist() == [7]


def test_append_casts_float32_into_float64_column(lake):
    t = _typed_table(lake)
    t.append(pa.table({"time": [T0], "device_id": ["a"], "count": [1], "temp": pa.array([1.5], pa.float32())}))
    result = lake.sql("SELECT temp FROM typed")
    assert result.schema.field("temp").type == pa.float64()
    assert result.column("temp").to_pylist() == [1.5]


def test_append_casts_large_string_into_string_column(lake, readings):
    data = iot_table(ROWS)
    data = data.set_column(1, "device_id", data.column("device_id").cast(pa.large_string()))
    readings.append(data)
    assert stored(lake) == sorted_rows(iot_table(ROWS), ["device_id", "time"])


def test_append_casts_millisecond_timestamps_into_microsecond_column(lake, readings):
    data = iot_table(ROWS)
    data = data.set_column(0, "time", data.column("time").cast(pa.timestamp("ms", tz="UTC")))
    readings.append(data)
    assert stored(lake) == sorted_rows(iot_table(ROWS), ["device_id", "time"])


def test_append_accepts_nanosecond_timestamp_that_is_whole_microsecond(lake, readings):
    ns = pa.array([1_709_600_000_123_456_000], pa.timestamp("ns", tz="UTC"))
    readings.append(pa.table({"time": ns, "device_id": ["a"], "temp": [1.0]}))
    got = lake.sql("SELECT time FROM readings").column("time")[0].as_py()
    assert got == dt.datetime(2024, 3, 5, 0, 53, 20, 123456, tzinfo=dt.timezone.utc)


def test_append_with_missing_nullable_column_stores_nulls(lake, readings):
    readings.append(pa.table({"time": [T0], "device_id": ["a"]}))
    assert lake.sql("SELECT temp FROM readings").to_pylist() == [{"temp": None}]


def test_append_with_missing_non_nullable_column_is_value_error(lake):
    schema = pa.schema(
        [("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), pa.field("temp", pa.float64(), nullable=False)]
    )
    t = lake.create_table("strict", schema)
    with pytest.raises(ValueError):
        t.append(pa.table({"time": [T0], "device_id": ["a"]}))


def test_append_with_null_in_non_nullable_column_is_value_error(lake):
    schema = pa.schema(
        [("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), pa.field("temp", pa.float64(), nullable=False)]
    )
    t = lake.create_table("strict", schema)
    with pytest.raises(ValueError):
        t.append(pa.table({"time": [T0, T0], "device_id": ["a", "b"], "temp": [1.0, None]}))


# ------------------------------------------------------------------ rejection


def _unknown_column():
    return iot_table(ROWS).append_column("humidity", pa.array([0.5] * len(ROWS)))


def _unsafe_string():
    return pa.table({"time": [T0], "device_id": ["a"], "temp": ["abc"]})


def _null_time():
    return pa.table(
        {"time": pa.array([T0, None], pa.timestamp("us", tz="UTC")), "device_id": ["a", "b"], "temp": [1.0, 2.0]}
    )


def _sub_microsecond():
    ns = pa.array([1_709_600_000_123_456_789], pa.timestamp("ns", tz="UTC"))
    return pa.table({"time": ns, "device_id": ["a"], "temp": [1.0]})


REJECTED = {
    "unknown_column": _unknown_column,
    "string_abc_into_float64": _unsafe_string,
    "null_time": _null_time,
    "nanoseconds_not_whole_microsecond": _sub_microsecond,
}


def test_append_with_unknown_column_is_value_error(readings):
    with pytest.raises(ValueError, match="humidity"):
        readings.append(_unknown_column())


def test_append_of_unparseable_string_into_float_column_is_value_error(readings):
    with pytest.raises(ValueError):
        readings.append(_unsafe_string())


def test_append_of_fractional_float_into_int64_column_is_value_error(lake):
    t = _typed_table(lake)
    with pytest.raises(ValueError):
        t.append(pa.table({"time": [T0], "device_id": ["a"], "count": [1.5], "temp": [1.0]}))


def test_append_with_null_time_is_value_error(readings):
    with pytest.raises(ValueError):
        readings.append(_null_time())


def test_append_of_sub_microsecond_timestamp_is_value_error(readings):
    with pytest.raises(ValueError):
        readings.append(_sub_microsecond())


@pytest.mark.parametrize("case", list(REJECTED))
def test_rejected_append_writes_nothing(lake, readings, case):
    readings.append(iot_table(ROWS))
    readings.info()  # info() waits for the checkpoints and index records appends leave to the handle's upkeep thread
    tdir = table_dir(readings)
    files_before = all_files(tdir)
    with pytest.raises(ValueError):
        readings.append(REJECTED[case]())
    assert readings.version == 1
    assert lake.table("readings").version == 1
    assert all_files(tdir) == files_before


def test_rejected_batch_in_a_stream_writes_nothing(lake, readings):
    good = iot_table(ROWS).to_batches()[0]
    bad = pa.record_batch(
        [pa.array([T0, None], pa.timestamp("us", tz="UTC")), pa.array(["a", "b"]), pa.array([1.0, 2.0])],
        schema=IOT_SCHEMA,
    )
    reader = pa.RecordBatchReader.from_batches(IOT_SCHEMA, [good, bad])
    files_before = all_files(table_dir(readings))
    with pytest.raises(ValueError):
        readings.append(reader)
    assert lake.table("readings").version == 0
    assert all_files(table_dir(readings)) == files_before


# ------------------------------------------------------------------ result dict


def test_append_result_has_seed_keys(readings):
    result = readings.append(iot_table(ROWS))
    assert set(result) - {"maintenance"} == RESULT_KEYS


def test_append_result_counts_rows_files_and_version(readings):
    result = readings.append(iot_table(ROWS))
    assert (result["rows"], result["files"], result["version"]) == (len(ROWS), 1, 1)


def test_append_result_bytes_is_size_of_written_files(readings):
    result = readings.append(iot_table(ROWS))
    assert result["bytes"] == sum(p.stat().st_size for p in data_files(table_dir(readings)))


def test_append_result_single_writer_takes_one_attempt_and_is_not_duplicate(readings):
    result = readings.append(iot_table(ROWS))
    assert result["attempts"] == 1
    assert result["duplicate"] is False


def test_append_result_commit_ms_is_non_negative_number(readings):
    result = readings.append(iot_table(ROWS))
    assert isinstance(result["commit_ms"], (int, float)) and result["commit_ms"] >= 0


def test_append_with_maintain_false_reports_no_maintenance(readings):
    result = readings.append(iot_table(ROWS), maintain=False)
    assert "maintenance" not in result


def test_append_with_maintain_true_still_appends(lake, readings):
    readings.append(iot_table(ROWS), maintain=True)
    assert count_rows(lake, "readings") == len(ROWS)


# ------------------------------------------------------------------ chunking and file layout

THREE_DAYS = [
    (at(2024, 3, 5, 23, 59), "b", 1.0),
    (at(2024, 3, 6, 0, 0), "a", 2.0),
    (at(2024, 3, 7, 12, 0), "c", 3.0),
    (at(2024, 3, 5, 0, 0), "a", 4.0),
    (at(2024, 3, 6, 23, 0), "b", 5.0),
    (at(2024, 3, 5, 12, 0), "c", 6.0),
    (at(2024, 3, 6, 6, 0), "a", 7.0),
    (at(2024, 3, 7, 0, 1), "a", 8.0),
    (at(2024, 3, 5, 6, 0), "a", 9.0),
]


def test_batch_spanning_three_days_writes_three_files(readings):
    result = readings.append(iot_table(THREE_DAYS))
    assert result["files"] == 3
    assert len(data_files(table_dir(readings))) == 3


def test_day_chunk_files_are_in_day_folders(readings):
    readings.append(iot_table(THREE_DAYS))
    folders = sorted(p.parent.name for p in data_files(table_dir(readings)))
    assert folders == ["2024-03-05", "2024-03-06", "2024-03-07"]


def test_data_files_are_named_part_uuid_parquet(readings):
    readings.append(iot_table(THREE_DAYS))
    names = [p.name for p in data_files(table_dir(readings))]
    assert all(PART_NAME.match(n) for n in names), names


def test_each_day_file_holds_only_rows_of_its_day(readings):
    readings.append(iot_table(THREE_DAYS))
    for path in data_files(table_dir(readings)):
        times = pq.read_table(path).column("time").to_pylist()
        assert {t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d") for t in times} == {path.parent.name}


def test_files_hold_every_row_once(readings):
    readings.append(iot_table(THREE_DAYS))
    got = pa.concat_tables(pq.read_table(p) for p in data_files(table_dir(readings)))
    assert sorted_rows(got.select(["time", "device_id", "temp"])) == sorted_rows(iot_table(THREE_DAYS))


def test_rows_in_each_file_are_sorted_by_series_key_then_time(readings):
    rows = iot_series(T0, 30, devices=("c", "a", "b"))
    random.Random(7).shuffle(rows)
    readings.append(iot_table(rows))
    for path in data_files(table_dir(readings)):
        keys = [(r["device_id"], r["time"]) for r in pq.read_table(path).to_pylist()]
        assert keys == sorted(keys)


def test_hour_chunk_files_are_in_hour_folders(lake):
    t = lake.create_table("readings", IOT_SCHEMA, chunk="hour")
    t.append(iot_table([(at(2024, 3, 5, 7, 59), "a", 1.0), (at(2024, 3, 5, 8, 0), "a", 2.0)]))
    assert sorted(p.parent.name for p in data_files(table_dir(t))) == ["2024-03-05T07", "2024-03-05T08"]


def test_month_chunk_files_are_in_month_folders(lake):
    t = lake.create_table("readings", IOT_SCHEMA, chunk="month")
    t.append(iot_table([(at(2024, 2, 29, 23, 59), "a", 1.0), (at(2024, 3, 1, 0, 0), "a", 2.0)]))
    assert sorted(p.parent.name for p in data_files(table_dir(t))) == ["2024-02", "2024-03"]


def test_chunks_are_utc_for_non_utc_input_time_zone(lake, readings):
    paris = pa.array([dt.datetime(2024, 3, 6, 0, 30, tzinfo=dt.timezone.utc)], pa.timestamp("us", tz="Europe/Paris"))
    readings.append(pa.table({"time": paris, "device_id": ["a"], "temp": [1.0]}))
    assert [p.parent.name for p in data_files(table_dir(readings))] == ["2024-03-06"]


def test_plain_table_files_are_directly_in_data_folder(lake):
    t = lake.create_table("devices", pa.schema([("device_id", pa.string()), ("model", pa.string())]))
    t.append(pa.table({"device_id": ["a", "b"], "model": ["x", "y"]}))
    files = data_files(table_dir(t))
    assert len(files) == 1 and files[0].parent == table_dir(t) / "data"


def test_plain_table_append_stores_rows(lake):
    t = lake.create_table("devices", pa.schema([("device_id", pa.string()), ("model", pa.string())]))
    t.append(pa.table({"device_id": ["a", "b"], "model": ["x", "y"]}))
    assert sorted_rows(lake.sql("SELECT * FROM devices")) == [
        {"device_id": "a", "model": "x"},
        {"device_id": "b", "model": "y"},
    ]


# ------------------------------------------------------------------ batch ids


def test_append_with_same_batch_id_is_duplicate(readings):
    readings.append(iot_table(ROWS), batch_id="gw-1-000001")
    result = readings.append(iot_table(ROWS), batch_id="gw-1-000001")
    assert result["duplicate"] is True


def test_duplicate_append_reports_nothing_written_at_current_version(readings):
    readings.append(iot_table(ROWS), batch_id="gw-1-000001")
    result = readings.append(iot_table(ROWS), batch_id="gw-1-000001")
    assert (result["rows"], result["files"], result["bytes"], result["version"]) == (0, 0, 0, 1)


def test_duplicate_append_leaves_version_and_rows_unchanged(lake, readings):
    readings.append(iot_table(ROWS), batch_id="gw-1-000001")
    readings.info()  # info() waits for the checkpoints and index records appends leave to the handle's upkeep thread
    files_before = all_files(table_dir(readings))
    readings.append(iot_table(ROWS), batch_id="gw-1-000001")
    assert lake.table("readings").version == 1
    assert count_rows(lake, "readings") == len(ROWS)
    assert all_files(table_dir(readings)) == files_before


def test_append_with_new_batch_id_is_not_duplicate(lake, readings):
    readings.append(iot_table(ROWS), batch_id="gw-1-000001")
    result = readings.append(iot_table(ROWS), batch_id="gw-1-000002")
    assert result["duplicate"] is False
    assert count_rows(lake, "readings") == 2 * len(ROWS)


def test_batch_ids_are_per_table(lake, readings):
    other = lake.create_table("other", IOT_SCHEMA)
    readings.append(iot_table(ROWS), batch_id="gw-1-000001")
    assert other.append(iot_table(ROWS), batch_id="gw-1-000001")["duplicate"] is False


def test_batch_id_is_recognised_by_a_fresh_lake(readings, lake_path):
    readings.append(iot_table(ROWS), batch_id="gw-1-000001")
    again = timelake.Lake(str(lake_path)).table("readings")
    assert again.append(iot_table(ROWS), batch_id="gw-1-000001")["duplicate"] is True


def test_batch_id_is_recognised_after_a_checkpoint(readings, lake_path):
    readings.append(iot_table(ROWS), batch_id="first-batch")
    for i in range(11):
        readings.append(iot_table([(T0 + dt.timedelta(hours=1, seconds=i), "z", float(i))]), batch_id=f"b-{i}")
    readings.info()  # waits for the checkpoint, which the handle's upkeep thread writes after append 10 returned
    assert (table_dir(readings) / "_delta_log" / f"{10:020d}.checkpoint.parquet").exists()
    again = timelake.Lake(str(lake_path)).table("readings")
    assert again.append(iot_table(ROWS), batch_id="first-batch")["duplicate"] is True


def test_batch_id_is_recorded_as_delta_txn(readings):
    readings.append(iot_table(ROWS), batch_id="gw-1-000001")
    txns = [a["txn"] for a in log_actions(table_dir(readings), 1) if "txn" in a]
    assert len(txns) == 1 and txns[0]["appId"] and "lastUpdated" in txns[0]


def test_empty_append_with_batch_id_records_the_batch_id(lake, readings):
    readings.append(IOT_SCHEMA.empty_table(), batch_id="gw-1-000001")
    result = readings.append(iot_table(ROWS), batch_id="gw-1-000001")
    assert result["duplicate"] is True
    assert count_rows(lake, "readings") == 0


def test_empty_append_with_batch_id_commits_a_version(readings):
    result = readings.append(IOT_SCHEMA.empty_table(), batch_id="gw-1-000001")
    assert (result["rows"], result["files"], result["version"]) == (0, 0, 1)


# ------------------------------------------------------------------ versions and handles


def test_append_advances_handle_to_new_version(readings):
    result = readings.append(iot_table(ROWS))
    assert readings.version == result["version"] == 1


def test_each_append_commits_one_version(readings):
    versions = [readings.append(iot_table(ROWS))["version"] for _ in range(3)]
    assert versions == [1, 2, 3]


def test_second_handle_sees_new_data_after_refresh(lake, readings):
    other = lake.table("readings")
    readings.append(iot_table(ROWS))
    other.refresh()
    assert other.version == 1
    assert other.info()["size"]["rows"] == len(ROWS)


def test_append_from_stale_handle_commits_after_newer_version(lake, readings):
    stale = lake.table("readings")
    readings.append(iot_table(ROWS))
    result = stale.append(iot_table([(T0, "z", 0.0)]))
    assert result["version"] == 2
    assert count_rows(lake, "readings") == len(ROWS) + 1


def test_appends_accumulate_rows(lake, readings):
    readings.append(iot_table(ROWS))
    readings.append(iot_table(THREE_DAYS))
    assert count_rows(lake, "readings") == len(ROWS) + len(THREE_DAYS)


# -- appends spanning many chunks ---------------------------------------------------------------


def _hourly_table(lake):
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("id", pa.string()), ("v", pa.float64())])
    return lake.create_table("hourly", schema=schema, time_column="time", series_key="id", chunk="hour")


def _one_row_per_hour(n, start=dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)):
    times = [start + dt.timedelta(hours=i) for i in range(n)]
    return pa.table({"time": pa.array(times, pa.timestamp("us", tz="UTC")), "id": ["a"] * n,
                     "v": [float(i) for i in range(n)]})


def _data_files(table_dir):
    return sorted(str(p.relative_to(table_dir)) for p in (table_dir / "data").rglob("*.parquet"))


def test_an_append_spanning_twenty_thousand_hourly_chunks_lands_whole(tmp_path):
    # A review's append of 60,000 rows an hour apart (a file per chunk) ended the process with
    # std::bad_alloc -> terminate and left ~35,000 files behind: a thread per file's close.
    lake = timelake.Lake(tmp_path)
    table = _hourly_table(lake)
    result = table.append(_one_row_per_hour(20_000))
    assert result["rows"] == 20_000 and result["files"] == 20_000
    assert lake.sql("SELECT count(*) AS n, sum(v) AS s FROM hourly").to_pylist() == [
        {"n": 20_000, "s": float(sum(range(20_000)))}]
    # Every file on disk is one the log adds (delta-rs reads the log): none left over.
    table_dir = tmp_path / "default" / "hourly"
    logged = [uri.split("/hourly/", 1)[1] for uri in deltalake.DeltaTable(str(table_dir)).file_uris()]
    assert sorted(logged) == _data_files(table_dir)


def test_an_append_that_fails_on_one_of_many_chunks_leaves_no_file(tmp_path):
    # The 3,000th hour's folder cannot be made (a plain file holds its name): the append fails
    # after thousands of other files were written, and every one of them is deleted.
    lake = timelake.Lake(tmp_path)
    table = _hourly_table(lake)
    table_dir = tmp_path / "default" / "hourly"
    blocked = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=3_000)
    (table_dir / "data").mkdir(exist_ok=True)
    (table_dir / "data" / blocked.strftime("%Y-%m-%dT%H")).write_text("not a folder")
    with pytest.raises(RuntimeError):
        table.append(_one_row_per_hour(6_000))
    assert _data_files(table_dir) == []
    assert table.version == 0
    assert lake.sql("SELECT count(*) AS n FROM hourly").to_pylist() == [{"n": 0}]
