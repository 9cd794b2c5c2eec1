"""Many writers, one table: real processes appending at once through the commit protocol."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import threading
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

import timelake
from helpers import NO_BACKGROUND, IOT_SCHEMA, commit_versions, grouped_commits, table_dir

WRITER = textwrap.dedent(
    """
    import datetime as dt, os, sys, time
    import pyarrow as pa
    import timelake
    lake_path, writer, appends, batch_prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    t = timelake.Lake(lake_path).table("readings")
    # Start barrier: report ready, then wait for the parent's go, so the writers really overlap.
    open(os.path.join(lake_path, f"ready-{writer}"), "w").close()
    while not os.path.exists(os.path.join(lake_path, "go")):
        time.sleep(0.005)
    schema = t.schema
    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(appends):
        rows = 5
        batch = pa.table({
            "time": [base + dt.timedelta(seconds=i * 10 + k) for k in range(rows)],
            "device_id": [f"w{writer}"] * rows,
            "temp": [float(writer * 1000 + i)] * rows,
        }).select(["time", "device_id", "temp"])
        batch_id = f"{batch_prefix}-{i}" if batch_prefix != "-" else f"w{writer}-{i}"
        r = t.append(batch, batch_id=batch_id)
        print(r["version"], r["attempts"], r["duplicate"], flush=True)
    """
)


def _spawn(lake_path: Path, writer: int, appends: int, batch_prefix: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(lake_path), str(writer), str(appends), batch_prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _start(lake_path: Path, procs) -> None:
    """Releases the writers once all of them are ready."""
    import time

    deadline = time.monotonic() + 120
    while not all((lake_path / f"ready-{w}").exists() for w in range(len(procs))):
        assert all(p.poll() is None for p in procs), "a writer exited before the start barrier"
        assert time.monotonic() < deadline, "writers did not start"
        time.sleep(0.01)
    (lake_path / "go").touch()


def _results(procs):
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        out.append([line.split() for line in stdout.strip().splitlines()])
    return out


def test_concurrent_processes_lose_no_append_and_double_none(lake, lake_path):
    # Versions are counted: one per append, no background compaction commits in between.
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    writers, appends = 4, 15
    procs = [_spawn(lake_path, w, appends, "-") for w in range(writers)]
    _start(lake_path, procs)
    results = _results(procs)

    # Writers that wait for another's commit hand it their appends (group commit across
    # processes, docs/api.md): several appends may share a version, each writer's keep rising.
    versions = [int(v) for per_writer in results for v, _, _ in per_writer]
    for per_writer in results:
        own = [int(v) for v, _, _ in per_writer]
        assert own == sorted(set(own)), own
    commits = sorted(set(versions))
    assert commits == list(range(1, len(commits) + 1))  # every commit holds acknowledged appends
    assert commit_versions(table_dir(t)) == list(range(0, len(commits) + 1))
    rows = lake.sql("SELECT device_id, count(*) AS n FROM readings GROUP BY 1 ORDER BY 1").to_pylist()
    assert rows == [{"device_id": f"w{w}", "n": appends * 5} for w in range(writers)]


def test_processes_waiting_for_a_commit_share_the_next_one(lake, lake_path):
    # While a commit is under way (the test holds the spool lock a leading writer holds), three
    # writer processes hand over their appends; the first to get the lock commits all three.
    import fcntl
    import json
    import time

    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    t.append(one_init_row(), batch_id="first")
    folder = table_dir(t) / "_timelake"
    with open(folder / "spool.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        procs = [_spawn(lake_path, w, 1, "-") for w in range(3)]
        _start(lake_path, procs)
        deadline = time.monotonic() + 60
        while len(list(folder.glob("spool-*.req"))) < 3:
            assert all(p.poll() is None for p in procs), "a writer exited while the lock was held"
            assert time.monotonic() < deadline, "the writers did not hand over their appends"
            time.sleep(0.005)
        fcntl.flock(held, fcntl.LOCK_UN)
    results = _results(procs)
    assert sorted(int(per_writer[0][0]) for per_writer in results) == [2, 2, 2]
    assert commit_versions(table_dir(t)) == [0, 1, 2]
    commit = [json.loads(line) for line in
              (table_dir(t) / "_delta_log" / f"{2:020d}.json").read_text().splitlines()]
    info = next(a["commitInfo"] for a in commit if "commitInfo" in a)
    assert info["operationParameters"]["timelake.groupedAppends"] == "3"
    assert sum("txn" in a for a in commit) == 3
    assert sum("add" in a for a in commit) == 1  # one shared file for the day
    assert not list(folder.glob("spool-*")), "requests or answers left behind"
    rows = lake.sql("SELECT device_id, count(*) AS n FROM readings GROUP BY 1 ORDER BY 1").to_pylist()
    assert rows == [{"device_id": "init", "n": 1}] + [{"device_id": f"w{w}", "n": 5} for w in range(3)]


def one_init_row():
    import pyarrow as pa

    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table({"time": [base], "device_id": ["init"], "temp": [0.0]})


def test_writers_on_one_disk_take_turns_instead_of_racing(tmp_path):
    # In memory (tmpfs) when there is one: a waiter gives up on the turn after half a second,
    # and a loaded disk's fsync under the turn can take that long (then a race is fair play).
    import tempfile

    shm = Path("/dev/shm")
    where = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    try:
        _writers_take_turns(where / "lake")
    finally:
        if where != tmp_path:
            import shutil

            shutil.rmtree(where, ignore_errors=True)


def _writers_take_turns(lake_path):
    lake = timelake.Lake(str(lake_path))
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    procs = [_spawn(lake_path, w, 25, "-") for w in range(4)]
    _start(lake_path, procs)
    results = _results(procs)
    # Each commit is put with the table's commit turn (_timelake/commit.lock) held, after reading
    # what the others committed: no put is lost to a writer of the same disk, background
    # compactions included.
    assert [int(a) for per_writer in results for _, a, _ in per_writer] == [1] * 100
    assert (table_dir(t) / "_timelake" / "commit.lock").is_file()
    rows = lake.sql("SELECT device_id, count(*) AS n FROM readings GROUP BY 1 ORDER BY 1").to_pylist()
    assert rows == [{"device_id": f"w{w}", "n": 25 * 5} for w in range(4)]


def test_a_turn_holder_that_stopped_holds_nobody_up_for_good(lake, lake_path):
    import fcntl

    import pyarrow as pa

    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(pa.table({"time": [dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)], "device_id": ["a"], "temp": [1.0]}))
    # Another process took the turn and stopped (SIGSTOP, a debugger): the lock stays taken.
    with open(table_dir(t) / "_timelake" / "commit.lock", "r+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        r = t.append(pa.table({"time": [dt.datetime(2025, 1, 2, tzinfo=dt.timezone.utc)], "device_id": ["a"],
                               "temp": [2.0]}))
    # The append waited a bounded time, then committed without the turn.
    assert r["version"] == 2 and not r["duplicate"]
    assert lake.sql("SELECT sum(temp) AS s FROM readings").to_pylist() == [{"s": 3.0}]


def test_writers_without_turns_race_and_are_rebased_not_failed(lake, lake_path):
    # A commit turn that cannot be taken (here: a folder where the lock file goes; elsewhere: an
    # object store, or a writer on another machine) leaves writers racing through put-if-absent.
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    (table_dir(t) / "_timelake" / "commit.lock").mkdir(parents=True)
    procs = [_spawn(lake_path, w, 25, "-") for w in range(4)]
    _start(lake_path, procs)
    results = _results(procs)
    attempts = [int(a) for per_writer in results for _, a, _ in per_writer]
    # With four processes racing, some commits must have lost a race and been rebased.
    assert max(attempts) > 1
    assert all(a >= 1 for a in attempts)
    rows = lake.sql("SELECT device_id, count(*) AS n FROM readings GROUP BY 1 ORDER BY 1").to_pylist()
    assert rows == [{"device_id": f"w{w}", "n": 25 * 5} for w in range(4)]


def test_same_batch_ids_racing_commit_exactly_once(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    # Every writer sends the same 10 batch ids (each with its own rows): one commit per id wins.
    procs = [_spawn(lake_path, w, 10, "shared") for w in range(3)]
    _start(lake_path, procs)
    results = _results(procs)
    committed = [(int(v), d == "False") for per_writer in results for v, _, d in per_writer]
    assert sum(1 for _, ok in committed if ok) == 10
    t.refresh()
    assert t.version == 10
    assert lake.sql("SELECT count(*) AS n FROM readings").column("n")[0].as_py() == 10 * 5


def test_threads_share_one_handle_safely(lake):
    import threading

    import pyarrow as pa
    import datetime as dt

    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    errors = []

    def work(n):
        try:
            for i in range(10):
                t.append(
                    pa.table({"time": [base + dt.timedelta(seconds=i)], "device_id": [f"t{n}"], "temp": [1.0]}),
                    batch_id=f"t{n}-{i}",
                )
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    # Appends of different threads may share a commit (group commit): at most one per append.
    assert 1 <= t.version <= 40
    assert lake.sql("SELECT count(*) AS n FROM readings").column("n")[0].as_py() == 40
    for n in range(4):
        assert t.append(pa.table({"time": [base], "device_id": ["x"], "temp": [0.0]}), batch_id=f"t{n}-9")["duplicate"]


def test_threads_appending_to_one_handle_share_commits_and_lose_nothing(lake, tmp_path):
    from helpers import T0, delta_read, iot_table, sorted_rows

    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    threads_n, per = 8, 25
    expected, results, errors = [], {}, []
    lock = threading.Lock()

    def work(w):
        try:
            for i in range(per):
                # Threads 0 and 1 send the same batches, as two gateways retrying might.
                src = 0 if w < 2 else w
                rows = [(T0 + dt.timedelta(minutes=i, seconds=k), f"w{src}", float(i)) for k in range(3)]
                r = t.append(iot_table(rows), batch_id=f"w{src}-{i}")
                with lock:
                    results.setdefault(f"w{src}-{i}", []).append(r)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    for w in range(threads_n):
        if w == 1:
            continue
        for i in range(per):
            expected += [(T0 + dt.timedelta(minutes=i, seconds=k), f"w{w}", float(i)) for k in range(3)]
    threads = [threading.Thread(target=work, args=(w,)) for w in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    for batch, rs in results.items():
        assert sum(not r["duplicate"] for r in rs) == 1, batch
    want = sorted_rows(iot_table(expected))
    assert sorted_rows(lake.sql("SELECT * FROM readings")) == want
    delta_rows, _ = delta_read(table_dir(t), tmp_path)
    assert sorted_rows(delta_rows) == want
    commits = len(commit_versions(table_dir(t))) - 1
    assert commits <= (threads_n - 1) * per
    assert {r["version"] for rs in results.values() for r in rs if not r["duplicate"]} <= set(range(1, commits + 1))
    latest = {r["device_id"]: r["temp"] for r in lake.latest("readings").to_pylist()}
    assert latest == {f"w{w}": float(per - 1) for w in range(threads_n) if w != 1}


@pytest.mark.parametrize("dedup", ["last", "first"])
def test_grouped_appends_to_a_dedup_table_agree_everywhere(lake, tmp_path, dedup):
    """Threads write the same (series, time) with different values; whichever wins, sql(), latest()
    and the table after compaction agree, and some commits really were shared."""
    from helpers import T0, iot_table, sorted_rows

    grouped = 0
    for attempt in range(3):
        name = f"readings{attempt}"
        t = lake.create_table(name, IOT_SCHEMA, series_key=["device_id"], dedup=dedup, properties=NO_BACKGROUND)

        def work(w, t=t):
            for i in range(20):
                t.append(iot_table([(T0 + dt.timedelta(minutes=i), d, float(w * 100 + i)) for d in ("a", "b")]))

        threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        before = sorted_rows(lake.sql(f"SELECT * FROM {name}"))
        assert len(before) == 40
        newest = {r["device_id"]: r["temp"] for r in before if r["time"] == T0 + dt.timedelta(minutes=19)}
        assert {r["device_id"]: r["temp"] for r in lake.latest(name).to_pylist()} == newest
        t.maintain()
        assert sorted_rows(lake.sql(f"SELECT * FROM {name}")) == before
        assert {r["device_id"]: r["temp"] for r in timelake.Lake(str(table_dir(t).parent.parent)).latest(name).to_pylist()} == newest
        grouped += grouped_commits(table_dir(t))
        if grouped:
            break
    assert grouped > 0, "no commit carried more than one append in three tries"


def _forked_child_appends(lake, table, tag: str, appends: int) -> None:
    """Body of a child made by os.fork(): appends through the inherited handles, then reads."""
    code = 1
    try:
        for i in range(appends):
            table.append(_tagged_rows(tag, i), batch_id=f"{tag}-{i}")
        rows = lake.sql(f"SELECT count(*) AS n FROM default.t WHERE device_id = '{tag}'").column("n")[0].as_py()
        latest = lake.latest("default.t")
        code = 0 if rows == 2 * appends and latest.num_rows > 0 else 2
    finally:
        os._exit(code)


def _tagged_rows(tag: str, i: int) -> pa.Table:
    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=i)
    return pa.table(
        {"time": pa.array([base, base + dt.timedelta(seconds=1)], pa.timestamp("us", "UTC")),
         "device_id": [tag, tag], "temp": [float(i), float(i)]},
        schema=IOT_SCHEMA,
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX-only")
def test_children_forked_while_a_thread_appends_use_the_inherited_handles(tmp_path):
    # A thread of the parent appends through `table` while the main thread forks children that
    # append through the same `table` and query through the same `lake`. The children inherit
    # the handle mid-operation (its lock held, a group commit half done): before handles opened
    # their core objects anew in a child, the children waited forever for the parent's thread.
    lake = timelake.Lake(tmp_path / "lake")
    table = lake.create_table("default.t", IOT_SCHEMA, time_column="time", series_key="device_id", chunk="day")
    table.append(_tagged_rows("parent", 0), batch_id="parent-first")
    assert lake.sql("SELECT count(*) AS n FROM default.t").column("n")[0].as_py() == 2
    stop = threading.Event()
    parent_appends = []

    def parent_loop() -> None:
        i = 1
        while not stop.is_set():
            table.append(_tagged_rows("parent", i), batch_id=f"parent-{i}")
            parent_appends.append(i)
            i += 1

    writer = threading.Thread(target=parent_loop)
    writer.start()
    children = {}
    try:
        for c in range(4):
            while len(parent_appends) < 3 * (c + 1):  # fork while the thread is busy appending
                time.sleep(0.001)
            tag = f"child{c}"
            pid = os.fork()
            if pid == 0:
                _forked_child_appends(lake, table, tag, 20)
            children[pid] = tag
    finally:
        stop.set()
        writer.join()
    deadline = time.monotonic() + 120
    failed = {}
    while children and time.monotonic() < deadline:
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                tag = children.pop(pid)
                if os.waitstatus_to_exitcode(status) != 0:
                    failed[tag] = os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    hung = sorted(children.values())
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert not hung, f"children forked mid-append never finished: {hung}"
    assert not failed, f"children failed (exit codes): {failed}"
    rows = lake.sql("SELECT device_id, count(*) AS n FROM default.t GROUP BY device_id").to_pylist()
    counts = {r["device_id"]: r["n"] for r in rows}
    expected = {"parent": 2 * (len(parent_appends) + 1), **{f"child{c}": 40 for c in range(4)}}
    assert counts == expected
    # The parent's handles still work after its children used their copies.
    assert table.append(_tagged_rows("parent", 10_000), batch_id="parent-last")["duplicate"] is False


MAINTAINER = textwrap.dedent(
    """
    import os, sys, time
    import timelake
    lake_path, who, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    t = timelake.Lake(lake_path).table("readings")
    open(os.path.join(lake_path, f"ready-{who}"), "w").close()
    while not os.path.exists(os.path.join(lake_path, "go")):
        time.sleep(0.002)
    for _ in range(rounds):
        t.maintain()
    """
)


@pytest.mark.parametrize("turns", [True, False], ids=["turns", "racing"])
def test_two_maintains_at_once_never_store_rows_twice(tmp_path, turns):
    # Six day-chunks of four small files each, compacted by two processes at the same moment: each
    # compaction commits its groups one by one, and a group that a group of the other process
    # compacted first must not land (it would add the rows again). Found by a review: 24,000
    # rows became 28,000-44,000, with two OPTIMIZE commits removing the same files.
    for attempt in range(3):
        lake_path = tmp_path / f"lake{attempt}"
        lake = timelake.Lake(str(lake_path))
        t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
        if not turns:
            (table_dir(t) / "_timelake" / "commit.lock").mkdir(parents=True)
        base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
        for day in range(6):
            for f in range(4):
                n = 1000
                t.append(pa.table({
                    "time": [base + dt.timedelta(days=day, seconds=f * n + i) for i in range(n)],
                    "device_id": [f"d{i % 10}" for i in range(n)],
                    "temp": [float(i) for i in range(n)],
                }, schema=IOT_SCHEMA))
        procs = [subprocess.Popen([sys.executable, "-c", MAINTAINER, str(lake_path), str(w), "2"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(2)]
        _start(lake_path, procs)
        for p in procs:
            _, stderr = p.communicate(timeout=300)
            assert p.returncode == 0, stderr
        assert timelake.Lake(str(lake_path)).sql("SELECT count(*) AS n FROM readings").to_pylist() == [{"n": 24_000}]
        removed_by: dict = {}
        tdir = table_dir(t)
        for v in commit_versions(tdir):
            for line in (tdir / "_delta_log" / f"{v:020d}.json").read_text().splitlines():
                action = __import__("json").loads(line)
                if "remove" in action:
                    path = action["remove"]["path"]
                    assert path not in removed_by, f"{path} removed by versions {removed_by[path]} and {v}"
                    removed_by[path] = v


EXIT_WRITER = textwrap.dedent(
    """
    import datetime as dt, sys
    import pyarrow as pa
    import timelake
    lake = timelake.Lake(sys.argv[1])
    t = lake.create_table("default.t", pa.schema([("time", pa.timestamp("us", "UTC")),
                          ("device_id", pa.string()), ("temp", pa.float64())]),
                          time_column="time", series_key="device_id", chunk="day")
    base = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    for i in range(10):
        when = pa.array([base + dt.timedelta(minutes=i)], pa.timestamp("us", "UTC"))
        t.append(pa.table({"time": when, "device_id": ["a"], "temp": [float(i)]}), batch_id=f"b{i}")
    # Exits at once: the checkpoint of version 10 is still on the Lake's upkeep thread.
    """
)


def test_the_interpreters_exit_runs_the_upkeep_every_live_lake_queued(tmp_path):
    # The exit drains every live Lake's runtime (table/lake_runtime.h): the checkpoint the last
    # append left to the upkeep thread is written before the process ends.
    lake_dir = tmp_path / "lake"
    done = subprocess.run([sys.executable, "-c", EXIT_WRITER, str(lake_dir)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    log = lake_dir / "default" / "t" / "_delta_log"
    assert (log / f"{10:020d}.checkpoint.parquet").exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX-only")
def test_children_forked_mid_upkeep_append_drop_and_drain_without_the_parents_threads(tmp_path):
    # A thread of the parent keeps appending (each commit queues a checkpoint on its Lake's
    # upkeep thread) while the main thread forks. Each child appends to a table of its own, drops
    # it (a drop drains that table's queues in every live runtime of the process) and drains
    # every runtime as the interpreter's exit would: none of it may wait for, lock or join
    # anything of the parent's runtimes.
    lake = timelake.Lake(tmp_path / "lake")
    props = {"delta.checkpointInterval": "1"}
    parent_table = lake.create_table("default.p", IOT_SCHEMA, time_column="time", series_key="device_id",
                                     chunk="day", properties=props)
    for c in range(3):
        lake.create_table(f"default.c{c}", IOT_SCHEMA, time_column="time", series_key="device_id",
                          chunk="day", properties=props)
    stop = threading.Event()
    appended = []

    def parent_loop() -> None:
        i = 0
        while not stop.is_set():
            parent_table.append(_tagged_rows("parent", i), batch_id=f"parent-{i}")
            appended.append(i)
            i += 1

    writer = threading.Thread(target=parent_loop)
    writer.start()
    children = []
    try:
        for c in range(3):
            while len(appended) < 3 * (c + 1):
                time.sleep(0.001)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    child_table = lake.table(f"default.c{c}")
                    for i in range(12):
                        child_table.append(_tagged_rows(f"child{c}", i), batch_id=f"child-{i}")
                    lake.drop_table(f"default.c{c}")
                    timelake._core._drain_upkeep()  # what the interpreter's exit runs
                    code = 0 if f"default.c{c}" not in lake.tables() else 2
                finally:
                    os._exit(code)
            children.append(pid)
    finally:
        stop.set()
        writer.join()
    deadline = time.monotonic() + 120
    codes = {}
    while len(codes) < len(children) and time.monotonic() < deadline:
        for pid in children:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    hung = [pid for pid in children if pid not in codes]
    for pid in hung:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert not hung, "children forked mid-upkeep never finished"
    assert all(code == 0 for code in codes.values()), codes
    # The parent's Lake and handles still work; its table was not the children's to drop.
    parent_table.append(_tagged_rows("parent", 10_000), batch_id="parent-last")
    assert lake.tables() == ["default.p"]
