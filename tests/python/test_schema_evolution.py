"""Schema evolution: Table.add_columns adds nullable columns; older rows read them as null.

Everything that reads files (SQL with and without read-time dedup, latest(), compaction, time
travel, other handles, delta-rs) sees the evolved table exactly; appends keep refusing columns
the table does not have; an append racing the change rebases.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

import timelake
from helpers import IOT_SCHEMA, NO_BACKGROUND, T0, RacingWriter, delta_read, sorted_rows

HOUR = dt.timedelta(hours=1)


def _rows(lake, name):
    return sorted_rows(lake.sql(f"SELECT * FROM {name}"))


def _batch(rows, **extra):
    columns = {
        "time": [r[0] for r in rows],
        "device_id": [r[1] for r in rows],
        "temp": [r[2] for r in rows],
    }
    columns.update(extra)
    return pa.table(columns)


@pytest.mark.parametrize("dedup", ["none", "last", "first"])
def test_added_columns_are_null_in_older_rows_everywhere(lake, lake_location, dedup):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup=dedup, properties=NO_BACKGROUND)
    t.append(_batch([(T0, "a", 1.0), (T0 + HOUR, "b", 2.0)]))
    result = t.add_columns({"humidity": pa.float32(), "site": pa.string()})
    assert result == {"version": 2, "columns": ["humidity", "site"]}
    assert t.schema.names == ["time", "device_id", "temp", "humidity", "site"]
    assert t.schema.field("humidity").type == pa.float32()
    # (T0 + 1h, b) again: dedup tables keep one of the two, across the old and the new schema.
    t.append(_batch([(T0 + HOUR, "b", 3.0), (T0 + 2 * HOUR, "c", 4.0)],
                    humidity=pa.array([0.5, 0.25], pa.float32()), site=["x", "y"]))
    t.append(_batch([(T0 + 3 * HOUR, "d", 5.0)]))  # the new columns may be left out
    kept_b = {"none": None, "last": 3.0, "first": 2.0}[dedup]
    expected = [
        {"time": T0, "device_id": "a", "temp": 1.0, "humidity": None, "site": None},
        *([{"time": T0 + HOUR, "device_id": "b", "temp": 2.0, "humidity": None, "site": None}]
          if kept_b in (None, 2.0) else []),
        *([{"time": T0 + HOUR, "device_id": "b", "temp": 3.0, "humidity": 0.5, "site": "x"}]
          if kept_b in (None, 3.0) else []),
        {"time": T0 + 2 * HOUR, "device_id": "c", "temp": 4.0, "humidity": 0.25, "site": "y"},
        {"time": T0 + 3 * HOUR, "device_id": "d", "temp": 5.0, "humidity": None, "site": None},
    ]
    expected = sorted_rows(pa.Table.from_pylist(expected, schema=t.schema))
    assert _rows(lake, "readings") == expected
    assert lake.sql("SELECT humidity FROM readings LIMIT 0").schema.field("humidity").type == pa.float32()
    if dedup != "none":
        latest = sorted_rows(lake.latest("readings"))
        assert [r["device_id"] for r in latest] == ["a", "b", "c", "d"]
        assert latest[1]["temp"] == (3.0 if dedup == "last" else 2.0)
        assert latest[0]["humidity"] is None and latest[2]["humidity"] == 0.25
    # Version 1 is read with the schema it had.
    assert lake.sql("SELECT * FROM readings AT (VERSION => 1)").schema.names == ["time", "device_id", "temp"]
    # Compaction rewrites old and new files into the new schema, rows unchanged.
    t.maintain()
    assert _rows(lake, "readings") == expected
    # A new Lake (new handles, an index rebuilt for the new schema) agrees.
    again = lake_location.open()
    assert again.table("readings").schema.names == t.schema.names
    assert _rows(again, "readings") == expected
    if dedup != "none":
        assert sorted_rows(again.latest("readings")) == sorted_rows(lake.latest("readings"))


def test_appends_still_refuse_columns_the_table_does_not_have(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    with pytest.raises(ValueError, match="column 'humidity' is not in the table"):
        t.append(_batch([(T0, "a", 1.0)], humidity=[0.5]))
    assert t.version == 0
    t.add_columns([pa.field("humidity", pa.float64())])
    t.append(_batch([(T0, "a", 1.0)], humidity=[0.5]))
    with pytest.raises(ValueError, match="column 'site' is not in the table"):
        t.append(_batch([(T0, "a", 1.0)], site=["x"]))
    assert _rows(lake, "readings") == [{"time": T0, "device_id": "a", "temp": 1.0, "humidity": 0.5}]


@pytest.mark.parametrize(
    "columns, message",
    [
        ([pa.field("humidity", pa.float64(), nullable=False)], "must be nullable"),
        ({"TEMP": pa.float64()}, "already has a column named 'TEMP'"),
        ({"device_id": pa.string()}, "already has a column named"),
        ([pa.field("x", pa.int32()), pa.field("X", pa.int64())], "already has a column named 'X'"),
        ({"é": pa.int8(), "É": pa.int8()}, "already has a column named 'É'"),
        ({"x\x00y": pa.int32()}, "NUL"),
        ({}, "at least one column"),
        ({"naive": pa.timestamp("us")}, "timestampNtz"),
        ("humidity", "add_columns takes"),
        ({"h": "not a type"}, "add_columns"),
    ],
)
def test_bad_columns_are_value_errors_and_write_nothing(lake, columns, message):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    with pytest.raises(ValueError, match=message):
        t.add_columns(columns)
    t.refresh()
    assert t.version == 0
    assert t.schema == IOT_SCHEMA


def test_a_handle_opened_before_sees_the_new_columns(lake, lake_location):
    first = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    other = lake_location.open().table("readings")
    first.add_columns({"humidity": pa.float64()})
    other.append(_batch([(T0, "a", 1.0)], humidity=[0.5]))  # the append brings the handle up to date
    assert other.schema.names == ["time", "device_id", "temp", "humidity"]
    assert _rows(lake, "readings") == [{"time": T0, "device_id": "a", "temp": 1.0, "humidity": 0.5}]


def test_delta_rs_reads_the_evolved_table(lake, lake_path, tmp_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    t.append(_batch([(T0, "a", 1.0)]))
    t.add_columns({"humidity": pa.float64()})
    t.append(_batch([(T0 + HOUR, "b", 2.0)], humidity=[0.5]))
    theirs, meta = delta_read(lake_path / "default" / "readings", tmp_path)
    assert meta["version"] == 3
    assert sorted_rows(theirs.select(["time", "device_id", "temp", "humidity"])) == _rows(lake, "readings")
    old, _ = delta_read(lake_path / "default" / "readings", tmp_path, version=1)
    assert old.schema.names == ["time", "device_id", "temp"]


def test_appends_racing_add_columns_rebase_and_lose_nothing(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    n = 60
    writer = RacingWriter(lake_path, n, "temp", "float64")
    writer.go()
    added = []
    for k in range(5):  # each add_columns commit races the writer's appends
        added.append(t.add_columns({f"extra{k}": pa.int64()})["version"])
    answers = writer.answers()
    assert len({v for v, _ in answers} | set(added)) == n + len(added)  # one version each
    t.refresh()
    assert t.version == n + len(added)
    assert t.schema.names[-5:] == [f"extra{k}" for k in range(5)]
    rows = lake.sql("SELECT count(*) AS n, count(extra4) AS e, sum(temp) AS s FROM readings").to_pylist()
    assert rows == [{"n": n, "e": 0, "s": float(sum(range(n)))}]
