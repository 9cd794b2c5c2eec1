"""The table head on S3 (moto): one request to open a table and answer latest(), the freshness
rule (version_check_interval), and heads that are stale, raced, damaged or of a dropped table.

docs/object-stores.md, "The table head", says what is promised; these tests hold it to that.
Requests are counted at a FaultProxy in front of moto (a pass-through rule logs every request).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import timelake
from helpers import IOT_SCHEMA, NO_BACKGROUND, T0, iot_series, iot_table, sql_rows

pytestmark = pytest.mark.skipif(
    "s3" not in os.environ.get("TIMELAKE_TEST_STORES", "local,s3").split(","),
    reason="needs the S3 emulator (TIMELAKE_TEST_STORES)",
)

HEAD_KEY = "lake/default/readings/_timelake/head"
LONG = "60s"  # an interval no test outlasts: a head written in it is trusted
SHORT_S = 1.0  # the default interval
ROOT = Path(__file__).resolve().parents[2]


def requests_of(proxy, action) -> list[tuple[str, str]]:
    """The (method, path) of every request `action` sends through `proxy`."""
    proxy.reset()
    proxy.add_rule("delay", count=None, delay_s=0)  # forwards at once, and logs
    action()
    log = [(e["method"], e["target"].split("?")[0]) for e in proxy.stats()["log"]]
    proxy.reset()
    return log


def newest_per_device(tables: list[pa.Table]) -> list[dict]:
    """latest() computed from the raw rows (dedup off: the last written row of the newest time)."""
    newest: dict = {}
    for t in tables:
        for row in t.to_pylist():
            old = newest.get(row["device_id"])
            if old is None or row["time"] >= old["time"]:
                newest[row["device_id"]] = row
    return sorted(newest.values(), key=lambda r: r["device_id"])


def latest_rows(lake) -> list[dict]:
    return sorted(lake.latest("readings").to_pylist(), key=lambda r: r["device_id"])


def batch(i: int) -> pa.Table:
    return iot_table(iot_series(T0 + dt.timedelta(hours=i), 2, devices=("a", "b", f"d{i % 4}"), base=float(i)))


def head_header(client, bucket: str) -> dict:
    body = client.get_object(Bucket=bucket, Key=HEAD_KEY)["Body"].read()
    assert body.startswith(b"TLHEAD1\n")
    return json.loads(body.split(b"\n")[1])


def rewrite_head(body: bytes, **changes) -> bytes:
    """A head with header fields changed and a valid checksum (a forged head)."""
    lines = body[:-64].split(b"\n", 2)
    header = json.loads(lines[1])
    header.update(changes)
    out = lines[0] + b"\n" + json.dumps(header).encode() + b"\n" + lines[2]
    return out + hashlib.sha256(out).hexdigest().encode()


@pytest.fixture
def s3(s3_server, s3_bucket, fault_proxy):
    """(url, options through the proxy, options straight to moto, proxy, boto client, bucket)."""
    url = f"s3://{s3_bucket}/lake"
    return (url, s3_server.storage_options(fault_proxy.endpoint), s3_server.storage_options(),
            fault_proxy, s3_server.client(), s3_bucket)


def written_table(url: str, options: dict, n: int) -> tuple[timelake.Lake, timelake.Table, list]:
    lake = timelake.Lake(url, storage_options=options)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    batches = [batch(i) for i in range(n)]
    for b in batches:
        t.append(b)
    t.info()  # waits for the upkeep that writes the head
    return lake, t, batches


def test_open_and_latest_take_one_request_and_match_a_log_open(s3):
    url, via_proxy, direct, proxy, client, bucket = s3
    writer, t, batches = written_table(url, direct, 14)
    assert head_header(client, bucket)["version"] == t.version

    reader = timelake.Lake(url, storage_options=dict(via_proxy, version_check_interval=LONG))
    got: dict = {}
    sent = requests_of(proxy, lambda: got.update(rows=latest_rows(reader)))
    assert sent == [("GET", f"/{bucket}/{HEAD_KEY}")], sent
    assert got["rows"] == newest_per_device(batches)
    # The same answers as a lake that opens from the log (interval 0 trusts no head alone).
    from_log = timelake.Lake(url, storage_options=dict(direct, version_check_interval="0"))
    assert latest_rows(from_log) == got["rows"]
    assert reader.table("readings").version == from_log.table("readings").version == t.version
    one_series = "SELECT time, temp FROM readings WHERE device_id = 'b' ORDER BY time"
    assert sql_rows(reader, one_series) == sql_rows(from_log, one_series)
    head_info = reader.table("readings").info()
    log_info = from_log.table("readings").info()
    assert head_info == log_info
    # A repeated latest() within the interval asks nothing.
    assert requests_of(proxy, lambda: latest_rows(reader)) == []


def test_a_head_older_than_the_interval_is_checked_against_the_log(s3):
    url, via_proxy, direct, proxy, client, bucket = s3
    _, t, batches = written_table(url, direct, 5)
    time.sleep(SHORT_S + 1.1)
    reader = timelake.Lake(url, storage_options=via_proxy)
    got: dict = {}
    sent = requests_of(proxy, lambda: got.update(rows=latest_rows(reader)))
    assert sent == [
        ("GET", f"/{bucket}/{HEAD_KEY}"),
        # One listing of the log from the head's version: its commit is still there with the tag
        # the head names (the same object), and nothing came after.
        ("GET", f"/{bucket}"),
    ], sent
    assert got["rows"] == newest_per_device(batches)


def test_a_handle_opened_after_a_check_of_the_log_trusts_the_head_of_that_version(s3):
    """Lake.table() checked the log (the head was too old to trust alone); the handle a query
    opens next, within the interval, reads the head and nothing of the log."""
    url, via_proxy, direct, proxy, client, bucket = s3
    _, t, batches = written_table(url, direct, 5)
    time.sleep(5 + 1.1)  # older than the reader's interval
    reader = timelake.Lake(url, storage_options=dict(via_proxy, version_check_interval="5s"))
    opened = requests_of(proxy, lambda: reader.table("readings"))
    assert [p for _, p in opened] == [f"/{bucket}/{HEAD_KEY}", f"/{bucket}"], opened  # the head, a listing
    one_series = "SELECT time, temp FROM readings WHERE device_id = 'b' ORDER BY time"
    got: dict = {}
    sent = requests_of(proxy, lambda: got.update(rows=sql_rows(reader, one_series)))
    # It starts from the state Lake.table() opened with: not even the head is read again.
    assert [p for _, p in sent if "/data/" not in p] == [], sent
    assert got["rows"] == sql_rows(timelake.Lake(url, storage_options=dict(direct, version_check_interval="0")),
                                   one_series)
    # After a commit of this process, the next handle sees it (from the log, or from a head of
    # the new version if the writer's upkeep put one already).
    t.append(batch(9))
    assert reader.table("readings").version == t.version
    assert sql_rows(reader, one_series)[-1] == {"time": batch(9).to_pylist()[-1]["time"], "temp": [
        r["temp"] for r in batch(9).to_pylist() if r["device_id"] == "b"][-1]}


def test_a_table_this_process_drops_and_creates_again_is_not_opened_from_the_state_kept(s3):
    """A handle opened after Lake.table() starts from that handle's state, unless the process
    dropped or created a table since: then it reads the head (or the log) again."""
    url, via_proxy, direct, proxy, client, bucket = s3
    written_table(url, direct, 3)
    reader = timelake.Lake(url, storage_options=dict(via_proxy, version_check_interval=LONG))
    assert reader.table("readings").version == 3  # its state kept
    other = timelake.Lake(url, storage_options=direct)
    other.drop_table("readings")
    again = other.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    again.append(batch(7))
    again.info()
    assert sql_rows(reader, "SELECT count(*) AS n FROM readings") == [{"n": batch(7).num_rows}]
    assert latest_rows(reader) == newest_per_device([batch(7)])


def test_a_commit_whose_head_was_never_written_is_seen_after_the_interval(s3):
    """The writer 'dies' between its commit and its head: every put of the head fails."""
    url, via_proxy, _, proxy, client, bucket = s3
    writer, t, batches = written_table(url, via_proxy, 3)
    proxy.add_rule("internal_error", count=None, method="PUT", path=r"_timelake/head")
    extra = batch(50)
    t.append(extra)
    t.info()
    proxy.clear_rules()
    assert head_header(client, bucket)["version"] == t.version - 1  # stale
    # Read from another process: this one knows its own commits, whatever the head says.
    time.sleep(SHORT_S + 1.1)
    script = (
        "import json, sys, timelake\n"
        "lake = timelake.Lake(sys.argv[1], storage_options=json.loads(sys.argv[2]))\n"
        "print(lake.table('readings').version)\n"
        "print(json.dumps(sorted(r['device_id'] + ':' + str(r['temp']) for r in lake.latest('readings').to_pylist())))\n"
    )
    out = subprocess.run([sys.executable, "-c", script, url, json.dumps(via_proxy)],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), check=True).stdout
    version, rows = out.strip().split("\n")
    assert int(version) == t.version
    expected = newest_per_device(batches + [extra])
    assert json.loads(rows) == sorted(f"{r['device_id']}:{r['temp']}" for r in expected)


def test_racing_writers_leave_the_newest_head(s3):
    url, _, direct, _, client, bucket = s3
    lake, t, batches = written_table(url, direct, 1)
    other = timelake.Lake(url, storage_options=direct)
    handles = [t, other.table("readings")]
    written: list = []
    lock = threading.Lock()

    def run(k: int) -> None:
        for i in range(8):
            b = batch(100 + 10 * k + i)
            handles[k].append(b)
            with lock:
                written.append(b)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for h in handles:
        h.info()
    newest = max(h.version for h in handles)
    # Heads only move forward: whoever wrote last, the head is at the newest version.
    assert head_header(client, bucket)["version"] == newest
    reader = timelake.Lake(url, storage_options=dict(direct, version_check_interval=LONG))
    assert reader.table("readings").version == newest
    assert latest_rows(reader) == newest_per_device(batches + written)


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "not a head", "empty"])
def test_a_damaged_head_opens_from_the_log(s3, damage):
    url, _, direct, _, client, bucket = s3
    _, t, batches = written_table(url, direct, 4)
    body = client.get_object(Bucket=bucket, Key=HEAD_KEY)["Body"].read()
    bad = {
        "flipped byte": body[:200] + bytes([body[200] ^ 1]) + body[201:],
        "truncated": body[: len(body) // 2],
        "not a head": b"hello",
        "empty": b"",
    }[damage]
    client.put_object(Bucket=bucket, Key=HEAD_KEY, Body=bad)
    reader = timelake.Lake(url, storage_options=dict(direct, version_check_interval=LONG))
    assert reader.table("readings").version == t.version
    assert latest_rows(reader) == newest_per_device(batches)


def test_a_head_beyond_the_log_opens_from_the_log(s3):
    """A head claiming a version the log does not hold (checksum valid) is caught by the check
    that a head older than the interval gets."""
    url, _, direct, _, client, bucket = s3
    _, t, batches = written_table(url, direct, 4)
    body = client.get_object(Bucket=bucket, Key=HEAD_KEY)["Body"].read()
    client.put_object(Bucket=bucket, Key=HEAD_KEY, Body=rewrite_head(body, version=t.version + 7))
    time.sleep(SHORT_S + 1.1)
    reader = timelake.Lake(url, storage_options=direct)
    assert reader.table("readings").version == t.version
    assert latest_rows(reader) == newest_per_device(batches)


def test_the_head_of_a_dropped_table_never_answers_for_the_new_one(s3):
    url, _, direct, _, client, bucket = s3
    lake, t, _ = written_table(url, direct, 6)
    old_head = client.get_object(Bucket=bucket, Key=HEAD_KEY)["Body"].read()
    lake.drop_table("readings")
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix="lake/default/readings/")
    t2 = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    fresh = batch(77)
    t2.append(fresh)
    t2.info()
    assert head_header(client, bucket)["tableId"] != json.loads(old_head.split(b"\n")[1])["tableId"]
    # A writer of the dropped table that was still running puts its head back afterwards.
    client.put_object(Bucket=bucket, Key=HEAD_KEY, Body=old_head)
    time.sleep(SHORT_S + 1.1)
    reader = timelake.Lake(url, storage_options=direct)
    assert reader.table("readings").version == t2.version
    assert latest_rows(reader) == newest_per_device([fresh])
    # The new table's next commit replaces the foreign head although its version is lower.
    t2.append(batch(78))
    t2.info()
    assert head_header(client, bucket)["version"] == t2.version



def test_the_head_of_a_dropped_table_at_the_new_tables_version_is_told_apart_by_its_commit(s3):
    """The new table has reached the dropped table's head version: the listing shows a commit of
    that version, but not the object the head names (another tag), so the head is not trusted."""
    url, via_proxy, direct, proxy, client, bucket = s3
    lake, t, _ = written_table(url, direct, 4)
    old_head = client.get_object(Bucket=bucket, Key=HEAD_KEY)["Body"].read()
    assert json.loads(old_head.split(b"\n")[1])["commitEtag"]
    lake.drop_table("readings")
    t2 = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    fresh = [batch(80 + i) for i in range(t.version)]
    for b in fresh:
        t2.append(b)
    t2.info()
    assert t2.version == t.version
    client.put_object(Bucket=bucket, Key=HEAD_KEY, Body=old_head)  # a late writer of the old table
    time.sleep(SHORT_S + 1.1)
    reader = timelake.Lake(url, storage_options=via_proxy)
    sent = requests_of(proxy, lambda: reader.table("readings"))
    assert len(sent) > 2, sent  # the listing did not settle it: the log was read
    assert latest_rows(reader) == newest_per_device(fresh)
    assert reader.table("readings").info()["size"] == t2.info()["size"]

CHILD_APPEND = (
    "import json, sys, timelake\n"
    "sys.path.insert(0, sys.argv[3])\n"
    "from test_table_head import batch\n"
    "lake = timelake.Lake(sys.argv[1], storage_options=json.loads(sys.argv[2]))\n"
    "t = lake.table('readings')\n"
    "t.append(batch(int(sys.argv[4])))\n"
    "t.info()\n"
    "print(t.version)\n"
)


def append_in_child(url: str, options: dict, i: int) -> int:
    """Appends batch(i) from another process (whose commits this process does not know of)."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD_APPEND, url, json.dumps(options), str(ROOT / "tests/python"), str(i)],
        capture_output=True, text=True, timeout=120, check=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    ).stdout
    return int(out.strip().splitlines()[-1])


