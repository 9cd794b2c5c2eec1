#!/usr/bin/env python3
"""timelake side by side with the seed's own system (`timelake` 0.7.0 on PyPI, Rust + Iceberg).

Both packages import as `timelake`, so each system runs in processes of its own: ours under this
interpreter (or --ours-path, a folder holding a timelake package), the seed system under
--seed-python (a venv with `pip install timelake==0.7.0 numpy`). Every figure is measured on the
same rows, in the same run, the systems alternated round by round (A then B, then B then A).

Data, as gateways send it: --rows rows of --series devices over --days days, arriving in time
order with the series interleaved (time, device_id, temp, humidity, pressure); dedup off in both.

  write          bulk append of every row in one call (fresh table)
  appends        then --appends 10-row appends with batch ids, newer than the bulk rows: p50/p99
  import         a new process: `import timelake` (pyarrow comes with it in both)
  cold_sql       a new process: import timelake + Lake() + one one-series query
  first_sql      a new process: Lake() + one one-series query (the import excluded)
  first_latest   a new process: Lake() + latest()
  queries        on a warm Lake, each the median of --repeat runs after one warm-up:
                   series_hour / series_day / series_week   avg, min, max of one device's temp
                   series_day_rows                          that device's rows of one day
                   hourly_all / daily_all                   time_bucket average over all series
                   max_last_day                             max temp per device over the last day
                   latest_warm                              latest() again and again

Ratios are ours / seed (< 1: we are faster). Results: bench/results/seed.json and seed.md. A
benchmark measures, it never asserts; a failing query is reported with its error.

    .venv/bin/python bench/bench_seed.py --seed-python /path/to/seedvenv/bin/python
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

# Runs inside each system's own interpreter: argv = mode, lake folder, JSON parameters.
CHILD = r'''
import json, sys, time
import numpy as np
import pyarrow as pa
import timelake

mode, where, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
TABLE = "bench.readings"
US = 1_000_000
START = 1_793_491_200 * US  # 2026-10-31T00:00:00Z
SCHEMA = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()),
                    ("temp", pa.float64()), ("humidity", pa.float64()), ("pressure", pa.float64())])

def ms(t0):
    return (time.perf_counter() - t0) * 1000

def rows(first_tick, ticks, series, step_us):
    """`ticks` readings of every device, tick after tick (arrival order, series interleaved)."""
    tick = np.repeat(np.arange(first_tick, first_tick + ticks, dtype=np.int64), series)
    dev = np.tile(np.arange(series, dtype=np.int64), ticks)
    t = START + tick * step_us + dev * (step_us // max(series, 1))
    rng = np.random.default_rng(first_tick)
    n = len(t)
    names = np.array([f"dev-{i:05d}" for i in range(series)], dtype=object)
    return pa.table({"time": pa.array(t, pa.timestamp("us", tz="UTC")),
                     "device_id": pa.array(names[dev], pa.string()),
                     "temp": 20 + 5 * np.sin(t / (3600 * US)) + rng.normal(0, 0.5, n),
                     "humidity": rng.uniform(30, 70, n), "pressure": rng.normal(1013, 3, n)},
                    schema=SCHEMA)

series, days, total = params["series"], params["days"], params["rows"]
ticks = max(total // series, 1)
step = days * 86_400 * US // ticks
end = START + ticks * step
out = {}
if mode == "write":
    data = rows(0, ticks, series, step)
    lake = timelake.Lake(where)
    try:
        t = lake.create_table(TABLE, SCHEMA, time_column="time", series_key=["device_id"],
                              chunk="day", dedup=False)
    except ValueError:  # ours names its policies: "none", "last", "first"
        t = lake.create_table(TABLE, SCHEMA, time_column="time", series_key=["device_id"],
                              chunk="day", dedup="none")
    t0 = time.perf_counter(); t.append(data); out["write_ms"] = ms(t0)
    lat = []
    per = max(10 // series, 1)
    for i in range(params["appends"]):
        small = rows(ticks + i * per, per, series, step).slice(0, 10)
        t0 = time.perf_counter(); t.append(small, batch_id=f"gw-{i:06d}"); lat.append(ms(t0))
    lat.sort()
    if lat:
        out["append_p50_ms"] = lat[len(lat) // 2]
        out["append_p99_ms"] = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
elif mode == "first_sql":
    t0 = time.perf_counter()
    lake = timelake.Lake(where)
    lake.sql(params["queries"]["series_day"])
    out["first_sql_ms"] = ms(t0)
elif mode == "first_latest":
    t0 = time.perf_counter()
    lake = timelake.Lake(where)
    got = lake.latest(TABLE)
    out["first_latest_ms"] = ms(t0)
    out["latest_rows"] = got.num_rows
elif mode == "queries":
    lake = timelake.Lake(where)
    for name, q in params["queries"].items():
        try:
            got = lake.sql(q)
            times = []
            for _ in range(params["repeat"]):
                t0 = time.perf_counter(); lake.sql(q); times.append(ms(t0))
            out[name + "_ms"] = sorted(times)[len(times) // 2]
            out[name + "_rows"] = got.num_rows
        except Exception as e:  # reported, never fatal
            out[name + "_error"] = f"{type(e).__name__}: {e}"[:300]
    lake.latest(TABLE)
    times = []
    for _ in range(params["repeat"] * 4):
        t0 = time.perf_counter(); lake.latest(TABLE); times.append(ms(t0))
    out["latest_warm_ms"] = sorted(times)[len(times) // 2]
print(json.dumps(out))
'''


def iso(us: int) -> str:
    return dt.datetime.fromtimestamp(us / 1e6, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def queries(series: int, days: int) -> dict[str, str]:
    """The query set, written once for both engines (DuckDB and DataFusion read it alike)."""
    day0 = 1_793_491_200 * 1_000_000
    mid = day0 + (days // 2) * 86_400_000_000  # a day in the middle of the data
    last = day0 + days * 86_400_000_000
    dev = f"dev-{series // 3:05d}"

    def ts(us: int) -> str:
        return f"TIMESTAMP '{iso(us)}'"

    def one_series(lo: int, hi: int) -> str:
        return (f"SELECT avg(temp) AS a, min(temp) AS lo, max(temp) AS hi FROM bench.readings "
                f"WHERE device_id = '{dev}' AND time >= {ts(lo)} AND time < {ts(hi)}")

    return {
        "series_hour": one_series(mid + 9 * 3_600_000_000, mid + 10 * 3_600_000_000),
        "series_day": one_series(mid, mid + 86_400_000_000),
        "series_week": one_series(day0, day0 + 7 * 86_400_000_000),
        "series_day_rows": (f"SELECT time, temp FROM bench.readings WHERE device_id = '{dev}' "
                            f"AND time >= {ts(mid)} AND time < {ts(mid + 86_400_000_000)} ORDER BY time"),
        "hourly_all": ("SELECT time_bucket(INTERVAL '1 hour', time) AS hour, avg(temp) AS temp "
                       "FROM bench.readings GROUP BY 1 ORDER BY 1"),
        "daily_all": ("SELECT time_bucket(INTERVAL '1 day', time) AS day, avg(temp) AS temp "
                      "FROM bench.readings GROUP BY 1 ORDER BY 1"),
        "max_last_day": (f"SELECT device_id, max(temp) AS hi FROM bench.readings "
                         f"WHERE time >= {ts(last - 86_400_000_000)} GROUP BY device_id"),
    }


# A process that starts, imports timelake (and with it pyarrow) and asks one query: what a CLI
# call or a cron job feels, the import included (first_sql excludes it).
COLD = r'''
import json, sys, time
t0 = time.perf_counter()
import timelake
t1 = time.perf_counter()
lake = timelake.Lake(sys.argv[2])
lake.sql(json.loads(sys.argv[3])["queries"]["series_day"])
t2 = time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1000, "cold_sql_ms": (t2 - t0) * 1000}))
'''


def run(system: dict, mode: str, lake: Path, params: dict) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if system.get("path"):
        env["PYTHONPATH"] = system["path"]
    code = COLD if mode == "cold_sql" else CHILD
    done = subprocess.run([system["python"], "-c", code, mode, str(lake), json.dumps(params)],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {f"{mode}_error": done.stderr.strip()[-600:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def version(system: dict) -> str:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if system.get("path"):
        env["PYTHONPATH"] = system["path"]
    code = "import importlib.metadata as m, timelake; print(getattr(timelake, '__version__', '') or m.version('timelake'))"
    done = subprocess.run([system["python"], "-c", code], env=env, capture_output=True, text=True)
    return done.stdout.strip() or done.stderr.strip()[-200:]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed-python", required=True, help="python of a venv holding timelake==0.7.0")
    p.add_argument("--ours-path", default="", help="folder holding our timelake package (default: installed)")
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--series", type=int, default=1_000)
    p.add_argument("--days", type=int, default=7)
    p.add_argument("--appends", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3, help="query rounds, the order alternated")
    p.add_argument("--repeat", type=int, default=9, help="runs per query per round (median)")
    p.add_argument("--only", default="", help="comma-separated query names to run (default all)")
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--name", default="seed", help="results file stem (default seed)")
    p.add_argument("--keep", type=Path, default=None, help="write the lakes into this folder and keep them")
    args = p.parse_args()

    ours = {"label": "timelake", "python": sys.executable, "path": args.ours_path}
    seed = {"label": "seed", "python": args.seed_python, "path": ""}
    qs = queries(args.series, args.days)
    if args.only:
        qs = {k: v for k, v in qs.items() if k in args.only.split(",")}
    params = {"rows": args.rows, "series": args.series, "days": args.days, "appends": args.appends,
              "repeat": args.repeat, "queries": qs}
    started = dt.datetime.now(dt.timezone.utc)
    runs: dict[str, dict[str, list]] = {"timelake": {}, "seed": {}}

    def keep(label: str, got: dict) -> None:
        for k, v in got.items():
            runs[label].setdefault(k, []).append(v)

    with tempfile.TemporaryDirectory(prefix="timelake-seed-") as scratch:
        tmp = str(args.keep) if args.keep else scratch
        lakes = {s["label"]: Path(tmp) / s["label"] for s in (ours, seed)}
        for s in (ours, seed):
            got = run(s, "write", lakes[s["label"]], params)
            keep(s["label"], got)
            print(s["label"], "write:", got, flush=True)
        for r in range(args.rounds):
            order = (ours, seed) if r % 2 == 0 else (seed, ours)
            for s in order:
                got = {}
                for mode in ("cold_sql", "first_sql", "first_latest", "queries"):
                    got.update(run(s, mode, lakes[s["label"]], params))
                keep(s["label"], got)
                print(f"round {r + 1} {s['label']}:",
                      ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                for k, v in got.items() if not k.endswith("_rows")), flush=True)

    measures = [k for k in runs["timelake"] if k.endswith("_ms")]
    rows = []
    for k in measures:
        a = statistics.median(runs["timelake"][k])
        b = runs["seed"].get(k)
        b = statistics.median(b) if b else float("nan")
        rows.append({"measure": k[:-3], "timelake_ms": a, "seed_ms": b, "ratio": a / b if b else float("nan")})
    errors = {lab: {k: v[-1] for k, v in r.items() if k.endswith("_error")} for lab, r in runs.items()}
    report = {"started": started.isoformat(), "versions": {"timelake": version(ours), "seed": version(seed)},
              "params": {k: v for k, v in params.items() if k != "queries"}, "queries": qs,
              "rounds": args.rounds, "machine": machine_state(), "medians": rows, "errors": errors,
              "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"# timelake vs the seed system ({started:%Y-%m-%d %H:%M} UTC)", "",
             f"ours {report['versions']['timelake']}, seed {report['versions']['seed']}; "
             f"{args.rows:,} rows, {args.series} series, {args.days} days, dedup off; "
             f"{args.rounds} rounds alternated, medians; load at the end {report['machine']['load']}", "",
             "| measure | timelake (ms) | seed (ms) | ours / seed |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['measure']} | {r['timelake_ms']:.2f} | {r['seed_ms']:.2f} | {r['ratio']:.2f} |" for r in rows]
    for lab, errs in errors.items():
        for k, v in errs.items():
            lines.append(f"\n{lab} {k}: {v}")
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
