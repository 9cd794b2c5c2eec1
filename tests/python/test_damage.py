"""Damaged or odd storage: what can be rebuilt is, and what cannot fails loudly, naming the object.

A truncated checkpoint is replaced by the JSON commits (as Delta readers do); an empty or `{}`
commit is damage, never an empty commit; a data page whose bytes changed fails a core read instead
of decoding wrong values; a lake folder that cannot be read is an error, never an empty lake.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import timelake
from helpers import IOT_SCHEMA, T0, data_files, iot_series, iot_table, log_path, sorted_rows, table_dir


def _appends(t, n, start=T0):
    for i in range(n):
        t.append(iot_table(iot_series(start + dt.timedelta(hours=i), 1, devices=(f"d{i % 3}",))))
    t.info()  # info() waits for the checkpoints and index records appends leave to the handle's upkeep thread


def _checkpoint(tdir: Path, version: int) -> Path:
    return tdir / "_delta_log" / f"{version:020d}.checkpoint.parquet"


def _truncate(path: Path, keep: int | None = None) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if keep is None else keep])


# --- checkpoints ------------------------------------------------------------------------------


def test_a_truncated_checkpoint_is_replaced_by_the_json_commits(lake, lake_path, readings):
    _appends(readings, 12)  # checkpoint at version 10
    tdir = table_dir(readings)
    expected = sorted_rows(lake.sql("SELECT * FROM readings"))
    _truncate(_checkpoint(tdir, 10))

    fresh = timelake.Lake(str(lake_path))
    t = fresh.table("readings")
    assert t.version == 12
    assert sorted_rows(fresh.sql("SELECT * FROM readings")) == expected
    assert len(fresh.latest("readings")) == 3
    assert t.append(iot_table(iot_series(T0, 1, devices=("z",))))["version"] == 13


def test_a_checkpoint_nothing_can_replace_is_a_runtime_error_naming_it(lake, lake_path, readings):
    _appends(readings, 10)
    readings.refresh()  # the upkeep done: the table head written
    tdir = table_dir(readings)
    expected = sorted_rows(lake.sql("SELECT * FROM readings"))
    _truncate(_checkpoint(tdir, 10))
    log_path(tdir, 0).unlink()  # as if log expiry had removed the commits before the checkpoint

    # The table head (a local lake writes one every eighth append) holds the state the checkpoint
    # held: opened from it and the commits after it, the table is whole. Never a shorter one.
    try:
        fresh = timelake.Lake(str(lake_path))
        assert fresh.table("readings").version == 10
        assert sorted_rows(fresh.sql("SELECT * FROM readings")) == expected
    except RuntimeError as err:
        assert "00000000000000000010.checkpoint.parquet" in str(err)
    # Without the head, nothing can replace the checkpoint: the error names it.
    for head in (tdir / "_timelake").glob("head"):
        head.unlink()
    with pytest.raises(RuntimeError, match=r"00000000000000000010\.checkpoint\.parquet") as info:
        timelake.Lake(str(lake_path)).table("readings")
    assert "damaged" in str(info.value)


@pytest.mark.parametrize("hint", ["", "{not json", '{"version":99,"size":3}'])
def test_a_corrupt_last_checkpoint_is_only_a_hint(lake, lake_path, readings, hint):
    _appends(readings, 11)
    tdir = table_dir(readings)
    expected = sorted_rows(lake.sql("SELECT * FROM readings"))
    (tdir / "_delta_log" / "_last_checkpoint").write_text(hint)

    fresh = timelake.Lake(str(lake_path))
    assert fresh.table("readings").version == 11
    assert sorted_rows(fresh.sql("SELECT * FROM readings")) == expected


# --- commits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "{}", "{}\n", " \n\t\n"])
def test_a_commit_without_actions_is_damage_not_an_empty_commit(lake, lake_path, readings, text):
    _appends(readings, 3)
    damaged = log_path(table_dir(readings), 2)
    damaged.write_text(text)  # what a torn write leaves; its rows must not silently vanish

    fresh = timelake.Lake(str(lake_path))
    with pytest.raises(RuntimeError, match=damaged.name) as info:
        fresh.table("readings")
    assert "damaged" in str(info.value)
    with pytest.raises(RuntimeError, match=damaged.name):
        fresh.sql("SELECT count(*) FROM readings")


def test_a_commit_of_commit_info_alone_is_valid(lake, lake_path, readings):
    _appends(readings, 2)
    info = {"commitInfo": {"timestamp": 1, "operation": "NOOP", "engineInfo": "other/1"}}
    log_path(table_dir(readings), 3).write_text(json.dumps(info) + "\n")

    fresh = timelake.Lake(str(lake_path))
    assert fresh.table("readings").version == 3
    assert fresh.sql("SELECT count(*) AS n FROM readings").column("n")[0].as_py() == 2


# --- data files: page checksums ---------------------------------------------------------------


def _random_readings(n, seed, start=T0):
    r = random.Random(seed)  # values that do not repeat: a page byte is a value byte
    rows = [(start + dt.timedelta(seconds=i), "a", r.uniform(-100, 100)) for i in range(n)]
    return iot_table(rows)


def _flip_sign_of_last_value(path: Path, column: str) -> None:
    meta = pq.ParquetFile(path).metadata
    index = meta.schema.names.index(column)
    chunk = meta.row_group(0).column(index)
    end = chunk.data_page_offset + chunk.total_compressed_size
    data = bytearray(path.read_bytes())
    data[end - 1] ^= 0x80  # the sign bit of the last double of the last page
    path.write_bytes(bytes(data))


def test_data_files_carry_page_checksums(readings):
    readings.append(_random_readings(500, seed=1))
    [f] = data_files(table_dir(readings))
    pq.read_table(f, page_checksum_verification=True)  # verifies: the CRCs are there and right
    _flip_sign_of_last_value(f, "temp")
    with pytest.raises(OSError, match="CRC"):
        pq.read_table(f, page_checksum_verification=True)


def test_a_damaged_data_page_fails_a_core_read_naming_the_file(lake, readings):
    readings.append(_random_readings(2000, seed=1))
    readings.append(_random_readings(2000, seed=2, start=T0 + dt.timedelta(hours=1)))
    damaged = data_files(table_dir(readings))[0]
    last = pq.read_table(damaged).column("temp")[-1].as_py()
    _flip_sign_of_last_value(damaged, "temp")
    # A reader that does not verify decodes the flip to a wrong value, silently.
    assert pq.read_table(damaged).column("temp")[-1].as_py() == -last

    with pytest.raises(RuntimeError, match=damaged.name):
        readings.maintain()  # compaction reads both files through the core


# --- folders that cannot be read --------------------------------------------------------------

_LIST_AS_UNPRIVILEGED = textwrap.dedent(
    """
    import json, sys
    import pyarrow
    import timelake
    out = {}
    lake = timelake.Lake(sys.argv[1])
    for what, call in (("tables", lambda: lake.tables()), ("table", lambda: lake.table("readings"))):
        try:
            call()
            out[what] = ["ok", ""]
        except Exception as e:
            out[what] = [type(e).__name__, str(e)]
    print(json.dumps(out))
    """
)


def _run_without_file_permission_override(lake_path: Path) -> dict:
    """Runs the listing script in a child that permissions apply to, even when tests run as root."""
    cmd = [sys.executable, "-c", _LIST_AS_UNPRIVILEGED, str(lake_path)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: permissions cannot deny")
        drop = "-dac_override,-dac_read_search"
        cmd = [setpriv, f"--bounding-set={drop}", f"--inh-caps={drop}", *cmd]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def locked(lake_path):
    locked_dirs = []

    def lock(path: Path):
        path.chmod(0)
        locked_dirs.append(path)

    yield lock
    for p in locked_dirs:
        p.chmod(0o755)


def test_an_unreadable_namespace_folder_is_a_runtime_error_not_a_missing_table(lake, lake_path, readings, locked):
    locked(lake_path / "default")
    out = _run_without_file_permission_override(lake_path)
    for what in ("tables", "table"):
        kind, message = out[what]
        assert kind == "RuntimeError", out
        assert "ermission denied" in message and str(lake_path / "default") in message, out


def test_an_unreadable_lake_folder_is_a_runtime_error_not_an_empty_lake(lake, lake_path, readings, locked):
    locked(lake_path)
    out = _run_without_file_permission_override(lake_path)
    kind, message = out["tables"]
    assert kind == "RuntimeError", out
    assert "ermission denied" in message and str(lake_path) in message, out


def test_a_file_where_the_log_folder_should_be_is_a_runtime_error(lake, lake_path, readings):
    log = table_dir(readings) / "_delta_log"
    shutil.rmtree(log)
    log.write_text("not a folder")
    with pytest.raises(RuntimeError, match="_delta_log"):
        timelake.Lake(str(lake_path)).table("readings")