def test_interval_zero_sees_every_commit_at_once_and_a_long_one_asks_nothing(s3):
    url, via_proxy, direct, proxy, _, _ = s3
    _, t, batches = written_table(url, direct, 2)
    eager = timelake.Lake(url, storage_options=dict(via_proxy, version_check_interval="0"))
    lazy = timelake.Lake(url, storage_options=dict(via_proxy, version_check_interval=LONG))
    assert latest_rows(eager) == latest_rows(lazy) == newest_per_device(batches)
    version = append_in_child(url, direct, 40)
    assert version == t.version + 1
    expected = newest_per_device(batches + [batch(40)])
    # Within its interval the lazy lake sends no request, so it cannot have seen the child's commit.
    seen: dict = {}
    assert requests_of(proxy, lambda: seen.update(rows=latest_rows(lazy))) == []
    assert seen["rows"] == newest_per_device(batches)
    assert latest_rows(eager) == expected
    assert eager.table("readings").version == version
    # Once any Lake of the process has read the newer version, no handle of it answers older.
    assert latest_rows(lazy) == expected
    with pytest.raises(ValueError, match="version_check_interval"):
        timelake.Lake(url, storage_options=dict(direct, version_check_interval="soon"))


def test_the_default_interval_sees_another_process_commit_after_a_second(s3):
    url, _, direct, _, _, _ = s3
    _, _, batches = written_table(url, direct, 2)
    reader = timelake.Lake(url, storage_options=direct)
    assert latest_rows(reader) == newest_per_device(batches)
    version = append_in_child(url, direct, 41)
    time.sleep(SHORT_S + 0.1)
    assert latest_rows(reader) == newest_per_device(batches + [batch(41)])
    assert reader.table("readings").version == version


