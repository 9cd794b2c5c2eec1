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
import uuid
from typing import Iterable, Optional, Set, Tuple
from urllib.parse import unquote

import duckdb

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
    con = duckdb.connect(":memory:")
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
