"""Adversarial tests of materialized rollups (issue 35: python/timelake/_rollup.py, _route.py).

The promise under attack: a query on a rollup, and a GROUP BY time_bucket query on its source
that is routed to it, always equal the same aggregate computed from the raw rows at the same
moment (`lake.sql(q, rollups=False)`), whatever happened before (appends, late rows, refreshes,
compactions, retention, schema changes, other writers); and bad input is a clear ValueError /
KeyError / RuntimeError with nothing written.

Tests marked xfail(strict=True) show a defect that is still there (the reason names it and its
cause); the others are attacks that held, kept as regression tests. Local lakes only: nothing
here depends on the object store.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys
import textwrap
import threading

import pyarrow as pa
import pytest

import timelake
from rollup_helpers import NO_REFRESH, RouteSpy, assert_same, canonical  # noqa: F401
from helpers import IOT_SCHEMA, UTC, at, iot_series, iot_table, table_dir


HOURLY = ("CREATE MATERIALIZED ROLLUP hourly AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
          "avg(temp) AS a, count(*) AS n, min(temp) AS lo, sum(temp) AS s FROM readings GROUP BY 1, 2")
HOURLY_RAW = ("SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, avg(temp) AS a, count(*) AS n, "
              "min(temp) AS lo, sum(temp) AS s FROM readings GROUP BY 1, 2")


def assert_routed_exact(lake, query: str, rel: float = 1e-9) -> None:
    assert_same(lake.sql(query), lake.sql(query, rollups=False), rel)


@pytest.fixture
def lake(lake_path):
    return timelake.Lake(str(lake_path), storage_options=NO_REFRESH)


def make_readings(lake, schema=IOT_SCHEMA, **kwargs):
    return lake.create_table("readings", schema, series_key=["device_id"], **kwargs)


def spread(n, start=at(2024, 3, 5), minutes=7, devices="abc"):
    """n rows, `minutes` apart, round-robin over `devices`, temp = the row's index."""
    return [(start + dt.timedelta(minutes=minutes * i), devices[i % len(devices)], float(i)) for i in range(n)]


# -- defects ----------------------------------------------------------------------------------------


def test_a_rollup_recreated_under_its_name_with_another_width_routes_exactly(lake):
    t = make_readings(lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 48)))
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "sum(temp) AS s FROM readings GROUP BY 1, 2")
    q = "SELECT time_bucket(INTERVAL '1 hour', time) AS h, sum(temp) AS s FROM readings GROUP BY 1"
    assert_routed_exact(lake, q)
    lake.sql("DROP MATERIALIZED ROLLUP r")
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 day', time) AS b, device_id, "
             "sum(temp) AS s FROM readings GROUP BY 1, 2")
    assert_routed_exact(lake, q)  # 8 hours of data: 8 rows, not one row holding the day's sum


def test_two_rollups_of_one_source_refreshed_together_both_stay_exact(lake):
    t = make_readings(lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 48)))
    lake.sql("CREATE MATERIALIZED ROLLUP hourly AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "sum(temp) AS s FROM readings GROUP BY 1, 2")
    lake.sql("CREATE MATERIALIZED ROLLUP daily AS SELECT time_bucket(INTERVAL '1 day', time) AS b, "
             "sum(temp) AS s FROM readings GROUP BY 1")
    t.append(iot_table([(at(2024, 3, 5, 5, 1), "a", 1000.0)]))  # late, into both rollups' buckets
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(
        "SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, sum(temp) AS s FROM readings GROUP BY 1, 2",
        rollups=False))
    assert_same(lake.sql("SELECT * FROM daily"), lake.sql(
        "SELECT time_bucket(INTERVAL '1 day', time) AS b, sum(temp) AS s FROM readings GROUP BY 1", rollups=False))


def test_a_routed_query_is_exact_after_the_rollups_own_retention(lake):
    t = make_readings(lake)
    now = dt.datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    t.append(iot_table(iot_series(now - dt.timedelta(days=60), 12) + iot_series(now - dt.timedelta(hours=3), 12)))
    lake.sql("CREATE MATERIALIZED ROLLUP r WITH (retention = '30d') AS SELECT time_bucket(INTERVAL '1 hour', time) "
             "AS b, device_id, avg(temp) AS a, count(*) AS n FROM readings GROUP BY 1, 2")
    assert lake.table("r").maintain()["partitions_dropped"] == 1
    # The rollup's retention is its own business; the source still holds every raw row.
    assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, avg(temp) AS a, "
                              "count(*) AS n FROM readings GROUP BY 1, 2")


def test_appending_to_a_rollup_directly_is_refused(lake):
    t = make_readings(lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "sum(temp) AS s, count(*) AS n FROM readings GROUP BY 1, 2")
    r = lake.table("r")
    version = r.version
    forged = pa.table({"b": pa.array([at(2024, 3, 5)], pa.timestamp("us", tz="UTC")), "device_id": ["a"],
                       "s": [1.0], "n": pa.array([5], pa.int64()), "__rows": pa.array([5], pa.int64())},
                      schema=r.schema)
    try:
        with pytest.raises(ValueError, match="rollup"):
            r.append(forged)
    finally:
        # Whatever happened, the rollup and routed queries must still equal the raw rows.
        assert_same(lake.sql("SELECT * FROM r"), lake.sql(
            "SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, sum(temp) AS s, count(*) AS n "
            "FROM readings GROUP BY 1, 2", rollups=False))
        assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, sum(temp) AS s "
                                  "FROM readings GROUP BY 1, 2")
    assert lake.table("r").version == version


INT_SCHEMA = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("v", pa.int64())])


def int_rows(times, values):
    return pa.table({"time": times, "device_id": ["a"] * len(times), "v": values}, schema=INT_SCHEMA)


def test_a_create_whose_first_refresh_fails_writes_nothing(lake, monkeypatch):
    t = make_readings(lake, schema=INT_SCHEMA)
    t.append(int_rows([at(2024, 3, 5, 0, i) for i in range(3)], [2**62, 2**62, 5]))

    def failing(*args, **kwargs):
        raise RuntimeError("the store failed (simulated)")

    monkeypatch.setattr(timelake._rollup._Session, "recompute", failing)
    with pytest.raises(RuntimeError, match="simulated"):
        lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
                 "sum(v) AS s FROM readings GROUP BY 1, 2")
    assert lake.tables() == ["default.readings"]


def test_integer_sums_beyond_bigint_route_as_the_raw_rows_answer(lake):
    t = make_readings(lake, schema=INT_SCHEMA)
    t.append(int_rows([at(2024, 3, 5, 0, i) for i in range(3)], [1, 2, 5]))
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "sum(v) AS s FROM readings GROUP BY 1, 2")
    t.append(int_rows([at(2024, 3, 5, 1, i) for i in range(2)], [2**62, 2**62]))
    q = "SELECT time_bucket(INTERVAL '1 day', time) AS d, sum(v) AS s FROM readings GROUP BY 1"
    assert lake.sql(q, rollups=False).to_pylist() == [{"d": at(2024, 3, 5), "s": 2**63 + 8}]
    assert_routed_exact(lake, q)


def test_an_unaliased_aggregate_with_group_by_all_keeps_its_name(lake):
    t = make_readings(lake)
    t.append(iot_table(spread(100)))
    lake.sql(HOURLY)
    q = "SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, sum(temp) FROM readings GROUP BY ALL"
    assert lake.sql(q, rollups=False).column_names == ["h", "device_id", 'sum("temp")']
    assert_routed_exact(lake, q)


