#!/usr/bin/env python3
"""timelake vs delta-rs on one object store (S3, Azure Blob, GCS): both systems, the same data, one run.

Every system is measured side by side against the same endpoint, which this script starts and
stops (DESIGN.md §8): `--store s3` (the default) a moto server on 127.0.0.1
(tests/python/s3_server.py), `--store azure` Azurite (tests/python/azure_server.py), `--store gcs`
fake-gcs-server (tests/python/gcs_server.py); cloud_stores.py holds what differs between them.
delta-rs cannot write to fake-gcs-server: there its writes are reported as such, and its readers
read the tables timelake wrote.

bulk     one pyarrow Table (IoT shape: time, device_id, 3 floats; 1,000 series) appended by
           * timelake   Table.append(table)
           * delta-rs   write_deltalake(url, table, mode="append", storage_options=...)
small    200 appends of 10 rows, one commit each
           * timelake   Table.append(batch, batch_id=...)                        (one handle)
           * delta-rs   write_deltalake(DeltaTable, batch, mode="append",
                                        commit_properties=CommitProperties(app_transactions=
                                        [Transaction(app_id, version)]))         (one handle)
           * delta-rs   the same with the URL instead of a handle                 (re-opens)
query    one series over one day (avg/min/max, and the rows) on the bulk tables, cold and warm
           * timelake   lake.sql: cold = a new Lake with an empty TIMELAKE_CACHE_DIR (downloads
                        the files the scan plan keeps), warm = the same Lake again (local copies)
           * delta-rs   DeltaTable(url).to_pyarrow_dataset() queried by DuckDB, by pyarrow
                        (to_table(filter=...)), and delta-rs's own QueryBuilder (DataFusion):
                        cold = a new DeltaTable, warm = the same one after update_incremental()
latest   the newest row per series: timelake lake.latest (new Lake, warm) vs DuckDB arg_max /
         QUALIFY over the delta-rs dataset, on the bulk tables and on the small-append tables
open     a timelake table grown by 1,000 one-row appends; timelake.Lake(url).table(name) (a new
         Lake every time) vs deltalake.DeltaTable(url) on that same table

Besides times, every step records how many requests the server served for it (counted from its
own request log: moto's, Azurite's access log, fake-gcs-server's); every cold read is done once
more, untimed, through a byte-counting proxy (what it read from the store), and the cold timelake
query's cache is weighed against the table's size. Ratios are peer / timelake: > 1 means timelake
is faster (for commits/s: timelake's rate over the peer's). Results go to
bench/results/<store>.json and <store>.md. A benchmark measures; it never asserts: a system that
fails is reported with its error.

    .venv/bin/python bench/bench_s3.py --quick                  # smoke run on S3, ~1 min
    .venv/bin/python bench/bench_s3.py                          # the reported S3 run
    .venv/bin/python bench/bench_s3.py --store azure --quick    # Azure Blob (Azurite)
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
from bench_commits_latest import (  # noqa: E402 - the shared helpers of the local benchmarks
    ARGMAX_SQL,
    QUALIFY_SQL,
    add_append_ratios,
    append_loop,
    best_run,
    cpu_busy_pct,
    delta_props,
    fms,
    fx,
    installed_timelake,
    normalize,
    pct,
    small_batch,
)
from bench_ingest_query import (  # noqa: E402
    SCHEMA,
    device_name,
    duckdb_connection,
    error_text,
    fingerprint,
    fmt_rate,
    generate,
    jsonable,
    load_average,
    log,
    machine,
    make_queries,
    md_table,
    same_result,
    text_table,
    versions,
    write_report,
)
from cloud_stores import STORES, Store  # noqa: E402 - the servers: moto, Azurite, fake-gcs-server

TABLE = "bench.readings"
TABLE_DIR = "bench/readings"  # where TABLE lives under a lake's root
US_PER_S = 1_000_000

TL_APPEND = "timelake Table.append"
DELTA_WRITE = "delta-rs write_deltalake(url)"
TL_SMALL = "timelake Table.append(batch_id)"
DELTA_SMALL_HANDLE = "delta-rs write_deltalake(DeltaTable)"
DELTA_SMALL_URL = "delta-rs write_deltalake(url)"
TL_SQL = "timelake lake.sql"
DELTA_DUCKDB = "delta-rs dataset + DuckDB"
DELTA_PYARROW = "delta-rs dataset + pyarrow filter"
DELTA_QB = "delta-rs QueryBuilder (DataFusion)"
TL_LATEST = "timelake lake.latest"
DELTA_ARGMAX = "delta-rs dataset + DuckDB arg_max"
DELTA_QUALIFY = "delta-rs dataset + DuckDB QUALIFY"
TL_OPEN = "timelake Lake(url).table(name)"
DELTA_OPEN = "deltalake.DeltaTable(url), same table"


# ---------------------------------------------------------------------------------------------
# The store side: the byte-counting proxy, what every part needs
# ---------------------------------------------------------------------------------------------


def _count_bytes(upstream: str, rewrite_host: bool, total, endpoint_conn, stop) -> None:
    """The byte-counting proxy's process (see ByteCounter)."""
    from urllib.parse import urlparse

    import fault_proxy

    original = fault_proxy._Handler._forward
    upstream_host = urlparse(upstream).netloc

    def forward(handler, body):
        if rewrite_host:
            del handler.headers["Host"]
            handler.headers["Host"] = upstream_host
        reply = original(handler, body)
        with total.get_lock():
            total.value += len(reply.body)
        return reply

    fault_proxy._Handler._forward = forward
    proxy = fault_proxy.FaultProxy(upstream).start()
    endpoint_conn.send(proxy.endpoint)
    stop.wait()
    proxy.stop()


class ByteCounter:
    """A forwarding proxy in front of the store's server (tests/python/fault_proxy.py with no
    fault armed) that adds up the bytes of the replies' bodies: what a client read from the store.

    It runs in its own process: a proxy in this one would need the GIL, which some clients hold
    while they wait for their requests (delta-rs's QueryBuilder does). Reads go through it only in
    an extra, untimed pass, since it slows every request it forwards. `rewrite_host`: forward with
    the server's Host instead of the client's (fake-gcs-server routes XML-API requests only when
    the Host is its own; S3 clients sign the Host, so there it must stay)."""

    def __init__(self, upstream: str, rewrite_host: bool = False):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._total = ctx.Value("q", 0)
        self._stop = ctx.Event()
        receive, send = ctx.Pipe(duplex=False)
        self._process = ctx.Process(target=_count_bytes, args=(upstream, rewrite_host, self._total, send, self._stop),
                                    daemon=True)
        self._process.start()
        if not receive.poll(60):
            self.stop()
            raise RuntimeError("the byte-counting proxy did not start within 60 s")
        self.endpoint = receive.recv()

    @property
    def total(self) -> int:
        with self._total.get_lock():
            return self._total.value

    def stop(self) -> None:
        self._stop.set()
        self._process.join(timeout=10)
        if self._process.is_alive():  # only the process this object started, by its handle
            self._process.terminate()
            self._process.join(timeout=10)


