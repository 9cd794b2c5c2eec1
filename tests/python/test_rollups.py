"""Materialized rollups (python/timelake/_rollup.py, _route.py): statements, refresh, exactness.

Every derived answer is compared with the same aggregate computed from the raw rows at the same
moment (`lake.sql(..., rollups=False)` over the source), after appends, late and duplicate rows,
compactions, retention, other engines' deletes, and refreshes at random points.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pytest

import timelake
from rollup_helpers import NO_REFRESH, RouteSpy, assert_same, canonical  # noqa: F401
from helpers import IOT_SCHEMA, UTC, at, iot_series, iot_table, table_dir


HOURLY = (
    "CREATE MATERIALIZED ROLLUP hourly AS SELECT time_bucket(INTERVAL '1 hour', time) AS hour, device_id, "
    "avg(temp) AS temp, count(*) AS n, min(temp) AS low, max(temp) AS high, stddev(temp) AS sd, "
    "first(temp ORDER BY time) AS opening, last(temp ORDER BY time) AS closing, sum(temp) AS total "
    "FROM readings GROUP BY 1, 2"
)
# The rollup's own columns, as the raw rows give them.
HOURLY_RAW = (
    "SELECT time_bucket(INTERVAL '1 hour', time) AS hour, device_id, avg(temp) AS temp, count(*) AS n, "
    "min(temp) AS low, max(temp) AS high, stddev(temp) AS sd, first(temp ORDER BY time) AS opening, "
    "last(temp ORDER BY time) AS closing, sum(temp) AS total FROM readings GROUP BY 1, 2"
)
ROUTED = [
    "SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, avg(temp), count(*) AS c FROM readings GROUP BY 1, 2",
    "SELECT time_bucket(INTERVAL '1 day', time) AS d, avg(temp) AS a, stddev(temp) AS s, var_pop(temp) AS v, "
    "min(temp), max(temp), sum(temp) AS total, count(temp) AS c FROM readings GROUP BY 1",
    "SELECT time_bucket(INTERVAL '3 hours', time) AS h, device_id, first(temp ORDER BY time) AS f, "
    "last(temp ORDER BY time) AS l FROM readings WHERE device_id IN ('a', 'c') GROUP BY ALL",
    "SELECT time_bucket(INTERVAL '2 hours', time) AS h, round(avg(temp), 6) AS a, count(*) FROM readings "
    "WHERE time >= TIMESTAMPTZ '2024-03-05 01:30:00+00' AND time < '2024-03-06 05:10' GROUP BY h HAVING count(*) > 1",
    "SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, stddev_pop(temp) AS s FROM readings "
    "WHERE time BETWEEN '2024-03-05 00:10' AND '2024-03-05 23:00' AND device_id <> 'b' GROUP BY 1, 2",
    # The rollup's own buckets and groups: answered row by row, without a GROUP BY.
    "SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, count(temp), avg(temp) AS a, min(temp), "
    "var_samp(temp) AS v, sum(temp) AS s FROM readings WHERE time < '2024-03-06 07:30' GROUP BY ALL "
    "ORDER BY h, device_id LIMIT 50",
    "SELECT device_id, time_bucket(INTERVAL '1 hour', time) AS h, max(temp) - min(temp) AS spread "
    "FROM readings GROUP BY h, device_id ORDER BY spread DESC, h, device_id",
]


def assert_exact(lake, rollup="hourly", raw=HOURLY_RAW, routed=ROUTED) -> None:
    """The rollup and every routed query equal the raw rows' answers, now."""
    assert_same(lake.sql(f"SELECT * FROM {rollup}"), lake.sql(raw, rollups=False))
    for q in routed:
        assert_same(lake.sql(q), lake.sql(q, rollups=False))


def stored_rows(lake, name="hourly") -> pa.Table:
    """What the rollup holds: right after a refresh (no commit to the source since), reading it
    reads its stored rows only."""
    assert lake.table(name).info()["rollup"]["lag_versions"] == 0
    return lake.sql(f"SELECT * FROM {name}")


@pytest.fixture
def quiet_lake(lake_location):
    return timelake.Lake(lake_location.url, storage_options={**(lake_location.storage_options or {}), **NO_REFRESH})


def make_readings(lake, **kwargs):
    return lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], **kwargs)


# -- statements ---------------------------------------------------------------------------------


