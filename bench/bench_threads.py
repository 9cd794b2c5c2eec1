#!/usr/bin/env python3
"""Threads of one process appending small batches to one table: does throughput scale?

Issue 9's target: 8 threads appending to one handle reach at least 4x one thread's appends/s,
through group commit (appends staged while a commit is in flight share the next Delta commit, each
batch id its own `txn`). Measured side by side in one run, the same 10-row batches with batch ids:

* timelake: one `Table` handle, 1 thread, then 8 threads;
* delta-rs: `write_deltalake(path, batch, mode="append", commit_properties=...)` from 1 thread,
  then 8 threads (each call commits on its own, conflicts are retried by delta-rs).

Reported: acknowledged appends per second, p50/p99 of the append call, Delta commits written,
and the 8-thread/1-thread ratio per system; every table is checked for its row count afterwards.

    PYTHONPATH=python .venv/bin/python bench/bench_threads.py
    PYTHONPATH=python .venv/bin/python bench/bench_threads.py --appends 200     # quick

Writes bench/results/threads.json and .md. A benchmark measures; it never asserts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_commits_latest import SCHEMA, TABLE, US_PER_S, create_tl, pct, small_batch  # noqa: E402
from bench_ingest_query import error_text, load_average, log, machine, md_table, text_table, versions, write_report  # noqa: E402

HERE = Path(__file__).resolve().parent


def run(append, batches, threads: int) -> dict:
    """Appends `batches` (index, batch) from `threads` threads, each taking the next batch."""
    lat, errors = [], []
    lock = threading.Lock()
    it = iter(enumerate(batches))

    def work():
        while True:
            with lock:
                nxt = next(it, None)
            if nxt is None:
                return
            i, b = nxt
            s = time.perf_counter()
            try:
                append(i, b)
            except Exception as e:  # noqa: BLE001 - report, never abort
                with lock:
                    errors.append(error_text(e))
                continue
            with lock:
                lat.append(time.perf_counter() - s)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    return {"threads": threads, "appends": len(lat), "wall_s": wall, "appends_per_s": len(lat) / wall,
            "p50_ms": pct(lat, 0.5) * 1e3 if lat else None, "p99_ms": pct(lat, 0.99) * 1e3 if lat else None,
            "errors": len(errors), "error_samples": errors[:3]}


def delta_commits(path: Path) -> int:
    return len(list((path / "_delta_log").glob("*.json"))) - 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--appends", type=int, default=400, help="appends per run (default 400)")
    p.add_argument("--rows", type=int, default=10, help="rows per append (default 10)")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--skip-delta", action="store_true")
    p.add_argument("--out", type=Path, default=HERE / "results")
    args = p.parse_args(argv)

    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    started = dt.datetime.now(dt.timezone.utc)
    start_us = int((started.replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(days=1)).timestamp()) * US_PER_S
    batches = [small_batch(start_us, i * args.rows, args.rows, 1000) for i in range(args.appends)]
    work = Path(tempfile.mkdtemp(prefix="timelake-bench-threads-"))
    report = {"benchmark": "threads", "argv": list(argv or sys.argv[1:]), "started_at": started.isoformat(timespec="seconds"),
              "params": vars(args) | {"out": str(args.out)},
              "environment": {"versions": versions(), "machine": machine(), "load_average_1m": {"start": load_average()}},
              "systems": []}
    try:
        for threads in (1, args.threads):
            lake, t = create_tl(work / f"tl-{threads}")
            r = run(lambda i, b: t.append(b, batch_id=f"b{i}"), batches, threads)
            t.info()
            r["system"] = "timelake"
            r["rows_after"] = lake.sql(f"SELECT count(*) AS n FROM {TABLE}").column(0)[0].as_py()
            r["delta_commits"] = delta_commits(work / f"tl-{threads}" / "bench" / "readings")
            report["systems"].append(r)
            log(f"  timelake, {threads} thread(s): {r['appends_per_s']:.0f} appends/s, p50 {r['p50_ms']:.1f} ms, "
                f"p99 {r['p99_ms']:.1f} ms, {r['delta_commits']} commits, {r['rows_after']} rows, {r['errors']} errors")
            if not args.skip_delta:
                path = work / f"delta-{threads}"
                DeltaTable.create(str(path), schema=SCHEMA)

                def delta_append(i, b, path=path):
                    write_deltalake(str(path), b, mode="append",
                                    commit_properties=CommitProperties(app_transactions=[Transaction(f"b{i}", 1)]))

                r = run(delta_append, batches, threads)
                r["system"] = "delta-rs"
                r["rows_after"] = DeltaTable(str(path)).to_pyarrow_table().num_rows
                r["delta_commits"] = delta_commits(path)
                report["systems"].append(r)
                log(f"  delta-rs, {threads} thread(s): {r['appends_per_s']:.0f} appends/s, p50 {r['p50_ms']:.1f} ms, "
                    f"p99 {r['p99_ms']:.1f} ms, {r['delta_commits']} commits, {r['rows_after']} rows, {r['errors']} errors")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for system in ("timelake", "delta-rs"):
        runs = {r["threads"]: r for r in report["systems"] if r["system"] == system}
        if 1 in runs and args.threads in runs:
            report.setdefault("scaling", {})[system] = runs[args.threads]["appends_per_s"] / runs[1]["appends_per_s"]
    write_report(report, args.out, "threads", md_report, text_report)
    return 0


def rows_of(report):
    head = ["system", "threads", "appends/s", "p50 ms", "p99 ms", "Delta commits", "rows after", "errors"]
    rows = [[r["system"], r["threads"], f"{r['appends_per_s']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p99_ms']:.1f}",
             r["delta_commits"], r["rows_after"], r["errors"]] for r in report["systems"]]
    return head, rows


def md_report(report) -> str:
    head, rows = rows_of(report)
    scaling = ", ".join(f"{k} {v:.2f}x" for k, v in report.get("scaling", {}).items())
    ratio = ""
    tl = {r["threads"]: r for r in report["systems"] if r["system"] == "timelake"}
    dr = {r["threads"]: r for r in report["systems"] if r["system"] == "delta-rs"}
    n = report["params"]["threads"]
    if n in tl and n in dr:
        ratio = f" With {n} threads timelake acknowledges {tl[n]['appends_per_s'] / dr[n]['appends_per_s']:.1f}x delta-rs's appends/s."
    return "\n".join([f"# Threads appending to one table ({report['started_at']})", "",
                      f"{report['params']['appends']} appends of {report['params']['rows']} rows with batch ids, local disk "
                      "(fsync). Scaling = appends/s with "
                      f"{n} threads over 1 thread (target for timelake: ≥ 4x): {scaling}.{ratio}", "",
                      md_table(head, rows), ""])


def text_report(report) -> str:
    head, rows = rows_of(report)
    return text_table(head, rows) + "\nscaling: " + str(report.get("scaling"))


if __name__ == "__main__":
    sys.exit(main())