def test_own_commits_are_seen_at_once(s3):
    url, _, direct, _, _, _ = s3
    writer, t, batches = written_table(url, direct, 2)
    reader = timelake.Lake(url, storage_options=dict(direct, version_check_interval=LONG))
    assert latest_rows(reader) == newest_per_device(batches)
    another = timelake.Lake(url, storage_options=direct).table("readings")
    for i in (60, 61):
        another.append(batch(i))
        batches.append(batch(i))
        # No upkeep waited for: the reader's handle reads the new commits from the log.
        assert latest_rows(reader) == newest_per_device(batches)
        assert sql_rows(reader, "SELECT count(*) AS n FROM readings") == [{"n": sum(b.num_rows for b in batches)}]


def test_a_writer_opened_from_a_head_still_knows_every_batch_id(s3):
    """The head has no checkpoint history (batch ids); a writer loads it from the log first."""
    url, _, direct, _, client, bucket = s3
    lake = timelake.Lake(url, storage_options=direct)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    for i in range(13):  # past a checkpoint: the first batch id lives in its history
        t.append(batch(i), batch_id=f"b{i}")
    t.info()
    checkpoint = client.get_object(Bucket=bucket, Key="lake/default/readings/_delta_log/_last_checkpoint")
    assert json.loads(checkpoint["Body"].read())["version"] >= 10
    fresh = timelake.Lake(url, storage_options=dict(direct, version_check_interval=LONG))
    handle = fresh.table("readings")
    result = handle.append(batch(0), batch_id="b0")
    assert result["duplicate"] is True
    assert handle.version == t.version
    assert sql_rows(fresh, "SELECT count(*) AS n FROM readings") == [{"n": 13 * batch(0).num_rows}]


