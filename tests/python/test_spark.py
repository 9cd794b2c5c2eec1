"""A live Spark (pyspark + delta-spark) reads and writes timelake tables; timelake stays exact.

One Spark session per test run (starting one takes ~15 s; its Delta jars come from Maven
Central on first use, scripts/setup.sh fetches them ahead). Spark binds to 127.0.0.1. Without
Java the module is skipped with the reason printed; it is never skipped silently otherwise.
"""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from timelake import _select

from helpers import IOT_SCHEMA, NO_BACKGROUND, T0, iot_series, iot_table

pytestmark = [pytest.mark.spark, pytest.mark.local_only]

HOUR = dt.timedelta(hours=1)

if shutil.which("java") is None:  # pragma: no cover - CI has Java
    pytest.skip("Java is not installed: the Spark interop tests need a JVM (apt-get install openjdk-17-jre-headless)",
                allow_module_level=True)


@pytest.fixture(scope="session")
def spark():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from spark_session import delta_session

    session = delta_session("timelake-tests")
    yield session
    session.stop()


def _normalized(table: pa.Table, columns) -> list[tuple]:
    """Rows as sorted tuples of plain values: timestamps as UTC microseconds, numbers widened."""
    out = []
    arrays = []
    for name in columns:
        col = table.column(name)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
        elif pa.types.is_integer(col.type):
            col = col.cast(pa.int64())
        elif pa.types.is_floating(col.type):
            col = col.cast(pa.float64())
        elif pa.types.is_dictionary(col.type) or pa.types.is_large_string(col.type):
            col = col.cast(pa.string())
        arrays.append(col.to_pylist())
    for row in zip(*arrays):
        out.append(row)
    return sorted(out, key=lambda r: tuple((v is None, v) for v in r))


def _spark_rows(spark, path, columns, version=None):
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return _normalized(reader.load(str(path)).select(*columns).toArrow(), columns)


def _ours(lake, name, columns):
    return _normalized(lake.sql(f"SELECT * FROM {name}"), columns)


def _path(lake_path, name):
    ns, _, table = name.rpartition(".")
    return lake_path / (ns or "default") / table


COLUMNS = ["time", "device_id", "temp"]


def _fill(t, days=2, appends=3):
    for k in range(appends):
        rows = iot_series(T0 + k * 7 * HOUR, 12 * days, step=2 * HOUR, base=10.0 * k)
        t.append(iot_table(rows), batch_id=f"fill-{k}")


def test_spark_reads_every_kind_of_timelake_table(spark, lake, lake_path):
    expire = {"delta.logRetentionDuration": "interval 0 seconds",
              "delta.deletedFileRetentionDuration": "interval 0 seconds",
              "timelake.retentionDurationCheck": "false"}
    kinds = {
        "hourly": dict(series_key=["device_id"], chunk="hour"),
        "monthly": dict(series_key=["device_id"], chunk="month", dedup="first"),
        "last": dict(series_key=["device_id"], dedup="last"),
        "retained": dict(series_key=["device_id"], retention="30d"),
        "expired": dict(series_key=["device_id"], dedup="last", properties={**expire, **NO_BACKGROUND}),
    }
    for name, options in kinds.items():
        t = lake.create_table(name, IOT_SCHEMA, **options)
        _fill(t)
        if name == "retained":
            t.append(iot_table([(dt.datetime.now(dt.timezone.utc), "now", 1.0)]))
            t.maintain()  # retention drops the 2024 chunks, compacts the rest
        else:
            for k in range(9):  # enough commits for a checkpoint
                t.append(iot_table([(T0 + k * HOUR, "a", 100.0 + k)]), batch_id=f"late-{k}")
            t.maintain()
        assert _spark_rows(spark, _path(lake_path, name), COLUMNS) == _ours(lake, name, COLUMNS), name
    # A plain table (no time column).
    plain = pa.schema([("id", pa.int64()), ("device_id", pa.string()), ("temp", pa.float32())])
    t = lake.create_table("plain", plain)
    for k in range(3):
        t.append(pa.table({"id": [k, k + 10], "device_id": ["a", "b"], "temp": [1.5, 2.5]}, schema=plain))
    t.maintain()
    cols = ["id", "device_id", "temp"]
    assert _spark_rows(spark, _path(lake_path, "plain"), cols) == _ours(lake, "plain", cols)
    # A table of naive timestamps (Delta timestampNtz).
    ntz = pa.schema([("time", pa.timestamp("us")), ("device_id", pa.string()), ("temp", pa.float64())])
    t = lake.create_table("ntz", ntz, series_key=["device_id"])
    t.append(pa.table({"time": [dt.datetime(2024, 3, 5, 1), dt.datetime(2024, 3, 5, 2)],
                       "device_id": ["a", "b"], "temp": [1.0, 2.0]}, schema=ntz))
    assert _spark_rows(spark, _path(lake_path, "ntz"), COLUMNS) == _ours(lake, "ntz", COLUMNS)
    # Spark reads timelake's older versions too.
    t = lake.table("last")
    for version in (1, 2):
        assert _spark_rows(spark, _path(lake_path, "last"), COLUMNS, version=version) == _normalized(
            lake.sql("SELECT * FROM last", as_of=version), COLUMNS)


