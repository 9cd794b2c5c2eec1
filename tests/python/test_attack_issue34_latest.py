"""Adversarial checks of latest() after small files started going to the final merge whole
(last_value_index.cc NewestOfFile, files of <= 1,024 rows): latest() must equal the newest row
per series that sql() shows at the same version, over random appends with duplicates (inside one
batch and across batches), out-of-order times, null values, small and large files, every dedup
policy, compaction in between and rows another engine deleted."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

import timelake
from helpers import NO_BACKGROUND, T0

SCHEMA = pa.schema([
    ("time", pa.timestamp("us", tz="UTC")),
    ("site", pa.string()),
    ("unit", pa.int32()),
    ("value", pa.float64()),
    ("note", pa.string()),
])
KEY = ["site", "unit"]


def random_batch(rng: random.Random, n: int, tag: str) -> pa.Table:
    """n rows over a few series and a small set of times (so duplicates are common), in random
    order, with nulls in the value columns; each row's note says where it came from."""
    rows = []
    for i in range(n):
        site = rng.choice(["a", "b", "c", "dd"])
        unit = rng.choice([0, 1, -7])
        t = T0 + dt.timedelta(minutes=rng.randrange(0, 40))
        value = None if rng.random() < 0.2 else rng.random()
        note = None if rng.random() < 0.1 else f"{tag}:{i}"
        rows.append((t, site, unit, value, note))
    if rng.random() < 0.3 and rows:  # the same (series, time) twice in one batch, other values
        t, site, unit, _, _ = rows[0]
        rows.append((t, site, unit, rng.random(), f"{tag}:dup"))
    return pa.table({name: [r[i] for r in rows] for i, name in enumerate(SCHEMA.names)}, schema=SCHEMA)


def newest_from_sql(lake, name: str, dedup: str):
    """{series: [candidate rows]}: the rows at the newest time of each series in sql(). With
    dedup none several rows may share it (any of them is a right answer); else exactly one."""
    rows = lake.sql(f"SELECT * FROM {name}").to_pylist()
    best: dict = {}
    for r in rows:
        k = (r["site"], r["unit"])
        if k not in best or r["time"] > best[k][0]["time"]:
            best[k] = [r]
        elif r["time"] == best[k][0]["time"]:
            best[k].append(r)
    if dedup != "none":
        for k, cands in best.items():
            assert len(cands) == 1, (k, cands)  # sql() itself deduplicates
    return best


def check_latest(lake, name: str, dedup: str, where: str) -> None:
    expected = newest_from_sql(lake, name, dedup)
    got = lake.latest(name).to_pylist()
    keys = [(r["site"], r["unit"]) for r in got]
    assert keys == sorted(keys), where
    assert len(keys) == len(set(keys)), (where, got)
    assert set(keys) == set(expected), where
    for r in got:
        cands = expected[(r["site"], r["unit"])]
        assert r in cands, (where, r, cands)