def test_create_returns_the_rollup_and_its_rows_and_lists_it_as_a_table(quiet_lake):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))  # 2 hours x 3 devices
    result = quiet_lake.sql(HOURLY)
    assert result.to_pylist() == [{"rollup": "default.hourly", "rows": 6}]
    assert result.schema == pa.schema([pa.field("rollup", pa.string(), False), pa.field("rows", pa.uint64(), False)])
    assert quiet_lake.tables() == ["default.hourly", "default.readings"]
    info = quiet_lake.table("hourly").info()["rollup"]
    assert info["source"] == "default.readings"
    assert info["bucket"] == "hour" and info["group_by"] == ["device_id"]
    assert info["aggregates"]["temp"] == "avg(temp)" and info["aggregates"]["n"] == "count(*)"
    assert info["source_version"] == t.version and info["lag_versions"] == 0
    assert_exact(quiet_lake)


def test_a_rollup_table_is_a_delta_table_other_engines_read(quiet_lake, lake_path):
    deltalake = pytest.importorskip("deltalake")
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    quiet_lake.sql(HOURLY)
    other = deltalake.DeltaTable(str(lake_path / "default" / "hourly")).to_pyarrow_table()
    assert other.num_rows == 6
    assert {"hour", "device_id", "temp", "temp__sum", "temp__count", "__rows"} <= set(other.column_names)
    assert sorted(other.column("n").to_pylist()) == [6] * 6


def test_refresh_and_drop_statements(quiet_lake):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 6)))
    quiet_lake.sql(HOURLY)
    assert quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly").to_pylist() == [{"rollup": "default.hourly", "rows": 0}]
    t.append(iot_table([(at(2024, 3, 5, 0, 5), "a", 99.0)]))
    assert quiet_lake.sql("refresh materialized rollup default.hourly;").to_pylist()[0]["rows"] == 1
    assert quiet_lake.sql("DROP MATERIALIZED ROLLUP hourly").to_pylist()[0]["rollup"] == "default.hourly"
    assert quiet_lake.tables() == ["default.readings"]
    with pytest.raises(KeyError):
        quiet_lake.sql("DROP MATERIALIZED ROLLUP hourly")
    assert quiet_lake.sql("DROP MATERIALIZED ROLLUP IF EXISTS hourly").to_pylist()[0]["rows"] == 0
    with pytest.raises(ValueError, match="not a rollup"):
        quiet_lake.sql("DROP MATERIALIZED ROLLUP readings")
    with pytest.raises(ValueError, match="not a rollup"):
        quiet_lake.sql("REFRESH MATERIALIZED ROLLUP readings")
    assert quiet_lake.tables() == ["default.readings"]


def test_create_if_not_exists_and_a_taken_name(quiet_lake):
    make_readings(quiet_lake).append(iot_table(iot_series(at(2024, 3, 5), 6)))
    quiet_lake.sql(HOURLY)
    with pytest.raises(FileExistsError):
        quiet_lake.sql(HOURLY)
    again = quiet_lake.sql(HOURLY.replace("ROLLUP hourly", "ROLLUP IF NOT EXISTS hourly"))
    assert again.to_pylist() == [{"rollup": "default.hourly", "rows": 0}]
    with pytest.raises(FileExistsError):
        quiet_lake.sql(HOURLY.replace("ROLLUP hourly", "ROLLUP readings"))


@pytest.mark.parametrize(
    "definition, message",
    [
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, avg(temp) AS t FROM readings WHERE temp > 0 GROUP BY 1, 2", "WHERE"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, median(temp) AS t FROM readings GROUP BY 1, 2", "isn't an aggregate"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, avg(temp) FROM readings GROUP BY 1, 2", "name each aggregate"),
        ("SELECT time_bucket(INTERVAL '1 hour', time), device_id, avg(temp) AS t FROM readings GROUP BY 1, 2", "name the bucket"),
        ("SELECT device_id, avg(temp) AS t FROM readings GROUP BY 1", "time_bucket"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, device_id, avg(temp) AS t FROM readings GROUP BY 1", "GROUP BY"),
        ("SELECT time_bucket(INTERVAL '1 month 2 days', time) AS h, avg(temp) AS t FROM readings GROUP BY 1", "months"),
        ("SELECT time_bucket(INTERVAL '-1 hour', time) AS h, avg(temp) AS t FROM readings GROUP BY 1", "positive"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp + 1) AS t FROM readings GROUP BY 1", "column"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, first(temp) AS t FROM readings GROUP BY 1", "ORDER BY"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, count(DISTINCT temp) AS t FROM readings GROUP BY 1", "DISTINCT"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(device_id) AS t FROM readings GROUP BY 1", "not string"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) AS h FROM readings GROUP BY 1", "share a name"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) AS t FROM (SELECT * FROM readings) GROUP BY 1", "one table"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) AS t FROM readings GROUP BY 1 ORDER BY 1", "ORDER BY"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) AS t FROM readings, readings r2 GROUP BY 1", "one table"),
        ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(nope) AS t FROM readings GROUP BY 1", "no column"),
    ],
)
def test_definitions_that_are_not_rollups_are_refused_and_create_nothing(quiet_lake, definition, message):
    make_readings(quiet_lake).append(iot_table(iot_series(at(2024, 3, 5), 6)))
    with pytest.raises(ValueError, match=message):
        quiet_lake.sql(f"CREATE MATERIALIZED ROLLUP bad AS {definition}")
    assert quiet_lake.tables() == ["default.readings"]


