"""The cache of an object-store lake's data-file reads (docs/object-stores.md, "The cache"), on
S3 (moto), with every request counted by a proxy in front of the server (fault_proxy.py,
`seen()`): a repeated query sends no request for data, `Lake.cache_stats()` says what the cache
did, and the cache never answers with bytes of an object that changed (a table dropped and
recreated with other bytes at a path the cache holds; a log head overwritten)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

import timelake
from conftest import STORE_KINDS
from helpers import IOT_SCHEMA, NO_BACKGROUND, T0, iot_series, iot_table, sql_rows

pytestmark = pytest.mark.skipif("s3" not in STORE_KINDS, reason="TIMELAKE_TEST_STORES leaves out s3")

ONE_SERIES = ("SELECT time, temp FROM t WHERE device_id = 'b' "
              "AND time >= TIMESTAMP '2024-03-05 00:00' AND time < TIMESTAMP '2024-03-06 00:00' ORDER BY time")


def kinds(seen) -> dict:
    """Requests by what they are for: 'data' (a data file), 'log' (_delta_log/), 'head' (the
    table head, _timelake/head), 'list', 'other'."""
    out: dict = {}
    for method, target in seen:
        path = target.split("?", 1)[0]
        if "list-type=" in target or (method == "GET" and path.count("/") <= 1):
            kind = "list"
        elif "/_delta_log/" in path:
            kind = "log"
        elif path.endswith("/_timelake/head"):
            kind = "head"
        elif "/data/" in path and method in ("GET", "HEAD"):
            kind = "data"
        else:
            kind = "other"
        out[kind] = out.get(kind, 0) + 1
    return out


@pytest.fixture
def s3_via_proxy(s3_server, s3_bucket, fault_proxy, tmp_path):
    """(url, storage_options) of a lake reached through `fault_proxy`, whose cache lives in a
    folder of this test's own."""
    options = s3_server.storage_options(fault_proxy.endpoint)
    options["timelake_cache_dir"] = str(tmp_path / "cache")
    return f"s3://{s3_bucket}/lake", options


def keys_under(s3_server, bucket: str, prefix: str) -> list[str]:
    client = s3_server.client()
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_a_repeated_query_sends_no_request_for_data(s3_via_proxy, fault_proxy):
    url, options = s3_via_proxy
    writer = timelake.Lake(url, storage_options=options)
    t = writer.create_table("t", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    for i in range(3):
        t.append(iot_table(iot_series(T0.replace(hour=i), 6)))
    lake = timelake.Lake(url, storage_options=options)
    assert lake.cache_stats()["misses"] == 0
    first = sql_rows(lake, ONE_SERIES)
    assert len(first) == 18
    after_first = lake.cache_stats()
    assert after_first["misses"] > 0 and after_first["requests"] > 0 and after_first["bytes_fetched"] > 0
    for query in (ONE_SERIES, "SELECT device_id, count(*) AS n, max(temp) AS hi FROM t GROUP BY 1 ORDER BY 1"):
        expected = sql_rows(lake, query)
        fault_proxy.reset()
        assert sql_rows(lake, query) == expected
        assert kinds(fault_proxy.seen()).get("data", 0) == 0, fault_proxy.seen()
    stats = lake.cache_stats()
    assert stats["misses"] == after_first["misses"]  # the aggregate read the same three files
    assert stats["requests"] == after_first["requests"]
    assert stats["bytes_fetched"] == after_first["bytes_fetched"]
    assert stats["disk_hits"] >= after_first["disk_hits"] + 3
    assert stats["bytes_served"] > after_first["bytes_served"]


def test_another_lake_of_the_same_cache_folder_reads_the_copies(s3_via_proxy, fault_proxy):
    url, options = s3_via_proxy
    t = timelake.Lake(url, storage_options=options).create_table("t", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(T0, 6)))
    assert len(sql_rows(timelake.Lake(url, storage_options=options), ONE_SERIES)) == 6
    fault_proxy.reset()
    again = timelake.Lake(url, storage_options=options)
    assert len(sql_rows(again, ONE_SERIES)) == 6
    assert kinds(fault_proxy.seen()).get("data", 0) == 0
    stats = again.cache_stats()
    assert stats["misses"] == 0 and stats["disk_hits"] == 1 and stats["bytes_fetched"] == 0


