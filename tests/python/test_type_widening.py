"""Type widening: Table.widen_columns changes column types to wider ones without rewriting files.

The table gains Delta's typeWidening feature and each widened column a `delta.typeChanges`
history; everything that reads files (SQL with and without read-time dedup, latest() and its
index objects, compaction, time travel, other handles) reads older files in the new type; bad
changes are ValueErrors that write nothing; appends racing the change rebase.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import NO_BACKGROUND, T0, RacingWriter, delta_read, sorted_rows

HOUR = dt.timedelta(hours=1)

SCHEMA = pa.schema([
    ("time", pa.timestamp("us", tz="UTC")),
    ("device_id", pa.string()),
    ("count", pa.int32()),
    ("temp", pa.float32()),
    ("level", pa.int16()),
    ("price", pa.decimal128(10, 2)),
    ("day", pa.date32()),
    ("small", pa.uint8()),
])

WIDER = {
    "count": pa.int64(),
    "temp": pa.float64(),
    "level": pa.float64(),
    "price": pa.decimal128(14, 3),
    "day": pa.timestamp("us"),
    "small": pa.int32(),
}


def _batch(schema, rows):
    """rows: (time, device, count, temp, level, price, day, small)."""
    return pa.Table.from_pylist(
        [dict(zip(schema.names, r)) for r in rows], schema=schema
    )


def _old_row(i, device="a", count=1):
    return (T0 + i * HOUR, device, count, 1.5, 7, decimal.Decimal("12.34"), dt.date(2024, 3, 5), 200)


def _log_actions(lake_path, name, kind):
    out = []
    for f in sorted((lake_path / "default" / name / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            action = json.loads(line)
            if kind in action:
                out.append((int(f.stem), action[kind]))
    return out


@pytest.mark.parametrize("dedup", ["none", "last", "first"])
def test_older_files_read_in_the_wider_type_everywhere(lake, lake_location, dedup):
    t = lake.create_table("readings", SCHEMA, series_key=["device_id"], dedup=dedup, properties=NO_BACKGROUND)
    t.append(_batch(SCHEMA, [_old_row(0, "a"), _old_row(1, "b")]))
    result = t.widen_columns(WIDER)
    assert result == {"version": 2, "columns": list(WIDER)}
    wide = t.schema
    assert [wide.field(c).type for c in WIDER] == list(WIDER.values())
    big = 2**40
    # (T0 + 1h, b) again in the wide type: dedup tables keep one of the two, across both types.
    t.append(_batch(wide, [
        (T0 + HOUR, "b", big, 0.1, 2.5, decimal.Decimal("1.125"), dt.datetime(2024, 3, 6, 12), 70000),
        (T0 + 2 * HOUR, "c", big + 1, 0.2, 3.5, decimal.Decimal("99999999999.999"), dt.datetime(2024, 3, 7), -5),
    ]))
    # An append in the old, narrower types is cast up like any other input.
    t.append(_batch(SCHEMA, [_old_row(3, "d", count=9)]))
    old_b = (T0 + HOUR, "b", 1, 1.5, 7.0, decimal.Decimal("12.340"), dt.datetime(2024, 3, 5), 200)
    new_b = (T0 + HOUR, "b", big, 0.1, 2.5, decimal.Decimal("1.125"), dt.datetime(2024, 3, 6, 12), 70000)
    expected = [
        (T0, "a", 1, 1.5, 7.0, decimal.Decimal("12.340"), dt.datetime(2024, 3, 5), 200),
        *([old_b] if dedup in ("none", "first") else []),
        *([new_b] if dedup in ("none", "last") else []),
        (T0 + 2 * HOUR, "c", big + 1, 0.2, 3.5, decimal.Decimal("99999999999.999"), dt.datetime(2024, 3, 7), -5),
        (T0 + 3 * HOUR, "d", 9, 1.5, 7.0, decimal.Decimal("12.340"), dt.datetime(2024, 3, 5), 200),
    ]
    expected = sorted_rows(_batch(wide, expected))
    got = lake.sql("SELECT * FROM readings")
    assert got.schema == wide
    assert sorted_rows(got) == expected
    # Filters and aggregates see the wide values (a sum over old and new files).
    assert lake.sql("SELECT sum(count) AS s FROM readings WHERE count > 5").to_pylist()[0]["s"] == sum(
        r["count"] for r in expected if r["count"] > 5)
    if dedup != "none":
        assert sorted_rows(lake.latest("readings")) == expected
    # Version 1 keeps the types of then.
    assert lake.sql("SELECT * FROM readings AT (VERSION => 1)").schema == SCHEMA
    # Compaction rewrites old and new files into the wide types, rows unchanged.
    t.maintain()
    assert t.info()["size"]["files"] == 1
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == expected
    again = lake_location.open()
    assert again.table("readings").schema == wide
    assert sorted_rows(again.sql("SELECT * FROM readings")) == expected
    if dedup != "none":
        assert sorted_rows(again.latest("readings")) == expected


def test_the_log_records_each_change_as_spark_does(lake, lake_path):
    t = lake.create_table("readings", SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    t.append(_batch(SCHEMA, [_old_row(0)]))
    t.widen_columns({"level": pa.int32()})
    t.add_columns({"note": pa.string()})
    t.widen_columns({"level": pa.int64(), "temp": pa.float64()})
    protocols = _log_actions(lake_path, "readings", "protocol")
    # One upgrade, at the first widening: table features, keeping what writer version 2 implied.
    assert protocols == [
        (0, {"minReaderVersion": 1, "minWriterVersion": 2}),
        (2, {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening"],
             "writerFeatures": ["appendOnly", "invariants", "typeWidening"]}),
    ]
    metadata = _log_actions(lake_path, "readings", "metaData")
    version, last = metadata[-1]
    assert version == 4
    assert last["configuration"]["delta.enableTypeWidening"] == "true"
    fields = {f["name"]: f for f in json.loads(last["schemaString"])["fields"]}
    # The history, oldest first, as a JSON array inside the schema (add_columns kept it).
    assert fields["level"]["type"] == "long"
    assert fields["level"]["metadata"] == {"delta.typeChanges": [
        {"fromType": "short", "toType": "integer"}, {"fromType": "integer", "toType": "long"}]}
    assert fields["temp"]["metadata"] == {"delta.typeChanges": [{"fromType": "float", "toType": "double"}]}
    assert fields["note"]["metadata"] == {} and fields["count"]["metadata"] == {}
    # uint8 -> int32 changes the stored type (short -> integer); a declared-only change does not.
    t.widen_columns({"small": pa.uint16()})
    version, last = _log_actions(lake_path, "readings", "metaData")[-1]
    fields = {f["name"]: f for f in json.loads(last["schemaString"])["fields"]}
    assert fields["small"]["type"] == "integer"
    assert fields["small"]["metadata"] == {"delta.typeChanges": [{"fromType": "short", "toType": "integer"}]}
    assert lake.sql("SELECT * FROM readings").schema.field("small").type == pa.uint16()


def test_a_table_created_with_type_widening_needs_no_upgrade(lake, lake_path):
    t = lake.create_table("readings", SCHEMA, series_key=["device_id"],
                          properties={"delta.enableTypeWidening": "true"})
    protocols = _log_actions(lake_path, "readings", "protocol")
    assert protocols == [(0, {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["typeWidening"],
                              "writerFeatures": ["appendOnly", "invariants", "typeWidening"]})]
    t.append(_batch(SCHEMA, [_old_row(0)]))
    t.widen_columns({"count": pa.int64()})
    assert [v for v, _ in _log_actions(lake_path, "readings", "protocol")] == [0]
    assert lake.sql("SELECT count FROM readings").column(0).type == pa.int64()
    with pytest.raises(ValueError, match="delta.enableTypeWidening"):
        lake.create_table("other", SCHEMA, properties={"delta.enableTypeWidening": "yes"})


@pytest.mark.parametrize(
    "columns, message",
    [
        ({}, "at least one column"),
        ({"nope": pa.int64()}, "has no column named 'nope'"),
        ({"time": pa.timestamp("ns", tz="UTC")}, "time column"),
        ({"device_id": pa.large_string()}, "series key"),
        ({"count": pa.int16()}, "cannot change from int32 to int16"),
        ({"count": pa.string()}, "cannot change from int32 to string"),
        ({"count": pa.float32()}, "cannot change from int32 to float"),
        ({"count": pa.int32()}, "already has type int32"),
        ({"temp": pa.int64()}, "cannot change from float to int64"),
        ({"price": pa.decimal128(11, 4)}, "cannot change"),  # 7 integer digits, not 8
        ({"price": pa.decimal128(12, 1)}, "cannot change"),  # fewer decimals
        ({"day": pa.timestamp("us", tz="UTC")}, "cannot change from date32"),
        ({"day": pa.timestamp("ns")}, "cannot change from date32"),  # ns ends in 2262
        ({"small": pa.int8()}, "cannot change from uint8 to int8"),
        ([pa.field("count", pa.int64()), pa.field("count", pa.int64())], "given twice"),
        ("count", "widen_columns takes"),
        ({"count": "not a type"}, "widen_columns"),
    ],
)
def test_bad_changes_are_value_errors_and_write_nothing(lake, columns, message):
    t = lake.create_table("readings", SCHEMA, series_key=["device_id"])
    with pytest.raises(ValueError, match=message):
        t.widen_columns(columns)
    t.refresh()
    assert t.version == 0
    assert t.schema == SCHEMA


def test_delta_enable_type_widening_false_turns_widening_off(lake):
    t = lake.create_table("readings", SCHEMA, series_key=["device_id"],
                          properties={"delta.enableTypeWidening": "false"})
    with pytest.raises(ValueError, match='delta.enableTypeWidening = "false"'):
        t.widen_columns({"count": pa.int64()})
    t.refresh()
    assert t.version == 0 and t.schema == SCHEMA


def test_names_match_ignoring_case_on_the_newest_schema(lake, lake_location):
    t = lake.create_table("readings", SCHEMA, series_key=["device_id"])
    stale = lake_location.open().table("readings")
    t.add_columns({"Extra": pa.int8()})
    # The stale handle has not seen `Extra`; the call checks the table's newest schema.
    assert stale.widen_columns({"extra": pa.int16(), "COUNT": pa.int64()})["version"] == 2
    t.refresh()
    assert t.schema.names == SCHEMA.names + ["Extra"]
    assert (t.schema.field("Extra").type, t.schema.field("count").type) == (pa.int16(), pa.int64())
    with pytest.raises(ValueError, match="given twice"):
        t.widen_columns({"extra": pa.int32(), "EXTRA": pa.int64()})


def test_int64_to_double_is_refused_as_delta_does(lake):
    # Not every int64 is a double: Delta (and so timelake) refuses long -> double.
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("n", pa.int64())])
    t = lake.create_table("plain", schema)
    with pytest.raises(ValueError, match="cannot change from int64 to double"):
        t.widen_columns({"n": pa.float64()})


def test_index_objects_written_before_the_change_are_read_in_the_new_type(lake, lake_location, lake_path):
    t = lake.create_table("readings", SCHEMA, series_key=["device_id"], dedup="last", properties=NO_BACKGROUND)
    for i in range(40):  # past an index fold (every 32 commits): index objects hold int32 counts
        t.append(_batch(SCHEMA, [_old_row(i, f"d{i % 5}", count=i)]))
    lake.latest("readings")
    t.maintain(compact=False, retention=False, expire=False)  # waits for the upkeep's records
    objects = list((lake_path / "default" / "readings" / "_timelake" / "lvi").rglob("*.parquet"))
    assert objects and all(pq.read_schema(o).field("count").type == pa.int32() for o in objects)
    t.widen_columns({"count": pa.int64(), "temp": pa.float64()})
    t.append(_batch(t.schema, [(T0 + 50 * HOUR, "d0", 2**40, 0.5, 7, decimal.Decimal("1.00"), dt.date(2024, 3, 5), 1)]))
    expected = {f"d{k}": max(i for i in range(40) if i % 5 == k) for k in range(5)} | {"d0": 2**40}
    for handle in (lake, lake_location.open()):
        latest = handle.latest("readings")
        assert latest.schema == t.schema
        assert {r["device_id"]: r["count"] for r in latest.to_pylist()} == expected


def test_delta_rs_reads_every_version_before_the_change(lake, lake_path, tmp_path):
    t = lake.create_table("readings", SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    t.append(_batch(SCHEMA, [_old_row(0)]))
    before = lake.sql("SELECT * FROM readings")
    t.widen_columns({"count": pa.int64()})
    old, meta = delta_read(lake_path / "default" / "readings", tmp_path, version=1)
    assert old.schema.field("count").type == pa.int32()
    assert sorted_rows(old.select(["time", "device_id", "count", "temp", "level"])) == sorted_rows(
        before.select(["time", "device_id", "count", "temp", "level"]))
    # delta-rs 1.6.6 does not implement the typeWidening reader feature: it refuses the widened
    # table outright (docs/interop.md says so; Spark reads it, test_spark.py).
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, deltalake; deltalake.DeltaTable(sys.argv[1]).to_pyarrow_table()",
         str(lake_path / "default" / "readings")], capture_output=True, text=True, timeout=300)
    assert probe.returncode != 0 and "typeWidening" in probe.stderr


def test_appends_racing_widenings_rebase_and_lose_nothing(lake, lake_path):
    t = lake.create_table("readings", SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    n = 60
    writer = RacingWriter(lake_path, n, "count", "int32")
    writer.go()
    # Each commit races the writer's appends (which were prepared with the narrower types).
    changed = [t.widen_columns({"level": pa.int32()})["version"], t.widen_columns({"count": pa.int64()})["version"],
               t.widen_columns({"level": pa.int64()})["version"], t.add_columns({"extra": pa.int8()})["version"],
               t.widen_columns({"extra": pa.int16(), "temp": pa.float64()})["version"]]
    answers = writer.answers()
    assert len({v for v, _ in answers} | set(changed)) == n + len(changed)  # one version each
    t.refresh()
    assert t.version == n + len(changed)
    assert [t.schema.field(c).type for c in ("count", "level", "extra", "temp")] == [
        pa.int64(), pa.int64(), pa.int16(), pa.float64()]
    rows = lake.sql("SELECT count(*) AS n, sum(count) AS s, count(level) AS l FROM readings").to_pylist()
    assert rows == [{"n": n, "s": sum(range(n)), "l": 0}]
