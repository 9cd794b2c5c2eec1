"""The snippets of docs/interop.md for delta-rs, Polars and DuckDB, and what those engines see of a
dedup table before and after maintain(). Spark's are in test_spark.py.

Each engine runs in a child process (delta-rs can abort the interpreter at exit, see helpers.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from helpers import IOT_SCHEMA, NO_BACKGROUND, T0, iot_table

pytestmark = pytest.mark.local_only

ENGINES = textwrap.dedent(
    r"""
    import json, os, sys
    import duckdb, polars as pl
    from deltalake import DeltaTable
    path = sys.argv[1]
    polars_rows = pl.read_delta(path).select("device_id", "temp").sort("device_id", "temp").rows()
    lazy = pl.scan_delta(path).filter(pl.col("device_id") == "a").collect().height
    readings = DeltaTable(path).to_pyarrow_dataset()
    duck = duckdb.sql("SELECT device_id, count(*) FROM readings GROUP BY 1 ORDER BY 1").fetchall()
    print(json.dumps({"polars": polars_rows, "lazy_a": lazy, "duckdb": duck}), flush=True)
    os._exit(0)
    """
)


def _engines(path):
    proc = subprocess.run([sys.executable, "-c", ENGINES, str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_polars_and_duckdb_read_what_timelake_reads(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], properties=NO_BACKGROUND)
    t.append(iot_table([(T0, "a", 1.0), (T0, "b", 2.0)]))
    t.append(iot_table([(T0.replace(hour=1), "a", 3.0)]))
    seen = _engines(lake_path / "default" / "readings")
    assert seen["polars"] == [["a", 1.0], ["a", 3.0], ["b", 2.0]]
    assert seen["lazy_a"] == 2
    assert seen["duckdb"] == [["a", 2], ["b", 1]]


def test_other_engines_see_resent_rows_of_a_dedup_table_until_maintain(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], dedup="last", properties=NO_BACKGROUND)
    t.append(iot_table([(T0, "a", 1.0), (T0, "b", 2.0)]))
    t.append(iot_table([(T0, "a", 9.0)]))  # the same (series, time) again: the newer one wins
    assert lake.sql("SELECT device_id, temp FROM readings ORDER BY 1").to_pylist() == [
        {"device_id": "a", "temp": 9.0}, {"device_id": "b", "temp": 2.0}]
    before = _engines(lake_path / "default" / "readings")
    assert before["polars"] == [["a", 1.0], ["a", 9.0], ["b", 2.0]]  # both copies, as documented
    t.maintain()
    after = _engines(lake_path / "default" / "readings")
    assert after["polars"] == [["a", 9.0], ["b", 2.0]]
    assert after["duckdb"] == [["a", 1], ["b", 1]]