def test_a_rollup_grouping_by_the_time_column_itself(lake):
    t = make_readings(lake)
    t.append(iot_table(spread(100)))
    with pytest.raises(ValueError, match="time_bucket"):
        lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, time, "
                 "count(*) AS n FROM readings GROUP BY 1, 2")
    assert lake.tables() == ["default.readings"]


def test_integer_sums_and_averages_within_bigint_route_exactly(lake):
    t = make_readings(lake, schema=INT_SCHEMA)
    t.append(int_rows([at(2024, 3, 5, h, m) for h in range(5) for m in (0, 20, 40)], [3, -7, 2**40] * 5))
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "sum(v) AS s, avg(v) AS a, min(v) AS lo FROM readings GROUP BY 1, 2")
    t.append(int_rows([at(2024, 3, 5, 2, 5)], [11]))
    for q in ["SELECT time_bucket(INTERVAL '1 day', time) AS d, sum(v) AS s, avg(v) AS a, min(v) AS lo, "
              "count(v) AS c FROM readings GROUP BY 1",
              "SELECT time_bucket(INTERVAL '2 hours', time) AS d, device_id, sum(v) FROM readings "
              "WHERE time >= '2024-03-05 00:30' GROUP BY 1, 2"]:
        assert_routed_exact(lake, q)
    got = lake.sql("SELECT time_bucket(INTERVAL '1 day', time) AS d, sum(v) AS s FROM readings GROUP BY 1")
    assert got.to_pylist() == [{"d": at(2024, 3, 5), "s": 5 * (3 - 7 + 2**40) + 11}]


def test_merged_deviations_of_large_values_are_exact(lake):
    t = make_readings(lake)
    t.append(iot_table([(at(2024, 3, 5, h, m), "a", 1e9 + (m // 10) % 3) for h in range(24) for m in range(0, 60, 10)]))
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "stddev(temp) AS sd FROM readings GROUP BY 1, 2")
    assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '1 day', time) AS d, stddev(temp) AS sd, "
                              "var_pop(temp) AS v FROM readings GROUP BY 1", rel=1e-6)


def test_unicode_before_the_bucket_width_in_create(lake):
    make_readings(lake).append(iot_table(iot_series(at(2024, 3, 5), 12)))
    out = lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT /* température */ time_bucket(INTERVAL '1 hour', time) "
                   'AS b, count(*) AS "número" FROM readings GROUP BY b')
    assert out.to_pylist() == [{"rollup": "default.r", "rows": 2}]


def test_time_travel_on_a_rollup_reads_its_visible_columns_and_hides_tombstones(lake):
    t = make_readings(lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    lake.sql(HOURLY)
    current = lake.sql("SELECT * FROM hourly")
    t.append(iot_table([(at(2024, 3, 5, 0, 1), "a", 1.0)]))
    lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    # Version 0 is the rollup's creation (no rows yet), version 1 its first refresh.
    assert lake.sql("SELECT * FROM hourly", as_of=0).num_rows == 0
    assert_same(lake.sql("SELECT * FROM hourly", as_of=1), current)
    assert lake.sql("SELECT * FROM hourly AT (VERSION => 1)").column_names == current.column_names


def test_a_refresh_after_widening_a_source_column(lake):
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("v", pa.int32())])
    t = make_readings(lake, schema=schema)
    t.append(pa.table({"time": [at(2024, 3, 5, 0, i) for i in range(3)], "device_id": ["a"] * 3, "v": [1, 2, 3]},
                      schema=schema))
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "max(v) AS mx FROM readings GROUP BY 1, 2")
    t.widen_columns({"v": pa.int64()})
    wide = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("v", pa.int64())])
    lake.table("readings").append(pa.table({"time": [at(2024, 3, 5, 1)], "device_id": ["a"], "v": [2**40]},
                                           schema=wide))
    q = "SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, max(v) AS mx FROM readings GROUP BY 1, 2"
    assert_routed_exact(lake, q)  # holds: the changed pair is read from the raw rows
    assert lake.sql("REFRESH MATERIALIZED ROLLUP r").to_pylist()[0]["rows"] == 1
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(q, rollups=False))


def test_a_refresh_after_widening_a_float_column(lake):
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("f", pa.float32())])
    t = make_readings(lake, schema=schema)
    t.append(pa.table({"time": [at(2024, 3, 5, 0, i) for i in range(3)], "device_id": ["a"] * 3,
                       "f": [1.5, 2.5, 3.5]}, schema=schema))
    definition = ("SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, min(f) AS mf, "
                  "first(f ORDER BY time) AS ff FROM readings GROUP BY 1, 2")
    lake.sql(f"CREATE MATERIALIZED ROLLUP r AS {definition}")
    t.widen_columns({"f": pa.float64()})
    wide = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("f", pa.float64())])
    lake.table("readings").append(pa.table({"time": [at(2024, 3, 5, 0, 0, 0, 1)], "device_id": ["a"], "f": [0.1]},
                                           schema=wide))
    q = ("SELECT time_bucket(INTERVAL '1 day', time) AS d, min(f) AS mf, first(f ORDER BY time) AS ff "
         "FROM readings GROUP BY 1")
    assert_routed_exact(lake, q)  # holds before the refresh: the changed pair is read raw
    lake.sql("REFRESH MATERIALIZED ROLLUP r")
    assert lake.sql(q, rollups=False).to_pylist() == [{"d": at(2024, 3, 5), "mf": 0.1, "ff": 1.5}]
    assert_routed_exact(lake, q)
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(definition, rollups=False))


SITES = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("site", pa.string()),
                   ("temp", pa.float64())])


def test_an_upsert_that_moves_a_row_to_another_group(lake):
    t = make_readings(lake, schema=SITES, dedup="last")
    t.append(pa.table({"time": [at(2024, 3, 5, 0, i) for i in range(4)], "device_id": ["a", "a", "b", "b"],
                       "site": ["x", "x", "x", "y"], "temp": [1.0, 2.0, 3.0, 4.0]}, schema=SITES))
    definition = ("SELECT time_bucket(INTERVAL '1 hour', time) AS b, site, sum(temp) AS s, count(*) AS n "
                  "FROM readings GROUP BY 1, 2")
    lake.sql(f"CREATE MATERIALIZED ROLLUP r AS {definition}")
    # (00:00, a) is sent again from site z: its row at site x is replaced.
    t.append(pa.table({"time": [at(2024, 3, 5)], "device_id": ["a"], "site": ["z"], "temp": [10.0]}, schema=SITES))
    assert sorted((r["site"], r["s"], r["n"]) for r in lake.sql(definition, rollups=False).to_pylist()) == [
        ("x", 5.0, 2), ("y", 4.0, 1), ("z", 10.0, 1)]
    lake.sql("REFRESH MATERIALIZED ROLLUP r")
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(definition, rollups=False))
    assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '1 day', time) AS d, site, sum(temp) AS s "
                              "FROM readings GROUP BY 1, 2")


def test_an_upsert_under_dedup_first_and_a_compaction_keep_groups_exact(lake):
    t = make_readings(lake, schema=SITES, dedup="first")
    t.append(pa.table({"time": [at(2024, 3, 5, 0, i) for i in range(4)], "device_id": ["a", "a", "b", "b"],
                       "site": ["x", "x", "x", "y"], "temp": [1.0, 2.0, 3.0, 4.0]}, schema=SITES))
    definition = ("SELECT time_bucket(INTERVAL '1 hour', time) AS b, site, sum(temp) AS s, count(*) AS n "
                  "FROM readings GROUP BY 1, 2")
    lake.sql(f"CREATE MATERIALIZED ROLLUP r AS {definition}")
    t.append(pa.table({"time": [at(2024, 3, 5)], "device_id": ["a"], "site": ["z"], "temp": [10.0]}, schema=SITES))
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(definition, rollups=False))
    t.maintain()  # compaction drops the ignored duplicate; the rollup is refreshed
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(definition, rollups=False))
    assert sorted((r["site"], r["s"]) for r in lake.sql("SELECT * FROM r").to_pylist()) == [("x", 6.0), ("y", 4.0)]


