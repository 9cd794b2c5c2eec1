"""Fixtures for the timelake Python tests: `lake` is a fresh warehouse in a temporary folder;
`s3_server`, `s3_bucket` and `fault_proxy` give an S3 endpoint (moto), a fresh bucket on it and a
fault-injecting proxy in front of it (docs/testing.md)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa  # noqa: F401  (pyarrow before the extension: shared Arrow libraries)
import pytest

import timelake
from fault_proxy import FaultProxy
from helpers import IOT_SCHEMA
from s3_server import S3Server


@pytest.fixture
def lake_path(tmp_path) -> Path:
    return tmp_path / "lake"


@pytest.fixture
def lake(lake_path):
    return timelake.Lake(str(lake_path))


@pytest.fixture
def readings(lake):
    """default.readings: IoT schema, series key device_id, default chunk (day), no dedup."""
    return lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])


@pytest.fixture(scope="session")
def s3_server():
    """The S3 server of the session: the one TIMELAKE_TEST_S3_ENDPOINT names (scripts/test.sh
    starts one), else a moto_server started on first use and stopped when the session ends."""
    server = S3Server.from_env_or_start()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server) -> str:
    """A fresh, empty bucket on `s3_server`: its name."""
    return s3_server.create_bucket()


@pytest.fixture
def fault_proxy(s3_server):
    """A FaultProxy in front of `s3_server`, with no faults armed; stopped after the test."""
    with FaultProxy(s3_server.endpoint) as proxy:
        yield proxy