def test_spark_appends_and_timelake_stays_exact(spark, lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    t.append(iot_table([(T0, "a", 1.0), (T0 + HOUR, "b", 2.0)]), batch_id="ours-1")
    path = _path(lake_path, "readings")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES "
              "(TIMESTAMP '2024-03-05 02:00:00', 'a', 3.0), (TIMESTAMP '2024-03-05 03:00:00', 'c', 4.0)")
    expected = [(T0, "a", 1.0), (T0 + HOUR, "b", 2.0), (T0 + 2 * HOUR, "a", 3.0), (T0 + 3 * HOUR, "c", 4.0)]
    assert _ours(lake, "readings", COLUMNS) == _normalized(iot_table(expected), COLUMNS)
    latest = {r["device_id"]: r["temp"] for r in lake.latest("readings").to_pylist()}
    assert latest == {"a": 3.0, "b": 2.0, "c": 4.0}
    # timelake appends on top; a replayed batch id is still recognised.
    r = t.append(iot_table([(T0 + 4 * HOUR, "b", 5.0)]), batch_id="ours-2")
    assert not r["duplicate"]
    assert t.append(iot_table([(T0, "a", 1.0)]), batch_id="ours-1")["duplicate"]
    latest = {r["device_id"]: r["temp"] for r in lake.latest("readings").to_pylist()}
    assert latest == {"a": 3.0, "b": 5.0, "c": 4.0}
    t.maintain()
    assert _spark_rows(spark, path, COLUMNS) == _ours(lake, "readings", COLUMNS)
    assert len(_ours(lake, "readings", COLUMNS)) == 5