NAIVE = pa.schema([("time", pa.timestamp("us")), ("device_id", pa.string()), ("temp", pa.float64())])


def test_a_naive_source_with_an_offset_in_a_string_bound(lake):
    t = make_readings(lake, schema=NAIVE)
    t.append(iot_table([(dt.datetime(2024, 3, 5) + dt.timedelta(minutes=7 * i), "abc"[i % 3], float(i))
                        for i in range(300)], NAIVE))
    lake.sql(HOURLY)
    assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, count(*) AS c "
                              "FROM readings WHERE time >= '2024-03-05 01:30:00+05' GROUP BY 1, 2")


def test_a_rollup_statement_after_a_leading_comment(lake):
    make_readings(lake).append(iot_table(iot_series(at(2024, 3, 5), 12)))
    out = lake.sql("-- the dashboard's rollup\n" + HOURLY)
    assert out.to_pylist() == [{"rollup": "default.hourly", "rows": 6}]


def test_a_query_alias_named_like_a_rollup_column(lake):
    t = make_readings(lake)
    t.append(iot_table(spread(100)))
    lake.sql(HOURLY)
    assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '1 hour', time) AS a, count(*) AS c FROM readings GROUP BY a")


def test_a_rollup_dropped_by_another_handle_is_not_routed_to(lake, lake_path):
    t = make_readings(lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    lake.sql(HOURLY)
    lake._rollups._ttl = 3600  # the registry's 1 s window, widened so that the test cannot miss it
    q = "SELECT time_bucket(INTERVAL '1 day', time) AS d, avg(temp) AS a FROM readings GROUP BY 1"
    assert_routed_exact(lake, q)
    timelake.Lake(str(lake_path), storage_options=NO_REFRESH).drop_table("hourly")
    assert_routed_exact(lake, q)


@pytest.mark.xfail(strict=True, reason=(
    "a late row into a bucket whose raw chunk the source's retention dropped makes the pair "
    "'changed' (_Session.changed_pairs: the added file), so the refresh recomputes it from the raw "
    "rows left (the late row alone) and the rollup loses the bucket's retained aggregate for good "
    "(n 6 -> 1, and it stays 1 after retention drops the late row too): the rollup does not "
    "survive the source's retention (issue 35, point 4)"))
def test_a_late_row_into_a_retained_bucket_keeps_its_history(lake):
    t = make_readings(lake, retention="3d", chunk="day")
    now = dt.datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    old = now - dt.timedelta(days=10)
    t.append(iot_table(iot_series(old, 6) + iot_series(now - dt.timedelta(hours=2), 6)))
    lake.sql(HOURLY)
    assert t.maintain()["partitions_dropped"] == 1
    q = f"SELECT n, a FROM hourly WHERE b = TIMESTAMPTZ '{old.isoformat()}' AND device_id = 'a'"
    assert lake.sql(q).to_pylist() == [{"n": 6, "a": 22.5}]
    t.append(iot_table([(old + dt.timedelta(minutes=1), "a", 1000.0)]))
    lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    t.maintain()  # drops the late row's chunk again
    assert lake.sql(q).to_pylist() == [{"n": 7, "a": pytest.approx((135 + 1000) / 7)}]


def test_latest_on_a_rollup_answers_as_its_rows_do(lake):
    deltalake = pytest.importorskip("deltalake")
    t = make_readings(lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "avg(temp) AS a, count(*) AS n FROM readings GROUP BY 1, 2")
    deltalake.DeltaTable(str(table_dir(t))).delete("device_id = 'b' AND time >= '2024-03-05 01:00:00'")
    lake.sql("REFRESH MATERIALIZED ROLLUP r")  # (01:00, b) is now a tombstone
    lake.table("readings").append(iot_table([(at(2024, 3, 5, 3, 3), "a", 1000.0)]))  # not refreshed
    got = sorted(lake.latest("r").to_pylist(), key=lambda r: r["device_id"])
    assert got == [
        {"b": at(2024, 3, 5, 3), "device_id": "a", "a": 1000.0, "n": 1},
        {"b": at(2024, 3, 5, 0), "device_id": "b", "a": pytest.approx(22.6), "n": 6},
        {"b": at(2024, 3, 5, 1), "device_id": "c", "a": pytest.approx(28.7), "n": 6},
    ]


def forge_rollup_property(lake, name: str) -> None:
    """Another engine (deltalake) sets a malformed timelake.rollup.spec on a plain table."""
    deltalake = pytest.importorskip("deltalake")
    table = deltalake.DeltaTable(str(table_dir(lake.table(name))))
    if not hasattr(table, "alter") or not hasattr(table.alter, "set_table_properties"):
        pytest.skip("this deltalake cannot set table properties")
    table.alter.set_table_properties({"timelake.rollup.spec": "{not json"}, raise_if_not_exists=False)


def test_a_malformed_rollup_property_on_another_table_breaks_no_query(lake):
    t = make_readings(lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    lake.create_table("other", IOT_SCHEMA, series_key=["device_id"])
    forge_rollup_property(lake, "other")
    fresh = timelake.Lake(lake.location, storage_options=NO_REFRESH)
    assert fresh.sql("SELECT count(*) AS n FROM readings").to_pylist() == [{"n": 36}]
    q = "SELECT time_bucket(INTERVAL '1 hour', time) AS h, count(*) AS n FROM readings GROUP BY 1 ORDER BY 1"
    assert fresh.sql(q).column("n").to_pylist() == [18, 18]


def test_an_append_that_committed_does_not_raise(lake, lake_path):
    t = make_readings(lake)
    lake.create_table("other", IOT_SCHEMA, series_key=["device_id"])
    forge_rollup_property(lake, "other")
    appender = timelake.Lake(str(lake_path))  # background refresh on (the default)
    table = appender.table("readings")
    try:
        table.append(iot_table(iot_series(at(2024, 3, 5), 2)))
    finally:
        assert timelake.Lake(str(lake_path), storage_options=NO_REFRESH).table("readings").version == 1


_ABORT_AT_EXIT = textwrap.dedent(
    """
    import datetime as dt, glob, os, sys
    import pyarrow as pa
    import timelake
    location = sys.argv[1]
    lake = timelake.Lake(location, storage_options={"timelake_rollup_refresh_interval": "0s"})
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("temp", pa.float64())])
    def rows(day):
        ts = [dt.datetime(2024, 3, day, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=10 * i) for i in range(12)]
        return pa.table({"time": ts, "device_id": ["a"] * 12, "temp": [float(i) for i in range(12)]}, schema=schema)
    t = lake.create_table("readings", schema, series_key=["device_id"])
    t.append(rows(5))
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "count(*) AS n FROM readings GROUP BY 1, 2")
    # A file the next refresh reads is gone (as when it races a drop or a cleanup).
    for f in glob.glob(os.path.join(location, "default", "readings", "data", "*", "*.parquet")):
        os.remove(f)
    # Rows of the same day again: queues the background refresh, which recomputes that day's
    # pairs and fails reading the removed file.
    t.append(rows(5))
    assert lake._refresher.wait(60)
    print("errors:", sorted(lake._refresher.errors), flush=True)
    """
)


def test_a_failed_background_refresh_does_not_abort_the_process_at_exit(lake_path):
    # It aborts nearly every time, not every time: up to three runs, each must end well.
    for attempt in range(3):
        path = lake_path / str(attempt)
        path.mkdir(parents=True)
        p = subprocess.run([sys.executable, "-c", _ABORT_AT_EXIT, str(path)], capture_output=True, text=True,
                           timeout=120)
        assert "errors: ['default.r']" in p.stdout, p.stderr
        assert p.returncode == 0, p.stderr[-500:]


# -- attacks that held ------------------------------------------------------------------------------


@pytest.mark.parametrize("bound", [
    "time >= '2024-03-05 01:30:00+05'",
    "time >= TIMESTAMPTZ '2024-03-05 10:30:00+05:30' AND time < TIMESTAMPTZ '2024-03-06 10:00:00 America/New_York'",
    "time > '2024-03-05 03:00' AND time <= '2024-03-05 09:00'",
    "time >= '2024-03-05 03:00' AND time < '2024-03-05 03:00'",  # lo == hi: empty
    "time BETWEEN '2024-03-05 09:00' AND '2024-03-05 09:00'",  # one instant
    "time BETWEEN '2024-03-06 01:00' AND '2024-03-05 01:00'",  # reversed: empty
    "time < '2024-03-06'",  # open below
    "'2024-03-05 03:00' < time",  # open above, the column on the right
    "time > DATE '2024-03-05'",
    "time >= TIMESTAMP '2024-03-05 03:00' AND time >= '2024-03-05 02:00' AND device_id <> 'b'",
    "time >= '2024-03-05 03:00:00.0000005'",  # below a microsecond
    "time >= '2030-01-01'",  # after every row
    "time > '-infinity' AND time < 'infinity'",
    "time >= '0001-01-01' AND time < '290000-01-01'",
    "time > '2024-03-05 01:00'::TIMESTAMPTZ - INTERVAL '1 hour' AND time >= to_timestamp(1709600000)",
    "time >= '2024-03-05T01:30:00Z' AND time > '1900-01-01 00:00:00-12'",
])
def test_routed_time_bounds_of_every_shape(lake, bound):
    t = make_readings(lake)
    t.append(iot_table(spread(400)))
    lake.sql(HOURLY)
    t.append(iot_table([(at(2024, 3, 5, 4, 4), "a", 100.0), (at(2024, 3, 5, 9, 0), "c", -1.0)]))  # late
    for width in ["1 hour", "2 hours", "1 day", "1 week", "1 month"]:
        q = (f"SELECT time_bucket(INTERVAL '{width}', time) AS h, device_id, avg(temp) AS a, count(*) AS c, "
             f"min(temp) AS m, sum(temp) AS s FROM readings WHERE {bound} GROUP BY 1, 2")
        assert_routed_exact(lake, q)


@pytest.mark.parametrize("bound", ["time >= '2024-03-05 01:30'", "time > '2024-03-05 03:00' AND time <= '2024-03-05 09:00'",
                                   "time >= TIMESTAMPTZ '2024-03-05 01:30:00+05'", "time < DATE '2024-03-06'"])
def test_a_naive_source_routes_exactly(lake, bound, monkeypatch):
    t = make_readings(lake, schema=NAIVE)
    t.append(iot_table([(dt.datetime(2024, 3, 5) + dt.timedelta(minutes=7 * i), "abc"[i % 3], float(i))
                        for i in range(300)], NAIVE))
    lake.sql(HOURLY)
    t.append(iot_table([(dt.datetime(2024, 3, 5, 2, 2), "a", 1000.0)], NAIVE))
    assert lake.sql("SELECT * FROM hourly").schema.field("b").type == pa.timestamp("us")
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(HOURLY_RAW, rollups=False))
    spy = RouteSpy(monkeypatch)
    for width in ("1 hour", "1 day"):
        assert_routed_exact(lake, f"SELECT time_bucket(INTERVAL '{width}', time) AS h, device_id, avg(temp) AS a, "
                                  f"count(*) AS c FROM readings WHERE {bound} GROUP BY 1, 2")
    assert spy.decisions == [True, True]


@pytest.mark.parametrize("unit", ["s", "ms"])
def test_second_and_millisecond_time_columns(lake, unit):
    schema = pa.schema([("time", pa.timestamp(unit, tz="UTC")), ("device_id", pa.string()), ("temp", pa.float64())])
    t = make_readings(lake, schema=schema)
    t.append(iot_table([(at(2024, 3, 5) + dt.timedelta(minutes=7 * i, seconds=i % 5), "abc"[i % 3], float(i))
                        for i in range(200)], schema))
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "avg(temp) AS a, first(temp ORDER BY time) AS f FROM readings GROUP BY 1, 2")
    t.append(iot_table([(at(2024, 3, 5, 2, 2, 2), "a", 1000.0)], schema))
    raw = ("SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, avg(temp) AS a, first(temp ORDER BY time) "
           "AS f FROM readings GROUP BY 1, 2")
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(raw, rollups=False))
    for bound in ("time > '2024-03-05 01:00:00'", "time <= '2024-03-05 01:00:00'"):
        assert_routed_exact(lake, f"SELECT time_bucket(INTERVAL '3 hours', time) AS h, device_id, count(*) AS n, "
                                  f"first(temp ORDER BY time) AS f FROM readings WHERE {bound} GROUP BY 1, 2")
    lake.sql("REFRESH MATERIALIZED ROLLUP r")
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(raw, rollups=False))


