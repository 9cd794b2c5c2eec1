"""Table properties timelake acts on are checked at create_table: a bad value is a ValueError
naming the key and what it expects, and nothing is created. A deleted-file retention under 7 days
(which would let maintain() delete files a running reader or writer needs) is refused unless
`timelake.retentionDurationCheck` is "false"."""

from __future__ import annotations

import datetime as dt
import json

import pytest

import timelake
from helpers import IOT_SCHEMA, T0, data_files, iot_series, iot_table, log_path, table_dir

DURATION_KEYS = [
    "delta.deletedFileRetentionDuration",
    "delta.logRetentionDuration",
    "delta.setTransactionRetentionDuration",
]


@pytest.mark.parametrize("value", ["interval 0 seconds", "interval 6 days", "interval 1 hour"])
def test_deleted_file_retention_under_seven_days_is_refused(lake, value):
    with pytest.raises(ValueError, match="delta.deletedFileRetentionDuration") as info:
        lake.create_table("readings", IOT_SCHEMA, properties={"delta.deletedFileRetentionDuration": value})
    assert "7 days" in str(info.value) and "timelake.retentionDurationCheck" in str(info.value)
    assert lake.tables() == []


def test_seven_days_or_more_is_accepted(lake):
    t = lake.create_table("readings", IOT_SCHEMA, properties={"delta.deletedFileRetentionDuration": "interval 1 week"})
    assert t.version == 0


def test_a_short_retention_is_accepted_when_the_check_is_turned_off(lake):
    props = {"delta.deletedFileRetentionDuration": "interval 0 seconds", "timelake.retentionDurationCheck": "false"}
    assert lake.create_table("readings", IOT_SCHEMA, properties=props).version == 0


@pytest.mark.parametrize("key", DURATION_KEYS)
@pytest.mark.parametrize("value", ["7 days", "interval 7", "interval 1 month", "interval -1 days", "INTERVAL 7 DAYS", "7d", ""])
def test_durations_must_be_delta_intervals(lake, key, value):
    with pytest.raises(ValueError, match=key) as info:
        lake.create_table("readings", IOT_SCHEMA, properties={key: value, "timelake.retentionDurationCheck": "false"})
    assert "interval <n> <unit>" in str(info.value)
    assert lake.tables() == []


@pytest.mark.parametrize(
    "key,value",
    [
        ("delta.checkpointInterval", "0"),
        ("delta.checkpointInterval", "ten"),
        ("timelake.targetFileSize", "128MB"),
        ("timelake.autoMaintain", "yes"),
        ("timelake.retentionDurationCheck", "off"),
        ("delta.appendOnly", "1"),
    ],
)
def test_other_interpreted_properties_need_valid_values(lake, key, value):
    with pytest.raises(ValueError, match=key):
        lake.create_table("readings", IOT_SCHEMA, properties={key: value})


@pytest.mark.parametrize(
    "key,value",
    [
        ("delta.columnMapping.mode", "name"),
        ("delta.enableDeletionVectors", "true"),
        ("delta.enableChangeDataFeed", "true"),
        ("delta.feature.v2Checkpoint", "supported"),
    ],
)
def test_properties_that_switch_on_unimplemented_features_are_refused(lake, key, value):
    with pytest.raises(ValueError, match=key):
        lake.create_table("readings", IOT_SCHEMA, properties={key: value})
    assert lake.tables() == []


def test_append_only_with_retention_is_refused(lake):
    with pytest.raises(ValueError, match="delta.appendOnly"):
        lake.create_table("readings", IOT_SCHEMA, retention="30d", properties={"delta.appendOnly": "true"})


def test_maintain_keeps_removed_files_for_seven_days_even_if_an_old_table_says_less(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    # A table from before this check (or another engine) with a zero retention and no override.
    commit0 = log_path(table_dir(t), 0)
    actions = [json.loads(line) for line in commit0.read_text().splitlines()]
    for a in actions:
        if "metaData" in a:
            a["metaData"]["configuration"]["delta.deletedFileRetentionDuration"] = "interval 0 seconds"
    commit0.write_text("".join(json.dumps(a) + "\n" for a in actions))
    t = timelake.Lake(str(lake_path)).table("readings")
    for i in range(4):
        t.append(iot_table(iot_series(T0 + dt.timedelta(minutes=i), 1, devices=(f"d{i}",))))
    t.maintain(expire=False)  # compacts the 4 files into 1: 4 removed
    t.maintain()
    assert len(data_files(table_dir(t))) == 5  # the removed files stay for 7 days