def test_spark_delete_update_merge_optimize_then_timelake_reads_exactly(spark, lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    _fill(t, days=1, appends=2)
    path = _path(lake_path, "readings")
    table = f"delta.`{path}`"
    steps = [
        f"DELETE FROM {table} WHERE device_id = 'b'",
        f"UPDATE {table} SET temp = temp + 1000 WHERE device_id = 'c'",
        f"MERGE INTO {table} AS d USING (SELECT TIMESTAMP '2024-03-05 00:00:00' AS time, 'a' AS device_id, -1.0 AS temp "
        f"UNION ALL SELECT TIMESTAMP '2024-03-05 23:30:00', 'z', 42.0) AS s "
        f"ON d.device_id = s.device_id AND d.time = s.time "
        f"WHEN MATCHED THEN UPDATE SET temp = s.temp WHEN NOT MATCHED THEN INSERT *",
        f"OPTIMIZE {table}",
    ]
    for step in steps:
        spark.sql(step)
        t.refresh()
        assert _ours(lake, "readings", COLUMNS) == _spark_rows(spark, path, COLUMNS), step
    rows = _ours(lake, "readings", COLUMNS)
    assert not any(r[1] == "b" for r in rows)
    assert all(r[2] >= 1000 for r in rows if r[1] == "c")
    assert (int(T0.timestamp() * 1_000_000), "a", -1.0) in rows
    latest = {r["device_id"]: r for r in lake.latest("readings").to_pylist()}
    assert set(latest) == {"a", "c", "z"}
    assert latest["z"]["temp"] == 42.0
    # timelake goes on writing: an append, then maintain(); Spark agrees.
    t.append(iot_table([(T0 + 30 * HOUR, "b", 7.0)]))
    t.maintain()
    assert _ours(lake, "readings", COLUMNS) == _spark_rows(spark, path, COLUMNS)
    assert {r["device_id"] for r in lake.latest("readings").to_pylist()} == {"a", "b", "c", "z"}


@pytest.mark.parametrize("mode", ["name", "id"])
def test_column_mapped_tables_spark_wrote_read_row_for_row(spark, lake, lake_path, mode):
    """Delta column mapping: files name columns `col-<uuid>`; renames and drops change only the log."""
    path = lake_path / "default" / f"mapped_{mode}"
    table = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {table} (id INT, v STRING, t TIMESTAMP, part STRING) USING delta "
              f"PARTITIONED BY (part) TBLPROPERTIES ('delta.columnMapping.mode' = '{mode}')")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a', TIMESTAMP '2024-01-01 00:00:00', 'x'), "
              f"(2, 'b', TIMESTAMP '2024-01-02 00:00:00', 'y')")
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN v TO label")
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN part TO region")
    spark.sql(f"ALTER TABLE {table} DROP COLUMN t")
    spark.sql(f"ALTER TABLE {table} ADD COLUMNS (score DOUBLE)")
    spark.sql(f"INSERT INTO {table} VALUES (3, 'c', 'x', 0.5)")
    columns = ["id", "label", "region", "score"]
    ours = lake.sql(f"SELECT * FROM mapped_{mode}")
    assert ours.schema.names == ["id", "label", "region", "score"]
    assert _normalized(ours, columns) == _spark_rows(spark, path, columns)
    assert _normalized(ours, columns) == [(1, "a", "x", None), (2, "b", "y", None), (3, "c", "x", 0.5)]
    # An older version reads with its own names, as Spark's time travel does.
    old_columns = ["id", "v", "t", "part"]
    assert _normalized(lake.sql(f"SELECT * FROM mapped_{mode} AT (VERSION => 1)"), old_columns) == \
        _spark_rows(spark, path, old_columns, version=1)
    # Filters and aggregates on renamed columns work; writing stays refused, clearly.
    assert lake.sql(f"SELECT sum(id) AS s FROM mapped_{mode} WHERE region = 'x'").to_pylist() == [{"s": 4}]
    with pytest.raises(RuntimeError, match="columnMapping"):
        lake.table(f"mapped_{mode}").append(pa.table({"id": [9]}))


