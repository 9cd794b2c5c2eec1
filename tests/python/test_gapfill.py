"""Gap filling in lake.sql (time_bucket_gapfill, date_bin_gapfill, locf, interpolate) and the
time_weighted_mean aggregate: the examples of TimescaleDB's and InfluxDB 3's docs reproduced row
for row, then the edges (empty windows, one reading, nulls, several series, bounds, DST, widths
from a second to a month, the look-up before the window, hostile statements).

The rewrite is plain SQL over the catalog's views, the same on every store, so these run on a
local lake only.
"""

from __future__ import annotations

import datetime as dt
import math

import pyarrow as pa
import pytest

pytestmark = pytest.mark.local_only

UTC = dt.timezone.utc
SCHEMA = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device", pa.string()), ("temp", pa.float64())])


def utc(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def put(table, rows, schema=SCHEMA):
    """Appends rows given as tuples in the schema's column order."""
    columns = list(zip(*rows)) if rows else [[] for _ in schema]
    table.append(pa.table({f.name: list(c) for f, c in zip(schema, columns)}, schema=schema))


def rows(result):
    return [tuple(r.values()) for r in result.to_pylist()]


@pytest.fixture
def readings(lake):
    return lake.create_table("readings", SCHEMA, time_column="time", series_key=["device"])


# -- TimescaleDB's docs (api/_hyperfunctions/time_bucket_gapfill/examples.md) ------------------
# Their `metrics` table holds one daily average per day that has readings; one reading per day
# gives the same averages.
METRICS = {
    utc(2022, 1, 1): 47.84420001415975,
    utc(2022, 1, 3): 42.53498707820027,
    utc(2022, 1, 4): 46.09172424261765,
    utc(2022, 1, 5): 58.257520634785266,
    utc(2022, 1, 7): 54.388267525986485,
    utc(2022, 1, 8): 48.61293155993108,
}
METRICS_WINDOW = ("FROM metrics WHERE time > '2021-12-31 00:00:00+00'::timestamptz "
                  "AND time < '2022-01-10 00:00:00-00'::timestamptz GROUP BY day ORDER BY day desc")
DAYS = [utc(2022, 1, 9) - dt.timedelta(days=i) for i in range(10)]


@pytest.fixture
def metrics(lake):
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("value", pa.float64())])
    t = lake.create_table("metrics", schema, time_column="time")
    put(t, [(day + dt.timedelta(hours=13), v) for day, v in METRICS.items()], schema)
    return t


def test_timescaledb_gapfill_without_a_fill_leaves_nulls(lake, metrics):
    got = lake.sql("SELECT time_bucket_gapfill('1 day', time) AS day, avg(value) as value " + METRICS_WINDOW)
    assert rows(got) == [
        (utc(2022, 1, 9), None),
        (utc(2022, 1, 8), 48.61293155993108),
        (utc(2022, 1, 7), 54.388267525986485),
        (utc(2022, 1, 6), None),
        (utc(2022, 1, 5), 58.257520634785266),
        (utc(2022, 1, 4), 46.09172424261765),
        (utc(2022, 1, 3), 42.53498707820027),
        (utc(2022, 1, 2), None),
        (utc(2022, 1, 1), 47.84420001415975),
        (utc(2021, 12, 31), None),
    ]
    assert got.column_names == ["day", "value"]
    assert got.schema.field("day").type == pa.timestamp("us", tz="UTC")


def test_timescaledb_locf(lake, metrics):
    got = lake.sql("SELECT time_bucket_gapfill('1 day', time) AS day, locf(avg(value)) as value " + METRICS_WINDOW)
    assert rows(got) == [
        (utc(2022, 1, 9), 48.61293155993108),
        (utc(2022, 1, 8), 48.61293155993108),
        (utc(2022, 1, 7), 54.388267525986485),
        (utc(2022, 1, 6), 58.257520634785266),
        (utc(2022, 1, 5), 58.257520634785266),
        (utc(2022, 1, 4), 46.09172424261765),
        (utc(2022, 1, 3), 42.53498707820027),
        (utc(2022, 1, 2), 47.84420001415975),
        (utc(2022, 1, 1), 47.84420001415975),
        (utc(2021, 12, 31), None),
    ]


def test_timescaledb_interpolate(lake, metrics):
    got = lake.sql("SELECT time_bucket_gapfill('1 day', time) AS day, interpolate(avg(value)) as value " + METRICS_WINDOW)
    want = [
        (utc(2022, 1, 9), None),
        (utc(2022, 1, 8), 48.61293155993108),
        (utc(2022, 1, 7), 54.388267525986485),
        (utc(2022, 1, 6), 56.32289408038588),
        (utc(2022, 1, 5), 58.257520634785266),
        (utc(2022, 1, 4), 46.09172424261765),
        (utc(2022, 1, 3), 42.53498707820027),
        (utc(2022, 1, 2), 45.189593546180014),
        (utc(2022, 1, 1), 47.84420001415975),
        (utc(2021, 12, 31), None),
    ]
    got = rows(got)
    assert [d for d, _ in got] == [d for d, _ in want]
    for (_, g), (_, w) in zip(got, want):
        assert (g is None and w is None) or g == pytest.approx(w, rel=1e-15)


def test_timescaledb_timezone_argument_is_refused(lake, metrics):
    for call in ("time_bucket_gapfill('1 day', time, timezone => 'Europe/Berlin')",
                 "time_bucket_gapfill('1 day', time, 'Europe/Berlin')"):
        with pytest.raises(ValueError, match="buckets are UTC"):
            lake.sql(f"SELECT {call} AS day, avg(value) " + METRICS_WINDOW)


def test_timescaledb_troubleshooting_treat_null_as_missing(lake):
    # TimescaleDB's integer-time example, in seconds since the epoch: readings (0 s, 0) and
    # (8 s, NULL), 4-second buckets from -5 s to 13 s, in a subquery ordered outside.
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("v", pa.int64())])
    t = lake.create_table("v", schema, time_column="time")
    epoch = utc(1970, 1, 1)
    put(t, [(epoch, 0), (epoch + dt.timedelta(seconds=8), None)], schema)
    s = lambda n: f"TIMESTAMPTZ '{(epoch + dt.timedelta(seconds=n)).isoformat()}'"  # noqa: E731
    got = lake.sql(
        f"select * FROM (select time_bucket_gapfill(INTERVAL '4 seconds', time, {s(-5)}, {s(13)}), "
        "locf(avg(v)::int, treat_null_as_missing:=true) FROM v "
        f"WHERE time BETWEEN {s(0)} AND {s(10)} GROUP BY 1) i ORDER BY 1 DESC")
    assert [(b - epoch).total_seconds() for b in got.column(0).to_pylist()] == [12, 8, 4, 0, -4, -8]
    assert got.column(1).to_pylist() == [0, 0, 0, 0, None, None]


