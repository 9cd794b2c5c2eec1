"""Adversarial checks of the object-store cache (docs/object-stores.md, "The cache") on S3 (moto):
damaged copies, hostile option values, tiny budgets under concurrent queries, a cache folder that
cannot be written, and counters that stay consistent."""

from __future__ import annotations

import os
import stat
import threading

import pytest

import timelake
from conftest import STORE_KINDS
from helpers import IOT_SCHEMA, NO_BACKGROUND, T0, iot_series, iot_table, sql_rows

pytestmark = pytest.mark.skipif("s3" not in STORE_KINDS, reason="TIMELAKE_TEST_STORES leaves out s3")

ALL = "SELECT device_id, count(*) AS n, round(sum(temp), 6) AS s FROM t GROUP BY 1 ORDER BY 1"
ONE = ("SELECT time, temp FROM t WHERE device_id = 'b' "
       "AND time >= TIMESTAMP '2024-03-05 00:00' AND time < TIMESTAMP '2024-03-06 00:00' ORDER BY time")


@pytest.fixture
def s3_lake(s3_server, s3_bucket, tmp_path):
    options = {**s3_server.storage_options(), "timelake_cache_dir": str(tmp_path / "cache")}
    url = f"s3://{s3_bucket}/lake"
    t = timelake.Lake(url, storage_options=options).create_table(
        "t", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    for i in range(3):
        t.append(iot_table(iot_series(T0.replace(hour=i), 6)))
    return url, options


def copies(folder) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, files in os.walk(folder) for f in files
                  if f.endswith(".parquet") and "/.pins" not in d)