@pytest.mark.parametrize("mapping", ["none", "name"])
def test_deletion_vectors_spark_wrote_read_row_for_row(spark, lake, lake_path, mapping):
    """DELETE, UPDATE and MERGE with deletion vectors (on-disk RoaringBitmapArrays): the deleted
    rows stay in the Parquet files and only the vectors say they are gone."""
    path = lake_path / "default" / f"dv_{mapping}"
    table = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {table} (id INT, v STRING) USING delta TBLPROPERTIES "
              f"('delta.enableDeletionVectors' = 'true', 'delta.columnMapping.mode' = '{mapping}')")
    # One file of 30,000 rows: deleting every 7th row puts 4,286 rows in one Roaring container,
    # which is then a bitmap container (more than 4,096), the rest array and run containers.
    (spark.range(0, 30000).selectExpr("cast(id as int) id", "cast(id % 13 as string) v")
     .repartition(1).write.format("delta").mode("append").save(str(path)))
    columns = ["id", "v"]
    steps = [
        f"DELETE FROM {table} WHERE id % 7 = 0 OR id < 3",           # array and bitmap containers
        f"DELETE FROM {table} WHERE id BETWEEN 20000 AND 25000",      # runs; the vectors grow
        f"UPDATE {table} SET v = 'updated' WHERE id % 1000 = 1",
        f"MERGE INTO {table} d USING (SELECT 5 AS id, 'merged' AS v UNION ALL SELECT 99999, 'new') s "
        f"ON d.id = s.id WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT *",
    ]
    for version, step in enumerate(steps, start=2):
        spark.sql(step)
        ours = _normalized(lake.sql(f"SELECT * FROM dv_{mapping}"), columns)
        assert ours == _spark_rows(spark, path, columns), step
        assert _normalized(lake.sql(f"SELECT * FROM dv_{mapping} AT (VERSION => {version - 1})"), columns) == \
            _spark_rows(spark, path, columns, version=version - 1), step
    dv_files = [p for p in path.rglob("deletion_vector_*.bin")]
    assert dv_files, "Spark wrote no deletion vector files: the test tests nothing"
    ids = {r[0] for r in _normalized(lake.sql(f"SELECT * FROM dv_{mapping}"), columns)}
    assert 7 not in ids and 22000 not in ids and 5 not in ids and 99999 in ids and 8 in ids and 29999 in ids
    assert lake.sql(f"SELECT count(*) AS n FROM dv_{mapping} WHERE v = 'updated'").to_pylist()[0]["n"] > 0
    with pytest.raises(RuntimeError, match="deletionVectors"):
        lake.table(f"dv_{mapping}").append(pa.table({"id": pa.array([1], pa.int32()), "v": ["x"]}))


def test_deletion_vectors_on_a_timelake_dedup_table(spark, lake, lake_path):
    """Spark turns deletion vectors on for a timelake table and deletes rows: read-time dedup and
    latest() leave the deleted rows out (a deleted newer copy lets the older copy through, as the
    rows in Delta say); the table is read-only for timelake from then on."""
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last", properties=NO_BACKGROUND)
    t.append(iot_table([(T0, "a", 1.0), (T0 + HOUR, "b", 2.0), (T0 + 2 * HOUR, "b", 3.0)]))
    t.append(iot_table([(T0, "a", 10.0), (T0 + 3 * HOUR, "c", 4.0)]))  # overlaps: read-time dedup
    assert {r["device_id"]: r["temp"] for r in lake.latest("readings").to_pylist()} == {"a": 10.0, "b": 3.0, "c": 4.0}
    path = _path(lake_path, "readings")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE temp IN (3.0, 10.0)")
    assert list(path.rglob("deletion_vector_*.bin")), "Spark wrote no deletion vectors: the test tests nothing"
    expected = [(T0, "a", 1.0), (T0 + HOUR, "b", 2.0), (T0 + 3 * HOUR, "c", 4.0)]
    assert _ours(lake, "readings", COLUMNS) == _normalized(iot_table(expected), COLUMNS)
    assert _ours(lake, "readings", COLUMNS) == _spark_rows(spark, path, COLUMNS)
    assert {r["device_id"]: r["temp"] for r in lake.latest("readings").to_pylist()} == {"a": 1.0, "b": 2.0, "c": 4.0}
    # One series at a time, read by the core (vectors, then read-time dedup), as DuckDB reads it.
    for device, temps in (("a", [1.0]), ("b", [2.0]), ("c", [4.0])):
        query = f"SELECT time, temp FROM readings WHERE device_id = '{device}' ORDER BY time"
        before = _select.ANSWERED
        fast = lake.sql(query)
        assert _select.ANSWERED == before + 1
        _select.ENABLED = False
        try:
            assert lake.sql(query) == fast
        finally:
            _select.ENABLED = True
        assert fast.column("temp").to_pylist() == temps
    with pytest.raises(RuntimeError, match="deletionVectors"):
        t.append(iot_table([(T0 + 5 * HOUR, "d", 5.0)]))