class Context:
    """What every part needs: the store (its server, request log and buckets), both clients'
    options, the caches."""

    def __init__(self, args, store: Store, work: Path):
        self.args = args
        self.store = store
        self.requests = store.requests
        self.buckets = store
        self.work = work
        self.bytes: ByteCounter | None = None  # set while the byte-counting proxy runs
        self._caches = 0

    def tl_options(self, endpoint: str | None = None) -> dict:
        """timelake storage_options, for the server or for `endpoint` (the byte-counting proxy)."""
        return self.store.tl_options(endpoint)

    def delta_options(self, endpoint: str | None = None) -> dict:
        return self.store.delta_options(endpoint)

    def url(self, prefix: str) -> str:
        return self.store.url(prefix)

    def fresh_cache(self) -> Path:
        """A new, empty TIMELAKE_CACHE_DIR, set in the environment: a Lake opened after this
        call downloads into it (the core reads the variable when a Lake first needs its cache)."""
        self._caches += 1
        path = self.work / f"cache-{self._caches:03d}"
        path.mkdir(parents=True)
        os.environ["TIMELAKE_CACHE_DIR"] = str(path)
        return path

    def tl_lake(self, prefix: str, endpoint: str | None = None):
        import timelake

        return timelake.Lake(self.url(prefix), storage_options=self.tl_options(endpoint))

    def tl_create(self, prefix: str):
        lake = self.tl_lake(prefix)
        t = lake.create_table(TABLE, SCHEMA, time_column="time", series_key=["device_id"], chunk="day",
                              dedup="last")
        return lake, t

    def delta(self, url: str, endpoint: str | None = None):
        from deltalake import DeltaTable

        return DeltaTable(url, storage_options=self.delta_options(endpoint))


def dir_bytes(path: Path) -> tuple[int, int]:
    """(bytes stored on disk, data-file copies) under path, leaving out half-written downloads and
    kept footers. Row-group copies are sparse files: their allocated blocks count, not their length."""
    total = files = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            if ".part-" not in n:
                total += os.stat(os.path.join(root, n)).st_blocks * 512
                files += not n.endswith(".footer")
    return total, files


def per_call(reqs: dict, calls: int) -> float | None:
    return reqs["requests"] / calls if calls else None


# ---------------------------------------------------------------------------------------------
# Part 1: bulk append
# ---------------------------------------------------------------------------------------------


def run_bulk(ctx: Context, data: pa.Table) -> tuple[list[dict], dict]:
    """Each system writes `data` --ingest-runs times into fresh prefixes; keeps the last tables."""
    from deltalake import write_deltalake

    def tl(prefix):
        _lake, t = ctx.tl_create(prefix)  # create_table is not timed
        mark = ctx.requests.mark()
        t0 = time.perf_counter()
        res = t.append(data)
        seconds = time.perf_counter() - t0
        return seconds, ctx.requests.since(mark), {"append_result": jsonable(res)}, f"{prefix}/{TABLE_DIR}"

    def delta(prefix):
        mark = ctx.requests.mark()
        t0 = time.perf_counter()
        write_deltalake(ctx.url(prefix), data, mode="append", storage_options=ctx.delta_options())
        seconds = time.perf_counter() - t0
        return seconds, ctx.requests.since(mark), None, prefix

    entries, where = [], {}
    for name, key, fn in ((TL_APPEND, "timelake", tl), (DELTA_WRITE, "delta", delta)):
        entry = {"system": name, "key": key, "times_s": [], "error": None}
        kept = None
        if key != "timelake" and cannot_write(ctx, entry):
            entries.append(entry)
            continue
        for r in range(ctx.args.ingest_runs):
            prefix = f"bulk-{key}-{r}"
            gc.collect()
            try:
                seconds, reqs, details, table_prefix = fn(prefix)
            except Exception as e:  # noqa: BLE001 - report, never abort the benchmark
                entry["error"] = error_text(e)
                entry["traceback"] = traceback.format_exc()
                log(f"    {name}: FAILED {entry['error']}")
                break
            entry["times_s"].append(seconds)
            entry["requests"] = reqs
            if details:
                entry["details"] = details
            if kept is not None:
                ctx.buckets.delete(kept[0])  # keep the store small: the server holds it in memory
            kept = (prefix, table_prefix)
            log(f"    {name}: run {r + 1}/{ctx.args.ingest_runs} {seconds:.2f} s, {reqs['requests']} requests")
        if entry["times_s"]:
            entry["best_s"] = min(entry["times_s"])
            entry["rows_per_s"] = data.num_rows / entry["best_s"]
            entry["store"] = ctx.buckets.usage(kept[1])
            where[key] = kept
        entries.append(entry)
    base = next((e for e in entries if e["key"] == "timelake" and "best_s" in e), None)
    for e in entries:
        if base and "best_s" in e:
            e["ratio"] = e["best_s"] / base["best_s"]
    if "delta" not in where and ctx.store.delta_write_error and "timelake" in where:
        table_prefix = where["timelake"][1]
        where["delta"] = (table_prefix, table_prefix)  # delta-rs reads the table timelake wrote
    return entries, where


def cannot_write(ctx: Context, entry: dict) -> bool:
    """True (and the entry says why) when delta-rs cannot write to this store: its write is then
    reported, not attempted again, and its readers read the table timelake wrote."""
    if not ctx.store.delta_write_error:
        return False
    entry["error"] = ctx.store.delta_write_error
    entry["cannot_write"] = True
    log(f"    {entry['system']}: {entry['error'][:200]}")
    return True


# ---------------------------------------------------------------------------------------------
# Part 2: small appends with batch ids
# ---------------------------------------------------------------------------------------------


