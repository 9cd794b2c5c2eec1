"""maintain() compaction: crowded chunks become few sorted, deduplicated files; nothing a reader
sees changes except duplicates disappearing from storage."""

from __future__ import annotations

import datetime as dt
import shutil
import threading

import pyarrow as pa
import pytest

from helpers import IOT_SCHEMA, NO_BACKGROUND, T0, data_files, delta_read, iot_series, iot_table, log_actions, sorted_rows, table_dir


def _append_small_batches(t, batches: int, *, overlap: bool):
    """`batches` appends into one day; with `overlap`, each batch rewrites its predecessor's rows."""
    for b in range(batches):
        start = T0 + dt.timedelta(minutes=10 * (b if not overlap else max(b - 1, 0)))
        rows = [(ts, d, float(b)) for ts, d, _ in iot_series(start, 2)]
        t.append(iot_table(rows), batch_id=f"b{b}")


def test_compaction_merges_small_files_of_a_chunk(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    _append_small_batches(t, 12, overlap=False)
    before = sorted_rows(lake.sql("SELECT * FROM readings"))

    result = t.maintain()

    assert result["partitions_compacted"] == 1
    assert result["files_rewritten"] == 12
    assert result["files_written"] == 1
    assert result["rows_rewritten"] == len(before)
    assert result["duplicates_removed"] == 0
    assert len(data_files(table_dir(t))) == 13  # old files stay for time travel until vacuum
    assert t.info()["size"]["files"] == 1
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == before


def test_compaction_without_dedup_is_not_a_data_change(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    _append_small_batches(t, 3, overlap=False)
    t.maintain()
    actions = log_actions(table_dir(t), t.version)
    assert actions[0]["commitInfo"]["operation"] == "OPTIMIZE"
    assert all(a["remove"]["dataChange"] is False for a in actions if "remove" in a)
    assert all(a["add"]["dataChange"] is False for a in actions if "add" in a)


def test_compaction_removes_duplicates_keeping_the_last_write(lake, tmp_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    _append_small_batches(t, 6, overlap=True)
    visible = sorted_rows(lake.sql("SELECT * FROM readings"))
    stored, _ = delta_read(table_dir(t), tmp_path)
    assert stored.num_rows > len(visible)  # duplicates are on disk before compaction

    result = t.maintain()

    assert result["duplicates_removed"] == stored.num_rows - len(visible)
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == visible
    after, _ = delta_read(table_dir(t), tmp_path)
    assert sorted_rows(after) == visible  # other engines now see no duplicates either
    actions = log_actions(table_dir(t), t.version)
    assert all(a["remove"]["dataChange"] is True for a in actions if "remove" in a)


def test_compaction_keeps_the_first_write_for_dedup_first(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="first")
    t.append(iot_table([(T0, "a", 1.0)]))
    t.append(iot_table([(T0, "a", 2.0), (T0 + dt.timedelta(minutes=1), "a", 3.0)]))
    t.append(iot_table([(T0, "a", 4.0)]))
    t.maintain()
    assert lake.sql("SELECT temp FROM readings ORDER BY time").column("temp").to_pylist() == [1.0, 3.0]


def test_later_appends_still_win_over_compacted_rows(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    _append_small_batches(t, 4, overlap=True)
    t.maintain()
    t.append(iot_table([(T0, "a", 99.0)]))  # overwrites a compacted row
    temps = lake.sql(
        f"SELECT temp FROM readings WHERE device_id = 'a' AND time = TIMESTAMPTZ '{T0.isoformat()}'"
    ).column("temp").to_pylist()
    assert temps == [99.0]
    t.maintain()
    temps = lake.sql(
        f"SELECT temp FROM readings WHERE device_id = 'a' AND time = TIMESTAMPTZ '{T0.isoformat()}'"
    ).column("temp").to_pylist()
    assert temps == [99.0]


def test_second_maintain_has_nothing_to_compact(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    _append_small_batches(t, 5, overlap=False)
    t.maintain()
    version = t.version
    result = t.maintain()
    assert result["partitions_compacted"] == 0
    assert t.version == version


def test_maintain_without_compact_leaves_files_alone(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    _append_small_batches(t, 5, overlap=False)
    result = t.maintain(compact=False)
    assert result["partitions_compacted"] == 0
    assert t.info()["size"]["files"] == 5


def test_latest_is_unchanged_by_compaction(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    _append_small_batches(t, 6, overlap=True)
    before = lake.latest("readings")
    t.maintain()
    assert lake.latest("readings").equals(before)


def test_inline_maintenance_compacts_once_a_chunk_is_crowded(lake):
    # No background pass: one that ran first (after some of the small appends) would leave the
    # inline maintenance nothing to compact.
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    _append_small_batches(t, 15, overlap=False)
    result = t.append(iot_table([(T0 + dt.timedelta(days=0, hours=20), "a", 1.0)]), maintain=True)
    assert result["maintenance"]["partitions_compacted"] == 1
    assert t.info()["size"]["files"] == 1


def test_failed_inline_maintenance_is_reported_in_the_result_not_raised(lake):
    # Inline upkeep runs after the commit: its failure must neither raise (the rows are
    # committed; a retry without a batch id would double them) nor go unreported.
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    _append_small_batches(t, 15, overlap=False)
    victim = data_files(table_dir(t))[0]
    victim.write_bytes(b"PAR1 damaged")  # the compaction of its chunk cannot read it
    # What summarised the file before the damage (the last-value index, the table head) is gone
    # too, so that latest() and info() must read it.
    shutil.rmtree(table_dir(t) / "_timelake")
    result = t.append(iot_table([(T0 + dt.timedelta(days=0, hours=20), "a", 1.0)]), maintain=True)
    assert result["rows"] == 1 and result["version"] == 16
    assert "error" in result["maintenance"]
    assert victim.name in result["maintenance"]["error"]
    assert result["maintenance"]["partitions_compacted"] == 0
    # info() works on the damaged table; the index, which had to read the file, says why not.
    info = t.info()
    assert info["size"]["files"] == 16
    assert info["last_value_index"]["series"] is None
    assert victim.name in info["last_value_index"]["error"]
    with pytest.raises(RuntimeError, match=victim.name):
        lake.latest("readings")


def test_compaction_racing_appends_loses_nothing(lake, lake_path):
    import timelake

    writer = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last")
    maintainer = timelake.Lake(str(lake_path)).table("readings")
    errors = []

    def append_all():
        try:
            for b in range(40):
                rows = [(T0 + dt.timedelta(minutes=b), f"d{b % 5}", float(b))]
                writer.append(iot_table(rows), batch_id=f"r{b}")
        except Exception as e:  # reported below
            errors.append(e)

    thread = threading.Thread(target=append_all)
    thread.start()
    while thread.is_alive():
        maintainer.maintain()
    thread.join()
    maintainer.maintain()
    assert errors == []
    assert lake.sql("SELECT count(*) AS n FROM readings").column("n")[0].as_py() == 40