def test_a_missing_source_is_a_key_error_and_a_rollup_of_a_rollup_is_refused(quiet_lake):
    with pytest.raises(KeyError):
        quiet_lake.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS h, "
                       "count(*) AS n FROM nowhere GROUP BY 1")
    make_readings(quiet_lake).append(iot_table(iot_series(at(2024, 3, 5), 6)))
    quiet_lake.sql(HOURLY)
    with pytest.raises(ValueError, match="itself a rollup"):
        quiet_lake.sql("CREATE MATERIALIZED ROLLUP daily AS SELECT time_bucket(INTERVAL '1 day', hour) AS d, "
                       "count(*) AS n FROM hourly GROUP BY 1")
    with pytest.raises(ValueError, match="describe rollups"):
        quiet_lake.create_table("fake", IOT_SCHEMA, properties={"timelake.rollup.spec": "{}"})


def test_statement_text_after_the_name_is_refused(quiet_lake):
    make_readings(quiet_lake).append(iot_table(iot_series(at(2024, 3, 5), 6)))
    quiet_lake.sql(HOURLY)
    with pytest.raises(ValueError, match="unexpected text"):
        quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly; DROP TABLE readings")
    with pytest.raises(ValueError, match="unexpected text"):
        quiet_lake.sql("DROP MATERIALIZED ROLLUP hourly, readings")
    assert quiet_lake.tables() == ["default.hourly", "default.readings"]


def test_names_namespaces_and_quoting(quiet_lake):
    t = quiet_lake.create_table("iot.Readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(at(2024, 3, 5), 6)))
    out = quiet_lake.sql('CREATE MATERIALIZED ROLLUP iot."Hourly_Temp" WITH (retention = \'1825d\') AS SELECT '
                         "time_bucket(INTERVAL '30 minutes', time) AS b, max(temp) AS m FROM iot.readings GROUP BY 1")
    assert out.to_pylist() == [{"rollup": "iot.Hourly_Temp", "rows": 2}]
    assert quiet_lake.table("iot.Hourly_Temp").info()["contract"]["retention"] == "1825d"
    assert quiet_lake.sql('SELECT sum(m) AS s FROM "hourly_temp"', namespace="iot").to_pylist() == [{"s": 22.2 + 25.2}]
    with pytest.raises(ValueError, match="invalid table name"):
        quiet_lake.sql('CREATE MATERIALIZED ROLLUP "a b" AS SELECT time_bucket(INTERVAL \'1 hour\', time) AS b, '
                       "max(temp) AS m FROM iot.readings GROUP BY 1")


# -- exactness ----------------------------------------------------------------------------------


def test_late_rows_out_of_order_appends_and_refreshes_stay_exact(quiet_lake):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 48)))
    quiet_lake.sql(HOURLY)
    t.append(iot_table([(at(2024, 3, 5, 3, 7), "b", -40.0)]))  # late, one series
    assert_exact(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 6), 12, devices=("a", "d"))))  # a new series
    assert_exact(quiet_lake)
    assert quiet_lake.table("hourly").info()["rollup"]["lag_versions"] == 2
    rows = quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly").to_pylist()[0]["rows"]
    assert rows == 1 + 4  # the late pair, and 2 hours x 2 devices
    assert_exact(quiet_lake)
    assert_same(stored_rows(quiet_lake), quiet_lake.sql(HOURLY_RAW, rollups=False))


