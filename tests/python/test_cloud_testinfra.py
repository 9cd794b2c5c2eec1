"""The Azure and GCS test infrastructure itself: Azurite (azure_server.py) and fake-gcs-server
(gcs_server.py), driven with http.client and delta-rs, never with timelake.

The Azure and GCS stores' tests trust that these servers start and stop as promised, that each
container or bucket a test gets is fresh and its own, and that the emulators behave like the
services where the stores depend on it (conditional creates, signatures); these tests check
exactly that, and pin what delta-rs can and cannot do against each emulator."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pytest

import emulator
from azure_server import AzureError, AzureServer
from gcs_server import GcsError, GcsServer
from s3_server import answers_http

HERE = Path(__file__).parent

SERVERS = {"azure": AzureServer, "gcs": GcsServer}


@pytest.fixture(params=sorted(SERVERS))
def kind(request) -> str:
    return request.param


@pytest.fixture
def session_server(kind, request):
    """The session's server of `kind` (azure_server or gcs_server)."""
    return request.getfixturevalue(f"{kind}_server")


def create(server, name: str | None = None) -> str:
    """A fresh container (Azure) or bucket (GCS)."""
    return server.create_container(name) if kind_of(server) == "azure" else server.create_bucket(name)


def put(server, where: str, name: str, data: bytes) -> None:
    if kind_of(server) == "azure":
        server.put_blob(where, name, data)
    else:
        server.put_object(where, name, data)


def get(server, where: str, name: str) -> bytes:
    return server.get_blob(where, name) if kind_of(server) == "azure" else server.get_object(where, name)


def listing(server, where: str, prefix: str = "") -> list[str]:
    if kind_of(server) == "azure":
        return server.list_blobs(where, prefix)
    return server.list_objects(where, prefix)


def kind_of(server) -> str:
    return "azure" if isinstance(server, AzureServer) else "gcs"