def test_nulls_in_a_group_column_and_all_null_buckets(lake):
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("site", pa.string()),
                        ("temp", pa.float64())])
    t = make_readings(lake, schema=schema)
    t.append(pa.table({"time": [at(2024, 3, 5, 0, i) for i in range(4)] + [at(2024, 3, 5, 1, 5)],
                       "device_id": ["a", "a", "b", "b", "c"], "site": [None, "x", None, "y", None],
                       "temp": [1.0, 2.0, 3.0, None, None]}, schema=schema))
    defn = ("SELECT time_bucket(INTERVAL '1 hour', time) AS b, site, sum(temp) AS s, avg(temp) AS a, "
            "stddev(temp) AS sd, var_pop(temp) AS vp, count(temp) AS c, min(temp) AS lo FROM readings GROUP BY 1, 2")
    assert lake.sql(f"CREATE MATERIALIZED ROLLUP r AS {defn}").to_pylist()[0]["rows"] == 4
    t.append(pa.table({"time": [at(2024, 3, 5, 0, 30)], "device_id": ["c"], "site": [None], "temp": [10.0]},
                      schema=schema))
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(defn, rollups=False))
    for q in [defn, "SELECT time_bucket(INTERVAL '1 day', time) AS d, sum(temp) AS s, stddev(temp) AS sd, "
                    "var_pop(temp) AS vp, avg(temp) AS a, count(*) AS n FROM readings WHERE site IS NULL GROUP BY 1"]:
        assert_routed_exact(lake, q)
    lake.sql("REFRESH MATERIALIZED ROLLUP r")
    got = {(r["b"].hour, r["site"]): r for r in lake.sql("SELECT * FROM r").to_pylist()}
    assert got[(1, None)]["s"] is None and got[(1, None)]["c"] == 0 and got[(1, None)]["sd"] is None
    assert got[(0, "y")]["s"] is None and got[(0, "y")]["vp"] is None  # all-null bucket
    assert got[(0, None)]["sd"] == pytest.approx(math.sqrt(((1 - 14 / 3) ** 2 + (3 - 14 / 3) ** 2
                                                            + (10 - 14 / 3) ** 2) / 2))
    assert got[(0, "x")]["sd"] is None and got[(0, "x")]["vp"] == 0.0  # one value
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(defn, rollups=False))


