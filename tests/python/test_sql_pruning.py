"""The typed scan plan and file pruning: what Table.scan returns, and which files sql() reads.

A query over one table whose WHERE bounds the time column or fixes series keys gets a view over
only the files that can match; its result must be exactly what the same query over every file
gives. The reference here is the same query with the table behind a subquery, which never prunes.
One-series statements are answered by the core's selection reader (test_select.py) from the same
pruned plan; here the DuckDB path is the subject, so that reader is turned off.
"""

from __future__ import annotations

import datetime as dt
import json
import random

import pyarrow as pa
import pytest

from timelake import _select

from helpers import IOT_SCHEMA, T0, iot_table

UTC = dt.timezone.utc


@pytest.fixture(autouse=True)
def duckdb_path_only(monkeypatch):
    monkeypatch.setattr(_select, "ENABLED", False)


def micros(t: dt.datetime) -> int:
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp()) * 1_000_000 + t.microsecond


def per_day(table, days=4, devices=("a", "b", "c", "d")):
    """One append per (day, device pair): files that differ in time and in key range."""
    for day in range(days):
        for pair in (devices[:2], devices[2:]):
            rows = [(T0 + dt.timedelta(days=day, hours=h), d, float(day * 100 + h))
                    for h in range(0, 24, 6) for d in pair]
            table.append(iot_table(rows, table.schema))


def view_files(lake, name="default.readings"):
    return lake._catalog()._views[name].files


def sorted_rows(result: pa.Table):
    return sorted(result.to_pylist(), key=repr)


# ------------------------------------------------------------------ the typed plan


def test_scan_plan_has_named_typed_fields(lake, readings):
    readings.append(iot_table([(T0, "a", 1.0), (T0 + dt.timedelta(hours=1), "a", 2.0)]))
    plan = lake._snapshot("readings").scan()
    assert plan.version == 1 and plan.files_pruned == 0
    assert plan.contract["time_column"] == "time" and plan.partition_columns == []
    assert pa.schema(_Schema(plan.declared_schema)) == IOT_SCHEMA
    (f,) = plan.files
    assert isinstance(f.path, str) and f.path.endswith(".parquet")
    assert (f.chunk, f.seq, f.order, f.rows, f.dedup, f.partition_values) == ("2024-03-05", 1, 0, 2, False, {})
    with pytest.raises(AttributeError):
        f.seq = 3  # read-only
    with pytest.raises(TypeError):
        f[0]  # not a tuple any more


class _Schema:
    def __init__(self, capsule):
        self.capsule = capsule

    def __arrow_c_schema__(self):
        return self.capsule


def test_scan_prunes_by_time_range_inclusive(lake, readings):
    per_day(readings)
    handle = lake._snapshot("readings")
    day1 = T0 + dt.timedelta(days=1)
    plan = handle.scan(min_time=micros(day1), max_time=micros(day1 + dt.timedelta(hours=18)))
    assert len(plan.files) == 2 and plan.files_pruned == 6
    assert {f.chunk for f in plan.files} == {"2024-03-06"}
    # The last row of day 0 is at 18:00: a bound exactly there keeps its files.
    assert len(handle.scan(max_time=micros(T0 + dt.timedelta(hours=18))).files) == 2
    assert len(handle.scan(max_time=micros(T0 + dt.timedelta(hours=18)) - 1).files) == 2
    assert len(handle.scan(max_time=micros(T0) - 1).files) == 0


def test_scan_prunes_by_series_key(lake, readings):
    per_day(readings)
    plan = lake._snapshot("readings").scan(key_equals={"device_id": "c"})
    assert len(plan.files) == 4 and plan.files_pruned == 4


def test_scan_filter_errors_name_the_column(lake, readings):
    handle = lake._snapshot("readings")
    with pytest.raises(ValueError, match="temp"):
        handle.scan(key_equals={"temp": "x"})
    with pytest.raises(ValueError, match="device_id"):
        handle.scan(key_equals={"device_id": 3})


def test_a_path_that_is_not_utf8_is_a_clear_error(lake, lake_path):
    lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    add = {"path": "data/x%FF.parquet", "partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": True}
    log = lake_path / "default" / "readings" / "_delta_log" / f"{1:020d}.json"
    log.write_text(json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps({"add": add}) + "\n")
    with pytest.raises(RuntimeError, match="x%FF.parquet"):
        lake.sql("SELECT * FROM readings")


# ------------------------------------------------------------------ pruning from SQL


def test_sql_reads_only_files_that_can_match(lake, readings):
    per_day(readings)
    day2 = (T0 + dt.timedelta(days=2)).strftime("%Y-%m-%d")
    query = f"SELECT * FROM readings WHERE time >= '{day2}' AND device_id = 'a'"
    result = lake.sql(query)
    assert view_files(lake) == 2  # day 2 and day 3, the files holding a and b
    assert sorted_rows(result) == sorted_rows(lake.sql(reference(query)))
    assert result.num_rows == 8