def run_small(ctx: Context, start_us: int) -> tuple[dict, dict]:
    from deltalake import DeltaTable, write_deltalake

    a = ctx.args
    batches = [small_batch(start_us, i * a.small_rows, a.small_rows, a.devices) for i in range(a.small_appends)]

    def tl_run(prefix):
        _lake, t = ctx.tl_create(prefix)
        mark = ctx.requests.mark()
        res = append_loop(lambda i, b: t.append(b, batch_id=f"w0-{i:06d}"), batches)
        res["s3"] = ctx.requests.since(mark)
        res["final_version"] = t.version
        res["replay_of_batch_0"] = jsonable(t.append(batches[0], batch_id="w0-000000"))
        return res, f"{prefix}/{TABLE_DIR}"

    def delta_handle_run(prefix):
        d = DeltaTable.create(ctx.url(prefix), schema=SCHEMA, storage_options=ctx.delta_options())
        mark = ctx.requests.mark()
        res = append_loop(lambda i, b: write_deltalake(d, b, mode="append", commit_properties=delta_props("w0", i)),
                          batches)
        res["s3"] = ctx.requests.since(mark)
        after = ctx.delta(ctx.url(prefix))
        res["final_version"] = after.version()
        res["txn_version_w0"] = after.transaction_version("w0")
        return res, prefix

    def delta_url_run(prefix):
        url = ctx.url(prefix)
        DeltaTable.create(url, schema=SCHEMA, storage_options=ctx.delta_options())
        mark = ctx.requests.mark()
        res = append_loop(lambda i, b: write_deltalake(url, b, mode="append", storage_options=ctx.delta_options(),
                                                      commit_properties=delta_props("w0", i)), batches)
        res["s3"] = ctx.requests.since(mark)
        res["final_version"] = ctx.delta(url).version()
        return res, prefix

    systems = [(TL_SMALL, "timelake", tl_run), (DELTA_SMALL_HANDLE, "delta_handle", delta_handle_run)]
    if not a.skip_delta_url:
        systems.append((DELTA_SMALL_URL, "delta_url", delta_url_run))
    entries, kept = [], {}
    for name, key, fn in systems:
        entry = {"system": name, "key": key, "runs": [], "error": None}
        last = None
        if key != "timelake" and cannot_write(ctx, entry):
            entries.append(entry)
            continue
        for r in range(a.append_runs):
            prefix = f"small-{key}-{r}"
            try:
                run, table_prefix = fn(prefix)
            except Exception as e:  # noqa: BLE001
                entry["error"] = error_text(e)
                entry["traceback"] = traceback.format_exc()
                log(f"    {name}: FAILED {entry['error']}")
                break
            run["s3_requests_per_append"] = per_call(run["s3"], run["commits"])
            entry["runs"].append(run)
            if last is not None:
                ctx.buckets.delete(last[0])
            last = (prefix, table_prefix)
            log(f"    {name}: run {r + 1}/{a.append_runs} {run['commits_per_s']:.1f} commits/s, "
                f"p50 {run['p50_ms']:.1f} ms, p99 {run['p99_ms']:.1f} ms, "
                f"{run['s3_requests_per_append']:.1f} requests per append"
                + (f", {run['errors']} errors ({run['error_samples'][0][:120]})" if run["errors"] else ""))
        if entry["runs"]:
            entry["best"] = best_run(entry["runs"])
            kept[key] = last
        entries.append(entry)
    add_append_ratios(entries)
    if "delta_handle" not in kept and ctx.store.delta_write_error and "timelake" in kept:
        kept["delta_handle"] = (kept["timelake"][1], kept["timelake"][1])  # read what timelake wrote
    out = {"appends": a.small_appends, "rows_per_append": a.small_rows, "results": entries}
    return out, {"batches": batches, "kept": kept}


# ---------------------------------------------------------------------------------------------
# Reading: one procedure for the query and latest parts
# ---------------------------------------------------------------------------------------------


class Reader:
    """One way of answering a question, cold and warm.

    open(endpoint) -> state is what a new process would do first (a new Lake with an empty cache, a new
    DeltaTable); ask(state) answers; refresh(state) is what a long-lived handle does before
    asking again (nothing for timelake, whose reads check for new commits themselves;
    update_incremental() for delta-rs). cold = open + ask, warm = refresh + ask. `endpoint` is
    None (the server) or the byte-counting proxy's."""

    def __init__(self, name, key, open_, ask, refresh=None, cache=False):
        self.name, self.key, self.open, self.ask = name, key, open_, ask
        self.refresh = refresh or (lambda state: None)
        self.cache = cache  # the open sets a fresh TIMELAKE_CACHE_DIR: report what it downloaded


def measure_reader(ctx: Context, reader: Reader, truth_check, runs: int) -> dict:
    """Best of `runs` cold answers (each with a fresh state) and of `runs` warm ones (on the last
    state); store requests per answer; the answers checked by truth_check(table) -> bool."""
    entry = {"system": reader.name, "key": reader.key, "error": None, "cold_ms": [], "open_ms": [],
             "warm_ms": []}
    state = result = None
    try:
        cold_reqs = []
        for _ in range(runs):
            gc.collect()
            cache = ctx.fresh_cache() if reader.cache else None
            mark = ctx.requests.mark()
            t0 = time.perf_counter()
            state = reader.open(None)
            t1 = time.perf_counter()
            result = reader.ask(state)
            t2 = time.perf_counter()
            cold_reqs.append(ctx.requests.since(mark))
            entry["cold_ms"].append((t2 - t0) * 1e3)
            entry["open_ms"].append((t1 - t0) * 1e3)
            if cache is not None:
                entry["cache_bytes"], entry["cache_files"] = dir_bytes(cache)
        entry["cold_same"] = truth_check(result)
        if ctx.bytes is not None:  # one more cold answer, through the proxy, untimed
            if reader.cache:
                ctx.fresh_cache()
            before = ctx.bytes.total
            try:
                reader.ask(reader.open(ctx.bytes.endpoint))
                entry["cold_s3_bytes"] = ctx.bytes.total - before
            except Exception as e:  # noqa: BLE001 - the timed figures stand without it
                entry["cold_s3_bytes_error"] = error_text(e)
                log(f"    {reader.name}: byte-counting pass FAILED {entry['cold_s3_bytes_error'][:300]}")
        entry["cold_requests"] = cold_reqs[-1]
        entry["result_rows"] = result.num_rows
        mark = ctx.requests.mark()
        for _ in range(runs):
            gc.collect()
            t0 = time.perf_counter()
            reader.refresh(state)
            result = reader.ask(state)
            entry["warm_ms"].append((time.perf_counter() - t0) * 1e3)
        entry["warm_requests"] = ctx.requests.since(mark)
        entry["warm_requests_per_call"] = per_call(entry["warm_requests"], runs)
        entry["warm_same"] = truth_check(result)
    except Exception as e:  # noqa: BLE001 - report, never abort
        entry["error"] = error_text(e)
        entry["traceback"] = traceback.format_exc()
        log(f"    {reader.name}: FAILED {entry['error']}")
        return entry
    entry["best_cold_ms"] = min(entry["cold_ms"])
    entry["best_open_ms"] = min(entry["open_ms"])
    entry["best_warm_ms"] = min(entry["warm_ms"])
    entry["same"] = entry["cold_same"] and entry["warm_same"]
    log(f"    {reader.name}: cold {entry['best_cold_ms']:.0f} ms ({entry['cold_requests']['requests']} "
        f"requests), warm {entry['best_warm_ms']:.0f} ms ({entry['warm_requests_per_call']:.1f} requests), "
        f"{entry['result_rows']} rows, same: {entry['same']}"
        + (f", cache downloaded {entry['cache_bytes'] / 1e6:.2f} MB in {entry['cache_files']} files"
           if "cache_bytes" in entry else ""))
    return entry


