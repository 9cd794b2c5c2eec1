"""Adversarial cases for simple selections answered by the core (_select, scan/selection_reader):
every statement the fast path answers must give DuckDB's result at the same version; anything else
must go to DuckDB (ANSWERED unchanged) and behave as before (same result or exception type)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

import timelake
from timelake import _select

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
SCHEMA = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()),
                    ("temp", pa.float64()), ("n", pa.int32())])


def slow_sql(lake, query, **kw):
    _select.ENABLED = False
    try:
        return lake.sql(query, **kw)
    finally:
        _select.ENABLED = True


def outcome(call):
    """(result, None) or (None, exception type)."""
    try:
        return call(), None
    except Exception as e:  # noqa: BLE001
        return None, type(e)


def assert_like_duckdb(lake, query, ordered=True, **kw):
    """Whatever the fast path does with `query`, the result (or exception type) is DuckDB's."""
    fast, fast_error = outcome(lambda: lake.sql(query, **kw))
    slow, slow_error = outcome(lambda: slow_sql(lake, query, **kw))
    assert fast_error == slow_error, f"fast raised {fast_error}, DuckDB raised {slow_error}: {query!r}"
    if fast is None:
        return None, None
    assert fast.schema == slow.schema, query
    assert fast.num_rows == slow.num_rows, query
    f, s = fast.to_pylist(), slow.to_pylist()
    if not ordered:
        f, s = sorted(f, key=repr), sorted(s, key=repr)
    for a, b in zip(f, s):
        for k in a:
            x, y = a[k], b[k]
            if isinstance(x, float) and isinstance(y, float):
                assert (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-9, abs=1e-12), (query, k)
            else:
                assert x == y, (query, k, f, s)
    return fast, slow


@pytest.fixture
def small(lake_path):
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("s.r", SCHEMA, time_column="time", series_key=["device_id"], chunk="hour")
    t.append(pa.table({"time": [T0 + timedelta(minutes=i) for i in range(6)], "device_id": ["a"] * 6,
                       "temp": [1.0, 2, 3, 4, 5, 6], "n": [6, 5, 4, 3, 2, 1]}, schema=SCHEMA))
    return lake


# --- Defects ---------------------------------------------------------------------------------

def test_order_by_an_alias_named_like_the_time_column(small):
    # DuckDB binds ORDER BY time to the select-list alias `time` (the column n), not the table's
    # time column: rows 1, 2. The fast path sorts by the time column: 6, 5.
    assert_like_duckdb(small, "SELECT n AS time FROM s.r WHERE device_id = 'a' ORDER BY time LIMIT 2")


def test_order_by_desc_an_alias_named_like_the_time_column(small):
    assert_like_duckdb(small, "SELECT n AS time, temp FROM s.r WHERE device_id = 'a' ORDER BY time DESC")


def test_limit_beyond_int64_raises_duckdbs_error_type(small):
    # DuckDB: RuntimeError (conversion error); the fast path: TypeError from read_selection().
    assert_like_duckdb(small, "SELECT * FROM s.r WHERE device_id = 'a' ORDER BY time LIMIT 9223372036854775808")
    assert_like_duckdb(small, "SELECT * FROM s.r WHERE device_id = 'a' LIMIT 99999999999999999999")


@pytest.mark.parametrize("space", ["\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u2028", "\u2029"])
def test_characters_duckdb_does_not_read_as_space(small, space):
    # Python's \s takes these as white space; DuckDB's lexer does not: a syntax error there.
    before = _select.ANSWERED
    query = f"SELECT time{space}FROM s.r WHERE device_id = 'a'"
    assert_like_duckdb(small, query)
    assert _select.ANSWERED == before


@pytest.mark.parametrize("space", ["\v", "\f", "\r", "\u00a0", "\u2000", "\u3000", "\u202f"])
def test_characters_duckdb_reads_as_space(small, space):
    assert_like_duckdb(small, f"SELECT time{space}FROM s.r WHERE device_id = 'a' ORDER BY time")


def test_non_ascii_column_names_bind_only_as_duckdb_binds_them(lake_path):
    # DuckDB folds case of ASCII letters only: "émission" does not name the column "Émission",
    # and `k` does not name the column KELVIN SIGN (U+212A), which Python lower-cases to "k".
    lake = timelake.Lake(str(lake_path))
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()),
                        ("\u212a", pa.float64()), ("Émission", pa.int32())])
    t = lake.create_table("s.u", schema, time_column="time", series_key=["device_id"], chunk="hour")
    t.append(pa.table({"time": [T0], "device_id": ["a"], "\u212a": [1.0], "Émission": [6]}, schema=schema))
    assert_like_duckdb(lake, "SELECT \"Émission\" FROM s.u WHERE device_id = 'a'")
    assert_like_duckdb(lake, "SELECT \"émission\" AS x FROM s.u WHERE device_id = 'a'")
    assert_like_duckdb(lake, "SELECT k AS x FROM s.u WHERE device_id = 'a'")