def test_a_selective_query_over_a_large_file_finds_its_footer_in_memory_the_second_time(s3_server, s3_via_proxy,
                                                                                          fault_proxy):
    from test_cloud_lake import _large_day  # one day of 40 series: a file of several row groups

    url, options = s3_via_proxy
    # Written straight to the server: the proxy forwards large uploads slowly.
    timelake.Lake(url, storage_options=s3_server.storage_options()).create_table(
        "t", IOT_SCHEMA, series_key=["device_id"]).append(_large_day())
    lake = timelake.Lake(url, storage_options=options)
    query = ("SELECT count(*) AS n, max(temp) AS hi FROM t WHERE device_id = 'dev-017' "
             "AND time >= TIMESTAMP '2024-03-05 06:00' AND time < TIMESTAMP '2024-03-05 07:00'")
    expected = sql_rows(lake, query)
    cold = lake.cache_stats()
    assert cold["misses"] == 2 and cold["memory_bytes"] > 0  # the footer, the row-group copy
    fault_proxy.reset()
    assert sql_rows(lake, query) == expected
    assert kinds(fault_proxy.seen()).get("data", 0) == 0
    warm = lake.cache_stats()
    assert warm["memory_hits"] == cold["memory_hits"] + 1 and warm["disk_hits"] == cold["disk_hits"] + 1
    assert warm["misses"] == cold["misses"] and warm["bytes_fetched"] == cold["bytes_fetched"]
    # Without a memory tier the footer comes from its disk copy: the same answer, no request.
    fault_proxy.reset()
    bare = timelake.Lake(url, storage_options={**options, "timelake_cache_memory_bytes": "0"})
    assert sql_rows(bare, query) == expected
    assert kinds(fault_proxy.seen()).get("data", 0) == 0
    stats = bare.cache_stats()
    assert stats["memory_hits"] == 0 and stats["disk_hits"] == 2 and stats["memory_bytes"] == 0


def _only_data_file(s3_server, bucket: str) -> str:
    keys = [k for k in keys_under(s3_server, bucket, "lake/default/t/data/") if k.endswith(".parquet")]
    assert len(keys) == 1, keys
    return keys[0]


def _add_action(s3_server, bucket: str, version: int) -> dict:
    body = s3_server.client().get_object(Bucket=bucket, Key=f"lake/default/t/_delta_log/{version:020d}.json")
    for line in body["Body"].read().decode().splitlines():
        action = json.loads(line)
        if "add" in action:
            return action["add"]
    raise AssertionError(f"no add action in version {version}")


@pytest.mark.parametrize("reader", ["same_lake", "new_lake"])
def test_other_bytes_of_the_same_size_at_a_cached_path_are_never_served(s3_server, s3_bucket, s3_via_proxy,
                                                                          reader):
    """A table dropped and recreated, then another writer (as Spark could) puts other bytes of
    the same size at the path of a data file the cache copied, and commits an add of that path:
    queries read the new bytes, from the Lake that cached the old ones and from a new Lake over
    the same cache folder."""
    url, options = s3_via_proxy
    client = s3_server.client()
    lake = timelake.Lake(url, storage_options=options)
    lake.create_table("t", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND).append(
        iot_table([(T0, "b", 1.0)]))
    assert sql_rows(lake, ONE_SERIES) == [{"time": T0, "temp": 1.0}]
    assert sql_rows(lake, "SELECT sum(temp) AS s FROM t") == [{"s": 1.0}]
    old_key = _only_data_file(s3_server, s3_bucket)
    old_size = client.head_object(Bucket=s3_bucket, Key=old_key)["ContentLength"]

    lake.drop_table("t")
    lake.create_table("t", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND).append(
        iot_table([(T0, "b", 2.0)]))
    new_key = _only_data_file(s3_server, s3_bucket)
    new_bytes = client.get_object(Bucket=s3_bucket, Key=new_key)["Body"].read()
    assert len(new_bytes) == old_size, "the test needs two files of one size"
    # The other writer: the new bytes at the old path, and a commit that swaps the files.
    client.put_object(Bucket=s3_bucket, Key=old_key, Body=new_bytes)
    add = _add_action(s3_server, s3_bucket, 1)
    now = int(time.time() * 1000)
    moved = dict(add, path=old_key.split("lake/default/t/", 1)[1], modificationTime=now)
    commit = [{"remove": {"path": add["path"], "deletionTimestamp": now, "dataChange": True}},
              {"add": moved}]
    client.put_object(Bucket=s3_bucket, Key=f"lake/default/t/_delta_log/{2:020d}.json",
                      Body="\n".join(json.dumps(a) for a in commit).encode())

    query_lake = lake if reader == "same_lake" else timelake.Lake(url, storage_options=options)
    assert sql_rows(query_lake, "SELECT sum(temp) AS s FROM t") == [{"s": 2.0}]
    assert sql_rows(query_lake, ONE_SERIES) == [{"time": T0, "temp": 2.0}]


