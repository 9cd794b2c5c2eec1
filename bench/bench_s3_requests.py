#!/usr/bin/env python3
"""Requests on S3 (moto): timelake and the seed system (`timelake` 0.7.0 on PyPI) on a table of
many commits, counted request by request.

The issue's S3 row: open a table of --commits commits (each one --series rows, one per device,
a tick apart over one day), answer a one-series query (one device, one hour: avg/min/max), and
answer it again; the repeat must send no request for data (the cache). Before that, on a table of
one large file, it times the cache's own lookups with and without its memory tier. Each system writes its own
table on the same moto server, then a new process of that system opens it through a counting
proxy (tests/python/fault_proxy.py, which logs every request it forwards) with an empty cache
folder, and reports each step's requests by kind:

  list   bucket listings (ListObjectsV2)
  log    the table's metadata: timelake's _delta_log/ objects, the seed's Iceberg metadata
  data   data files (Parquet under data/)
  other  anything else (writes such as a checkpoint a reader leaves, index objects)

Steps: `open` (Lake() and lake.table(name)), `query` (the first one-series query after it),
`repeat` (the same query again), `new_lake` (a new Lake in the same process, same cache folder:
open and query; what a second process on that machine pays). Each system runs in processes of its
own (both import as `timelake`): ours under this interpreter with --ours-path (a folder holding a
timelake package, default python/ of this checkout), the seed system under --seed-python. Results:
bench/results/s3_requests.json and .md. A benchmark measures, it never asserts.

    .venv/bin/python bench/bench_s3_requests.py --seed-python /work/seedvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TESTS = REPO / "tests" / "python"
sys.path.insert(0, str(TESTS))
from s3_server import S3Server  # noqa: E402
from bench_seed import version  # noqa: E402  (the script's folder is on sys.path)

# Runs in each system's interpreter: argv = mode, JSON parameters.
CHILD = r'''
import json, sys, tempfile, time
params = json.loads(sys.argv[2])
sys.path.insert(0, params["tests"])
import pyarrow as pa
import timelake
from fault_proxy import FaultProxy

mode = sys.argv[1]
US = 1_000_000
START = 1_793_491_200 * US  # 2026-11-01T00:00:00Z
SCHEMA = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()),
                    ("temp", pa.float64())])
TABLE = "bench.readings"
options = dict(params["options"])
out = {}

def kind(method, target):
    path = target.split("?", 1)[0]
    if "list-type=" in target or "delimiter=" in target:
        return "list"
    if method not in ("GET", "HEAD"):
        return "other"
    if "/_delta_log/" in path or "/metadata/" in path:
        return "log"
    if "/data/" in path and path.endswith(".parquet"):
        return "data"
    return "other"

def count(seen):
    by = {}
    for method, target in seen:
        k = kind(method, target)
        by[k] = by.get(k, 0) + 1
    return {"requests": len(seen), "by_kind": by,
            "non_data": [f"{m} {t}" for m, t in seen if kind(m, t) != "data"][:40]}

if mode == "write":
    lake = timelake.Lake(params["url"], storage_options=options)
    try:
        t = lake.create_table(TABLE, SCHEMA, time_column="time", series_key=["device_id"], chunk="day", dedup=False)
    except ValueError:  # ours names its policies: "none", "last", "first"
        t = lake.create_table(TABLE, SCHEMA, time_column="time", series_key=["device_id"], chunk="day", dedup="none")
    n, series = params["commits"], params["series"]
    step = 86_400 * US // n
    t0 = time.perf_counter()
    for i in range(n):
        times = [START + i * step] * series
        temps = [20.0 + (i * 7 + d) % 13 for d in range(series)]
        t.append(pa.table({"time": pa.array(times, pa.timestamp("us", tz="UTC")),
                           "device_id": [f"dev-{d:05d}" for d in range(series)],
                           "temp": temps}, schema=SCHEMA))
    out["write_s"] = time.perf_counter() - t0
    info = t.info()
    out["files"] = info.get("size", {}).get("files") if isinstance(info, dict) else None
elif mode == "measure":
    cache = tempfile.mkdtemp(prefix="bench-s3-cache-")
    with FaultProxy(params["upstream"]) as proxy:
        options["aws_endpoint"] = proxy.endpoint
        options["timelake_cache_dir"] = cache
        proxy.reset()
        lake = timelake.Lake(params["url"], storage_options=options)
        lake.table(TABLE)
        out["open"] = count(proxy.seen())
        query = params["query"]
        for step in ("query", "repeat"):
            proxy.reset()
            got = lake.sql(query)
            out[step] = count(proxy.seen())
            out[step]["result"] = [str(v) for v in got.to_pylist()[0].values()] if got.num_rows else []
            out[step]["cache_stats"] = lake.cache_stats()
        proxy.reset()
        again = timelake.Lake(params["url"], storage_options=options)
        again.sql(query)
        out["new_lake"] = count(proxy.seen())
        out["new_lake"]["cache_stats"] = again.cache_stats()
print(json.dumps(out))
'''


def footer_lookups(server, runs: int = 2000) -> dict:
    """The memory tier's worth: the cache's answer for a one-series, one-hour plan over one large
    file (a row-group copy whose footer is in memory, or read from disk with
    timelake_cache_memory_bytes=0), median over `runs` warm lookups. Ours only (in this process:
    --ours-path is put first on sys.path)."""
    import datetime as dt
    import statistics

    import numpy as np
    import pyarrow as pa
    import timelake

    url = f"s3://{server.create_bucket()}/lake"
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()), ("temp", pa.float64())])
    n, series = 2_000_000, 1000
    times = np.arange(n, dtype=np.int64) // series * 43_200_000 + 1_793_491_200_000_000
    names = np.array([f"dev-{i:05d}" for i in range(series)], dtype=object)[np.arange(n) % series]
    data = pa.table({"time": pa.array(times, pa.timestamp("us", tz="UTC")), "device_id": pa.array(names, pa.string()),
                     "temp": np.random.default_rng(1).normal(20, 1, n)}, schema=schema)
    table = timelake.Lake(url, storage_options=server.storage_options()).create_table("t", schema, series_key=["device_id"])
    table.append(data)
    lo = int(dt.datetime(2026, 11, 1, 5, tzinfo=dt.timezone.utc).timestamp() * 1e6)
    out = {"file_bytes": table.info()["size"]["bytes"], "runs": runs}
    for label, memory in (("memory_tier", "67108864"), ("no_memory_tier", "0")) * 2:
        options = {**server.storage_options(), "timelake_cache_dir": tempfile.mkdtemp(prefix="bench-footers-"),
                   "timelake_cache_memory_bytes": memory}
        lake = timelake.Lake(url, storage_options=options)
        plan = lake.table("t")._core.scan(min_time=lo, max_time=lo + 3_600_000_000, key_equals={"device_id": "dev-00007"})
        for _ in range(3):
            lake._core.local_copies(plan)[1].release()
        samples = []
        for _ in range(runs):
            t0 = time.perf_counter()
            lake._core.local_copies(plan)[1].release()
            samples.append((time.perf_counter() - t0) * 1e3)
        out.setdefault(label + "_ms", []).append(round(statistics.median(samples), 4))
    return out


def run(system: dict, mode: str, params: dict) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if system.get("path"):
        env["PYTHONPATH"] = system["path"]
    done = subprocess.run([system["python"], "-c", CHILD, mode, json.dumps(params)], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-1500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def query_text(series: int) -> str:
    # One device, one hour in the middle of the day.
    dev = f"dev-{series // 3:05d}"
    return ("SELECT avg(temp) AS a, min(temp) AS lo, max(temp) AS hi FROM bench.readings "
            f"WHERE device_id = '{dev}' AND time >= TIMESTAMP '2026-11-01 12:00:00' "
            "AND time < TIMESTAMP '2026-11-01 13:00:00'")


def _short(request: str) -> str:
    """A request's target without the bucket and lake prefix."""
    target = request.split(" ", 1)[1]
    path, _, query = target.partition("?")
    parts = path.split("/", 3)
    tail = parts[3] if len(parts) > 3 else ""
    return (tail.replace("bench/readings/", "") or "/") + (("?" + query) if query else "")