def add_read_ratios(entries: list[dict], base_key: str) -> None:
    base = next((e for e in entries if e["key"] == base_key and "best_cold_ms" in e), None)
    for e in entries:
        if base and "best_cold_ms" in e:
            e["ratio_cold"] = e["best_cold_ms"] / base["best_cold_ms"]
            e["ratio_warm"] = e["best_warm_ms"] / base["best_warm_ms"]


class DeltaState:
    """A delta-rs handle and a DuckDB connection (as a delta-rs + DuckDB user keeps them)."""

    def __init__(self, d):
        self.d = d
        self.con = duckdb_connection()


def delta_sql(state: DeltaState, sql: str) -> pa.Table:
    """DuckDB over the table's pyarrow dataset (filters and columns pushed into the dataset)."""
    state.con.register("readings", state.d.to_pyarrow_dataset())
    return state.con.sql(sql.format(src="readings")).to_arrow_table()


def delta_refresh(state: DeltaState) -> None:
    state.d.update_incremental()


def delta_readers(ctx: Context, url: str, sql_readers) -> list[Reader]:
    # Where delta-rs cannot write, it reads the table timelake wrote: the name says so.
    suffix = " (timelake's table)" if ctx.store.delta_write_error else ""
    return [Reader(name + suffix, key, lambda endpoint: DeltaState(ctx.delta(url, endpoint)), ask, delta_refresh)
            for name, key, ask in sql_readers]


# ---------------------------------------------------------------------------------------------
# Part 3: one series over one day, cold and warm
# ---------------------------------------------------------------------------------------------


def series_day_filter(device: str, day: dt.datetime):
    ts = pa.timestamp("us", tz="UTC")
    return ((pc.field("device_id") == device) & (pc.field("time") >= pa.scalar(day, ts))
            & (pc.field("time") < pa.scalar(day + dt.timedelta(days=1), ts)))


def pyarrow_stats(rows: pa.Table) -> pa.Table:
    temp = rows.column("temp")
    return pa.table({"avg_temp": [pc.mean(temp).as_py()], "min_temp": [pc.min(temp).as_py()],
                     "max_temp": [pc.max(temp).as_py()], "n": pa.array([rows.num_rows], pa.int64())})


def run_query(ctx: Context, data: pa.Table, where: dict, device: str, day: dt.datetime) -> dict:
    from deltalake import QueryBuilder

    queries = {k: v for k, v in make_queries(device, day).items() if k.startswith("series_day")}
    expr = series_day_filter(device, day)
    pyarrow_answer = {
        "series_day_stats": lambda ds: pyarrow_stats(ds.to_table(filter=expr, columns=["temp"])),
        "series_day_rows": lambda ds: ds.to_table(filter=expr).sort_by("time"),
    }
    con = duckdb_connection()
    out = {"device": device, "day": day.date().isoformat(), "queries": []}
    for qkey, q in queries.items():
        log(f"  {qkey}: {q['title']}")
        truth = fingerprint(con.sql(q["sql"].format(src="data")).to_arrow_table())
        readers = []
        if "timelake" in where:
            lake_prefix = where["timelake"][0]
            readers.append(Reader(TL_SQL, "timelake", lambda endpoint, p=lake_prefix: ctx.tl_lake(p, endpoint),
                                  lambda lake, s=q["sql"]: lake.sql(s.format(src=TABLE)), cache=True))
        if "delta" in where:
            url = ctx.url(where["delta"][0])
            readers += delta_readers(ctx, url, [
                (DELTA_DUCKDB, "delta_duckdb", lambda st, s=q["sql"]: delta_sql(st, s)),
                (DELTA_PYARROW, "delta_pyarrow", lambda st, f=pyarrow_answer[qkey]: f(st.d.to_pyarrow_dataset())),
                (DELTA_QB, "delta_querybuilder",
                 lambda st, s=q["sql"]: pa.table(QueryBuilder().register("readings", st.d)
                                                 .execute(s.format(src="readings")).read_all())),
            ])
        entries = [measure_reader(ctx, r, lambda res: same_result(fingerprint(res), truth), ctx.args.query_runs)
                   for r in readers]
        add_read_ratios(entries, "timelake")
        out["queries"].append({"query": qkey, "title": q["title"], "sql": q["sql"], "truth": truth,
                               "results": entries})
    if "timelake" in where:
        out["timelake_table"] = ctx.buckets.usage(where["timelake"][1])
    if "delta" in where:
        out["delta_table"] = ctx.buckets.usage(where["delta"][1])
    return out


# ---------------------------------------------------------------------------------------------
# Part 4: latest()
# ---------------------------------------------------------------------------------------------


def run_latest(ctx: Context, tables: list[tuple[str, pa.Table, dict]]) -> list[dict]:
    """tables: (title, the data written, {"timelake": lake prefix, "delta": table prefix})."""
    con = duckdb_connection()
    out = []
    for title, data, where in tables:
        log(f"  latest on {title}")
        truth = normalize(con.sql(ARGMAX_SQL.format(src="data")).to_arrow_table())

        def check(res):
            return normalize(res).equals(truth)

        readers = []
        if where.get("timelake"):
            readers.append(Reader(TL_LATEST, "timelake", lambda endpoint, p=where["timelake"]: ctx.tl_lake(p, endpoint),
                                  lambda lake: lake.latest(TABLE), cache=True))
        if where.get("delta"):
            readers += delta_readers(ctx, ctx.url(where["delta"]), [
                (DELTA_ARGMAX, "delta_argmax", lambda st: delta_sql(st, ARGMAX_SQL)),
                (DELTA_QUALIFY, "delta_qualify", lambda st: delta_sql(st, QUALIFY_SQL)),
            ])
        entries = [measure_reader(ctx, r, check, ctx.args.query_runs) for r in readers]
        add_read_ratios(entries, "timelake")
        info = None
        if where.get("timelake"):
            try:
                info = jsonable(ctx.tl_lake(where["timelake"]).table(TABLE).info())
            except Exception as e:  # noqa: BLE001
                info = {"error": error_text(e)}
        out.append({"table": title, "rows": data.num_rows, "series": truth.num_rows, "timelake_info": info,
                    "results": entries})
    return out


