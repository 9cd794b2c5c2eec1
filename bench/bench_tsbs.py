#!/usr/bin/env python3
"""The TSBS "cpu-only" devops workload: timelake, the seed system (timelake 0.7.0) and DuckDB.

The TSBS Go tool cannot be installed here, so this script generates data of its shape and runs
its query types as SQL (their definitions are public: github.com/timescale/tsbs, docs/*.md):

  data   --hosts hosts, one row per host every 10 s over --days days, arriving in time order with
         the hosts interleaved: time, hostname and 9 more host tags (region, datacenter, rack, os,
         arch, team, service, service_version, service_environment), and the 10 cpu metrics
         (usage_user ... usage_guest_nice, random walks in 0..100). Written once to a Parquet
         file (sorted by time, 1M-row row groups): DuckDB reads that file directly; timelake and
         the seed system append it, in 1M-row batches, to a table keyed by hostname (dedup off).
  queries (each with parameters drawn once from --seed, the same for every system):
    single-groupby-1-1-1    max of 1 metric, 1 host, per minute, over 1 hour
    single-groupby-1-8-1    max of 1 metric, 8 hosts, per minute, over 1 hour
    single-groupby-5-1-12   max of 5 metrics, 1 host, per minute, over 12 hours
    cpu-max-all-1           max of all 10 metrics, 1 host, per hour, over 8 hours
    cpu-max-all-8           max of all 10 metrics, 8 hosts, per hour, over 8 hours
    double-groupby-1        mean of 1 metric per host per hour, all hosts, over 12 hours
    double-groupby-all      mean of all 10 metrics per host per hour, all hosts, over 12 hours
    high-cpu-1              readings of 1 host over 12 hours with usage_user > 90
    high-cpu-all            readings of all hosts over 12 hours with usage_user > 90
    lastpoint               the newest reading of every host (SQL: a join on max(time))
    groupby-orderby-limit   max of 1 metric per minute, the 5 minutes before a random time
  plus lastpoint_latest: lastpoint through Lake.latest() (timelake and the seed system only).

Each system runs in processes of its own (timelake and the seed system both import as
`timelake`), the order alternated per round; each figure is the median of --repeat runs after a
warm-up, then the median over rounds. Ratios are timelake / peer (< 1: timelake is faster).
Results: bench/results/tsbs.json and tsbs.md. A benchmark measures, it never asserts; a query that
fails on a system is reported with its error.

    .venv/bin/python bench/bench_tsbs.py --seed-python /path/to/seedvenv/bin/python --hosts 100
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_ab import machine_state  # noqa: E402
from bench_seed import version  # noqa: E402

US = 1_000_000
START = 1_793_491_200 * US  # 2026-10-31T00:00:00Z
METRICS = ["usage_user", "usage_system", "usage_idle", "usage_nice", "usage_iowait", "usage_irq",
           "usage_softirq", "usage_steal", "usage_guest", "usage_guest_nice"]
TAGS = ["region", "datacenter", "rack", "os", "arch", "team", "service", "service_version",
        "service_environment"]
TABLE = "tsbs.cpu"


def generate(path: Path, hosts: int, days: int, seed: int) -> int:
    """Writes the data to `path`, a tick (10 s) of every host after another; returns the rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    names = np.array([f"host_{i}" for i in range(hosts)], dtype=object)
    tag_values = {
        "region": [f"region-{i}" for i in range(9)], "datacenter": [f"dc-{i}" for i in range(20)],
        "rack": [str(i) for i in range(100)], "os": ["Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"],
        "arch": ["x86", "x64"], "team": ["SF", "NYC", "LON", "CHI"],
        "service": [str(i) for i in range(20)], "service_version": ["0", "1"],
        "service_environment": ["production", "staging", "test"],
    }
    host_tags = {k: np.array(v, dtype=object)[rng.integers(0, len(v), hosts)] for k, v in tag_values.items()}
    ticks = days * 8640
    per_batch = max(1, 1_000_000 // hosts)
    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("hostname", pa.string())]
                       + [(t, pa.string()) for t in TAGS] + [(m, pa.float64()) for m in METRICS])
    level = rng.uniform(0, 100, (hosts, len(METRICS)))
    rows = 0
    with pq.ParquetWriter(path, schema, compression="snappy") as out:
        for first in range(0, ticks, per_batch):
            n_ticks = min(per_batch, ticks - first)
            tick = np.repeat(np.arange(first, first + n_ticks, dtype=np.int64), hosts)
            host = np.tile(np.arange(hosts), n_ticks)
            steps = rng.normal(0, 1.5, (n_ticks, hosts, len(METRICS)))
            walk = np.clip(level[None, :, :] + np.cumsum(steps, axis=0), 0, 100)
            level = walk[-1]
            values = walk.reshape(n_ticks * hosts, len(METRICS))
            columns = {"time": pa.array(START + tick * 10 * US, pa.timestamp("us", tz="UTC")),
                       "hostname": pa.array(names[host], pa.string())}
            columns.update({t: pa.array(host_tags[t][host], pa.string()) for t in TAGS})
            columns.update({m: pa.array(np.round(values[:, j], 2)) for j, m in enumerate(METRICS)})
            out.write_table(pa.table(columns, schema=schema), row_group_size=1_000_000)
            rows += len(tick)
    return rows


