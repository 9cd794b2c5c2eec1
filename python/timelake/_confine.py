"""The confined DuckDB connection: a database that can read the lake's data files and nothing else.

Each catalog is its own DuckDB database, locked before any user text reaches it: external access
off except the lake's data folders (or, for a lake in an object store, its local cache folder), no
extension loading, no Python replacement scans, configuration locked. A user statement runs only
as `SELECT * FROM query(?)` with its text as a parameter (see _sql), so DuckDB itself refuses
anything but one SELECT.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
import weakref
from typing import Iterable, Optional, Set, Tuple
from urllib.parse import unquote

import duckdb

from . import _core
from ._sql_text import glob_literal, literal


def confined_connection(directories: Iterable[str], files: Iterable[str]) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB database that can read the given folders and files and nothing else.

    Settings are global to the database and locked at the end, so no later statement can change
    them. `allowed_directories` also admits writes, which is why user statements must never run
    as anything but a SELECT (see run_sql). Spill files go to a fresh folder that DuckDB creates
    when it first spills, also admits reads of, and removes when the database closes. Paths with
    glob characters are admitted in both spellings, as read_parquet is given them escaped (see
    _sql_text.file_list).
    """
    allowed = sorted({spelling for d in directories for spelling in (d, glob_literal(d))})
    allowed_files = sorted({spelling for f in files for spelling in (f, glob_literal(f))})
    spill = os.path.join(tempfile.gettempdir(), f"timelake-duckdb-{uuid.uuid4().hex}")
    con = _SPARES.take()
    for setting, value in (
        ("TimeZone", literal("UTC")),
        ("parquet_metadata_cache", "true"),
        ("temp_directory", literal(spill)),
        ("allowed_directories", "[" + ", ".join(literal(d) for d in allowed) + "]::VARCHAR[]"),
        ("allowed_paths", "[" + ", ".join(literal(f) for f in allowed_files) + "]::VARCHAR[]"),
        ("enable_external_access", "false"),
        ("autoload_known_extensions", "false"),
        ("autoinstall_known_extensions", "false"),
        ("python_enable_replacements", "false"),
        ("lock_configuration", "true"),
    ):
        con.execute(f"SET {setting} = {value}")
    return con


class _Spares:
    """Fresh in-memory DuckDB databases, made ahead of need on a background thread.

    A new DuckDB database costs 12-40 ms on this class of machine (it registers every built-in
    function of its core, ICU, JSON and Parquet extensions), and every catalog needs a database of
    its own (its confinement is global to the database and locked). So a process keeps one spare,
    made on a thread while the caller does something else: a Lake's first query, or the
    reconnection that admits a new table's folder, takes it instead of waiting for a new one, and
    the thread makes the next. No user text ever reaches a spare before confined_connection has
    configured and locked it, so a spare is exactly what `duckdb.connect(":memory:")` returns.

    Fork: a child must not use a database made by its parent (DuckDB's worker threads do not
    survive fork), so spares made in another process are dropped unused (never closed: closing
    would wait for those threads) and the child makes its own.
    """

    def __init__(self, keep: int = 1) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._made = threading.Condition(self._lock)  # notified when a spare is ready or filling ends
        self._ready: list = []
        self._pid = os.getpid()
        self._filling = False

    def take(self) -> duckdb.DuckDBPyConnection:
        """A fresh database: a spare if one is ready, else the one being made (two databases made
        at once on a 2-core machine each take nearly as long as both in a row), else a new one;
        the next spare is started."""
        with self._made:
            self._forget_parents_locked()
            while not self._ready and self._filling:
                self._made.wait()
            con = self._ready.pop() if self._ready else None
        if con is None:
            con = _connect()
        self.fill()
        return con

    def fill(self) -> None:
        """Starts making spares, unless a thread is making them already."""
        with self._lock:
            self._forget_parents_locked()
            if self._filling or len(self._ready) >= self._keep:
                return
            self._filling = True
        try:
            # Not a daemon: the interpreter waits for it at exit rather than stopping it inside DuckDB
            # (a daemon thread stopped there aborts the process: "exception not rethrown").
            threading.Thread(target=self._make, name="timelake-duckdb-spare").start()
        except RuntimeError:  # no new threads (interpreter shutting down): connect on demand
            with self._lock:
                self._filling = False
                self._made.notify_all()

    def _make(self) -> None:
        pid = os.getpid()
        try:
            global _WARMED
            if not _WARMED:
                _WARMED = True
                _core._warm()  # the core's first-use initialisation, off the caller's path
            while True:
                with self._lock:
                    if self._pid != pid or len(self._ready) >= self._keep:
                        return
                con = _connect()
                with self._lock:
                    if self._pid != pid:
                        return  # forked meanwhile: this database belongs to no one here
                    self._ready.append(con)
                    self._made.notify_all()
        except Exception:  # noqa: BLE001 - a spare is an optimization; take() connects itself
            pass
        finally:
            with self._lock:
                if self._pid == pid:
                    self._filling = False
                    self._made.notify_all()

    def _forget_parents_locked(self) -> None:
        if self._pid != os.getpid():
            _ABANDONED.extend(self._ready)  # kept referenced: closing them in a child could hang
            self._ready = []
            self._pid = os.getpid()
            self._filling = False

    def _before_fork(self) -> None:
        # A child must not inherit a database (or the core's initialisation) half made by a
        # thread that does not exist there: a fork waits for the spare being made (bounded).
        with self._made:
            deadline = time.monotonic() + 10
            while self._filling and self._pid == os.getpid() and time.monotonic() < deadline:
                self._made.wait(0.05)

    def _after_fork_in_child(self) -> None:
        # The lock may have been held by a thread of the parent that does not exist here.
        self._lock = threading.Lock()
        self._made = threading.Condition(self._lock)
        with self._lock:
            self._forget_parents_locked()


