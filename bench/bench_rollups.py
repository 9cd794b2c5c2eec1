#!/usr/bin/env python3
"""Dashboards over a month: rollups, ours and the seed system's (`timelake` 0.7.0), side by side.

Data as gateways send it (bench_seed's generator): --series devices over --days days, one reading
per device every --step-s seconds, in time order with the series interleaved. Each system gets
the same rows in a lake of its own, in processes of its own (both import as `timelake`); the
query rounds alternate the order (A then B, then B then A). Dedup off in both.

  write              bulk append of every row (one call)
  raw_dashboard      the dashboard query on the raw rows (before any rollup exists: the seed has
                     no switch to turn routing off; ours is also measured with rollups=False)
  rollup_create      CREATE MATERIALIZED ROLLUP bench.hourly (hourly avg/min/max/count per device)
  dashboard          hourly average per device over the whole period, routed to the rollup
  dashboard_day      the same with daily buckets (ours merges hourly state; the seed reads raw
                     if it cannot)
  rollup_read        SELECT from the rollup table itself, one week
  append_refresh     a 10-row append of newer readings, then REFRESH (p50 of --appends)
  dashboard_dirty    the dashboard right after a 10-row append, before any refresh

Ratios are ours / seed (< 1: we are faster). Results: bench/results/rollups.{json,md}. A benchmark
measures, it never asserts.

    .venv/bin/python bench/bench_rollups.py --seed-python /work/seedvenv/bin/python
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

CHILD = r'''
import json, sys, time
import numpy as np
import pyarrow as pa
import timelake

mode, where, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
US = 1_000_000
START = 1_793_491_200 * US  # 2026-10-31T00:00:00Z
SCHEMA = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()),
                    ("temp", pa.float64()), ("humidity", pa.float64())])
series, days, step = params["series"], params["days"], params["step_s"] * US
ticks = days * 86_400 * US // step
OURS = hasattr(timelake, "_rollup")

def ms(t0):
    return (time.perf_counter() - t0) * 1000

def rows(first_tick, n_ticks):
    tick = np.repeat(np.arange(first_tick, first_tick + n_ticks, dtype=np.int64), series)
    dev = np.tile(np.arange(series, dtype=np.int64), n_ticks)
    t = START + tick * step + dev * (step // max(series, 1))
    rng = np.random.default_rng(first_tick)
    n = len(t)
    names = np.array([f"dev-{i:05d}" for i in range(series)], dtype=object)
    return pa.table({"time": pa.array(t, pa.timestamp("us", tz="UTC")),
                     "device_id": pa.array(names[dev], pa.string()),
                     "temp": 20 + 5 * np.sin(t / (3600 * US)) + rng.normal(0, 0.5, n),
                     "humidity": rng.uniform(30, 70, n)}, schema=SCHEMA)

def open_lake():
    if OURS:
        return timelake.Lake(where, storage_options={"timelake_rollup_refresh_interval": "off"})
    return timelake.Lake(where)

def timed(lake, q, repeat, **kw):
    lake.sql(q, **kw)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter(); lake.sql(q, **kw); times.append(ms(t0))
    return sorted(times)[len(times) // 2]

Q = params["queries"]
out = {}
lake = open_lake()
if mode == "write":
    try:
        t = lake.create_table("bench.readings", SCHEMA, time_column="time", series_key=["device_id"],
                              chunk="day", dedup=False)
    except ValueError:
        t = lake.create_table("bench.readings", SCHEMA, time_column="time", series_key=["device_id"],
                              chunk="day", dedup="none")
    data = rows(0, ticks)
    t0 = time.perf_counter(); t.append(data); out["write_ms"] = ms(t0)
    del data
    out["raw_dashboard_ms"] = timed(lake, Q["dashboard"], 3)
    t0 = time.perf_counter(); lake.sql(Q["create"]); out["rollup_create_ms"] = ms(t0)
elif mode == "queries":
    for name in ("dashboard", "dashboard_day", "rollup_read"):
        try:
            out[name + "_ms"] = timed(lake, Q[name], params["repeat"])
            out[name + "_rows"] = lake.sql(Q[name]).num_rows
        except Exception as e:
            out[name + "_error"] = f"{type(e).__name__}: {e}"[:300]
    if OURS:
        out["raw_dashboard_ours_ms"] = timed(lake, Q["dashboard"], 3, rollups=False)
elif mode == "appends":
    t = lake.table("bench.readings")
    lat, dirty = [], []
    next_tick = ticks + params["round"] * (params["appends"] + 1) * 10
    for i in range(params["appends"]):
        small = rows(next_tick + i, 1).slice(0, 10)
        t.append(small)
        t0 = time.perf_counter(); lake.sql(Q["dashboard"]); dirty.append(ms(t0))
        t0 = time.perf_counter(); lake.sql(Q["refresh"]); lat.append(ms(t0))
    lat.sort(); dirty.sort()
    out["append_refresh_ms"] = lat[len(lat) // 2]
    out["dashboard_dirty_ms"] = dirty[len(dirty) // 2]
print(json.dumps(out))
'''


def queries(days: int) -> dict[str, str]:
    day0 = 1_793_491_200

    def ts(s: int) -> str:
        return "TIMESTAMP '" + dt.datetime.fromtimestamp(s, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") + "'"

    lo, hi = ts(day0), ts(day0 + days * 86_400)
    return {
        "create": ("CREATE MATERIALIZED ROLLUP bench.hourly AS SELECT time_bucket(INTERVAL '1 hour', time) AS hour, "
                   "device_id, avg(temp) AS temp, min(temp) AS low, max(temp) AS high, count(*) AS n "
                   "FROM bench.readings GROUP BY 1, 2"),
        "refresh": "REFRESH MATERIALIZED ROLLUP bench.hourly",
        "dashboard": ("SELECT time_bucket(INTERVAL '1 hour', time) AS hour, device_id, avg(temp) AS temp "
                      f"FROM bench.readings WHERE time >= {lo} AND time < {hi} GROUP BY 1, 2"),
        "dashboard_day": ("SELECT time_bucket(INTERVAL '1 day', time) AS day, device_id, avg(temp) AS temp "
                          f"FROM bench.readings WHERE time >= {lo} AND time < {hi} GROUP BY 1, 2"),
        "rollup_read": (f"SELECT hour, device_id, temp FROM bench.hourly WHERE hour >= {ts(day0 + max(days - 7, 0) * 86_400)}"),
    }


def run(system: dict, mode: str, lake: Path, params: dict) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if system.get("path"):
        env["PYTHONPATH"] = system["path"]
    done = subprocess.run([system["python"], "-c", CHILD, mode, str(lake), json.dumps(params)],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {f"{mode}_error": done.stderr.strip()[-600:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from bench_seed import version

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed-python", required=True)
    p.add_argument("--ours-path", default="", help="folder holding our timelake package (default: installed)")
    p.add_argument("--series", type=int, default=1_000)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--step-s", type=int, default=300, help="seconds between two readings of a device")
    p.add_argument("--appends", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--out", type=Path, default=HERE / "results")
    args = p.parse_args()

    ours = {"label": "timelake", "python": sys.executable, "path": args.ours_path}
    seed = {"label": "seed", "python": args.seed_python, "path": ""}
    params = {"series": args.series, "days": args.days, "step_s": args.step_s, "appends": args.appends,
              "repeat": args.repeat, "queries": queries(args.days), "round": 0}
    started = dt.datetime.now(dt.timezone.utc)
    runs: dict[str, dict[str, list]] = {"timelake": {}, "seed": {}}

    def keep(label: str, got: dict) -> None:
        for k, v in got.items():
            runs[label].setdefault(k, []).append(v)

    with tempfile.TemporaryDirectory(prefix="timelake-rollups-") as tmp:
        lakes = {s["label"]: Path(tmp) / s["label"] for s in (ours, seed)}
        for s in (ours, seed):
            got = run(s, "write", lakes[s["label"]], params)
            keep(s["label"], got)
            print(s["label"], "write:", got, flush=True)
        for r in range(args.rounds):
            for s in ((ours, seed) if r % 2 == 0 else (seed, ours)):
                got = run(s, "queries", lakes[s["label"]], params)
                got.update(run(s, "appends", lakes[s["label"]], {**params, "round": r}))
                keep(s["label"], got)
                print(f"round {r + 1} {s['label']}:", got, flush=True)

    measures = [k for k in runs["timelake"] if k.endswith("_ms")]
    rows = []
    for k in measures:
        a = statistics.median(runs["timelake"][k])
        b = runs["seed"].get(k)
        b = statistics.median(b) if b else float("nan")
        rows.append({"measure": k[:-3], "timelake_ms": a, "seed_ms": b, "ratio": a / b if b == b and b else float("nan")})
    errors = {lab: {k: v[-1] for k, v in r.items() if k.endswith("_error")} for lab, r in runs.items()}
    report = {"started": started.isoformat(), "versions": {"timelake": version(ours), "seed": version(seed)},
              "params": {k: v for k, v in params.items() if k != "queries"}, "queries": params["queries"],
              "machine": machine_state(), "medians": rows, "errors": errors, "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rollups.json").write_text(json.dumps(report, indent=2) + "\n")
    n = args.series * args.days * 86_400 // args.step_s
    lines = [f"# Rollups: timelake vs the seed system ({started:%Y-%m-%d %H:%M} UTC)", "",
             f"ours {report['versions']['timelake']}, seed {report['versions']['seed']}; {n:,} rows, "
             f"{args.series} series, {args.days} days; {args.rounds} rounds alternated, medians; "
             f"load at the end {report['machine']['load']}", "",
             "| measure | timelake (ms) | seed (ms) | ours / seed |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['measure']} | {r['timelake_ms']:.2f} | {r['seed_ms']:.2f} | {r['ratio']:.2f} |" for r in rows]
    for lab, errs in errors.items():
        for k, v in errs.items():
            lines.append(f"\n{lab} {k}: {v}")
    (args.out / "rollups.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