def iso(us: int) -> str:
    return dt.datetime.fromtimestamp(us / US, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def queries(hosts: int, days: int, seed: int) -> dict[str, str]:
    """The query set with its random parameters drawn once."""
    import random

    rnd = random.Random(seed)
    span = days * 86_400 * US
    hour = 3_600 * US

    def start(length: int) -> int:  # a whole-minute start with `length` of data after it
        return START + rnd.randrange(0, (span - length) // (60 * US)) * 60 * US

    def some_hosts(n: int) -> str:
        return ", ".join(f"'host_{h}'" for h in rnd.sample(range(hosts), min(n, hosts)))

    def where(first: int, length: int) -> str:
        return f"time >= TIMESTAMP '{iso(first)}' AND time < TIMESTAMP '{iso(first + length)}'"

    def maxes(n: int) -> str:
        return ", ".join(f"max({m}) AS max_{m}" for m in METRICS[:n])

    def means(n: int) -> str:
        return ", ".join(f"avg({m}) AS mean_{m}" for m in METRICS[:n])

    q = {}
    for name, metrics, n_hosts, length in (("single-groupby-1-1-1", 1, 1, hour),
                                           ("single-groupby-1-8-1", 1, 8, hour),
                                           ("single-groupby-5-1-12", 5, 1, 12 * hour)):
        q[name] = (f"SELECT time_bucket(INTERVAL '1 minute', time) AS minute, {maxes(metrics)} FROM {TABLE} "
                   f"WHERE hostname IN ({some_hosts(n_hosts)}) AND {where(start(length), length)} "
                   f"GROUP BY 1 ORDER BY 1")
    for name, n_hosts in (("cpu-max-all-1", 1), ("cpu-max-all-8", 8)):
        q[name] = (f"SELECT time_bucket(INTERVAL '1 hour', time) AS hour, {maxes(10)} FROM {TABLE} "
                   f"WHERE hostname IN ({some_hosts(n_hosts)}) AND {where(start(8 * hour), 8 * hour)} "
                   f"GROUP BY 1 ORDER BY 1")
    for name, metrics in (("double-groupby-1", 1), ("double-groupby-all", 10)):
        q[name] = (f"SELECT time_bucket(INTERVAL '1 hour', time) AS hour, hostname, {means(metrics)} "
                   f"FROM {TABLE} WHERE {where(start(12 * hour), 12 * hour)} GROUP BY 1, 2 ORDER BY 1, 2")
    q["high-cpu-1"] = (f"SELECT * FROM {TABLE} WHERE usage_user > 90.0 AND hostname IN ({some_hosts(1)}) "
                       f"AND {where(start(12 * hour), 12 * hour)} ORDER BY time")
    q["high-cpu-all"] = (f"SELECT * FROM {TABLE} WHERE usage_user > 90.0 AND "
                         f"{where(start(12 * hour), 12 * hour)} ORDER BY time, hostname")
    q["lastpoint"] = (f"SELECT c.* FROM {TABLE} c JOIN (SELECT hostname, max(time) AS newest FROM {TABLE} "
                      f"GROUP BY hostname) m ON c.hostname = m.hostname AND c.time = m.newest "
                      f"ORDER BY c.hostname")
    before = start(hour) + hour
    q["groupby-orderby-limit"] = (f"SELECT time_bucket(INTERVAL '1 minute', time) AS minute, max(usage_user) AS m "
                                  f"FROM {TABLE} WHERE time < TIMESTAMP '{iso(before)}' "
                                  f"GROUP BY 1 ORDER BY 1 DESC LIMIT 5")
    return q


# Runs in each system's interpreter: argv = system, mode, lake folder, parquet file, JSON params.
CHILD = r'''
import json, statistics, sys, time
import pyarrow as pa
import pyarrow.parquet as pq

system, mode, where, source, params = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
TABLE = "tsbs.cpu"
out = {}

def ms(t0):
    return (time.perf_counter() - t0) * 1000

if system == "duckdb":
    import duckdb
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE SCHEMA tsbs")
    con.execute(f"CREATE VIEW tsbs.cpu AS SELECT * FROM read_parquet('{source}')")
    run = lambda q: con.sql(q).to_arrow_table()
    latest = None
else:
    import timelake
    if mode == "write":
        lake = timelake.Lake(where)
        schema = pq.read_schema(source)
        try:
            t = lake.create_table(TABLE, schema, time_column="time", series_key=["hostname"],
                                  chunk="day", dedup=False)
        except ValueError:  # ours names its policies: "none", "last", "first"
            t = lake.create_table(TABLE, schema, time_column="time", series_key=["hostname"],
                                  chunk="day", dedup="none")
        t0 = time.perf_counter()
        for batch in pq.ParquetFile(source).iter_batches(batch_size=1_000_000):
            t.append(pa.Table.from_batches([batch]))
        out["write_ms"] = ms(t0)
        print(json.dumps(out))
        sys.exit(0)
    lake = timelake.Lake(where)
    run = lambda q: lake.sql(q)
    latest = lambda: lake.latest(TABLE)

work = dict(params["queries"])
if latest is not None:
    work["lastpoint_latest"] = None
for name, q in work.items():
    fn = latest if q is None else (lambda q=q: run(q))
    try:
        got = fn()  # warm-up
        out[name + "_rows"] = got.num_rows
        times = []
        for _ in range(params["repeat"]):
            t0 = time.perf_counter(); fn(); times.append(ms(t0))
        out[name + "_ms"] = statistics.median(times)
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        out[name + "_error"] = f"{type(e).__name__}: {e}"[:300]
print(json.dumps(out))
'''


def run(system: dict, mode: str, lake: Path, source: Path, params: dict) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if system.get("path"):
        env["PYTHONPATH"] = system["path"]
    done = subprocess.run([system["python"], "-c", CHILD, system["kind"], mode, str(lake), str(source),
                           json.dumps(params)], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {f"{mode}_error": done.stderr.strip()[-600:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed-python", required=True, help="python of a venv holding timelake==0.7.0")
    p.add_argument("--ours-path", default="", help="folder holding our timelake package (default: installed)")
    p.add_argument("--hosts", type=int, default=100)
    p.add_argument("--days", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5, help="runs per query per round (median)")
    p.add_argument("--seed", type=int, default=7, help="random seed of the data and the query parameters")
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--name", default="tsbs")
    p.add_argument("--keep", type=Path, default=None, help="write data and lakes here and keep them")
    args = p.parse_args()

    systems = [{"label": "timelake", "kind": "timelake", "python": sys.executable, "path": args.ours_path},
               {"label": "seed", "kind": "timelake", "python": args.seed_python, "path": ""},
               {"label": "duckdb", "kind": "duckdb", "python": sys.executable, "path": ""}]
    qs = queries(args.hosts, args.days, args.seed)
    params = {"repeat": args.repeat, "queries": qs}
    started = dt.datetime.now(dt.timezone.utc)
    runs: dict[str, dict[str, list]] = {s["label"]: {} for s in systems}

    def keep(label: str, got: dict) -> None:
        for k, v in got.items():
            runs[label].setdefault(k, []).append(v)

    with tempfile.TemporaryDirectory(prefix="timelake-tsbs-") as scratch:
        root = Path(args.keep) if args.keep else Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        source = root / "cpu.parquet"
        rows = generate(source, args.hosts, args.days, args.seed)
        print(f"data: {rows:,} rows, {source.stat().st_size / 1e6:.0f} MB", flush=True)
        lakes = {s["label"]: root / s["label"] for s in systems}
        for s in systems[:2]:
            got = run(s, "write", lakes[s["label"]], source, params)
            keep(s["label"], got)
            print(s["label"], "write:", got, flush=True)
        for r in range(args.rounds):
            order = systems if r % 2 == 0 else list(reversed(systems))
            for s in order:
                got = run(s, "queries", lakes[s["label"]], source, params)
                keep(s["label"], got)
                print(f"round {r + 1} {s['label']}:", ", ".join(
                    f"{k} {v:.2f}" for k, v in got.items() if k.endswith("_ms")), flush=True)
                errors = {k: v for k, v in got.items() if k.endswith("_error")}
                if errors:
                    print("   errors:", errors, flush=True)

    def median(label: str, key: str) -> float:
        values = runs[label].get(key)
        return statistics.median(values) if values else float("nan")

    measures = [k for k in runs["timelake"] if k.endswith("_ms")]
    table = [{"measure": k[:-3], **{s["label"]: median(s["label"], k) for s in systems}} for k in measures]
    rows_agree = {k[:-5]: {s["label"]: runs[s["label"]].get(k, [None])[-1] for s in systems}
                  for k in runs["timelake"] if k.endswith("_rows")}
    errors = {lab: {k: v[-1] for k, v in r.items() if k.endswith("_error")} for lab, r in runs.items()}
    versions = {s["label"]: version(s) for s in systems if s["kind"] == "timelake"}
    report = {"started": started.isoformat(), "versions": versions,
              "params": {"hosts": args.hosts, "days": args.days, "rows": rows, "seed": args.seed,
                         "rounds": args.rounds, "repeat": args.repeat},
              "queries": qs, "machine": machine_state(), "medians": table, "result_rows": rows_agree,
              "errors": errors, "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if b == b and b > 0 and a == a else "–"

    lines = [f"# TSBS cpu-only: timelake vs the seed system and DuckDB ({started:%Y-%m-%d %H:%M} UTC)", "",
             f"ours {versions.get('timelake')}, seed {versions.get('seed')}; {args.hosts} hosts, {args.days} days, "
             f"{rows:,} rows; {args.rounds} rounds alternated, medians of {args.repeat}; "
             f"load at the end {report['machine']['load']}", "",
             "| measure | timelake (ms) | seed (ms) | DuckDB on Parquet (ms) | ours / seed | ours / DuckDB | rows (ours, seed, DuckDB) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in table:
        agree = rows_agree.get(r["measure"], {})
        lines.append(f"| {r['measure']} | {r['timelake']:.2f} | {r['seed']:.2f} | {r['duckdb']:.2f} | "
                     f"{ratio(r['timelake'], r['seed'])} | {ratio(r['timelake'], r['duckdb'])} | "
                     f"{agree.get('timelake')}, {agree.get('seed')}, {agree.get('duckdb')} |")
    for lab, errs in errors.items():
        for k, v in errs.items():
            lines.append(f"\n{lab} {k}: {v}")
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