# ---------------------------------------------------------------------------------------------
# Part 5: opening a table with many commits
# ---------------------------------------------------------------------------------------------


def run_open(ctx: Context, start_us: int) -> dict:
    import timelake

    a = ctx.args
    marks = sorted(set(a.open_at))
    prefix = "open-timelake"
    _lake, t = ctx.tl_create(prefix)
    table_prefix = f"{prefix}/{TABLE_DIR}"
    table_url = ctx.url(table_prefix)
    lake_url = ctx.url(prefix)
    done, grow_s, points = 0, 0.0, []
    log(f"  growing a timelake table by one-row appends to {marks[-1]:,} commits")
    for mark in marks:
        t0 = time.perf_counter()
        for i in range(done, mark):
            t.append(small_batch(start_us, i, 1, a.devices), batch_id=f"open-{i:06d}")
        grow_s += time.perf_counter() - t0
        done = mark
        log(f"    {mark:,} commits ({grow_s:.0f} s of appends so far)")

        def tl_once():
            return timelake.Lake(lake_url, storage_options=ctx.tl_options()).table(TABLE).version

        def delta_once():
            return ctx.delta(table_url).version()

        entries = []
        for name, key, once in ((TL_OPEN, "timelake", tl_once), (DELTA_OPEN, "delta", delta_once)):
            entries.append(time_open(ctx, name, key, once, a.open_runs))
        base = next((e for e in entries if e["key"] == "timelake" and "best_ms" in e), None)
        for e in entries:
            if base and "best_ms" in e:
                e["ratio"] = e["best_ms"] / base["best_ms"]
        points.append({"commits": mark, "log": ctx.buckets.log_state(table_prefix),
                       "table": ctx.buckets.usage(table_prefix), "results": entries})
    return {"points": points, "grow_s": grow_s, "appends_per_s": done / grow_s if grow_s else None,
            "open_runs": a.open_runs}


def time_open(ctx: Context, name: str, key: str, once, runs: int) -> dict:
    entry = {"system": name, "key": key, "times_ms": [], "error": None}
    mark = ctx.requests.mark()
    try:
        for _ in range(runs):
            gc.collect()
            t0 = time.perf_counter()
            entry["version"] = once()
            entry["times_ms"].append((time.perf_counter() - t0) * 1e3)
    except Exception as e:  # noqa: BLE001
        entry["error"] = error_text(e)
        entry["traceback"] = traceback.format_exc()
        log(f"    {name}: FAILED {entry['error']}")
        return entry
    entry["requests"] = ctx.requests.since(mark)
    entry["requests_per_open"] = per_call(entry["requests"], runs)
    entry["best_ms"] = min(entry["times_ms"])
    entry["median_ms"] = pct(entry["times_ms"], 0.5)
    log(f"    {name}: best {entry['best_ms']:.1f} ms, median {entry['median_ms']:.1f} ms, "
        f"{entry['requests_per_open']:.1f} requests, version {entry['version']}")
    return entry


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------


def fmb(b) -> str:
    return "n/a" if b is None else f"{b / 1e6:.2f} MB"


def freq(x) -> str:
    return "" if x is None else f"{x:.1f}" if x != int(x) else f"{int(x)}"


def same_text(v) -> str:
    return {True: "yes", False: "NO", None: "?"}[v]


def store_of(report) -> type[Store]:
    """The store a report was measured on (reports before --store existed: S3)."""
    return STORES[(report.get("store") or {}).get("key", "s3")]


def heads(short: str) -> dict[str, list[str]]:
    """The tables' column heads; `short` names the store ("S3")."""
    return {
        "bulk": ["system", "best s", "rows/s", "in the store", "data files", f"{short} requests", "time / timelake"],
        "small": ["system", "commits/s", "p50 ms", "p99 ms", "max ms", f"{short} requests / append", "errors",
                  "timelake rate / rate", "p50 / timelake", "p99 / timelake"],
        "read": ["system", "cold ms", "of which open ms", "warm ms", f"{short} requests cold / warm",
                 f"{short} bytes cold", "rows", "same", "cold / timelake", "warm / timelake"],
        "open": ["commits", "log read (checkpoint + commits)", "timelake ms", f"{short} requests", "delta-rs ms",
                 f"{short} requests", "delta-rs / timelake"],
    }


def not_measured(e: dict, width: int) -> list[str]:
    """The row of a system that has no figures: it failed, or it cannot write to this store."""
    return [e["system"], "cannot write (see Failures)" if e.get("cannot_write") else "FAILED"] + [""] * (width - 2)


BULK_HEAD, SMALL_HEAD, READ_HEAD, OPEN_HEAD = heads("S3").values()


def bulk_rows(entries) -> list[list[str]]:
    rows = []
    for e in entries:
        if e.get("error") and "best_s" not in e:
            rows.append(not_measured(e, len(BULK_HEAD)))
            continue
        st = e.get("store", {})
        rows.append([e["system"], f"{e['best_s']:.2f}", fmt_rate(e.get("rows_per_s")), fmb(st.get("bytes")),
                     str(st.get("data_files", "")), str(e["requests"]["requests"]), fx(e.get("ratio"))])
    return rows


SMALL_HEAD = ["system", "commits/s", "p50 ms", "p99 ms", "max ms", "S3 requests / append", "errors",
              "timelake rate / rate", "p50 / timelake", "p99 / timelake"]


def small_rows(entries) -> list[list[str]]:
    rows = []
    for e in entries:
        b = e.get("best")
        if not b:
            rows.append(not_measured(e, len(SMALL_HEAD)))
            continue
        rows.append([e["system"], fms(b.get("commits_per_s"), 1), fms(b.get("p50_ms"), 1), fms(b.get("p99_ms"), 1),
                     fms(b.get("max_ms"), 1), freq(b.get("s3_requests_per_append")), str(b.get("errors", 0)),
                     fx(e.get("ratio_rate")), fx(e.get("ratio_p50")), fx(e.get("ratio_p99"))])
    return rows


