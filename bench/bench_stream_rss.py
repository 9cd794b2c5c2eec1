"""Peak memory of a streamed append: is it bounded by the ingest buffer, whatever the input size?

Each measurement runs in a fresh child process that generates IoT rows batch by batch (a Python
generator: the whole input never exists at once) and hands them to one `Table.append` call as a
`pyarrow.RecordBatchReader`. The child reports its resident memory before the append (Python,
pyarrow, timelake loaded, the table created) and its peak (`ru_maxrss`) after it; the difference
is what the append itself needed. Run with two input sizes in batches of the same size (the
batches' own memory is the generator's, and grows with them), the growth tells whether memory
follows the input or stays flat. Target (issue 9): peak growth ≤ the ingest buffer (256 MiB) +
300 MiB, independent of the input size.

    PYTHONPATH=python .venv/bin/python bench/bench_stream_rss.py            # 10M and 40M rows
    PYTHONPATH=python .venv/bin/python bench/bench_stream_rss.py --rows 2000000,8000000

Writes bench/results/stream_rss.json and .md. Never asserts: a benchmark, not a test.
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
BUFFER_MIB = 256  # IngestOptions::buffer_bytes (src/timelake/ingest/ingestor.h)
TARGET_EXTRA_MIB = 300


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(rows: int, batches: int, workdir: str, out) -> None:
    import numpy as np
    import pyarrow as pa

    import timelake

    schema = pa.schema([("time", pa.timestamp("us", tz="UTC")), ("device_id", pa.string()),
                        ("temp", pa.float64()), ("humidity", pa.float64()), ("pressure", pa.float64())])
    lake = timelake.Lake(workdir)
    table = lake.create_table("bench.stream", schema, time_column="time", series_key=["device_id"],
                              chunk="day", dedup="last")
    names = pa.array([f"dev-{i:05d}" for i in range(1000)])
    start_us = int(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1e6)
    per = rows // batches
    interval = 7 * 86_400_000_000 // rows  # rows spread over a week

    def produce():
        rng = np.random.default_rng(1)
        for b in range(batches):
            idx = np.arange(b * per, (b + 1) * per, dtype=np.int64)
            yield pa.record_batch([
                pa.array(start_us + idx * interval, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                names.take(pa.array((idx % 1000).astype(np.int32))),
                pa.array(rng.normal(20, 5, per)), pa.array(rng.normal(50, 10, per)),
                pa.array(rng.normal(1000, 3, per)),
            ], schema=schema)

    before = rss_mib()
    t0 = time.perf_counter()
    result = table.append(pa.RecordBatchReader.from_batches(schema, produce()))
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.put({"rows": rows, "batches": batches, "rss_before_mib": before, "peak_rss_mib": peak,
             "growth_mib": peak - before, "seconds": seconds, "files": result["files"],
             "bytes": result["bytes"]})


def measure(rows: int, batches: int) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        p = ctx.Process(target=child, args=(rows, batches, d, out))
        p.start()
        p.join()
        if p.exitcode != 0:
            return {"rows": rows, "batches": batches, "error": f"child exited with {p.exitcode}"}
        return out.get()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="10000000,40000000", help="input sizes, comma-separated")
    ap.add_argument("--batch-rows", type=int, default=200_000, help="rows per generated batch")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    runs = []
    for rows in [int(x) for x in args.rows.split(",") if x]:
        r = measure(rows, max(1, rows // args.batch_rows))
        runs.append(r)
        print(json.dumps(r), flush=True)
    report = {"finished_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "argv": sys.argv[1:], "buffer_mib": BUFFER_MIB, "target_growth_mib": BUFFER_MIB + TARGET_EXTRA_MIB,
              "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "stream_rss.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = ["# Benchmark: peak memory of a streamed append", "",
             f"Run {report['finished_at']} by `bench/bench_stream_rss.py`; one `append` of a "
             f"RecordBatchReader of generated batches of {args.batch_rows:,} rows, each row count in a fresh "
             f"process. Target: growth ≤ {BUFFER_MIB} MiB buffer + {TARGET_EXTRA_MIB} MiB, "
             "independent of the input size.", "",
             "| rows | batches | RSS before | peak RSS | growth | seconds | files |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['rows']:,} | {r['batches']} | FAILED: {r['error']} | | | | |")
            continue
        lines.append(f"| {r['rows']:,} | {r['batches']} | {r['rss_before_mib']:.0f} MiB | "
                     f"{r['peak_rss_mib']:.0f} MiB | {r['growth_mib']:.0f} MiB | {r['seconds']:.1f} | {r['files']} |")
    (args.out / "stream_rss.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out / 'stream_rss.json'} and {args.out / 'stream_rss.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