def test_aggregates_over_every_series_leave_out_the_rows_spark_deleted(spark, lake, lake_path):
    """The core's bucket scan (no series key) honours deletion vectors as DuckDB and Spark do."""
    t = lake.create_table("plain", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    t.append(iot_table([(T0 + i * 600 * dt.timedelta(seconds=1), d, float(i)) for i in range(24) for d in "abc"]))
    path = _path(lake_path, "plain")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE temp IN (3.0, 10.0, 11.0) OR device_id = 'b' AND temp > 20")
    assert list(path.rglob("deletion_vector_*.bin")), "Spark wrote no deletion vectors: the test tests nothing"
    query = ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, count(*) AS c, sum(temp) AS s FROM plain "
             "GROUP BY 1 ORDER BY 1")
    before = _select.ANSWERED
    fast = lake.sql(query)
    assert _select.ANSWERED == before + 1
    _select.ENABLED = False
    try:
        assert lake.sql(query) == fast
    finally:
        _select.ENABLED = True
    spark_rows = spark.sql(
        f"SELECT date_trunc('HOUR', time) AS h, count(*) AS c, sum(temp) AS s FROM delta.`{path}` GROUP BY 1 ORDER BY 1"
    ).collect()
    assert fast.column("c").to_pylist() == [r["c"] for r in spark_rows]
    assert fast.column("s").to_pylist() == [r["s"] for r in spark_rows]
    assert sum(fast.column("c").to_pylist()) == 72 - 3 * 3 - 3


def test_spark_reads_an_evolved_table_and_renames_are_refused_clearly(spark, lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    t.append(iot_table([(T0, "a", 1.0)]))
    t.add_columns({"humidity": pa.float64()})
    t.append(pa.table({"time": [T0 + HOUR], "device_id": ["b"], "temp": [2.0], "humidity": [0.5]}))
    path = _path(lake_path, "readings")
    columns = COLUMNS + ["humidity"]
    assert _spark_rows(spark, path, columns) == _ours(lake, "readings", columns)
    assert _spark_rows(spark, path, columns) == [(int(T0.timestamp() * 1e6), "a", 1.0, None),
                                                 (int((T0 + HOUR).timestamp() * 1e6), "b", 2.0, 0.5)]
    # Column mapping turned on keeps every name: still read. A rename under it is refused clearly.
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
              "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')")
    assert _ours(lake, "readings", columns) == _spark_rows(spark, path, columns)
    spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN humidity TO rh")
    with pytest.raises(RuntimeError, match="renamed or dropped columns under Delta column mapping"):
        lake.sql("SELECT * FROM readings")


def _typed_rows(table: pa.Table, columns) -> list[tuple]:
    """Rows as sorted tuples of Python values, timestamps as naive UTC (Spark's and ours agree)."""
    rows = []
    for r in table.select(columns).to_pylist():
        rows.append(tuple(v.astimezone(dt.timezone.utc).replace(tzinfo=None)
                          if isinstance(v, dt.datetime) and v.tzinfo else v for v in r.values()))
    return sorted(rows, key=lambda r: tuple((v is None, v) for v in r))