def test_min_max_of_signed_zeros_equal_duckdbs(lake_path):
    # -0.0 and 0.0 are equal; which of the two min/max gives back is not fixed by SQL, and
    # DuckDB's own pick varies with how it reads (over Arrow the last one read, over these
    # Parquet files another): only the values are compared.
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("z.r", SCHEMA, time_column="time", series_key=["device_id"], chunk="hour")
    t.append(pa.table({"time": [T0, T0 + timedelta(minutes=1)], "device_id": ["a", "a"],
                       "temp": [-0.0, 0.0], "n": [1, 2]}, schema=SCHEMA))
    query = "SELECT min(temp) AS lo, max(temp) AS hi FROM z.r WHERE device_id = 'a'"
    fast, slow = assert_like_duckdb(lake, query)
    assert fast.to_pylist() == [{"lo": 0.0, "hi": 0.0}] == slow.to_pylist()


@pytest.mark.parametrize("namespace", ["information_schema", "pg_catalog", "temp", "system", "memory"])
def test_namespaces_duckdb_cannot_serve(lake_path, namespace):
    # DuckDB cannot prepare these namespaces (system catalog, ambiguous with a catalog name) and
    # raises RuntimeError; the fast path answers them.
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table(f"{namespace}.r", SCHEMA, time_column="time", series_key=["device_id"], chunk="hour")
    t.append(pa.table({"time": [T0], "device_id": ["a"], "temp": [1.0], "n": [1]}, schema=SCHEMA))
    assert_like_duckdb(lake, f"SELECT temp FROM {namespace}.r WHERE device_id = 'a'")
    assert_like_duckdb(lake, "SELECT temp FROM r WHERE device_id = 'a'", namespace=namespace)


def test_reserved_looking_table_names_and_default_namespace(lake_path):
    lake = timelake.Lake(str(lake_path))
    for name in ("default.duckdb_tables", "default.query", "main.r"):
        t = lake.create_table(name, SCHEMA, time_column="time", series_key=["device_id"], chunk="hour")
        t.append(pa.table({"time": [T0], "device_id": ["a"], "temp": [1.0], "n": [1]}, schema=SCHEMA))
    for query in ("SELECT temp FROM duckdb_tables WHERE device_id = 'a'",
                  "SELECT temp FROM \"default\".query WHERE device_id = 'a'",
                  "SELECT temp FROM default.query WHERE device_id = 'a'",
                  "SELECT temp FROM main.r WHERE device_id = 'a'"):
        assert_like_duckdb(lake, query)


def test_order_by_alias_differing_in_case_from_the_time_column(small):
    assert_like_duckdb(small, "SELECT n AS Time FROM s.r WHERE device_id = 'a' ORDER BY time")
    assert_like_duckdb(small, "SELECT time AS n, n AS time FROM s.r WHERE device_id = 'a' ORDER BY time")


STORE_QUERIES = [
    ("SELECT * FROM w.r WHERE device_id = 'a' ORDER BY time DESC LIMIT 3", True),
    ("SELECT time, temp AS t FROM w.r WHERE device_id = 'b' AND time BETWEEN '2026-03-01 00:10' AND '2026-03-01 00:20' ORDER BY time", True),
    ("SELECT count(*) AS c, min(temp) AS lo, max(time) AS t, avg(n) AS a FROM w.r WHERE device_id IN ('a') AND time > TIMESTAMP '2026-03-01 00:05:00.5'", True),
    ("SELECT count(*) AS c FROM w.r WHERE device_id = 'zz'", True),
    ("SELECT temp FROM w.r WHERE device_id = 'a' AND time = '2026-03-01 00:07'", True),
]