_WARMED = False  # _core._warm() ran in this process (on the spare-making thread)
_ABANDONED: list = []  # databases inherited from a parent process, never used nor closed
# Every database made in this process, so that a forked child can keep its parent's ones from
# ever being closed: closing one waits for worker threads that do not exist in the child (it
# crashed or hung the child), and a child closes one as soon as it drops the last reference to a
# parent's Lake, or its garbage collector frees a Lake the parent had not collected yet.
_MADE: "weakref.WeakSet[duckdb.DuckDBPyConnection]" = weakref.WeakSet()


def _connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    _MADE.add(con)
    return con


def _keep_parents_databases() -> None:
    global _MADE
    _ABANDONED.extend(_MADE)
    _MADE = weakref.WeakSet()


_SPARES = _Spares()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_keep_parents_databases)
    os.register_at_fork(after_in_child=_SPARES._after_fork_in_child)
    os.register_at_fork(before=_SPARES._before_fork)


def warm() -> None:
    """Has a spare database made in the background (a Lake calls it when it opens)."""
    _SPARES.fill()


def lake_directory(location: str) -> Optional[str]:
    """The local folder of a file:// lake, with a trailing slash; None for other stores."""
    if not location.startswith("file://"):
        return None
    return unquote(location[len("file://"):]).rstrip("/") + "/"


def table_directory(root: str, namespace: str, name: str) -> str:
    """The data folder of table `namespace.name` in the lake folder `root`."""
    return f"{root}{namespace}/{name}/data/"


def readable(root: str, paths: Iterable[str]) -> Tuple[Set[str], Set[str]]:
    """(folders, files) DuckDB must be allowed to read for data files at `paths` of the lake folder
    `root`: a file's folder under its table, or the file alone when it lies in the log, the index
    or another hidden folder (a log may name any file there). Paths outside the lake, or that
    climb out of it, are left out: they stay unreadable, and the query says so."""
    directories, files = set(), set()
    for path in paths:
        if not path.startswith(root):
            continue  # outside the lake: stays unreadable, and the query says so
        parts = path[len(root):].split("/")
        if ".." in parts or "." in parts:
            continue  # the core confines log paths (data_path.h); never admit one that climbs
        # <ns>/<table>/<folder>/.../<file>: admit the folder, unless it is the log, the
        # index or another hidden one (a log may name any file there; admit that file alone).
        if len(parts) > 3 and not parts[2].startswith(("_", ".")):
            directories.add(f"{root}{parts[0]}/{parts[1]}/{parts[2]}/")
        else:
            files.add(path)
    return directories, files