def test_maintain_writes_the_head_of_its_commit(s3):
    url, _, direct, _, client, bucket = s3
    _, t, batches = written_table(url, direct, 12)
    t.maintain()
    t.info()
    assert head_header(client, bucket)["version"] == t.version
    reader = timelake.Lake(url, storage_options=dict(direct, version_check_interval=LONG))
    assert latest_rows(reader) == newest_per_device(batches)
    assert reader.table("readings").info()["size"] == t.info()["size"]


def test_a_local_lake_writes_a_head_every_eighth_append_and_opens_past_it(tmp_path):
    lake = timelake.Lake(tmp_path / "lake")
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    head = tmp_path / "lake/default/readings/_timelake/head"
    batches = []
    for i in range(7):
        batches.append(batch(i))
        t.append(batches[-1])
    t.info()  # the upkeep done
    assert not head.exists()  # versions 1..7
    batches.append(batch(7))
    t.append(batches[-1])  # version 8
    t.info()
    assert head.exists()
    assert json.loads(head.read_bytes().split(b"\n")[1])["version"] == 8
    for i in range(8, 11):  # versions 9..11: after the head
        batches.append(batch(i))
        t.append(batches[-1])
    t.info()
    # A new Lake opens from the head and reads the commits after it; the same answers as a
    # lake whose head is gone.
    fresh = timelake.Lake(tmp_path / "lake")
    assert fresh.table("readings").version == 11
    assert latest_rows(fresh) == newest_per_device(batches)
    one_series = "SELECT time, temp FROM readings WHERE device_id = 'b' ORDER BY time"
    got = sql_rows(fresh, one_series)
    head.unlink()
    from_log = timelake.Lake(tmp_path / "lake")
    assert from_log.table("readings").version == 11
    assert latest_rows(from_log) == latest_rows(fresh)
    assert sql_rows(from_log, one_series) == got
    assert len(got) == sum(1 for b in batches for r in b.to_pylist() if r["device_id"] == "b")
    # Another process's append after the head is seen by the next read at once (a local lake
    # checks the log at every read).
    before = latest_rows(fresh)
    append_in_child(str(tmp_path / "lake"), {}, 11)
    assert latest_rows(fresh) != before
    assert fresh.table("readings").version == 12