def test_an_overwritten_log_head_is_read_afresh(s3_server, s3_bucket, s3_via_proxy, tmp_path):
    """Another process drops the table and makes a new one of the same name: the new log's head
    (_delta_log/…1.json) overwrites the old one's path. A Lake that read the old table answers
    from the new one, and its cache holds no log object."""
    url, options = s3_via_proxy
    lake = timelake.Lake(url, storage_options=options)
    lake.create_table("t", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND).append(
        iot_table([(T0, "b", 1.0)]))
    assert sql_rows(lake, ONE_SERIES) == [{"time": T0, "temp": 1.0}]
    head = "lake/default/t/_delta_log/00000000000000000001.json"
    old_head = s3_server.client().get_object(Bucket=s3_bucket, Key=head)["Body"].read()

    other = timelake.Lake(url, storage_options=options)
    other.drop_table("t")
    other.create_table("t", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND).append(
        iot_table([(T0, "b", 5.0), (T0.replace(hour=1), "b", 6.0)]))
    assert s3_server.client().get_object(Bucket=s3_bucket, Key=head)["Body"].read() != old_head

    assert sql_rows(lake, ONE_SERIES) == [{"time": T0, "temp": 5.0}, {"time": T0.replace(hour=1), "temp": 6.0}]
    assert sql_rows(lake, "SELECT count(*) AS n FROM t") == [{"n": 2}]
    cached = [os.path.join(d, f) for d, _, files in os.walk(tmp_path / "cache") for f in files]
    assert cached and not [p for p in cached if "_delta_log" in p or "_last_checkpoint" in p]


