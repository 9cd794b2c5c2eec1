"""Time travel: a query reads a table as it was at an older version or instant.

`FROM t AT (VERSION => n)` / `AT (TIMESTAMP => t)` per table reference, or `Lake.sql(...,
as_of=...)` for the whole query; delta-rs' `DeltaTable(path, version=n)` agrees row for row.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from helpers import IOT_SCHEMA, NO_BACKGROUND, T0, delta_read, iot_table, sorted_rows, sql_rows

HOUR = dt.timedelta(hours=1)


def _history(lake, name, batches, **create):
    """Creates `name`, appends each batch, and returns the sorted rows after every version."""
    t = lake.create_table(name, IOT_SCHEMA, series_key=["device_id"], **create)
    states = [[]]
    for batch in batches:
        t.append(iot_table(batch))
        states.append(sorted_rows(lake.sql(f"SELECT * FROM {name}")))
    return t, states


BATCHES = [
    [(T0, "a", 1.0), (T0 + HOUR, "b", 2.0)],
    [(T0, "a", 10.0), (T0 + 2 * HOUR, "c", 3.0)],  # re-sends (T0, a): dedup keeps the newest
    [(T0 + 3 * HOUR, "a", 4.0)],
]


@pytest.mark.parametrize("dedup", ["none", "last", "first"])
def test_every_version_reads_as_it_was_committed(lake, dedup):
    t, states = _history(lake, "readings", BATCHES, dedup=dedup, properties=NO_BACKGROUND)
    assert t.version == len(BATCHES)
    for version, rows in enumerate(states):
        assert sorted_rows(lake.sql(f"SELECT * FROM readings AT (VERSION => {version})")) == rows
        assert sorted_rows(lake.sql("SELECT * FROM readings", as_of=version)) == rows
    # Compaction and dedup rewrite the files in a new version; the old ones still read the same.
    t.maintain(retention=False, expire=False)
    assert t.version > len(BATCHES)
    for version, rows in enumerate(states):
        assert sorted_rows(lake.sql(f"SELECT * FROM readings AT (VERSION => {version})")) == rows
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == states[-1]


def test_an_older_version_joins_the_current_one(lake):
    _history(lake, "readings", BATCHES, properties=NO_BACKGROUND)
    rows = sql_rows(
        lake,
        "SELECT readings.device_id, old.n AS before, count(*) AS now "
        "FROM readings LEFT JOIN (SELECT device_id, count(*) AS n FROM readings AT (VERSION => 1) GROUP BY 1) old "
        "USING (device_id) GROUP BY ALL ORDER BY 1",
    )
    assert rows == [
        {"device_id": "a", "before": 1, "now": 3},
        {"device_id": "b", "before": 1, "now": 1},
        {"device_id": "c", "before": None, "now": 1},
    ]
    # An alias and qualified columns work on the older version too.
    assert sql_rows(lake, 'SELECT r.temp FROM "default".readings r AT (VERSION => 2) WHERE r.device_id = \'c\'') == [
        {"temp": 3.0}
    ]


def test_a_timestamp_reads_the_newest_version_committed_by_then(lake):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    instants = []
    for batch in BATCHES:
        t.append(iot_table(batch))
        time.sleep(0.05)
        instants.append(dt.datetime.now(dt.timezone.utc))
        time.sleep(0.05)
    for version, instant in enumerate(instants, start=1):
        expected = sorted_rows(lake.sql(f"SELECT * FROM readings AT (VERSION => {version})"))
        assert sorted_rows(lake.sql("SELECT * FROM readings", as_of=instant)) == expected
        naive = instant.astimezone(dt.timezone.utc).replace(tzinfo=None)  # naive means UTC
        assert sorted_rows(lake.sql("SELECT * FROM readings", as_of=naive)) == expected
        text = instant.isoformat()
        assert sorted_rows(lake.sql(f"SELECT * FROM readings AT (TIMESTAMP => TIMESTAMPTZ '{text}')")) == expected
    # An expression is evaluated once, as a constant.
    assert sql_rows(lake, "SELECT count(*) AS n FROM readings AT (TIMESTAMP => now() + INTERVAL 1 DAY)") == [{"n": 5}]


def test_a_version_not_written_is_a_key_error_naming_the_readable_ones(lake):
    _history(lake, "readings", BATCHES[:1], properties=NO_BACKGROUND)
    with pytest.raises(KeyError, match=r"version 5 of table 'default.readings' cannot be read: versions 0 to 1 can be read"):
        lake.sql("SELECT * FROM readings AT (VERSION => 5)")
    with pytest.raises(KeyError, match="the oldest that can be read"):
        lake.sql("SELECT * FROM readings", as_of=dt.datetime(2000, 1, 1))


def test_expired_versions_are_a_key_error_naming_the_ones_left(lake):
    props = dict(NO_BACKGROUND)
    props.update({"delta.checkpointInterval": "2", "delta.logRetentionDuration": "interval 0 seconds",
                  "timelake.retentionDurationCheck": "false"})
    t, states = _history(lake, "readings", BATCHES, properties=props)
    t.maintain(compact=False, retention=False, expire=True)
    info = t.info()
    oldest = t.version - info["snapshots"] + 1
    assert oldest > 0, info
    with pytest.raises(KeyError, match=rf"versions {oldest} to {t.version} can be read.*log expiry"):
        lake.sql("SELECT * FROM readings AT (VERSION => 0)")
    for version in range(oldest, len(states)):
        assert sorted_rows(lake.sql("SELECT * FROM readings", as_of=version)) == states[version]


def test_a_version_whose_files_were_vacuumed_is_a_clear_error(lake):
    props = dict(NO_BACKGROUND)
    props.update({"delta.deletedFileRetentionDuration": "interval 0 seconds",
                  "timelake.retentionDurationCheck": "false"})
    t, states = _history(lake, "readings", BATCHES, properties=props)
    t.maintain(retention=False)  # compacts the day into one file, then vacuums the old ones
    with pytest.raises(KeyError, match=r"version 1 of table 'default.readings' cannot be read: .*removed"):
        lake.sql("SELECT * FROM readings AT (VERSION => 1)")
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == states[-1]


@pytest.mark.parametrize("as_of", [True, -1, "3", 1.5])
def test_as_of_must_be_a_version_or_a_datetime(lake, as_of):
    _history(lake, "readings", BATCHES[:1])
    with pytest.raises(ValueError, match="as_of must be"):
        lake.sql("SELECT * FROM readings", as_of=as_of)


@pytest.mark.parametrize(
    "clause, message",
    [
        ("AT (VERSION => 'one')", "a version is an integer"),
        ("AT (VERSION => -2)", "a version is an integer"),
        ("AT (TIMESTAMP => 'yesterday')", "not an ISO-8601 timestamp"),
        ("AT (TIMESTAMP => 42)", "not a timestamp"),
        ("AT (VERSION => 1 / 0)", "version"),
    ],
)
def test_bad_at_clauses_are_value_errors(lake, clause, message):
    _history(lake, "readings", BATCHES[:1])
    with pytest.raises(ValueError, match=message):
        lake.sql(f"SELECT * FROM readings {clause}")


def test_a_version_number_for_several_tables_is_ambiguous(lake):
    _history(lake, "a", BATCHES[:1])
    _history(lake, "b", BATCHES[:1])
    with pytest.raises(ValueError, match="ambiguous"):
        lake.sql("SELECT * FROM a JOIN b USING (device_id)", as_of=1)
    # Per-table clauses say which version of which table.
    rows = sql_rows(lake, "SELECT count(*) AS n FROM a AT (VERSION => 1) JOIN b AT (VERSION => 0) USING (device_id)")
    assert rows == [{"n": 0}]


def test_time_travel_never_writes(lake, lake_path):
    t, _ = _history(lake, "readings", BATCHES, properties=NO_BACKGROUND)
    t.info()  # waits for the appends' upkeep (index records, checkpoints) to finish writing
    before = sorted(p.relative_to(lake_path) for p in lake_path.rglob("*") if p.is_file())
    for version in range(t.version + 1):
        lake.sql(f"SELECT * FROM readings AT (VERSION => {version})")
    after = sorted(p.relative_to(lake_path) for p in lake_path.rglob("*") if p.is_file())
    assert before == after
    assert t.version == len(BATCHES)


def test_delta_rs_reads_every_version_alike(lake, lake_path, tmp_path):
    t, _ = _history(lake, "readings", BATCHES, properties=NO_BACKGROUND)  # no dedup: delta-rs sees the same rows
    t.maintain(retention=False, expire=False)
    for version in range(t.version + 1):
        ours = sorted_rows(lake.sql("SELECT * FROM readings", as_of=version))
        theirs, meta = delta_read(lake_path / "default" / "readings", tmp_path, version=version)
        assert meta["version"] == version
        assert sorted_rows(theirs.select(["time", "device_id", "temp"])) == ours, version


def test_an_at_clause_reads_nothing_outside_the_lake(lake):
    _history(lake, "readings", BATCHES[:1])
    with pytest.raises(ValueError, match="constant expression, not a query"):
        lake.sql("SELECT * FROM readings AT (VERSION => (SELECT count(*) FROM read_csv('/etc/passwd')))")
    # A query in the value would read views of an earlier statement: refused, not answered stale.
    with pytest.raises(ValueError, match="constant expression, not a query"):
        lake.sql("SELECT count(*) FROM readings AT (VERSION => (SELECT count(*) FROM readings))")


@pytest.mark.parametrize("version", ["99999999999999999999", "9223372036854775808"])
def test_a_version_beyond_int64_is_a_value_error(lake, version):
    _history(lake, "readings", BATCHES[:1])
    with pytest.raises(ValueError, match="a version is an integer from 0 to"):
        lake.sql(f"SELECT * FROM readings AT (VERSION => {version})")
    with pytest.raises(ValueError, match="as_of must be a version from 0 to"):
        lake.sql("SELECT * FROM readings", as_of=int(version))


def test_a_cte_named_like_a_table_stays_the_cte_under_as_of(lake):
    _history(lake, "readings", BATCHES, properties=NO_BACKGROUND)
    assert sql_rows(lake, "WITH readings AS (SELECT 42 AS temp) SELECT * FROM readings", as_of=1) == [{"temp": 42}]
    # Inside its own body the name is the lake table, which keeps its AT clause.
    rows = sql_rows(lake, "WITH readings AS (SELECT * FROM readings AT (VERSION => 1)) "
                          "SELECT count(*) AS n FROM readings", as_of=3)
    assert rows == [{"n": 2}]
    # A CTE shadowing another table does not make as_of=<version> ambiguous.
    _history(lake, "other", BATCHES[:1])
    rows = sql_rows(lake, "WITH other AS (SELECT 1 AS k) SELECT count(*) AS n FROM readings, other", as_of=1)
    assert rows == [{"n": 2}]