# -- InfluxDB 3's docs (date_bin_gapfill, Get started "home" data) ------------------------------
HOME = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("room", pa.string()), ("temp", pa.float64())])
HOME_WINDOW = ("FROM home WHERE time >= '2022-01-01T08:00:00Z' AND time <= '2022-01-01T10:00:00Z' "
               "GROUP BY _time, room")
HALF_HOURS = [utc(2022, 1, 1, 8) + dt.timedelta(minutes=30 * i) for i in range(5)]


@pytest.fixture
def home(lake):
    t = lake.create_table("home", HOME, time_column="time", series_key=["room"])
    put(t, [(utc(2022, 1, 1, h), room, v) for room, values in (("Kitchen", (21.0, 23.0, 22.7)),
                                                                ("Living Room", (21.1, 21.4, 21.8)))
            for h, v in zip((8, 9, 10), values)], HOME)
    return t


def influx(got):
    return [(r["_time"], r["room"], r[got.column_names[2]]) for r in got.to_pylist()]


def test_influxdb_date_bin_gapfill_inserts_rows(lake, home):
    got = lake.sql("SELECT date_bin_gapfill(INTERVAL '30 minutes', time) as _time, room, avg(temp) as temp " + HOME_WINDOW)
    assert influx(got) == [(t, "Kitchen", v) for t, v in zip(HALF_HOURS, (21.0, None, 23.0, None, 22.7))] + [
        (t, "Living Room", v) for t, v in zip(HALF_HOURS, (21.1, None, 21.4, None, 21.8))]


def test_influxdb_interpolate(lake, home):
    got = lake.sql("SELECT date_bin_gapfill(INTERVAL '30 minutes', time) as _time, room, interpolate(avg(temp)) " + HOME_WINDOW)
    assert got.column_names == ["_time", "room", 'interpolate(avg("temp"))']
    want = [(t, "Kitchen", v) for t, v in zip(HALF_HOURS, (21, 22, 23, 22.85, 22.7))] + [
        (t, "Living Room", v) for t, v in zip(HALF_HOURS, (21.1, 21.25, 21.4, 21.6, 21.8))]
    assert [(t, r) for t, r, _ in influx(got)] == [(t, r) for t, r, _ in want]
    assert [v for *_, v in influx(got)] == pytest.approx([v for *_, v in want], rel=1e-12)


def test_influxdb_locf(lake, home):
    got = lake.sql("SELECT date_bin_gapfill(INTERVAL '30 minutes', time) as _time, room, locf(avg(temp)) " + HOME_WINDOW)
    assert influx(got) == [(t, "Kitchen", v) for t, v in zip(HALF_HOURS, (21.0, 21.0, 23.0, 23.0, 22.7))] + [
        (t, "Living Room", v) for t, v in zip(HALF_HOURS, (21.1, 21.1, 21.4, 21.4, 21.8))]


def test_date_bin_gapfill_bins_from_the_unix_epoch(lake, home):
    # A week from 1970-01-01 (a Thursday), as InfluxDB's date_bin; time_bucket's weeks start on
    # Mondays (DuckDB's origin, 2000-01-03).
    got = lake.sql("SELECT date_bin_gapfill(INTERVAL '7 days', time) AS _time, count(*) AS n FROM home "
                   "WHERE time >= '2021-12-25' AND time < '2022-01-08' GROUP BY 1")
    assert rows(got) == [(utc(2021, 12, 23), None), (utc(2021, 12, 30), 6), (utc(2022, 1, 6), None)]
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '7 days', time) AS w, count(*) AS n FROM home "
                   "WHERE time >= '2021-12-25' AND time < '2022-01-08' GROUP BY 1")
    assert rows(got) == [(utc(2021, 12, 20), None), (utc(2021, 12, 27), 6), (utc(2022, 1, 3), None)]


def test_date_bin_gapfill_needs_both_bounds(lake, home):
    with pytest.raises(ValueError, match=r"date_bin_gapfill\(\) needs the window's start and end.*no end"):
        lake.sql("SELECT date_bin_gapfill(INTERVAL '30 minutes', time) AS _time, avg(temp) FROM home "
                 "WHERE time >= '2022-01-01T08:00:00Z' GROUP BY 1")


# -- edges ----------------------------------------------------------------------------------------
def test_empty_window_without_series_returns_every_bucket_with_nulls(lake, readings):
    put(readings, [(utc(2024, 5, 1, 12), "a", 1.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, avg(temp) AS t, count(*) AS n, "
                   "locf(avg(temp), NULL) AS l FROM readings "
                   "WHERE time >= '2024-05-02 00:00' AND time < '2024-05-02 03:00' GROUP BY h")
    assert rows(got) == [(utc(2024, 5, 2, h), None, None, None) for h in range(3)]


def test_empty_window_with_series_returns_no_rows(lake, readings):
    put(readings, [(utc(2024, 5, 1, 12), "a", 1.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, device, avg(temp) AS t FROM readings "
                   "WHERE time >= '2024-05-02 00:00' AND time < '2024-05-02 03:00' GROUP BY h, device")
    assert got.num_rows == 0 and got.column_names == ["h", "device", "t"]


def test_empty_table(lake, readings):
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS d, locf(avg(temp)) AS l, "
                   "interpolate(avg(temp)) AS i FROM readings WHERE time >= '2024-05-01' AND time < '2024-05-03' GROUP BY 1")
    assert rows(got) == [(utc(2024, 5, 1), None, None), (utc(2024, 5, 2), None, None)]


def test_one_reading(lake, readings):
    put(readings, [(utc(2024, 5, 1, 1, 30), "a", 7.5)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, device, avg(temp) AS a, "
                   "locf(avg(temp)) AS l, interpolate(avg(temp)) AS i FROM readings "
                   "WHERE time >= '2024-05-01 00:00' AND time < '2024-05-01 04:00' GROUP BY 1, 2")
    assert rows(got) == [
        (utc(2024, 5, 1, 0), "a", None, None, None),
        (utc(2024, 5, 1, 1), "a", 7.5, 7.5, 7.5),
        (utc(2024, 5, 1, 2), "a", None, 7.5, None),
        (utc(2024, 5, 1, 3), "a", None, 7.5, None),
    ]


NULLS = [(utc(2024, 5, 1, 0, 10), "a", 1.0), (utc(2024, 5, 1, 2, 10), "a", None), (utc(2024, 5, 1, 4, 10), "a", 5.0)]
NULLS_WINDOW = "FROM readings WHERE time >= '2024-05-01' AND time < '2024-05-01 06:00' GROUP BY 1"


def test_locf_carries_a_null_aggregate_by_default(lake, readings):
    put(readings, NULLS)
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, avg(temp) AS a, locf(avg(temp)) AS l, "
                   "locf(avg(temp), treat_null_as_missing => true) AS m, interpolate(avg(temp)) AS i " + NULLS_WINDOW)
    assert rows(got) == [
        (utc(2024, 5, 1, 0), 1.0, 1.0, 1.0, 1.0),
        (utc(2024, 5, 1, 1), None, 1.0, 1.0, None),  # the next row's value is NULL: no line to draw
        (utc(2024, 5, 1, 2), None, None, 1.0, None),  # a row whose average is NULL
        (utc(2024, 5, 1, 3), None, None, 1.0, None),
        (utc(2024, 5, 1, 4), 5.0, 5.0, 5.0, 5.0),
        (utc(2024, 5, 1, 5), None, 5.0, 5.0, None),
    ]


def test_treat_null_as_missing_false_and_positional_prev(lake, readings):
    put(readings, NULLS)
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp), -1.0, false) AS l "
                   "FROM readings WHERE time >= '2024-04-30 23:00' AND time < '2024-05-01 04:00' GROUP BY 1")
    assert [v for _, v in rows(got)] == [-1.0, 1.0, 1.0, None, None]