@pytest.mark.parametrize("policy", ["last", "first"])
def test_dedup_upserts_are_exact(quiet_lake, policy):
    t = make_readings(quiet_lake, dedup=policy)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    quiet_lake.sql(HOURLY)
    t.append(iot_table([(at(2024, 3, 5, 0, 10), "a", 500.0), (at(2024, 3, 5, 1, 0), "c", -3.0)]))  # re-sent keys
    assert_exact(quiet_lake)
    quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    assert_exact(quiet_lake)
    t.maintain(rollups=False)  # compaction drops the duplicates
    assert_exact(quiet_lake)
    report = t.maintain()
    assert report["rollups_refreshed"] == 1 and report["rollup_rows"] >= 0
    assert_exact(quiet_lake)
    assert_same(stored_rows(quiet_lake), quiet_lake.sql(HOURLY_RAW, rollups=False))


def test_maintain_without_rollups_keeps_the_seed_keys(quiet_lake):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 6)))
    assert "rollups_refreshed" not in t.maintain()
    quiet_lake.sql(HOURLY)
    assert {"rollups_refreshed", "rollup_rows"} <= set(t.maintain())
    assert "rollups_refreshed" not in t.maintain(rollups=False)


def test_other_engines_deletes_are_exact_and_an_emptied_pair_disappears(quiet_lake, lake_path):
    deltalake = pytest.importorskip("deltalake")
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 24)))
    quiet_lake.sql(HOURLY)
    deltalake.DeltaTable(str(table_dir(t))).delete("device_id = 'b' AND time < '2024-03-05 02:00:00'")
    assert_exact(quiet_lake)
    quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    assert_exact(quiet_lake)
    stored = quiet_lake.sql("SELECT * FROM hourly WHERE device_id = 'b' ORDER BY hour")
    assert stored.column("hour").to_pylist()[0] == at(2024, 3, 5, 2)
    # The emptied pairs are gone from the rollup's files too (other engines read one row per pair).
    other = deltalake.DeltaTable(str(lake_path / "default" / "hourly")).to_pyarrow_table()
    assert other.num_rows == quiet_lake.sql("SELECT count(*) AS n FROM hourly").to_pylist()[0]["n"]
    assert not [r for r in other.to_pylist() if r["device_id"] == "b" and r["hour"] < at(2024, 3, 5, 2)]


def test_the_sources_retention_drops_chunks_the_rollup_keeps(lake_location):
    lake = timelake.Lake(lake_location.url, storage_options={**(lake_location.storage_options or {}), **NO_REFRESH})
    t = make_readings(lake, retention="3d", chunk="day")
    now = dt.datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    old = now - dt.timedelta(days=10)
    t.append(iot_table(iot_series(old, 12) + iot_series(now - dt.timedelta(hours=2), 12)))
    lake.sql(HOURLY)
    before = lake.sql("SELECT * FROM hourly WHERE hour < now() - INTERVAL '5 days'")
    assert before.num_rows == 6
    assert t.maintain(rollups=False)["partitions_dropped"] == 1
    t.maintain()
    after = lake.sql("SELECT * FROM hourly WHERE hour < now() - INTERVAL '5 days'")
    assert_same(after, before)  # the rollup outlives the raw chunks
    # A routed query on the source answers as the raw rows do: the dropped buckets are gone there.
    for q in ROUTED[:3]:
        assert_same(lake.sql(q), lake.sql(q, rollups=False))


def test_a_dropped_and_recreated_source(quiet_lake):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 6)))
    quiet_lake.sql(HOURLY)
    kept = quiet_lake.sql("SELECT * FROM hourly")
    other = timelake.Lake(quiet_lake.location, storage_options=NO_REFRESH) if quiet_lake.location.startswith("file:") else None
    if other is None:
        pytest.skip("a second handle on a remote lake needs its options; covered locally")
    other._core.drop_table("default.readings")  # another process drops it, leaving the rollup
    t2 = make_readings(other)
    t2.append(iot_table(iot_series(at(2024, 3, 7), 6)))
    with pytest.raises(RuntimeError, match="dropped and created again"):
        quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    assert_same(quiet_lake.sql("SELECT * FROM hourly"), kept)  # it keeps what it had
    q = ROUTED[0]
    assert_same(quiet_lake.sql(q), quiet_lake.sql(q, rollups=False))  # no routing to a stale rollup


