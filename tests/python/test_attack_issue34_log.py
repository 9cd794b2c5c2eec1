"""Adversarial checks of log replay reading commits ahead in parallel windows of 64
(delta_log.cc, DeltaLog::CommitReadAhead) and of local listings passing over names before the
start key (local_store.cc, Walk), on a local lake: long logs without a checkpoint, a writer
process committing while readers open, a commit missing or corrupt in the middle, log expiry
racing opens, and odd names in `_delta_log/`."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

import timelake
from helpers import IOT_SCHEMA, NO_BACKGROUND, T0, iot_table

NO_CHECKPOINTS = {**NO_BACKGROUND, "delta.checkpointInterval": "1000000"}


def one_row(i: int) -> pa.Table:
    """Commit i's row: its own time and value, so a version's rows are known exactly."""
    return iot_table([(T0 + dt.timedelta(seconds=i), "d", float(i))])


def rows_seen(lake, name: str = "t") -> list[float]:
    return [r["temp"] for r in lake.sql(f"SELECT temp FROM {name} ORDER BY temp").to_pylist()]


def log_dir(table) -> Path:
    return Path(table.location.removeprefix("file://")) / "_delta_log"


def test_a_long_log_without_checkpoint_replays_every_commit_in_order(lake_path):
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"], properties=NO_CHECKPOINTS)
    n = 200  # several windows of 64, and a last window cut short
    for i in range(n):
        t.append(one_row(i), batch_id=f"b{i}")
    assert not list(log_dir(t).glob("*.checkpoint*.parquet"))
    fresh = timelake.Lake(str(lake_path))
    ft = fresh.table("t")
    assert ft.version == n
    assert rows_seen(fresh) == [float(i) for i in range(n)]
    # Batch ids of every commit were replayed (a txn lost in a window would let a resend in).
    for i in (0, 63, 64, 127, 128, 199):
        assert ft.append(one_row(i), batch_id=f"b{i}")["duplicate"] is True
    # Every version in between reads as its own prefix (time travel replays a cut log).
    for v in (1, 63, 64, 65, 128, 199):
        assert rows_seen_as_of(fresh, v) == [float(i) for i in range(v)]
    # The latest commit's metadata: a column added last is seen by a fresh open.
    t.add_columns(pa.schema([("extra", pa.int64())]))
    assert "extra" in timelake.Lake(str(lake_path)).table("t").schema.names


def rows_seen_as_of(lake, v: int) -> list[float]:
    return [r["temp"] for r in lake.sql("SELECT temp FROM t ORDER BY temp", as_of=v).to_pylist()]


def test_checkpoints_deleted_replays_from_commit_zero(lake_path):
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"],
                          properties={**NO_BACKGROUND, "delta.checkpointInterval": "10"})
    for i in range(150):
        t.append(one_row(i))
    t.refresh()
    checkpoints = list(log_dir(t).glob("*.checkpoint*.parquet"))
    assert checkpoints
    for p in checkpoints:
        p.unlink()
    (log_dir(t) / "_last_checkpoint").unlink(missing_ok=True)
    fresh = timelake.Lake(str(lake_path))
    assert fresh.table("t").version == 150
    assert rows_seen(fresh) == [float(i) for i in range(150)]


@pytest.mark.parametrize("where", [1, 64, 65, 99])
def test_a_commit_corrupt_in_the_middle_is_an_error_not_a_shorter_table(lake_path, where):
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"], properties=NO_CHECKPOINTS)
    for i in range(100):
        t.append(one_row(i))
    t.refresh()  # the upkeep done: the table head written
    path = log_dir(t) / f"{where:020d}.json"
    path.write_bytes(path.read_bytes()[:-7] + b"garbage")
    never_shorter(lake_path, where, (RuntimeError, OSError, ValueError))


@pytest.mark.parametrize("where", [2, 65])
def test_a_commit_missing_in_the_middle_is_an_error_not_a_shorter_table(lake_path, where):
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"], properties=NO_CHECKPOINTS)
    for i in range(100):
        t.append(one_row(i))
    t.refresh()  # the upkeep done: the table head written
    (log_dir(t) / f"{where:020d}.json").unlink()
    never_shorter(lake_path, where, (RuntimeError, OSError, ValueError, KeyError))


def never_shorter(lake_path, where: int, errors) -> None:
    """A damaged commit is an error naming it, or (when the table head, like a checkpoint, holds
    the state after it, so it is never read) the whole table; never a shorter one. Without the
    head, the log is read from its start, and it is the error."""
    try:
        got = timelake.Lake(str(lake_path)).sql("SELECT count(*) AS c FROM t").column("c").to_pylist()
    except errors as err:
        assert f"{where:020d}" in str(err)
    else:
        assert got == [100]
    for head in Path(lake_path).glob("**/_timelake/head"):
        head.unlink()
    with pytest.raises(errors) as err:
        timelake.Lake(str(lake_path)).sql("SELECT count(*) FROM t")
    assert f"{where:020d}" in str(err.value)


WRITER = textwrap.dedent("""
    import datetime as dt, sys
    import pyarrow as pa
    import timelake
    sys.path.insert(0, sys.argv[3])
    from helpers import iot_table, T0
    t = timelake.Lake(sys.argv[1]).table("t")
    start = t.version
    for i in range(int(sys.argv[2])):
        k = start + i
        t.append(iot_table([(T0 + dt.timedelta(seconds=k), "d", float(k))]))
