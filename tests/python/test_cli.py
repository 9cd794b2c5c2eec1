"""The `timelake` command, run as a real process (python -m timelake)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import IOT_SCHEMA, T0, iot_series, iot_table


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "timelake", *args], capture_output=True, text=True, timeout=120)


def test_cli_lists_tables_and_prints_info(lake, lake_path):
    t = lake.create_table("iot.readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(T0, 3)))
    out = run("tables", str(lake_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["iot.readings"]
    info = json.loads(run("info", str(lake_path), "iot.readings").stdout)
    assert info["size"]["rows"] == 9
    assert info["contract"]["series_key"] == ["device_id"]


def test_cli_runs_sql_and_latest(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(T0, 3)))
    out = run("sql", str(lake_path), "SELECT device_id, count(*) AS n FROM readings GROUP BY 1 ORDER BY 1")
    assert out.returncode == 0, out.stderr
    assert "(3 rows)" in out.stdout and "a " in out.stdout
    out = run("latest", str(lake_path), "readings")
    assert out.returncode == 0, out.stderr
    assert "(3 rows)" in out.stdout


def test_cli_maintain_reports_what_it_did(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    for i in range(3):
        t.append(iot_table(iot_series(T0, 1, devices=(f"d{i}",))))
    out = run("maintain", str(lake_path), "readings")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["files_rewritten"] == 3


def test_cli_reports_a_missing_table_as_an_error(lake, lake_path):
    out = run("info", str(lake_path), "nope")
    assert out.returncode == 1
    assert "KeyError" in out.stderr and "nope" in out.stderr
