"""Lake.latest: the newest row of every series."""

import datetime as dt

import pyarrow as pa
import pytest

import timelake
from helpers import IOT_SCHEMA, T0, at, iot_series, iot_table, sorted_rows


def newest_by_series(rows):
    """Model: for (time, device, temp) rows, the row with the greatest time per device."""
    best = {}
    for t, d, v in rows:
        if d not in best or t > best[d][0]:
            best[d] = (t, d, v)
    return sorted_rows(iot_table(best.values()), ["device_id"])


def latest_rows(lake, table="readings"):
    return sorted_rows(lake.latest(table), ["device_id"])


def test_latest_returns_newest_row_per_series(lake, readings):
    rows = iot_series(T0, 5)
    readings.append(iot_table(rows))
    assert latest_rows(lake) == newest_by_series(rows)


def test_latest_returns_all_columns_of_declared_schema(lake, readings):
    readings.append(iot_table(iot_series(T0, 2)))
    got = lake.latest("readings")
    assert list(zip(got.schema.names, got.schema.types)) == list(zip(IOT_SCHEMA.names, IOT_SCHEMA.types))


def test_latest_accepts_table_object(lake, readings):
    rows = iot_series(T0, 3)
    readings.append(iot_table(rows))
    assert sorted_rows(lake.latest(readings), ["device_id"]) == newest_by_series(rows)


def test_latest_accepts_qualified_name(lake):
    t = lake.create_table("iot.readings", IOT_SCHEMA, series_key=["device_id"])
    rows = iot_series(T0, 3)
    t.append(iot_table(rows))
    assert latest_rows(lake, "iot.readings") == newest_by_series(rows)


def test_latest_returns_pyarrow_table(lake, readings):
    readings.append(iot_table(iot_series(T0, 1)))
    assert isinstance(lake.latest("readings"), pa.Table)


def test_latest_merges_appends(lake, readings):
    first = iot_series(T0, 3, devices=("a", "b"))
    second = iot_series(T0 + dt.timedelta(hours=1), 2, devices=("b", "c"))
    readings.append(iot_table(first))
    readings.append(iot_table(second))
    assert latest_rows(lake) == newest_by_series(first + second)


def test_latest_is_newest_by_time_not_by_append_order(lake, readings):
    readings.append(iot_table([(at(2024, 3, 6), "a", 2.0)]))
    readings.append(iot_table([(at(2024, 3, 5), "a", 1.0)]))
    assert latest_rows(lake) == [{"time": at(2024, 3, 6), "device_id": "a", "temp": 2.0}]


def test_latest_picks_newest_within_unsorted_batch(lake, readings):
    readings.append(iot_table([(at(2024, 3, 5, 9), "a", 9.0), (at(2024, 3, 5, 11), "a", 11.0), (at(2024, 3, 5, 10), "a", 10.0)]))
    assert latest_rows(lake) == [{"time": at(2024, 3, 5, 11), "device_id": "a", "temp": 11.0}]


def test_latest_without_series_key_returns_one_row(lake):
    t = lake.create_table("readings", IOT_SCHEMA)
    rows = iot_series(T0, 4)
    t.append(iot_table(rows))
    newest = max(rows, key=lambda r: (r[0], r[2]))
    got = lake.latest("readings").to_pylist()
    assert len(got) == 1 and got[0]["time"] == newest[0]


def test_latest_with_two_column_series_key(lake):
    schema = IOT_SCHEMA.append(pa.field("site", pa.string()))
    t = lake.create_table("readings", schema, series_key=["site", "device_id"])
    t.append(
        pa.table(
            {
                "time": [at(2024, 3, 5, 1), at(2024, 3, 5, 2), at(2024, 3, 5, 3), at(2024, 3, 5, 4)],
                "device_id": ["a", "a", "a", "b"],
                "temp": [1.0, 2.0, 3.0, 4.0],
                "site": ["north", "south", "north", "north"],
            },
            schema=schema,
        )
    )
    got = sorted((r["site"], r["device_id"], r["temp"]) for r in lake.latest("readings").to_pylist())
    assert got == [("north", "a", 3.0), ("north", "b", 4.0), ("south", "a", 2.0)]


def test_latest_keeps_nulls_of_newest_row(lake, readings):
    readings.append(iot_table([(at(2024, 3, 5, 1), "a", 1.0)]))
    readings.append(pa.table({"time": [at(2024, 3, 5, 2)], "device_id": ["a"]}))
    assert latest_rows(lake) == [{"time": at(2024, 3, 5, 2), "device_id": "a", "temp": None}]


def test_latest_of_empty_table_is_empty_with_schema(lake, readings):
    got = lake.latest("readings")
    assert got.num_rows == 0
    assert got.schema.names == IOT_SCHEMA.names


def test_latest_is_same_from_fresh_lake(lake, readings, lake_path):
    rows = iot_series(T0, 3)
    readings.append(iot_table(rows[:4]))
    readings.append(iot_table(rows[4:]))
    assert latest_rows(timelake.Lake(str(lake_path))) == newest_by_series(rows)


def test_latest_matches_arg_max_query(lake, readings):
    rows = iot_series(T0, 20, devices=("a", "b", "c", "d"))
    readings.append(iot_table(rows[::2]))
    readings.append(iot_table(rows[1::2]))
    sql = lake.sql(
        "SELECT arg_max(time, time) AS time, device_id, arg_max(temp, time) AS temp FROM readings GROUP BY device_id"
    )
    assert latest_rows(lake) == sorted_rows(sql.select(["time", "device_id", "temp"]), ["device_id"])


def test_latest_on_plain_table_is_value_error(lake):
    lake.create_table("devices", pa.schema([("device_id", pa.string())]))
    with pytest.raises(ValueError):
        lake.latest("devices")


def test_latest_on_missing_table_is_key_error(lake):
    with pytest.raises(KeyError):
        lake.latest("nope")


def test_latest_follows_a_schema_change_made_through_another_handle(lake):
    """latest() converts what a table declares once per version: a column added through another
    handle (and a table dropped and created again under the name) is in the next answer."""
    t = lake.create_table("evolving", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table([(T0, "a", 1.0)]))
    assert lake.latest("evolving").column_names == IOT_SCHEMA.names
    other_table = lake.table("evolving")
    other_table.add_columns({"site": pa.string()})
    other_table.append(pa.table({"time": [T0 + dt.timedelta(minutes=1)], "device_id": ["a"], "temp": [2.0],
                                 "site": ["s1"]}, schema=other_table.schema))
    got = lake.latest("evolving")
    assert got.column_names == IOT_SCHEMA.names + ["site"]
    assert got.column("site").to_pylist() == ["s1"]
    lake.drop_table("evolving")
    again = lake.create_table("evolving", pa.schema([("time", pa.timestamp("us", tz="UTC")), ("host", pa.string()),
                                                     ("load", pa.float64())]), series_key=["host"])
    again.append(pa.table({"time": [T0], "host": ["h"], "load": [0.5]}, schema=again.schema))
    assert lake.latest("evolving").to_pylist() == [{"time": T0, "host": "h", "load": 0.5}]
