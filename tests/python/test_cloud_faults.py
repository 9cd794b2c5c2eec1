"""Object stores under faults, on every cloud (S3, Azure Blob, GCS: the `cloud` fixture,
cloud.py): writer processes append through a fault-injecting proxy (fault_proxy.py) or are killed
with SIGKILL, and the table they leave holds every acknowledged batch exactly once.

Every scenario ends with the same audit through a direct (proxy-free) lake, the service's own API
(cloud.py, never timelake) and deltalake:
the log has no gap, one commit per batch (each batch id recorded once), every file the log and
its checkpoints name exists and each checkpoint agrees with the commits before it; each
acknowledged batch is there once (rows counted per batch id), no batch is doubled or partial,
`count(*)` is the sum, `latest()` is the newest row per series of a full scan, and deltalake
reads the same rows. Writers behave like gateways: a failed append is retried with the same
batch id, a bounded number of times; every failure they see must be a RuntimeError that says
what failed and claims nothing that did not happen.

Besides the soak per fault kind: rules that fail the reads right after a commit lands (the
ambiguous moment), calls against a server that answers nothing useful, and kill -9.
Interop with deltalake is in test_cloud_interop.py, which uses the helpers here.

The proxy's rules name requests by method and target, which differ per cloud (a commit is a PUT
of .../_delta_log/N.json on S3 and Azure, a POST with name=...%2F_delta_log%2FN.json on GCS):
tests take them from the cloud (`cloud.commit_write()`, `cloud.object_read(...)`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import timelake
from helpers import sorted_rows

TESTS_DIR = Path(__file__).resolve().parent

SCHEMA = pa.schema([
    ("time", pa.timestamp("us", tz="UTC")),
    ("writer", pa.string()),
    ("batch", pa.string()),
    ("seq", pa.int64()),
])
ROWS_PER_BATCH = 3
TABLE = "readings"

BASE_TIME = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)


def batch_of(writer: str, i: int) -> pa.Table:
    """Batch i of `writer` (batch id "<writer>-<i>"): rows a second apart from minute i."""
    return pa.table({
        "time": [BASE_TIME + dt.timedelta(minutes=i, seconds=k) for k in range(ROWS_PER_BATCH)],
        "writer": [writer] * ROWS_PER_BATCH,
        "batch": [f"{writer}-{i}"] * ROWS_PER_BATCH,
        "seq": [i * ROWS_PER_BATCH + k for k in range(ROWS_PER_BATCH)],
    }, schema=SCHEMA)


# In a rule of a Scenario: the fields that pick the put of a commit on the test's cloud.
COMMIT = "<commit>"

# What the writers use on top of the server's options: short timeouts, so that a held reply
# (delay_s=3) costs one timeout of 2 s.
WRITER_OPTIONS = {"timeout": "2s", "connect_timeout": "2s"}

# ------------------------------------------------------------------------------------- writers

# One gateway: appends batches first..last-1 of writer `w` (batch ids w<w>-<i>), each retried
# with its batch id up to `attempts` times; before every `arm_every`-th append it arms the rules
# in `arm` on the proxy (FaultControl). One JSON line per event on stdout.
WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    import pyarrow as pa  # before timelake (shared Arrow libraries)
    import timelake
    cfg = json.loads(sys.argv[1])
    sys.path.insert(0, cfg["tests_dir"])
    from fault_proxy import FaultControl
    from test_cloud_faults import batch_of

    def emit(**fields):
        print(json.dumps(fields), flush=True)

    w = cfg["writer"]
    control = FaultControl(cfg["proxy"]) if cfg["arm"] else None
    if cfg["barrier"]:  # report ready, then wait for the parent's go, so the writers overlap
        open(os.path.join(cfg["barrier"], f"ready-{w}"), "w").close()
        while not os.path.exists(os.path.join(cfg["barrier"], "go")):
            time.sleep(0.01)
    table = None
    for i in range(cfg["first"], cfg["last"]):
        batch_id = f"w{w}-{i}"
        batch = batch_of(f"w{w}", i)
        if i % cfg["arm_every"] == cfg["arm_every"] - 1:
            for rule in cfg["arm"]:
                control.add_rule(**rule)
        for attempt in range(1, cfg["attempts"] + 1):
            started = time.monotonic()
            try:
                if table is None:
                    lake = timelake.Lake(cfg["url"], storage_options=cfg["options"])
                    table = lake.table(cfg["table"])
                r = table.append(batch, batch_id=batch_id)
            except Exception as e:  # the parent judges the type and the message
                emit(event="error", batch=batch_id, attempt=attempt, type=type(e).__name__,
                     message=str(e), seconds=time.monotonic() - started)
                continue
            emit(event="acked", batch=batch_id, attempt=attempt, duplicate=r["duplicate"],
                 version=r["version"], commit_attempts=r["attempts"])
            break
        else:
            emit(event="gave_up", batch=batch_id)
    """
)


