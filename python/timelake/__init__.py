"""timelake: an embedded time-series lakehouse.

Tables are Delta Lake tables on a local disk (or, later, object storage); appends are idempotent
Arrow batches; ``Lake.sql`` answers SQL (DuckDB, with ``time_bucket``); ``Lake.latest`` returns the
newest row of every series. See README.md and docs/ for the contract this package implements.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import pyarrow as pa  # loads the Arrow C++ libraries that _core links against

from . import _core
from ._sql import _Capsule, _Catalog, run_latest, run_sql

__all__ = ["Lake", "Table", "__version__"]
__version__ = _core.__version__


def _schema_from_capsule(capsule: Any) -> pa.Schema:
    return pa.schema(_Capsule(capsule))


def _as_schema(schema: Any) -> pa.Schema:
    if isinstance(schema, pa.Schema):
        return schema
    inner = getattr(schema, "schema", None)
    if isinstance(inner, pa.Schema):
        return inner
    if hasattr(schema, "__arrow_c_schema__"):
        return pa.schema(schema)
    if hasattr(schema, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(schema).schema
    raise ValueError(
        f"schema must be a pyarrow.Schema or an object with a .schema (got {type(schema).__name__})"
    )


def _as_reader(data: Any) -> pa.RecordBatchReader:
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return data.to_reader()
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    if hasattr(data, "__arrow_c_array__"):
        batch = pa.record_batch(data)
        return pa.RecordBatchReader.from_batches(batch.schema, [batch])
    module = type(data).__module__.split(".")[0]
    if module == "pandas":
        table = pa.Table.from_pandas(data, preserve_index=False)
        return table.to_reader()
    raise ValueError(
        "append() takes a pyarrow RecordBatch, Table or RecordBatchReader, a polars DataFrame, "
        f"or any object with __arrow_c_stream__ (got {type(data).__name__})"
    )


def _optional_str(value: Any, what: str) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{what} must be a string or None, got {type(value).__name__}")


def _string_map(values: Optional[Mapping[str, Any]], what: str) -> dict:
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ValueError(f"{what} must be a dict of str to str, got {type(values).__name__}")
    out = {}
    for key, value in values.items():
        if not isinstance(key, str):
            raise ValueError(f"{what} keys must be strings, got {key!r}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (int, float)):
            value = str(value)
        elif not isinstance(value, str):
            raise ValueError(f"{what}[{key!r}] must be a string, got {type(value).__name__}")
        out[key] = value
    return out


class Table:
    """A handle on one table at a snapshot. Methods that commit advance it to the new version."""

    __slots__ = ("_lake", "_core")

    def __init__(self, lake: "Lake", core: Any) -> None:
        self._lake = lake
        self._core = core

    @property
    def name(self) -> str:
        """The qualified name, ``namespace.table``."""
        return self._core.name

    @property
    def location(self) -> str:
        """URL of the table's folder."""
        return self._core.location

    @property
    def version(self) -> int:
        """The Delta version this handle reads."""
        return self._core.version

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema declared at create_table."""
        return _schema_from_capsule(self._core.schema_capsule())

    def append(self, data: Any, batch_id: Optional[str] = None, maintain: Optional[bool] = None) -> dict:
        """Appends rows; returns rows, files, bytes, version, commit_ms, attempts, duplicate."""
        batch_id = _optional_str(batch_id, "batch_id")
        if maintain is not None and not isinstance(maintain, bool):
            raise ValueError(f"maintain must be True, False or None, got {maintain!r}")
        reader = _as_reader(data)
        return self._core.append(reader.__arrow_c_stream__(), batch_id, maintain)

    def maintain(self, compact: bool = True, retention: bool = True, expire: bool = True) -> dict:
        """Compacts, applies retention and expires old snapshots; returns what it did."""
        return self._core.maintain(bool(compact), bool(retention), bool(expire))

    def info(self) -> dict:
        """Contract, size, snapshots, manifests and last-value-index figures."""
        return self._core.info()

    def refresh(self) -> None:
        """Advances this handle to the latest committed version."""
        self._core.refresh()

    def __repr__(self) -> str:
        return f"timelake.Table({self.name!r}, version={self.version})"


class Lake:
    """A warehouse of tables under one location (a local path or file:// URL)."""

    def __init__(self, location: Union[str, "os.PathLike[str]"], storage_options: Optional[Mapping[str, Any]] = None) -> None:
        if isinstance(location, os.PathLike):
            location = os.fspath(location)
        if not isinstance(location, str):
            raise ValueError(f"location must be a path or URL string, got {type(location).__name__}")
        options = _string_map(storage_options, "storage_options")
        self._core = _core.Lake.open(location, options)
        self._handles: dict = {}
        self._local = threading.local()

    @property
    def location(self) -> str:
        """The normalized URL of the lake (file:///abs/path for local lakes)."""
        return self._core.location

    def create_table(
        self,
        name: str,
        schema: Any,
        time_column: Optional[str] = None,
        series_key: Optional[Union[str, Sequence[str]]] = None,
        chunk: Optional[str] = None,
        retention: Optional[str] = None,
        dedup: Optional[str] = None,
        properties: Optional[Mapping[str, Any]] = None,
    ) -> Table:
        """Creates a table and returns it at version 0."""
        if not isinstance(name, str):
            raise ValueError(f"table name must be a string, got {type(name).__name__}")
        arrow_schema = _as_schema(schema)
        if isinstance(series_key, str):
            series_key = [series_key]
        elif series_key is not None:
            series_key = list(series_key)
            if not all(isinstance(k, str) for k in series_key):
                raise ValueError(f"series_key must be a column name or a list of names, got {series_key!r}")
        core = self._core.create_table(
            name,
            arrow_schema.__arrow_c_schema__(),
            _optional_str(time_column, "time_column"),
            series_key,
            _optional_str(chunk, "chunk"),
            _optional_str(retention, "retention"),
            _optional_str(dedup, "dedup"),
            _string_map(properties, "properties"),
        )
        return Table(self, core)

    def table(self, name: str) -> Table:
        """The table at its latest version; KeyError if it does not exist."""
        if not isinstance(name, str):
            raise ValueError(f"table name must be a string, got {type(name).__name__}")
        return Table(self, self._core.table(name))

    def tables(self) -> list:
        """Every table as ``namespace.table``, sorted."""
        return list(self._core.tables())

    def drop_table(self, name: str) -> None:
        """Deletes the table and all its files; KeyError if it does not exist."""
        if not isinstance(name, str):
            raise ValueError(f"table name must be a string, got {type(name).__name__}")
        self._core.drop_table(name)
        self._handles.pop(self._qualify(name).lower(), None)
        catalog = getattr(self._local, "catalog", None)
        if catalog is not None:
            catalog.forget(self._qualify(name))

    def sql(self, query: str, namespace: str = "default") -> pa.Table:
        """Runs a read-only SQL query (DuckDB dialect, UTC) over the lake's tables."""
        return run_sql(self, query, namespace)

    def latest(self, table: Union[str, Table]) -> pa.Table:
        """The newest row of every series of a time-series table."""
        if isinstance(table, Table):
            table = table.name
        if not isinstance(table, str):
            raise ValueError(f"latest() takes a table name or Table, got {type(table).__name__}")
        return run_latest(self, table)

    # -- internals used by _sql -------------------------------------------------------------

    @staticmethod
    def _qualify(name: str) -> str:
        return name if "." in name else f"default.{name}"

    def _catalog(self) -> _Catalog:
        """This thread's DuckDB catalog (a DuckDB connection must not be shared by threads)."""
        catalog = getattr(self._local, "catalog", None)
        if catalog is None:
            catalog = _Catalog(self)
            self._local.catalog = catalog
        return catalog

    def _snapshot(self, name: str) -> Any:
        """A core handle for `name` at its latest version (cached, refreshed incrementally)."""
        qualified = self._qualify(name).lower()  # names are case-insensitive
        handle = self._handles.get(qualified)
        if handle is not None:
            try:
                handle.refresh()
                return handle
            except KeyError:
                # Dropped (and maybe created again) since this handle was opened: open anew.
                self._handles.pop(qualified, None)
            except Exception:
                self._handles.pop(qualified, None)
                raise
        handle = self._core.table(qualified)
        self._handles[qualified] = handle
        return handle

    def __repr__(self) -> str:
        return f"timelake.Lake({self.location!r})"