READ_HEAD = ["system", "cold ms", "of which open ms", "warm ms", "S3 requests cold / warm", "S3 bytes cold",
             "rows", "same", "cold / timelake", "warm / timelake"]


def read_rows(entries) -> list[list[str]]:
    rows = []
    for e in entries:
        if "best_cold_ms" not in e:
            rows.append([e["system"], "FAILED"] + [""] * (len(READ_HEAD) - 2))
            continue
        opened = fms(e["best_open_ms"], 1) if e["key"] != "timelake" else ""
        rows.append([e["system"], fms(e["best_cold_ms"], 1), opened, fms(e["best_warm_ms"], 1),
                     f"{e['cold_requests']['requests']} / {freq(e['warm_requests_per_call'])}",
                     fmb(e.get("cold_s3_bytes")),
                     f"{e['result_rows']:,}", same_text(e.get("same")), fx(e.get("ratio_cold")),
                     fx(e.get("ratio_warm"))])
    return rows


OPEN_HEAD = ["commits", "log read (checkpoint + commits)", "timelake ms", "S3 requests", "delta-rs ms",
             "S3 requests", "delta-rs / timelake"]


def open_rows(part) -> list[list[str]]:
    rows = []
    def timed(e):
        return "FAILED" if e.get("error") else f"{fms(e.get('best_ms'), 1)} (median {fms(e.get('median_ms'), 1)})"

    for p in part["points"]:
        by = {e["key"]: e for e in p["results"]}
        tl, de = by.get("timelake", {}), by.get("delta", {})
        g = p["log"]
        rows.append([f"{p['commits']:,}", f"cp {g['last_checkpoint']} + {g['commits_after_checkpoint']}",
                     timed(tl),
                     freq(tl.get("requests_per_open")),
                     timed(de),
                     freq(de.get("requests_per_open")), fx(de.get("ratio"))])
    return rows


def sections(report) -> list[tuple[str, str, list, list]]:
    out = []
    p = report["params"]
    h = heads(store_of(report).short)
    if report.get("bulk"):
        out.append(("Bulk append", f"{report['data']['rows']:,} rows, {p['devices']:,} series, {p['days']} days; "
                    f"best of {p['ingest_runs']}", h["bulk"], bulk_rows(report["bulk"])))
    if report.get("small"):
        s = report["small"]
        out.append(("Small appends with batch ids", f"{s['appends']} appends of {s['rows_per_append']} rows, "
                    f"best of {p['append_runs']}", h["small"], small_rows(s["results"])))
    for q in (report.get("query") or {}).get("queries", []):
        out.append((f"Query {q['query']}", f"{q['title']}; best of {p['query_runs']} cold and {p['query_runs']} warm",
                    h["read"], read_rows(q["results"])))
    for lt in report.get("latest") or []:
        out.append((f"latest() on {lt['table']}", f"{lt['series']:,} series, {lt['rows']:,} rows; best of "
                    f"{p['query_runs']} cold and {p['query_runs']} warm", h["read"], read_rows(lt["results"])))
    if report.get("open"):
        out.append(("Opening a table", f"timelake table grown by one-row appends; best of {p['open_runs']}; the same "
                    "table for both readers", h["open"], open_rows(report["open"])))
    return out


def text_report(report) -> str:
    parts = [f"timelake bench: {store_of(report).title} vs delta-rs   {report['finished_at']}",
             "ratios: > 1 means timelake is faster"]
    for title, detail, head, rows in sections(report):
        parts += ["", f"{title.upper()}: {detail}", text_table(head, rows)]
    parts += [""] + [x[2:] if x.startswith("* ") else x for x in pruning_notes(report)]
    return "\n".join(parts)


def pruning_notes(report) -> list[str]:
    notes = []
    q = report.get("query") or {}
    tt = q.get("timelake_table")
    dt_ = q.get("delta_table")
    short = store_of(report).short
    delta_table = "timelake's table" if (report.get("store") or {}).get("delta_write_error") else "the delta-rs table"
    for qq in q.get("queries", []):
        for e in qq["results"]:
            if e["key"] == "timelake" and "cache_bytes" in e and tt:
                peers = "; ".join(f"{x['system']} {fmb(x['cold_s3_bytes'])}" for x in qq["results"]
                                  if x["key"] != "timelake" and x.get("cold_s3_bytes") is not None)
                notes.append(
                    f"* `{qq['query']}`, timelake cold: the cache holds {fmb(e['cache_bytes'])} in "
                    f"{e['cache_files']} file(s) of the table's {fmb(tt['data_bytes'])} in {tt['data_files']} data "
                    f"files ({100 * e['cache_bytes'] / max(1, tt['data_bytes']):.1f} %): the scan plan kept only the "
                    "files whose day chunk and statistics can hold the series and day; of a kept file of 8 MiB or "
                    "more only the row groups whose statistics can hold them are fetched, smaller ones whole"
                    + (f". Read from {short} by one cold read (log included): timelake {fmb(e.get('cold_s3_bytes'))}; "
                       f"{peers} (ranged reads of {delta_table}'s {fmb(dt_['data_bytes'])} in "
                       f"{dt_['data_files']} file(s))" if peers and dt_ else "") + ".")
    for lt in report.get("latest") or []:
        for e in lt["results"]:
            if e["key"] == "timelake" and "cache_bytes" in e:
                notes.append(f"* latest() on {lt['table']}: timelake's cache downloaded {fmb(e['cache_bytes'])} "
                             f"({e['cache_files']} files); latest() reads the last-value index objects "
                             f"({(lt.get('timelake_info') or {}).get('last_value_index')}) through the store.")
    return notes