def test_several_series_fill_each_their_own(lake, readings):
    put(readings, [(utc(2024, 5, 1, 0), "a", 1.0), (utc(2024, 5, 1, 3), "a", 4.0),
                   (utc(2024, 5, 1, 1), "b", 10.0), (utc(2024, 5, 1, 2), "c", None)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, device, locf(avg(temp)) AS l, "
                   "interpolate(avg(temp)) AS i, count(temp) AS n FROM readings "
                   "WHERE time >= '2024-05-01' AND time < '2024-05-01 04:00' GROUP BY h, device")
    h = [utc(2024, 5, 1, i) for i in range(4)]
    assert rows(got) == [
        (h[0], "a", 1.0, 1.0, 1), (h[1], "a", 1.0, 2.0, None), (h[2], "a", 1.0, 3.0, None), (h[3], "a", 4.0, 4.0, 1),
        (h[0], "b", None, None, None), (h[1], "b", 10.0, 10.0, 1), (h[2], "b", 10.0, None, None),
        (h[3], "b", 10.0, None, None),
        (h[0], "c", None, None, None), (h[1], "c", None, None, None), (h[2], "c", None, None, 0),
        (h[3], "c", None, None, None),
    ]


def test_series_key_not_selected_still_splits_series(lake, readings):
    put(readings, [(utc(2024, 5, 1, 0), "a", 1.0), (utc(2024, 5, 1, 1), "b", 10.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp)) AS l FROM readings "
                   "WHERE time >= '2024-05-01' AND time < '2024-05-01 02:00' GROUP BY h, device ORDER BY l NULLS FIRST, h")
    assert rows(got) == [(utc(2024, 5, 1, 0), None), (utc(2024, 5, 1, 0), 1.0), (utc(2024, 5, 1, 1), 1.0),
                         (utc(2024, 5, 1, 1), 10.0)]


def test_expressions_of_the_series_key_fill_gap_rows(lake, readings):
    put(readings, [(utc(2024, 5, 1, 0), "a", 1.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, upper(device) AS d, 'x' AS c, "
                   "avg(temp) * 2 AS a FROM readings WHERE time >= '2024-05-01' AND time < '2024-05-01 02:00' "
                   "GROUP BY ALL")
    assert rows(got) == [(utc(2024, 5, 1, 0), "A", "x", 2.0), (utc(2024, 5, 1, 1), "A", "x", None)]


def test_constant_items_and_qualified_names_in_an_empty_window(lake, readings):
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', r.time) AS h, 'x' AS c, 1 + 1, avg(r.temp) "
                   "FROM readings r WHERE r.time >= '2024-05-01' AND r.time < '2024-05-01 02:00' GROUP BY 1")
    assert got.column_names == ["h", "c", "(1 + 1)", 'avg(r."temp")']
    assert rows(got) == [(utc(2024, 5, 1, 0), "x", 2, None), (utc(2024, 5, 1, 1), "x", 2, None)]
    put(readings, [(utc(2024, 5, 1), "a", 1.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', r.time) AS h, r.device, count(*) FROM readings r "
                   "WHERE r.time >= '2024-05-01' AND r.time < '2024-05-01 02:00' GROUP BY 1, 2")
    assert got.column_names == ["h", "device", "count_star()"]
    assert rows(got) == [(utc(2024, 5, 1, 0), "a", 1), (utc(2024, 5, 1, 1), "a", None)]


def test_bounds_from_where_strict_inclusive_between_and_equal(lake, readings):
    put(readings, [(utc(2024, 5, 1, 1), "a", 1.0)])
    q = "SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h FROM readings WHERE {} GROUP BY 1"
    hours = lambda *hs: [(utc(2024, 5, 1, h),) for h in hs]  # noqa: E731
    assert rows(lake.sql(q.format("time > '2024-05-01 00:00' AND time < '2024-05-01 03:00'"))) == hours(0, 1, 2)
    assert rows(lake.sql(q.format("time >= '2024-05-01 00:30' AND time <= '2024-05-01 03:00'"))) == hours(0, 1, 2, 3)
    assert rows(lake.sql(q.format("time BETWEEN '2024-05-01 01:00' AND '2024-05-01 02:59:59'"))) == hours(1, 2)
    assert rows(lake.sql(q.format("'2024-05-01 02:00' > time AND '2024-05-01 00:00' <= time"))) == hours(0, 1)
    assert rows(lake.sql(q.format("time = '2024-05-01 01:00'"))) == hours(1)
    assert rows(lake.sql(q.format("time >= '2024-05-01 00:00' AND time >= '2024-05-01 01:00' AND time < '2024-05-01 05:00' "
                                  "AND time < '2024-05-01 03:00'"))) == hours(1, 2)
    assert rows(lake.sql(q.format("time >= '2024-05-01 03:00' AND time < '2024-05-01 01:00'"))) == []


def test_explicit_start_and_finish_override_the_where(lake, readings):
    put(readings, [(utc(2024, 5, 1, 1), "a", 1.0), (utc(2024, 5, 1, 5), "a", 5.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time, start => '2024-05-01 00:00', "
                   "finish => '2024-05-01 03:00') AS h, avg(temp) AS a FROM readings GROUP BY 1")
    # Rows outside the window pass through; only the window is filled.
    assert rows(got) == [(utc(2024, 5, 1, h), v) for h, v in ((0, None), (1, 1.0), (2, None), (5, 5.0))]


def test_null_start_and_finish_come_from_the_where(lake, readings):
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time, NULL, NULL::TIMESTAMPTZ) AS h FROM readings "
                   "WHERE time >= '2024-05-01' AND time < '2024-05-01 02:00' GROUP BY 1")
    assert rows(got) == [(utc(2024, 5, 1, 0),), (utc(2024, 5, 1, 1),)]


def test_bounds_may_use_now(lake, readings):
    got = lake.sql("SELECT count(*) AS n FROM (SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h FROM readings "
                   "WHERE time >= now() - INTERVAL 6 HOURS AND time < now() GROUP BY 1)")
    assert got.column("n").to_pylist() in ([6], [7])


@pytest.mark.parametrize("where, missing", [
    ("", "start and end"),
    ("WHERE time >= '2024-05-01'", "end"),
    ("WHERE time < '2024-05-01'", "start"),
    ("WHERE time >= '2024-05-01' OR time < '2024-05-02'", "start and end"),
    ("WHERE time + INTERVAL 1 HOUR >= '2024-05-01' AND time < '2024-05-02'", "start"),
    ("WHERE time >= temp AND time < '2024-05-02'", "start"),
])
def test_missing_bounds_name_what_to_add(lake, readings, where, missing):
    with pytest.raises(ValueError) as e:
        lake.sql(f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, avg(temp) FROM readings {where} GROUP BY 1")
    assert f"gives no {missing}:" in str(e.value)
    assert "WHERE time >= '2026-11-01' AND time < '2026-11-02'" in str(e.value)
    assert "time_bucket_gapfill(width, time, start, finish)" in str(e.value)


def test_buckets_across_dst_changes_are_utc(lake, readings):
    # Europe's clocks went forward on 2024-03-31 at 01:00 UTC and back on 2024-10-27 at 01:00
    # UTC; buckets stay UTC days and hours, 24 and 1 hours apart.
    put(readings, [(utc(2024, 3, 30, 23), "a", 1.0), (utc(2024, 10, 27, 3, 30), "a", 2.0)])
    days = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS d, count(*) AS n FROM readings "
                    "WHERE time >= '2024-03-30' AND time < '2024-04-02' GROUP BY 1")
    assert rows(days) == [(utc(2024, 3, 30), 1), (utc(2024, 3, 31), None), (utc(2024, 4, 1), None)]
    hours = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp), NULL) AS v FROM readings "
                     "WHERE time >= '2024-10-27 00:00:00+02' AND time < '2024-10-27 05:00:00+00' GROUP BY 1")
    assert rows(hours) == [(utc(2024, 10, 26, 22), None), (utc(2024, 10, 26, 23), None)] + [
        (utc(2024, 10, 27, h), 2.0 if h >= 3 else None) for h in range(5)]


def test_naive_timestamps_bucket_as_utc(lake):
    schema = pa.schema([("time", pa.timestamp("us")), ("temp", pa.float64())])
    t = lake.create_table("naive", schema, time_column="time")
    put(t, [(dt.datetime(2024, 5, 1, 1), 3.0)], schema)
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp)) AS v FROM naive "
                   "WHERE time >= '2024-05-01' AND time < '2024-05-01 03:00' GROUP BY 1")
    assert rows(got) == [(utc(2024, 5, 1, 0), None), (utc(2024, 5, 1, 1), 3.0), (utc(2024, 5, 1, 2), 3.0)]


