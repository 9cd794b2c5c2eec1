"""The table contract: time column, series key, chunk, retention, dedup and properties."""

import pyarrow as pa
import pytest

import timelake
from helpers import IOT_SCHEMA, log_actions, table_dir

TWO_TIMES = pa.schema(
    [
        ("time", pa.timestamp("us", tz="UTC")),
        ("received", pa.timestamp("us", tz="UTC")),
        ("device_id", pa.string()),
        ("temp", pa.float64()),
    ]
)

PLAIN = pa.schema([("device_id", pa.string()), ("model", pa.string()), ("installed", pa.int64())])


def contract(table) -> dict:
    return table.info()["contract"]


def configuration(table) -> dict:
    meta = [a["metaData"] for a in log_actions(table_dir(table), 0) if "metaData" in a]
    assert len(meta) == 1
    return meta[0]["configuration"]


# ------------------------------------------------------------------ time column


def test_time_column_defaults_to_single_timestamp_column(lake):
    t = lake.create_table("readings", IOT_SCHEMA)
    assert contract(t)["time_column"] == "time"


def test_time_column_default_finds_timestamp_column_not_named_time(lake):
    schema = pa.schema([("device_id", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))])
    t = lake.create_table("readings", schema)
    assert contract(t)["time_column"] == "ts"


def test_time_column_default_accepts_naive_timestamp(lake):
    schema = pa.schema([("ts", pa.timestamp("us")), ("v", pa.float64())])
    t = lake.create_table("readings", schema)
    assert contract(t)["time_column"] == "ts"


def test_several_timestamp_columns_without_time_column_is_value_error(lake):
    with pytest.raises(ValueError):
        lake.create_table("readings", TWO_TIMES)


def test_time_column_names_one_of_several_timestamp_columns(lake):
    t = lake.create_table("readings", TWO_TIMES, time_column="received")
    assert contract(t)["time_column"] == "received"


def test_time_column_that_does_not_exist_is_value_error(lake):
    with pytest.raises(ValueError):
        lake.create_table("readings", IOT_SCHEMA, time_column="nope")


def test_time_column_that_is_not_a_timestamp_is_value_error(lake):
    with pytest.raises(ValueError):
        lake.create_table("readings", IOT_SCHEMA, time_column="temp")


def test_rejected_create_table_leaves_no_table(lake):
    with pytest.raises(ValueError):
        lake.create_table("readings", TWO_TIMES)
    assert lake.tables() == []


# ------------------------------------------------------------------ plain tables


def test_schema_without_timestamp_is_plain_table(lake):
    t = lake.create_table("devices", PLAIN)
    assert contract(t)["time_column"] is None


@pytest.mark.parametrize(
    "option", [{"chunk": "day"}, {"retention": "90d"}, {"dedup": "last"}, {"dedup": "first"}]
)
def test_time_series_option_on_plain_table_is_value_error(lake, option):
    with pytest.raises(ValueError):
        lake.create_table("devices", PLAIN, **option)


def test_latest_on_plain_table_is_value_error(lake):
    lake.create_table("devices", PLAIN)
    with pytest.raises(ValueError):
        lake.latest("devices")


# ------------------------------------------------------------------ series key


def test_series_key_is_reported_as_list(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    assert contract(t)["series_key"] == ["device_id"]


def test_series_key_none_is_reported_as_empty_list(lake):
    t = lake.create_table("readings", IOT_SCHEMA)
    assert contract(t)["series_key"] == []


def test_series_key_keeps_column_order(lake):
    schema = IOT_SCHEMA.append(pa.field("site", pa.string()))
    t = lake.create_table("readings", schema, series_key=["site", "device_id"])
    assert contract(t)["series_key"] == ["site", "device_id"]


def test_series_key_column_that_does_not_exist_is_value_error(lake):
    with pytest.raises(ValueError):
        lake.create_table("readings", IOT_SCHEMA, series_key=["device"])


def test_series_key_with_one_missing_column_among_several_is_value_error(lake):
    with pytest.raises(ValueError):
        lake.create_table("readings", IOT_SCHEMA, series_key=["device_id", "site"])


# ------------------------------------------------------------------ chunk


def test_chunk_defaults_to_day(lake):
    t = lake.create_table("readings", IOT_SCHEMA)
    assert contract(t)["chunk"] == "day"


@pytest.mark.parametrize("chunk", ["hour", "day", "month"])
def test_chunk_accepts_hour_day_month(lake, chunk):
    t = lake.create_table("readings", IOT_SCHEMA, chunk=chunk)
    assert contract(t)["chunk"] == chunk


@pytest.mark.parametrize("chunk", ["week", "minute", "year", "", "days", "1d"])
def test_unknown_chunk_is_value_error(lake, chunk):
    with pytest.raises(ValueError):
        lake.create_table("readings", IOT_SCHEMA, chunk=chunk)


# ------------------------------------------------------------------ retention


@pytest.mark.parametrize("retention", ["90d", "36h", "15m", "2w", "365d"])
def test_retention_accepts_durations(lake, retention):
    t = lake.create_table("readings", IOT_SCHEMA, retention=retention)
    assert contract(t)["retention"] is not None


@pytest.mark.parametrize("retention", ["abc", "-1d", "10x", "", "d", "1.5.d"])
def test_bad_retention_is_value_error(lake, retention):
    with pytest.raises(ValueError):
        lake.create_table("readings", IOT_SCHEMA, retention=retention)


def test_retention_unset_is_reported_as_none(lake):
    t = lake.create_table("readings", IOT_SCHEMA)
    assert contract(t)["retention"] is None


# ------------------------------------------------------------------ dedup


@pytest.mark.parametrize("dedup", ["last", "first"])
def test_dedup_policy_is_reported(lake, dedup):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup=dedup)
    assert contract(t)["dedup"] == dedup


def test_dedup_none_and_string_none_are_same_policy(lake):
    a = lake.create_table("a", IOT_SCHEMA, dedup=None)
    b = lake.create_table("b", IOT_SCHEMA, dedup="none")
    assert contract(a)["dedup"] == contract(b)["dedup"]
    assert contract(a)["dedup"] not in ("last", "first")


@pytest.mark.parametrize("dedup", ["latest", "keep", "LAST_", "", "true"])
def test_unknown_dedup_is_value_error(lake, dedup):
    with pytest.raises(ValueError):
        lake.create_table("readings", IOT_SCHEMA, dedup=dedup)


# ------------------------------------------------------------------ properties and persistence


def test_properties_pass_through_to_delta_configuration(lake):
    props = {"owner": "team-iot", "source": "gateway fleet #3"}
    t = lake.create_table("readings", IOT_SCHEMA, properties=props)
    conf = configuration(t)
    assert {k: conf.get(k) for k in props} == props


def test_contract_is_kept_under_timelake_keys_in_delta_configuration(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    assert any(k.startswith("timelake.") for k in configuration(t))


def test_contract_survives_reopening_with_fresh_lake(lake, lake_path):
    t = lake.create_table(
        "iot.readings", IOT_SCHEMA, series_key=["device_id"], chunk="hour", dedup="first", retention="2w"
    )
    before = contract(t)
    assert contract(timelake.Lake(str(lake_path)).table("iot.readings")) == before
