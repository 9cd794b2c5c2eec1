"""Lake.sql: the seed example, time buckets in UTC, name resolution, result types, read-only."""

import datetime as dt
import decimal

import pyarrow as pa
import pytest

import timelake
from helpers import IOT_SCHEMA, T0, at, count_rows, iot_series, iot_table, process_timezone, sorted_rows, table_dir

# ------------------------------------------------------------------ the seed's example


def test_seed_example_on_local_lake(tmp_path):
    lake = timelake.Lake(str(tmp_path / "lake"))
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("temp", pa.float64())])
    t = lake.create_table("iot.readings", schema, time_column="time", series_key=["device_id"], retention="365d")
    now = dt.datetime.now(dt.timezone.utc)
    batch = pa.table({"time": [now], "device_id": ["pump-7"], "temp": [71.5]}, schema=schema)
    result = t.append(batch, batch_id="gateway-3-000042")
    hourly = lake.sql("""
    SELECT time_bucket(INTERVAL '1 hour', time) AS hour, avg(temp) AS temp
    FROM iot.readings WHERE device_id = 'pump-7' GROUP BY 1 ORDER BY 1
    """)
    assert result["rows"] == 1 and result["duplicate"] is False
    assert isinstance(hourly, pa.Table)
    assert hourly.column_names == ["hour", "temp"]
    assert hourly.to_pylist() == [{"hour": now.replace(minute=0, second=0, microsecond=0), "temp": 71.5}]


# ------------------------------------------------------------------ time buckets


HOURLY = [
    (at(2024, 3, 5, 10, 5), "pump-7", 1.0),
    (at(2024, 3, 5, 10, 35), "pump-7", 3.0),
    (at(2024, 3, 5, 11, 10), "pump-7", 5.0),
    (at(2024, 3, 5, 11, 50), "pump-8", 100.0),
]

HOURLY_QUERY = """
SELECT time_bucket(INTERVAL '1 hour', time) AS hour, avg(temp) AS temp
FROM readings WHERE device_id = 'pump-7' GROUP BY 1 ORDER BY 1
"""


def test_hourly_time_bucket_averages(lake, readings):
    readings.append(iot_table(HOURLY))
    assert lake.sql(HOURLY_QUERY).to_pylist() == [
        {"hour": at(2024, 3, 5, 10), "temp": 2.0},
        {"hour": at(2024, 3, 5, 11), "temp": 5.0},
    ]


def test_hourly_time_bucket_is_utc_when_process_zone_is_half_hour_offset(tmp_path):
    with process_timezone("Asia/Kolkata"):
        lake = timelake.Lake(str(tmp_path / "lake"))
        lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"]).append(iot_table(HOURLY))
        got = lake.sql(HOURLY_QUERY).to_pylist()
    assert got == [{"hour": at(2024, 3, 5, 10), "temp": 2.0}, {"hour": at(2024, 3, 5, 11), "temp": 5.0}]


def test_time_bucket_result_type_is_utc_timestamp(lake, readings):
    readings.append(iot_table(HOURLY))
    assert lake.sql(HOURLY_QUERY).schema.field("hour").type == pa.timestamp("us", tz="UTC")


NEAR_MIDNIGHT = [
    (at(2024, 1, 1, 23, 30), "a", 1.0),
    (at(2024, 1, 2, 0, 30), "a", 2.0),
    (at(2024, 1, 2, 3, 0), "a", 4.0),
]

DAILY_QUERY = """
SELECT time_bucket(INTERVAL '1 day', time) AS day, count(*) AS n, sum(temp) AS s
FROM readings GROUP BY 1 ORDER BY 1
"""


def test_day_buckets_are_utc_days_when_process_zone_is_new_york(tmp_path):
    with process_timezone("America/New_York"):
        lake = timelake.Lake(str(tmp_path / "lake"))
        lake.create_table("readings", IOT_SCHEMA).append(iot_table(NEAR_MIDNIGHT))
        got = lake.sql(DAILY_QUERY).to_pylist()
    assert got == [{"day": at(2024, 1, 1), "n": 1, "s": 1.0}, {"day": at(2024, 1, 2), "n": 2, "s": 6.0}]