@pytest.mark.parametrize("width, start, end, want", [
    ("1 second", "2024-05-01 00:00:00", "2024-05-01 00:00:03",
     ["2024-05-01 00:00:00", "2024-05-01 00:00:01", "2024-05-01 00:00:02"]),
    ("250 milliseconds", "2024-05-01 00:00:00", "2024-05-01 00:00:00.6",
     ["2024-05-01 00:00:00", "2024-05-01 00:00:00.25", "2024-05-01 00:00:00.5"]),
    ("15 minutes", "2024-05-01 00:10", "2024-05-01 00:50",
     ["2024-05-01 00:00", "2024-05-01 00:15", "2024-05-01 00:30", "2024-05-01 00:45"]),
    ("1 day", "2024-02-28", "2024-03-02", ["2024-02-28", "2024-02-29", "2024-03-01"]),
    ("1 month", "2024-01-15", "2024-05-01", ["2024-01-01", "2024-02-01", "2024-03-01", "2024-04-01"]),
    ("3 months", "2024-02-01", "2024-12-31", ["2024-01-01", "2024-04-01", "2024-07-01", "2024-10-01"]),
])
def test_widths_from_a_second_to_months(lake, readings, width, start, end, want):
    got = lake.sql(f"SELECT time_bucket_gapfill(INTERVAL '{width}', time) AS b FROM readings "
                   f"WHERE time >= '{start}' AND time < '{end}' GROUP BY 1")
    assert got.column("b").to_pylist() == [dt.datetime.fromisoformat(w).replace(tzinfo=UTC) for w in want]