def wait_until(condition, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


# -- lifecycle -------------------------------------------------------------------------------


def test_started_server_answers_until_stop_ends_it(kind):
    server = SERVERS[kind].start()
    try:
        assert server.owned
        where = create(server)
        put(server, where, "k", b"hello")
        assert get(server, where, "k") == b"hello"
    finally:
        server.stop()
    assert server.process is None
    assert not answers_http(server.endpoint)


def test_endpoint_variable_names_a_server_that_stop_leaves_running(kind, session_server, monkeypatch):
    cls = SERVERS[kind]
    monkeypatch.setenv(cls.ENDPOINT_VARIABLE, session_server.endpoint + "/")
    named = cls.from_env_or_start()
    assert named.endpoint == session_server.endpoint
    assert not named.owned
    named.stop()
    # (Polled: one probe with a 1 s timeout can meet a busy emulator late in a long run.)
    assert wait_until(lambda: cls.is_ready(session_server.endpoint), 30)


def test_unset_endpoint_variable_names_no_server(kind, monkeypatch):
    cls = SERVERS[kind]
    monkeypatch.delenv(cls.ENDPOINT_VARIABLE, raising=False)
    assert cls.from_env() is None


def test_start_retries_on_a_new_port_when_the_chosen_one_is_taken(kind, monkeypatch):
    """A port taken between choosing and binding: the emulator exits, start tries another."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    ports = iter([holder.getsockname()[1]])
    real_free_port = emulator.free_port
    monkeypatch.setattr(emulator, "free_port", lambda host: next(ports, None) or real_free_port(host))
    try:
        with SERVERS[kind].start() as server:
            assert server.endpoint != f"http://127.0.0.1:{holder.getsockname()[1]}"
            create(server)
    finally:
        holder.close()


def test_a_server_holding_the_port_is_not_taken_for_the_emulator(kind):
    """Readiness means this emulator answers, not just anything on the port."""
    class Other(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        do_HEAD = do_GET

        def log_message(self, *args):
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        assert not SERVERS[kind].is_ready(f"http://127.0.0.1:{other.server_address[1]}")
    finally:
        other.shutdown()
        other.server_close()


def test_missing_emulator_says_to_run_setup(kind, monkeypatch, tmp_path):
    monkeypatch.setattr(emulator, "TOOLS", tmp_path)
    with pytest.raises(RuntimeError, match=r"scripts/setup\.sh"):
        SERVERS[kind].start()


def test_program_writes_the_endpoint_file_and_stops_on_sigterm(kind, tmp_path):
    endpoint_file = tmp_path / "endpoint"
    program = subprocess.Popen(
        [sys.executable, str(HERE / f"{kind}_server.py"), "--endpoint-file", str(endpoint_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: endpoint_file.exists() or program.poll() is not None, 60)
        assert program.poll() is None, program.stderr.read()
        endpoint = endpoint_file.read_text().strip()
        assert wait_until(lambda: SERVERS[kind].is_ready(endpoint), 30)
        program.send_signal(signal.SIGTERM)
        out, _ = program.communicate(timeout=30)
        assert program.returncode == 0
        assert f"{SERVERS[kind].ENDPOINT_VARIABLE}={endpoint}" in out
        assert not answers_http(endpoint)
    finally:
        if program.poll() is None:
            program.kill()
            program.wait()


def test_server_dies_with_the_process_that_started_it(kind, tmp_path):
    """A test run killed with SIGKILL leaves no emulator behind (parent-death signal)."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(HERE)!r})
        from {kind}_server import {SERVERS[kind].__name__} as Server
        server = Server.start()
        print(server.endpoint, server.process.pid, flush=True)
        sys.stdin.read()
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        endpoint, pid = parent.stdout.readline().split()
        assert wait_until(lambda: SERVERS[kind].is_ready(endpoint), 30)
        parent.kill()
        parent.wait()
        assert wait_until(lambda: not _alive(int(pid)), 15), f"emulator {pid} outlived its parent"
        assert not answers_http(endpoint)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead: its parent (this test's child) is gone, so init reaps it shortly.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# -- containers and buckets ------------------------------------------------------------------


def test_each_container_or_bucket_is_fresh_and_isolated(session_server):
    first, second = create(session_server), create(session_server)
    assert first != second
    assert listing(session_server, first) == listing(session_server, second) == []
    put(session_server, first, "lake/_delta_log/00000000000000000000.json", b"{}")
    assert listing(session_server, first) == ["lake/_delta_log/00000000000000000000.json"]
    assert listing(session_server, second) == []


def test_fixtures_give_fresh_names(azure_container, gcs_bucket, azure_server, gcs_server):
    assert azure_server.list_blobs(azure_container) == []
    assert gcs_server.list_objects(gcs_bucket) == []


def test_creating_an_existing_container_or_bucket_is_refused(session_server):
    name = create(session_server)
    error = AzureError if kind_of(session_server) == "azure" else GcsError
    with pytest.raises(error) as raised:
        create(session_server, name)
    assert raised.value.status == 409


def test_names_with_slashes_and_spaces_round_trip(session_server):
    where = create(session_server)
    names = ["a/b c.txt", "a/ü%2F+?#.bin", "z"]
    for i, name in enumerate(names):
        put(session_server, where, name, bytes([i]) * 3)
    assert listing(session_server, where) == sorted(names)
    assert listing(session_server, where, "a/") == sorted(names[:2])
    assert [get(session_server, where, n) for n in names] == [b"\0" * 3, b"\1" * 3, b"\2" * 3]


def test_storage_options_are_the_delta_rs_keys(azure_server, gcs_server):
    assert azure_server.storage_options() == {
        "azure_storage_account_name": "devstoreaccount1",
        "azure_storage_account_key": azure_server.account_key,
        "azure_storage_endpoint": f"{azure_server.endpoint}/devstoreaccount1",
        "allow_http": "true",
    }
    assert gcs_server.storage_options() == {
        "google_base_url": gcs_server.endpoint,
        "google_skip_signature": "true",
        "allow_http": "true",
    }
    proxy = "http://127.0.0.1:1"
    assert azure_server.storage_options(proxy)["azure_storage_endpoint"] == f"{proxy}/devstoreaccount1"
    assert gcs_server.storage_options(proxy)["google_base_url"] == proxy


# -- emulator behaviours the stores rely on --------------------------------------------------


def test_azurite_checks_shared_key_signatures(azure_server, azure_container):
    """Unlike moto, Azurite verifies signatures: a wrong key and an unsigned request are 403."""
    azure_server.put_blob(azure_container, "k", b"hello")
    wrong = AzureServer(azure_server.endpoint)
    wrong.account_key = "A" * 86 + "=="
    with pytest.raises(AzureError) as raised:
        wrong.get_blob(azure_container, "k")
    assert raised.value.status == 403
    url = urlparse(azure_server.endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.request("GET", f"/devstoreaccount1/{azure_container}/k", headers={"x-ms-version": "2023-11-03"})
    response = conn.getresponse()
    assert (response.status, response.getheader("x-ms-error-code")) == (403, "AuthorizationFailure")
    conn.close()


def test_azurite_refuses_a_second_create_with_if_none_match(azure_server, azure_container):
    headers = {"x-ms-blob-type": "BlockBlob", "If-None-Match": "*"}
    azure_server.request("PUT", f"/{azure_container}/v/0", headers=headers, body=b"first",
                         expect=(201,))
    with pytest.raises(AzureError) as raised:
        azure_server.request("PUT", f"/{azure_container}/v/0", headers=headers, body=b"second",
                             expect=(201,))
    assert raised.value.status == 409  # BlobAlreadyExists (S3 says 412)
    assert azure_server.get_blob(azure_container, "v/0") == b"first"


def test_fake_gcs_refuses_a_second_json_upload_with_if_generation_match_0(gcs_server, gcs_bucket):
    target = f"/upload/storage/v1/b/{gcs_bucket}/o?uploadType=media&name=v%2F0&ifGenerationMatch=0"
    gcs_server.request("POST", target, b"first")
    with pytest.raises(GcsError) as raised:
        gcs_server.request("POST", target, b"second")
    assert raised.value.status == 412
    assert gcs_server.get_object(gcs_bucket, "v/0") == b"first"


def test_fake_gcs_has_no_plain_xml_api_upload(gcs_server, gcs_bucket):
    """fake-gcs-server 1.56.1 routes `PUT /<bucket>/<object>` (the XML API, what object_store
    and delta-rs use) to its JSON upload handler, which wants `uploadType`: 400. Uploads that
    must work against it go through the JSON API (`/upload/storage/v1/...`). When this test
    fails, the emulator learned XML uploads: update docs/testing.md."""
    with pytest.raises(GcsError) as raised:
        gcs_server.request("PUT", f"/{gcs_bucket}/plain", b"data",
                           {"x-goog-if-generation-match": "0"})
    assert raised.value.status == 400
    assert "invalid uploadType" in str(raised.value)
    # XML API reads work (with Host equal to the server's -public-host, as here).
    gcs_server.put_object(gcs_bucket, "a/b", b"data")
    assert gcs_server.request("GET", f"/{gcs_bucket}/a/b") == b"data"


# -- delta-rs against the emulators ----------------------------------------------------------


TABLE = pa.table({"x": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b", "c"]})


def test_delta_rs_writes_appends_and_reads_a_table_on_azurite(azure_server, azure_container):
    deltalake = pytest.importorskip("deltalake")
    url = f"az://{azure_container}/lake/t"
    options = azure_server.storage_options()
    deltalake.write_deltalake(url, TABLE, storage_options=options)
    deltalake.write_deltalake(url, TABLE, mode="append", storage_options=options)
    table = deltalake.DeltaTable(url, storage_options=options)
    assert table.version() == 1
    assert table.to_pyarrow_table().sort_by("x").column("x").to_pylist() == [1, 1, 2, 2, 3, 3]
    blobs = azure_server.list_blobs(azure_container, "lake/t/")
    assert "lake/t/_delta_log/00000000000000000000.json" in blobs
    assert "lake/t/_delta_log/00000000000000000001.json" in blobs
    assert sum(b.endswith(".parquet") for b in blobs) == 2


def test_delta_rs_reads_a_table_on_fake_gcs(azure_server, azure_container, gcs_server, gcs_bucket):
    """delta-rs cannot write to fake-gcs-server (see docs/testing.md), so the table is written
    on Azurite and its objects copied into the bucket."""
    deltalake = pytest.importorskip("deltalake")
    deltalake.write_deltalake(f"az://{azure_container}/t", TABLE,
                              storage_options=azure_server.storage_options())
    for name in azure_server.list_blobs(azure_container):
        gcs_server.put_object(gcs_bucket, name, azure_server.get_blob(azure_container, name))
    table = deltalake.DeltaTable(f"gs://{gcs_bucket}/t", storage_options=gcs_server.storage_options())
    assert table.version() == 0
    assert table.to_pyarrow_table().sort_by("x").to_pydict() == TABLE.to_pydict()