def test_dropping_the_source_drops_its_rollups(quiet_lake):
    make_readings(quiet_lake).append(iot_table(iot_series(at(2024, 3, 5), 6)))
    quiet_lake.sql(HOURLY)
    quiet_lake.drop_table("readings")
    assert quiet_lake.tables() == []


@pytest.mark.parametrize("width, chunk_label", [("INTERVAL '15 seconds'", "day"), ("INTERVAL '1 day'", "month"),
                                                 ("INTERVAL '1 week'", "month"), ("INTERVAL '1 month'", "month"),
                                                 ("INTERVAL '3 months'", "month")])
def test_widths_from_seconds_to_months(quiet_lake, width, chunk_label):
    t = make_readings(quiet_lake)
    rng = random.Random(7)
    rows = [(at(2024, 1, 1) + dt.timedelta(seconds=rng.randrange(0, 200 * 86400)), rng.choice("abc"), rng.random())
            for _ in range(3000)]
    t.append(iot_table(rows))
    quiet_lake.sql(f"CREATE MATERIALIZED ROLLUP w AS SELECT time_bucket({width}, time) AS b, device_id, "
                   "avg(temp) AS a, count(*) AS n FROM readings GROUP BY 1, 2")
    assert quiet_lake.table("w").info()["contract"]["chunk"] == chunk_label
    t.append(iot_table(rows[:50]))  # duplicates of earlier rows (no dedup: counted twice)
    raw = f"SELECT time_bucket({width}, time) AS b, device_id, avg(temp) AS a, count(*) AS n FROM readings GROUP BY 1, 2"
    assert_same(quiet_lake.sql("SELECT * FROM w"), quiet_lake.sql(raw, rollups=False))
    quiet_lake.sql("REFRESH MATERIALIZED ROLLUP w")
    assert_same(quiet_lake.sql("SELECT * FROM w"), quiet_lake.sql(raw, rollups=False))


# -- routing ------------------------------------------------------------------------------------


def test_routed_queries_read_the_rollup(quiet_lake, monkeypatch):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 48)))
    quiet_lake.sql(HOURLY)
    spy = RouteSpy(monkeypatch)
    for q in ROUTED:
        quiet_lake.sql(q)
        assert spy.last(), q
    spy.decisions.clear()
    quiet_lake.sql(ROUTED[1], rollups=False)
    assert spy.decisions == []  # not even asked
    if quiet_lake.location.startswith("file:"):
        off = timelake.Lake(quiet_lake.location, storage_options={**NO_REFRESH, "timelake_rollup_routing": "off"})
        off.sql(ROUTED[1])
        assert spy.last() is False
    with pytest.raises(ValueError, match="timelake_rollup_routing"):
        timelake.Lake(quiet_lake.location, storage_options={"timelake_rollup_routing": "sometimes"})


@pytest.mark.parametrize(
    "query",
    [
        # Each needs what the rollup does not keep: it reads the raw rows, with the same answer.
        "SELECT time_bucket(INTERVAL '90 minutes', time) AS h, avg(temp) FROM readings GROUP BY 1",
        "SELECT time_bucket(INTERVAL '1 hour', time) AS h, median(temp) FROM readings GROUP BY 1",
        "SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) FROM readings WHERE temp > 21 GROUP BY 1",
        "SELECT time_bucket(INTERVAL '1 hour', time, TIMESTAMP '2000-01-01 00:30') AS h, avg(temp) FROM readings GROUP BY 1",
        "SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) FILTER (WHERE device_id = 'a') FROM readings GROUP BY 1",
        "SELECT time_bucket(INTERVAL '1 hour', time) AS h, count(DISTINCT device_id) FROM readings GROUP BY 1",
        "SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) OVER () FROM readings GROUP BY 1, temp",
        "SELECT time_bucket(INTERVAL '1 hour', time) AS h, max(time) FROM readings GROUP BY 1",
        "SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) FROM readings WHERE time > (SELECT min(time) FROM readings) GROUP BY 1",
        "SELECT h, avg(t) FROM (SELECT time_bucket(INTERVAL '1 hour', time) AS h, temp AS t FROM readings) GROUP BY 1",
        "SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) FROM readings WHERE time > now() - INTERVAL '1000 days' OR device_id = 'a' GROUP BY 1",
    ],
)
def test_queries_a_rollup_cannot_answer_read_the_raw_rows(quiet_lake, query, monkeypatch):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 24)))
    quiet_lake.sql(HOURLY)
    t.append(iot_table([(at(2024, 3, 5, 1, 1), "a", 1.0)]))
    spy = RouteSpy(monkeypatch)
    got = quiet_lake.sql(query)
    assert spy.decisions in ([], [False])
    assert_same(got, quiet_lake.sql(query, rollups=False))


