#!/usr/bin/env python3
"""Small appends, latest() and open latency: timelake vs delta-rs (+ DuckDB).

One run, every system measured side by side on the same data (DESIGN.md §8):

appends  small IoT batches (time, device_id, 3 floats) appended one commit at a time
           * timelake   Table.append(batch, batch_id=...)                         (one handle)
           * delta-rs   write_deltalake(path, batch, mode="append",
                                        commit_properties=CommitProperties(app_transactions=
                                        [Transaction(app_id, version)]))          (the brief's form)
           * delta-rs   the same with a DeltaTable handle instead of the path     (no re-open)
         1, 10 and 100 rows per append by one writer, then 4 writer *processes* appending 10-row
         batches to one table: commits/s, p50/p99 wall time of the append call, commit attempts.
latest   the newest row of each of 1,000 series in a table built by 200 appends
           * timelake   lake.latest(name)                     (the last-value index)
           * timelake   lake.sql(QUALIFY row_number() ... = 1) and lake.sql(arg_max ... GROUP BY)
           * delta-rs + DuckDB: DeltaTable(path).file_uris() + read_parquet, arg_max / QUALIFY
         before and after t.maintain() (which folds the index); every answer is compared with
         the ground truth computed by DuckDB over the in-memory data.
open     timelake.Lake(path).table(name) (a fresh Lake each time) vs deltalake.DeltaTable(path)
         after 10, 100, 500 and 1,000 commits.

Ratios are peer / timelake: > 1 means timelake is faster (for commits/s: timelake's rate over the
peer's, so > 1 still means timelake is faster). Results go to bench/results/commits_latest.json
and .md. A benchmark measures; it never asserts: a system that fails is reported with its error.

    .venv/bin/python bench/bench_commits_latest.py --appends 100 --open-at 10,100   # quick
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import math
import multiprocessing as mp
import os
import queue
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest_query import (  # noqa: E402 - the shared helpers of the first benchmark
    SCHEMA,
    device_name,
    duckdb_connection,
    error_text,
    jsonable,
    load_average,
    local_path,
    log,
    machine,
    md_table,
    sql_list,
    text_table,
    versions,
    write_report,
)

HERE = Path(__file__).resolve().parent
TABLE = "bench.readings"
US_PER_S = 1_000_000
US_PER_DAY = 86_400 * US_PER_S

TL = "timelake Table.append(batch_id)"
DELTA_PATH = "delta-rs write_deltalake(path)"
DELTA_HANDLE = "delta-rs write_deltalake(DeltaTable)"
ARCTIC_APPEND = "ArcticDB append (LMDB)"

TL_LATEST = "timelake lake.latest"
TL_LATEST_NEW = "timelake Lake(path).latest (a new Lake each time)"
TL_QUALIFY = "timelake lake.sql QUALIFY row_number"
TL_ARGMAX = "timelake lake.sql arg_max"
DELTA_ARGMAX = "delta-rs + DuckDB arg_max"
DELTA_QUALIFY = "delta-rs + DuckDB QUALIFY row_number"

TL_OPEN = "timelake Lake(path).table(name)"
DELTA_OPEN = "deltalake.DeltaTable(path)"
DELTA_SAME_OPEN = "deltalake.DeltaTable(path) on timelake's table"

QUALIFY_SQL = ("SELECT * FROM {src} "
               "QUALIFY row_number() OVER (PARTITION BY device_id ORDER BY time DESC) = 1 "
               "ORDER BY device_id")
ARGMAX_SQL = ("SELECT device_id, max(time) AS time, arg_max(temp, time) AS temp, "
              "arg_max(humidity, time) AS humidity, arg_max(pressure, time) AS pressure "
              "FROM {src} GROUP BY device_id ORDER BY device_id")


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def pct(values, q: float):
    """Nearest-rank percentile (p99 of 300 samples is the 3rd largest), None if empty."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def small_batch(start_us: int, first: int, n: int, devices: int) -> pa.Table:
    """Rows first .. first+n-1 of an endless IoT stream: one reading per second, devices in turn.

    Row k is device k % devices at start + k seconds: time-ordered, no two rows share
    (device, time), so no dedup policy changes anything.
    """
    k = np.arange(first, first + n, dtype=np.int64)
    names = pa.array([device_name(int(i)) for i in (k % devices)], pa.string())
    phase = (k % 1000) / 1000.0
    return pa.table(
        {
            "time": pa.array(start_us + k * US_PER_S, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "device_id": names,
            "temp": pa.array(20.0 + 5.0 * np.sin(2 * np.pi * phase)),
            "humidity": pa.array(50.0 + 10.0 * np.cos(2 * np.pi * phase)),
            "pressure": pa.array(1013.0 + phase),
        },
        schema=SCHEMA,
    )


def generate_stream(rows: int, devices: int, days: int, seed: int, start: dt.datetime) -> pa.Table:
    """Readings in arrival order (time-ordered, devices interleaved), unique times per device."""
    rng = np.random.default_rng(seed)
    steps = math.ceil(rows / devices)
    interval = days * US_PER_DAY / steps
    idx = np.arange(rows, dtype=np.int64)
    step, dev = np.divmod(idx, devices)
    offset = rng.random(devices) * 0.6 + 0.2
    jitter = rng.uniform(-0.15, 0.15, rows)
    t = int(start.timestamp()) * US_PER_S + ((step + offset[dev] + jitter) * interval).astype(np.int64)
    names = pa.array([device_name(i) for i in range(devices)], pa.string())
    return pa.table(
        {
            "time": pa.array(t, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "device_id": names.take(pa.array(dev.astype(np.int32))),
            "temp": pa.array(rng.normal(25.0, 5.0, rows)),
            "humidity": pa.array(rng.uniform(20.0, 90.0, rows)),
            "pressure": pa.array(rng.normal(1013.0, 3.0, rows)),
        },
        schema=SCHEMA,
    )


def create_tl(lake_dir: Path):
    import timelake

    lake = timelake.Lake(str(lake_dir))
    t = lake.create_table(TABLE, SCHEMA, time_column="time", series_key=["device_id"], chunk="day",
                          dedup="last")
    return lake, t


def tl_table_dir(lake_dir: Path) -> Path:
    ns, name = TABLE.split(".")
    return lake_dir / ns / name


def create_delta(path: Path):
    from deltalake import DeltaTable

    return DeltaTable.create(str(path), schema=SCHEMA)  # version 0, like timelake's create_table


def delta_props(app_id: str, version: int):
    """CommitProperties recording a Delta `txn` (app id, version): delta-rs's analogue of a batch id.

    write_deltalake records it but does not check it: a replayed batch is written again.
    """
    from deltalake import CommitProperties, Transaction

    return CommitProperties(app_transactions=[Transaction(app_id, version)])


def log_state(log_dir: Path) -> dict:
    """What a reader of this _delta_log must read: newest checkpoint and the commits after it."""
    names = os.listdir(log_dir) if log_dir.is_dir() else []
    commits = sorted(int(n[:20]) for n in names if n.endswith(".json") and n[:20].isdigit())
    cps = sorted({int(n[:20]) for n in names if ".checkpoint." in n and n[:20].isdigit()})
    version = commits[-1] if commits else None
    cp = cps[-1] if cps else None
    after = [c for c in commits if cp is None or c > cp]
    return {"version": version, "checkpoints": len(cps), "checkpoint_versions_first": cps[:3],
            "last_checkpoint": cp, "commits_after_checkpoint": len(after),
            "log_objects_to_read": len(after) + (1 if cp is not None else 0)}


def installed_timelake() -> dict:
    """Which timelake build is measured: the repository's HEAD may be newer than the installed one."""
    try:
        import timelake

        mod = Path(timelake.__file__).resolve().parent
        cores = sorted(mod.glob("_core*.so"))
        built = (dt.datetime.fromtimestamp(cores[0].stat().st_mtime, dt.timezone.utc)
                 .isoformat(timespec="seconds") if cores else None)
        return {"module": str(mod), "core_built_at": built}
    except Exception as e:  # noqa: BLE001
        return {"error": error_text(e)}


def cpu_busy_pct(seconds: float = 1.0) -> float | None:
    """Share of all CPUs busy over `seconds` (before the run starts: other work skews figures)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    try:
        t0, i0 = sample()
        time.sleep(seconds)
        t1, i1 = sample()
        return round(100.0 * (1 - (i1 - i0) / max(1, t1 - t0)), 1)
    except (OSError, ValueError, IndexError):
        return None


def normalize(table: pa.Table) -> pa.Table:
    """Columns in SCHEMA order and types, sorted by device_id, one chunk: for exact comparison."""
    t = table.select(SCHEMA.names)
    t = pa.table([t.column(n).cast(f.type) for n, f in zip(SCHEMA.names, SCHEMA)], schema=SCHEMA)
    return t.sort_by("device_id").combine_chunks()


# ---------------------------------------------------------------------------------------------
# Part 1: small appends, one writer
# ---------------------------------------------------------------------------------------------


def append_loop(append, batches) -> dict:
    """append(i, batch) -> dict | None per batch; wall time of every call, errors recorded."""
    lat, commit_ms, attempts, errors, dups, vers = [], [], [], [], 0, []
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        for i, b in enumerate(batches):
            s = time.perf_counter()
            try:
                res = append(i, b)
            except Exception as e:  # noqa: BLE001 - report, never abort
                errors.append(error_text(e))
                continue
            lat.append(time.perf_counter() - s)
            if res:
                commit_ms.append(res.get("commit_ms"))
                attempts.append(res.get("attempts"))
                vers.append(res.get("version"))
                dups += bool(res.get("duplicate"))
        wall = time.perf_counter() - t0
    finally:
        gc.enable()
    ok = len(lat)
    out = {
        "commits": ok, "wall_s": wall, "commits_per_s": ok / wall if wall > 0 else None,
        "p50_ms": pct(lat, 0.50) and pct(lat, 0.50) * 1e3, "p99_ms": pct(lat, 0.99) and pct(lat, 0.99) * 1e3,
        "max_ms": max(lat) * 1e3 if lat else None, "errors": len(errors), "error_samples": errors[:3],
    }
    if commit_ms:
        out["commit_ms_p50"] = pct([c for c in commit_ms if c is not None], 0.50)
        out["commit_ms_p99"] = pct([c for c in commit_ms if c is not None], 0.99)
        out["max_attempts"] = max(a for a in attempts if a is not None)
        out["duplicates"] = dups
        out["by_commit_kind"] = by_commit_kind(lat, vers)
    return out


# What else a timelake append leads to on some versions: a checkpoint every
# delta.checkpointInterval (10) commits (docs/format.md) and a fold of the last-value index every
# 32 commits (kIndexFoldInterval in src/timelake/table/latest.cc). Both run on the handle's upkeep
# thread after the append returned; the split shows whether they still cost the caller anything.
TL_CHECKPOINT_EVERY = 10
TL_FOLD_EVERY = 32


def by_commit_kind(lat, vers) -> dict:
    kinds = {"index fold (version % 32 == 0)": [], "checkpoint (version % 10 == 0)": [], "plain": []}
    for x, v in zip(lat, vers):
        if v is None:
            continue
        if v % TL_FOLD_EVERY == 0:
            kinds["index fold (version % 32 == 0)"].append(x)
        elif v % TL_CHECKPOINT_EVERY == 0:
            kinds["checkpoint (version % 10 == 0)"].append(x)
        else:
            kinds["plain"].append(x)
    return {k: {"n": len(v), "p50_ms": pct(v, 0.5) * 1e3, "max_ms": max(v) * 1e3}
            for k, v in kinds.items() if v}


def best_run(runs: list[dict]) -> dict:
    good = [r for r in runs if r.get("commits_per_s")]
    return max(good, key=lambda r: r["commits_per_s"]) if good else runs[-1]


def run_single(args, work: Path, start_us: int) -> list[dict]:
    from deltalake import DeltaTable, write_deltalake

    out = []
    for size in args.sizes:
        batches = [small_batch(start_us, i * size, size, args.devices) for i in range(args.appends)]
        log(f"  {size} row(s) per append, {args.appends} appends")
        systems = []

        def tl_run(dest):
            _lake, t = create_tl(dest)
            res = append_loop(lambda i, b: t.append(b, batch_id=f"w0-{i:06d}"), batches)
            res["final_version"] = t.version
            res["replay_of_batch_0"] = jsonable(t.append(batches[0], batch_id="w0-000000"))
            return res

        def delta_path_run(dest):
            create_delta(dest)
            p = str(dest)

            def one(i, b):
                write_deltalake(p, b, mode="append", commit_properties=delta_props("w0", i))

            res = append_loop(one, batches)
            d = DeltaTable(p)
            res["final_version"] = d.version()
            res["txn_version_w0"] = d.transaction_version("w0")
            res["log"] = log_state(dest / "_delta_log")
            return res

        def delta_handle_run(dest):
            d = create_delta(dest)

            def one(i, b):
                write_deltalake(d, b, mode="append", commit_properties=delta_props("w0", i))

            res = append_loop(one, batches)
            res["final_version"] = DeltaTable(str(dest)).version()
            return res

        def arctic_run(dest):
            import arcticdb

            frames = [b.to_pandas().set_index("time") for b in batches]  # converted before the clock
            lib = arcticdb.Arctic(f"lmdb://{dest}").get_library("bench", create_if_missing=True)
            res = append_loop(lambda i, f: (lib.append("readings", f), None)[1], frames)
            res["rows_after"] = len(lib.read("readings").data)
            return res

        if not args.skip_timelake:
            systems.append((TL, "timelake", tl_run))
        if not args.skip_arcticdb:
            systems.append((ARCTIC_APPEND, "arcticdb", arctic_run))
        if not args.skip_delta:
            systems.append((DELTA_PATH, "delta_path", delta_path_run))
            if not args.skip_delta_handle:
                systems.append((DELTA_HANDLE, "delta_handle", delta_handle_run))
        entries = []
        for name, key, fn in systems:
            entry = {"system": name, "key": key, "runs": [], "error": None}
            for r in range(args.append_runs):
                dest = work / f"single-{size}-{key}-{r}"
                try:
                    entry["runs"].append(fn(dest))
                except Exception as e:  # noqa: BLE001
                    entry["error"] = error_text(e)
                    entry["traceback"] = traceback.format_exc()
                    log(f"    {name}: FAILED {entry['error']}")
                    break
                run = entry["runs"][-1]
                log(f"    {name}: run {r + 1}/{args.append_runs} {run['commits_per_s']:.0f} commits/s, "
                    f"p50 {run['p50_ms']:.2f} ms, p99 {run['p99_ms']:.2f} ms"
                    + (f", {run['errors']} errors" if run["errors"] else ""))
            if entry["runs"]:
                entry["best"] = best_run(entry["runs"])
            entries.append(entry)
        add_append_ratios(entries)
        out.append({"rows_per_append": size, "appends": args.appends, "results": entries})
    return out


def add_append_ratios(entries):
    base = next((e for e in entries if e["key"] == "timelake" and e.get("best")), None)
    for e in entries:
        b = e.get("best")
        if not b or not base:
            continue
        bb = base["best"]
        if b.get("commits_per_s") and bb.get("commits_per_s"):
            e["ratio_rate"] = bb["commits_per_s"] / b["commits_per_s"]
        if b.get("p50_ms") and bb.get("p50_ms"):
            e["ratio_p50"] = b["p50_ms"] / bb["p50_ms"]
        if b.get("p99_ms") and bb.get("p99_ms"):
            e["ratio_p99"] = b["p99_ms"] / bb["p99_ms"]


# ---------------------------------------------------------------------------------------------
# Part 1b: concurrent writer processes
# ---------------------------------------------------------------------------------------------


def writer_process(system, path, worker, appends, size, devices, start_us, first_row, warm_row, barrier,
                   results):
    """One writer process: open, build its batches, make one untimed warm-up append (a fresh
    process's first append pays for its imports and first allocations; the one-writer runs are
    timed in this benchmark's own, warm process), wait for the others, append, report."""
    out = {"worker": worker, "lat": [], "starts": [], "ends": [], "attempts": [], "commit_ms": [],
           "duplicates": 0, "errors": []}
    try:
        batches = [small_batch(start_us, first_row + i * size, size, devices) for i in range(appends)]
        if system == "timelake":
            import timelake

            t = timelake.Lake(str(path)).table(TABLE)

            def one(i, b):
                return t.append(b, batch_id=f"w{worker}-{i:06d}")
        else:
            from deltalake import write_deltalake

            def one(i, b):
                write_deltalake(str(path), b, mode="append", commit_properties=delta_props(f"w{worker}", i))
                return None
        warm = small_batch(start_us, warm_row, size, devices)
        if system == "timelake":
            t.append(warm, batch_id=f"w{worker}-warmup")
        else:
            write_deltalake(str(path), warm, mode="append", commit_properties=delta_props(f"w{worker}-warmup", 0))
        barrier.wait(timeout=120)
        gc.disable()
        for i, b in enumerate(batches):
            s = time.monotonic()
            try:
                res = one(i, b)
            except Exception as e:  # noqa: BLE001 - report, never abort
                out["errors"].append(error_text(e))
                continue
            e_ = time.monotonic()
            out["lat"].append(e_ - s)
            out["starts"].append(s)
            out["ends"].append(e_)
            out["attempts"].append(res.get("attempts") if res else None)
            if res:
                out["commit_ms"].append(res.get("commit_ms"))
                out["duplicates"] += bool(res.get("duplicate"))
    except Exception as e:  # noqa: BLE001
        out["fatal"] = error_text(e)
        out["traceback"] = traceback.format_exc()
    results.put(out)


def run_concurrent_once(system: str, path: Path, args, start_us: int) -> dict:
    ctx = mp.get_context("spawn")  # a clean interpreter per writer: no forked native threads
    per = args.appends // args.writers
    barrier = ctx.Barrier(args.writers)
    results = ctx.Queue()
    procs = []
    for w in range(args.writers):
        p = ctx.Process(target=writer_process,
                        args=(system, path, w, per, args.concurrent_size, args.devices, start_us,
                              w * per * args.concurrent_size,
                              (args.writers * per + w) * args.concurrent_size,  # after every timed row
                              barrier, results))
        p.start()
        procs.append(p)
    outs, deadline = [], time.monotonic() + args.concurrent_timeout
    while len(outs) < len(procs) and time.monotonic() < deadline:
        try:
            outs.append(results.get(timeout=1))
        except queue.Empty:
            if not any(p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():  # only the processes this run started, by their handle
            p.terminate()
            p.join(timeout=10)
    lat = [x for o in outs for x in o["lat"]]
    starts = [x for o in outs for x in o["starts"]]
    ends = [x for o in outs for x in o["ends"]]
    errors = [x for o in outs for x in o["errors"]]
    attempts = [a for o in outs for a in o["attempts"] if a is not None]
    slowest = sorted(((x * 1e3, a, o["worker"]) for o in outs for x, a in zip(o["lat"], o["attempts"])),
                     key=lambda r: r[0], reverse=True)[:5]
    commit_ms = [c for o in outs for c in o["commit_ms"] if c is not None]
    wall = (max(ends) - min(starts)) if ends else None
    res = {
        "writers": args.writers, "appends_per_writer": per, "commits": len(lat), "wall_s": wall,
        "commits_per_s": len(lat) / wall if wall else None,
        "p50_ms": pct(lat, 0.50) * 1e3 if lat else None, "p99_ms": pct(lat, 0.99) * 1e3 if lat else None,
        "max_ms": max(lat) * 1e3 if lat else None,
        "errors": len(errors), "error_samples": sorted(set(errors))[:5],
        "slowest_appends": [{"ms": ms, "attempts": a, "worker": w} for ms, a, w in slowest],
        "workers_reported": len(outs),
        "fatal": [o["fatal"] for o in outs if "fatal" in o] + (
            [f"{len(procs) - len(outs)} writer(s) did not report"] if len(outs) < len(procs) else []),
    }
    if attempts:
        res["max_attempts"] = max(attempts)
        res["mean_attempts"] = sum(attempts) / len(attempts)
        res["appends_rebased"] = sum(a > 1 for a in attempts)
        res["commit_ms_p50"] = pct(commit_ms, 0.50)
        res["commit_ms_p99"] = pct(commit_ms, 0.99)
        res["duplicates"] = sum(o["duplicates"] for o in outs)
    res["check"] = check_concurrent(system, path, args, per, len(lat))
    return res


def check_concurrent(system: str, path: Path, args, per: int, acknowledged: int) -> dict:
    """What the table holds afterwards (a measurement, not an assertion)."""
    expected_rows = (acknowledged + args.writers) * args.concurrent_size  # with one warm-up append each
    warmups = args.writers
    try:
        if system == "timelake":
            import timelake

            lake = timelake.Lake(str(path))
            t = lake.table(TABLE)
            rows = lake.sql(f"SELECT count(*) AS n FROM {TABLE}").column(0)[0].as_py()
            # WRITE commits hold the acknowledged appends: one each, or several when writer
            # processes shared a commit (group commit across processes: operationParameters
            # "timelake.groupedAppends"); the other commits are background compactions (OPTIMIZE).
            ops, appends_committed = {}, 0
            for f in sorted((path / "bench" / "readings" / "_delta_log").glob("*.json")):
                first = json.loads(f.read_text().splitlines()[0])
                info = first.get("commitInfo", {})
                op = info.get("operation", "?")
                ops[op] = ops.get(op, 0) + 1
                if op == "WRITE":
                    appends_committed += int(info.get("operationParameters", {}).get("timelake.groupedAppends", 1))
            return {"version": t.version, "rows": rows, "expected_rows": expected_rows, "operations": ops,
                    "appends_committed": appends_committed,
                    "appends_per_write_commit": appends_committed / max(1, ops.get("WRITE", 0)),
                    "ok": rows == expected_rows and appends_committed == acknowledged + warmups}
        from deltalake import DeltaTable

        d = DeltaTable(str(path))
        rows = count_delta_rows(d)
        txn = {f"w{w}": d.transaction_version(f"w{w}") for w in range(args.writers)}
        return {"version": d.version(), "rows": rows, "expected_rows": expected_rows,
                "txn_versions": txn, "ok": rows == expected_rows and d.version() == acknowledged + warmups}
    except Exception as e:  # noqa: BLE001
        return {"error": error_text(e), "ok": False}


def count_delta_rows(d) -> int:
    con = duckdb_connection()
    files = [local_path(u) for u in d.file_uris()]
    if not files:
        return 0
    return con.execute(f"SELECT count(*) FROM read_parquet({sql_list(files)})").fetchone()[0]


def run_concurrent(args, work: Path, start_us: int) -> dict:
    log(f"  {args.writers} writer processes x {args.appends // args.writers} appends of "
        f"{args.concurrent_size} rows")
    systems = []
    if not args.skip_timelake:
        systems.append((TL, "timelake"))
    if not args.skip_delta:
        systems.append((DELTA_PATH, "delta_path"))
    entries = []
    for name, key in systems:
        entry = {"system": name, "key": key, "runs": [], "error": None}
        for r in range(args.append_runs):
            dest = work / f"concurrent-{key}-{r}"
            try:
                if key == "timelake":
                    create_tl(dest)
                    run = run_concurrent_once("timelake", dest, args, start_us)
                else:
                    create_delta(dest)
                    run = run_concurrent_once("delta", dest, args, start_us)
                    run["log"] = log_state(dest / "_delta_log")
            except Exception as e:  # noqa: BLE001
                entry["error"] = error_text(e)
                entry["traceback"] = traceback.format_exc()
                log(f"    {name}: FAILED {entry['error']}")
                break
            entry["runs"].append(run)
            rate = run["commits_per_s"]
            log(f"    {name}: run {r + 1}/{args.append_runs} "
                + (f"{rate:.0f} commits/s, p50 {run['p50_ms']:.2f} ms, p99 {run['p99_ms']:.2f} ms"
                   if rate else "no commits")
                + (f", max attempts {run['max_attempts']}" if "max_attempts" in run else "")
                + (f", {run['errors']} errors ({run['error_samples'][0][:120]})" if run["errors"] else "")
                + (f", FATAL {run['fatal']}" if run["fatal"] else "")
                + f", table check {'ok' if run['check'].get('ok') else run['check']}")
        if entry["runs"]:
            entry["best"] = best_run(entry["runs"])
        entries.append(entry)
    add_append_ratios(entries)
    return {"writers": args.writers, "rows_per_append": args.concurrent_size,
            "appends": (args.appends // args.writers) * args.writers, "results": entries}


# ---------------------------------------------------------------------------------------------
# Part 2: latest()
# ---------------------------------------------------------------------------------------------


def measure(runs: int, once):
    """once() -> (table, extras dict seconds); best of runs."""
    entry = {"times_ms": [], "error": None}
    extras, result = {}, None
    for _ in range(runs):
        gc.collect()
        try:
            t0 = time.perf_counter()
            result, extra = once()
            entry["times_ms"].append((time.perf_counter() - t0) * 1e3)
        except Exception as e:  # noqa: BLE001
            entry["error"] = error_text(e)
            entry["traceback"] = traceback.format_exc()
            return entry, None
        for k, v in (extra or {}).items():
            extras.setdefault(k, []).append(v * 1e3)
    entry["best_ms"] = min(entry["times_ms"])
    for k, v in extras.items():
        entry["best_" + k + "_ms"] = min(v)
    entry["result_rows"] = result.num_rows
    return entry, result


def run_latest(args, work: Path, started: dt.datetime) -> dict:
    import timelake
    from deltalake import DeltaTable, write_deltalake

    rows = args.latest_appends * args.latest_rows
    end = started.replace(hour=0, minute=0, second=0, microsecond=0)
    start = end - dt.timedelta(days=args.latest_days)
    data = generate_stream(rows, args.latest_series, args.latest_days, args.seed, start)
    log(f"  data: {rows:,} rows, {args.latest_series:,} series, {args.latest_days} day(s), "
        f"built by {args.latest_appends} appends of {args.latest_rows:,} rows")
    con = duckdb_connection()
    truth = normalize(con.sql(ARGMAX_SQL.format(src="data")).to_arrow_table())
    slices = [data.slice(i * args.latest_rows, args.latest_rows) for i in range(args.latest_appends)]

    out = {"rows": rows, "series": args.latest_series, "appends": args.latest_appends,
           "rows_per_append": args.latest_rows, "days": args.latest_days, "build": {}}
    tl_dir, delta_dir = work / "latest-timelake", work / "latest-delta"
    lake = t = None
    if not args.skip_timelake:
        lake, t = create_tl(tl_dir)
        t0 = time.perf_counter()
        for i, s in enumerate(slices):
            t.append(s, batch_id=f"load-{i:06d}")
        out["build"]["timelake_s"] = time.perf_counter() - t0
        out["build"]["timelake_info"] = jsonable(t.info())
    if not args.skip_delta:
        create_delta(delta_dir)
        t0 = time.perf_counter()
        for i, s in enumerate(slices):
            write_deltalake(str(delta_dir), s, mode="append", commit_properties=delta_props("load", i))
        out["build"]["delta_s"] = time.perf_counter() - t0
        out["build"]["delta_files"] = len(DeltaTable(str(delta_dir)).file_uris())
        out["build"]["delta_log"] = log_state(delta_dir / "_delta_log")
    del data
    gc.collect()
    log(f"    built: timelake {out['build'].get('timelake_s', float('nan')):.1f} s, "
        f"delta-rs {out['build'].get('delta_s', float('nan')):.1f} s")

    def delta_once(sql):
        def once():
            t0 = time.perf_counter()
            files = [local_path(u) for u in DeltaTable(str(delta_dir)).file_uris()]
            opened = time.perf_counter() - t0
            return con.sql(sql.format(src=f"read_parquet({sql_list(files)})")).to_arrow_table(), {"open": opened}
        return once

    def systems():
        s = []
        if lake is not None:
            s += [
                (TL_LATEST, "timelake", lambda: (lake.latest(TABLE), None)),
                (TL_LATEST_NEW, "timelake_new_lake", lambda: (timelake.Lake(str(tl_dir)).latest(TABLE), None)),
                (TL_QUALIFY, "timelake_qualify", lambda: (lake.sql(QUALIFY_SQL.format(src=TABLE)), None)),
                (TL_ARGMAX, "timelake_argmax", lambda: (lake.sql(ARGMAX_SQL.format(src=TABLE)), None)),
            ]
        if not args.skip_delta:
            s += [(DELTA_ARGMAX, "delta_argmax", delta_once(ARGMAX_SQL)),
                  (DELTA_QUALIFY, "delta_qualify", delta_once(QUALIFY_SQL))]
        return s

    phases = []
    for phase in ("before maintain()", "after maintain()"):
        if phase.startswith("after"):
            if t is None:
                break
            t0 = time.perf_counter()
            m = t.maintain()
            out["maintain"] = {"seconds_wall": time.perf_counter() - t0, "result": jsonable(m),
                               "info_after": jsonable(t.info())}
            log(f"    t.maintain(): {out['maintain']['seconds_wall'] * 1e3:.0f} ms, {jsonable(m)}")
        log(f"  latest, {phase}")
        entries = []
        for name, key, once in systems():
            entry, res = measure(args.query_runs, once)
            entry.update(system=name, key=key)
            if res is not None:
                try:
                    entry["same_rows_as_truth"] = normalize(res).equals(truth)
                except Exception as e:  # noqa: BLE001
                    entry["same_rows_as_truth"] = False
                    entry["compare_error"] = error_text(e)
            if entry["error"]:
                log(f"    {name}: FAILED {entry['error']}")
            else:
                log(f"    {name}: best {entry['best_ms']:.2f} ms "
                    f"(runs {', '.join(f'{x:.1f}' for x in entry['times_ms'])}), "
                    f"{entry['result_rows']} rows, same as truth: {entry.get('same_rows_as_truth')}")
            entries.append(entry)
        base = next((e for e in entries if e["key"] == "timelake" and "best_ms" in e), None)
        for e in entries:
            if base and "best_ms" in e:
                e["ratio"] = e["best_ms"] / base["best_ms"]
        phases.append({"phase": phase, "results": entries})
    out["phases"] = phases
    out["sql"] = {"qualify": QUALIFY_SQL, "arg_max": ARGMAX_SQL}
    return out


# ---------------------------------------------------------------------------------------------
# Part 3: open latency as the log grows
# ---------------------------------------------------------------------------------------------


def run_open(args, work: Path, start_us: int) -> dict:
    import timelake
    from deltalake import DeltaTable, write_deltalake

    marks = sorted(set(args.open_at))
    tl_dir, delta_dir = work / "open-timelake", work / "open-delta"
    t = None
    if not args.skip_timelake:
        _lake, t = create_tl(tl_dir)
    if not args.skip_delta:
        create_delta(delta_dir)
    done, grow = 0, {"timelake_s": 0.0, "delta_s": 0.0}
    points = []
    log(f"  growing both logs by 1-row appends to {marks[-1]:,} commits")
    for mark in marks:
        batches = [small_batch(start_us, i, 1, args.devices) for i in range(done, mark)]
        if t is not None:
            t0 = time.perf_counter()
            for i, b in zip(range(done, mark), batches):
                t.append(b, batch_id=f"open-{i:06d}")
            grow["timelake_s"] += time.perf_counter() - t0
        if not args.skip_delta:
            t0 = time.perf_counter()
            for i, b in zip(range(done, mark), batches):
                write_deltalake(str(delta_dir), b, mode="append", commit_properties=delta_props("open", i))
            grow["delta_s"] += time.perf_counter() - t0
        done = mark
        entries = []
        if t is not None:
            def tl_once():
                tab = timelake.Lake(str(tl_dir)).table(TABLE)
                return tab.version
            entry = time_open(args.open_runs, tl_once)
            entry.update(system=TL_OPEN, key="timelake", log=log_state(tl_table_dir(tl_dir) / "_delta_log"))
            try:
                entry["info_manifests"] = timelake.Lake(str(tl_dir)).table(TABLE).info()["manifests"]
            except Exception as e:  # noqa: BLE001
                entry["info_manifests"] = error_text(e)
            entries.append(entry)
            # The same table opened by delta-rs: one log, both readers (and no growing of a second
            # log by 10,000 write_deltalake calls, which takes most of an hour on 2 cores).
            entry = time_open(args.open_runs, lambda: DeltaTable(str(tl_table_dir(tl_dir))).version())
            entry.update(system=DELTA_SAME_OPEN, key="delta_same", log=log_state(tl_table_dir(tl_dir) / "_delta_log"))
            entries.append(entry)
        if not args.skip_delta:
            entry = time_open(args.open_runs, lambda: DeltaTable(str(delta_dir)).version())
            entry.update(system=DELTA_OPEN, key="delta", log=log_state(delta_dir / "_delta_log"))
            entries.append(entry)
        base = next((e for e in entries if e["key"] == "timelake" and "best_ms" in e), None)
        for e in entries:
            if base and "best_ms" in e:
                e["ratio"] = e["best_ms"] / base["best_ms"]
            if e.get("error"):
                log(f"    {mark} commits: {e['system']}: FAILED {e['error']}")
            else:
                lg = e["log"]
                log(f"    {mark} commits: {e['system']}: best {e['best_ms']:.2f} ms, median "
                    f"{e['median_ms']:.2f} ms (version {e['version']}; checkpoint "
                    f"{lg['last_checkpoint']} + {lg['commits_after_checkpoint']} commits)")
        points.append({"commits": mark, "results": entries})
    return {"points": points, "grow": grow, "open_runs": args.open_runs}


def time_open(runs: int, once) -> dict:
    entry = {"times_ms": [], "error": None}
    for _ in range(runs):
        gc.collect()
        try:
            t0 = time.perf_counter()
            entry["version"] = once()
            entry["times_ms"].append((time.perf_counter() - t0) * 1e3)
        except Exception as e:  # noqa: BLE001
            entry["error"] = error_text(e)
            entry["traceback"] = traceback.format_exc()
            return entry
    entry["best_ms"] = min(entry["times_ms"])
    entry["median_ms"] = pct(entry["times_ms"], 0.5)
    return entry


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------


def fx(r) -> str:
    return "" if r is None else f"{r:.2f}x"


def fms(v, digits=2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


APPEND_HEAD = ["system", "commits/s", "p50 ms", "p99 ms", "max ms", "max attempts", "errors",
               "timelake rate / rate", "p50 / timelake", "p99 / timelake"]


def append_rows(entries) -> list[list[str]]:
    rows = []
    for e in entries:
        b = e.get("best")
        if e.get("error") or not b:
            rows.append([e["system"], "FAILED"] + [""] * (len(APPEND_HEAD) - 2))
            continue
        errs = str(b.get("errors", 0))
        if b.get("fatal"):
            errs += " + " + "; ".join(b["fatal"])[:80]
        rate = b.get("commits_per_s")
        rows.append([
            e["system"], "n/a" if not rate else f"{rate:.0f}", fms(b.get("p50_ms")), fms(b.get("p99_ms")),
            fms(b.get("max_ms"), 1), str(b.get("max_attempts", "n/a")), errs,
            fx(e.get("ratio_rate")), fx(e.get("ratio_p50")), fx(e.get("ratio_p99")),
        ])
    return rows


LATEST_HEAD = ["system", "best ms", "of which open ms", "rows", "same rows", "time / latest()"]


def latest_rows(entries) -> list[list[str]]:
    rows = []
    for e in entries:
        if e.get("error"):
            rows.append([e["system"], "FAILED", "", "", "", ""])
            continue
        same = e.get("same_rows_as_truth")
        rows.append([e["system"], fms(e["best_ms"]), fms(e.get("best_open_ms")) if "best_open_ms" in e else "",
                     f"{e['result_rows']:,}", {True: "yes", False: "NO", None: "?"}[same],
                     fx(e.get("ratio"))])
    return rows


OPEN_HEAD = ["commits", "timelake ms", "timelake log read", "delta-rs ms", "delta-rs log read",
             "delta-rs / timelake", "delta-rs on timelake's table ms", "ratio"]


def open_rows(part) -> list[list[str]]:
    rows = []

    def lg(e):
        if not e:
            return ""
        g = e["log"]
        return (f"cp {g['last_checkpoint']} + {g['commits_after_checkpoint']}"
                if g["last_checkpoint"] is not None else f"{g['commits_after_checkpoint']} commits")

    for p in part["points"]:
        by = {e["key"]: e for e in p["results"]}
        tl, de, same = by.get("timelake"), by.get("delta"), by.get("delta_same")
        rows.append([
            f"{p['commits']:,}",
            "FAILED" if tl and tl.get("error") else fms(tl and tl.get("best_ms")), lg(tl),
            "FAILED" if de and de.get("error") else fms(de and de.get("best_ms")), lg(de),
            fx(de and de.get("ratio")),
            "FAILED" if same and same.get("error") else fms(same and same.get("best_ms")),
            fx(same and same.get("ratio")),
        ])
    return rows


def sections(report):
    """(title, detail, head, rows) for both the text and the Markdown report."""
    out = []
    for s in report.get("single", []):
        out.append(("Small appends, one writer", f"{s['rows_per_append']} row(s) per append, "
                    f"{s['appends']} appends", APPEND_HEAD, append_rows(s["results"])))
    c = report.get("concurrent")
    if c:
        out.append(("Concurrent appends", f"{c['writers']} writer processes, {c['rows_per_append']} rows "
                    f"per append, {c['appends']} appends in all (timed; each writer made one untimed "
                    f"warm-up append first)", APPEND_HEAD, append_rows(c["results"])))
    lt = report.get("latest")
    if lt:
        for ph in lt.get("phases", []):
            out.append((f"latest(), {ph['phase']}", f"{lt['series']:,} series, {lt['rows']:,} rows from "
                        f"{lt['appends']} appends", LATEST_HEAD, latest_rows(ph["results"])))
    op = report.get("open")
    if op:
        out.append(("Open latency as the log grows", "best of "
                    f"{op['open_runs']} ('cp V + n': newest checkpoint and the commits after it)",
                    OPEN_HEAD, open_rows(op)))
    return out


def text_report(report) -> str:
    parts = [f"timelake bench: commits, latest, open   {report['finished_at']}",
             "ratios: > 1 means timelake is faster"]
    for title, detail, head, rows in sections(report):
        parts += ["", f"{title.upper()}: {detail}", text_table(head, rows)]
    return "\n".join(parts)


def md_report(report) -> str:
    env, p = report["environment"], report["params"]
    v, m = env["versions"], env["machine"]
    lines = [
        "# Benchmark: small appends, `latest()`, open latency",
        "",
        f"Run {report['finished_at']} by `bench/bench_commits_latest.py` "
        f"(`{' '.join(report['argv']) or '(defaults)'}`), {report['total_s']:.0f} s in all.",
        "",
        "* Every system measured in the same run on the same data. **Ratios > 1 mean timelake is "
        "faster**: for commits/s it is timelake's rate over the peer's, for times the peer's time "
        "over timelake's.",
        f"* Small appends: best of {p['append_runs']} runs (the run with the most commits/s), each into "
        "a fresh table; latency is the wall time of the whole append call, p99 by nearest rank. "
        "timelake table: chunk=day, series_key=[device_id], dedup=last, one `batch_id` per append. "
        "delta-rs: `write_deltalake(..., mode=\"append\", commit_properties=CommitProperties("
        "app_transactions=[Transaction(app_id, i)]))`, which records a Delta `txn` like timelake's "
        "batch id but does not check it (a replayed batch is written again).",
        "* **timelake fsyncs every commit (data files, commit file, folder); delta-rs does not.**",
        f"* latest: best of {p['query_runs']}; `same rows` compares every column of every row with "
        "the ground truth (DuckDB `arg_max` over the in-memory data).",
        f"* open: best of {p['open_runs']}; timelake writes a checkpoint every 10 commits "
        "(`delta.checkpointInterval=10`), delta-rs every 100 by default (observed below).",
        f"* Machine: {m.get('cpu', '?')}, {m.get('cpus')} CPUs, {m.get('memory_gb', '?')} GB; "
        f"Python {v.get('python')}, timelake {v.get('timelake')}, pyarrow {v.get('pyarrow')}, "
        f"deltalake {v.get('deltalake')}, duckdb {v.get('duckdb')}; repository HEAD "
        f"{m.get('git_commit')}, measured build `{env['timelake_installed'].get('module')}` (its core "
        f"built {env['timelake_installed'].get('core_built_at')}); CPUs {env.get('cpu_busy_pct_before')} % "
        f"busy in the second before the run; 1-minute load average "
        f"{env['load_average_1m'].get('start')} at start, {env['load_average_1m'].get('end')} at end "
        "(which includes the benchmark's own work and its fsync waits).",
    ]
    for title, detail, head, rows in sections(report):
        lines += ["", f"## {title}: {detail}", "", md_table(head, rows)]
    lines += md_notes(report)
    return "\n".join(lines) + "\n"


def md_notes(report) -> list[str]:
    notes = []
    c = report.get("concurrent")
    if c:
        for e in c["results"]:
            b = e.get("best") or {}
            chk = b.get("check", {})
            all_samples = sorted({x for r in e["runs"] for x in r.get("error_samples", [])})
            notes.append(f"* Concurrent, {e['system']}: {b.get('commits', 0)} appends acknowledged, "
                         f"table afterwards: version {chk.get('version')}, {chk.get('rows')} rows "
                         f"(expected {chk.get('expected_rows')})"
                         + (f", {chk['appends_committed']} appends in {chk['operations'].get('WRITE', 0)} WRITE "
                            f"commits ({chk['appends_per_write_commit']:.1f} per commit), check "
                            + ("passed" if chk.get("ok") else "FAILED")
                            if "appends_committed" in chk else "")
                         + (f", mean attempts {b['mean_attempts']:.2f}, {b['appends_rebased']} appends "
                            "rebased" if "mean_attempts" in b else "")
                         + (f", delta txn versions {chk['txn_versions']}" if chk.get("txn_versions") else "")
                         + ("; slowest appends: " + ", ".join(
                             f"{x['ms']:.0f} ms" + (f" ({x['attempts']} attempts)" if x["attempts"] else "")
                             for x in b.get("slowest_appends", [])[:3]) if b.get("slowest_appends") else "")
                         + (f"; {b['errors']} failed appends, e.g. `{b['error_samples'][0][:300]}`"
                            if b.get("errors") else "")
                         + (f"; over all {len(e['runs'])} runs: {all_errors} failed appends"
                            + (f" (`{all_samples[0][:200]}`)" if all_samples else "")
                            if (all_errors := sum(r.get("errors", 0) for r in e["runs"])) != b.get("errors", 0)
                            or len(e["runs"]) > 1 else "")
                         + (f"; {'; '.join(b['fatal'])}" if b.get("fatal") else "") + ".")
    for s in report.get("single", []):
        for e in s["results"]:
            if e["key"] == "timelake" and e.get("best"):
                b = e["best"]
                kinds = "; ".join(f"{k}: {v['n']} appends, p50 {v['p50_ms']:.2f} ms, max {v['max_ms']:.2f} ms"
                                  for k, v in b.get("by_commit_kind", {}).items())
                notes.append(f"* {s['rows_per_append']} row(s), timelake: `commit_ms` (first commit "
                             f"attempt to success) p50 {fms(b.get('commit_ms_p50'))} ms, p99 "
                             f"{fms(b.get('commit_ms_p99'))} ms; wall time by commit kind: {kinds}; "
                             f"replaying batch 0 gave `duplicate: "
                             f"{b.get('replay_of_batch_0', {}).get('duplicate')}`.")
    lt = report.get("latest")
    if lt:
        b = lt.get("build", {})
        notes.append(f"* latest table build: timelake {fms(b.get('timelake_s'), 1)} s "
                     f"({b.get('timelake_info', {}).get('size', {}).get('files')} files), delta-rs "
                     f"{fms(b.get('delta_s'), 1)} s ({b.get('delta_files')} files); "
                     f"`maintain()` took {fms(lt.get('maintain', {}).get('seconds_wall', 0) * 1e3, 0)} ms: "
                     f"`{lt.get('maintain', {}).get('result')}`; last-value index before "
                     f"{b.get('timelake_info', {}).get('last_value_index')}, after "
                     f"{lt.get('maintain', {}).get('info_after', {}).get('last_value_index')}.")
        notes += ["", "```sql", "-- QUALIFY form", lt["sql"]["qualify"].format(src="<table>"),
                  "-- arg_max form", lt["sql"]["arg_max"].format(src="<table>"), "```"]
    op = report.get("open")
    if op:
        notes.append(f"* open: growing the logs to {op['points'][-1]['commits']:,} one-row commits took "
                     f"timelake {op['grow']['timelake_s']:.1f} s, delta-rs {op['grow']['delta_s']:.1f} s.")
    errs = collect_errors(report)
    if errs:
        notes += ["", "## Failures", ""] + [f"* {n}: `{e}`" for n, e in errs]
    return ["", "## Notes", ""] + notes if notes else []


def collect_errors(report):
    errs = []
    for s in report.get("single", []):
        errs += [(f"{e['system']} ({s['rows_per_append']} rows)", e["error"]) for e in s["results"] if e.get("error")]
    if report.get("concurrent"):
        errs += [(e["system"] + " (concurrent)", e["error"]) for e in report["concurrent"]["results"] if e.get("error")]
    for ph in (report.get("latest") or {}).get("phases", []):
        errs += [(f"{e['system']} ({ph['phase']})", e["error"]) for e in ph["results"] if e.get("error")]
    for pt in (report.get("open") or {}).get("points", []):
        errs += [(f"{e['system']} ({pt['commits']} commits)", e["error"]) for e in pt["results"] if e.get("error")]
    for k in ("single_error", "concurrent_error", "latest_error", "open_error"):
        if report.get(k):
            errs.append((k, report[k]))
    return errs


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--appends", type=int, default=300, help="appends per one-writer run and in all for "
                   "the concurrent run (default 300)")
    p.add_argument("--sizes", type=int_list, default=[1, 10, 100], help="rows per append (default 1,10,100)")
    p.add_argument("--writers", type=int, default=4, help="concurrent writer processes (default 4)")
    p.add_argument("--concurrent-size", type=int, default=10, help="rows per concurrent append (default 10)")
    p.add_argument("--concurrent-timeout", type=float, default=300, help="seconds before writers are stopped")
    p.add_argument("--append-runs", type=int, default=2, help="best of N for appends (default 2)")
    p.add_argument("--devices", type=int, default=1000, help="device ids the small appends cycle through")
    p.add_argument("--latest-series", type=int, default=1000, help="series in the latest table (default 1000)")
    p.add_argument("--latest-appends", type=int, default=200, help="appends building it (default 200)")
    p.add_argument("--latest-rows", type=int, default=5000, help="rows per such append (default 5000)")
    p.add_argument("--latest-days", type=int, default=2, help="days the latest data spans (default 2)")
    p.add_argument("--query-runs", type=int, default=5, help="best of N for latest queries (default 5)")
    p.add_argument("--open-at", type=int_list, default=[10, 100, 500, 1000],
                   help="commit counts at which to time opening (default 10,100,500,1000)")
    p.add_argument("--open-runs", type=int, default=5, help="best of N for opens (default 5)")
    p.add_argument("--parts", default="single,concurrent,latest,open",
                   help="which parts to run (default single,concurrent,latest,open)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--workdir", type=Path, default=None, help="where to write tables (default: under /tmp)")
    p.add_argument("--keep", action="store_true", help="keep the written tables")
    p.add_argument("--out", type=Path, default=HERE / "results",
                   help="folder for commits_latest.json/.md (default bench/results)")
    p.add_argument("--skip-timelake", action="store_true")
    p.add_argument("--skip-delta", action="store_true")
    p.add_argument("--skip-delta-handle", action="store_true",
                   help="skip the write_deltalake(DeltaTable) variant")
    p.add_argument("--skip-arcticdb", action="store_true", help="skip ArcticDB's append")
    args = p.parse_args(argv)
    args.parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    if min(args.appends, args.writers, args.concurrent_size, args.append_runs, args.devices,
           args.latest_series, args.latest_appends, args.latest_rows, args.latest_days,
           args.query_runs, args.open_runs, *args.sizes, *args.open_at) < 1:
        p.error("sizes, counts and runs must be >= 1")
    if args.appends < args.writers:
        p.error("--appends must be at least --writers")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    started = dt.datetime.now(dt.timezone.utc)
    t_start = time.perf_counter()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="timelake-bench-commits-", dir=args.workdir or "/tmp"))
    log(f"workdir {work}")
    # Small-append rows start one day before today's UTC midnight: all in one day chunk.
    start_us = int((started.replace(hour=0, minute=0, second=0, microsecond=0)
                    - dt.timedelta(days=1)).timestamp()) * US_PER_S

    report = {
        "benchmark": "commits_latest",
        "argv": argv,
        "started_at": started.isoformat(timespec="seconds"),
        "params": {k: (sorted(v) if isinstance(v, set) else str(v) if isinstance(v, Path) else v)
                   for k, v in vars(args).items()},
        "environment": {"versions": versions(), "machine": machine(),
                        "timelake_installed": installed_timelake(),
                        "cpu_busy_pct_before": cpu_busy_pct(),
                        "load_average_1m": {"start": load_average()}},
    }
    log(f"CPUs {report['environment']['cpu_busy_pct_before']} % busy before the run; measuring "
        f"{report['environment']['timelake_installed']}")
    try:
        for part, key, fn in (
            ("single", "single", lambda: run_single(args, work, start_us)),
            ("concurrent", "concurrent", lambda: run_concurrent(args, work, start_us)),
            ("latest", "latest", lambda: run_latest(args, work, started)),
            ("open", "open", lambda: run_open(args, work, start_us)),
        ):
            if part not in args.parts:
                continue
            log(part)
            t0 = time.perf_counter()
            try:
                report[key] = fn()
            except Exception as e:  # noqa: BLE001 - report, never abort the other parts
                report[key + "_error"] = error_text(e)
                report[key + "_traceback"] = traceback.format_exc()
                log(f"  FAILED {report[key + '_error']}")
            log(f"  ({time.perf_counter() - t0:.0f} s)")
    finally:
        # Tables are deleted here, once, not after each run: on ext4 without a journal (this
        # project's benchmark machines) the inode allocator skips inodes freed in the last minute
        # or more, checking each one, so a run right after another run's deletion paid for it in
        # every file it created (bench/README.md, "Where a small append's time goes").
        if args.keep:
            log(f"kept the tables in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    report["total_s"] = time.perf_counter() - t_start
    write_report(report, args.out, "commits_latest", md_report, text_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
