#!/usr/bin/env python3
"""Bulk ingest and time-series queries: timelake vs delta-rs (+ DuckDB) vs plain Parquet (+ DuckDB).

One run, one in-memory data set, every system measured side by side (DESIGN.md §8):

ingest   the same pyarrow Table (IoT shape: time, device_id, 3 floats) written by
           * timelake   Table.append(table)                      (one call)
           * timelake   Table.append(slice, batch_id=...) x 100   (100 batches)
           * delta-rs   deltalake.write_deltalake(path, table, mode="append")
           * pyarrow    pyarrow.parquet.write_table(table, path)  (the practical limit)
queries  run on what each system wrote
           * series_day_stats   avg/min/max temp of one device on one day
           * series_day_rows    that device's rows for that day
           * hourly_all         time_bucket(1 hour) average over all series
           * hourly_by_series   time_bucket(1 hour) average per series
         by timelake `lake.sql`, by DuckDB over the delta-rs table (open DeltaTable, file_uris(),
         read_parquet([...]); the open is part of the time) and by DuckDB read_parquet over the
         pyarrow file.

Every figure is the best of N runs; ratios are peer time / timelake time (> 1: timelake is faster).
Results go to bench/results/latest.json and latest.md. A benchmark measures; it never asserts: a
system that fails is reported with its error and the run goes on.

    PYTHONPATH=python .venv/bin/python bench/bench_ingest_query.py --rows 2000000
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
TABLE = "bench.readings"
US_PER_S = 1_000_000
US_PER_DAY = 86_400 * US_PER_S

SCHEMA = pa.schema(
    [
        ("time", pa.timestamp("us", tz="UTC")),
        ("device_id", pa.string()),
        ("temp", pa.float64()),
        ("humidity", pa.float64()),
        ("pressure", pa.float64()),
    ]
)

TL_ONE = "timelake append (1 call)"
TL_BATCHES = "timelake append ({n} batches)"
DELTA_WRITE = "delta-rs write_deltalake"
PARQUET_WRITE = "pyarrow.parquet.write_table"
ARCTIC_WRITE = "ArcticDB write (LMDB)"

TL_SQL = "timelake lake.sql"
TL_SQL_BATCHES = "timelake lake.sql ({n}-batch table)"
DELTA_DUCKDB = "delta-rs + DuckDB"
PARQUET_DUCKDB = "DuckDB read_parquet"


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def device_name(i: int) -> str:
    return f"dev-{i:05d}"


def generate(rows: int, devices: int, days: int, seed: int, start: dt.datetime) -> pa.Table:
    """IoT readings in arrival order: every device reports once per interval, devices interleaved.

    Times are unique per device (a device's readings are one interval apart, with jitter of at
    most ±20 % of it), so no policy of deduplication changes the data.
    """
    rng = np.random.default_rng(seed)
    steps = math.ceil(rows / devices)
    interval = days * US_PER_DAY / steps  # µs between two readings of one device
    idx = np.arange(rows, dtype=np.int64)
    step, dev = np.divmod(idx, devices)
    offset = rng.random(devices) * 0.6 + 0.2  # where in its interval each device reports
    jitter = rng.uniform(-0.15, 0.15, rows)
    start_us = int(start.timestamp()) * US_PER_S
    t = start_us + ((step + offset[dev] + jitter) * interval).astype(np.int64)

    sec_of_day = ((t - start_us) % US_PER_DAY) / US_PER_S
    base = rng.uniform(15.0, 35.0, devices)
    swing = rng.uniform(2.0, 8.0, devices)
    cycle = np.sin(2 * np.pi * (sec_of_day / 86_400.0 - 0.375))
    temp = base[dev] + swing[dev] * cycle + rng.normal(0.0, 0.5, rows)
    humidity = np.clip(60.0 - 2.0 * swing[dev] * cycle + rng.normal(0.0, 3.0, rows), 0.0, 100.0)
    pressure = 1013.0 + rng.uniform(-8.0, 8.0, devices)[dev] + rng.normal(0.0, 0.8, rows)

    names = pa.array([device_name(i) for i in range(devices)], pa.string())
    return pa.table(
        {
            "time": pa.array(t, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "device_id": names.take(pa.array(dev.astype(np.int32))),
            "temp": pa.array(temp),
            "humidity": pa.array(humidity),
            "pressure": pa.array(pressure),
        },
        schema=SCHEMA,
    )


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def dir_size(path: Path) -> tuple[int, int]:
    """(bytes, parquet files) under path."""
    total, files = 0, 0
    if path.is_file():
        return path.stat().st_size, int(path.suffix == ".parquet")
    for root, _dirs, names in os.walk(path):
        for n in names:
            total += os.path.getsize(os.path.join(root, n))
            files += n.endswith(".parquet") and "checkpoint" not in n
    return total, files


def fingerprint(table: pa.Table) -> dict:
    """Row count and per-numeric-column sums: enough to tell whether two results agree."""
    fp = {"rows": table.num_rows}
    for name, col in zip(table.column_names, table.columns):
        if pa.types.is_floating(col.type) or pa.types.is_integer(col.type):
            s = pc.sum(col).as_py()
            fp[name] = None if s is None else float(s)
    return fp


def same_result(a: dict | None, b: dict | None) -> bool | None:
    if a is None or b is None:
        return None
    if a.keys() != b.keys() or a["rows"] != b["rows"]:
        return False
    for k, va in a.items():
        vb = b[k]
        if va is None or vb is None:
            if va is not vb:
                return False
        elif not math.isclose(va, vb, rel_tol=1e-9, abs_tol=1e-9):
            return False
    return True


def duckdb_connection():
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    return con


def sql_list(paths) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def local_path(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("timelake", "pyarrow", "deltalake", "duckdb", "numpy", "arcticdb"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "?")
        except Exception as e:  # noqa: BLE001 - a missing module is a fact to report
            out[mod] = f"unavailable ({type(e).__name__}: {e})"
    return out


def machine() -> dict:
    info = {"platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gb"] = round(int(line.split()[1]) / 1024**2, 1)
                break
    except OSError:
        pass
    try:
        info["git_commit"] = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except Exception:  # noqa: BLE001
        info["git_commit"] = None
    return info


def load_average() -> float | None:
    """The 1-minute load average: other work on the machine skews every figure."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def busy_note(report) -> str | None:
    start = report["environment"]["load_average_1m"].get("start")
    if start is not None and start > 0.5:
        return (f"note: the machine was busy when the run started (1-minute load average {start}): "
                "other work skews these figures")
    return None


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def log(msg: str = "") -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# Ingest
# ---------------------------------------------------------------------------------------------


