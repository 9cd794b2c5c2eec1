#!/usr/bin/env python3
"""Compaction of many small files: how fast, and in how much memory?

A table receives N small appends (default 1,000 of 10,000 rows: 1,000 devices, ten readings each,
one minute apart, so the appends cover about a week of day chunks), then one call compacts it.
Measured side by side in one run, each in a fresh process:

* timelake `maintain()` on the table (dedup="last", background compaction off so that all N
  files are left to it);
* delta-rs `DeltaTable.optimize.compact()` on the same rows appended with `write_deltalake`
  (it merges files without sorting or deduplicating);
* timelake's bulk append of the same rows in one call (an in-memory table, made before the clock
  starts), the rate compaction is held to (issue 9: compaction of 1,000 small files at least the
  bulk append's rows/s, peak memory bounded).

Each child reports the seconds of the measured call, rows/s, and its resident memory before the
call and at its peak (`ru_maxrss`); the difference is what the call needed. Run with two sizes
(`--rows-per-file 2500,10000`), the growth shows whether compaction's memory follows the table's
size or stays bounded.

    PYTHONPATH=python .venv/bin/python bench/bench_compaction.py
    PYTHONPATH=python .venv/bin/python bench/bench_compaction.py --files 300 --rows-per-file 2000

Writes bench/results/compaction.json and .md. A benchmark measures; it never asserts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_stream_rss import rss_mib  # noqa: E402 - shared helper

DEVICES = 1000


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_batches(files: int, rows_per_file: int):
    """The N appends, generated one at a time (the whole input never exists at once)."""
    import numpy as np
    import pyarrow as pa

    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()),
                        ("temp", pa.float64()), ("humidity", pa.float64())])
    names = pa.array([f"dev-{i:04d}" for i in range(DEVICES)])
    start_us = int(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1e6)
    steps = max(1, rows_per_file // DEVICES)

    def produce():
        rng = np.random.default_rng(1)
        for f in range(files):
            n = steps * DEVICES
            step = f * steps + np.repeat(np.arange(steps, dtype=np.int64), DEVICES)
            yield pa.record_batch([
                pa.array(start_us + step * 60_000_000, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                names.take(pa.array(np.tile(np.arange(DEVICES, dtype=np.int32), steps))),
                pa.array(rng.normal(20, 5, n)), pa.array(rng.normal(50, 10, n)),
            ], schema=schema)

    return schema, produce, steps * DEVICES * files


def child(system: str, files: int, rows_per_file: int, workdir: str, out) -> None:
    import pyarrow as pa

    schema, produce, rows = make_batches(files, rows_per_file)
    result: dict = {"system": system, "files": files, "rows": rows}
    if system == "timelake maintain()":
        import timelake

        lake = timelake.Lake(workdir)
        t = lake.create_table("bench.readings", schema, series_key=["device_id"], chunk="day", dedup="last",
                              properties={"timelake.backgroundCompaction": "false"})
        for batch in produce():
            t.append(pa.Table.from_batches([batch]))
        result["files_before"] = t.info()["size"]["files"]
        before = rss_mib()
        t0 = time.perf_counter()
        done = t.maintain(expire=False)
        result["seconds"] = time.perf_counter() - t0
        result["files_after"] = t.info()["size"]["files"]
        result["rows_rewritten"] = done["rows_rewritten"]
    elif system == "delta-rs optimize.compact()":
        import deltalake

        path = str(Path(workdir) / "delta")
        for batch in produce():
            deltalake.write_deltalake(path, pa.Table.from_batches([batch]), mode="append")
        dt_ = deltalake.DeltaTable(path)
        result["files_before"] = len(dt_.file_uris())
        before = rss_mib()
        t0 = time.perf_counter()
        dt_.optimize.compact()
        result["seconds"] = time.perf_counter() - t0
        result["files_after"] = len(deltalake.DeltaTable(path).file_uris())
    else:  # timelake bulk append
        import timelake

        lake = timelake.Lake(workdir)
        t = lake.create_table("bench.readings", schema, series_key=["device_id"], chunk="day", dedup="last",
                              properties={"timelake.backgroundCompaction": "false"})
        data = pa.Table.from_batches(list(produce()), schema=schema)  # made before the clock starts
        before = rss_mib()
        t0 = time.perf_counter()
        appended = t.append(data)
        result["seconds"] = time.perf_counter() - t0
        result["files_after"] = appended["files"]
    result["rows_per_s"] = rows / result["seconds"]
    result["rss_before_mib"] = before
    result["peak_rss_mib"] = peak_mib()
    result["growth_mib"] = result["peak_rss_mib"] - before
    out.put(result)


def measure(system: str, files: int, rows_per_file: int) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        p = ctx.Process(target=child, args=(system, files, rows_per_file, d, out))
        p.start()
        p.join()
        if p.exitcode != 0:
            return {"system": system, "files": files, "error": f"child exited with {p.exitcode}"}
        return out.get()


SYSTEMS = ("timelake maintain()", "delta-rs optimize.compact()", "timelake bulk append")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--rows-per-file", default="10000", help="sizes, comma-separated")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from bench_ingest_query import load_average, machine, versions

    report = {"argv": sys.argv[1:], "machine": machine(), "versions": versions(),
              "load_average_start": load_average(), "runs": []}
    for rows_per_file in [int(x) for x in args.rows_per_file.split(",") if x]:
        for system in SYSTEMS:
            r = measure(system, args.files, rows_per_file)
            r["rows_per_file"] = rows_per_file
            report["runs"].append(r)
            print(json.dumps(r), flush=True)
    report["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    report["load_average_end"] = load_average()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compaction.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = ["# Benchmark: compaction of many small files", "",
             f"Run {report['finished_at']} by `bench/bench_compaction.py` ({args.files} appends per table; "
             "every measured call in a fresh process). \"vs bulk\" is the call's rows/s over timelake's "
             "bulk append of the same rows in one call (target for `maintain()`: ≥ 1x); growth is the "
             "peak resident memory over the memory before the call.", "",
             "| rows per append | system | files before → after | seconds | rows/s | vs bulk | growth |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for rows_per_file in sorted({r["rows_per_file"] for r in report["runs"]}):
        runs = [r for r in report["runs"] if r["rows_per_file"] == rows_per_file]
        bulk = next((r for r in runs if r["system"] == "timelake bulk append" and "error" not in r), None)
        for r in runs:
            if "error" in r:
                lines.append(f"| {rows_per_file:,} | {r['system']} | FAILED: {r['error']} | | | | |")
                continue
            ratio = f"{r['rows_per_s'] / bulk['rows_per_s']:.2f}x" if bulk else "n/a"
            before = r.get("files_before", args.files)
            lines.append(f"| {rows_per_file:,} | {r['system']} | {before} → {r['files_after']} | "
                         f"{r['seconds']:.2f} | {r['rows_per_s']:,.0f} | {ratio} | {r['growth_mib']:.0f} MiB |")
    (args.out / "compaction.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