def md_report(report) -> str:
    env, p = report["environment"], report["params"]
    v, m = env["versions"], env["machine"]
    st = store_of(report)
    read_by_delta = "timelake's table" if (report.get("store") or {}).get("delta_write_error") else "the delta-rs table"
    lines = [
        f"# Benchmark: timelake on {st.short} vs delta-rs on {st.short} ({st.server_name})",
        "",
        f"Run {report['finished_at']} by `bench/bench_s3.py` (`{' '.join(report['argv']) or '(defaults)'}`), "
        f"{report['total_s']:.0f} s in all.",
        "",
        *st.server_note.split("\n"),
        f"* timelake: `timelake.Lake(\"{st.scheme}://…\", storage_options=…)`, table chunk=day, "
        f"series_key=[device_id], dedup=last. {st.delta_note}",
        "* Reads: **cold** = what a new process does: timelake a new `Lake` with an empty "
        "`TIMELAKE_CACHE_DIR` (the query downloads the files its scan plan keeps), delta-rs a new "
        "`DeltaTable` (the open is part of the time and shown on its own); **warm** = the same handle again: "
        "timelake `lake.sql`/`latest` (which check the log for new commits themselves, and read data files "
        "from the cache), delta-rs `update_incremental()` and then the query (delta-rs keeps no local copy: "
        f"every read goes to {st.short}). DuckDB reads {read_by_delta} through `DeltaTable.to_pyarrow_dataset()` "
        "(filters and columns pushed into the dataset). `same` compares the answer (row count and column "
        "sums; for latest every column of every row) with DuckDB over the in-memory data.",
        f"* Machine: {m.get('cpu', '?')}, {m.get('cpus')} CPUs, {m.get('memory_gb', '?')} GB; Python "
        f"{v.get('python')}, timelake {v.get('timelake')}, pyarrow {v.get('pyarrow')}, deltalake "
        f"{v.get('deltalake')}, duckdb {v.get('duckdb')}, {st.server_name} {v.get(st.server_name)}; repository HEAD "
        f"{m.get('git_commit')}, measured build `{env['timelake_installed'].get('module')}` (core built "
        f"{env['timelake_installed'].get('core_built_at')}); CPUs {env.get('cpu_busy_pct_before')} % busy in "
        f"the second before the run; 1-minute load average {env['load_average_1m'].get('start')} at start, "
        f"{env['load_average_1m'].get('end')} at end (which includes the benchmark's own work and {st.server_name}'s).",
    ]
    for title, detail, head, rows in sections(report):
        lines += ["", f"## {title}: {detail}", "", md_table(head, rows)]
    notes = pruning_notes(report) + md_notes(report)
    if notes:
        lines += ["", "## Notes", ""] + notes
    errs = collect_errors(report)
    if errs:
        lines += ["", "## Failures", ""] + [f"* {n}: `{e[:400]}`" for n, e in errs]
    return "\n".join(lines) + "\n"


def md_notes(report) -> list[str]:
    notes = []
    short = store_of(report).short
    for e in report.get("bulk") or []:
        if "best_s" not in e:
            continue
        detail = ""
        if e["key"] == "timelake" and e.get("details"):
            r = e["details"]["append_result"]
            detail = (f"{r.get('files')} data files (one per day chunk), commit {fms(r.get('commit_ms'), 1)} ms "
                      "of the append; ")
        notes.append(f"* Bulk, {e['system']}: {detail}{short} requests by kind: {e['requests']['by_kind']}; "
                     f"runs {', '.join(f'{x:.2f}' for x in e['times_s'])} s.")
    for e in (report.get("small") or {}).get("results", []):
        b = e.get("best") or {}
        if e["key"] == "timelake" and b:
            kinds = "; ".join(f"{k}: {x['n']} appends, p50 {x['p50_ms']:.1f} ms, max {x['max_ms']:.1f} ms"
                              for k, x in b.get("by_commit_kind", {}).items())
            notes.append(f"* Small appends, timelake: `commit_ms` p50 {fms(b.get('commit_ms_p50'), 1)} ms, p99 "
                         f"{fms(b.get('commit_ms_p99'), 1)} ms; wall time by commit kind: {kinds}; {short} requests by "
                         f"kind over the run: {b['s3']['by_kind']}; replaying batch 0 gave `duplicate: "
                         f"{(b.get('replay_of_batch_0') or {}).get('duplicate')}`.")
        elif b:
            notes.append(f"* Small appends, {e['system']}: {short} requests by kind over the run: {b['s3']['by_kind']}"
                         + (f"; txn version of w0 afterwards: {b['txn_version_w0']}" if "txn_version_w0" in b else "")
                         + f"; final version {b.get('final_version')}.")
    op = report.get("open")
    if op:
        last = op["points"][-1]
        notes.append(f"* Open: growing the table to {last['commits']:,} commits took {op['grow_s']:.0f} s "
                     f"({fms(op.get('appends_per_s'), 1)} appends/s); at the last point the table held "
                     f"{last['table']['data_files']:,} data files and {last['log']['log_objects']:,} log objects.")
    return notes


def collect_errors(report) -> list[tuple[str, str]]:
    errs = [(e["system"] + " (bulk)", e["error"]) for e in report.get("bulk") or [] if e.get("error")]
    errs += [(e["system"] + " (small)", e["error"]) for e in (report.get("small") or {}).get("results", [])
             if e.get("error")]
    for q in (report.get("query") or {}).get("queries", []):
        errs += [(f"{e['system']} ({q['query']})", e["error"]) for e in q["results"] if e.get("error")]
        errs += [(f"{e['system']} ({q['query']}, byte count)", e["cold_s3_bytes_error"]) for e in q["results"]
                 if e.get("cold_s3_bytes_error")]
    for lt in report.get("latest") or []:
        errs += [(f"{e['system']} (latest, {lt['table']})", e["error"]) for e in lt["results"] if e.get("error")]
        errs += [(f"{e['system']} (latest, {lt['table']}, byte count)", e["cold_s3_bytes_error"])
                 for e in lt["results"] if e.get("cold_s3_bytes_error")]
    for pt in (report.get("open") or {}).get("points", []):
        errs += [(f"{e['system']} (open, {pt['commits']} commits)", e["error"])
                 for e in pt["results"] if e.get("error")]
    for k in ("bulk_error", "small_error", "query_error", "latest_error", "open_error", "server_error"):
        if report.get(k):
            errs.append((k, report[k]))
    return errs


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