""")


@pytest.mark.parametrize("interval", ["1000000", "10"])
def test_readers_opening_while_another_process_commits_see_exact_prefixes(lake_path, tmp_path, interval):
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"],
                          properties={**NO_BACKGROUND, "delta.checkpointInterval": interval})
    for i in range(130):
        t.append(one_row(i))
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    here = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here] + sys.path)}
    writer = subprocess.Popen([sys.executable, str(script), str(lake_path), "100", here], env=env)
    opens = 0
    try:
        while writer.poll() is None or opens < 3:
            fresh = timelake.Lake(str(lake_path))
            ft = fresh.table("t")
            v = ft.version
            got = [r["temp"] for r in fresh.sql("SELECT temp FROM t ORDER BY temp", as_of=v).to_pylist()]
            assert got == [float(i) for i in range(v)], (v, len(got))
            opens += 1
    finally:
        writer.wait(timeout=300)
    assert writer.returncode == 0
    final = timelake.Lake(str(lake_path))
    assert final.table("t").version == 230
    assert rows_seen(final) == [float(i) for i in range(230)]
    assert opens >= 3


EXPIRER = textwrap.dedent("""
    import datetime as dt, sys
    import timelake
    sys.path.insert(0, sys.argv[3])
    from helpers import iot_table, T0
    t = timelake.Lake(sys.argv[1]).table("t")
    start = t.version
    for i in range(int(sys.argv[2])):
        k = start + i
        t.append(iot_table([(T0 + dt.timedelta(seconds=k), "d", float(k))]))
        if i % 7 == 0:
            t.maintain(compact=False, retention=False, expire=True)
