"""Deduplication policies: what queries show when rows share a series key and a time."""

import pytest

from helpers import IOT_SCHEMA, T0, at, iot_table

QUERY = "SELECT device_id, time, temp FROM readings ORDER BY device_id, time, temp"


def make(lake, dedup, series_key=("device_id",)):
    return lake.create_table("readings", IOT_SCHEMA, series_key=list(series_key) if series_key else None, dedup=dedup)


def rows(lake):
    return [(r["device_id"], r["time"], r["temp"]) for r in lake.sql(QUERY).to_pylist()]


# ------------------------------------------------------------------ across appends


def test_dedup_last_keeps_later_append(lake):
    t = make(lake, "last")
    t.append(iot_table([(T0, "a", 1.0)]))
    t.append(iot_table([(T0, "a", 2.0)]))
    assert rows(lake) == [("a", T0, 2.0)]


def test_dedup_first_keeps_earlier_append(lake):
    t = make(lake, "first")
    t.append(iot_table([(T0, "a", 1.0)]))
    t.append(iot_table([(T0, "a", 2.0)]))
    assert rows(lake) == [("a", T0, 1.0)]


def test_dedup_last_keeps_latest_of_many_appends(lake):
    t = make(lake, "last")
    for v in range(5):
        t.append(iot_table([(T0, "a", float(v))]))
    assert rows(lake) == [("a", T0, 4.0)]


def test_dedup_last_replaces_only_matching_rows(lake):
    t = make(lake, "last")
    t.append(iot_table([(T0, "a", 1.0), (at(2024, 3, 5, 1), "a", 1.5), (T0, "b", 3.0)]))
    t.append(iot_table([(T0, "a", 2.0)]))
    assert rows(lake) == [("a", T0, 2.0), ("a", at(2024, 3, 5, 1), 1.5), ("b", T0, 3.0)]


def test_dedup_last_applies_per_chunk_across_many_chunks(lake):
    t = make(lake, "last")
    days = [at(2024, 3, d, 12) for d in (5, 6, 7)]
    t.append(iot_table([(d, "a", 1.0) for d in days]))
    t.append(iot_table([(d, "a", 2.0) for d in days]))
    assert rows(lake) == [("a", d, 2.0) for d in days]


# ------------------------------------------------------------------ within one batch


def test_dedup_last_within_one_batch_keeps_later_row(lake):
    make(lake, "last").append(iot_table([(T0, "a", 1.0), (T0, "b", 5.0), (T0, "a", 2.0)]))
    assert rows(lake) == [("a", T0, 2.0), ("b", T0, 5.0)]


def test_dedup_first_within_one_batch_keeps_earlier_row(lake):
    make(lake, "first").append(iot_table([(T0, "a", 1.0), (T0, "b", 5.0), (T0, "a", 2.0)]))
    assert rows(lake) == [("a", T0, 1.0), ("b", T0, 5.0)]


def test_dedup_last_within_one_batch_with_later_row_holding_smaller_value(lake):
    make(lake, "last").append(iot_table([(T0, "a", 9.0), (T0, "a", 2.0)]))
    assert rows(lake) == [("a", T0, 2.0)]


# ------------------------------------------------------------------ what is not a duplicate


@pytest.mark.parametrize("dedup", [None, "none"])
def test_dedup_none_keeps_both_rows_across_appends(lake, dedup):
    t = make(lake, dedup)
    t.append(iot_table([(T0, "a", 1.0)]))
    t.append(iot_table([(T0, "a", 2.0)]))
    assert rows(lake) == [("a", T0, 1.0), ("a", T0, 2.0)]


def test_dedup_none_keeps_both_rows_within_batch(lake):
    make(lake, None).append(iot_table([(T0, "a", 1.0), (T0, "a", 2.0)]))
    assert rows(lake) == [("a", T0, 1.0), ("a", T0, 2.0)]


def test_dedup_last_keeps_same_time_in_different_series(lake):
    t = make(lake, "last")
    t.append(iot_table([(T0, "a", 1.0)]))
    t.append(iot_table([(T0, "b", 2.0)]))
    assert rows(lake) == [("a", T0, 1.0), ("b", T0, 2.0)]


def test_dedup_without_series_key_treats_table_as_one_series(lake):
    t = make(lake, "last", series_key=None)
    t.append(iot_table([(T0, "a", 1.0)]))
    t.append(iot_table([(T0, "b", 2.0)]))
    assert rows(lake) == [("b", T0, 2.0)]


# ------------------------------------------------------------------ dedup through maintenance and latest


def test_dedup_last_holds_after_maintain(lake):
    t = make(lake, "last")
    for v in range(4):
        t.append(iot_table([(T0, "a", float(v)), (T0, "b", 10.0 + v)]))
    t.maintain()
    assert rows(lake) == [("a", T0, 3.0), ("b", T0, 13.0)]


def test_dedup_first_holds_after_maintain(lake):
    t = make(lake, "first")
    for v in range(4):
        t.append(iot_table([(T0, "a", float(v))]))
    t.maintain()
    assert rows(lake) == [("a", T0, 0.0)]


def test_dedup_last_latest_returns_later_value_for_same_time(lake):
    t = make(lake, "last")
    t.append(iot_table([(T0, "a", 1.0)]))
    t.append(iot_table([(T0, "a", 2.0)]))
    assert lake.latest("readings").column("temp").to_pylist() == [2.0]


def test_dedup_first_latest_returns_earlier_value_for_same_time(lake):
    t = make(lake, "first")
    t.append(iot_table([(T0, "a", 1.0)]))
    t.append(iot_table([(T0, "a", 2.0)]))
    assert lake.latest("readings").column("temp").to_pylist() == [1.0]


def test_dedup_last_count_matches_distinct_keys(lake):
    t = make(lake, "last")
    t.append(iot_table([(at(2024, 3, 5, h), d, 1.0) for h in range(6) for d in "abc"]))
    t.append(iot_table([(at(2024, 3, 5, h), d, 2.0) for h in range(3, 9) for d in "abc"]))
    n = lake.sql("SELECT count(*) AS n FROM readings").column("n")[0].as_py()
    assert n == 9 * 3