def spawn_writer(url: str, options: dict, writer: int, first: int, last: int, *, barrier=None,
                 proxy: str | None = None, arm=(), arm_every: int = 1,
                 attempts: int = 16) -> subprocess.Popen:
    # `attempts`: under the random-fault scenarios (p = 0.3 with one retry, four writers whose
    # commits each append must read) an attempt fails about half the time; 16 in a row are
    # needed for a batch to be given up by chance (CI saw 8 consecutive failures once).
    cfg = {
        "url": url, "options": options, "table": TABLE, "writer": writer, "first": first,
        "last": last, "attempts": attempts, "arm": list(arm),
        "arm_every": arm_every,
        "proxy": proxy, "barrier": str(barrier) if barrier else None, "tests_dir": str(TESTS_DIR),
    }
    return subprocess.Popen([sys.executable, "-c", WRITER, json.dumps(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@dataclasses.dataclass
class WriterReport:
    acked: dict  # batch id -> its "acked" event
    errors: list  # "error" events
    gave_up: list  # batch ids


def parse_events(lines) -> WriterReport:
    report = WriterReport({}, [], [])
    for line in lines:
        event = json.loads(line)
        if event["event"] == "acked":
            assert event["batch"] not in report.acked, f"batch acknowledged twice: {event}"
            report.acked[event["batch"]] = event
        elif event["event"] == "error":
            report.errors.append(event)
        else:
            report.gave_up.append(event["batch"])
    return report


def run_writers(url: str, options: dict, writers: int, appends: int, barrier: Path, **kwargs):
    """Runs `writers` gateway processes at once, each appending `appends` batches; returns their
    merged WriterReport once all have ended."""
    barrier.mkdir()
    procs = [spawn_writer(url, options, w, 0, appends, barrier=barrier, **kwargs)
             for w in range(writers)]
    deadline = time.monotonic() + 120
    while not all((barrier / f"ready-{w}").exists() for w in range(writers)):
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"a writer exited before the barrier:\n{p.stderr.read()}")
        assert time.monotonic() < deadline, "writers did not start"
        time.sleep(0.02)
    (barrier / "go").touch()
    report = WriterReport({}, [], [])
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, f"writer failed ({p.returncode}):\n{stderr}"
        one = parse_events(stdout.splitlines())
        report.acked.update(one.acked)
        report.errors += one.errors
        report.gave_up += one.gave_up
    return report


# What a message may not claim when the store only failed for a while: the fault proxy never
# damages, drops or expires anything.
FALSE_DIAGNOSES = re.compile(r"damaged|was dropped|expired|corrupt", re.I)


def assert_clear_message(message: str, scheme: str) -> None:
    """An I/O failure's message names the object (a `scheme`:// URL) or table it concerns and
    says what went wrong, and claims nothing that did not happen."""
    assert f"{scheme}://" in message or "table 'default." in message, message
    assert re.search(r"failed|unknown|HTTP \d{3}|timed? ?out|closed|reset|connect", message,
                     re.I), message
    assert not FALSE_DIAGNOSES.search(message), f"misreports a transient failure: {message}"


def assert_clear_errors(errors: list, scheme: str) -> None:
    """Every failure a writer saw is a RuntimeError with a clear message."""
    for e in errors:
        assert e["type"] == "RuntimeError", f"wrong error type: {e}"
        assert_clear_message(e["message"], scheme)


# ------------------------------------------------------------------------------ the audit

def table_prefix(table: str = TABLE) -> str:
    """The key prefix of lake table `table` ("name" in the default namespace, or "ns.name")."""
    namespace, name = table.split(".") if "." in table else ("default", table)
    return f"lake/{namespace}/{name}/"


def log_versions(cloud, bucket: str, table: str = TABLE) -> list[int]:
    """The versions of the commit objects (NNNNNNNNNNNNNNNNNNNN.json) in a table's log, sorted."""
    log = table_prefix(table) + "_delta_log/"
    names = [k[len(log):] for k in cloud.list_keys(bucket, log)]
    return sorted(int(n[:20]) for n in names if re.fullmatch(r"\d{20}\.json", n))


def log_commits(cloud, bucket: str, versions, table: str = TABLE) -> dict[int, list[dict]]:
    """version -> the actions of that commit, read from the service directly."""
    out = {}
    for v in versions:
        key = f"{table_prefix(table)}_delta_log/{v:020d}.json"
        text = cloud.get(bucket, key).decode()
        out[v] = [json.loads(line) for line in text.splitlines() if line.strip()]
    return out


def assert_log_is_whole(cloud, bucket: str, table: str = TABLE) -> dict[int, list[dict]]:
    """No gap in the log; every file the log's snapshot references exists (HEAD); every
    checkpoint's files exist, and a checkpoint holds the files the commits up to it leave live.
    Returns the commits."""
    log = table_prefix(table) + "_delta_log/"
    versions = log_versions(cloud, bucket, table)
    assert versions == list(range(versions[0], versions[0] + len(versions))), (
        f"gap in the log of {table}: {versions}")
    commits = log_commits(cloud, bucket, versions, table)
    checkpoints = {}  # version -> the paths its add actions name
    for key in cloud.list_keys(bucket, log):
        if re.fullmatch(r"\d{20}\.checkpoint\.parquet", key[len(log):]):
            body = cloud.get(bucket, key)
            adds = pq.read_table(pa.py_buffer(body)).column("add").to_pylist()
            checkpoints[int(key[len(log):][:20])] = {a["path"] for a in adds if a}
    # Replay from commit 0, or from the oldest checkpoint expiry left the commits after.
    start = 0 if versions[0] == 0 else min(v for v in checkpoints if v >= versions[0] - 1)
    live = set() if start == 0 else set(checkpoints[start])
    for v in (v for v in versions if v > start or start == 0):
        for action in commits[v]:
            if "add" in action:
                live.add(action["add"]["path"])
            elif "remove" in action:
                live.discard(action["remove"]["path"])
        if v in checkpoints and v != start:
            assert checkpoints[v] == live, (
                f"checkpoint {v} disagrees with the commits up to it: only in the checkpoint "
                f"{sorted(checkpoints[v] - live)}, only in the commits "
                f"{sorted(live - checkpoints[v])}")
    for v, paths in sorted(checkpoints.items()):
        for path in sorted(paths):
            assert cloud.exists(bucket, table_prefix(table) + path), (
                f"checkpoint {v} references {path}, which does not exist")
    for path in sorted(live):
        assert cloud.exists(bucket, table_prefix(table) + path), (
            f"the log references {path}, which does not exist")
    return commits


def newest_per_writer(rows: list[dict]) -> list[dict]:
    newest = {}
    for row in rows:
        if row["writer"] not in newest or row["time"] > newest[row["writer"]]["time"]:
            newest[row["writer"]] = row
    return [newest[w] for w in sorted(newest)]


def audit(cloud, bucket: str, acked, attempted, scratch: Path) -> dict[str, int]:
    """The checks every scenario ends with (module docstring). Returns rows per batch id."""
    url = cloud.url(bucket)
    commits = assert_log_is_whole(cloud, bucket)
    # The auditor checks the log at every read: a writer killed between its commit and its table
    # head's put leaves a head one version behind, which a reader may trust for up to the version
    # check interval (docs/object-stores.md).
    lake = timelake.Lake(url, storage_options={**cloud.storage_options(), "version_check_interval": "0"})
    counts = {r["batch"]: r["n"] for r in
              lake.sql(f"SELECT batch, count(*) AS n FROM {TABLE} GROUP BY batch").to_pylist()}
    lost = sorted(set(acked) - set(counts))
    assert not lost, f"acknowledged batches missing: {lost}"
    wrong = {b: n for b, n in counts.items() if n != ROWS_PER_BATCH}
    assert not wrong, f"batches doubled or partial (rows per batch {ROWS_PER_BATCH}): {wrong}"
    assert set(counts) <= set(attempted), sorted(set(counts) - set(attempted))
    total = lake.sql(f"SELECT count(*) AS n FROM {TABLE}").column("n")[0].as_py()
    assert total == sum(counts.values())

    full = lake.sql(f"SELECT * FROM {TABLE}")
    assert full.num_rows == total
    assert lake.latest(TABLE).to_pylist() == newest_per_writer(full.to_pylist())

    # One WRITE commit per batch after the create (the writers append from one thread each, so
    # no group commit; background compaction may add OPTIMIZE commits, which add no rows), and
    # each batch id recorded by exactly one commit.
    operations = [next((a["commitInfo"] for a in commits[v] if "commitInfo" in a), {}).get("operation")
                  for v in sorted(commits) if v > 0]
    writes = operations.count("WRITE")
    assert writes == len(counts), f"{writes} WRITE commits for {len(counts)} batches"
    assert set(operations) <= {"WRITE", "OPTIMIZE"}, operations
    recorded = [a["txn"]["appId"] for v in commits for a in commits[v] if "txn" in a]
    assert sorted(recorded) == sorted(f"timelake:{b}" for b in counts)

    got, version = cloud.delta_read(f"{url}/default/{TABLE}", scratch)
    assert version == max(commits)
    assert sorted_rows(got.select(full.column_names)) == sorted_rows(full)
    return counts


# --------------------------------------------------------------- 1. faults under many writers

WRITERS = 4
APPENDS = 4

# In a Scenario's `random` or `arm`: the method of a request that creates an object on the test's
# cloud (PUT on S3 and Azure, POST on GCS).
WRITE = "<write>"


@dataclasses.dataclass
class Scenario:
    kind: str  # the fault kind that must have been injected
    random: dict | None = None  # the proxy's random mode (set_random's arguments)
    arm: list = dataclasses.field(default_factory=list)  # rules each writer arms before appends
    arm_every: int = 1  # ... before every this many appends
    options: dict = dataclasses.field(default_factory=dict)  # writer storage options


def on_cloud(fields: dict | None, cloud) -> dict | None:
    """Rule or random-mode fields with COMMIT and WRITE made the cloud's."""
    if fields is None:
        return None
    out = {k: v for k, v in fields.items() if k != "path" or v != COMMIT}
    if fields.get("path") == COMMIT:
        out.update(cloud.commit_write())
    if out.get("method") == WRITE:
        out["method"] = cloud.write_method
    return out


SCENARIOS = {
    # Errors answered without forwarding: nothing landed; the store retries (10 times).
    "internal_error": Scenario("internal_error", random={"p": 0.15, "kinds": ["internal_error"]}),
    # Errors answered after the request took effect: a commit put landed and was answered 500.
    # One retry only, so that some appends fail and the gateway retries them with their batch id.
    "internal_error_forwarded": Scenario(
        "internal_error", random={"p": 0.3, "kinds": ["internal_error"], "forward": True},
        arm=[{"kind": "internal_error", "count": 1, "path": COMMIT, "forward": True}],
        options={"max_retries": "1"}),
    "service_unavailable": Scenario("service_unavailable",
                                    random={"p": 0.15, "kinds": ["service_unavailable"]}),
    # Bursts of three SlowDowns in a row, armed by the writers from their processes.
    "slow_down_bursts": Scenario("slow_down", arm=[{"kind": "slow_down", "count": 3}]),
    # Connections closed before forwarding; two retries, so that some reach the commit layer.
    "drop_request": Scenario("drop_request", random={"p": 0.15, "kinds": ["drop_request"]},
                             options={"max_retries": "2"}),
    # Writes (object creations) that land without a reply, commits first of all.
    "lost_reply_on_write": Scenario(
        "lost_reply", random={"p": 0.25, "kinds": ["lost_reply"], "method": WRITE},
        arm=[{"kind": "lost_reply", "count": 1, "path": COMMIT}],
        options={"max_retries": "1"}),
    # Replies to reads (objects and listings) cut in the middle of the body; two retries.
    "cut_body_on_get": Scenario("cut_body", random={"p": 0.25, "kinds": ["cut_body"],
                                                    "method": "GET"},
                                options={"max_retries": "2"}),
    # Replies held past the client's timeout (the request took effect, the client gave up), and
    # commit puts held and forwarded only after the client gave up (the write lands late).
    "delay_past_timeout": Scenario(
        "delay", random={"p": 0.03, "kinds": ["delay"], "delay_s": 3},
        arm=[{"kind": "delay", "count": 1, "path": COMMIT, "delay_s": 3, "forward_late": True}],
        arm_every=2),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_writers_through_faults_keep_every_acknowledged_batch_once(
        cloud, cloud_bucket, cloud_proxy, tmp_path, name):
    scenario = SCENARIOS[name]
    url = cloud.url(cloud_bucket)
    timelake.Lake(url, storage_options=cloud.storage_options()).create_table(
        TABLE, SCHEMA, series_key=["writer"])
    if scenario.random:
        cloud_proxy.set_random(seed=zlib.crc32(name.encode()), **on_cloud(scenario.random, cloud))
    options = {**cloud.storage_options(cloud_proxy.endpoint), **WRITER_OPTIONS,
               **scenario.options}

    report = run_writers(url, options, WRITERS, APPENDS, tmp_path / "barrier",
                         proxy=cloud_proxy.endpoint,
                         arm=[on_cloud(rule, cloud) for rule in scenario.arm],
                         arm_every=scenario.arm_every)
    if scenario.kind == "delay":
        time.sleep(3.5)  # requests still held (forward_late) land now, before the audit
    stats = cloud_proxy.stats()
    cloud_proxy.stop()
    assert stats["injected"][scenario.kind] > 0, f"no {scenario.kind} fault was injected: {stats}"
    armed = WRITERS * (APPENDS // scenario.arm_every) * len(scenario.arm)
    assert sum(stats["injected"].values()) >= armed, stats  # every armed rule was used

    attempted = [f"w{w}-{i}" for w in range(WRITERS) for i in range(APPENDS)]
    audit(cloud, cloud_bucket, report.acked, attempted, tmp_path)
    assert_clear_errors(report.errors, cloud.scheme)
    assert not report.gave_up, f"never acknowledged: {report.gave_up}; errors: {report.errors}"
    assert sorted(report.acked) == sorted(attempted)


def test_scenario_rules_pick_the_commits_of_the_cloud(cloud, cloud_bucket, cloud_proxy):
    """The rule the scenarios arm for a commit (COMMIT on the cloud) faults exactly the puts of
    log versions, and WRITE is the method that creates objects: else the soak above would fault
    nothing it means to (or only the armed count would tell)."""
    rule = on_cloud({"path": COMMIT}, cloud)
    cloud_proxy.add_rule("delay", count=None, delay_s=0, **rule)  # forwards, counts, logs
    writes = on_cloud({"kind": "delay", "method": WRITE}, cloud)["method"]
    lake = timelake.Lake(cloud.url(cloud_bucket),
                         storage_options=cloud.storage_options(cloud_proxy.endpoint))
    table = lake.create_table(TABLE, SCHEMA, series_key=["writer"])
    table.append(batch_of("a", 0), batch_id="a-0")
    table.append(batch_of("a", 1), batch_id="a-1")
    picked = [e for e in cloud_proxy.stats()["log"] if e["kind"] == "delay"]
    assert len(picked) == 3, picked  # versions 0, 1 and 2, nothing else
    for version, event in enumerate(picked):
        assert event["method"] == writes, event
        assert re.search(rf"_delta_log(/|%2F){version:020d}\.json", event["target"]), event
    # Reads of one version's content, not its metadata, are what object_read picks.
    cloud_proxy.reset()
    cloud_proxy.add_rule("delay", count=None, delay_s=0,
                         **cloud.object_read(r"/_delta_log/0{19}1\.json"))
    timelake.Lake(cloud.url(cloud_bucket),
                  storage_options=cloud.storage_options(cloud_proxy.endpoint)).table(TABLE)
    picked = [e for e in cloud_proxy.stats()["log"] if e["kind"] == "delay"]
    assert picked and all(e["method"] == "GET" and "1.json" in e["target"] for e in picked), picked


# ------------------------------------------ a commit whose follow-up check fails stays put

@pytest.mark.parametrize("head", [1, 8], ids=["plain", "next_writer_checkpoints"])
def test_landed_commit_is_kept_when_the_check_after_its_put_fails(
        cloud, cloud_bucket, cloud_proxy, tmp_path, head):
    """Writer A's commit of version head+1 lands; the read of version `head` that A makes right
    after its put (to check that it built on its own table's head) is held past A's timeout;
    meanwhile writer B commits version head+2 on top of A's. A may fail, but A's landed commit
    is part of the table now: the log keeps it (no gap), B's batch stays readable, and A's retry
    with its batch id is a duplicate."""
    url = cloud.url(cloud_bucket)
    direct = timelake.Lake(url, storage_options=cloud.storage_options())
    b = direct.create_table(TABLE, SCHEMA, series_key=["writer"])
    for i in range(head):
        b.append(batch_of("b", i), batch_id=f"b-{i}")
    # No retries: the failed check must reach the commit. A timeout of 5 s, not less: every
    # other request of A's must get through on its first try, on an emulator late in a long run.
    a_lake = timelake.Lake(url, storage_options={**cloud.storage_options(cloud_proxy.endpoint),
                                                 "timeout": "5s", "max_retries": "0"})
    a, _ = retrying(lambda: a_lake.table(TABLE))
    assert a.version == head
    # A's append reads version `head` twice: when it updates and after its put (the check before
    # the put is skipped: the update confirmed the head moments earlier).
    cloud_proxy.add_rule("delay", after=1, delay_s=10,
                         **cloud.object_read(rf"/_delta_log/{head:020d}\.json"))

    landed = f"{table_prefix()}_delta_log/{head + 1:020d}.json"
    b_result = {}

    def writer_b():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not cloud.exists(cloud_bucket, landed):
            time.sleep(0.02)
        b_result.update(b.append(batch_of("b", head), batch_id=f"b-{head}"))

    thread = threading.Thread(target=writer_b)
    thread.start()
    try:
        a_result = a.append(batch_of("a", 0), batch_id="a-0")
    except RuntimeError as e:
        a_result = e
    thread.join()
    assert cloud_proxy.counts()["delay"] == 1
    assert b_result.get("version") == head + 2, b_result  # B built on A's commit

    versions = log_versions(cloud, cloud_bucket)
    assert versions == list(range(head + 3)), (
        f"A's append ended with {a_result!r}; the log now holds versions {versions}")
    if isinstance(a_result, RuntimeError):
        assert retrying(lambda: a.append(batch_of("a", 0), batch_id="a-0"))[0]["duplicate"] is True
    acked = [f"b-{i}" for i in range(head + 1)] + ["a-0"]
    counts = audit(cloud, cloud_bucket, acked, acked, tmp_path)
    assert counts == {batch: ROWS_PER_BATCH for batch in acked}


def test_append_failing_after_its_commit_landed_keeps_that_commits_files(
        cloud, cloud_bucket, cloud_proxy, tmp_path):
    """One writer. Its commit of version 2 lands; the read of version 1 right after the put is
    held past its timeout, and the read of version 2 that follows fails. Whatever the append
    reports, version 2 is in the log: the files it names must stay, and the retry with the same
    batch id is a duplicate whose rows are readable."""
    url = cloud.url(cloud_bucket)
    direct = timelake.Lake(url, storage_options=cloud.storage_options())
    direct.create_table(TABLE, SCHEMA, series_key=["writer"]).append(batch_of("b", 0),
                                                                     batch_id="b-0")
    # No retries, and 5 s (not less) for the requests that are not held: as in the test above.
    a_lake = timelake.Lake(url, storage_options={**cloud.storage_options(cloud_proxy.endpoint),
                                                 "timeout": "5s", "max_retries": "0"})
    a, _ = retrying(lambda: a_lake.table(TABLE))
    # The append reads version 1 when it updates and after its put (held); it reads version 2
    # when it updates (absent then) and after the failed check (answered 500).
    cloud_proxy.add_rule("delay", after=1, delay_s=8,
                         **cloud.object_read(r"/_delta_log/0{19}1\.json"))
    cloud_proxy.add_rule("internal_error", after=1,
                         **cloud.object_read(r"/_delta_log/0{19}2\.json"))
    try:
        a.append(batch_of("a", 0), batch_id="a-0")
    except RuntimeError as e:
        assert_clear_message(str(e), cloud.scheme)
    # The held read is what matters; the 500 only hits a writer that reads version 2 after a
    # failed check (one that asks again about version 1 instead never meets it).
    assert cloud_proxy.counts()["delay"] == 1 and cloud_proxy.counts()["internal_error"] <= 1
    cloud_proxy.clear_rules()  # the retry comes once the faults have passed

    assert_log_is_whole(cloud, cloud_bucket)
    assert retrying(lambda: a.append(batch_of("a", 0), batch_id="a-0"))[0]["duplicate"] is True
    counts = audit(cloud, cloud_bucket, ["b-0", "a-0"], ["b-0", "a-0"], tmp_path)
    assert counts == {"b-0": ROWS_PER_BATCH, "a-0": ROWS_PER_BATCH}


# ------------------------------------------------------- calls that cannot complete

def batch_counts(cloud, bucket: str) -> dict[str, int]:
    lake = timelake.Lake(cloud.url(bucket), storage_options=cloud.storage_options())
    rows = lake.sql(f"SELECT batch, count(*) AS n FROM {TABLE} GROUP BY batch").to_pylist()
    return {r["batch"]: r["n"] for r in rows}


# kind -> rule parameters; "refused": the proxy is stopped, its port refuses connections.
UNREACHABLE = {
    "internal_error": {},
    "slow_down": {},
    "drop_request": {},
    "delay": {"delay_s": 3},
    "refused": None,
}


@pytest.mark.parametrize("kind", list(UNREACHABLE))
def test_calls_to_an_unreachable_server_raise_runtime_error_naming_what_failed(
        cloud, cloud_bucket, cloud_proxy, kind):
    url = cloud.url(cloud_bucket)
    direct = timelake.Lake(url, storage_options=cloud.storage_options())
    created = direct.create_table(TABLE, SCHEMA, series_key=["writer"])
    created.append(batch_of("b", 0), batch_id="b-0")

    # Interval 0: every read asks the store (within an interval, a read of a table the process
    # opened lately, even from a new Lake, may send no request at all: nothing to fail).
    options = {**cloud.storage_options(cloud_proxy.endpoint), "timeout": "1s",
               "connect_timeout": "1s", "max_retries": "1", "retry_timeout": "2s",
               "version_check_interval": "0"}
    lake = timelake.Lake(url, storage_options=options)
    table, _ = retrying(lambda: lake.table(TABLE))  # opened while the server answers
    if kind == "refused":
        cloud_proxy.stop()  # its port now refuses connections
    else:
        cloud_proxy.add_rule(kind, count=None, **UNREACHABLE[kind])

    calls = {
        "append": lambda: table.append(batch_of("a", 0), batch_id="a-0"),
        "sql": lambda: lake.sql(f"SELECT count(*) FROM {TABLE}"),
        "table": lambda: timelake.Lake(url, storage_options=options).table(TABLE),
        "tables": lambda: timelake.Lake(url, storage_options=options).tables(),
        "latest": lambda: lake.latest(TABLE),
        "maintain": lambda: table.maintain(),
        "create_table": lambda: lake.create_table("other", SCHEMA),
    }
    if kind == "delay":  # each costs two timeouts: the first three make the point
        calls = dict(list(calls.items())[:3])
    for name, call in calls.items():
        started = time.monotonic()
        with pytest.raises(RuntimeError) as raised:
            call()
        elapsed = time.monotonic() - started
        assert type(raised.value) is RuntimeError, f"{name}: {raised.value!r}"
        assert_clear_message(str(raised.value), cloud.scheme)
        assert elapsed < 20, f"{name} took {elapsed:.1f} s to give up"
    if kind != "refused":
        assert cloud_proxy.counts()[kind] > 0

    # Once the server answers again the append lands, once.
    if kind == "refused":
        table = timelake.Lake(url, storage_options=cloud.storage_options()).table(TABLE)
    cloud_proxy.clear_rules()
    if kind == "delay":
        time.sleep(3.5)  # replies held by the proxy are sent (and dropped by the client) first
    # The handle keeps its 1 s timeouts, and an emulator late in a long test run can stall for
    # that long (a CI run's Azurite once did, twice in a row): retry, as a gateway would. The
    # batch id makes the retries safe; the counts below prove the rows landed once.
    first, failed_tries = retrying(lambda: table.append(batch_of("a", 0), batch_id="a-0"))
    if failed_tries == 0:
        assert first["duplicate"] is False
    assert retrying(lambda: table.append(batch_of("a", 0), batch_id="a-0"))[0]["duplicate"] is True
    assert batch_counts(cloud, cloud_bucket) == {"b-0": ROWS_PER_BATCH, "a-0": ROWS_PER_BATCH}
    assert log_versions(cloud, cloud_bucket) == [0, 1, 2]


def retrying(call, tries=4):
    """call(), retrying a RuntimeError up to `tries` times in all; returns (result, failed tries).
    For calls through a handle with short timeouts that must succeed (idempotent ones only: an
    open, or an append with a batch id)."""
    for failed in range(tries):
        try:
            return call(), failed
        except RuntimeError:
            if failed == tries - 1:
                raise
            time.sleep(1)


# ------------------------------------------------------------------------------- 2. kill -9

KILLED_WRITERS = 4


def test_writers_killed_mid_append_leave_a_consistent_table(cloud, cloud_bucket, tmp_path):
    seed = int(os.environ.get("TIMELAKE_TEST_SEED", time.time_ns() % 1_000_000))
    print(f"kill moments from seed {seed} (set TIMELAKE_TEST_SEED to repeat them)")
    rng = random.Random(seed)
    url = cloud.url(cloud_bucket)
    options = cloud.storage_options()
    timelake.Lake(url, storage_options=options).create_table(TABLE, SCHEMA, series_key=["writer"])
    procs = [spawn_writer(url, options, w, 0, 10_000, attempts=1) for w in range(KILLED_WRITERS)]
    acked_lines = {w: [] for w in range(KILLED_WRITERS)}
    try:
        for w, proc in enumerate(procs):  # each dies after a few acks, at a random instant
            wanted = rng.randint(1, 6)
            while len(acked_lines[w]) < wanted:
                line = proc.stdout.readline()
                assert line, f"writer {w} ended early:\n{proc.stderr.read()}"
                acked_lines[w].append(line)
            time.sleep(rng.uniform(0, 0.15))
            os.kill(proc.pid, signal.SIGKILL)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    last = {}
    acked = {}
    for w, proc in enumerate(procs):
        proc.wait(timeout=60)
        # What it printed before it died; read() also takes what readline() buffered.
        report = parse_events(acked_lines[w] + proc.stdout.read().splitlines())
        proc.stdout.close()
        proc.stderr.close()
        assert not report.errors, f"seed {seed}: {report.errors}"
        acked.update(report.acked)
        last[w] = max(int(b.split("-")[1]) for b in report.acked)
    # A writer has one append in flight: at most batch last+1 landed without its ack.
    attempted = [f"w{w}-{i}" for w in last for i in range(last[w] + 2)]
    audit(cloud, cloud_bucket, acked, attempted, tmp_path)

    # The gateways replay from their last checkpoint on: what landed is a duplicate, the rest
    # lands once; then appends go on.
    replays = [spawn_writer(url, options, w, 0, last[w] + 3, attempts=1) for w in last]
    replayed = {}
    for proc in replays:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        report = parse_events(stdout.splitlines())
        assert not report.errors and not report.gave_up, f"seed {seed}: {report}"
        replayed.update(report.acked)
    assert all(replayed[b]["duplicate"] for b in acked), f"seed {seed}"
    every = [f"w{w}-{i}" for w in last for i in range(last[w] + 3)]
    counts = audit(cloud, cloud_bucket, every, every, tmp_path)
    assert counts == {b: ROWS_PER_BATCH for b in every}, f"seed {seed}"


# ------------------------------------------- drop and create against writers of the old table

# Appends batches through a handle that the parent's next drop makes stale; a KeyError (the table
# was dropped under it) sends it to the new table. Every other failure is reported.
STALE_WRITER = textwrap.dedent(
    """
    import json, sys, time
    import pyarrow as pa  # before timelake (shared Arrow libraries)
    import timelake
    cfg = json.loads(sys.argv[1])
    sys.path.insert(0, cfg["tests_dir"])
    from test_cloud_faults import batch_of
    lake = timelake.Lake(cfg["url"], storage_options=cfg["options"])
    deadline = time.monotonic() + cfg["seconds"]
    t, i, acked, dropped, errors = None, 0, 0, 0, []
    while time.monotonic() < deadline:
        try:
            if t is None:
                t = lake.table(cfg["table"])
            i += 1
            t.append(batch_of(cfg["writer"], i))
            acked += 1
        except KeyError:
            t, dropped = None, dropped + 1
            time.sleep(0.005)
        except Exception as e:
            t = None
            errors.append(f"{type(e).__name__}: {e}")
    print(json.dumps({"acked": acked, "dropped": dropped, "errors": errors}), flush=True)
    """
)


def test_drop_and_create_racing_stale_writers_leave_only_the_new_tables_log(cloud, cloud_bucket, tmp_path):
    """Three writer processes append through handles that each drop makes stale, while this
    process drops the table and creates it again, in a loop. On an object store nothing keeps a
    stale writer's commit or checkpoint out of the new table's log (no folders): every create
    must still find the name free, and the table left at the end must hold only its own log:
    no gap, every commit of its incarnation, every checkpoint agreeing with the commits, and
    timelake and deltalake reading the same rows."""
    url = cloud.url(cloud_bucket)
    options = cloud.storage_options()
    lake = timelake.Lake(url, storage_options=options)
    lake.create_table(TABLE, SCHEMA, series_key=["writer"])
    procs = [
        subprocess.Popen([sys.executable, "-c", STALE_WRITER, json.dumps({
            "tests_dir": str(TESTS_DIR), "url": url, "options": options, "table": TABLE,
            "writer": f"w{w}", "seconds": 15})], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(3)
    ]
    cycles = 0
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            time.sleep(0.3)
            lake.drop_table(TABLE)
            lake.create_table(TABLE, SCHEMA, series_key=["writer"])  # FileExistsError: a stray revived it
            cycles += 1
    finally:
        outs = [p.communicate(timeout=180) for p in procs]
    reports = []
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert cycles >= 10
    assert all(r["acked"] > 0 and r["dropped"] > 0 for r in reports), reports
    assert [e for r in reports for e in r["errors"]] == [], reports
    time.sleep(1)  # a stale writer's upkeep may still be taking its checkpoint back
    commits = assert_log_is_whole(cloud, cloud_bucket)
    table_id = next(a["metaData"]["id"] for a in commits[0] if "metaData" in a)
    for v, actions in commits.items():
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        assert info.get("timelakeTableId", table_id) == table_id, f"commit {v} is another table's"
    fresh = timelake.Lake(url, storage_options=options)
    t = fresh.table(TABLE)
    assert t.version == max(commits)
    n = fresh.sql(f"SELECT count(*) AS n FROM {TABLE}").column("n")[0].as_py()
    delta, delta_version = cloud.delta_read(url + f"/default/{TABLE}", tmp_path)
    assert (delta.num_rows, delta_version) == (n, t.version)