def create_tl_table(lake_dir: Path, dedup: str | None):
    import timelake

    lake = timelake.Lake(str(lake_dir))
    table = lake.create_table(
        TABLE, SCHEMA, time_column="time", series_key=["device_id"], chunk="day",
        dedup=None if dedup == "none" else dedup,
    )
    return lake, table


def measure_ingest(name, runs, work: Path, tag: str, write):
    """Run write(dest) `runs` times into fresh folders; keep the last folder for the queries."""
    entry = {"system": name, "times_s": [], "error": None}
    dest = None
    for r in range(runs):
        if dest is not None:
            shutil.rmtree(dest, ignore_errors=True)
        dest = work / f"{tag}-{r}"
        dest.mkdir(parents=True)
        gc.collect()
        try:
            seconds, details = write(dest)
        except Exception as e:  # noqa: BLE001 - report, never abort the benchmark
            entry["error"] = error_text(e)
            entry["traceback"] = traceback.format_exc()
            log(f"    {name}: FAILED {entry['error']}")
            return entry, None
        entry["times_s"].append(seconds)
        if details:
            entry["details"] = details
        log(f"    {name}: run {r + 1}/{runs} {seconds:.2f} s")
    entry["best_s"] = min(entry["times_s"])
    entry["bytes"], entry["files"] = dir_size(dest)
    return entry, dest