def test_spark_reads_a_table_timelake_widened_and_appends_to_it(spark, lake, lake_path):
    import decimal

    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("n", pa.int32()),
                        ("temp", pa.float32()), ("price", pa.decimal128(10, 2)), ("day", pa.date32())])
    t = lake.create_table("readings", schema, series_key=["device_id"], dedup="last", properties=NO_BACKGROUND)
    t.append(pa.Table.from_pylist([{"time": T0, "device_id": "a", "n": 1, "temp": 1.5,
                                    "price": decimal.Decimal("12.34"), "day": dt.date(2024, 3, 5)}], schema=schema))
    t.widen_columns({"n": pa.int64(), "temp": pa.float64(), "price": pa.decimal128(14, 3), "day": pa.timestamp("us")})
    t.append(pa.Table.from_pylist([{"time": T0 + HOUR, "device_id": "b", "n": 2**40, "temp": 0.1,
                                    "price": decimal.Decimal("99999999999.125"), "day": dt.datetime(2024, 3, 6, 12)}],
                                  schema=t.schema))
    path = _path(lake_path, "readings")
    columns = ["time", "device_id", "n", "temp", "price", "day"]
    theirs = spark.read.format("delta").load(str(path))
    assert [f.dataType.simpleString() for f in theirs.schema.fields][2:] == [
        "bigint", "double", "decimal(14,3)", "timestamp_ntz"]
    assert _typed_rows(theirs.toArrow(), columns) == _typed_rows(lake.sql("SELECT * FROM readings"), columns)
    assert _typed_rows(theirs.toArrow(), ["n", "price"]) == [(1, decimal.Decimal("12.340")),
                                                             (2**40, decimal.Decimal("99999999999.125"))]
    # Spark appends wide values; timelake's sql and latest() read them.
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (TIMESTAMP '2024-03-05 02:00:00', 'c', {2**41}, 0.25, "
              f"1.5, TIMESTAMP_NTZ '2024-03-07 00:00:00')")
    ours = lake.sql("SELECT * FROM readings")
    assert ours.schema == t.schema
    assert _typed_rows(ours, columns) == _typed_rows(spark.read.format("delta").load(str(path)).toArrow(), columns)
    assert {r["device_id"]: r["n"] for r in lake.latest("readings").to_pylist()} == {"a": 1, "b": 2**40, "c": 2**41}


def test_timelake_reads_and_appends_to_a_table_spark_widened(spark, lake, lake_path):
    import decimal

    path = lake_path / "default" / "widened"
    table = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {table} (id INT, v FLOAT, p DECIMAL(10,2), d DATE, s SMALLINT) USING delta "
              "TBLPROPERTIES ('delta.enableTypeWidening' = 'true', 'delta.feature.timestampNtz' = 'supported')")
    spark.sql(f"INSERT INTO {table} VALUES (1, 1.5, 12.34, DATE '2024-01-01', 7)")
    for change in ("id TYPE BIGINT", "v TYPE DOUBLE", "p TYPE DECIMAL(12,2)", "d TYPE TIMESTAMP_NTZ",
                   "s TYPE INT", "s TYPE DOUBLE"):
        spark.sql(f"ALTER TABLE {table} CHANGE COLUMN {change}")
    spark.sql(f"INSERT INTO {table} VALUES ({2**40}, 0.1, 1234567890.12, TIMESTAMP_NTZ '2024-01-02 03:04:05', 0.5)")
    columns = ["id", "v", "p", "d", "s"]
    ours = lake.sql("SELECT * FROM widened")
    assert [f.type for f in ours.schema] == [pa.int64(), pa.float64(), pa.decimal128(12, 2), pa.timestamp("us"),
                                             pa.float64()]
    assert _typed_rows(ours, columns) == _typed_rows(spark.read.format("delta").load(str(path)).toArrow(), columns)
    assert _typed_rows(ours, ["id", "s"]) == [(1, 7.0), (2**40, 0.5)]
    # The table's writer features (typeWidening, timestampNtz, appendOnly, invariants) are ones
    # timelake honours: it appends, and Spark reads the row back.
    w = lake.table("widened")
    w.append(pa.Table.from_pylist([{"id": 3, "v": 2.0, "p": decimal.Decimal("1.00"), "d": dt.datetime(2024, 1, 3),
                                    "s": 1.0}], schema=w.schema))
    assert _typed_rows(spark.read.format("delta").load(str(path)).toArrow(), columns) == \
        _typed_rows(lake.sql("SELECT * FROM widened"), columns)
    # Older versions read with the types of then, as Spark's time travel does.
    old = lake.sql("SELECT * FROM widened AT (VERSION => 1)")
    assert [f.type for f in old.schema] == [pa.int32(), pa.float32(), pa.decimal128(10, 2), pa.date32(), pa.int16()]
    assert _typed_rows(old, columns) == _typed_rows(
        spark.read.format("delta").option("versionAsOf", 1).load(str(path)).toArrow(), columns)