def test_a_table_of_many_commits_opens_and_answers_then_repeats_without_data_requests(s3_via_proxy, fault_proxy):
    """Request counts of the issue's S3 row, at a test's scale (the bench's is 1,000 commits)."""
    url, options = s3_via_proxy
    t = timelake.Lake(url, storage_options=options).create_table(
        "t", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    commits = 60
    for i in range(commits):
        t.append(iot_table([(T0.replace(hour=i % 24, minute=i // 24), "abcd"[i % 4], float(i))]))
    t.info()  # waits for the writer's post-commit checkpoint, which would be counted below
    fault_proxy.reset()
    lake = timelake.Lake(url, storage_options=options)
    rows = sql_rows(lake, ONE_SERIES)
    assert sorted(r["temp"] for r in rows) == sorted(float(i) for i in range(1, commits, 4))
    first = kinds(fault_proxy.seen())
    # A one-row file per commit; the series' files only are read (its 15 of 60), each once.
    assert 0 < first["data"] <= commits // 4
    # Opening reads the table head (one GET), then at most the head's commit and the next
    # version (when the head is older than the version check interval), not the log.
    assert first.get("head", 0) == 1 and first.get("log", 0) <= 2, first
    fault_proxy.reset()
    assert sql_rows(lake, ONE_SERIES) == rows
    repeat = kinds(fault_proxy.seen())
    assert repeat.get("data", 0) == 0, repeat
    assert lake.cache_stats()["disk_hits"] >= commits // 4


def test_concurrent_queries_share_one_cache_and_its_counters(s3_via_proxy):
    url, options = s3_via_proxy
    t = timelake.Lake(url, storage_options=options).create_table("t", IOT_SCHEMA, series_key=["device_id"])
    for i in range(4):
        t.append(iot_table(iot_series(T0.replace(hour=i), 3)))
    lake = timelake.Lake(url, storage_options=options)
    expected = sql_rows(lake, ONE_SERIES)
    before = lake.cache_stats()
    errors = []

    def run():
        try:
            for _ in range(5):
                assert sql_rows(lake, ONE_SERIES) == expected
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    after = lake.cache_stats()
    # 20 queries of 4 files each, every one answered from disk: no lookup lost or doubled.
    assert after["disk_hits"] - before["disk_hits"] == 80
    assert after["misses"] == before["misses"] and after["requests"] == before["requests"]


def test_dropping_handles_lets_other_python_threads_run_while_their_upkeep_finishes(s3_via_proxy, fault_proxy,
                                                                                  s3_server):
    """A handle going away waits for its queued upkeep (checkpoint, index record, head: PUTs to
    the store). It must wait without the GIL: here the store is reached through a proxy served
    by this process's own Python threads, which cannot answer while the GIL is held. The proxy
    holds each PUT's reply 0.5 s; a client gives up on a request after 10 s and retries it. With
    the GIL held for the wait, the checkpoint's PUT would time out and be sent again."""
    import gc
    url, options = s3_via_proxy
    options = {**options, "timeout": "10s"}
    lake = timelake.Lake(url, storage_options=options)
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    for i in range(9):
        t.append(iot_table(iot_series(T0.replace(hour=i), 2)))
    t.info()  # the upkeep of these appends is done
    fault_proxy.add_rule("delay", count=None, method="PUT", delay_s=0.5)
    t.append(iot_table(iot_series(T0.replace(hour=10), 2)))  # its upkeep writes checkpoint 10
    del t, lake
    gc.collect()
    # The drop waited for the upkeep: the checkpoint is on the server, sent once.
    bucket = url.split("/")[2]
    checkpoint = f"lake/default/t/_delta_log/{10:020d}.checkpoint.parquet"
    assert checkpoint in keys_under(s3_server, bucket, "lake/")
    puts = [target for method, target in fault_proxy.seen() if method == "PUT" and checkpoint in target]
    assert len(puts) == 1, puts
    fault_proxy.clear_rules()
    reader = timelake.Lake(url, storage_options=options)
    assert reader.table("t").version == 10
    assert len(sql_rows(reader, "SELECT * FROM t")) == 10 * len(iot_series(T0, 2))


# ------------------------------------------------------------------ options

def test_cache_options_are_checked(s3_server, s3_bucket, tmp_path):
    url = f"s3://{s3_bucket}/lake"
    base = s3_server.storage_options()
    for bad, word in [({"timelake_cache": "off"}, "cannot be off"), ({"timelake_cache": "yes"}, "disk or memory"),
                      ({"timelake_cache_memory_bytes": "64MiB"}, "whole number"),
                      ({"timelake_cache_disk_bytes": "0"}, "at least 1"),
                      ({"timelake_cache_sizes": "1"}, "unknown storage option"),
                      ({"timelake_cache": "memory", "timelake_cache_dir": str(tmp_path)}, "contradict")]:
        with pytest.raises(ValueError, match=word):
            timelake.Lake(url, storage_options={**base, **bad})
    with pytest.raises(ValueError, match="local lake"):
        timelake.Lake(tmp_path / "local", storage_options={"timelake_cache": "disk"})
    assert timelake.Lake(tmp_path / "local").cache_stats() is None
    lake = timelake.Lake(url, storage_options={**base, "timelake_cache_memory_bytes": "1000",
                                               "timelake_cache_disk_bytes": "5000000"})
    stats = lake.cache_stats()
    assert stats["memory_budget"] == 1000 and stats["disk_budget"] == 5000000
    assert set(stats) >= {"memory_hits", "disk_hits", "misses", "bytes_fetched", "requests", "bytes_served"}


def test_a_memory_cache_keeps_nothing_after_the_lake(s3_server, s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("TIMELAKE_CACHE_DIR", str(tmp_path / "default-cache"))
    url = f"s3://{s3_bucket}/lake"
    options = {**s3_server.storage_options(), "timelake_cache": "memory"}
    lake = timelake.Lake(url, storage_options=options)
    lake.create_table("t", IOT_SCHEMA, series_key=["device_id"]).append(iot_table(iot_series(T0, 6)))
    assert len(sql_rows(lake, ONE_SERIES)) == 6
    assert len(sql_rows(lake, ONE_SERIES)) == 6
    assert sql_rows(lake, "SELECT count(*) AS n FROM t") == [{"n": 18}]  # DuckDB reads the copies too
    stats = lake.cache_stats()
    assert stats["misses"] == 1 and stats["disk_hits"] == 2
    folder = lake._core.cache_directory
    assert os.path.isdir(folder) and not (tmp_path / "default-cache").exists()
    del lake
    import gc

    gc.collect()
    assert not os.path.exists(folder)