def test_an_integer_series_key_grouped_by_a_subset_and_a_coarser_width(lake):
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("dev", pa.int32()), ("site", pa.int64()),
                        ("temp", pa.float64())])
    t = lake.create_table("readings", schema, series_key=["dev"])
    t.append(pa.table({"time": [at(2024, 3, 5, 0, i) for i in range(60)], "dev": [i % 4 for i in range(60)],
                       "site": [i % 2 for i in range(60)], "temp": [float(i) for i in range(60)]}, schema=schema))
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '10 minutes', time) AS b, dev, site, "
             "avg(temp) AS a, last(temp ORDER BY time) AS l FROM readings GROUP BY ALL")
    t.append(pa.table({"time": [at(2024, 3, 5, 0, 5, 30)], "dev": [2], "site": [0], "temp": [99.0]}, schema=schema))
    for q in ["SELECT time_bucket(INTERVAL '30 minutes', time) AS b, dev, avg(temp) AS a, last(temp ORDER BY time) "
              "AS l FROM readings WHERE dev IN (1, 2) GROUP BY 1, 2",
              "SELECT time_bucket(INTERVAL '1 hour', time) AS b, site, sum(temp) AS s FROM readings GROUP BY ALL",
              "SELECT time_bucket(INTERVAL '20 minutes', time) AS b, avg(temp) AS a FROM readings "
              "WHERE time > '2024-03-05 00:07' GROUP BY 1"]:
        assert_routed_exact(lake, q)
    assert lake.sql("REFRESH MATERIALIZED ROLLUP r").to_pylist()[0]["rows"] == 1


@pytest.mark.parametrize("definition, raw, routed", [
    # The bucket named like the time column.
    ("SELECT time_bucket(INTERVAL '1 hour', time) AS time, device_id, avg(temp) AS temp, "
     "last(temp ORDER BY time) AS l FROM readings GROUP BY 1, 2", None,
     "SELECT time_bucket(INTERVAL '2 hours', time) AS h, avg(temp) AS a, last(temp ORDER BY time) AS l "
     "FROM readings WHERE time > '2024-03-05 00:30' GROUP BY 1"),
    # An aggregate named like the time column: routing must not mix the two up.
    ("SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, max(temp) AS time FROM readings GROUP BY 1, 2",
     None, "SELECT time_bucket(INTERVAL '1 hour', time) AS h, max(temp) AS m FROM readings GROUP BY 1"),
    # No grouping column; a week from days.
    ("SELECT time_bucket(INTERVAL '1 day', time) AS d, count(*) AS n, avg(temp) AS a, stddev_pop(temp) AS sp "
     "FROM readings GROUP BY 1", None,
     "SELECT time_bucket(INTERVAL '1 week', time) AS w, count(*) AS n, avg(temp) AS a, stddev_pop(temp) AS sp "
     "FROM readings GROUP BY 1"),
    # Months from a month.
    ("SELECT time_bucket(INTERVAL '1 month', time) AS m, device_id, sum(temp) AS s, count(*) AS n FROM readings "
     "GROUP BY 1, 2", None,
     "SELECT time_bucket(INTERVAL '3 months', time) AS q, sum(temp) AS s, count(*) FROM readings "
     "WHERE time >= '2024-02-10' GROUP BY 1"),
])
def test_odd_but_valid_definitions_stay_exact(lake, definition, raw, routed):
    t = make_readings(lake)
    t.append(iot_table(spread(500, start=at(2024, 2, 20), minutes=97)))
    lake.sql(f"CREATE MATERIALIZED ROLLUP r AS {definition}")
    t.append(iot_table([(at(2024, 3, 5, 1, 1, 1), "a", 1000.0), (at(2024, 2, 27, 5, 5), "b", -5.0)]))
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(raw or definition, rollups=False))
    assert_routed_exact(lake, routed)
    lake.sql("REFRESH MATERIALIZED ROLLUP r")
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(raw or definition, rollups=False))
    assert_routed_exact(lake, routed)


@pytest.mark.parametrize("query", [
    "SELECT time_bucket(INTERVAL '2 hours', time) AS h, avg(temp) AS x FROM readings GROUP BY h HAVING x > 40 "
    "ORDER BY x DESC, h LIMIT 3",
    "SELECT time_bucket(INTERVAL '2 hours', time) AS h, avg(temp) AS x FROM readings GROUP BY h HAVING avg(temp) > 40",
    "SELECT time_bucket(INTERVAL '2 hours', time) AS h, upper(device_id) AS d, max(temp) - min(temp) AS spread "
    "FROM readings GROUP BY 1, device_id",
    "SELECT time_bucket(INTERVAL '2 hours', time) AS h, sum(temp) / count(*) AS x, coalesce(avg(temp), 0) AS y, "
    "count(*) > 20 AS big FROM readings GROUP BY 1",
    "SELECT time_bucket(INTERVAL '1 day', time) AS h, device_id, first(temp ORDER BY time) AS f, "
    "last(temp ORDER BY time) AS l FROM readings GROUP BY 1, 2",
    "SELECT DISTINCT time_bucket(INTERVAL '1 day', time) AS h, count(*) AS c FROM readings GROUP BY 1",
    "SELECT time_bucket(INTERVAL '1 day', time) AS h, CASE WHEN count(*) > 10 THEN avg(temp) ELSE max(temp) END AS c "
    "FROM readings GROUP BY 1",
    "SELECT time_bucket(INTERVAL '1 day', time) AS h, device_id, stddev_samp(temp) AS s, variance(temp) AS v, "
    "mean(temp) AS m FROM readings GROUP BY 1, 2",
    "SELECT time_bucket(INTERVAL '1 day', time) AS h, device_id AS temp, count(*) AS c FROM readings GROUP BY 1, 2",
    "SELECT time_bucket(INTERVAL '1 hour', time) AS h, count(*) AS c, avg(temp) AS x FROM readings "
    "WHERE device_id = 'a' OR device_id = 'e' GROUP BY 1",
    "SELECT time_bucket(INTERVAL '1 hour', readings.time) AS h, count(*) AS c FROM readings GROUP BY 1",
    'SELECT time_bucket(INTERVAL \'1 hour\', "TIME") AS h, "Device_ID", AVG("TEMP") AS c FROM readings GROUP BY 1, 2',
    "SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) AS x FROM readings r WHERE r.time > '2024-03-05 02:30' "
    "GROUP BY 1",
    "SELECT time_bucket(INTERVAL '1 hour', time) + INTERVAL '30 minutes' AS h, avg(temp) AS x FROM readings "
    "GROUP BY time_bucket(INTERVAL '1 hour', time)",
    "SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp)::DECIMAL(10,2) AS x FROM readings GROUP BY 1",
    "SELECT time_bucket(INTERVAL '1 hour', time) AS h, sum(temp) AS x, sum(temp) AS x2 FROM readings GROUP BY 1 "
    "ORDER BY x DESC NULLS LAST, h LIMIT 4 OFFSET 1",
    # Not routable (kept as such): each reads the raw rows.
    "SELECT time_bucket(INTERVAL '1 day', time) AS h, first(temp ORDER BY time DESC) AS f FROM readings GROUP BY 1",
    "SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) AS x FROM readings GROUP BY ROLLUP (1)",
    "SELECT time_bucket(INTERVAL '1 hour', time) AS h, min(temp) AS x, arg_min(device_id, temp) AS y FROM readings "
    "GROUP BY 1",
    "SELECT time_bucket(INTERVAL '1 hour', time) AS h, count(*) AS c FROM readings "
    "WHERE time >= '2024-03-05 02:30' AND device_id IN (SELECT 'a') GROUP BY 1",
])
def test_query_shapes_route_exactly_or_read_the_raw_rows(lake, query):
    t = make_readings(lake)
    t.append(iot_table([(at(2024, 3, 5) + dt.timedelta(minutes=7 * i, microseconds=i), "abcd"[i % 4],
                         float((i * 37) % 101) if i % 11 else None) for i in range(400)]))
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "avg(temp) AS a, count(*) AS n, min(temp) AS lo, max(temp) AS hi, first(temp ORDER BY time) AS f, "
             "last(temp ORDER BY time) AS l, stddev(temp) AS sd FROM readings GROUP BY 1, 2")
    t.append(iot_table([(at(2024, 3, 5, 3, 3), "a", 500.0), (at(2024, 3, 5, 7, 7), "e", 1.0)]))
    assert_routed_exact(lake, query)