def test_month_buckets_are_utc_months_when_process_zone_is_new_york(tmp_path):
    rows = [(at(2024, 2, 29, 23, 0), "a", 1.0), (at(2024, 3, 1, 1, 0), "a", 2.0)]
    with process_timezone("America/New_York"):
        lake = timelake.Lake(str(tmp_path / "lake"))
        lake.create_table("readings", IOT_SCHEMA).append(iot_table(rows))
        got = lake.sql("SELECT time_bucket(INTERVAL '1 month', time) AS m, count(*) AS n FROM readings GROUP BY 1 ORDER BY 1")
    assert got.to_pylist() == [{"m": at(2024, 2, 1), "n": 1}, {"m": at(2024, 3, 1), "n": 1}]


# ------------------------------------------------------------------ name resolution


@pytest.fixture
def two_namespaces(lake):
    lake.create_table("iot.readings", IOT_SCHEMA).append(iot_table(iot_series(T0, 1, devices=("a", "b"))))
    lake.create_table("readings", IOT_SCHEMA).append(iot_table(iot_series(T0, 1, devices=("a", "b", "c"))))
    return lake


@pytest.mark.parametrize("namespace,expected", [("iot", 2), ("default", 3)])
def test_unqualified_name_resolves_in_namespace_argument(two_namespaces, namespace, expected):
    got = two_namespaces.sql("SELECT count(*) AS n FROM readings", namespace=namespace)
    assert got.column("n").to_pylist() == [expected]


def test_unqualified_name_resolves_in_default_namespace_by_default(two_namespaces):
    assert two_namespaces.sql("SELECT count(*) AS n FROM readings").column("n").to_pylist() == [3]


def test_qualified_name_ignores_namespace_argument(two_namespaces):
    got = two_namespaces.sql("SELECT count(*) AS n FROM iot.readings", namespace="default")
    assert got.column("n").to_pylist() == [2]


def test_query_joins_tables_of_two_namespaces(lake):
    lake.create_table("iot.readings", IOT_SCHEMA).append(iot_table([(T0, "a", 1.0), (T0, "b", 2.0)]))
    devices = lake.create_table("meta.devices", pa.schema([("device_id", pa.string()), ("site", pa.string())]))
    devices.append(pa.table({"device_id": ["a", "b"], "site": ["north", "south"]}))
    got = lake.sql(
        "SELECT d.site, r.temp FROM iot.readings r JOIN meta.devices d USING (device_id) ORDER BY d.site"
    )
    assert got.to_pylist() == [{"site": "north", "temp": 1.0}, {"site": "south", "temp": 2.0}]


def test_query_sees_rows_of_every_append(lake, readings):
    for i in range(4):
        readings.append(iot_table(iot_series(T0 + dt.timedelta(days=i), 3)))
    assert count_rows(lake, "readings") == 4 * 3 * 3


def test_time_filter_returns_exactly_matching_rows_across_chunks(lake, readings):
    readings.append(iot_table(iot_series(T0, 6 * 24 * 3, step=dt.timedelta(minutes=10))))
    got = lake.sql(
        "SELECT count(*) AS n, min(time) AS lo, max(time) AS hi FROM readings "
        "WHERE time >= TIMESTAMPTZ '2024-03-06 00:00:00+00' AND time < TIMESTAMPTZ '2024-03-06 12:00:00+00'"
    ).to_pylist()
    assert got == [{"n": 6 * 12 * 3, "lo": at(2024, 3, 6), "hi": at(2024, 3, 6, 11, 50)}]


def test_series_filter_returns_only_that_series(lake, readings):
    readings.append(iot_table(iot_series(T0, 10)))
    got = lake.sql("SELECT DISTINCT device_id FROM readings WHERE device_id = 'b'")
    assert got.to_pylist() == [{"device_id": "b"}]


# ------------------------------------------------------------------ result types


def test_select_star_returns_declared_schema(lake, readings):
    readings.append(iot_table(iot_series(T0, 2)))
    got = lake.sql("SELECT * FROM readings")
    assert list(zip(got.schema.names, got.schema.types)) == list(zip(IOT_SCHEMA.names, IOT_SCHEMA.types))