@pytest.mark.parametrize("dedup", ["none", "last", "first"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_latest_equals_newest_row_of_sql_over_random_appends(lake_path, dedup, seed):
    rng = random.Random(seed * 31 + len(dedup))
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", SCHEMA, series_key=KEY, dedup=dedup, properties=NO_BACKGROUND)
    for step in range(14):
        size = rng.choice([1, 2, 5, 30, 1023, 1024, 1025, 1500, 5000])
        t.append(random_batch(rng, size, f"{step}"))
        check_latest(lake, "t", dedup, f"step {step} size {size}")
        # A fresh Lake reads the index (and the small files) without the handle's cached answer.
        check_latest(timelake.Lake(str(lake_path)), "t", dedup, f"fresh, step {step}")
        if step in (5, 10):
            t.maintain()
            check_latest(lake, "t", dedup, f"after maintain at {step}")
            check_latest(timelake.Lake(str(lake_path)), "t", dedup, f"fresh after maintain at {step}")


@pytest.mark.parametrize("dedup", ["last", "first"])
def test_the_winner_of_a_tie_is_the_same_in_latest_and_sql_for_small_and_large_files(lake_path, dedup):
    """The same (series, time) written by batches of 1, 1,024, 1,025 and 5,000 rows: the winner is
    the one sql() shows, whichever path (whole small file or per-file reduction) read it."""
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", SCHEMA, series_key=KEY, dedup=dedup, properties=NO_BACKGROUND)
    top = T0 + dt.timedelta(hours=1)
    for n, tag in ((1024, "big1024"), (1, "one"), (1025, "big1025"), (5000, "huge"), (3, "three")):
        filler = [(T0 + dt.timedelta(seconds=i), "f", i, float(i), None) for i in range(n - 1)]
        rows = filler + [(top, "x", 1, float(n), tag)]
        t.append(pa.table({name: [r[i] for r in rows] for i, name in enumerate(SCHEMA.names)}, schema=SCHEMA))
        check_latest(lake, "t", dedup, tag)
        check_latest(timelake.Lake(str(lake_path)), "t", dedup, f"fresh {tag}")
    winner = [r for r in lake.latest("t").to_pylist() if r["site"] == "x"][0]
    assert winner["note"] == ("three" if dedup == "last" else "big1024")


def test_latest_after_another_engine_deleted_rows(lake_path):
    """deltalake's DELETE removes the file holding the newest row (a data-changing remove): the
    index is read again from the data, and latest() shows a newest row left (sql() shows the
    rows at that time; which one of them wins is checked by the next test)."""
    deltalake = pytest.importorskip("deltalake")
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", SCHEMA, series_key=KEY, dedup="last", properties=NO_BACKGROUND)
    rng = random.Random(7)
    for step in range(6):
        t.append(random_batch(rng, rng.choice([3, 40, 1100]), f"{step}"))
    check_latest(lake, "t", "last", "before delete")
    newest = max(r["time"] for r in lake.latest("t").to_pylist())
    deltalake.DeltaTable(t.location).delete(f"time >= '{newest.strftime('%Y-%m-%d %H:%M:%S')}'")
    fresh = timelake.Lake(str(lake_path))
    assert all(r["time"] < newest for r in fresh.sql("SELECT * FROM t").to_pylist())
    # "none": the candidates are every row sql() shows at the newest time (see the next test).
    check_latest(fresh, "t", "none", "fresh after delete")
    lake.table("t").refresh()
    check_latest(lake, "t", "none", "old lake after delete")


@pytest.mark.xfail(strict=True, reason="issue34-attack defect: sql() of a dedup table shows two rows with the "
                                       "same series key and time once another engine rewrote one of the files "
                                       "(the rewritten file has no timelake tags and skips read-time dedup)")
def test_sql_of_a_dedup_table_after_another_engine_rewrote_a_file_shows_no_duplicate(lake_path):
    deltalake = pytest.importorskip("deltalake")
    from helpers import IOT_SCHEMA, iot_table
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"], dedup="last", properties=NO_BACKGROUND)
    t.append(iot_table([(T0, "a", 1.0), (T0, "b", 5.0)]))
    t.append(iot_table([(T0, "a", 2.0)]))
    assert lake.sql("SELECT device_id, temp FROM t ORDER BY ALL").to_pylist() == [
        {"device_id": "a", "temp": 2.0}, {"device_id": "b", "temp": 5.0}]
    deltalake.DeltaTable(t.location).delete("device_id = 'b'")  # rewrites the first file without b
    fresh = timelake.Lake(str(lake_path))
    assert fresh.latest("t").to_pylist() == [{"time": T0, "device_id": "a", "temp": 2.0}]
    assert fresh.sql("SELECT device_id, temp FROM t ORDER BY ALL").to_pylist() == [{"device_id": "a", "temp": 2.0}]


@pytest.mark.parametrize("dedup", ["first", "last", "none"])
def test_ties_inside_one_group_committed_file_resolve_as_sql_does(lake_path, dedup):
    """Threads appending the same (series, time) at once: group commit writes their rows into
    one small file, which latest() now merges whole; the winner must be the row sql() keeps."""
    import threading

    from helpers import IOT_SCHEMA, iot_table
    for rep in range(4):
        path = lake_path / f"r{rep}"
        lake = timelake.Lake(str(path))
        t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"], dedup=dedup, properties=NO_BACKGROUND)
        barrier = threading.Barrier(6)

        def run(k):
            barrier.wait()
            for j in range(3):
                t.append(iot_table([(T0, "a", float(k * 10 + j)), (T0, "b", float(k * 10 + j))]))

        threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        shown = lake.sql("SELECT device_id, temp FROM t ORDER BY ALL").to_pylist()
        for reader in (lake, timelake.Lake(str(path))):
            got = [{"device_id": r["device_id"], "temp": r["temp"]} for r in reader.latest("t").to_pylist()]
            if dedup == "none":
                assert len(got) == 2 and all(r in shown for r in got)
            else:
                assert got == shown


@pytest.mark.parametrize("big", [False, True])
def test_a_null_series_key_is_one_series_in_latest_as_in_sql(lake_path, big):
    """Rows whose key is null form one series (as GROUP BY has it), in a small file merged whole
    and in a file of more than 1,024 rows reduced on its own."""
    from helpers import IOT_SCHEMA, iot_table
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"], dedup="last", properties=NO_BACKGROUND)
    filler = [(T0 + dt.timedelta(seconds=i), "f", float(i)) for i in range(1100 if big else 0)]
    t.append(iot_table(filler + [(T0, None, 1.0), (T0 + dt.timedelta(hours=1), None, 2.0), (T0, "a", 3.0)]))
    t.append(iot_table([(T0 + dt.timedelta(hours=1), None, 5.0), (T0 + dt.timedelta(minutes=5), None, 9.0)]))
    expected = [{"time": T0, "device_id": "a", "temp": 3.0}]
    if big:
        expected.append({"time": T0 + dt.timedelta(seconds=1099), "device_id": "f", "temp": 1099.0})
    expected.append({"time": T0 + dt.timedelta(hours=1), "device_id": None, "temp": 5.0})
    shown = lake.sql("SELECT time, device_id, temp FROM t WHERE device_id IS NULL ORDER BY time").to_pylist()
    assert shown[-1] == expected[-1]
    for reader in (lake, timelake.Lake(str(lake_path))):
        assert reader.latest("t").to_pylist() == expected