@pytest.mark.parametrize("damage", ["truncate", "empty", "longer"])
def test_a_copy_of_the_wrong_size_on_disk_is_fetched_again_never_served(s3_lake, damage):
    url, options = s3_lake
    lake = timelake.Lake(url, storage_options=options)
    expected_all, expected_one = sql_rows(lake, ALL), sql_rows(lake, ONE)
    found = copies(options["timelake_cache_dir"])
    assert len(found) == 3
    for path in found:
        data = open(path, "rb").read()
        with open(path, "wb") as f:
            f.write({"truncate": data[: len(data) // 2], "empty": b"", "longer": data + b"\0" * 100}[damage])
    before = lake.cache_stats()
    for reader in (lake, timelake.Lake(url, storage_options=options)):
        assert sql_rows(reader, ALL) == expected_all
        assert sql_rows(reader, ONE) == expected_one
    assert lake.cache_stats()["misses"] > before["misses"]
    assert all(os.path.getsize(p) == len(open(p, "rb").read()) for p in copies(options["timelake_cache_dir"]))


def test_a_copy_damaged_in_place_never_gives_a_wrong_answer(s3_lake):
    """Bytes of a copy changed on disk, same size (a bad disk, a stray write): a query fails or
    answers right; it never returns other values."""
    url, options = s3_lake
    lake = timelake.Lake(url, storage_options=options)
    expected = sql_rows(lake, ALL)
    for path in copies(options["timelake_cache_dir"]):
        data = bytearray(open(path, "rb").read())
        for i in range(8, len(data) // 2, 7):  # the data pages, not the footer
            data[i] ^= 0x5A
        open(path, "wb").write(bytes(data))
    for reader in (lake, timelake.Lake(url, storage_options=options)):
        try:
            got = sql_rows(reader, ALL)
        except (RuntimeError, OSError, ValueError):
            continue
        assert got == expected


@pytest.mark.parametrize("key", ["timelake_cache_disk_bytes", "timelake_cache_memory_bytes"])
@pytest.mark.parametrize("value", ["-1", "1e9", "0x10", "5 ", "١٢٣", "99999999999999999999999",
                                   "", "5.0", "NaN"])
def test_hostile_budget_values_are_value_errors_naming_the_key(s3_server, s3_bucket, key, value, tmp_path):
    options = {**s3_server.storage_options(), "timelake_cache_dir": str(tmp_path / "c"), key: value}
    with pytest.raises(ValueError, match=key):
        timelake.Lake(f"s3://{s3_bucket}/lake", storage_options=options)


@pytest.mark.parametrize("value", [" disk", "mémoire", "", "disk\0"])
def test_hostile_cache_modes_are_value_errors(s3_server, s3_bucket, value, tmp_path):
    options = {**s3_server.storage_options(), "timelake_cache_dir": str(tmp_path / "c"), "timelake_cache": value}
    with pytest.raises(ValueError, match="timelake_cache"):
        timelake.Lake(f"s3://{s3_bucket}/lake", storage_options=options)


def test_one_byte_budgets_under_concurrent_queries_still_answer_right(s3_lake):
    url, options = s3_lake
    tiny = {**options, "timelake_cache_disk_bytes": "1", "timelake_cache_memory_bytes": "1"}
    truth = sql_rows(timelake.Lake(url, storage_options={**options, "timelake_cache_dir": options["timelake_cache_dir"] + "-truth"}), ALL)
    lakes = [timelake.Lake(url, storage_options=tiny) for _ in range(2)]  # two Lakes, one folder
    errors = []

    def run(lake):
        try:
            for _ in range(6):
                assert sql_rows(lake, ALL) == truth
                assert len(sql_rows(lake, ONE)) == 18
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(lakes[i % 2],)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    stats = [lake.cache_stats() for lake in lakes]
    for s in stats:
        assert s["memory_bytes"] <= s["memory_budget"]
        assert s["misses"] + s["disk_hits"] + s["memory_hits"] >= 12 * 3
    assert sum(s["requests"] for s in stats) >= 3 and sum(s["bytes_fetched"] for s in stats) > 0


def test_counters_only_grow_and_add_up(s3_lake):
    url, options = s3_lake
    lake = timelake.Lake(url, storage_options=options)
    last = lake.cache_stats()
    for query in (ALL, ONE, ALL, ONE):
        sql_rows(lake, query)
        now = lake.cache_stats()
        for k in ("memory_hits", "disk_hits", "misses", "requests", "bytes_fetched", "bytes_served"):
            assert now[k] >= last[k], k
        # Nothing is fetched without a miss, and a miss costs at least one request.
        assert (now["requests"] > last["requests"]) == (now["misses"] > last["misses"])
        last = now


def test_an_unwritable_cache_folder_is_a_clear_error_or_a_right_answer(s3_lake, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    url, options = s3_lake
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    lake = timelake.Lake(url, storage_options={**options, "timelake_cache_dir": str(folder)})
    with pytest.raises((RuntimeError, OSError)):
        sql_rows(lake, ALL)


def test_a_cache_folder_that_is_a_file_is_a_clear_error(s3_lake, tmp_path):
    url, options = s3_lake
    (tmp_path / "file").write_text("x")
    try:
        lake = timelake.Lake(url, storage_options={**options, "timelake_cache_dir": str(tmp_path / "file")})
        sql_rows(lake, ALL)
    except (RuntimeError, OSError, ValueError) as e:
        assert str(tmp_path / "file") in str(e)
    else:
        pytest.fail("a query over a cache folder that is a file answered")


def test_a_forked_child_reads_through_the_cache(s3_lake):
    url, options = s3_lake
    lake = timelake.Lake(url, storage_options=options)
    expected = sql_rows(lake, ALL)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answers right, through the same folder
        try:
            ok = sql_rows(lake, ALL) == expected and sql_rows(lake, ONE) is not None
            os.write(w, b"1" if ok else b"0")
        except BaseException:  # noqa: BLE001
            os.write(w, b"E")
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"1"
    assert sql_rows(lake, ALL) == expected
    assert copies(options["timelake_cache_dir"])


@pytest.mark.parametrize("damage", ["truncate", "empty"])
def test_a_damaged_row_group_copy_is_fetched_again_never_served(s3_server, s3_bucket, tmp_path, damage):
    """A sparse row-group copy (`<copy>.rg-<hash>`) cut short on disk: the next selective query
    answers right (from a new copy), it neither fails for good nor reads the damaged one."""
    from test_cloud_lake import _large_day

    options = {**s3_server.storage_options(), "timelake_cache_dir": str(tmp_path / "cache")}
    url = f"s3://{s3_bucket}/lake"
    timelake.Lake(url, storage_options=options).create_table(
        "t", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND).append(_large_day())
    query = ("SELECT count(*) AS n, round(sum(temp), 6) AS s FROM t WHERE device_id = 'dev-017' "
             "AND time >= TIMESTAMP '2024-03-05 06:00' AND time < TIMESTAMP '2024-03-05 07:00'")
    lake = timelake.Lake(url, storage_options=options)
    expected = sql_rows(lake, query)
    assert expected[0]["n"] > 0
    rg = [os.path.join(d, f) for d, _, files in os.walk(tmp_path / "cache") for f in files if ".rg-" in f]
    assert len(rg) == 1, rg
    size = os.path.getsize(rg[0])
    with open(rg[0], "r+b") as f:
        f.truncate(size // 2 if damage == "truncate" else 0)
    for reader in (lake, timelake.Lake(url, storage_options=options)):
        assert sql_rows(reader, query) == expected


def test_eviction_by_one_lake_while_another_reads_the_same_folder(s3_lake):
    """Two Lakes over one folder with a 1-byte disk budget, and every copy made to look unused
    for an hour over and over (so each statement's eviction deletes all it may): pinned copies
    survive the other Lake's evictions, and every answer is right."""
    url, options = s3_lake
    truth_options = {**options, "timelake_cache_dir": options["timelake_cache_dir"] + "-truth"}
    truth = sql_rows(timelake.Lake(url, storage_options=truth_options), ALL)
    truth_one = sql_rows(timelake.Lake(url, storage_options=truth_options), ONE)
    tiny = {**options, "timelake_cache_disk_bytes": "1"}
    lakes = [timelake.Lake(url, storage_options=tiny) for _ in range(2)]
    stop = threading.Event()
    errors = []

    def age():
        import time
        while not stop.is_set():
            old = time.time() - 3600
            for p in copies(options["timelake_cache_dir"]):
                try:
                    os.utime(p, (old, old))
                except FileNotFoundError:
                    pass

    def run(lake):
        try:
            for _ in range(8):
                assert sql_rows(lake, ALL) == truth
                assert sql_rows(lake, ONE) == truth_one
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    ager = threading.Thread(target=age)
    ager.start()
    threads = [threading.Thread(target=run, args=(lakes[i % 2],)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    ager.join()
    assert not errors, errors[:3]
    # Downloads ran (each ends with an eviction pass over the aged copies, under a 1-byte budget).
    assert sum(lake.cache_stats()["misses"] for lake in lakes) >= 3