DECLARED_TYPES = {
    "string": (pa.string(), "x"),
    "large_string": (pa.large_string(), "x"),
    "int8": (pa.int8(), -3),
    "int16": (pa.int16(), 300),
    "int32": (pa.int32(), 70000),
    "int64": (pa.int64(), 2**40),
    "float32": (pa.float32(), 1.5),
    "float64": (pa.float64(), 2.25),
    "bool": (pa.bool_(), True),
    "date32": (pa.date32(), dt.date(2024, 3, 5)),
    "binary": (pa.binary(), b"\x00\x01"),
    "decimal128": (pa.decimal128(10, 3), decimal.Decimal("12.345")),
    "timestamp_naive": (pa.timestamp("us"), dt.datetime(2024, 3, 5, 1, 2, 3)),
    "timestamp_utc": (pa.timestamp("us", tz="UTC"), at(2024, 3, 5, 1, 2, 3)),
}


@pytest.mark.parametrize("kind", list(DECLARED_TYPES))
def test_column_comes_back_as_declared_type(lake, kind):
    typ, value = DECLARED_TYPES[kind]
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("v", typ)])
    t = lake.create_table("typed", schema, time_column="time")
    t.append(pa.table({"time": [T0], "v": pa.array([value], typ)}))
    got = lake.sql("SELECT v FROM typed")
    assert got.schema.field("v").type == typ
    assert got.column("v").to_pylist() == [value]


def test_naive_time_column_comes_back_naive(lake):
    schema = pa.schema([("time", pa.timestamp("us")), ("v", pa.float64())])
    t = lake.create_table("naive", schema)
    t.append(pa.table({"time": [dt.datetime(2024, 3, 5, 10)], "v": [1.0]}, schema=schema))
    got = lake.sql("SELECT time FROM naive")
    assert got.schema.field("time").type == pa.timestamp("us")
    assert got.column("time").to_pylist() == [dt.datetime(2024, 3, 5, 10)]


def test_query_over_empty_table_returns_zero_rows_with_schema(lake, readings):
    got = lake.sql("SELECT * FROM readings")
    assert got.num_rows == 0
    assert list(zip(got.schema.names, got.schema.types)) == list(zip(IOT_SCHEMA.names, IOT_SCHEMA.types))


def test_query_without_tables_runs(lake):
    assert lake.sql("SELECT 1 AS one").to_pylist() == [{"one": 1}]


# ------------------------------------------------------------------ read-only, errors


WRITES = {
    "insert": "INSERT INTO readings VALUES (TIMESTAMPTZ '2024-03-05 00:00:00+00', 'x', 1.0)",
    "create": "CREATE TABLE scratch AS SELECT 1 AS one",
    "drop": "DROP TABLE readings",
    "copy": "COPY (SELECT * FROM readings) TO '{out}'",
    "update": "UPDATE readings SET temp = 0",
    "delete": "DELETE FROM readings",
    "select_then_delete": "SELECT 1; DELETE FROM readings",
}


@pytest.mark.parametrize("kind", list(WRITES))
def test_write_statement_is_value_error(lake, readings, tmp_path, kind):
    readings.append(iot_table(iot_series(T0, 2)))
    with pytest.raises(ValueError):
        lake.sql(WRITES[kind].format(out=tmp_path / "out.csv"))


@pytest.mark.parametrize("kind", ["delete", "drop", "update", "select_then_delete"])
def test_rejected_write_statement_leaves_table_unchanged(lake, readings, kind):
    readings.append(iot_table(iot_series(T0, 2)))
    before = sorted_rows(lake.sql("SELECT * FROM readings"))
    with pytest.raises(ValueError):
        lake.sql(WRITES[kind])
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == before
    assert lake.table("readings").version == 1


def test_rejected_copy_writes_no_file(lake, readings, tmp_path):
    readings.append(iot_table(iot_series(T0, 2)))
    with pytest.raises(ValueError):
        lake.sql(WRITES["copy"].format(out=tmp_path / "out.csv"))
    assert not (tmp_path / "out.csv").exists()


def test_syntax_error_is_runtime_error(lake, readings):
    with pytest.raises(RuntimeError):
        lake.sql("SELEC * FROM readings")


def test_unknown_column_is_runtime_error(lake, readings):
    with pytest.raises(RuntimeError):
        lake.sql("SELECT no_such_column FROM readings")


def test_missing_table_is_key_error(lake, readings):
    with pytest.raises(KeyError):
        lake.sql("SELECT * FROM no_such_table")


