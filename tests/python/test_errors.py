"""Only the documented exception types leave Lake and Table methods: hostile arguments are a
ValueError (exactly that type, not a TypeError from the bindings, a UnicodeError or a pyarrow
exception), and an exception raised by the caller's own input stream propagates unchanged."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

import timelake
from helpers import IOT_SCHEMA, T0, data_files, iot_series, iot_table, table_dir

SURROGATE = "\udcff"


class BrokenStream:
    def __arrow_c_stream__(self, requested_schema=None):
        raise OSError("producer is down")


class SchemaCapsuleAsStream:
    def __arrow_c_stream__(self, requested_schema=None):
        return IOT_SCHEMA.__arrow_c_schema__()


class NotACapsule:
    def __arrow_c_stream__(self, requested_schema=None):
        return 42


class BrokenSchema:
    def __arrow_c_schema__(self):
        raise RuntimeError("no schema today")


class ArrayCapsuleAsSchema:
    def __arrow_c_schema__(self):
        return pa.array([1]).__arrow_c_array__()[1]  # an ArrowArray capsule, not a schema


class SchemaPropertyRaises:
    @property
    def schema(self):
        raise ZeroDivisionError("bad property")


class BadBool:
    def __bool__(self):
        raise ZeroDivisionError("no truth")


def _batch():
    return iot_table(iot_series(T0, 1))


HOSTILE = {
    # append
    "append_broken_arrow_c_stream": lambda lake, t: t.append(BrokenStream()),
    "append_schema_capsule_as_stream": lambda lake, t: t.append(SchemaCapsuleAsStream()),
    "append_non_capsule_stream": lambda lake, t: t.append(NotACapsule()),
    "append_int": lambda lake, t: t.append(5),
    "append_bytes": lambda lake, t: t.append(b"rows"),
    "append_batch_id_bytes": lambda lake, t: t.append(_batch(), batch_id=b"x"),
    "append_batch_id_surrogate": lambda lake, t: t.append(_batch(), batch_id=SURROGATE),
    "append_batch_id_int": lambda lake, t: t.append(_batch(), batch_id=7),
    "append_maintain_yes": lambda lake, t: t.append(_batch(), maintain="yes"),
    "append_maintain_int": lambda lake, t: t.append(_batch(), maintain=1),
    "append_batches_of_another_schema": lambda lake, t: t.append(
        pa.RecordBatchReader.from_batches(IOT_SCHEMA, iter([pa.record_batch({"x": [1]})]))
    ),
    # maintain
    "maintain_compact_yes": lambda lake, t: t.maintain(compact="yes"),
    "maintain_expire_none": lambda lake, t: t.maintain(expire=None),
    "maintain_retention_bad_bool": lambda lake, t: t.maintain(retention=BadBool()),
    # create_table
    "create_name_bytes": lambda lake, t: lake.create_table(b"x", IOT_SCHEMA),
    "create_name_surrogate": lambda lake, t: lake.create_table("x" + SURROGATE, IOT_SCHEMA),
    "create_name_nul": lambda lake, t: lake.create_table("x\x00y", IOT_SCHEMA),
    "create_name_very_long": lambda lake, t: lake.create_table("x" * 100_000, IOT_SCHEMA),
    "create_name_none": lambda lake, t: lake.create_table(None, IOT_SCHEMA),
    "create_schema_int": lambda lake, t: lake.create_table("x", 5),
    "create_schema_raising": lambda lake, t: lake.create_table("x", BrokenSchema()),
    "create_schema_capsule_of_an_array": lambda lake, t: lake.create_table("x", ArrayCapsuleAsSchema()),
    "create_schema_property_raising": lambda lake, t: lake.create_table("x", SchemaPropertyRaises()),
    "create_schema_from_broken_stream": lambda lake, t: lake.create_table("x", BrokenStream()),
    "create_time_column_bytes": lambda lake, t: lake.create_table("x", IOT_SCHEMA, time_column=b"time"),
    "create_time_column_surrogate": lambda lake, t: lake.create_table("x", IOT_SCHEMA, time_column=SURROGATE),
    "create_series_key_int": lambda lake, t: lake.create_table("x", IOT_SCHEMA, series_key=1),
    "create_series_key_bytes": lambda lake, t: lake.create_table("x", IOT_SCHEMA, series_key=b"device_id"),
    "create_series_key_list_of_int": lambda lake, t: lake.create_table("x", IOT_SCHEMA, series_key=[1]),
    "create_series_key_surrogate": lambda lake, t: lake.create_table("x", IOT_SCHEMA, series_key=[SURROGATE]),
    "create_chunk_int": lambda lake, t: lake.create_table("x", IOT_SCHEMA, chunk=1),
    "create_chunk_surrogate": lambda lake, t: lake.create_table("x", IOT_SCHEMA, chunk=SURROGATE),
    "create_retention_nul": lambda lake, t: lake.create_table("x", IOT_SCHEMA, retention="1d\x00"),
    "create_dedup_surrogate": lambda lake, t: lake.create_table("x", IOT_SCHEMA, dedup=SURROGATE),
    "create_properties_not_a_dict": lambda lake, t: lake.create_table("x", IOT_SCHEMA, properties=[("a", "b")]),
    "create_properties_int_key": lambda lake, t: lake.create_table("x", IOT_SCHEMA, properties={1: "a"}),
    "create_properties_surrogate_key": lambda lake, t: lake.create_table("x", IOT_SCHEMA, properties={SURROGATE: "a"}),
    "create_properties_surrogate_value": lambda lake, t: lake.create_table("x", IOT_SCHEMA, properties={"a": SURROGATE}),
    "create_properties_list_value": lambda lake, t: lake.create_table("x", IOT_SCHEMA, properties={"a": [1]}),
    # table
    "table_bytes": lambda lake, t: lake.table(b"readings"),
    "table_surrogate": lambda lake, t: lake.table(SURROGATE),
    "table_nul": lambda lake, t: lake.table("readings\x00"),
    "table_very_long": lambda lake, t: lake.table("r" * 100_000),
    "table_int": lambda lake, t: lake.table(1),
    # drop_table (a bad name must never drop anything)
    "drop_surrogate": lambda lake, t: lake.drop_table(SURROGATE),
    "drop_nul": lambda lake, t: lake.drop_table("readings\x00"),
    # Lake
    "lake_location_bytes": lambda lake, t: timelake.Lake(b"/tmp/x"),
    "lake_location_surrogate": lambda lake, t: timelake.Lake("/tmp/" + SURROGATE),
    "lake_location_nul": lambda lake, t: timelake.Lake("/tmp/a\x00b"),
    "lake_storage_options_surrogate": lambda lake, t: timelake.Lake("memory://x", {"aws_region": SURROGATE}),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_argument_is_exactly_value_error(lake, readings, case):
    with pytest.raises(Exception) as caught:
        HOSTILE[case](lake, readings)
    assert type(caught.value) is ValueError, f"{type(caught.value).__name__}: {caught.value}"
    assert str(caught.value)
    readings.refresh()
    assert readings.version == 0  # nothing was written
    assert lake.tables() == ["default.readings"]


@pytest.mark.parametrize("case", ["info", "refresh", "maintain"])
def test_plain_calls_on_a_handle_succeed(readings, case):
    getattr(readings, case)()  # the documented no-argument forms keep working


def test_messages_keep_what_follows_a_nul(lake):
    with pytest.raises(ValueError, match=r"invalid table name 'a\x00b'"):
        lake.table("a\x00b")


def test_numpy_booleans_are_flags():
    np = pytest.importorskip("numpy")
    lake = timelake.Lake("memory://flags")
    t = lake.create_table("readings", IOT_SCHEMA, series_key="device_id")
    t.append(_batch(), maintain=np.bool_(False))
    t.maintain(compact=np.True_, retention=np.False_, expire=np.True_)


# --- exceptions of the caller's own input stream -------------------------------------------------


class ProducerError(Exception):
    pass


def _failing_stream(error: BaseException):
    batch = _batch().to_batches()[0]

    def gen():
        yield batch
        raise error

    return pa.RecordBatchReader.from_batches(batch.schema, gen())


@pytest.mark.parametrize(
    "kind", [ProducerError, KeyError, OSError, TypeError, RuntimeError], ids=lambda k: k.__name__
)
def test_exception_of_the_input_stream_propagates_as_the_same_object(readings, kind):
    error = kind("the producer failed")  # made here: a raised exception keeps its frames alive
    with pytest.raises(kind) as caught:
        readings.append(_failing_stream(error))
    assert caught.value is error
    assert readings.version == 0
    assert data_files(table_dir(readings)) == []
    # The parametrized exception outlives the test: drop its traceback (frames holding the lake).
    error.__traceback__ = None


def test_keyboard_interrupt_raised_in_the_input_stream_stays_keyboard_interrupt(readings):
    with pytest.raises(KeyboardInterrupt):
        readings.append(_failing_stream(KeyboardInterrupt()))
    assert readings.version == 0
    assert data_files(table_dir(readings)) == []


def test_failure_behind_another_arrow_stream_is_the_cores_value_error(readings):
    """A producer wrapped in another library's C stream arrives as that library's message."""

    class Wrapped:
        def __arrow_c_stream__(self, requested_schema=None):
            return _failing_stream(ValueError("inner")).__arrow_c_stream__()

    with pytest.raises(ValueError, match="inner") as caught:
        readings.append(Wrapped())
    assert type(caught.value) is ValueError
    assert readings.version == 0


@pytest.mark.parametrize("call", ["table", "create_table", "drop_table", "latest"])
def test_a_huge_table_name_is_refused_without_echoing_all_of_it(lake, call):
    name = "n" * 1_000_000 + "!"
    calls = {
        "table": lambda: lake.table(name),
        "create_table": lambda: lake.create_table(name, pa.schema([("x", pa.int64())])),
        "drop_table": lambda: lake.drop_table(name),
        "latest": lambda: lake.latest(name),
    }
    with pytest.raises(ValueError) as caught:
        calls[call]()
    assert len(str(caught.value)) < 2_000
    assert re.search(r"… \(100000\d bytes\)", str(caught.value)), str(caught.value)[:300]
