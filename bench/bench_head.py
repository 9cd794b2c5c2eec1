#!/usr/bin/env python3
"""Opening a table of 1,000 commits on S3 (moto): timelake's table head vs the seed system.

Both systems write the same table (iot.readings: time, device_id, temp; 50 series) by `--commits`
small appends of 5 rows into one moto server, then wait `--quiet-s` (longer than both systems'
one-second version check interval, so that no cached answer helps), and a fresh process per
system measures, `--reps` times each with a new Lake:

  open+latest   timelake.Lake(url, options) then lake.latest("iot.readings")
  latest again  the same Lake's latest() at once (within the interval)
  open+sql      a new Lake's one-series query (one device over the whole table)
  sql again     the same query on that Lake at once

with the requests moto served for each step (from its request log: bench/cloud_stores.py). The
timelake rows are measured twice: with the default `version_check_interval` (1 s: the head is
older than that, so its version is checked against the log, 3 requests), and with 1 h (the head
is trusted alone: 1 request), which is what a reader sees within a second of a commit with the
default. The seed system runs with /work/seedvenv/bin/python (`--seed-python`), in its own
processes. Each repetition is a new process with an empty file cache. Results: bench/results/head.json and head.md. A benchmark measures; it never asserts.

    .venv/bin/python bench/bench_head.py                 # 1,000 commits, 5 reps
    .venv/bin/python bench/bench_head.py --commits 100   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests/python"))
sys.path.insert(0, str(HERE))

from cloud_stores import S3Store  # noqa: E402

TABLE = "iot.readings"
ONE_SERIES = "SELECT time, temp FROM iot.readings WHERE device_id = 'dev-7' ORDER BY time"

WRITE = r"""
import datetime as dt, json, sys, time
import pyarrow as pa, timelake
url, options, commits = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("temp", pa.float64())])
lake = timelake.Lake(url, storage_options=options)
t = lake.create_table(TABLE, schema, time_column="time", series_key=["device_id"], chunk="day")
t0 = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
started = time.perf_counter()
for i in range(commits):
    devices = [f"dev-{(5 * i + k) % 50}" for k in range(5)]
    t.append(pa.table({"time": [t0 + dt.timedelta(seconds=i)] * 5, "device_id": devices,
                       "temp": [float(i + k) for k in range(5)]}, schema=schema))
seconds = time.perf_counter() - started
t.refresh()
print(json.dumps({"seconds": seconds, "version": t.version}))
""".replace("TABLE", repr(TABLE))

# Steps answer one line each and wait for the parent (which counts the requests between them).
MEASURE = r"""
import json, sys, time
import timelake
url, options = sys.argv[1], json.loads(sys.argv[2])
def step(name, fn):
    started = time.perf_counter()
    out = fn()
    ms = (time.perf_counter() - started) * 1e3
    print(json.dumps({"step": name, "ms": ms, "rows": out.num_rows}), flush=True)
    sys.stdin.readline()
holder = {}
def open_latest():
    holder["lake"] = timelake.Lake(url, storage_options=options)
    return holder["lake"].latest(TABLE)
step("open+latest", open_latest)
step("latest again", lambda: holder["lake"].latest(TABLE))
def open_sql():
    holder["lake"] = timelake.Lake(url, storage_options=options)
    return holder["lake"].sql(QUERY)
