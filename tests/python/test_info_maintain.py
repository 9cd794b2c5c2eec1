"""Table.info and Table.maintain."""

import datetime as dt

import pytest

from helpers import IOT_SCHEMA, T0, data_files, iot_series, iot_table, sorted_rows, table_dir

MAINTAIN_KEYS = {
    "partitions_compacted",
    "files_rewritten",
    "files_written",
    "rows_rewritten",
    "duplicates_removed",
    "partitions_dropped",
    "snapshots_expired",
    "objects_deleted",
    "seconds",
}


def three_appends(t):
    """Three appends over two days and three series: 2*3 + 3*3 + 1*3 rows."""
    t.append(iot_table(iot_series(T0, 2)))
    t.append(iot_table(iot_series(T0 + dt.timedelta(days=1), 3)))
    t.append(iot_table(iot_series(T0 + dt.timedelta(hours=5), 1)))
    return 18


# ------------------------------------------------------------------ info


def test_info_has_seed_sections(readings):
    assert {"contract", "size", "snapshots", "manifests", "last_value_index"} <= set(readings.info())


def test_info_contract_has_time_column_series_key_chunk_dedup_retention(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], chunk="hour", dedup="last", retention="90d")
    c = t.info()["contract"]
    assert (c["time_column"], c["series_key"], c["chunk"], c["dedup"]) == ("time", ["device_id"], "hour", "last")
    assert c["retention"] is not None


def test_info_size_of_new_table_is_zero(readings):
    assert readings.info()["size"] == {"rows": 0, "files": 0, "bytes": 0}


def test_info_size_counts_rows(readings):
    n = three_appends(readings)
    assert readings.info()["size"]["rows"] == n


def test_info_size_counts_files_on_disk(readings):
    three_appends(readings)
    assert readings.info()["size"]["files"] == len(data_files(table_dir(readings)))


def test_info_size_counts_bytes_on_disk(readings):
    three_appends(readings)
    assert readings.info()["size"]["bytes"] == sum(p.stat().st_size for p in data_files(table_dir(readings)))


def test_info_snapshots_counts_readable_versions(readings):
    three_appends(readings)
    assert readings.info()["snapshots"] == 4


def test_info_manifests_without_checkpoint_counts_every_commit(readings):
    three_appends(readings)
    assert readings.info()["manifests"] == 4


def test_info_manifests_at_checkpoint_is_one(readings):
    for i in range(10):
        readings.append(iot_table([(T0 + dt.timedelta(minutes=i), "a", float(i))]))
    assert readings.version == 10
    assert readings.info()["manifests"] == 1


def test_info_manifests_counts_checkpoint_and_later_commits(readings):
    for i in range(12):
        readings.append(iot_table([(T0 + dt.timedelta(minutes=i), "a", float(i))]))
    assert readings.info()["manifests"] == 3


def test_info_last_value_index_has_series_version_bytes(readings):
    assert set(readings.info()["last_value_index"]) == {"series", "version", "bytes"}


def test_info_last_value_index_counts_series_and_covers_current_version(readings):
    three_appends(readings)
    lvi = readings.info()["last_value_index"]
    assert (lvi["series"], lvi["version"]) == (3, readings.version)
    # Small appends get no index record (their files are read instead): nothing to count yet.
    assert lvi["bytes"] == 0
    readings.maintain()  # folds the index into a base
    lvi = readings.info()["last_value_index"]
    assert (lvi["series"], lvi["version"]) == (3, readings.version)
    assert lvi["bytes"] > 0


def test_info_of_fresh_handle_matches_writer(lake, readings):
    three_appends(readings)
    assert lake.table("readings").info()["size"] == readings.info()["size"]


# ------------------------------------------------------------------ maintain


def test_maintain_returns_exactly_seed_keys(readings):
    three_appends(readings)
    assert set(readings.maintain()) == MAINTAIN_KEYS


@pytest.mark.parametrize(
    "flags", [{"compact": False}, {"retention": False}, {"expire": False}, {"compact": False, "retention": False, "expire": False}]
)
def test_maintain_with_steps_disabled_returns_seed_keys(readings, flags):
    three_appends(readings)
    assert set(readings.maintain(**flags)) == MAINTAIN_KEYS


def test_maintain_counts_are_non_negative_integers(readings):
    three_appends(readings)
    result = readings.maintain()
    counts = {k: v for k, v in result.items() if k != "seconds"}
    assert all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()), counts


def test_maintain_seconds_is_non_negative_number(readings):
    three_appends(readings)
    seconds = readings.maintain()["seconds"]
    assert isinstance(seconds, (int, float)) and seconds >= 0


def test_maintain_keeps_every_row(lake, readings):
    three_appends(readings)
    before = sorted_rows(lake.sql("SELECT * FROM readings"))
    readings.maintain()
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == before


def test_maintain_keeps_latest(lake, readings):
    three_appends(readings)
    before = sorted_rows(lake.latest("readings"))
    readings.maintain()
    assert sorted_rows(lake.latest("readings")) == before


def test_maintain_keeps_size_rows(readings):
    n = three_appends(readings)
    readings.maintain()
    assert readings.info()["size"]["rows"] == n


def test_maintain_of_empty_table_changes_nothing(readings):
    readings.maintain()
    assert readings.info()["size"] == {"rows": 0, "files": 0, "bytes": 0}


def test_maintain_drops_chunks_older_than_retention(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], retention="30d")
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    t.append(iot_table([(now - dt.timedelta(days=400), "a", 1.0), (now - dt.timedelta(minutes=5), "a", 2.0)]))
    t.maintain()
    assert lake.sql("SELECT temp FROM readings").to_pylist() == [{"temp": 2.0}]