def test_unaliased_columns_keep_the_raw_querys_names(quiet_lake):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 24)))
    quiet_lake.sql(HOURLY)
    q = "SELECT time_bucket(INTERVAL '1 hour', time), device_id, AVG( temp ), round(max(temp), 1), count(*) FROM readings GROUP BY 1, 2"
    got = quiet_lake.sql(q)
    assert got.column_names == quiet_lake.sql(q, rollups=False).column_names
    assert_same(got, quiet_lake.sql(q, rollups=False))


def test_routing_with_a_table_alias_order_and_limit(quiet_lake):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 60)))
    quiet_lake.sql(HOURLY)
    q = ("SELECT time_bucket(INTERVAL '1 hour', r.time) AS h, r.device_id, avg(r.temp) AS a FROM readings AS r "
         "WHERE r.time >= '2024-03-05 03:20' GROUP BY ALL ORDER BY a DESC, h LIMIT 4")
    assert quiet_lake.sql(q).to_pylist() == quiet_lake.sql(q, rollups=False).to_pylist()


# -- randomised: every step compared with the raw rows --------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_random_histories_stay_exact_at_every_step(quiet_lake, seed):
    rng = random.Random(seed)
    policy = rng.choice([None, "last", "first"])
    t = make_readings(quiet_lake, dedup=policy, chunk=rng.choice(["hour", "day"]),
                      properties={"timelake.backgroundCompaction": "false"})
    start = at(2024, 3, 5)
    sent: list = []

    def batch(n):
        rows = []
        for _ in range(n):
            if sent and policy and rng.random() < 0.2:
                tm, dev, _ = rng.choice(sent)  # a re-sent key with a new value (an upsert)
            else:
                # Microseconds apart: first/last by time have no ties to break (DuckDB breaks
                # them arbitrarily, in the raw query as in the rollup).
                tm = start + dt.timedelta(microseconds=rng.randrange(0, 3 * 24 * 3600 * 10**6))
                dev = rng.choice("abcde")
            value = None if rng.random() < 0.05 else round(rng.uniform(-10, 40), 3)
            rows.append((tm, dev, value))
        sent.extend(rows)
        return iot_table(rows)

    t.append(batch(200))
    quiet_lake.sql(HOURLY)
    for step in range(12):
        op = rng.choice(["append", "append", "late", "refresh", "compact", "refresh_maintain"])
        if op == "append":
            t.append(batch(rng.randrange(1, 60)))
        elif op == "late":
            t.append(batch(1))
        elif op == "refresh":
            quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
        elif op == "compact":
            t.maintain(rollups=False)
        else:
            t.maintain()
        assert_exact(quiet_lake)
    quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    assert_same(stored_rows(quiet_lake), quiet_lake.sql(HOURLY_RAW, rollups=False))


# -- refresh after appends, concurrency, crashes --------------------------------------------------


def test_appends_refresh_rollups_in_the_background(lake_location):
    lake = timelake.Lake(lake_location.url, storage_options={**(lake_location.storage_options or {}),
                                                              "timelake_rollup_refresh_interval": "0s"})
    t = make_readings(lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 6)))
    lake.sql(HOURLY)
    for i in range(3):
        t.append(iot_table([(at(2024, 3, 5, 5 + i), "a", float(i))]))
    assert lake._refresher.wait(60)
    lake._rollups.forget()
    t.append(iot_table([(at(2024, 3, 5, 9), "a", 9.0)]))
    assert lake._refresher.wait(60)
    info = lake.table("hourly").info()["rollup"]
    assert info["lag_versions"] == 0, (info, lake._refresher.errors)
    assert_same(stored_rows(lake), lake.sql(HOURLY_RAW, rollups=False))
    with pytest.raises(ValueError, match="refresh_interval"):
        timelake.Lake(lake_location.url, storage_options={**(lake_location.storage_options or {}),
                                                           "timelake_rollup_refresh_interval": "soon"})