def test_interpolate_across_months_weighs_by_time(lake, readings):
    put(readings, [(utc(2024, 1, 20), "a", 10.0), (utc(2024, 4, 10), "a", 40.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 month', time) AS m, interpolate(avg(temp)) AS v "
                   "FROM readings WHERE time >= '2024-01-01' AND time < '2024-05-01' GROUP BY 1")
    # Buckets at Jan 1, Feb 1 (31 days on), Mar 1 (60 days on), Apr 1 (91 days on).
    assert got.column("v").to_pylist() == pytest.approx([10.0, 10 + 30 * 31 / 91, 10 + 30 * 60 / 91, 40.0], rel=1e-12)


# -- the look-up before the window ---------------------------------------------------------------
def test_prev_before_the_window_fills_the_first_buckets(lake, readings):
    put(readings, [(utc(2024, 4, 28, 5), "a", 3.0), (utc(2024, 4, 28, 6), "a", 4.0),  # the bucket before: avg 3.5
                   (utc(2024, 4, 30, 10), "b", 9.0),
                   (utc(2024, 5, 1, 2), "a", 6.0), (utc(2024, 5, 1, 0), "b", 1.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS d, device, avg(temp) AS a, "
                   "locf(avg(temp)) AS l, interpolate(avg(temp)) AS i FROM readings "
                   "WHERE time >= '2024-04-29' AND time < '2024-05-02' GROUP BY 1, 2")
    d = [utc(2024, 4, 29), utc(2024, 4, 30), utc(2024, 5, 1)]
    # a: last bucket before the window is 2024-04-28 (avg 3.5); interpolate draws from its start
    # (Apr 28) to May 1's 6.0. b has readings in the window, none before it.
    assert rows(got) == [
        (d[0], "a", None, 3.5, 3.5 + 2.5 / 3), (d[1], "a", None, 3.5, 3.5 + 2.5 * 2 / 3), (d[2], "a", 6.0, 6.0, 6.0),
        (d[0], "b", None, None, None), (d[1], "b", 9.0, 9.0, 9.0), (d[2], "b", 1.0, 1.0, 1.0),
    ]


def test_prev_skips_null_buckets_and_respects_the_other_conditions(lake, readings):
    put(readings, [(utc(2024, 4, 25), "a", 2.0), (utc(2024, 4, 27), "a", None), (utc(2024, 4, 28), "a", 100.0),
                   (utc(2024, 5, 1), "a", 5.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS d, locf(avg(temp)) AS l FROM readings "
                   "WHERE device = 'a' AND temp IS DISTINCT FROM 100 AND time >= '2024-04-29' AND time < '2024-05-02' "
                   "GROUP BY 1")
    # Apr 28's 100 is excluded by the WHERE, Apr 27's average is NULL: Apr 25's 2.0 it is.
    assert [v for _, v in rows(got)] == [2.0, 2.0, 5.0]


def test_prev_counts_readings_before_the_start_inside_the_first_bucket(lake, readings):
    put(readings, [(utc(2024, 5, 1, 9), "a", 23.0), (utc(2024, 5, 1, 10), "a", 22.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp)) AS l, count(*) AS n "
                   "FROM readings WHERE time >= '2024-05-01 09:30' AND time < '2024-05-01 12:00' GROUP BY 1")
    assert rows(got) == [(utc(2024, 5, 1, 9), 23.0, None), (utc(2024, 5, 1, 10), 22.0, 1), (utc(2024, 5, 1, 11), 22.0, None)]


def test_explicit_prev_replaces_the_lookup(lake, readings):
    put(readings, [(utc(2024, 4, 28), "a", 3.0), (utc(2024, 5, 1), "a", 6.0), (utc(2024, 4, 20), "b", 8.0),
                   (utc(2024, 5, 1), "b", 1.0)])
    window = "FROM readings m WHERE time >= '2024-04-29' AND time < '2024-05-02' GROUP BY 1, 2"
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS d, device, locf(avg(temp), NULL) AS l " + window)
    assert [v for *_, v in rows(got)] == [None, None, 6.0, None, None, 1.0]
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS d, device, locf(avg(temp), 0.5) AS l " + window)
    assert [v for *_, v in rows(got)] == [0.5, 0.5, 6.0, 0.5, 0.5, 1.0]
    # TimescaleDB's form: a subquery per series (it may name the group's columns).
    got = lake.sql(
        "SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS d, device, "
        "locf(avg(temp), (SELECT temp FROM readings r WHERE r.device = m.device AND r.time < '2024-04-29' "
        "ORDER BY r.time DESC LIMIT 1)) AS l, "
        "interpolate(avg(temp), (SELECT (r.time, r.temp) FROM readings r WHERE r.device = m.device "
        "AND r.time < '2024-04-29' ORDER BY r.time DESC LIMIT 1)) AS i " + window)
    want = [
        (utc(2024, 4, 29), "a", 3.0, 3.0 + 3.0 / 3), (utc(2024, 4, 30), "a", 3.0, 3.0 + 3.0 * 2 / 3),
        (utc(2024, 5, 1), "a", 6.0, 6.0),
        (utc(2024, 4, 29), "b", 8.0, 8.0 - 7.0 * 9 / 11), (utc(2024, 4, 30), "b", 8.0, 8.0 - 7.0 * 10 / 11),
        (utc(2024, 5, 1), "b", 1.0, 1.0),
    ]
    assert [r[:3] for r in rows(got)] == [r[:3] for r in want]
    assert [r[3] for r in rows(got)] == pytest.approx([r[3] for r in want], rel=1e-12)


def test_interpolate_explicit_next(lake, readings):
    put(readings, [(utc(2024, 5, 1), "a", 2.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS d, interpolate(avg(temp), NULL, "
                   "(TIMESTAMPTZ '2024-05-05 00:00:00+00', 6.0)) AS i FROM readings "
                   "WHERE time >= '2024-05-01' AND time < '2024-05-04' GROUP BY 1")
    assert [v for _, v in rows(got)] == [2.0, 3.0, 4.0]


def test_non_default_namespace(lake):
    t = lake.create_table("iot.readings", SCHEMA, time_column="time", series_key=["device"])
    put(t, [(utc(2024, 4, 30, 22), "a", 1.0), (utc(2024, 5, 1, 1), "a", 4.0)])
    q = ("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp)) AS l FROM {} "
         "WHERE time >= '2024-05-01' AND time < '2024-05-01 02:00' GROUP BY 1")
    want = [(utc(2024, 5, 1, 0), 1.0), (utc(2024, 5, 1, 1), 4.0)]
    assert rows(lake.sql(q.format("iot.readings"))) == want
    assert rows(lake.sql(q.format("readings"), namespace="iot")) == want


def test_having_makes_gaps(lake, readings):
    put(readings, [(utc(2024, 5, 1, 0), "a", 1.0), (utc(2024, 5, 1, 1), "a", 5.0), (utc(2024, 5, 1, 2), "a", 2.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, avg(temp) AS a, locf(avg(temp)) AS l, "
                   "interpolate(avg(temp)) AS i FROM readings WHERE time >= '2024-05-01' AND time < '2024-05-01 03:00' "
                   "GROUP BY 1 HAVING avg(temp) < 4")
    assert rows(got) == [(utc(2024, 5, 1, 0), 1.0, 1.0, 1.0), (utc(2024, 5, 1, 1), None, 1.0, 1.5),
                         (utc(2024, 5, 1, 2), 2.0, 2.0, 2.0)]


def test_order_by_and_limit_apply_after_filling(lake, readings):
    put(readings, [(utc(2024, 5, 1, 0), "a", 1.0)])
    base = ("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp)) AS l FROM readings "
            "WHERE time >= '2024-05-01' AND time < '2024-05-01 05:00' GROUP BY 1 ")
    assert rows(lake.sql(base + "ORDER BY h DESC LIMIT 2")) == [(utc(2024, 5, 1, 4), 1.0), (utc(2024, 5, 1, 3), 1.0)]
    assert rows(lake.sql(base + "ORDER BY 1 LIMIT 1 OFFSET 1")) == [(utc(2024, 5, 1, 1), 1.0)]
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time), avg(temp) FROM readings "
                   "WHERE time >= '2024-05-01' AND time < '2024-05-01 02:00' GROUP BY 1 "
                   "ORDER BY time_bucket_gapfill(INTERVAL '1 hour', time) DESC")
    assert got.column_names == ["time_bucket_gapfill(CAST('1 hour' AS INTERVAL), \"time\")", 'avg("temp")']
    assert rows(got) == [(utc(2024, 5, 1, 1), None), (utc(2024, 5, 1, 0), 1.0)]
    with pytest.raises(ValueError, match="ORDER BY in a gapfill SELECT names its result columns"):
        lake.sql(base + "ORDER BY avg(temp)")


def test_gapfill_in_a_cte_and_joined(lake, readings):
    put(readings, [(utc(2024, 5, 1, 0), "a", 1.0), (utc(2024, 5, 1, 2), "a", 3.0)])
    got = lake.sql("WITH g AS (SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, interpolate(avg(temp)) AS v "
                   "FROM readings WHERE time >= '2024-05-01' AND time < '2024-05-01 03:00' GROUP BY 1) "
                   "SELECT g.h, g.v, (SELECT count(*) FROM readings) AS n FROM g ORDER BY h")
    assert rows(got) == [(utc(2024, 5, 1, h), float(v), 2) for h, v in ((0, 1), (1, 2), (2, 3))]


def test_time_travel_and_explain(lake, readings):
    put(readings, [(utc(2024, 5, 1, 0), "a", 1.0)])
    put(readings, [(utc(2024, 5, 1, 1), "a", 5.0)])
    q = ("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp)) AS l FROM readings "
         "WHERE time >= '2024-05-01' AND time < '2024-05-01 02:00' GROUP BY 1")
    assert [v for _, v in rows(lake.sql(q))] == [1.0, 5.0]
    assert [v for _, v in rows(lake.sql(q, as_of=1))] == [1.0, 1.0]
    assert lake.sql("EXPLAIN " + q).num_rows >= 1


def test_pruned_window_still_finds_the_reading_before_it(lake, readings):
    # Day chunks: the window's files and the files before it are different files; file pruning
    # by the WHERE must not hide the earlier ones from the look-up.
    for day in range(1, 6):
        put(readings, [(utc(2024, 5, day, 12), "a", float(day))])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS d, locf(avg(temp)) AS l FROM readings "
                   "WHERE device = 'a' AND time >= '2024-05-07' AND time < '2024-05-09' GROUP BY 1")
    assert rows(got) == [(utc(2024, 5, 7), 5.0), (utc(2024, 5, 8), 5.0)]


# -- hostile and wrong statements ---------------------------------------------------------------
WINDOW = "FROM readings WHERE time >= '2024-05-01' AND time < '2024-05-02'"


@pytest.mark.parametrize("query, match", [
    (f"SELECT round(locf(avg(temp)), 1), time_bucket_gapfill(INTERVAL '1 hour', time) {WINDOW} GROUP BY 2",
     r"locf\(\) must be a whole item of the SELECT list"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) + INTERVAL 1 HOUR {WINDOW} GROUP BY 1",
     r"time_bucket_gapfill\(\) must be a whole item"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS a, time_bucket_gapfill(INTERVAL '1 day', time) AS b "
     f"{WINDOW} GROUP BY 1, 2", r"one time_bucket_gapfill\(\) per SELECT"),
    (f"SELECT locf(avg(temp)) {WINDOW}", r"locf\(\) fills the gaps that time_bucket_gapfill\(\)"),
    (f"SELECT time_bucket(INTERVAL '1 hour', time) AS h, interpolate(avg(temp)) {WINDOW} GROUP BY 1",
     r"interpolate\(\) fills the gaps"),
    (f"SELECT time_bucket(INTERVAL '1 hour', time) AS h {WINDOW} AND time_bucket_gapfill(INTERVAL '1 hour', time) "
     "IS NOT NULL GROUP BY 1", r"time_bucket_gapfill\(\) must be a whole item"),
    (f"SELECT time_bucket_gapfill(4, time) AS h {WINDOW} GROUP BY 1", r"must be an interval.*got 4"),
    (f"SELECT time_bucket_gapfill('soon', time) AS h {WINDOW} GROUP BY 1", r"must be an interval"),
    (f"SELECT time_bucket_gapfill(INTERVAL '-1 hour', time) AS h {WINDOW} GROUP BY 1", r"must be positive"),
    (f"SELECT time_bucket_gapfill(INTERVAL '0 hours', time) AS h {WINDOW} GROUP BY 1", r"must be positive"),
    (f"SELECT time_bucket_gapfill(temp * INTERVAL '1 hour', time) AS h {WINDOW} GROUP BY 1", r"constant interval"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour') AS h {WINDOW} GROUP BY 1", r"missing time"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time, '2024-05-01', '2024-05-02', 5) AS h {WINDOW} GROUP BY 1",
     r"too many arguments"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time, start => time) AS h {WINDOW} GROUP BY 1",
     r"start must be a constant"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp), NULL, 'yes') {WINDOW} GROUP BY 1",
     r"treat_null_as_missing must be true or false"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, interpolate(avg(temp), 5) {WINDOW} GROUP BY 1",
     r"prev is a \(time, value\) row"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, interpolate(avg(temp), NULL, temp) {WINDOW} GROUP BY 1",
     r"next is a \(time, value\) row"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp)) FILTER (WHERE temp > 0) {WINDOW} "
     "GROUP BY 1", r"locf\(\) takes no FILTER"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(temp) {WINDOW} GROUP BY 1, temp",
     r"locf\(\) fills an aggregate"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp), bogus => 1) {WINDOW} GROUP BY 1",
     r"unknown argument 'bogus'"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, avg(temp) {WINDOW} GROUP BY device",
     r"add GROUP BY 1"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, avg(temp) {WINDOW}", r"add GROUP BY 1"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS time, avg(temp) {WINDOW} GROUP BY time",
     r"GROUP BY time groups by the column time, not by the bucket"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, avg(temp) OVER () {WINDOW} GROUP BY 1, temp",
     r"window functions are not supported"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, * {WINDOW} GROUP BY ALL", r"no \* or COLUMNS"),
    (f"SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, device, avg(temp) {WINDOW} GROUP BY ROLLUP (1, 2)",
     r"ROLLUP"),
])
def test_wrong_statements_are_value_errors(lake, readings, query, match):
    with pytest.raises(ValueError, match=match):
        lake.sql(query)


def test_a_time_argument_that_is_not_a_time(lake, readings):
    put(readings, [(utc(2024, 5, 1), "a", 1.0)])
    with pytest.raises(RuntimeError, match="DOUBLE -> TIMESTAMP WITH TIME ZONE"):
        lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', temp) AS h FROM readings "
                 "WHERE temp >= 0 AND temp < 5 GROUP BY 1")