step("open+sql", open_sql)
step("sql again", lambda: holder["lake"].sql(QUERY))
""".replace("TABLE", repr(TABLE)).replace("QUERY", repr(ONE_SERIES))

STEPS = ["open+latest", "latest again", "open+sql", "sql again"]


def env_for(system: dict) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if system.get("path"):
        env["PYTHONPATH"] = system["path"]
    return env


def write(system: dict, url: str, options: dict, commits: int) -> dict:
    done = subprocess.run([system["python"], "-c", WRITE, url, json.dumps(options), str(commits)],
                          env=env_for(system), capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(system: dict, url: str, options: dict, reps: int, store: S3Store, scratch: Path) -> dict:
    """`reps` processes, each with an empty file cache (TIMELAKE_CACHE_DIR; the seed system keeps
    its block cache in memory): the first query of each is cold."""
    got: dict = {s: {"ms": [], "requests": [], "by_kind": []} for s in STEPS}
    for rep in range(reps):
        env = env_for(system)
        env["TIMELAKE_CACHE_DIR"] = str(scratch / f"cache-{time.monotonic_ns()}")
        child = subprocess.Popen([system["python"], "-c", MEASURE, url, json.dumps(options)], env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        error = run_steps(child, store, got)
        if error:
            return {"error": error}
    return {s: {"median_ms": statistics.median(v["ms"]), "ms": v["ms"],
                "median_requests": statistics.median(v["requests"]), "requests": v["requests"],
                "by_kind": v["by_kind"][-1], "rows": v.get("rows")} for s, v in got.items()}


def run_steps(child: subprocess.Popen, store: S3Store, got: dict) -> str | None:
    """Counts the requests of each step `child` reports; the error text if it failed."""
    try:
        mark = store.requests.mark()
        for _ in range(len(STEPS)):
            line = child.stdout.readline()
            if not line:
                return child.stderr.read()[-2000:]
            answer = json.loads(line)
            counted = store.requests.since(mark)
            step = got[answer["step"]]
            step["ms"].append(answer["ms"])
            step["requests"].append(counted["requests"])
            step["by_kind"].append(counted["by_kind"])
            step["rows"] = answer["rows"]
            mark = store.requests.mark()
            child.stdin.write("\n")
            child.stdin.flush()
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    return None


def report(results: dict, args) -> str:
    lines = [f"# Opening a table of {args.commits} commits on S3 (moto): table head vs the seed system", "",
             "`bench/bench_head.py`: each system wrote `iot.readings` by "
             f"{args.commits} appends of 5 rows (50 series), then after {args.quiet_s} s of quiet a fresh "
             f"process measured, {args.reps} times (a new process and Lake, an empty file cache each time: "
             "`open+sql` is a cold query, `sql again` a warm one). Medians; requests are what moto "
             "served for the step.", "",
             "| system | step | median ms | requests | by kind | rows |", "| --- | --- | --- | --- | --- | --- |"]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | error | {r['error'][-200:]!r} | | | |")
            continue
        for s in STEPS:
            m = r["measured"][s]
            lines.append(f"| {name} | {s} | {m['median_ms']:.1f} | {m['median_requests']:g} | "
                         f"{json.dumps(m['by_kind'])} | {m['rows']} |")
    seed = results.get("seed system", {}).get("measured")
    if seed:
        lines += ["", "| system | step | time / seed system's | requests / seed system's |", "| --- | --- | --- | --- |"]
        for name, r in results.items():
            if name == "seed system" or "measured" not in r:
                continue
            for s in STEPS:
                m, p = r["measured"][s], seed[s]
                req = (f"{m['median_requests'] / p['median_requests']:.2f}" if p["median_requests"]
                       else f"{m['median_requests']:g} vs 0")
                lines.append(f"| {name} | {s} | {m['median_ms'] / p['median_ms']:.2f} | {req} |")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quiet-s", type=float, default=3.0)
    parser.add_argument("--seed-python", default="/work/seedvenv/bin/python")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()

    ours = {"python": sys.executable, "path": str(ROOT / "python")}
    seed = {"python": args.seed_python}
    store = S3Store.start()
    scratch = Path(tempfile.mkdtemp(prefix="timelake-bench-head-"))
    results: dict = {}
    try:
        options = store.tl_options()
        urls = {}
        for name, system in (("timelake", ours), ("seed system", seed)):
            url = f"s3://{store.name(name.replace(' ', '-'))}/lake"
            urls[name] = url
            written = write(system, url, options, args.commits)
            print(name, "wrote", written, flush=True)
            results[name] = {"written": written}
        time.sleep(args.quiet_s)
        runs = [("timelake", ours, urls["timelake"], options),
                ("timelake, version_check_interval=1h", ours, urls["timelake"],
                 dict(options, version_check_interval="1h")),
                ("seed system", seed, urls["seed system"], options)]
        for name, system, url, opts in runs:
            if "error" in results.get(name.split(",")[0], {}).get("written", {}):
                results[name] = {"error": results[name.split(",")[0]]["written"]["error"]}
                continue
            measured = measure(system, url, opts, args.reps, store, scratch)
            results.setdefault(name, {})["measured" if "error" not in measured else "error"] = (
                measured if "error" not in measured else measured["error"])
            print(name, json.dumps({s: (measured[s]["median_ms"], measured[s]["median_requests"])
                                    for s in STEPS} if "error" not in measured else measured), flush=True)
    finally:
        store.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "head.json").write_text(json.dumps({"commits": args.commits, "reps": args.reps,
                                                     "results": results}, indent=1))
    (args.out / "head.md").write_text(report(results, args))
    print(report(results, args))


if __name__ == "__main__":
    main()