def test_a_refresh_older_than_the_one_recorded_never_lands(quiet_lake):
    """Two refreshers: the one that read an older source version commits last. The core skips
    it (its txn version is not above the recorded one), so the newer rows stand."""
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 6)))
    t.append(iot_table(iot_series(at(2024, 3, 5), 6)))
    quiet_lake.sql(HOURLY)
    rollup = quiet_lake._snapshot("hourly")
    app = timelake._rollup.spec_of(rollup.properties).app_id
    recorded = rollup.recorded_batch_version(app)
    assert recorded == t.version == 2
    schema = pa.schema(timelake._capsules.SchemaCapsule(rollup.schema_capsule()))
    wrong = {f.name: [0] if not f.nullable else [None] for f in schema}
    wrong.update(hour=[at(2024, 3, 5)], device_id=["a"], n=[999], __rows=[999])
    stale = pa.table(wrong, schema=schema)
    for older in (recorded, recorded - 1):
        result = rollup.append(stale.__arrow_c_stream__(), app, False, False, older)
        assert result["duplicate"] is True
    assert rollup.recorded_batch_version(app) == recorded
    assert_exact(quiet_lake)
    # A later version lands (what a refresh does) and is recorded.
    t.append(iot_table(iot_series(at(2024, 3, 5), 1)))
    assert quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly").to_pylist()[0]["rows"] == 3
    assert rollup.recorded_batch_version(app) == 3
    assert_exact(quiet_lake)


_WORKER = textwrap.dedent(
    """
    import datetime as dt, random, sys, time
    import pyarrow as pa
    import timelake
    location, role, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    lake = timelake.Lake(location, storage_options={"timelake_rollup_refresh_interval": "off"})
    rng = random.Random(seed)
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("temp", pa.float64())])
    start = dt.datetime(2024, 3, 5, tzinfo=dt.timezone.utc)
    t = lake.table("readings")
    for i in range(25):
        if role == "append":
            rows = [(start + dt.timedelta(microseconds=rng.randrange(0, 2 * 86400 * 10**6)), rng.choice("abcd"), rng.random())
                    for _ in range(rng.randrange(1, 40))]
            t.append(pa.table({"time": [r[0] for r in rows], "device_id": [r[1] for r in rows],
                               "temp": [r[2] for r in rows]}, schema=schema))
        elif role == "refresh":
            lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
        else:
            t.maintain()
    print("done", flush=True)
    """
)