def run_ingest(data: pa.Table, args, work: Path):
    results, where = [], {}
    nb = args.batches

    def tl_one(dest):
        _lake, t = create_tl_table(dest, args.dedup)
        t0 = time.perf_counter()
        res = t.append(data)
        return time.perf_counter() - t0, {"append_result": jsonable(res)}

    def tl_batches(dest):
        _lake, t = create_tl_table(dest, args.dedup)
        step = math.ceil(data.num_rows / nb)
        slices = [data.slice(i, step) for i in range(0, data.num_rows, step)]
        commit_ms, maint = [], 0
        t0 = time.perf_counter()
        for i, part in enumerate(slices):
            res = t.append(part, batch_id=f"bench-{i:06d}")
            commit_ms.append(res.get("commit_ms"))
            maint += bool(res.get("maintenance"))
        seconds = time.perf_counter() - t0
        cm = sorted(c for c in commit_ms if c is not None)
        return seconds, {
            "batches": len(slices),
            "commit_ms_p50": cm[len(cm) // 2] if cm else None,
            "commit_ms_max": cm[-1] if cm else None,
            "appends_with_inline_maintenance": maint,
            "final_version": t.version,
        }

    def delta(dest):
        from deltalake import write_deltalake

        t0 = time.perf_counter()
        write_deltalake(str(dest), data, mode="append")
        return time.perf_counter() - t0, None

    def parquet(dest):
        t0 = time.perf_counter()
        pq.write_table(data, dest / "data.parquet")
        return time.perf_counter() - t0, None

    frame = []  # the pandas DataFrame ArcticDB takes, converted once (not timed)

    def arctic(dest):
        import arcticdb

        if not frame:
            frame.append(data.to_pandas().set_index("time"))
        lib = arcticdb.Arctic(f"lmdb://{dest}").get_library("bench", create_if_missing=True)
        t0 = time.perf_counter()
        lib.write("readings", frame[0], validate_index=False)  # arrival order is not sorted
        return time.perf_counter() - t0, None

    plan = [
        (TL_ONE, "timelake-one", tl_one, "timelake"),
        (TL_BATCHES.format(n=nb), "timelake-batches", tl_batches, "timelake_batches"),
        (DELTA_WRITE, "delta", delta, "delta"),
        (PARQUET_WRITE, "parquet", parquet, "parquet"),
        (ARCTIC_WRITE, "arcticdb", arctic, "arcticdb"),
    ]
    for name, tag, fn, key in plan:
        if key.startswith("timelake") and args.skip_timelake:
            continue
        entry, dest = measure_ingest(name, args.ingest_runs, work, tag, fn)
        entry["key"] = key
        results.append(entry)
        if dest is not None:
            where[key] = dest

    base = next((e for e in results if e["key"] == "timelake" and "best_s" in e), None)
    for e in results:
        if "best_s" in e:
            e["rows_per_s"] = data.num_rows / e["best_s"] if e["best_s"] > 0 else None
            e["ratio"] = e["best_s"] / base["best_s"] if base else None
    return results, where


def jsonable(value):
    """Make an append/info result JSON-serialisable."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


# ---------------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------------


def make_queries(device: str, day: dt.datetime) -> dict:
    lo = day.strftime("%Y-%m-%d %H:%M:%S+00")
    hi = (day + dt.timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S+00")
    where = f"device_id = '{device}' AND time >= TIMESTAMPTZ '{lo}' AND time < TIMESTAMPTZ '{hi}'"
    return {
        "series_day_stats": {
            "title": f"one series over one day: avg/min/max temp ({device}, {day:%Y-%m-%d})",
            "sql": "SELECT avg(temp) AS avg_temp, min(temp) AS min_temp, max(temp) AS max_temp, "
                   f"count(*) AS n FROM {{src}} WHERE {where}",
        },
        "series_day_rows": {
            "title": f"one series over one day: its rows ({device}, {day:%Y-%m-%d})",
            "sql": f"SELECT * FROM {{src}} WHERE {where} ORDER BY time",
        },
        "hourly_all": {
            "title": "hourly time_bucket average over all series",
            "sql": "SELECT time_bucket(INTERVAL '1 hour', time) AS hour, avg(temp) AS avg_temp "
                   "FROM {src} GROUP BY 1 ORDER BY 1",
        },
        "hourly_by_series": {
            "title": "hourly time_bucket average per series",
            "sql": "SELECT device_id, time_bucket(INTERVAL '1 hour', time) AS hour, "
                   "avg(temp) AS avg_temp FROM {src} GROUP BY 1, 2 ORDER BY 1, 2",
        },
    }


def measure_query(name, runs, once):
    """once() -> (result table, extra dict of per-run seconds); best-of-runs by total time."""
    entry = {"system": name, "times_ms": [], "error": None}
    extras = {}
    result = None
    for _ in range(runs):
        gc.collect()
        try:
            t0 = time.perf_counter()
            result, extra = once()
            ms = (time.perf_counter() - t0) * 1000
        except Exception as e:  # noqa: BLE001 - report, never abort the benchmark
            entry["error"] = error_text(e)
            entry["traceback"] = traceback.format_exc()
            return entry, None
        entry["times_ms"].append(ms)
        for k, v in (extra or {}).items():
            extras.setdefault(k, []).append(v * 1000)
    entry["best_ms"] = min(entry["times_ms"])
    for k, v in extras.items():
        entry[k + "_ms"] = v
        entry["best_" + k + "_ms"] = min(v)
    entry["result_rows"] = result.num_rows
    return entry, fingerprint(result)


def run_queries(args, where: dict, queries: dict):
    systems = []  # (name, key, runner(sql_template) -> (table, extras))
    if "timelake" in where or "timelake_batches" in where:
        import timelake
    for key, name in (("timelake", TL_SQL), ("timelake_batches", TL_SQL_BATCHES.format(n=args.batches))):
        if key in where:
            lake = timelake.Lake(str(where[key]))
            systems.append((name, key, lambda q, lake=lake: (lake.sql(q.format(src=TABLE)), None)))
    con = duckdb_connection()
    if "delta" in where:
        from deltalake import DeltaTable

        path = str(where["delta"])

        def delta_once(q):
            t0 = time.perf_counter()
            files = [local_path(u) for u in DeltaTable(path).file_uris()]
            opened = time.perf_counter() - t0
            res = con.sql(q.format(src=f"read_parquet({sql_list(files)})")).to_arrow_table()
            return res, {"open": opened}

        systems.append((DELTA_DUCKDB, "delta", delta_once))
    if "parquet" in where:
        src = f"read_parquet({sql_list([where['parquet'] / 'data.parquet'])})"
        systems.append(
            (PARQUET_DUCKDB, "parquet", lambda q: (con.sql(q.format(src=src)).to_arrow_table(), None))
        )

    out = []
    for qkey, q in queries.items():
        log(f"  {qkey}: {q['title']}")
        entries, prints = [], {}
        for name, key, runner in systems:
            entry, fp = measure_query(name, args.query_runs, lambda r=runner: r(q["sql"]))
            entry["key"] = key
            entries.append(entry)
            prints[key] = fp
            if entry["error"]:
                log(f"    {name}: FAILED {entry['error']}")
            else:
                log(f"    {name}: best {entry['best_ms']:.1f} ms "
                    f"(runs {', '.join(f'{t:.1f}' for t in entry['times_ms'])})")
        ref_key = next((k for k in ("parquet", "delta") if prints.get(k)), None)
        base = next((e for e in entries if e["key"] == "timelake" and "best_ms" in e), None)
        for e in entries:
            e["same_result_as_parquet"] = same_result(prints.get(e["key"]), prints.get(ref_key))
            e["fingerprint"] = prints.get(e["key"])
            if "best_ms" in e and base:
                e["ratio"] = e["best_ms"] / base["best_ms"]
        out.append({"query": qkey, "title": q["title"], "sql": q["sql"], "results": entries})
    return out


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------


def fmt_ratio(r) -> str:
    return "n/a" if r is None else f"{r:.2f}x"


def fmt_rate(r) -> str:
    if r is None:
        return "n/a"
    return f"{r / 1e6:.2f}M/s" if r >= 1e6 else f"{r / 1e3:.0f}k/s"


def fmt_mb(b) -> str:
    return "n/a" if b is None else f"{b / 1e6:.1f} MB"


def ingest_rows(report) -> list[list[str]]:
    rows = []
    for e in report["ingest"]:
        if e.get("error"):
            rows.append([e["system"], "FAILED", "", "", "", ""])
            continue
        rows.append([
            e["system"], f"{e['best_s']:.2f} s", fmt_rate(e.get("rows_per_s")), fmt_mb(e.get("bytes")),
            str(e.get("files", "")), fmt_ratio(e.get("ratio")),
        ])
    return rows


def query_rows(q) -> list[list[str]]:
    rows = []
    for e in q["results"]:
        if e.get("error"):
            rows.append([e["system"], "FAILED", "", "", "", ""])
            continue
        same = e.get("same_result_as_parquet")
        rows.append([
            e["system"],
            f"{e['best_ms']:.1f}",
            f"{e['best_open_ms']:.1f}" if "best_open_ms" in e else "",
            f"{e['result_rows']:,}",
            {True: "yes", False: "NO", None: "?"}[same],
            fmt_ratio(e.get("ratio")),
        ])
    return rows


INGEST_HEAD = ["system", "best", "rows/s", "on disk", "data files", "time / timelake"]
QUERY_HEAD = ["system", "best ms", "of which open ms", "rows", "same result", "time / timelake"]


def text_table(head, rows) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    right = [False] + [True] * (len(head) - 1)

    def line(cells):
        return "  ".join(str(c).rjust(w) if r else str(c).ljust(w) for c, w, r in zip(cells, widths, right))

    return "\n".join([line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def md_table(head, rows) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def text_report(report) -> str:
    d = report["data"]
    parts = [
        f"timelake bench: ingest + query   {report['finished_at']}",
        f"data: {d['rows']:,} rows, {d['devices']:,} series, {d['days']} days, "
        f"{d['arrow_bytes'] / 1e6:.0f} MB in Arrow; best of {report['params']['ingest_runs']} "
        f"(ingest) / {report['params']['query_runs']} (queries); ratio = time / timelake time, "
        "> 1 means timelake is faster",
        *([busy_note(report)] if busy_note(report) else []),
        "",
        "INGEST",
        text_table(INGEST_HEAD, ingest_rows(report)),
        *failures(report["ingest"]),
    ]
    for q in report["queries"]:
        parts += ["", f"QUERY {q['query']}: {q['title']}", text_table(QUERY_HEAD, query_rows(q))]
        parts += failures(q["results"])
    return "\n".join(parts)


def failures(entries) -> list[str]:
    return [f"  ! {e['system']} failed: {e['error'].splitlines()[0][:200]}"
            for e in entries if e.get("error")]


def md_report(report) -> str:
    d, env, p = report["data"], report["environment"], report["params"]
    v = env["versions"]
    m = env["machine"]
    lines = [
        "# Benchmark: bulk ingest and time-series queries",
        "",
        f"Run {report['finished_at']} by `bench/bench_ingest_query.py` "
        f"(`{' '.join(report['argv']) or '(defaults)'}`).",
        "",
        f"* Data: {d['rows']:,} rows (time, device_id, 3 × float64), {d['devices']:,} series, "
        f"{d['days']} days, {d['arrow_bytes'] / 1e6:.0f} MB in Arrow; one in-memory pyarrow Table "
        "written by every system.",
        f"* timelake table: chunk=day, series_key=[device_id], dedup={p['dedup']}.",
        f"* Best of {p['ingest_runs']} runs for ingest, {p['query_runs']} for queries (page cache warm).",
        "* **time / timelake** is the peer's best time over timelake's best time "
        "(one `append` call for ingest, `lake.sql` on that table for queries): **> 1 means timelake "
        "is faster**.",
        f"* Machine: {m.get('cpu', '?')}, {m.get('cpus')} CPUs, {m.get('memory_gb', '?')} GB; "
        f"Python {v.get('python')}, timelake {v.get('timelake')}, pyarrow {v.get('pyarrow')}, "
        f"deltalake {v.get('deltalake')}, duckdb {v.get('duckdb')}, arcticdb {v.get('arcticdb')}; "
        f"commit {m.get('git_commit')}; "
        f"1-minute load average {env['load_average_1m'].get('start')} at start, "
        f"{env['load_average_1m'].get('end')} at end (which includes the benchmark's own work).",
        "",
        "## Ingest",
        "",
        md_table(INGEST_HEAD, ingest_rows(report)),
    ]
    for q in report["queries"]:
        lines += [
            "",
            f"## Query `{q['query']}`: {q['title']}",
            "",
            "```sql",
            q["sql"].format(src="<table>"),
            "```",
            "",
            md_table(QUERY_HEAD, query_rows(q)),
        ]
    errors = [e for e in report["ingest"] if e.get("error")]
    errors += [e for q in report["queries"] for e in q["results"] if e.get("error")]
    if errors:
        lines += ["", "## Failures", ""]
        lines += [f"* {e['system']}: `{e['error']}`" for e in errors]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=10_000_000, help="rows to write (default 10,000,000)")
    p.add_argument("--devices", type=int, default=1000, help="number of series (default 1000)")
    p.add_argument("--days", type=int, default=7, help="days the data spans (default 7)")
    p.add_argument("--batches", type=int, default=100, help="appends in the batched variant (default 100)")
    p.add_argument("--ingest-runs", type=int, default=2, help="best of N for ingest (default 2)")
    p.add_argument("--query-runs", type=int, default=3, help="best of N for queries (default 3)")
    p.add_argument("--dedup", choices=["none", "last", "first"], default="last",
                   help="the timelake table's dedup policy (default last, as an IoT table would use)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--workdir", type=Path, default=None,
                   help="where to write the tables (default: a fresh folder under /tmp)")
    p.add_argument("--keep", action="store_true", help="keep the written tables")
    p.add_argument("--out", type=Path, default=HERE / "results",
                   help="folder for latest.json and latest.md (default bench/results)")
    p.add_argument("--skip-timelake", action="store_true", help="measure the peers only")
    args = p.parse_args(argv)
    if min(args.rows, args.devices, args.days, args.batches, args.ingest_runs, args.query_runs) < 1:
        p.error("--rows, --devices, --days, --batches, --ingest-runs and --query-runs must be >= 1")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    started = dt.datetime.now(dt.timezone.utc)

    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="timelake-bench-", dir=args.workdir or "/tmp"))
    log(f"workdir {work}")

    # Data: ends at today's UTC midnight so that no retention could touch it.
    end = started.replace(hour=0, minute=0, second=0, microsecond=0)
    start = end - dt.timedelta(days=args.days)
    t0 = time.perf_counter()
    data = generate(args.rows, args.devices, args.days, args.seed, start)
    gen_s = time.perf_counter() - t0
    log(f"generated {data.num_rows:,} rows x {data.num_columns} columns "
        f"({data.nbytes / 1e6:.0f} MB) in {gen_s:.1f} s")

    report = {
        "benchmark": "ingest_query",
        "argv": argv,
        "started_at": started.isoformat(timespec="seconds"),
        "params": {
            "rows": args.rows, "devices": args.devices, "days": args.days, "batches": args.batches,
            "ingest_runs": args.ingest_runs, "query_runs": args.query_runs, "dedup": args.dedup,
            "seed": args.seed,
        },
        "environment": {"versions": versions(), "machine": machine(),
                        "load_average_1m": {"start": load_average()}},
        "data": {
            "rows": data.num_rows, "devices": args.devices, "days": args.days,
            "start": start.isoformat(), "end": end.isoformat(), "arrow_bytes": data.nbytes,
            "generate_s": gen_s,
        },
    }

    try:
        log("ingest")
        report["ingest"], where = run_ingest(data, args, work)
        del data
        gc.collect()

        device = device_name(args.devices // 2)
        day = start + dt.timedelta(days=args.days // 2)
        queries = make_queries(device, day)
        log("queries")
        report["queries"] = run_queries(args, where, queries)
    finally:
        if args.keep:
            log(f"kept the tables in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    write_report(report, args.out, "latest", md_report, text_report)
    return 0


def write_report(report: dict, out: Path, stem: str, markdown, text) -> None:
    """Stamps the end of a run, writes <stem>.json and markdown(report) as <stem>.md to `out`,
    and prints text(report)."""
    report["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    report["environment"]["load_average_1m"]["end"] = load_average()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(jsonable(report), indent=2) + "\n")
    (out / f"{stem}.md").write_text(markdown(report))
    log("")
    log(text(report))
    log("")
    log(f"wrote {out / (stem + '.json')} and {out / (stem + '.md')}")


if __name__ == "__main__":
    sys.exit(main())