def test_a_later_query_without_the_filter_sees_every_file(lake, readings):
    per_day(readings)
    lake.sql("SELECT * FROM readings WHERE device_id = 'a'")
    assert view_files(lake) == 4
    assert lake.sql("SELECT count(*) AS n FROM readings").to_pylist() == [{"n": 64}]
    assert view_files(lake) == 8


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM readings r JOIN readings s USING (device_id, time) WHERE r.time > '2024-03-07'",
        "SELECT * FROM readings WHERE time > '2024-03-07' OR device_id = 'a'",
        "SELECT * FROM (SELECT * FROM readings) WHERE time > '2024-03-07'",
        "WITH x AS (SELECT 1) SELECT * FROM readings WHERE time > '2024-03-07'",
        "SELECT * FROM readings WHERE time > now() - INTERVAL 1 DAY",
        "SELECT * FROM readings WHERE time > (SELECT min(time) FROM readings)",
        "SELECT * FROM readings WHERE time > TRY_CAST('2024-03-07' AS TIMESTAMPTZ)",
        "SELECT * FROM readings WHERE time NOT BETWEEN '2024-03-05' AND '2024-03-07'",
        "SELECT * FROM readings WHERE time > '2024-03-07' USING SAMPLE 50% (bernoulli, 7)",
        "SELECT * FROM readings TABLESAMPLE reservoir(5 ROWS) REPEATABLE (1) WHERE time > '2024-03-07'",
    ],
)
def test_statements_that_could_read_other_rows_are_not_pruned(lake, readings, query):
    per_day(readings)
    lake.sql(query)
    assert view_files(lake) == 8


def test_a_constant_is_never_spliced_into_sql(lake, readings):
    per_day(readings)
    with pytest.raises(RuntimeError, match="query failed"):
        lake.sql("SELECT * FROM readings WHERE time >= 'x'') UNION SELECT 1 --'")


def reference(query: str) -> str:
    """The same query over every file: a subquery is never pruned."""
    return query.replace("FROM readings", "FROM (SELECT * FROM readings) AS readings", 1)


def _literal(rng: random.Random, t: dt.datetime, tz: bool) -> str:
    """A random way of writing `t` as a constant DuckDB compares with the time column."""
    text = t.strftime("%Y-%m-%d %H:%M:%S.%f")
    choices = [f"'{text}'", f"TIMESTAMP '{text}'", f"'{text}'::TIMESTAMP", f"DATE '{t:%Y-%m-%d}'"]
    if tz:
        shifted = (t + dt.timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S.%f")
        choices += [f"TIMESTAMPTZ '{shifted}+02'", f"CAST('{shifted}+02:00' AS TIMESTAMP WITH TIME ZONE)"]
    return rng.choice(choices)


def _condition(rng: random.Random, column: str, tz: bool, times: list) -> str:
    """A random condition on the time column; half its instants are a row's time (the bounds
    where an off-by-one in pruning loses rows), or one microsecond from it."""

    def instant() -> dt.datetime:
        if rng.random() < 0.5:
            return rng.choice(times) + dt.timedelta(microseconds=rng.choice([-1, 0, 0, 0, 1]))
        lo, hi = min(times), max(times)
        span = int((hi - lo).total_seconds())
        return lo + dt.timedelta(seconds=rng.randrange(-3600, span + 3600), microseconds=rng.choice([0, 1, 999_999]))

    kind = rng.randrange(4)
    if kind == 0:
        a, b = sorted([instant(), instant()])
        return f"{column} BETWEEN {_literal(rng, a, tz)} AND {_literal(rng, b, tz)}"
    op = rng.choice(["<", "<=", ">", ">=", "="])
    value = _literal(rng, instant(), tz)
    if kind == 1:
        flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}[op]
        return f"{value} {flipped} {column}"
    return f"{column} {op} {value}"


def _schema(time: pa.DataType, key: pa.DataType) -> pa.Schema:
    return pa.schema([("time", time), ("device_id", key), ("temp", pa.float64())])


SCHEMAS = {  # variant: (schema, series-key values)
    "tz": (IOT_SCHEMA, ["a", "b", "c", "d"]),
    "naive": (_schema(pa.timestamp("us"), pa.string()), ["a", "b", "c", "d"]),
    "int_key": (_schema(pa.timestamp("ms", tz="UTC"), pa.int32()), [1, 2, 10, 11]),
    "dictionary_key": (_schema(pa.timestamp("ns", tz="Europe/Paris"), pa.dictionary(pa.int8(), pa.string())), ["x", "y", "z"]),
}


@pytest.mark.parametrize("dedup", ["none", "last", "first"])
@pytest.mark.parametrize("variant", sorted(SCHEMAS))
def test_pruned_results_equal_unpruned_results(lake, variant, dedup):
    schema, devices = SCHEMAS[variant]
    table = lake.create_table("readings", schema, series_key=["device_id"], dedup=dedup)
    tz = schema.field("time").type.tz is not None
    rng = random.Random(f"{variant}-{dedup}")
    start = dt.datetime(2024, 3, 5, tzinfo=UTC if tz else None)
    times = []
    for _ in range(14):  # overlapping appends: dedup tables get files marked for read-time dedup
        base = start + dt.timedelta(hours=rng.randrange(0, 96))
        picked = rng.sample(devices, 2)
        rows = {(base + dt.timedelta(minutes=15 * rng.randrange(0, 12)), rng.choice(picked)) for _ in range(6)}
        times.extend(r[0] for r in rows)
        columns = {"time": [r[0] for r in rows], "device_id": [r[1] for r in rows], "temp": [rng.random() for _ in rows]}
        table.append(pa.table(columns, schema=schema))
    if dedup != "none":
        plan = lake._snapshot("readings").scan()
        assert any(f.dedup for f in plan.files)
    total = len(lake._snapshot("readings").scan().files)
    pruned_somewhere = False
    for _ in range(40):
        column = rng.choice(["time", "readings.time", '"TIME"'])
        conditions = [_condition(rng, column, tz, times) for _ in range(rng.randrange(1, 3))]
        if rng.random() < 0.5:
            value = rng.choice(devices)
            conditions.append(f"device_id = {value!r}" if isinstance(value, str) else f"device_id = {value}")
        query = "SELECT time, device_id, temp FROM readings WHERE " + " AND ".join(conditions)
        got = lake.sql(query)
        pruned_somewhere |= view_files(lake) < total
        assert sorted_rows(got) == sorted_rows(lake.sql(reference(query))), query
    assert pruned_somewhere
