"""Properties against a model: what any sequence of appends must leave visible to sql and latest."""

import datetime as dt
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import timelake
from helpers import IOT_SCHEMA, T0, iot_table

# Times fall on a coarse grid over three days so that duplicates and chunk boundaries are common.
times = st.integers(min_value=0, max_value=3 * 24 * 4 - 1).map(lambda q: T0 + dt.timedelta(minutes=15 * q))
rows = st.tuples(times, st.sampled_from(["a", "b", "c"]), st.integers(-50, 50).map(float))
appends = st.lists(st.lists(rows, min_size=0, max_size=12), min_size=1, max_size=4)

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def model(batches, dedup):
    """Rows a query must show after appending `batches` in order under `dedup`."""
    if dedup in (None, "none"):
        return sorted(r for b in batches for r in b)
    kept = {}
    for b in batches:
        for t, d, v in b:
            if dedup == "last" or (d, t) not in kept:
                kept[(d, t)] = (t, d, v)
    return sorted(kept.values())


def run(batches, dedup):
    with tempfile.TemporaryDirectory() as tmp:
        lake = timelake.Lake(tmp + "/lake")
        t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup=dedup)
        for b in batches:
            if b:
                t.append(iot_table(b))
        stored = sorted(
            (r["time"], r["device_id"], r["temp"]) for r in lake.sql("SELECT time, device_id, temp FROM readings").to_pylist()
        )
        latest = sorted((r["time"], r["device_id"], r["temp"]) for r in lake.latest("readings").to_pylist())
    return stored, latest


@SETTINGS
@given(batches=appends, dedup=st.sampled_from([None, "last", "first"]))
def test_sql_shows_exactly_the_model_rows(batches, dedup):
    stored, _ = run(batches, dedup)
    assert stored == model(batches, dedup)


@SETTINGS
@given(batches=appends, dedup=st.sampled_from(["last", "first"]))
def test_latest_is_newest_model_row_per_series(batches, dedup):
    _, latest = run(batches, dedup)
    newest = {}
    for t, d, v in model(batches, dedup):
        if d not in newest or t > newest[d][0]:
            newest[d] = (t, d, v)
    assert latest == sorted(newest.values())