def md(report: dict) -> str:
    lines = [f"# Requests on S3 (moto): a table of {report['commits']:,} commits", "",
             f"Run {report['when']} by `bench/bench_s3_requests.py` ({report['series']} rows per commit, "
             f"one per device; query: `{report['query']}`). Each step counts the requests a new process "
             "of each system sent through a counting proxy, with an empty cache folder at the start.", "",
             "| step | timelake (ours) | seed system | ours: list / log / data / other | seed: list / log / data / other |",
             "| --- | --- | --- | --- | --- |"]
    for step in ("open", "query", "repeat", "new_lake"):
        cells = []
        split = []
        for key in ("ours", "seed"):
            m = report[key].get("measure", {})
            if step not in m:
                cells.append("error")
                split.append("")
                continue
            by = m[step]["by_kind"]
            cells.append(str(m[step]["requests"]))
            split.append(" / ".join(str(by.get(k, 0)) for k in ("list", "log", "data", "other")))
        lines.append(f"| {step} | {cells[0]} | {cells[1]} | {split[0]} | {split[1]} |")
    lines.append("")
    lookups = report.get("footer_lookups")
    if lookups:
        lines.append(f"The memory tier (ours): the cache's answer for a one-series, one-hour plan over one "
                     f"{lookups['file_bytes'] / 1e6:.1f} MB file (a row-group copy), median of {lookups['runs']:,} warm "
                     f"lookups, two alternated runs: {' / '.join(str(v) for v in lookups['memory_tier_ms'])} ms with its "
                     f"footer in memory, {' / '.join(str(v) for v in lookups['no_memory_tier_ms'])} ms with "
                     "`timelake_cache_memory_bytes=0` (the footer read from its disk copy).")
        lines.append("")
    for key in ("ours", "seed"):
        system = report[key]
        lines.append(f"* {key}: timelake {system['version']}; writing took {system.get('write', {}).get('write_s', 0):.1f} s"
                     + (f", {system['write'].get('files')} live files" if system.get("write", {}).get("files") else ""))
        for step in ("query", "repeat", "new_lake"):
            stats = system.get("measure", {}).get(step, {}).get("cache_stats")
            if stats:
                lines.append(f"  * cache_stats() after {step}: `{json.dumps(stats)}`")
        for step in ("open", "query", "repeat", "new_lake"):
            listed = system.get("measure", {}).get(step, {}).get("non_data")
            if listed:
                shown = ", ".join(f"`{r.split(' ', 1)[0]} {_short(r)}`" for r in listed[:14])
                lines.append(f"  * {step}, requests other than data: {shown}" + (" …" if len(listed) > 14 else ""))
        if "error" in system.get("measure", {}) or "error" in system.get("write", {}):
            lines.append(f"  * error: `{(system['measure'].get('error') or system['write'].get('error'))[-400:]}`")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commits", type=int, default=1000)
    p.add_argument("--series", type=int, default=10)
    p.add_argument("--ours-python", default=sys.executable)
    p.add_argument("--ours-path", default=str(REPO / "python"))
    p.add_argument("--seed-python", default="/work/seedvenv/bin/python")
    p.add_argument("--out", default=str(HERE / "results" / "s3_requests"))
    p.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json of the last run")
    args = p.parse_args(argv)
    if args.report_only:
        report = json.loads(Path(args.out + ".json").read_text())
        Path(args.out + ".md").write_text(md(report))
        print(md(report))
        return 0
    systems = {"ours": {"python": args.ours_python, "path": args.ours_path},
               "seed": {"python": args.seed_python}}
    server = S3Server.from_env_or_start()
    report = {"commits": args.commits, "series": args.series, "query": query_text(args.series),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        sys.path.insert(0, args.ours_path)
        report["footer_lookups"] = footer_lookups(server)
        for key, system in systems.items():
            bucket = server.create_bucket()
            base = {"tests": str(TESTS), "url": f"s3://{bucket}/lake", "options": server.storage_options(),
                    "commits": args.commits, "series": args.series}
            entry = {"version": version(system)}
            entry["write"] = run(system, "write", base)
            entry["measure"] = run(system, "measure", {**base, "upstream": server.endpoint,
                                                        "query": report["query"]})
            report[key] = entry
            print(key, json.dumps({k: v for k, v in entry.items() if k != "measure"}), flush=True)
    finally:
        server.stop()
    Path(args.out + ".json").write_text(json.dumps(report, indent=2) + "\n")
    Path(args.out + ".md").write_text(md(report))
    print(md(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