def test_a_rollup_whose_first_refresh_never_ran_reads_the_raw_rows(lake, monkeypatch):
    """A CREATE killed between making the table and its first refresh (simulated): the rollup
    records no source version, reads the raw rows, is not routed to, and REFRESH completes it."""
    t = make_readings(lake)
    t.append(iot_table(spread(100)))

    def killed(lake_, name):
        raise KeyboardInterrupt

    monkeypatch.setattr(timelake._rollup, "refresh", killed)
    monkeypatch.setattr(timelake._rollup, "_drop_half_made", lambda lake_, name: None)  # killed: no cleanup
    with pytest.raises(KeyboardInterrupt):
        lake.sql(HOURLY)
    monkeypatch.undo()
    assert lake.table("hourly").info()["rollup"]["source_version"] is None
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(HOURLY_RAW, rollups=False))
    spy = RouteSpy(monkeypatch)
    q = "SELECT time_bucket(INTERVAL '1 day', time) AS d, avg(temp) AS a FROM readings GROUP BY 1"
    assert_routed_exact(lake, q)
    assert spy.decisions == [False]
    assert lake.sql("REFRESH MATERIALIZED ROLLUP hourly").to_pylist()[0]["rows"] == 36
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(HOURLY_RAW, rollups=False))
    assert_routed_exact(lake, q)


def test_the_sources_removed_files_vacuumed_before_a_refresh(lake):
    t = make_readings(lake, properties={"timelake.backgroundCompaction": "false",
                                        "timelake.retentionDurationCheck": "false",
                                        "delta.deletedFileRetentionDuration": "interval 0 seconds"})
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    t.append(iot_table(iot_series(at(2024, 3, 5, 5), 12)))
    lake.sql(HOURLY)
    t.append(iot_table(iot_series(at(2024, 3, 5, 9), 12)))
    threading.Event().wait(1.1)
    report = t.maintain(rollups=False)  # compacts, then vacuums the files the rollup's version reads
    assert report["files_rewritten"] == 3 and report["objects_deleted"] >= 3
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(HOURLY_RAW, rollups=False))
    assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '1 day', time) AS d, avg(temp) AS a FROM readings GROUP BY 1")
    lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(HOURLY_RAW, rollups=False))


@pytest.mark.parametrize("chunk, retention, back", [("hour", "5h", dt.timedelta(hours=30)),
                                                     ("month", "40d", dt.timedelta(days=100))])
def test_the_sources_retention_with_hour_and_month_chunks(lake, chunk, retention, back):
    t = make_readings(lake, retention=retention, chunk=chunk)
    now = dt.datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    t.append(iot_table(iot_series(now - back, 6) + iot_series(now - dt.timedelta(hours=2), 6)))
    lake.sql(HOURLY)
    before = lake.sql("SELECT * FROM hourly")
    assert t.maintain(rollups=False)["partitions_dropped"] == 1
    assert_same(lake.sql("SELECT * FROM hourly"), before)  # the dropped chunk's buckets stay
    assert t.maintain()["rollups_refreshed"] == 1
    assert_same(lake.sql("SELECT * FROM hourly"), before)
    assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '1 day', time) AS d, device_id, avg(temp) AS a, "
                              "count(*) AS n FROM readings GROUP BY 1, 2")


def test_a_rollup_in_another_namespace_than_its_source(lake):
    t = lake.create_table("iot.Readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(spread(300)))
    out = lake.sql("CREATE MATERIALIZED ROLLUP agg.hourly AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, "
                   "device_id, avg(temp) AS a FROM iot.readings GROUP BY 1, 2")
    assert out.to_pylist() == [{"rollup": "agg.hourly", "rows": 105}]
    t.append(iot_table([(at(2024, 3, 5, 2, 2), "a", 1000.0)]))
    for namespace, q in [
        ("default", "SELECT time_bucket(INTERVAL '1 day', time) AS d, avg(temp) AS a FROM iot.readings GROUP BY 1"),
        ("iot", "SELECT time_bucket(INTERVAL '1 day', time) AS d, avg(temp) AS a FROM Readings "
                "WHERE time > '2024-03-05 01:30' GROUP BY 1"),
        ("agg", 'SELECT time_bucket(INTERVAL \'1 day\', time) AS d, avg(temp) AS a FROM iot."readings" GROUP BY 1'),
    ]:
        assert_same(lake.sql(q, namespace=namespace), lake.sql(q, namespace=namespace, rollups=False))
    assert_same(lake.sql("SELECT * FROM hourly", namespace="agg"), lake.sql(
        "SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, avg(temp) AS a FROM iot.readings GROUP BY 1, 2",
        rollups=False))
    lake.drop_table("iot.readings")
    assert lake.tables() == []


def test_column_names_that_need_quoting(lake):
    schema = pa.schema([("Time", pa.timestamp("us", tz="UTC")), ("group", pa.string()), ("Temp Value", pa.float64()),
                        ("sélection", pa.int64())])
    t = lake.create_table("readings", schema, series_key=["group"])
    n = 300
    t.append(pa.table({"Time": [at(2024, 3, 5) + dt.timedelta(minutes=7 * i) for i in range(n)],
                       "group": ["abc"[i % 3] for i in range(n)], "Temp Value": [float(i) for i in range(n)],
                       "sélection": [i % 2 for i in range(n)]}, schema=schema))
    definition = ('SELECT time_bucket(INTERVAL \'1 hour\', "Time") AS "Hour Start", "group", "sélection", '
                  'avg("Temp Value") AS "avg value", max("Temp Value") AS "select" FROM readings GROUP BY ALL')
    assert lake.sql("CREATE MATERIALIZED ROLLUP r AS " + definition).to_pylist() == [{"rollup": "default.r", "rows": 210}]
    t.append(pa.table({"Time": [at(2024, 3, 5, 2, 2)], "group": ["a"], "Temp Value": [1000.0], "sélection": [1]},
                      schema=schema))
    assert_same(lake.sql("SELECT * FROM r"), lake.sql(definition, rollups=False))
    assert_routed_exact(lake, 'SELECT time_bucket(INTERVAL \'1 day\', time) AS d, "GROUP", avg("temp value") AS a, '
                              'max("Temp Value") AS m FROM readings WHERE "group" <> \'b\' AND time > \'2024-03-05 01:30\' '
                              'GROUP BY 1, 2')
    assert_routed_exact(lake, 'SELECT time_bucket(INTERVAL \'2 hours\', "Time") AS d, "sélection", avg("Temp Value") AS a '
                              'FROM readings GROUP BY 1, 2')


def test_two_rollups_of_one_source_refreshed_apart_and_the_coarser_is_picked(lake, monkeypatch):
    t = make_readings(lake)
    t.append(iot_table(spread(400)))
    lake.sql("CREATE MATERIALIZED ROLLUP fine AS SELECT time_bucket(INTERVAL '10 minutes', time) AS b, device_id, "
             "avg(temp) AS a, count(*) AS n FROM readings GROUP BY 1, 2")
    t.append(iot_table([(at(2024, 3, 5, 3, 3), "a", 7.0)]))
    lake.sql("CREATE MATERIALIZED ROLLUP coarse AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, "
             "count(*) AS n FROM readings GROUP BY 1")
    t.append(iot_table([(at(2024, 3, 5, 5, 5), "b", 8.0)]))
    picked = []
    real = timelake._route._relation

    def spy(lake_, catalog, name, spec, bounds, grand=None, identity=False):
        picked.append(name)
        return real(lake_, catalog, name, spec, bounds, grand, identity)

    monkeypatch.setattr(timelake._route, "_relation", spy)
    assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '1 day', time) AS d, count(*) AS n FROM readings GROUP BY 1")
    assert set(picked) == {"default.coarse"}
    assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '1 day', time) AS d, avg(temp) AS a FROM readings GROUP BY 1")
    assert picked[-1] == "default.fine"  # the coarse one keeps no average: the next is tried


