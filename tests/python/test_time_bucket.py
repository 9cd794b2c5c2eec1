"""time_bucket in lake.sql: UTC buckets, identical to DuckDB's own function, on its fast path."""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
import pytest


WIDTHS = ["250 milliseconds", "1 minute", "90 minutes", "1 day", "7 days", "1 month", "3 months", "1 year"]


SPREAD_SCHEMA = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("moment", pa.timestamp("us", tz="UTC"))])


@pytest.fixture
def spread(lake):
    """`moment`: instants every ~37.3 hours from 1965 to 2031, across DST changes and leap days
    (`time`, the table's time column, stays on one day so the table is one file)."""
    t = lake.create_table("readings", SPREAD_SCHEMA, time_column="time")
    start = dt.datetime(1965, 3, 1, 12, 34, 56, 789000, tzinfo=dt.timezone.utc)
    times = [start + dt.timedelta(seconds=134_321.123 * i) for i in range(16_000)]
    day = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    t.append(pa.table({"time": [day] * len(times), "moment": times}, schema=SPREAD_SCHEMA))
    return times


@pytest.mark.parametrize("width", WIDTHS)
def test_time_bucket_matches_duckdb_builtin(lake, spread, width):
    got = lake.sql(f"SELECT time_bucket(INTERVAL '{width}', moment) AS b FROM readings ORDER BY moment")
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    data = pa.table({"moment": pa.array(spread, pa.timestamp("us", tz="UTC"))})
    con.register("data", data)
    want = con.sql(f"SELECT time_bucket(INTERVAL '{width}', moment) AS b FROM data ORDER BY moment").to_arrow_table()
    assert got.column("b").to_pylist() == want.column("b").to_pylist()
    assert got.schema.field("b").type == pa.timestamp("us", tz="UTC")


def test_time_bucket_with_offset_uses_the_builtin(lake, spread):
    got = lake.sql(
        "SELECT time_bucket(INTERVAL '1 day', moment, INTERVAL '6 hours') AS b FROM readings ORDER BY moment LIMIT 1"
    ).column("b")[0].as_py()
    first = spread[0]
    assert got == dt.datetime(first.year, first.month, first.day, 6, tzinfo=dt.timezone.utc) - (
        dt.timedelta(days=1) if first.hour < 6 else dt.timedelta(0)
    )


def test_time_bucket_on_naive_timestamps_keeps_duckdb_types(lake):
    schema = pa.schema([("time", pa.timestamp("us")), ("v", pa.float64())])
    t = lake.create_table("naive", schema)
    t.append(pa.table({"time": [dt.datetime(2024, 5, 5, 10, 20)], "v": [1.0]}, schema=schema))
    got = lake.sql("SELECT time_bucket(INTERVAL '1 hour', time) AS b FROM naive")
    assert got.schema.field("b").type == pa.timestamp("us")
    assert got.column("b")[0].as_py() == dt.datetime(2024, 5, 5, 10, 0)