def test_nested_fields_spark_widened_read_and_keep_their_history(spark, lake, lake_path):
    import json

    path = lake_path / "default" / "nested"
    table = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {table} (id INT, arr ARRAY<INT>, m MAP<STRING, INT>, st STRUCT<x: INT>) USING delta "
              "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    spark.sql(f"INSERT INTO {table} VALUES (1, array(1, 2), map('k', 3), named_struct('x', 4))")
    for change in ("arr.element TYPE BIGINT", "m.value TYPE BIGINT", "st.x TYPE BIGINT"):
        spark.sql(f"ALTER TABLE {table} CHANGE COLUMN {change}")
    spark.sql(f"INSERT INTO {table} VALUES (2, array({2**40}), map('k', {2**41}), named_struct('x', {2**42}))")
    ours = lake.sql("SELECT * FROM nested ORDER BY id")
    assert ours.schema.field("arr").type.value_type == pa.int64()
    assert ours.schema.field("m").type.item_type == pa.int64()
    assert ours.schema.field("st").type.field("x").type == pa.int64()
    assert ours.to_pylist() == [
        {"id": 1, "arr": [1, 2], "m": [("k", 3)], "st": {"x": 4}},
        {"id": 2, "arr": [2**40], "m": [("k", 2**41)], "st": {"x": 2**42}},
    ]
    # timelake's own schema changes keep the history Spark recorded on nested fields.
    t = lake.table("nested")
    t.add_columns({"note": pa.string()})
    t.widen_columns({"id": pa.int64()})
    last = [json.loads(line) for f in sorted((path / "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines()]
    schema = json.loads([a for a in last if "metaData" in a][-1]["metaData"]["schemaString"])
    fields = {f["name"]: f for f in schema["fields"]}
    assert fields["st"]["type"]["fields"][0]["metadata"]["delta.typeChanges"] == [
        {"toType": "long", "fromType": "integer"}]
    assert [c.get("fieldPath") for c in fields["m"]["metadata"]["delta.typeChanges"]] == ["value"]
    assert fields["id"]["metadata"]["delta.typeChanges"] == [{"fromType": "integer", "toType": "long"}]
    theirs = spark.read.format("delta").load(str(path)).orderBy("id").toArrow()
    assert theirs.column("id").to_pylist() == [1, 2]
    assert theirs.column("st").to_pylist() == [{"x": 4}, {"x": 2**42}]


def test_spark_reads_a_rollup_as_timelake_does(spark, lake, lake_path):
    """A rollup is a Delta table of its own: after refreshes that rewrote some of its files, Spark
    reads one row per (bucket, group), the rows a query on the rollup returns."""
    lake = type(lake)(lake.location, storage_options={"timelake_rollup_refresh_interval": "off"})
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    _fill(t)
    lake.sql("CREATE MATERIALIZED ROLLUP hourly AS SELECT time_bucket(INTERVAL '1 hour', time) AS hour, device_id, "
             "avg(temp) AS temp, count(*) AS n, max(temp) AS high FROM readings GROUP BY 1, 2")
    for k in range(3):  # late rows and upserts, each followed by a refresh
        t.append(iot_table([(T0 + k * HOUR, "a", 500.0 + k), (T0 + 30 * HOUR, "b", float(k))]))
        lake.sql("REFRESH MATERIALIZED ROLLUP hourly")
    columns = ["hour", "device_id", "temp", "n", "high"]
    assert _spark_rows(spark, _path(lake_path, "hourly"), columns) == _ours(lake, "hourly", columns)