def _worker(location: str, role: str, seed: int) -> subprocess.Popen:
    env = dict(os.environ)
    return subprocess.Popen([sys.executable, "-c", _WORKER, location, role, str(seed)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_appenders_and_refreshers_in_several_processes(quiet_lake, lake_path):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    quiet_lake.sql(HOURLY)
    procs = [_worker(str(lake_path), "append", 1), _worker(str(lake_path), "append", 2),
             _worker(str(lake_path), "refresh", 3), _worker(str(lake_path), "refresh", 4),
             _worker(str(lake_path), "maintain", 5)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    assert_exact(quiet_lake)
    quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    assert_same(stored_rows(quiet_lake), quiet_lake.sql(HOURLY_RAW, rollups=False))
    assert quiet_lake.table("hourly").info()["rollup"]["lag_versions"] == 0


def test_a_refresher_killed_at_any_moment_leaves_the_rollup_exact(quiet_lake, lake_path):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    quiet_lake.sql(HOURLY)
    rng = random.Random(11)
    for round_ in range(6):
        t.append(iot_table([(at(2024, 3, 5) + dt.timedelta(microseconds=rng.randrange(0, 2 * 86400 * 10**6)), rng.choice("abc"),
                             rng.random()) for _ in range(30)]))
        p = _worker(str(lake_path), "refresh", round_)
        time.sleep(rng.uniform(0.05, 1.5))
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
        assert_exact(quiet_lake)
    quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    assert_same(stored_rows(quiet_lake), quiet_lake.sql(HOURLY_RAW, rollups=False))


def test_time_travel_on_the_source_reads_the_raw_rows(quiet_lake):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))
    v = t.version
    quiet_lake.sql(HOURLY)
    t.append(iot_table(iot_series(at(2024, 3, 5), 12)))  # the same rows again: counts double
    quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    q = ROUTED[0]
    old = quiet_lake.sql(q, as_of=v)
    assert sorted(r["c"] for r in old.to_pylist()) == [6] * 6
    assert sorted(r["c"] for r in quiet_lake.sql(q).to_pylist()) == [12] * 6


def test_random_histories_with_other_engines_deletes(quiet_lake, lake_path):
    deltalake = pytest.importorskip("deltalake")
    rng = random.Random(99)
    t = make_readings(quiet_lake, dedup="last", properties={"timelake.backgroundCompaction": "false"})
    start = at(2024, 3, 5)

    def batch(n):
        return iot_table([(start + dt.timedelta(microseconds=rng.randrange(0, 2 * 86400 * 10**6)), rng.choice("abcd"),
                           round(rng.uniform(0, 50), 2)) for _ in range(n)])

    t.append(batch(300))
    quiet_lake.sql(HOURLY)
    for step in range(10):
        op = rng.choice(["append", "delete", "refresh", "compact"])
        if op == "append":
            t.append(batch(rng.randrange(1, 50)))
        elif op == "delete":
            hour = rng.randrange(0, 48)
            lo = (start + dt.timedelta(hours=hour)).strftime("%Y-%m-%d %H:%M:%S")
            hi = (start + dt.timedelta(hours=hour + rng.randrange(1, 6))).strftime("%Y-%m-%d %H:%M:%S")
            deltalake.DeltaTable(str(table_dir(t))).delete(
                f"device_id = '{rng.choice('abcd')}' AND time >= '{lo}' AND time < '{hi}'")
        elif op == "refresh":
            quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
        else:
            t.maintain(rollups=False)
        assert_exact(quiet_lake)
    quiet_lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    assert_same(stored_rows(quiet_lake), quiet_lake.sql(HOURLY_RAW, rollups=False))
    # Another engine reads the rollup's files: one row per pair, the same rows.
    other = deltalake.DeltaTable(str(lake_path / "default" / "hourly")).to_pyarrow_table()
    other = other.filter(pa.compute.greater(other.column("__rows"), 0)).select(stored_rows(quiet_lake).column_names)
    assert_same(other.cast(stored_rows(quiet_lake).schema), stored_rows(quiet_lake))


_EXIT_WHILE_REFRESHING = textwrap.dedent(
    """
    import sys
    import timelake
    sys.path.insert(0, sys.argv[2])
    from helpers import IOT_SCHEMA, at, iot_series, iot_table
    lake = timelake.Lake(sys.argv[1], storage_options={"timelake_rollup_refresh_interval": "0s"})
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(at(2024, 3, 5), 30)))
    lake.sql("CREATE MATERIALIZED ROLLUP h AS SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, "
             "avg(temp) AS a FROM readings GROUP BY 1, 2")
    t.append(iot_table(iot_series(at(2024, 3, 6), 30)))  # queues a background refresh
    print("exiting", flush=True)
    """
)


def test_the_interpreter_exits_cleanly_while_a_background_refresh_runs(tmp_path):
    here = os.path.dirname(os.path.abspath(__file__))
    for i in range(3):
        done = subprocess.run([sys.executable, "-c", _EXIT_WHILE_REFRESHING, str(tmp_path / f"lake{i}"), here],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "exiting" in done.stdout and "terminate" not in done.stderr
        lake = timelake.Lake(str(tmp_path / f"lake{i}"), storage_options=NO_REFRESH)
        assert_same(lake.sql("SELECT * FROM h"), lake.sql(
            "SELECT time_bucket(INTERVAL '1 hour', time) AS b, device_id, avg(temp) AS a FROM readings GROUP BY 1, 2",
            rollups=False))


def test_a_rollup_takes_no_appends_and_latest_reads_its_newest_buckets(quiet_lake):
    t = make_readings(quiet_lake)
    t.append(iot_table(iot_series(at(2024, 3, 5), 6)))
    quiet_lake.sql(HOURLY)
    before = quiet_lake.table("hourly").version
    with pytest.raises(ValueError, match="is a rollup"):
        quiet_lake.table("hourly").append(quiet_lake.sql("SELECT * FROM hourly"))
    assert quiet_lake.table("hourly").version == before
    # latest() of a rollup: the newest bucket of each group, as a query on the rollup reads it.
    t.append(iot_table([(at(2024, 3, 5, 7, 1), "a", 5.0)]))  # not refreshed
    newest = quiet_lake.latest("hourly").to_pylist()
    assert sorted((r["device_id"], r["hour"], r["n"]) for r in newest) == [
        ("a", at(2024, 3, 5, 7), 1), ("b", at(2024, 3, 5), 6), ("c", at(2024, 3, 5), 6)]
    assert quiet_lake.latest("readings").num_rows == 3