@pytest.mark.parametrize("statement, error, message", [
    (HOURLY + "; DROP TABLE readings", ValueError, "one statement"),
    (HOURLY.replace("min(temp) AS lo", "min(temp) AS a__sum"), ValueError, "clashes"),
    (HOURLY.replace("min(temp) AS lo", "min(temp) AS __rows"), ValueError, "clashes"),
    (HOURLY.replace("min(temp) AS lo", "min(temp) AS A"), ValueError, "share a name"),
    (HOURLY.replace("ROLLUP hourly", 'ROLLUP "r; DROP"'), ValueError, "invalid table name"),
    (HOURLY.replace("ROLLUP hourly", "ROLLUP hourly WITH (retention = 'nope')"), ValueError, "duration"),
    (HOURLY.replace("ROLLUP hourly", "ROLLUP hourly WITH (chunk = 'year')"), ValueError, "chunk"),
    (HOURLY.replace("ROLLUP hourly", "ROLLUP hourly WITH (retention = '1d)')"), ValueError, "WITH takes"),
    (HOURLY.replace("ROLLUP hourly", "ROLLUP hourly WITH (owner = 'me')"), ValueError, "unknown option"),
    (HOURLY.replace("FROM readings", "FROM readings AT (VERSION => 0)"), ValueError, "one table"),
    (HOURLY.replace("time_bucket(INTERVAL '1 hour', time)",
                    "time_bucket(INTERVAL '1 hour', time, TIMESTAMPTZ '2000-01-01 00:30:00+00')"), ValueError, "origin"),
    (HOURLY.replace(" AS SELECT", ""), ValueError, "AS SELECT"),
    (HOURLY.replace("GROUP BY 1, 2", "GROUP BY 1, 2, 3"), ValueError, "GROUP BY"),
    (HOURLY.replace("FROM readings", "FROM plain"), ValueError, "no time column"),
    (HOURLY.replace("FROM readings", "FROM nowhere"), KeyError, "nowhere"),
    ("CREATE MATERIALIZED ROLLUP", ValueError, "name"),
    ("REFRESH MATERIALIZED ROLLUP nowhere", KeyError, "nowhere"),
    ("CREATE MATERIALIZED ROLLUP r AS EXPLAIN " + HOURLY_RAW, ValueError, "EXPLAIN"),
])
def test_bad_statements_are_clear_errors_and_write_nothing(lake, statement, error, message):
    make_readings(lake).append(iot_table(iot_series(at(2024, 3, 5), 12)))
    lake.create_table("plain", pa.schema([("k", pa.string()), ("v", pa.float64())]))
    before = lake.tables()
    with pytest.raises(error, match=message):
        lake.sql(statement)
    assert lake.tables() == before


def test_hostile_but_valid_text_in_create(lake):
    make_readings(lake).append(iot_table(iot_series(at(2024, 3, 5), 12)))
    long_name = "x" * 3000
    out = lake.sql(HOURLY.replace("min(temp) AS lo", f'min(temp) AS "{long_name}"')
                   .replace("GROUP BY 1, 2", "GROUP BY 1, 2 -- a trailing ; and DROP TABLE readings")
                   .replace("AS SELECT", "AS SELECT /* ; DROP TABLE readings; */"))
    assert out.to_pylist() == [{"rollup": "default.hourly", "rows": 6}]
    assert long_name in lake.sql("SELECT * FROM hourly").column_names
    assert lake.tables() == ["default.hourly", "default.readings"]


def test_maintain_on_the_rollup_compacts_it_and_keeps_it_exact(lake):
    t = make_readings(lake, properties={"timelake.backgroundCompaction": "false"})
    t.append(iot_table(iot_series(at(2024, 3, 5), 48)))
    lake.sql(HOURLY)
    for k in range(5):
        t.append(iot_table([(at(2024, 3, 5, k, 3), "ab"[k % 2], float(k))]))
        lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    report = lake.table("hourly").maintain()
    # Refreshes rewrite the files of the pairs they recompute: nothing to deduplicate.
    assert report["duplicates_removed"] == 0 and "rollups_refreshed" not in report
    info = lake.table("hourly").info()["rollup"]
    assert info["source_version"] == t.version and info["lag_versions"] == 0  # the txn survives compaction
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(HOURLY_RAW, rollups=False))
    t.append(iot_table([(at(2024, 3, 5, 7, 3), "c", 7.0)]))
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(HOURLY_RAW, rollups=False))
    assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '1 day', time) AS d, avg(temp) AS a, count(*) AS c "
                              "FROM readings GROUP BY 1")


@pytest.mark.parametrize("policy", ["none", "last", "first"])
def test_other_engines_overwrite_and_delete_under_each_dedup_policy(lake, policy):
    deltalake = pytest.importorskip("deltalake")
    t = make_readings(lake, dedup=None if policy == "none" else policy)
    t.append(iot_table(spread(120)))
    lake.sql(HOURLY)
    t.append(iot_table([(at(2024, 3, 5, 0, 7), "b", 555.0), (at(2024, 3, 5, 0, 7), "b", 556.0)]))  # re-sent key
    table = deltalake.DeltaTable(str(table_dir(t)))
    table.update({"temp": "temp * 2"}, predicate="device_id = 'c' AND time < '2024-03-05 03:00:00'")
    table.delete("device_id = 'a' AND time >= '2024-03-05 05:00:00' AND time < '2024-03-05 06:00:00'")
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(HOURLY_RAW, rollups=False))
    assert_routed_exact(lake, "SELECT time_bucket(INTERVAL '2 hours', time) AS h, device_id, avg(temp) AS a, "
                              "count(*) AS n FROM readings WHERE time >= '2024-03-05 00:30' GROUP BY 1, 2")
    t.maintain()
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(HOURLY_RAW, rollups=False))
    assert lake.table("hourly").info()["rollup"]["lag_versions"] == 0


def test_a_source_column_named_like_the_row_count_and_add_columns(lake):
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("__rows", pa.int64())])
    t = make_readings(lake, schema=schema)
    t.append(pa.table({"time": [at(2024, 3, 5, 0, i) for i in range(6)], "device_id": ["a", "b"] * 3,
                       "__rows": [10, 20, 30, 40, 50, 60]}, schema=schema))
    with pytest.raises(ValueError, match="clashes"):
        lake.sql("CREATE MATERIALIZED ROLLUP bad AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, __rows, "
                 "count(*) AS n FROM readings GROUP BY 1, 2")
    lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "sum(__rows) AS s, count(*) AS n FROM readings GROUP BY 1, 2")
    t.add_columns({"extra": pa.float64()})
    t = lake.table("readings")
    t.append(pa.table({"time": [at(2024, 3, 5, 0, 30)], "device_id": ["a"], "__rows": [1], "extra": [2.0]},
                      schema=t.schema))
    for q in ["SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, sum(__rows) AS s, count(*) AS n "
              "FROM readings GROUP BY 1, 2",
              "SELECT time_bucket(INTERVAL '1 day', time) AS d, sum(__rows) AS s, count(*) FROM readings GROUP BY 1"]:
        assert_routed_exact(lake, q)
    lake.sql("REFRESH MATERIALIZED ROLLUP r")
    assert lake.sql("SELECT * FROM r ORDER BY device_id").to_pylist() == [
        {"b": at(2024, 3, 5), "device_id": "a", "s": 10 + 30 + 50 + 1, "n": 4},
        {"b": at(2024, 3, 5), "device_id": "b", "s": 20 + 40 + 60, "n": 3}]


