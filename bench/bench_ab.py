#!/usr/bin/env python3
"""Two builds of timelake side by side: small appends and the query rows, alternated.

A refactoring must leave the speed where it was; a change that claims speed must show it against
the build before. This runs the same workloads in fresh processes of build A and build B in turn
(A, B, A, B, ...), so that the machine's drift falls on both alike, and reports each build's
median over its rounds and the ratio B / A (< 1: B is faster).

A build is a folder holding the `timelake` package with its compiled `_core` (a developer build
drops it into `python/timelake`, docs/building.md), or `installed` for the one the interpreter
imports without a PYTHONPATH.

Workloads of one round (each in a fresh process of the build):
  small appends   `--appends` appends of 10 rows with batch ids to a new table: p50 and p99 (ms)
  queries         on one table written once by build A (both builds read the same files):
                    * first_sql        the first `lake.sql` of a new `Lake` in a process that queried before
                    * series_day       one series over one day (warm)
                    * hourly_all       hourly average over all series (warm)
                    * max_last_day     max per series over the last day (warm)
                    * latest_warm      `lake.latest()` (warm)

    .venv/bin/python bench/bench_ab.py --a installed --b python --rounds 4

Results go to bench/results/ab.json and ab.md. It measures; it never asserts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The workload, run inside a process of one build. argv: mode, workdir, appends (or rows).
CHILD = r'''
import datetime as dt, json, statistics, sys, time
import numpy as np, pyarrow as pa, timelake

mode, work, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()),
                    ("temp", pa.float64()), ("humidity", pa.float64())])
start_us = int(dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc).timestamp()) * 1_000_000
devices = 1000

def rows(first, count):
    i = np.arange(first, first + count, dtype=np.int64)
    return pa.table({
        "time": pa.array(start_us + (i // devices) * 10_000_000 + (i % devices) * 1_000,
                         pa.int64()).cast(schema.field("time").type),
        "device_id": pa.array([f"dev-{k % devices:05d}" for k in i.tolist()]),
        "temp": pa.array(np.sin(i / 1000.0) * 10 + 20),
        "humidity": pa.array(np.cos(i / 777.0) * 20 + 50),
    }, schema=schema)

def ms(t0):
    return (time.perf_counter() - t0) * 1000.0

out = {"timelake": timelake.__file__}
if mode == "write":          # the shared query table: n rows over 7 days, arrival order
    lake = timelake.Lake(work)
    t = lake.create_table("bench.readings", schema, time_column="time", series_key=["device_id"],
                          dedup="none")
    step = 1_000_000
    for first in range(0, n, step):
        t.append(rows(first, min(step, n - first)))
    t.maintain()
elif mode == "appends":
    lake = timelake.Lake(work)
    t = lake.create_table("bench.small", schema, time_column="time", series_key=["device_id"],
                          dedup="last")
    times = []
    for k in range(n):
        batch = rows(k * 10, 10)
        t0 = time.perf_counter()
        t.append(batch, batch_id=f"ab-{k}")
        times.append(ms(t0))
    times.sort()
    out["append_p50"] = statistics.median(times)
    out["append_p99"] = times[min(len(times) - 1, int(len(times) * 0.99))]
elif mode == "queries":
    day = "TIMESTAMP '2026-11-03 00:00:00+00' AND time < TIMESTAMP '2026-11-04 00:00:00+00'"
    series_day = ("SELECT avg(temp), min(temp), max(temp), count(*) FROM bench.readings "
                  f"WHERE device_id = 'dev-00042' AND time >= {day}")
    hourly = ("SELECT time_bucket(INTERVAL '1 hour', time) AS h, avg(temp) FROM bench.readings "
              "GROUP BY 1 ORDER BY 1")
    last_day = ("SELECT device_id, max(temp) FROM bench.readings WHERE time >= "
                "(SELECT max(time) FROM bench.readings) - INTERVAL 1 DAY GROUP BY 1")
    timelake.Lake(work).sql(series_day)  # imports and process-wide set-up, paid once per process
    lake = timelake.Lake(work)
    t0 = time.perf_counter(); lake.sql(series_day); out["first_sql"] = ms(t0)
    for name, q in (("series_day", series_day), ("hourly_all", hourly), ("max_last_day", last_day)):
        best = []
        for _ in range(5):
            t0 = time.perf_counter(); lake.sql(q); best.append(ms(t0))
        out[name] = min(best)
    lake.latest("bench.readings")
    best = []
    for _ in range(20):
        t0 = time.perf_counter(); lake.latest("bench.readings"); best.append(ms(t0))
    out["latest_warm"] = min(best)
print(json.dumps(out))
'''


def run(build: str, mode: str, work: Path, n: int) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if build != "installed":
        env["PYTHONPATH"] = str(Path(build).resolve())
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(work), str(n)], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"build {build}, {mode}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine_state() -> dict:
    state = {"platform": platform.platform(), "cpus": os.cpu_count(), "load": os.getloadavg()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                state["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return state


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="build A: a folder holding the timelake package, or 'installed'")
    p.add_argument("--b", required=True, help="build B: likewise")
    p.add_argument("--rounds", type=int, default=4, help="rounds, each A then B (default 4)")
    p.add_argument("--appends", type=int, default=300, help="10-row appends per round (default 300)")
    p.add_argument("--rows", type=int, default=5_000_000, help="rows of the query table (default 5M)")
    p.add_argument("--out", type=Path, default=HERE / "results")
    args = p.parse_args()

    started = dt.datetime.now(dt.timezone.utc)
    results: dict[str, dict[str, list[float]]] = {"A": {}, "B": {}}
    with tempfile.TemporaryDirectory(prefix="timelake-ab-") as tmp:
        query_lake = Path(tmp) / "query-lake"
        info = run(args.a, "write", query_lake, args.rows)
        print(f"query table: {args.rows:,} rows written by A ({info['timelake']})", flush=True)
        for r in range(args.rounds):
            for label, build in (("A", args.a), ("B", args.b)):
                work = Path(tmp) / f"appends-{label}-{r}"
                got = run(build, "appends", work, args.appends)
                got.update(run(build, "queries", query_lake, 0))
                for key, value in got.items():
                    if isinstance(value, float):
                        results[label].setdefault(key, []).append(value)
                print(f"round {r + 1} {label}: " + ", ".join(
                    f"{k} {v:.2f}" for k, v in got.items() if isinstance(v, float)), flush=True)

    rows = []
    for key in results["A"]:
        a = statistics.median(results["A"][key])
        b = statistics.median(results["B"].get(key, [float("nan")]))
        rows.append({"measure": key, "A_ms": a, "B_ms": b, "B_over_A": b / a if a else float("nan")})
    report = {"started": started.isoformat(), "a": args.a, "b": args.b, "rounds": args.rounds,
              "appends": args.appends, "rows": args.rows, "machine": machine_state(),
              "medians": rows, "runs": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ab.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# A/B of two builds ({started:%Y-%m-%d %H:%M} UTC)", "",
             f"A = `{args.a}`, B = `{args.b}`; {args.rounds} rounds alternated, medians; "
             f"load at the end {report['machine']['load']}", "",
             "| measure | A (ms) | B (ms) | B / A |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['measure']} | {r['A_ms']:.2f} | {r['B_ms']:.2f} | {r['B_over_A']:.2f} |" for r in rows]
    (args.out / "ab.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
