"""Data that would be accepted and then break every query is refused at append (ValueError naming
the column, nothing written), and declared types that cannot hold a result do not break queries.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from helpers import IOT_SCHEMA, T0, count_rows, data_files, iot_table, table_dir

TS = pa.timestamp("us", tz="UTC")
BAD = [b"ok", b"\xff\xfe", b"caf\xc3"]  # the second and third are not UTF-8


def _unchecked(type_: pa.DataType, values=BAD) -> pa.Array:
    """Bytes viewed as a string type without validation (what pyarrow lets users build)."""
    binary = {pa.large_string(): pa.large_binary(), pa.string_view(): pa.binary_view()}.get(type_, pa.binary())
    return pa.array(values, binary).view(type_)


def _times(n: int) -> pa.Array:
    return pa.array([T0 + dt.timedelta(minutes=i) for i in range(n)], TS)


def _bad_columns():
    dict_type = pa.dictionary(pa.int8(), pa.string())
    bad_dict = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int8()), _unchecked(pa.string(), [b"a", b"\xc3\x28"]))
    struct = pa.StructArray.from_arrays([_unchecked(pa.string())], ["label"])
    listed = pa.ListArray.from_arrays(pa.array([0, 1, 2, 3], pa.int32()), _unchecked(pa.string()))
    mapped = pa.MapArray.from_arrays(
        pa.array([0, 1, 2, 3], pa.int32()), _unchecked(pa.string()), pa.array([1.0, 2.0, 3.0])
    )
    return {
        "string": (pa.string(), _unchecked(pa.string())),
        "large_string": (pa.large_string(), _unchecked(pa.large_string())),
        "large_string_into_string": (pa.string(), _unchecked(pa.large_string())),
        "string_view": (pa.string(), _unchecked(pa.string_view())),
        "dictionary": (dict_type, bad_dict),
        "dictionary_into_string": (pa.string(), bad_dict),
        "struct_field": (struct.type, struct),
        "list_item": (listed.type, listed),
        "map_key": (mapped.type, mapped),
    }


@pytest.mark.parametrize("case", sorted(_bad_columns()))
def test_invalid_utf8_is_value_error_naming_the_column_and_writes_nothing(lake, case):
    declared, values = _bad_columns()[case]
    t = lake.create_table("t", pa.schema([("time", TS), ("label", declared)]))
    with pytest.raises(ValueError, match=r"column 'label' has a string that is not valid UTF-8") as e:
        t.append(pa.table({"time": _times(len(values)), "label": values}))
    assert type(e.value) is ValueError
    assert t.version == 0
    assert data_files(table_dir(t)) == []
    assert count_rows(lake, "t") == 0


def test_invalid_utf8_in_a_later_batch_rolls_back_the_earlier_ones(lake):
    t = lake.create_table("t", pa.schema([("time", TS), ("label", pa.string())]))
    good = pa.record_batch({"time": _times(3), "label": pa.array(["a", "b", "c"])})
    bad = pa.record_batch({"time": _times(3), "label": _unchecked(pa.string())})
    with pytest.raises(ValueError, match="label"):
        t.append(pa.RecordBatchReader.from_batches(good.schema, [good, good, bad]))
    assert t.version == 0
    assert data_files(table_dir(t)) == []


def test_valid_utf8_in_every_string_form_is_accepted_and_queryable(lake):
    t = lake.create_table("t", pa.schema([("time", TS), ("label", pa.string()), ("tags", pa.list_(pa.large_string()))]))
    t.append(
        pa.table(
            {
                "time": _times(2),
                "label": pa.array(["café", "€"], pa.string_view()),
                "tags": pa.array([["ü"], []], pa.list_(pa.large_string())),
            }
        )
    )
    assert lake.sql("SELECT label FROM t ORDER BY time").column("label").to_pylist() == ["café", "€"]


# --- dictionaries ------------------------------------------------------------------------------


def _categorical_batches(batches: int, per_batch: int, index=pa.int8()):
    """Batches whose dictionaries differ: together they hold batches * per_batch categories."""
    for b in range(batches):
        names = pa.array([f"dev-{b}-{i}" for i in range(per_batch)])
        yield pa.record_batch(
            {
                "time": _times(per_batch),
                "device_id": pa.DictionaryArray.from_arrays(pa.array(range(per_batch), index), names),
                "temp": pa.array([float(i) for i in range(per_batch)]),
            }
        )


DICT_SCHEMA = pa.schema([("time", TS), ("device_id", pa.dictionary(pa.int8(), pa.string())), ("temp", pa.float64())])


def test_dictionary_column_whose_index_type_overflows_across_batches_still_answers_queries(lake):
    t = lake.create_table("t", DICT_SCHEMA, series_key="device_id")
    for batch in _categorical_batches(3, 100):  # 300 categories, int8 indices address 128
        t.append(batch)
    latest = lake.latest("t")
    assert latest.num_rows == 300
    assert sorted(latest.column("device_id").to_pylist()) == sorted(f"dev-{b}-{i}" for b in range(3) for i in range(100))
    assert latest.schema.field("device_id").type == pa.dictionary(pa.int16(), pa.string())
    everything = lake.sql("SELECT * FROM t")
    assert everything.num_rows == 300
    assert everything.schema.field("device_id").type == pa.dictionary(pa.int16(), pa.string())
    assert count_rows(lake, "t") == 300
    t.maintain()
    assert lake.latest("t").num_rows == 300


def test_dictionary_column_that_fits_comes_back_as_declared(lake):
    t = lake.create_table("t", DICT_SCHEMA, series_key="device_id")
    t.append(next(_categorical_batches(1, 50)))
    assert lake.latest("t").schema == DICT_SCHEMA
    assert lake.sql("SELECT * FROM t").schema.field("device_id").type == DICT_SCHEMA.field("device_id").type


def test_one_append_of_batches_with_different_dictionaries_is_one_commit(lake):
    t = lake.create_table("t", DICT_SCHEMA, series_key="device_id")
    result = t.append(pa.RecordBatchReader.from_batches(DICT_SCHEMA, _categorical_batches(4, 100)))
    assert result["rows"] == 400
    assert lake.latest("t").num_rows == 400


def test_dictionary_of_integers_comes_back_from_latest(lake):
    schema = pa.schema([("time", TS), ("code", pa.dictionary(pa.int8(), pa.int64()))])
    t = lake.create_table("t", schema)
    t.append(pa.table({"time": _times(3), "code": pa.array([7, 8, 9])}))
    latest = lake.latest("t")
    assert latest.column("code").to_pylist() == [9]
    assert latest.schema == schema


def test_list_of_int8_dictionaries_takes_more_than_128_distinct_values(lake):
    schema = pa.schema([("time", TS), ("tags", pa.list_(pa.dictionary(pa.int8(), pa.string())))])
    t = lake.create_table("t", schema)
    t.append(pa.table({"time": _times(1), "tags": pa.array([[f"t{i}" for i in range(300)]], pa.list_(pa.string()))}))
    assert len(lake.sql("SELECT tags FROM t").column("tags")[0]) == 300
    assert len(lake.latest("t").column("tags")[0]) == 300


# --- types that cannot be stored ---------------------------------------------------------------


@pytest.mark.parametrize(
    "column_type",
    [pa.decimal128(5, -2), pa.decimal256(10, -1), pa.struct([]), pa.list_(pa.struct([]))],
    ids=["decimal128_negative_scale", "decimal256_negative_scale", "empty_struct", "list_of_empty_struct"],
)
def test_type_parquet_cannot_store_is_refused_at_create_table(lake, column_type):
    with pytest.raises(ValueError, match="'x"):
        lake.create_table("t", pa.schema([("time", TS), ("x", column_type)]))
    assert lake.tables() == []


def test_null_series_keys_and_extreme_times_stay_queryable(lake):
    """Inputs that look hostile but are fine: nulls in the series key, times at the ends of the
    microsecond range, NaN and infinities in values."""
    t = lake.create_table("t", IOT_SCHEMA, series_key="device_id", dedup="last")
    t.append(iot_table([(T0, None, 1.0), (T0, "a", float("nan"))]))
    t.append(
        pa.table(
            {
                "time": pa.array([-(2**63) + 1, 2**63 - 1], pa.int64()).cast(TS),
                "device_id": ["b", "b"],
                "temp": [float("inf"), float("-inf")],
            }
        )
    )
    assert count_rows(lake, "t") == 4
    assert lake.latest("t").num_rows == 3
    t.maintain()
    assert count_rows(lake, "t") == 4