def test_null_treat_null_as_missing_is_false(lake, readings):
    put(readings, NULLS)
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, locf(avg(temp), NULL, NULL) AS l "
                   + NULLS_WINDOW)
    assert [v for _, v in rows(got)] == [1.0, 1.0, None, None, 5.0, 5.0]


def test_too_many_rows_are_refused(lake, readings):
    with pytest.raises(RuntimeError, match="would hold more than 20,000,000 rows"):
        lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 second', time) AS h FROM readings "
                 "WHERE time >= '2000-01-01' AND time < '2024-01-01' GROUP BY 1")
    # 3 series of 8 million minutes: each alone would pass.
    put(readings, [(utc(2024, 5, 1), d, 1.0) for d in "abc"])
    with pytest.raises(RuntimeError, match="would hold more than 20,000,000 rows"):
        lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 minute', time) AS h, device FROM readings "
                 "WHERE time >= '2010-01-01' AND time < '2025-03-20' GROUP BY 1, 2")


def test_hostile_text_stays_data(lake, readings):
    put(readings, [(utc(2024, 5, 1), "a", 1.0)])
    # Names and strings go through the parse tree: an alias full of quotes is a name, a bound
    # holding SQL is a string that fails to be a timestamp, and the statement stays one SELECT.
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS \"x\"\"); COPY readings TO '/tmp/x'; --\", "
                   "locf(avg(temp)) AS \"@w\" FROM readings WHERE time >= '2024-05-01' AND time < '2024-05-02' GROUP BY 1")
    assert got.column_names == ["x\"); COPY readings TO '/tmp/x'; --", "@w"]
    with pytest.raises(RuntimeError, match="(?i)conversion|timestamp"):
        lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS d FROM readings "
                 "WHERE time >= '2024-05-01'';COPY readings TO ''/tmp/x''' AND time < '2024-05-02' GROUP BY 1")
    with pytest.raises(ValueError, match="start must be a constant"):
        lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time, start => (SELECT 1 FROM read_csv('/etc/passwd')), "
                 "finish => '2024-05-02') AS d FROM readings GROUP BY 1")
    assert lake.tables() == ["default.readings"]


