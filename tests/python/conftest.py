"""Fixtures for the timelake Python tests: `lake` is a fresh warehouse in a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa  # noqa: F401  (pyarrow before the extension: shared Arrow libraries)
import pytest

import timelake
from helpers import IOT_SCHEMA


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