def test_a_repeated_query_asks_nothing_of_the_log_or_the_listing(s3):
    url, via_proxy, direct, proxy, _, _ = s3
    _, _, batches = written_table(url, direct, 6)
    reader = timelake.Lake(url, storage_options=dict(via_proxy, version_check_interval=LONG))
    queries = ["SELECT time, temp FROM readings WHERE device_id = 'a' ORDER BY time",  # the core's reader
               "SELECT device_id, count(*) AS n FROM readings GROUP BY device_id ORDER BY device_id"]  # DuckDB
    for q in queries:
        first = sql_rows(reader, q)
        again: dict = {}
        sent = requests_of(proxy, lambda: again.update(rows=sql_rows(reader, q)))
        assert again["rows"] == first
        # Data may be read again (the block cache is another matter); the log, the head and the
        # table listing are not.
        assert [s for s in sent if "/_delta_log/" in s[1] or "/_timelake/" in s[1] or s[1].count("/") <= 1] == [], sent


def test_a_table_another_process_creates_is_found_after_the_interval(s3):
    url, _, direct, _, _, _ = s3
    written_table(url, direct, 1)
    reader = timelake.Lake(url, storage_options=direct)  # the default interval
    assert sql_rows(reader, "SELECT count(*) AS n FROM readings") == [{"n": batch(0).num_rows}]
    script = (
        "import json, sys, timelake, pyarrow as pa\n"
        "lake = timelake.Lake(sys.argv[1], storage_options=json.loads(sys.argv[2]))\n"
        "t = lake.create_table('other', pa.schema([('x', pa.int64())]))\n"
        "t.append(pa.table({'x': [1, 2, 3]}))\n"
    )
    subprocess.run([sys.executable, "-c", script, url, json.dumps(direct)], check=True, timeout=120,
                   env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    time.sleep(SHORT_S + 0.1)
    assert sql_rows(reader, "SELECT count(*) AS n FROM other") == [{"n": 3}]
    # Created here (by any Lake of the process): found at once.
    timelake.Lake(url, storage_options=direct).create_table("mine", pa.schema([("y", pa.int64())]))
    assert sql_rows(reader, "SELECT count(*) AS n FROM mine") == [{"n": 0}]


def test_a_rollup_opened_from_a_head_refreshes_only_the_changed_pairs(s3):
    """A handle opened from a head has no batch ids in its snapshot; a rollup's refresh asks for
    its own (the source version it reflects) and must get it from the log, not rebuild."""
    url, via_proxy, direct, proxy, client, bucket = s3
    options = dict(direct, version_check_interval=LONG, timelake_rollup_refresh_interval="off")
    writer, t, _ = written_table(url, options, 6)
    writer.sql("CREATE MATERIALIZED ROLLUP r AS SELECT time_bucket(INTERVAL '1 hour', time) AS hour, "
               "device_id, avg(temp) AS temp FROM readings GROUP BY ALL")
    pairs = writer.sql("SELECT count(*) AS n FROM r").column("n")[0].as_py()
    assert pairs > 3
    t.append(iot_table([(T0 + dt.timedelta(minutes=1), "a", 99.0)]))
    writer.table("r").info()  # the rollup's head is written
    fresh = timelake.Lake(url, storage_options=options)  # opens the rollup from its head
    refreshed = fresh.sql("REFRESH MATERIALIZED ROLLUP r").column("rows")[0].as_py()
    assert refreshed == 1  # the one pair the append changed, not all of them
    raw = ("SELECT time_bucket(INTERVAL '1 hour', time) AS hour, device_id, avg(temp) AS temp "
           "FROM readings GROUP BY ALL")
    from rollup_helpers import assert_same
    assert_same(fresh.sql("SELECT hour, device_id, temp FROM r"), fresh.sql(raw, rollups=False))