def test_a_column_named_like_a_placeholder(lake):
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("__tl_at_w", pa.float64()), ("__tl_b", pa.float64())])
    t = lake.create_table("odd", schema, time_column="time")
    put(t, [(utc(2024, 5, 1), 2.0, 3.0)], schema)
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 day', time) AS d, locf(avg(__tl_at_w)) AS a, "
                   "locf(sum(__tl_b)) AS b FROM odd WHERE time >= '2024-05-01' AND time < '2024-05-03' GROUP BY 1")
    assert rows(got) == [(utc(2024, 5, 1), 2.0, 3.0), (utc(2024, 5, 2), 2.0, 3.0)]


# -- time_weighted_mean ------------------------------------------------------------------------------
def seconds(n: float) -> dt.datetime:
    return utc(2024, 5, 1) + dt.timedelta(seconds=n)


TWM = [(seconds(0), "a", 10.0), (seconds(10), "a", 20.0), (seconds(40), "a", 5.0)]


def twm(lake, where="", group=""):
    return lake.sql(f"SELECT {group + ', ' if group else ''}time_weighted_mean(time, temp) AS locf, "
                    f"time_weighted_mean(time, temp, 'linear') AS linear FROM readings {where}"
                    + (f" GROUP BY {group} ORDER BY {group}" if group else ""))


def test_time_weighted_mean_by_hand(lake, readings):
    put(readings, TWM)
    # locf: 10 for 10 s, 20 for 30 s, over 40 s = 17.5; linear: trapezoids 15*10 + 12.5*30 = 525 / 40.
    assert rows(twm(lake)) == [(17.5, 13.125)]


def test_time_weighted_mean_out_of_order_files_and_nulls(lake, readings):
    for r in (TWM[2], (seconds(25), "a", None), TWM[0], TWM[1]):
        put(readings, [r])
    assert rows(twm(lake)) == [(17.5, 13.125)]


def test_time_weighted_mean_one_reading_none_and_same_instant(lake, readings):
    put(readings, [(seconds(5), "a", 4.0), (seconds(7), "b", None), (seconds(1), "c", 1.0), (seconds(1), "c", 3.0)])
    assert rows(twm(lake, group="device")) == [("a", 4.0, 4.0), ("b", None, None), ("c", 2.0, 2.0)]
    assert rows(twm(lake, where="WHERE false")) == [(None, None)]


def test_time_weighted_mean_equal_times_do_not_depend_on_file_order(lake, readings):
    # Two readings at 0 s: taken in value order, so 3.0 holds until 10 s whatever the files' order.
    put(readings, [(seconds(0), "a", 3.0), (seconds(10), "a", 5.0)])
    put(readings, [(seconds(0), "a", 1.0)])
    assert rows(twm(lake)) == [(3.0, 4.0)]


def test_time_weighted_mean_per_series_and_bucket(lake, readings):
    put(readings, [(seconds(0), "a", 1.0), (seconds(30), "a", 3.0), (seconds(60), "a", 100.0), (seconds(90), "a", 0.0),
                   (seconds(0), "b", 2.0), (seconds(120), "b", 4.0)])
    got = lake.sql("SELECT device, time_bucket(INTERVAL '1 minute', time) AS m, time_weighted_mean(time, temp) AS w, "
                   "time_weighted_mean(time, temp, 'linear') AS l FROM readings GROUP BY ALL ORDER BY ALL")
    # Only the readings inside each bucket count: a's first minute is 1.0 held for 30 s then the
    # last reading (no weight); b's buckets hold one reading each.
    assert rows(got) == [
        ("a", seconds(0), 1.0, 2.0), ("a", seconds(60), 100.0, 50.0),
        ("b", seconds(0), 2.0, 2.0), ("b", seconds(120), 4.0, 4.0),
    ]


def test_time_weighted_mean_with_gapfill(lake, readings):
    put(readings, [(seconds(0), "a", 1.0), (seconds(30), "a", 3.0), (seconds(150), "a", 6.0)])
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '1 minute', time) AS m, "
                   "locf(time_weighted_mean(time, temp)) AS w FROM readings "
                   "WHERE time >= '2024-05-01 00:00' AND time < '2024-05-01 00:03' GROUP BY 1")
    assert rows(got) == [(seconds(0), 1.0), (seconds(60), 1.0), (seconds(120), 6.0)]


def test_time_weighted_mean_bad_method(lake, readings):
    put(readings, TWM)
    with pytest.raises(RuntimeError, match="the method must be 'locf' or 'linear', got spline"):
        lake.sql("SELECT time_weighted_mean(time, temp, 'spline') FROM readings")
    for method in ("locf", "forward_fill"):
        got = lake.sql(f"SELECT time_weighted_mean(time, temp, '{method}') AS w FROM readings").column(0)[0].as_py()
        assert math.isclose(got, 17.5)


def test_file_pruning_keeps_the_files_the_statement_needs(lake, readings):
    # One file per day and device. Without a look-up the window's WHERE prunes as for any
    # query; with one, files before the window stay readable (the upper bound and the series
    # still prune).
    for day in range(1, 6):
        for device in ("a", "b"):
            put(readings, [(utc(2024, 5, day, 12), device, float(day))])
    views = lambda: lake._catalog()._views["default.readings"].files  # noqa: E731
    window = ("FROM readings WHERE device = 'a' AND time >= '2024-05-04' AND time < '2024-05-05' GROUP BY 1")
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '12 hours', time) AS h, locf(avg(temp), NULL) AS l " + window)
    assert rows(got) == [(utc(2024, 5, 4), None), (utc(2024, 5, 4, 12), 4.0)]
    assert views() == 1
    got = lake.sql("SELECT time_bucket_gapfill(INTERVAL '12 hours', time) AS h, locf(avg(temp)) AS l " + window)
    assert rows(got) == [(utc(2024, 5, 4), 3.0), (utc(2024, 5, 4, 12), 4.0)]
    assert views() == 4