# ------------------------------------------------------------------ names: parsing, case, internal columns


def test_table_name_in_a_string_or_alias_does_not_load_that_table(lake, readings):
    readings.append(iot_table(iot_series(T0, 1)))
    broken = lake.create_table("broken", IOT_SCHEMA)
    broken.append(iot_table(iot_series(T0, 1)))
    for f in (table_dir(broken) / "_delta_log").glob("*.json"):
        f.write_text("not json\n")
    got = lake.sql("SELECT 'broken' AS broken, count(*) AS n FROM readings")
    assert got.to_pylist() == [{"broken": "broken", "n": 3}]


def test_table_named_in_a_subquery_and_cte_is_found(lake, readings):
    readings.append(iot_table(iot_series(T0, 2)))
    lake.create_table("meta.devices", pa.schema([("device_id", pa.string())])).append(pa.table({"device_id": ["a"]}))
    got = lake.sql(
        "WITH r AS (SELECT * FROM readings) "
        "SELECT count(*) AS n FROM r WHERE device_id IN (SELECT device_id FROM meta.devices)"
    )
    assert got.to_pylist() == [{"n": 2}]


@pytest.mark.parametrize("name", ["READINGS", "Readings", '"READINGS"', "Default.Readings", '"DEFAULT".readings'])
def test_table_names_compare_ignoring_case(lake, readings, name):
    readings.append(iot_table(iot_series(T0, 2)))
    assert lake.sql(f"SELECT count(*) AS n FROM {name}").to_pylist() == [{"n": 6}]


def test_mixed_case_table_is_found_by_any_case(lake):
    lake.create_table("IoT.Sensor", IOT_SCHEMA).append(iot_table(iot_series(T0, 1)))
    assert lake.sql("SELECT count(*) AS n FROM iot.sensor").to_pylist() == [{"n": 3}]
    assert lake.sql("SELECT count(*) AS n FROM sensor", namespace="IoT").to_pylist() == [{"n": 3}]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT count(*) AS n FROM default.readings",
        "SELECT count(*) AS n FROM DEFAULT.readings",
        "SELECT count(*) AS n FROM default . readings",
        "SELECT count(default.readings.temp) AS n FROM default.readings",
        "SELECT count(*) AS n FROM default.readings r JOIN iot.readings i USING (time, device_id)",
    ],
)
def test_default_namespace_can_be_named_unquoted(lake, readings, query):
    rows = iot_series(T0, 2)
    readings.append(iot_table(rows))
    lake.create_table("iot.readings", IOT_SCHEMA).append(iot_table(rows))
    assert lake.sql(query).to_pylist() == [{"n": 6}]


def test_default_in_strings_and_comments_is_left_alone(lake, readings):
    readings.append(iot_table(iot_series(T0, 1)))
    got = lake.sql("SELECT 'default.readings' AS s, count(*) AS n FROM default.readings -- default.x\n")
    assert got.to_pylist() == [{"s": "default.readings", "n": 3}]


INTERNAL_NAMES = ["__tl_seq", "__tl_ord", "__tl_file", "__tl_path", "filename", "file_row_number", "file_index", "r", "m", "FileName"]


@pytest.mark.parametrize("dedup", ["last", "first"])
@pytest.mark.parametrize("column", INTERNAL_NAMES)
def test_column_named_like_an_internal_name_reads_deduplicated(lake, column, dedup):
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), (column, pa.int64())])
    t = lake.create_table("odd", schema, series_key=["device_id"], dedup=dedup)
    # The column's values run against commit order, so ordering by it instead of by commit fails.
    t.append(pa.table({"time": [T0, T0], "device_id": ["a", "b"], column: [10, 2]}, schema=schema))
    t.append(pa.table({"time": [T0], "device_id": ["a"], column: [1]}, schema=schema))
    got = lake.sql(f'SELECT device_id, "{column}" AS v FROM odd ORDER BY device_id').to_pylist()
    assert got == [{"device_id": "a", "v": 1 if dedup == "last" else 10}, {"device_id": "b", "v": 2}]


LITERAL_PATHS = ["lake[1]*{a,b}'q", "lake?", "lake*"]


