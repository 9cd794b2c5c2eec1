"""Every series-key type the contract accepts sorts, deduplicates and indexes correctly."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

KEYS = [
    ("string", pa.string(), ["b", "a", "b"]),
    ("large_string", pa.large_string(), ["b", "a", "b"]),
    ("dictionary", pa.dictionary(pa.int32(), pa.string()), ["b", "a", "b"]),
    ("int64", pa.int64(), [7, -3, 7]),
    ("uint8", pa.uint8(), [3, 1, 3]),
    ("bool", pa.bool_(), [True, False, True]),
    ("decimal", pa.decimal128(10, 2), [decimal.Decimal("1.50"), decimal.Decimal("0.10"), decimal.Decimal("1.50")]),
    ("fixed_binary", pa.binary(4), [b"abcd", b"aaaa", b"abcd"]),
    ("date", pa.date32(), [dt.date(2024, 1, 2), dt.date(2024, 1, 1), dt.date(2024, 1, 2)]),
    # Types stored as one of the above (Delta has one date, one string, one binary type).
    ("date64", pa.date64(), [dt.date(2024, 1, 2), dt.date(2024, 1, 1), dt.date(2024, 1, 2)]),
    ("string_view", pa.string_view(), ["b", "a", "b"]),
    ("binary_view", pa.binary_view(), [b"b", b"a", b"b"]),
    ("large_binary", pa.large_binary(), [b"b", b"a", b"b"]),
    ("plain_binary", pa.binary(), [b"b", b"", b"b"]),
    ("int8", pa.int8(), [-1, -128, -1]),
    ("uint32", pa.uint32(), [4_000_000_000, 1, 4_000_000_000]),
    ("decimal256", pa.decimal256(20, 2), [decimal.Decimal("1.50"), decimal.Decimal("0.10"), decimal.Decimal("1.50")]),
    ("timestamp_key", pa.timestamp("ms", tz="UTC"),
     [dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc), dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
      dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc)]),
]


@pytest.mark.parametrize("name,key_type,keys", KEYS, ids=[k[0] for k in KEYS])
def test_series_key_type_dedups_and_reports_latest(lake, name, key_type, keys):
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("k", key_type), ("v", pa.float64())])
    t = lake.create_table(name, schema, time_column="time", series_key=["k"], dedup="last")
    ts = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    data = pa.table({"time": [ts, ts, ts], "k": pa.array(keys).cast(key_type), "v": [1.0, 2.0, 3.0]})
    assert t.append(data)["rows"] == 2  # the two rows of the first key collapse to the last
    got = lake.sql(f"SELECT k, v FROM {name} ORDER BY v").to_pylist()
    assert [r["v"] for r in got] == [2.0, 3.0]
    latest = lake.latest(name)
    assert latest.schema == schema
    assert sorted(latest.column("v").to_pylist()) == [2.0, 3.0]