def test_the_examples_in_the_docs_run():
    import pathlib
    import re
    text = (pathlib.Path(__file__).parents[2] / "docs" / "api.md").read_text()
    section = text[text.index("#### Gap filling"):text.index("### `lake.latest(table)")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), {})


# -- against a reference written out in Python ---------------------------------------------------
def _reference(readings, start, end, width, treat):
    """(bucket, device) -> (avg, locf, interpolate) as docs/api.md describes them."""
    origin = utc(2000, 1, 3)
    bucket = lambda t: origin + width * ((t - origin) // width)  # noqa: E731

    def averages(rows):
        sums = {}
        for t, d, v in rows:
            sums.setdefault((d, bucket(t)), []).append(v)
        return {k: (sum(x for x in vs if x is not None) / len([x for x in vs if x is not None])
                    if any(x is not None for x in vs) else None) for k, vs in sums.items()}

    inside = averages([r for r in readings if start <= r[0] < end])
    before = averages([r for r in readings if r[0] < start])
    grid = []
    b = bucket(start)
    while b <= bucket(end - dt.timedelta(microseconds=1)):
        grid.append(b)
        b += width
    out = {}
    for device in sorted({d for d, _ in inside}):
        earlier = sorted((b, v) for (d, b), v in before.items() if d == device and v is not None)
        prev = earlier[-1] if earlier else (None, None)
        have = sorted((b, v) for (d, b), v in inside.items() if d == device)
        for b in grid:
            rows_before = [(x, v) for x, v in have if x <= b]
            rows_after = [(x, v) for x, v in have if x >= b]
            here = inside.get((device, b), "gap")
            value = None if here == "gap" else here
            if treat:
                seen = [v for _, v in rows_before if v is not None]
                locf = seen[-1] if seen else prev[1]
            else:
                locf = rows_before[-1][1] if rows_before else prev[1]
            if here != "gap":
                line = here
            else:
                x0, y0 = rows_before[-1] if rows_before else prev
                x1, y1 = rows_after[0] if rows_after else (None, None)
                if None in (x0, y0, x1, y1):
                    line = None
                elif y0 == y1:
                    line = y0
                else:
                    line = (y0 * (x1 - b).total_seconds() + y1 * (b - x0).total_seconds()) / (x1 - x0).total_seconds()
            out[(b, device)] = (value, locf, line)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_random_tables_match_the_reference(lake, readings, seed):
    import random
    rng = random.Random(seed)
    base = utc(2024, 5, 1)
    data = [(base + dt.timedelta(minutes=rng.randrange(0, 3 * 24 * 60)), rng.choice("abc"),
             None if rng.random() < 0.2 else float(rng.randrange(-50, 50)))
            for _ in range(rng.randrange(0 if seed == 0 else 20, 60))]
    for chunk in range(0, len(data), 7):  # several files, not in time order
        put(readings, data[chunk:chunk + 7])
    width = rng.choice([dt.timedelta(minutes=15), dt.timedelta(hours=1), dt.timedelta(hours=5), dt.timedelta(days=1)])
    start = base + dt.timedelta(minutes=rng.randrange(0, 2 * 24 * 60))
    end = start + dt.timedelta(minutes=rng.randrange(1, 24 * 60))
    treat = rng.random() < 0.5
    got = lake.sql(
        f"SELECT time_bucket_gapfill(INTERVAL '{int(width.total_seconds())} seconds', time) AS b, device, avg(temp) AS a, "
        f"locf(avg(temp), treat_null_as_missing => {str(treat).lower()}) AS l, interpolate(avg(temp)) AS i "
        f"FROM readings WHERE time >= '{start.isoformat()}' AND time < '{end.isoformat()}' GROUP BY 1, 2")
    want = _reference(data, start, end, width, treat)
    assert sorted((r["b"], r["device"]) for r in got.to_pylist()) == sorted(want)
    for r in got.to_pylist():
        expected = want[(r["b"], r["device"])]
        for value, wanted in zip((r["a"], r["l"], r["i"]), expected):
            assert (value is None and wanted is None) or value == pytest.approx(wanted, rel=1e-9, abs=1e-9), (r, expected)


def test_a_table_with_a_rollup_fills_from_the_raw_rows(lake, readings):
    put(readings, [(utc(2024, 5, 1, 0, 10), "a", 1.0), (utc(2024, 5, 1, 0, 50), "a", 3.0), (utc(2024, 5, 1, 3), "a", 8.0)])
    lake.sql("CREATE MATERIALIZED ROLLUP hourly AS SELECT time_bucket(INTERVAL '1 hour', time) AS hour, device, "
             "avg(temp) AS temp FROM readings GROUP BY 1, 2")
    q = ("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, device, avg(temp) AS a, interpolate(avg(temp)) AS i "
         "FROM readings WHERE time >= '2024-05-01' AND time < '2024-05-01 04:00' GROUP BY 1, 2")
    want = [(utc(2024, 5, 1, 0), "a", 2.0, 2.0), (utc(2024, 5, 1, 1), "a", None, 4.0),
            (utc(2024, 5, 1, 2), "a", None, 6.0), (utc(2024, 5, 1, 3), "a", 8.0, 8.0)]
    assert rows(lake.sql(q)) == want
    assert rows(lake.sql(q, rollups=False)) == want


def test_two_gapfill_selects_in_one_statement_fill_each_their_own(lake, readings):
    put(readings, [(utc(2024, 4, 30, 2), "a", 5.0), (utc(2024, 5, 1, 0, 10), "a", 1.0), (utc(2024, 5, 1, 2), "b", 3.0)])
    part = ("SELECT time_bucket_gapfill(INTERVAL '1 hour', time) AS h, '{d}' AS d, locf(avg(temp)) AS l FROM readings "
            "WHERE time >= '2024-05-01' AND time < '2024-05-01 03:00' AND device = '{d}' GROUP BY 1")
    got = lake.sql(part.format(d="a") + " UNION ALL " + part.format(d="b") + " ORDER BY d, h")
    h = [utc(2024, 5, 1, i) for i in range(3)]
    assert rows(got) == [(h[0], "a", 1.0), (h[1], "a", 1.0), (h[2], "a", 1.0),
                         (h[0], "b", None), (h[1], "b", None), (h[2], "b", 3.0)]