QUICK = {"rows": 100_000, "small_appends": 20, "open_at": [10, 50], "ingest_runs": 1, "append_runs": 1,
         "query_runs": 2, "open_runs": 3}


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke run: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items())
                   + " (options given explicitly win)")
    p.add_argument("--rows", type=int, help="rows of the bulk append (default 1,000,000)")
    p.add_argument("--devices", type=int, default=1000, help="series (default 1000)")
    p.add_argument("--days", type=int, default=7, help="days the bulk data spans (default 7)")
    p.add_argument("--small-appends", type=int, help="small appends per run (default 200)")
    p.add_argument("--small-rows", type=int, default=10, help="rows per small append (default 10)")
    p.add_argument("--open-at", type=int_list, help="commit counts at which to time opening (default 10,100,1000)")
    p.add_argument("--ingest-runs", type=int, help="best of N for the bulk append (default 2)")
    p.add_argument("--append-runs", type=int, help="best of N for small appends (default 2)")
    p.add_argument("--query-runs", type=int, help="best of N cold and N warm reads (default 3)")
    p.add_argument("--open-runs", type=int, help="best of N opens (default 5)")
    p.add_argument("--parts", default="bulk,small,query,latest,open",
                   help="which parts to run (default bulk,small,query,latest,open; query needs bulk)")
    p.add_argument("--skip-delta-url", action="store_true",
                   help="skip write_deltalake(url) small appends (they re-open the table from S3 each time)")
    p.add_argument("--skip-bytes", action="store_true",
                   help="skip the untimed pass of each cold read through a byte-counting proxy")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--workdir", type=Path, default=None, help="where the caches go (default: under /tmp)")
    p.add_argument("--store", choices=sorted(STORES), default="s3",
                   help="the store and its emulator: s3 (moto), azure (Azurite), gcs (fake-gcs-server); "
                        "results go to <store>.json/.md (default s3)")
    p.add_argument("--out", type=Path, default=HERE / "results",
                   help="folder for <store>.json/.md (default bench/results)")
    args = p.parse_args(argv)
    defaults = {"rows": 1_000_000, "small_appends": 200, "open_at": [10, 100, 1000], "ingest_runs": 2,
                "append_runs": 2, "query_runs": 3, "open_runs": 5}
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, QUICK[k] if args.quick else v)
    args.parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    if min(args.rows, args.devices, args.days, args.small_appends, args.small_rows, args.ingest_runs,
           args.append_runs, args.query_runs, args.open_runs, *args.open_at) < 1:
        p.error("sizes, counts and runs must be >= 1")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    started = dt.datetime.now(dt.timezone.utc)
    t_start = time.perf_counter()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    store_class = STORES[args.store]
    work = Path(tempfile.mkdtemp(prefix=f"timelake-bench-{args.store}-", dir=args.workdir or "/tmp"))
    os.environ["TIMELAKE_CACHE_DIR"] = str(work / "cache-writers")  # never the user's own cache
    log(f"workdir {work}")

    # Bulk data ends at today's UTC midnight (no retention can touch it); small appends start a
    # day before it.
    end = started.replace(hour=0, minute=0, second=0, microsecond=0)
    start = end - dt.timedelta(days=args.days)
    start_us = int((end - dt.timedelta(days=1)).timestamp()) * US_PER_S
    data = generate(args.rows, args.devices, args.days, args.seed, start)
    log(f"generated {data.num_rows:,} rows ({data.nbytes / 1e6:.0f} MB in Arrow)")

    env_versions = versions()
    for mod in ("moto", "boto3") if args.store == "s3" else ():
        try:
            env_versions[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            env_versions[mod] = f"unavailable ({error_text(e)})"
    report = {
        "benchmark": args.store,
        "argv": argv,
        "started_at": started.isoformat(timespec="seconds"),
        "params": {k: (sorted(v) if isinstance(v, set) else str(v) if isinstance(v, Path) else v)
                   for k, v in vars(args).items()},
        "environment": {"versions": env_versions, "machine": machine(),
                        "timelake_installed": installed_timelake(), "cpu_busy_pct_before": cpu_busy_pct(),
                        "load_average_1m": {"start": load_average()}},
        "data": {"rows": data.num_rows, "devices": args.devices, "days": args.days, "start": start.isoformat(),
                 "end": end.isoformat(), "arrow_bytes": data.nbytes},
    }
    if args.store != "s3":  # (S3 reports keep their earlier shape)
        report["store"] = {"key": args.store, "title": store_class.title, "delta_write_error": None}
    log(f"CPUs {report['environment']['cpu_busy_pct_before']} % busy before the run, load average "
        f"{report['environment']['load_average_1m']['start']}; measuring {report['environment']['timelake_installed']}")

    store = ctx = None
    try:
        store = store_class.start()
        if args.store != "s3":
            env_versions[store.server_name] = store.server_version()
        if store.delta_write_error:
            log(f"delta-rs {store.delta_write_error}")
        ctx = Context(args, store, work)
        if not args.skip_bytes:
            ctx.bytes = ByteCounter(store.endpoint, rewrite_host=store.proxy_rewrites_host)
        log(f"{store.server_name} on {store.endpoint}")
        where, small_kept = {}, None

        def part(key, fn):
            if key not in args.parts:
                return
            log(key)
            t0 = time.perf_counter()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - report, never abort the other parts
                report[key + "_error"] = error_text(e)
                report[key + "_traceback"] = traceback.format_exc()
                log(f"  FAILED {report[key + '_error']}")
            log(f"  ({time.perf_counter() - t0:.0f} s)")

        def bulk():
            report["bulk"], found = run_bulk(ctx, data)
            where.update(found)

        def small():
            nonlocal small_kept
            report["small"], small_kept = run_small(ctx, start_us)

        def query():
            if not where:
                raise RuntimeError("the query part reads the bulk tables: run it with the bulk part")
            device = device_name(args.devices // 2)
            day = start + dt.timedelta(days=args.days // 2)
            report["query"] = run_query(ctx, data, where, device, day)

        def latest():
            tables = []
            if where:
                tables.append((f"the bulk table ({data.num_rows:,} rows, one append)", data,
                               {"timelake": where.get("timelake", (None,))[0],
                                "delta": where.get("delta", (None,))[0]}))
            if small_kept:
                kept = small_kept["kept"]
                rows = pa.concat_tables(small_kept["batches"])
                tables.append((f"the small-append table ({len(small_kept['batches'])} appends)", rows,
                               {"timelake": kept.get("timelake", (None,))[0],
                                "delta": kept.get("delta_handle", (None,))[0]}))
            if not tables:
                raise RuntimeError("the latest part reads the bulk and small-append tables: run it with those parts")
            report["latest"] = run_latest(ctx, tables)

        part("bulk", bulk)
        part("small", small)
        part("query", query)
        part("latest", latest)
        part("open", lambda: report.__setitem__("open", run_open(ctx, start_us)))
    except Exception as e:  # noqa: BLE001 - the server did not start: still write what we have
        report["server_error"] = error_text(e)
        report["server_traceback"] = traceback.format_exc()
        log(f"FAILED {report['server_error']}")
    finally:
        if ctx is not None and ctx.bytes is not None:
            ctx.bytes.stop()
        if store is not None:
            store.stop()
        shutil.rmtree(work, ignore_errors=True)

    if store is not None:
        report[args.store] = {"endpoint": store.endpoint, "buckets": store.names}
        if args.store != "s3":
            report["store"]["delta_write_error"] = store.delta_write_error
    report["total_s"] = time.perf_counter() - t_start
    write_report(report, args.out, args.store, md_report, text_report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