@pytest.mark.parametrize("folder", LITERAL_PATHS)
@pytest.mark.parametrize("dedup", [None, "last"])
def test_lake_folder_with_glob_characters_reads_each_row_once(tmp_path, folder, dedup):
    import shutil

    lake = timelake.Lake(str(tmp_path / folder))
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup=dedup)
    t.append(iot_table(iot_series(T0, 2)))
    # A folder the unescaped path would also match as a glob pattern, holding the same files.
    decoy = folder.replace("[1]", "1").replace("*", "x").replace("?", "y")
    shutil.copytree(tmp_path / folder, tmp_path / decoy)
    t.append(iot_table(iot_series(T0 + dt.timedelta(minutes=5), 2)))
    got = lake.sql("SELECT count(*) AS n, count(DISTINCT (time, device_id)) AS k FROM readings")
    assert got.to_pylist() == [{"n": 12, "k": 12}]


def test_tables_differing_only_in_case_are_value_error(lake, lake_path, readings):
    import shutil

    readings.append(iot_table(iot_series(T0, 1)))
    # Made on disk: the lake itself may refuse to create a name that differs only in case.
    shutil.copytree(lake_path / "default" / "readings", lake_path / "default" / "Readings")
    with pytest.raises(ValueError, match="differ only in case"):
        lake.sql("SELECT count(*) FROM readings")


# ------------------------------------------------------------------ deeply nested expressions

# DuckDB runs expressions nested up to 1,000 levels; their JSON parse trees nest about three times
# deeper, past Python's recursion limit. sql() analyses the tree (tables, time travel, pruning)
# without recursing, so such queries run as DuckDB runs them.
DEEP_QUERIES = {
    "sum_of_400_terms": ("SELECT " + "+".join(["1"] * 400) + " AS v", [{"v": 400}]),
    "200_nested_cases": ("SELECT " + "CASE WHEN true THEN " * 200 + "7" + " END" * 200 + " AS v", [{"v": 7}]),
    "deep_sum_over_a_table": (
        "SELECT count(*) + " + "+".join(["0"] * 400) + " AS v FROM readings WHERE device_id = 'pump-0'", None),
    "deep_and_chain_prunes": (
        "SELECT count(*) AS v FROM readings WHERE " + " AND ".join(["device_id = 'pump-0'"] * 300), None),
    "deep_time_travel": (
        "SELECT count(*) + " + "+".join(["0"] * 400) + " AS v FROM readings AT (VERSION => 1)", None),
}


@pytest.mark.parametrize("kind", sorted(DEEP_QUERIES))
def test_deeply_nested_expressions_run_as_duckdb_runs_them(lake, readings, kind):
    readings.append(iot_table(iot_series(T0, 3)))
    query, expected = DEEP_QUERIES[kind]
    got = lake.sql(query).to_pylist()
    if expected is None:
        one_series = lake.sql("SELECT count(*) AS v FROM readings WHERE device_id = 'pump-0'").to_pylist()
        expected = [{"v": count_rows(lake, "readings")}] if "VERSION" in query else one_series
    assert got == expected


def test_a_tree_deeper_than_duckdb_allows_is_duckdbs_error_not_a_recursion_error(lake, readings):
    with pytest.raises(RuntimeError) as raised:
        lake.sql("SELECT " + "(" * 3000 + "1" + ")" * 3000)
    assert not isinstance(raised.value, RecursionError)


def test_parse_tree_reader_and_writer_agree_with_json_on_deep_and_odd_trees():
    import json

    from timelake import _tree

    deep: object = 1
    for i in range(5000):
        deep = {"k": [deep, i, "s\u00e9\\\"", None, True, -1.5e-3]} if i % 2 else [deep, {}, []]
    text = _tree._dumps_iterative(deep)
    back = _tree._loads_iterative(text)
    assert _tree._dumps_iterative(back) == text
    shallow = {"a": [1, 2.5, "x\ny", {"b": None, "c": [True, False]}], "": {}, "d": []}
    assert _tree._loads_iterative(json.dumps(shallow)) == shallow
    assert _tree._dumps_iterative(shallow) == json.dumps(shallow)
    for bad in ("", "{", "[1,", '{"a" 1}', "[1] 2", "}"):
        with pytest.raises(ValueError):
            _tree._loads_iterative(bad)