def test_store_kinds_answer_like_duckdb(lake):
    t = lake.create_table("w.r", SCHEMA, time_column="time", series_key=["device_id"], chunk="hour", dedup="last")
    rows = pa.table({"time": [T0 + timedelta(minutes=i // 2) for i in range(80)], "device_id": ["a", "b"] * 40,
                     "temp": [float(i) for i in range(80)], "n": list(range(80))[::-1]}, schema=SCHEMA)
    t.append(rows)
    t.append(rows.slice(20, 30))  # re-sent: dedup at read time
    before = _select.ANSWERED
    for query, ordered in STORE_QUERIES:
        assert_like_duckdb(lake, query, ordered=ordered)
    assert _select.ANSWERED - before == len(STORE_QUERIES)
    t.maintain()
    for query, ordered in STORE_QUERIES:
        assert_like_duckdb(lake, query, ordered=ordered)


def test_order_by_alias_on_every_store(lake):
    t = lake.create_table("w.r", SCHEMA, time_column="time", series_key=["device_id"], chunk="hour")
    t.append(pa.table({"time": [T0 + timedelta(minutes=i) for i in range(5)], "device_id": ["a"] * 5,
                       "temp": [0.0] * 5, "n": [5, 4, 3, 2, 1]}, schema=SCHEMA))
    assert_like_duckdb(lake, "SELECT n AS time FROM w.r WHERE device_id = 'a' ORDER BY time LIMIT 2")


# --- Ground that held (kept as regression tests) ----------------------------------------------

def test_time_travel_and_other_shapes_go_to_duckdb(small):
    t = small.table("s.r")
    t.append(pa.table({"time": [T0], "device_id": ["a"], "temp": [9.0], "n": [9]}, schema=SCHEMA))
    before = _select.ANSWERED
    for query, kw in [("SELECT * FROM s.r WHERE device_id = 'a' ORDER BY time", {"as_of": 1}),
                      ("SELECT * FROM s.r AT (VERSION => 1) WHERE device_id = 'a' ORDER BY time", {}),
                      ("SELECT * FROM s.r WHERE device_id = 'a' LIMIT 1 OFFSET 1", {}),
                      ("SELECT * FROM s.r WHERE device_id = 'a' AND time > '2026-03-01 24:00:00'", {}),
                      ("SELECT * FROM s.r WHERE device_id = 'a' AND time >= 'infinity'", {}),
                      ("SELECT * FROM s.r WHERE device_id = 'a' AND time >= TIMESTAMP '2026-03-01 00:00:00+01'", {}),
                      ("SELECT count(*) AS c FROM s.r WHERE device_id = 'a' AND time > '2023-02-29'", {}),
                      ("SELECT count(*) AS c FROM s.r WHERE device_id = 1", {}),
                      ("SELECT max(device_id) AS m FROM s.r WHERE device_id = 'a'", {})]:
        assert_like_duckdb(small, query, ordered=False, **kw)
    assert _select.ANSWERED == before
    # A zero offset (Z, +00, +00:00) names the same instant either way: answered, and alike.
    for suffix in ("Z", "+00", "+00:00", "-00:00"):
        assert_like_duckdb(small, f"SELECT * FROM s.r WHERE device_id = 'a' AND time >= TIMESTAMP '2026-03-01 00:00:00{suffix}'",
                           ordered=False)
    assert _select.ANSWERED == before + 4


@pytest.mark.parametrize("dedup", ["last", "first", "none"])
def test_duplicates_inside_one_append_and_across_appends(lake_path, dedup):
    import random
    rng = random.Random(dedup)
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("d.r", SCHEMA, time_column="time", series_key=["device_id"], chunk="hour", dedup=dedup)
    for a in range(4):
        n = 300
        t.append(pa.table({"time": [T0 + timedelta(minutes=rng.randrange(0, 200)) for _ in range(n)],
                           "device_id": [rng.choice("abc") for _ in range(n)],
                           "temp": [float(a * 1000 + i) for i in range(n)], "n": list(range(n))}, schema=SCHEMA))
        if a == 2:
            t.maintain()
        for query in ("SELECT time, temp FROM d.r WHERE device_id = 'a' ORDER BY time",
                      "SELECT count(*) AS c, sum(temp) AS s FROM d.r WHERE device_id = 'b' AND time > '2026-03-01 01:00'"):
            before = _select.ANSWERED
            assert_like_duckdb(lake, query, ordered=dedup != "none")
            assert _select.ANSWERED == before + 1


def test_extreme_integer_keys_and_naive_time(lake_path):
    lake = timelake.Lake(str(lake_path))
    schema = pa.schema([("time", pa.timestamp("us")), ("k", pa.int64()), ("k8", pa.int8()), ("v", pa.float32())])
    t = lake.create_table("i.r", schema, time_column="time", series_key=["k", "k8"], chunk="hour", dedup="first")
    naive = datetime(2026, 3, 1)
    rows = pa.table({"time": [naive + timedelta(minutes=i) for i in range(4)], "k": [-2**63] * 2 + [2**63 - 1] * 2,
                     "k8": [-128, 127] * 2, "v": [1.0, 2, 3, 4]}, schema=schema)
    t.append(rows)
    t.append(rows.set_column(3, "v", pa.array([9.0] * 4, pa.float32())))
    for query in ("SELECT * FROM i.r WHERE k = -9223372036854775808 AND k8 = -128",
                  "SELECT * FROM i.r WHERE k = 9223372036854775807 AND k8 = 127 AND time >= TIMESTAMPTZ '2026-03-01 00:03'",
                  "SELECT max(v) AS m, min(time) AS t FROM i.r WHERE k IN (9223372036854775807) AND k8 = - 128",
                  "SELECT * FROM i.r WHERE k = 9223372036854775808 AND k8 = 1",
                  "SELECT * FROM i.r WHERE k = 1 AND k8 = 128"):
        assert_like_duckdb(lake, query)
