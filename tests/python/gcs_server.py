"""A Google Cloud Storage server for tests and benchmarks: fake-gcs-server, run as a child process
on 127.0.0.1 from `.tools/bin` (scripts/setup.sh installs it).

Nothing here uses timelake: the GCS store is tested against this, so this must not depend on it.
Standard library only (the JSON API over http.client; fake-gcs-server checks no credentials).

    server = GcsServer.from_env_or_start()   # the server in TIMELAKE_TEST_GCS_ENDPOINT, or a new one
    bucket = server.create_bucket()          # a fresh, empty bucket
    lake = timelake.Lake(f"gs://{bucket}/lake", storage_options=server.storage_options())
    server.stop()                            # stops the process if this object started it

`GcsServer` is also a context manager. In pytest use the `gcs_server` and `gcs_bucket` fixtures
(conftest.py). As a program it keeps a server up until it gets SIGTERM or SIGINT:

    python tests/python/gcs_server.py [--port N] [--endpoint-file FILE]

prints `TIMELAKE_TEST_GCS_ENDPOINT=http://127.0.0.1:PORT` once the server answers, and also stops
when the process that started it dies.

The endpoint is the base URL of both APIs (`/storage/v1/...` JSON, `/upload/storage/v1/...`
uploads, `/<bucket>/<object>` XML). The server keeps objects in memory and accepts any request,
signed or not.
"""

from __future__ import annotations

import http.client
import json
import sys
import uuid
from urllib.parse import quote, urlencode, urlparse

from emulator import EmulatorServer, tool

ENDPOINT_VARIABLE = "TIMELAKE_TEST_GCS_ENDPOINT"
PROJECT = "test"


class GcsError(RuntimeError):
    """A request fake-gcs-server answered with an unexpected status."""

    def __init__(self, method: str, target: str, status: int, body: bytes):
        self.status = status
        super().__init__(f"{method} {target}: HTTP {status}: {body[:500].decode('utf-8', 'replace')}")


class GcsServer(EmulatorServer):
    """A GCS endpoint for tests: a fake-gcs-server this object started, or one named by
    TIMELAKE_TEST_GCS_ENDPOINT. `stop`, `owned`, `start`, `from_env*`: see EmulatorServer."""

    NAME = "fake-gcs-server"
    ENDPOINT_VARIABLE = ENDPOINT_VARIABLE
    START_TIMEOUT_S = 30.0  # it answers within a second

    @classmethod
    def command(cls, host: str, port: int) -> list[str]:
        return [str(tool("bin/fake-gcs-server", "fake-gcs-server")),
                "-scheme", "http", "-host", host, "-port", str(port),
                "-backend", "memory",                 # nothing on disk; a stopped server forgets all
                "-public-host", f"{host}:{port}",     # URLs it hands out point back at it
                "-log-level", "info"]                 # one line per request, for failures

    @classmethod
    def is_ready(cls, endpoint: str) -> bool:
        try:
            status, body = _send(endpoint, "GET", f"/storage/v1/b?project={PROJECT}", timeout_s=1.0)
            return status == 200 and json.loads(body).get("kind") == "storage#buckets"
        except (OSError, ValueError):
            return False

    # -- clients -----------------------------------------------------------------------------

    def storage_options(self, endpoint: str | None = None) -> dict[str, str]:
        """timelake (and delta-rs) `storage_options` for this server, or for `endpoint` (a proxy
        in front of it) when given."""
        return {
            "google_base_url": (endpoint or self.endpoint).rstrip("/"),
            "google_skip_signature": "true",
            "allow_http": "true",
        }

    def request(self, method: str, target: str, body: bytes = b"",
                headers: dict[str, str] | None = None,
                expect: tuple[int, ...] = (200,)) -> bytes:
        """Sends `method target` (path?query, encoded) and returns the body; GcsError if the
        status is not in `expect`."""
        status, data = _send(self.endpoint, method, target, body, headers)
        if status not in expect:
            raise GcsError(method, target, status, data)
        return data

    def create_bucket(self, name: str | None = None) -> str:
        """Creates bucket `name` (a fresh unique name if None); returns the name."""
        name = name or f"tl-{uuid.uuid4().hex[:20]}"
        self.request("POST", f"/storage/v1/b?project={PROJECT}", json.dumps({"name": name}).encode(),
                     {"Content-Type": "application/json"})
        return name

    def list_objects(self, bucket: str, prefix: str = "") -> list[str]:
        """The names of the objects in `bucket` that start with `prefix`, in order."""
        names, token = [], ""
        while True:
            query = {"prefix": prefix} if prefix else {}
            if token:
                query["pageToken"] = token
            target = f"/storage/v1/b/{quote(bucket, safe='')}/o"
            listing = json.loads(self.request("GET", target + (f"?{urlencode(query)}" if query else "")))
            names += [item["name"] for item in listing.get("items", [])]
            token = listing.get("nextPageToken", "")
            if not token:
                return names

    def put_object(self, bucket: str, name: str, data: bytes) -> None:
        """Uploads `data` as object `name` (replacing it)."""
        query = urlencode({"uploadType": "media", "name": name})
        self.request("POST", f"/upload/storage/v1/b/{quote(bucket, safe='')}/o?{query}", data,
                     {"Content-Type": "application/octet-stream"})

    def get_object(self, bucket: str, name: str) -> bytes:
        """The content of object `name`; GcsError (status 404) if there is none."""
        return self.request(
            "GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}?alt=media")


def _send(endpoint: str, method: str, target: str, body: bytes = b"",
          headers: dict[str, str] | None = None, timeout_s: float = 30) -> tuple[int, bytes]:
    url = urlparse(endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(GcsServer.main())