""")


def test_log_expiry_racing_opens_never_gives_a_wrong_table(lake_path, tmp_path):
    """Expiry deletes commits (retention 0) while readers open: an open sees a whole version or
    fails with a clear error; it never sees a table short of rows."""
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"],
                          properties={**NO_BACKGROUND, "delta.checkpointInterval": "5",
                                      "delta.logRetentionDuration": "interval 0 seconds"})
    for i in range(70):
        t.append(one_row(i))
    script = tmp_path / "expirer.py"
    script.write_text(EXPIRER)
    here = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here] + sys.path)}
    proc = subprocess.Popen([sys.executable, str(script), str(lake_path), "60", here], env=env)
    ok = failed = 0
    errors = []
    try:
        while proc.poll() is None:
            try:
                fresh = timelake.Lake(str(lake_path))
                ft = fresh.table("t")
                v = ft.version
                got = [r["temp"] for r in fresh.sql("SELECT temp FROM t ORDER BY temp").to_pylist()]
            except (RuntimeError, OSError, KeyError, ValueError) as e:  # a clear error is acceptable
                failed += 1
                errors.append(str(e))
                continue
            # The rows are those of the version the open saw, or of a later one (sql reads the newest).
            assert got == [float(i) for i in range(len(got))], (v, len(got))
            assert len(got) >= v, (v, len(got))
            ok += 1
    finally:
        proc.wait(timeout=300)
    assert proc.returncode == 0
    assert ok > 0, errors[:3]
    assert failed <= ok, errors[:5]  # expiry must not make opens fail most of the time
    assert rows_seen(timelake.Lake(str(lake_path))) == [float(i) for i in range(130)]


ODD_NAMES = [
    "00000000000000000003.json.tmp",        # a writer's temporary, after a commit's name
    ".00000000000000000004.json.crc",       # a hidden checksum file (Spark/Hadoop)
    "00000000000000000005.crc",             # delta-rs / Spark version checksum
    "0000000000000000000.json",             # one digit short
    "000000000000000000011.json",           # one digit long
    "0000000000000000001a.json",            # not a number
    "00000000000000000002.json.bak",        # a copy someone left
    "00000000000000000002",                 # a commit's name without extension
    "-00000000000000000001.json",           # sorts before the digits
    "~00000000000000000001.json",           # sorts after everything ASCII
    "zzz.json",
    "é00000000000000000009.json",           # a byte over 0x7f
    "_commits",                             # an empty folder of the log's own
]


def test_odd_names_in_the_log_folder_are_ignored(lake_path):
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"],
                          properties={**NO_BACKGROUND, "delta.checkpointInterval": "10"})
    for i in range(25):
        t.append(one_row(i))
    log = log_dir(t)
    for name in ODD_NAMES:
        if name == "_commits":
            (log / name).mkdir()
        else:
            (log / name).write_text("not a commit {")
    # Folders named as prefixes of the listing's start key (the newest checkpoint, 20), holding
    # names that look like commits: their contents are not the log's.
    for folder in (f"{20:020d}", f"{2:019d}", f"{20:020d}.checkpoint"):
        (log / folder).mkdir()
        (log / folder / f"{26:020d}.json").write_text("not a commit {")
    fresh = timelake.Lake(str(lake_path))
    assert fresh.table("t").version == 25
    assert rows_seen(fresh) == [float(i) for i in range(25)]
    ft = fresh.table("t")
    for i in range(25, 40):  # past the next checkpoint too
        ft.append(one_row(i))
    again = timelake.Lake(str(lake_path))
    assert again.table("t").version == 40
    assert rows_seen(again) == [float(i) for i in range(40)]


APPEND_OVER_FOLDER = textwrap.dedent("""
    import datetime as dt, sys
    import timelake
    sys.path.insert(0, sys.argv[2])
    from helpers import iot_table, T0
    t = timelake.Lake(sys.argv[1]).table("t")
    try:
        t.append(iot_table([(T0 + dt.timedelta(seconds=3), "d", 3.0)]))
        print("appended")
    except (RuntimeError, OSError, ValueError) as e:
        print("error:", e)