def test_time_travel_on_the_source_reads_the_raw_rows_of_that_version(lake, monkeypatch):
    t = make_readings(lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    lake.sql(HOURLY)
    v = t.version
    t.append(iot_table([(at(2024, 3, 5, 0, 1), "a", 1000.0)]))
    lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    spy = RouteSpy(monkeypatch)
    q = "SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, count(*) AS c FROM readings GROUP BY 1, 2"
    old = lake.sql(q, as_of=v)
    assert spy.decisions == []
    assert sorted(r["c"] for r in old.to_pylist()) == [6] * 6
    at_clause = lake.sql(q.replace("FROM readings", f"FROM readings AT (VERSION => {v})"))
    assert_same(at_clause, old)


def test_concurrent_queries_on_one_lake_from_several_threads(lake):
    t = make_readings(lake)
    t.append(iot_table(spread(300)))
    lake.sql(HOURLY)
    queries = [
        "SELECT time_bucket(INTERVAL '1 day', time) AS d, avg(temp) AS a, count(*) AS c FROM readings GROUP BY 1",
        "SELECT time_bucket(INTERVAL '2 hours', time) AS d, device_id, max(temp) AS m FROM readings "
        "WHERE time > '2024-03-05 01:10' GROUP BY 1, 2",
        "SELECT * FROM hourly",
    ]
    errors: list = []

    def reader(i: int, barrier: threading.Barrier) -> None:
        try:
            for k in range(3):
                barrier.wait(timeout=60)  # the writer is idle until the next wait
                q = queries[(i + k) % len(queries)]
                raw = HOURLY_RAW if q == "SELECT * FROM hourly" else q
                assert_same(lake.sql(q), lake.sql(raw, rollups=False))
                barrier.wait(timeout=60)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            barrier.abort()

    barrier = threading.Barrier(5)
    threads = [threading.Thread(target=reader, args=(i, barrier)) for i in range(4)]
    for th in threads:
        th.start()
    try:
        for k in range(3):
            t.append(iot_table([(at(2024, 3, 5, k, 3), "a", float(k))]))
            if k == 1:
                lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
            barrier.wait(timeout=60)
            barrier.wait(timeout=60)
    except threading.BrokenBarrierError:
        pass
    for th in threads:
        th.join(timeout=60)
    assert not errors, errors[0]


def test_a_source_dropped_by_another_handle_leaves_the_rollup_readable(lake, lake_path):
    t = make_readings(lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 6)))
    lake.sql(HOURLY)
    kept = lake.sql("SELECT * FROM hourly")
    other = timelake.Lake(str(lake_path), storage_options=NO_REFRESH)
    other._core.drop_table("default.readings")  # as a process of an older version would
    assert_same(lake.sql("SELECT * FROM hourly"), kept)
    with pytest.raises(RuntimeError, match="no longer exists"):
        lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    assert kept.num_rows == 3
    assert lake.sql("DROP MATERIALIZED ROLLUP hourly").to_pylist() == [{"rollup": "default.hourly", "rows": 3}]
    assert lake.tables() == []


_DROP_RACE = textwrap.dedent(
    """
    import datetime as dt, json, os, sys, time
    import pyarrow as pa
    import timelake
    path, delay = sys.argv[1], float(sys.argv[2])
    lake = timelake.Lake(path, storage_options={"timelake_rollup_refresh_interval": "0s"})
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("temp", pa.float64())])
    def rows(day, n):
        ts = [dt.datetime(2024, 3, day, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=i) for i in range(n)]
        return pa.table({"time": ts, "device_id": ["abc"[i % 3] for i in range(n)], "temp": [float(i) for i in range(n)]},
                        schema=schema)
    t = lake.create_table("readings", schema, series_key=["device_id"])
    t.append(rows(5, 100))
    lake.sql("CREATE MATERIALIZED ROLLUP hourly AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "count(*) AS n FROM readings GROUP BY 1, 2")
    t.append(rows(6, 2000))  # queues a background refresh
    time.sleep(delay)
    lake.drop_table("readings")
    waited = lake._refresher.wait(60)
    print(json.dumps({"waited": waited, "tables": lake.tables(),
                      "again": timelake.Lake(path, storage_options={"timelake_rollup_refresh_interval": "off"}).tables(),
                      "left": sorted(os.listdir(os.path.join(path, "default")))}), flush=True)
    os._exit(0)  # not the abort at exit (test_a_failed_background_refresh_does_not_abort_the_process_at_exit)
    """
)


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.05])
def test_the_background_refresh_racing_drop_table_leaves_no_table(lake_path, delay):
    lake_path.mkdir(parents=True)
    p = subprocess.run([sys.executable, "-c", _DROP_RACE, str(lake_path), str(delay)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-500:]
    assert json.loads(p.stdout) == {"waited": True, "tables": [], "again": [], "left": []}


_BACKGROUND_APPENDER = textwrap.dedent(
    """
    import datetime as dt, json, os, random, sys
    import pyarrow as pa
    import timelake
    location, seed = sys.argv[1], int(sys.argv[2])
    lake = timelake.Lake(location, storage_options={"timelake_rollup_refresh_interval": "0s"})
    rng = random.Random(seed)
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("temp", pa.float64())])
    start = dt.datetime(2024, 3, 5, tzinfo=dt.timezone.utc)
    t = lake.table("readings")
    for i in range(12):
        rows = [(start + dt.timedelta(microseconds=rng.randrange(0, 86400 * 10**6)), rng.choice("abcd"), rng.random())
                for _ in range(rng.randrange(1, 30))]
        t.append(pa.table({"time": [r[0] for r in rows], "device_id": [r[1] for r in rows],
                           "temp": [r[2] for r in rows]}, schema=schema))
    assert lake._refresher.wait(60)
    print(json.dumps(lake._refresher.errors), flush=True)
    os._exit(0)  # not the abort at exit (test_a_failed_background_refresh_does_not_abort_the_process_at_exit)
    """
)


def test_appenders_with_background_refreshes_in_two_processes(lake, lake_path):
    t = make_readings(lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    lake.sql(HOURLY)
    procs = [subprocess.Popen([sys.executable, "-c", _BACKGROUND_APPENDER, str(lake_path), str(seed)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in (1, 2)]
    queries = ["SELECT time_bucket(INTERVAL '1 day', time) AS d, device_id, avg(temp) AS a, count(*) AS n, "
               "sum(temp) AS s FROM readings GROUP BY 1, 2"]
    errors: dict = {}
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-500:]
        errors.update(json.loads(out))  # background refreshes that failed (the rollup stays exact)
    assert lake.table("hourly").version > 1  # the appenders' background refreshes wrote to it
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(HOURLY_RAW, rollups=False))
    for q in queries:
        assert_routed_exact(lake, q)
    lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    assert lake.table("hourly").info()["rollup"]["lag_versions"] == 0, errors
    assert_same(lake.sql("SELECT * FROM hourly"), lake.sql(HOURLY_RAW, rollups=False))
