"""Fixtures for the timelake Python tests: `lake` is a fresh warehouse in a temporary folder;
`s3_server`, `s3_bucket` and `fault_proxy` give an S3 endpoint (moto), a fresh bucket on it and a
fault-injecting proxy in front of it; `azure_server`/`azure_container` (Azurite) and
`gcs_server`/`gcs_bucket` (fake-gcs-server) do the same for Azure Blob and GCS; `cloud`,
`cloud_bucket` and `cloud_proxy` are any of the three (cloud.py), for the test_cloud_*.py modules
(docs/testing.md)."""

from __future__ import annotations

import atexit
import inspect
import os
import shutil
import tempfile
import re
from pathlib import Path

import pyarrow as pa  # noqa: F401  (pyarrow before the extension: shared Arrow libraries)
import pytest

import timelake

# SQL over S3 lakes copies data files into a local cache (docs/object-stores.md); the tests keep
# theirs in a folder of their own instead of the user's ~/.cache.
_CACHE = tempfile.mkdtemp(prefix="timelake-test-cache-")
os.environ.setdefault("TIMELAKE_CACHE_DIR", _CACHE)
atexit.register(shutil.rmtree, _CACHE, True)
from azure_server import AzureServer
from cloud import CLOUD_KINDS, make_cloud
from fault_proxy import FaultProxy
from gcs_server import GcsServer
from helpers import IOT_SCHEMA
from s3_server import S3Server


@pytest.fixture
def lake_path(tmp_path) -> Path:
    return tmp_path / "lake"


# Where `lake` lives. Tests that use `lake` run once per store kind: "local" (a temporary folder),
# "s3" (a fresh bucket on the session's moto), "azure" (a fresh container on its Azurite) and "gcs"
# (a fresh bucket on its fake-gcs-server), unless they also use `lake_path` (they look at or
# damage files on the local disk) or their module opts out with
# `pytestmark = pytest.mark.local_only`. TIMELAKE_TEST_STORES (comma-separated, e.g. "local,s3")
# narrows the kinds for a quicker run; every kind runs when it is unset.
STORES_VARIABLE = "TIMELAKE_TEST_STORES"
ALL_STORE_KINDS = ("local", "s3", "azure", "gcs")


def _store_kinds() -> tuple[str, ...]:
    named = [k.strip().lower() for k in os.environ.get(STORES_VARIABLE, "").split(",")]
    named = [k for k in named if k]
    if not named:
        return ALL_STORE_KINDS
    unknown = sorted(set(named) - set(ALL_STORE_KINDS))
    if unknown:
        raise pytest.UsageError(
            f"{STORES_VARIABLE} names unknown store kinds {unknown}; the kinds are {list(ALL_STORE_KINDS)}")
    return tuple(k for k in ALL_STORE_KINDS if k in named)


STORE_KINDS = _store_kinds()


def pytest_configure(config):
    config.addinivalue_line("markers", "local_only: the module's `lake` tests run on a local lake only")
    config.addinivalue_line("markers", "spark: runs against a live Spark (pyspark + delta-spark); needs Java")


# Helpers (helpers.py) and fixtures that reach into a lake's files on the local disk: a test whose
# code names one of them runs on a local lake only.
_LOCAL_FILE_ACCESS = re.compile(
    r"\b(table_dir|url_to_path|lake_path|data_files|all_files|log_path|log_actions|commit_versions|"
    r"delta_read|delta_write|_run_child|tmp_path)\b")


def _reaches_local_files(function, module, depth: int = 2) -> bool:
    """True if `function`'s code, or that of a function of its module it calls (`depth` levels
    deep), names a local-file helper."""
    source = inspect.getsource(function)
    if _LOCAL_FILE_ACCESS.search(source):
        return True
    if depth == 0:
        return False
    for name in set(re.findall(r"\b([A-Za-z_]\w*)\(", source)):
        called = getattr(module, name, None)
        if inspect.isfunction(called) and called is not function and called.__module__ == module.__name__:
            if _reaches_local_files(called, module, depth - 1):
                return True
    return False


def pytest_generate_tests(metafunc):
    if "lake_store" not in metafunc.fixturenames:
        return
    local_only = (
        "lake_path" in metafunc.fixturenames
        or metafunc.definition.get_closest_marker("local_only") is not None
        or _reaches_local_files(metafunc.function, metafunc.module)
    )
    metafunc.parametrize("lake_store", ("local",) if local_only else STORE_KINDS)


class LakeLocation:
    """Where a test's lake lives: its URL and storage_options; `open()` opens it anew (another
    handle on the same lake, as another process would)."""

    def __init__(self, url: str, storage_options=None) -> None:
        self.url = url
        self.storage_options = storage_options

    def open(self) -> "timelake.Lake":
        return timelake.Lake(self.url, storage_options=self.storage_options)


@pytest.fixture
def lake_location(lake_store, request) -> LakeLocation:
    if lake_store == "s3":
        server = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        return LakeLocation(f"s3://{bucket}/lake", server.storage_options())
    if lake_store == "azure":
        server = request.getfixturevalue("azure_server")
        container = request.getfixturevalue("azure_container")
        return LakeLocation(f"az://{container}/lake", server.storage_options())
    if lake_store == "gcs":
        server = request.getfixturevalue("gcs_server")
        bucket = request.getfixturevalue("gcs_bucket")
        return LakeLocation(f"gs://{bucket}/lake", server.storage_options())
    return LakeLocation(str(request.getfixturevalue("lake_path")))


@pytest.fixture
def lake(lake_location):
    return lake_location.open()


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


@pytest.fixture(scope="session")
def azure_server():
    """The Azure Blob server of the session: the one TIMELAKE_TEST_AZURE_ENDPOINT names
    (scripts/test.sh starts one), else an Azurite started on first use and stopped when the
    session ends."""
    server = AzureServer.from_env_or_start()
    yield server
    server.stop()


@pytest.fixture
def azure_container(azure_server) -> str:
    """A fresh, empty container on `azure_server`: its name."""
    return azure_server.create_container()


@pytest.fixture(scope="session")
def gcs_server():
    """The GCS server of the session: the one TIMELAKE_TEST_GCS_ENDPOINT names (scripts/test.sh
    starts one), else a fake-gcs-server started on first use and stopped when the session ends."""
    server = GcsServer.from_env_or_start()
    yield server
    server.stop()


@pytest.fixture
def gcs_bucket(gcs_server) -> str:
    """A fresh, empty bucket on `gcs_server`: its name."""
    return gcs_server.create_bucket()


# The clouds of the test_cloud_*.py modules: every one of them (TIMELAKE_TEST_STORES narrows them
# too), each a fresh bucket (an Azure container) on the session's server.
@pytest.fixture(params=[k for k in CLOUD_KINDS if k in STORE_KINDS])
def cloud(request):
    """A `cloud.Cloud` for the session's server of one kind (s3, azure, gcs)."""
    return make_cloud(request.param, request.getfixturevalue(f"{request.param}_server"))


@pytest.fixture
def cloud_bucket(cloud) -> str:
    """A fresh, empty bucket (container) on `cloud`: its name."""
    return cloud.new_bucket()


@pytest.fixture
def cloud_proxy(cloud):
    """A FaultProxy in front of `cloud`'s server, with no faults armed; stopped after the test."""
    with FaultProxy(cloud.server.endpoint) as proxy:
        yield proxy
