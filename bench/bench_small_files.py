#!/usr/bin/env python3
"""A dedup table fed by many small appends: how fast do queries run without anyone calling
maintain()?

One run builds the same table three ways from the same 1,000 appends (100 rows each: one reading
per device for 100 devices, every tenth append rewriting the previous timestamp, so the dedup
table really has duplicates) and times the same two queries on each:

* timelake, background compaction on (the default): the handle compacts crowded chunks on its
  upkeep thread after appends returned;
* timelake, `timelake.backgroundCompaction = "false"`: every append stays a file until maintain();
* delta-rs `write_deltalake` appends, queried by DuckDB over `DeltaTable.file_uris()` with the
  deduplication written out in SQL (QUALIFY row_number), as a user of delta-rs would have to;

then calls `maintain()` on the timelake tables and times the queries again. Issue 9's target: the
dedup table after 1,000 small appends within 3x of the same table compacted, without maintain().

Queries: `count(*)` over the table and one series' day (`avg/max/count WHERE device_id = ...`).
Every answer is compared with the ground truth DuckDB computes over the deduplicated input.

    PYTHONPATH=python .venv/bin/python bench/bench_small_files.py
    PYTHONPATH=python .venv/bin/python bench/bench_small_files.py --appends 300   # quick

Writes bench/results/small_files.json and .md. A benchmark measures; it never asserts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest_query import (  # noqa: E402 - shared helpers
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
SCHEMA = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()),
                    ("temp", pa.float64())])
DEVICE = "dev-042"
COUNT_SQL = "SELECT count(*) AS n FROM {src}"
SERIES_DAY_SQL = ("SELECT count(*) AS n, avg(temp) AS avg_temp, max(temp) AS max_temp FROM {src} "
                  f"WHERE device_id = '{DEVICE}' AND time >= TIMESTAMPTZ '{{day}}' "
                  "AND time < TIMESTAMPTZ '{day}' + INTERVAL 1 DAY")
DEDUP_SQL = ("(SELECT * FROM read_parquet({files}) "
             "QUALIFY row_number() OVER (PARTITION BY device_id, time ORDER BY seq DESC) = 1)")


def batches(appends: int, devices: int, day: dt.datetime) -> list[pa.Table]:
    out = []
    names = [f"dev-{d:03d}" for d in range(devices)]
    step = 86_400_000_000 // (appends + 1)
    base = int(day.timestamp() * 1_000_000)
    for i in range(appends):
        slot = i - 1 if i % 10 == 9 else i  # every tenth append rewrites the previous timestamp
        ts = pa.array([base + slot * step] * devices, pa.timestamp("us", tz="UTC"))
        out.append(pa.table({"time": ts, "device_id": names,
                             "temp": [float(i * 1000 + d) for d in range(devices)]}, schema=SCHEMA))
    return out


def best_ms(runs: int, fn):
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return min(times), times, result


def as_rows(table: pa.Table) -> list[dict]:
    return [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()} for r in table.to_pylist()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--appends", type=int, default=1000)
    p.add_argument("--devices", type=int, default=100, help="rows per append (one per device)")
    p.add_argument("--runs", type=int, default=5, help="best of N per query")
    p.add_argument("--skip-delta", action="store_true")
    p.add_argument("--out", type=Path, default=HERE / "results")
    args = p.parse_args(argv)

    import deltalake
    import timelake

    started = dt.datetime.now(dt.timezone.utc)
    day = started.replace(hour=0, minute=0, second=0, microsecond=0) - dt.timedelta(days=1)
    data = batches(args.appends, args.devices, day)
    queries = {"count(*)": COUNT_SQL, "one series, one day": SERIES_DAY_SQL.replace("{day}", day.isoformat())}
    con = duckdb_connection()
    everything = pa.concat_tables([b.append_column("seq", pa.array([i] * b.num_rows, pa.int64()))
                                   for i, b in enumerate(data)])
    con.register("everything", everything)
    deduped = "(SELECT * FROM everything QUALIFY row_number() OVER (PARTITION BY device_id, time ORDER BY seq DESC) = 1)"
    truth = {q: as_rows(con.sql(sql.format(src=deduped)).to_arrow_table()) for q, sql in queries.items()}
    log(f"{args.appends} appends of {args.devices} rows; {truth['count(*)'][0]['n']:,} rows after dedup")

    work = Path(tempfile.mkdtemp(prefix="timelake-bench-small-files-"))
    report = {"benchmark": "small_files", "argv": list(argv or sys.argv[1:]),
              "started_at": started.isoformat(timespec="seconds"), "params": vars(args) | {"out": str(args.out)},
              "environment": {"versions": versions(), "machine": machine(),
                              "load_average_1m": {"start": load_average()}},
              "systems": []}
    try:
        for key, props in (("timelake", {}), ("timelake_no_background", {"timelake.backgroundCompaction": "false"})):
            lake = timelake.Lake(str(work / key))
            t = lake.create_table(TABLE, SCHEMA, time_column="time", series_key=["device_id"], chunk="day",
                                  dedup="last", properties=props)
            t0 = time.perf_counter()
            for i, b in enumerate(data):
                t.append(b, batch_id=f"b{i}")
            build_s = time.perf_counter() - t0
            info = t.info()  # waits for the passes still queued
            entry = {"system": key, "properties": props, "build_s": build_s,
                     "files_before_maintain": info["size"]["files"], "phases": {}}
            for phase in ("before maintain()", "after maintain()"):
                if phase.startswith("after"):
                    entry["maintain"] = jsonable(t.maintain())
                    entry["files_after_maintain"] = t.info()["size"]["files"]
                fresh = timelake.Lake(str(work / key))  # a reader that did not write
                results = {}
                for q, sql in queries.items():
                    ms, times, res = best_ms(args.runs, lambda: fresh.sql(sql.format(src=TABLE)))
                    results[q] = {"best_ms": ms, "times_ms": times, "same_as_truth": as_rows(res) == truth[q]}
                entry["phases"][phase] = results
                log(f"  {key}, {phase}: files {entry['files_before_maintain'] if 'before' in phase else entry['files_after_maintain']}, "
                    + ", ".join(f"{q} {r['best_ms']:.1f} ms ({'ok' if r['same_as_truth'] else 'WRONG'})" for q, r in results.items()))
            for q in queries:
                before = entry["phases"]["before maintain()"][q]["best_ms"]
                after = entry["phases"]["after maintain()"][q]["best_ms"]
                entry.setdefault("before_over_compacted", {})[q] = before / after
            report["systems"].append(entry)
        if not args.skip_delta:
            path = work / "delta"
            t0 = time.perf_counter()
            for i, b in enumerate(data):
                # delta-rs has no arrival order of its own: the writer adds a sequence column.
                deltalake.write_deltalake(str(path), b.append_column("seq", pa.array([i] * b.num_rows, pa.int64())),
                                          mode="append")
            build_s = time.perf_counter() - t0
            entry = {"system": "delta-rs + DuckDB (dedup in SQL)", "build_s": build_s, "phases": {}}
            results = {}
            for q, sql in queries.items():
                def once():
                    files = [local_path(u) for u in deltalake.DeltaTable(str(path)).file_uris()]
                    src = DEDUP_SQL.format(files=sql_list(files))
                    return con.sql(sql.format(src=src)).to_arrow_table()
                try:
                    ms, times, res = best_ms(args.runs, once)
                    results[q] = {"best_ms": ms, "times_ms": times, "same_as_truth": as_rows(res) == truth[q]}
                except Exception as e:  # noqa: BLE001 - report, never abort
                    results[q] = {"error": error_text(e)}
            entry["phases"]["no maintenance"] = results
            entry["files"] = len(deltalake.DeltaTable(str(path)).file_uris())
            log(f"  delta-rs: files {entry['files']}, " + ", ".join(
                f"{q} {r.get('best_ms', float('nan')):.1f} ms" for q, r in results.items()))
            report["systems"].append(entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    write_report(report, args.out, "small_files", md_report, text_report)
    return 0


def rows_of(report):
    head = ["system", "files", "count(*) ms", "series-day ms", "count(*) vs compacted", "series-day vs compacted", "correct"]
    rows = []
    for e in report["systems"]:
        if "phases" not in e or "before maintain()" not in e["phases"]:
            continue
        b = e["phases"]["before maintain()"]
        ratios = e["before_over_compacted"]
        rows.append([f"{e['system']}, no maintain()", e["files_before_maintain"],
                     f"{b['count(*)']['best_ms']:.1f}", f"{b['one series, one day']['best_ms']:.1f}",
                     f"{ratios['count(*)']:.2f}x", f"{ratios['one series, one day']:.2f}x",
                     all(r["same_as_truth"] for r in b.values())])
        a = e["phases"]["after maintain()"]
        rows.append([f"{e['system']}, after maintain()", e["files_after_maintain"],
                     f"{a['count(*)']['best_ms']:.1f}", f"{a['one series, one day']['best_ms']:.1f}", "1.00x", "1.00x",
                     all(r["same_as_truth"] for r in a.values())])
    return head, rows


def md_report(report) -> str:
    head, rows = rows_of(report)
    out = [f"# Small appends to a dedup table ({report['started_at']})", "",
           f"{report['params']['appends']} appends of {report['params']['devices']} rows, dedup=\"last\", one day chunk; "
           "best of " f"{report['params']['runs']} per query from a fresh `Lake`. \"vs compacted\" is the query's time "
           "before `maintain()` over its time after (target ≤ 3x).", "", md_table(head, rows), ""]
    for e in report["systems"]:
        if "files" in e:
            r = e["phases"]["no maintenance"]
            out.append(f"delta-rs + DuckDB over {e['files']} files with the dedup in SQL: " + ", ".join(
                f"{q} {v['best_ms']:.1f} ms" if "best_ms" in v else f"{q} failed: {v['error']}" for q, v in r.items()))
    out += ["", "Build times: " + ", ".join(f"{e['system']} {e['build_s']:.1f} s" for e in report["systems"]), ""]
    return "\n".join(out)


def text_report(report) -> str:
    head, rows = rows_of(report)
    return text_table(head, rows)


if __name__ == "__main__":
    sys.exit(main())
