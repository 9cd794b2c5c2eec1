"""Helpers for the timelake Python tests.

They build IoT-shaped Arrow data (time, device_id, temp), look at what a table left on disk, and
read tables with independent tools (pyarrow.parquet, deltalake) so that tests do not only check
timelake against itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse

import pyarrow as pa  # import pyarrow before the extension (shared Arrow libraries)

UTC = dt.timezone.utc

IOT_SCHEMA = pa.schema(
    [
        ("time", pa.timestamp("us", tz="UTC")),
        ("device_id", pa.string()),
        ("temp", pa.float64()),
    ]
)

# A fixed day, far enough in the past that nothing depends on "now" unless a test wants it to.
T0 = dt.datetime(2024, 3, 5, 0, 0, tzinfo=UTC)


# Table properties for tests that count versions or files after many appends: background
# compaction (on by default) would add its own OPTIMIZE commits in between.
NO_BACKGROUND = {"timelake.backgroundCompaction": "false"}


def at(*args: int) -> dt.datetime:
    """A UTC datetime: at(2024, 3, 5, 10, 30)."""
    return dt.datetime(*args, tzinfo=UTC)


def iot_table(rows, schema: pa.Schema = IOT_SCHEMA) -> pa.Table:
    """Rows as (time, device_id, temp) tuples -> a pyarrow Table of `schema`."""
    rows = list(rows)
    return pa.table(
        {
            "time": [r[0] for r in rows],
            "device_id": [r[1] for r in rows],
            "temp": [r[2] for r in rows],
        },
        schema=schema,
    )


def iot_series(start: dt.datetime, n: int, devices=("a", "b", "c"), step=dt.timedelta(minutes=10), base=20.0):
    """n timestamps from `start` every `step`, one row per device at each: list of tuples."""
    rows = []
    for i in range(n):
        t = start + i * step
        for j, d in enumerate(devices):
            rows.append((t, d, base + i + j / 10))
    return rows


def sorted_rows(table: pa.Table, keys=None) -> list[dict]:
    """Rows of a pyarrow Table as dicts, sorted by `keys` (default: every column)."""
    keys = list(keys) if keys is not None else table.column_names
    return table.sort_by([(k, "ascending") for k in keys]).to_pylist()


def sql_rows(lake, query: str, **kwargs) -> list[dict]:
    return lake.sql(query, **kwargs).to_pylist()


def count_rows(lake, name: str) -> int:
    return lake.sql(f"SELECT count(*) AS n FROM {name}").column("n")[0].as_py()


def url_to_path(url: str) -> Path:
    parsed = urlparse(url)
    assert parsed.scheme == "file", url
    return Path(unquote(parsed.path))


def table_dir(table) -> Path:
    """The local folder of a timelake Table (from its file:// location)."""
    return url_to_path(table.location)


def data_files(tdir: Path) -> list[Path]:
    """Every Parquet file under <table>/data/, sorted."""
    return sorted((tdir / "data").rglob("*.parquet"))


def all_files(tdir: Path) -> set[str]:
    """Every file under the table folder, as relative paths."""
    return {str(p.relative_to(tdir)) for p in tdir.rglob("*") if p.is_file()}


def log_path(tdir: Path, version: int) -> Path:
    return tdir / "_delta_log" / f"{version:020d}.json"


def log_actions(tdir: Path, version: int) -> list[dict]:
    """The actions of one commit, in file order."""
    text = log_path(tdir, version).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def commit_versions(tdir: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (tdir / "_delta_log").glob("*.json"))


def grouped_commits(tdir: Path) -> int:
    """Commits that carried more than one append (group commit)."""
    n = 0
    for v in commit_versions(tdir):
        first = json.loads(log_path(tdir, v).read_text().splitlines()[0])
        if "timelake.groupedAppends" in first.get("commitInfo", {}).get("operationParameters", {}):
            n += 1
    return n


class StreamOnly:
    """An object that offers nothing but the Arrow PyCapsule stream interface."""

    __slots__ = ("_data",)

    def __init__(self, data: pa.Table):
        self._data = data

    def __arrow_c_stream__(self, requested_schema=None):
        return self._data.__arrow_c_stream__(requested_schema)


@contextlib.contextmanager
def process_timezone(zone: str):
    """Run the block with the process time zone set to `zone` (TZ + tzset), then restore it.

    DuckDB takes a new connection's default TimeZone from the process zone, so this makes tests of
    UTC bucketing able to fail on a machine whose zone is UTC."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


# ---------------------------------------------------------------------------------------------
# deltalake (delta-rs) as an independent reader/writer.
#
# It runs in a child process: delta-rs' to_pyarrow_table leaves Arrow scanner threads behind that
# abort the interpreter at exit now and then ("terminate called without an active exception",
# delta-rs#2184, arrow#34314). The child ends with os._exit after writing its answer, so that
# flake can neither fail a test nor hide an abort caused by timelake in the pytest process.

_DELTA_READ = r"""
import json, os, sys
import pyarrow as pa
import deltalake
path, out = sys.argv[1], sys.argv[2]
d = deltalake.DeltaTable(path, version=int(sys.argv[3])) if len(sys.argv) > 3 else deltalake.DeltaTable(path)
t = d.to_pyarrow_table()
p = d.protocol()
meta = {
    "version": d.version(),
    "min_reader_version": p.min_reader_version,
    "min_writer_version": p.min_writer_version,
    "reader_features": p.reader_features,
    "writer_features": p.writer_features,
    "configuration": dict(d.metadata().configuration),
}
with pa.OSFile(out + ".arrow", "wb") as f:
    with pa.ipc.new_file(f, t.schema) as w:
        w.write_table(t)
with open(out + ".json", "w") as f:
    json.dump(meta, f)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""

_DELTA_WRITE = r"""
import os, sys
import pyarrow as pa
import deltalake
path, src = sys.argv[1], sys.argv[2]
with pa.OSFile(src, "rb") as f:
    t = pa.ipc.open_file(f).read_all()
deltalake.write_deltalake(path, t, mode="append")
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def _run_child(script: str, *args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0:
        raise AssertionError(f"deltalake child failed ({proc.returncode}):\n{proc.stderr}")


_counter = [0]


def delta_read(path: Path, scratch: Path, version: Optional[int] = None) -> tuple[pa.Table, dict]:
    """deltalake.DeltaTable(path[, version=...]).to_pyarrow_table() plus version/protocol/configuration."""
    _counter[0] += 1
    out = scratch / f"delta-read-{_counter[0]}"
    _run_child(_DELTA_READ, str(path), str(out), *([str(version)] if version is not None else []))
    with pa.memory_map(str(out) + ".arrow") as f:
        table = pa.ipc.open_file(f).read_all()
    meta = json.loads(Path(str(out) + ".json").read_text())
    return table, meta


def delta_write(path: Path, data: pa.Table, scratch: Path) -> None:
    """deltalake.write_deltalake(path, data, mode="append")."""
    _counter[0] += 1
    src = scratch / f"delta-write-{_counter[0]}.arrow"
    with pa.OSFile(str(src), "wb") as f:
        with pa.ipc.new_file(f, data.schema) as w:
            w.write_table(data)
    _run_child(_DELTA_WRITE, str(path), str(src))


_RACING_WRITER = r"""
import datetime as dt, sys
import pyarrow as pa
import timelake
lake_path, n, column, type_name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
t = timelake.Lake(lake_path).table("readings")
base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
print("ready", flush=True)
sys.stdin.readline()
for i in range(n):
    batch = pa.table({"time": [base + dt.timedelta(seconds=i)], "device_id": ["w"],
                      column: pa.array([i], getattr(pa, type_name)())})
    r = t.append(batch, batch_id=f"w-{i}")
    print(r["version"], r["attempts"], flush=True)
"""


class RacingWriter:
    """Another process appending `n` one-row batches (with batch ids) to table `readings` of the
    lake at `lake_path`, value i in `column` (a pyarrow type name), once `go()` is called; for
    tests of commits that race appends. `answers()`: each append's (version, attempts)."""

    def __init__(self, lake_path: Path, n: int, column: str, type_name: str) -> None:
        self.n = n
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _RACING_WRITER, str(lake_path), str(n), column, type_name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def answers(self) -> list[tuple[int, int]]:
        stdout, stderr = self.proc.communicate(timeout=300)
        assert self.proc.returncode == 0, stderr
        out = [tuple(int(x) for x in line.split()) for line in stdout.strip().splitlines()]
        assert len(out) == self.n
        return out