""")


@pytest.mark.parametrize("obstacle", ["folder", "dangling_link"])
def test_a_folder_at_the_next_commits_name_makes_the_append_fail_not_hang(lake_path, tmp_path, obstacle):
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"], properties=NO_CHECKPOINTS)
    for i in range(3):
        t.append(one_row(i))
    log = log_dir(t)
    if obstacle == "folder":
        (log / f"{4:020d}.json").mkdir()  # the name commit 4 will take
        (log / f"{4:020d}.json" / "x").write_text("{}")
    else:
        (log / f"{4:020d}.json").symlink_to(tmp_path / "nowhere")
    fresh = timelake.Lake(str(lake_path))
    assert fresh.table("t").version == 3  # readers pass over it
    assert rows_seen(fresh) == [0.0, 1.0, 2.0]
    script = tmp_path / "append.py"
    script.write_text(APPEND_OVER_FOLDER)
    here = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here] + sys.path)}
    try:
        done = subprocess.run([sys.executable, str(script), str(lake_path), here], env=env,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the append did not return within 60 s")
    assert done.returncode == 0, done.stderr
    # The append says what is in the way and where; nothing it wrote counts.
    assert done.stdout.startswith("error:") and f"{4:020d}.json" in done.stdout, done.stdout
    assert "is in the way" in done.stdout, done.stdout
    assert rows_seen(timelake.Lake(str(lake_path))) == [0.0, 1.0, 2.0]


def test_a_long_log_on_s3_replays_in_windows_of_sixteen_reads(s3_server, s3_bucket, tmp_path):
    """The object-store read-ahead (16 reads at once): 150 commits without a checkpoint, one of
    them then corrupted, read by fresh Lakes."""
    from conftest import STORE_KINDS
    if "s3" not in STORE_KINDS:
        pytest.skip("TIMELAKE_TEST_STORES leaves out s3")
    options = {**s3_server.storage_options(), "timelake_cache_dir": str(tmp_path / "cache")}
    url = f"s3://{s3_bucket}/lake"
    t = timelake.Lake(url, storage_options=options).create_table(
        "t", IOT_SCHEMA, series_key=["device_id"], properties=NO_CHECKPOINTS)
    for i in range(150):
        t.append(one_row(i), batch_id=f"b{i}")
    t.info()  # the writer's upkeep is done: its table head is written
    client = s3_server.client()
    head = "lake/default/t/_timelake/head"
    # Without the head, a new Lake opens the table from its log (docs/object-stores.md).
    client.delete_object(Bucket=s3_bucket, Key=head)
    fresh = timelake.Lake(url, storage_options=options)
    assert fresh.table("t").version == 150
    assert rows_seen(fresh) == [float(i) for i in range(150)]
    assert fresh.table("t").append(one_row(70), batch_id="b70")["duplicate"] is True
    key = f"lake/default/t/_delta_log/{100:020d}.json"
    body = client.get_object(Bucket=s3_bucket, Key=key)["Body"].read()
    client.put_object(Bucket=s3_bucket, Key=key, Body=body[:-5] + b"{{{{{")
    assert "Contents" not in client.list_objects_v2(Bucket=s3_bucket, Prefix=head)
    with pytest.raises((RuntimeError, OSError, ValueError)) as err:
        timelake.Lake(url, storage_options=options).sql("SELECT count(*) FROM t")
    assert f"{100:020d}" in str(err.value)


@pytest.mark.parametrize("folder", [f"{20:020d}", f"{2:019d}", "_commits", "zz-backup"])
def test_a_folder_inside_the_log_holding_commit_names_is_not_part_of_the_log(lake_path, folder):
    """Regression: a file named like a commit in a folder under `_delta_log/` was taken for a
    commit of the log (the listing is recursive), and the table could not be opened ("version 26
    cannot be rebuilt")."""
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("t", IOT_SCHEMA, series_key=["device_id"],
                          properties={**NO_BACKGROUND, "delta.checkpointInterval": "10"})
    for i in range(25):
        t.append(one_row(i))
    (log_dir(t) / folder).mkdir()
    (log_dir(t) / folder / f"{26:020d}.json").write_text("not a commit {")
    (log_dir(t) / folder / f"{24:020d}.checkpoint.parquet").write_text("not a checkpoint")
    fresh = timelake.Lake(str(lake_path))
    assert fresh.table("t").version == 25
    assert rows_seen(fresh) == [float(i) for i in range(25)]
    fresh.table("t").append(one_row(25))
    fresh.table("t").append(one_row(26))  # commit 27: past the folder's "26"
    assert rows_seen(timelake.Lake(str(lake_path))) == [float(i) for i in range(27)]
