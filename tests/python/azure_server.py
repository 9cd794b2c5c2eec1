"""An Azure Blob server for tests and benchmarks: Azurite's blob service, run as a child process on
127.0.0.1 from `.tools/azurite` (scripts/setup.sh installs it).

Nothing here uses timelake: the Azure store is tested against this, so this must not depend on it.
Standard library only; requests are signed with SharedKey here, so tests can inspect a container
without going through timelake.

    server = AzureServer.from_env_or_start()   # the server in TIMELAKE_TEST_AZURE_ENDPOINT, or a new one
    container = server.create_container()     # a fresh, empty container
    lake = timelake.Lake(f"az://{container}/lake", storage_options=server.storage_options())
    server.stop()                              # stops the process if this object started it

`AzureServer` is also a context manager. In pytest use the `azure_server` and `azure_container`
fixtures (conftest.py). As a program it keeps a server up until it gets SIGTERM or SIGINT:

    python tests/python/azure_server.py [--port N] [--endpoint-file FILE]

prints `TIMELAKE_TEST_AZURE_ENDPOINT=http://127.0.0.1:PORT` once the server answers, and also
stops when the process that started it dies.

The endpoint is the service root; Azurite addresses the well-known development account
`devstoreaccount1` path-style, `http://127.0.0.1:PORT/devstoreaccount1/<container>/<blob>`, and
checks SharedKey signatures (a wrong key is refused with 403). It keeps blobs in memory.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import sys
import uuid
import xml.etree.ElementTree as ElementTree
from email.utils import formatdate
from urllib.parse import quote, urlencode, urlparse

from emulator import EmulatorServer, tool

ENDPOINT_VARIABLE = "TIMELAKE_TEST_AZURE_ENDPOINT"

# Azurite's well-known development account (the same in every Azurite; not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")
API_VERSION = "2023-11-03"

# Headers in the order SharedKey's string to sign lists them, after the verb.
_SIGNED_STANDARD_HEADERS = (
    "Content-Encoding", "Content-Language", "Content-Length", "Content-MD5", "Content-Type",
    "Date", "If-Modified-Since", "If-Match", "If-None-Match", "If-Unmodified-Since", "Range")


def shared_key_signature(method: str, path: str, query: dict[str, str],
                         headers: dict[str, str], account: str = ACCOUNT,
                         key: str = ACCOUNT_KEY) -> str:
    """The `Authorization` value for a request to `path` (URL-encoded, starting with
    /<account>/ as path-style URLs do), per Azure's "Authorize with Shared Key" (version
    2009-09-19 and later)."""
    lowered = {name.lower(): value for name, value in headers.items()}
    standard = []
    for name in _SIGNED_STANDARD_HEADERS:
        value = lowered.get(name.lower(), "")
        if name == "Content-Length" and value == "0":
            value = ""  # since 2015-02-21 a zero length is signed as empty
        standard.append(value)
    canonical_headers = "".join(
        f"{name}:{lowered[name].strip()}\n"
        for name in sorted(n for n in lowered if n.startswith("x-ms-")))
    resource = f"/{account}{path}"
    for name in sorted(query, key=str.lower):
        resource += f"\n{name.lower()}:{query[name]}"
    to_sign = "\n".join([method.upper(), *standard]) + "\n" + canonical_headers + resource
    digest = hmac.new(base64.b64decode(key), to_sign.encode("utf-8"), hashlib.sha256).digest()
    return f"SharedKey {account}:{base64.b64encode(digest).decode('ascii')}"


class AzureError(RuntimeError):
    """A request Azurite answered with an unexpected status."""

    def __init__(self, method: str, target: str, status: int, body: bytes):
        self.status = status
        super().__init__(f"{method} {target}: HTTP {status}: {body[:500].decode('utf-8', 'replace')}")


class AzureServer(EmulatorServer):
    """An Azure Blob endpoint for tests: an Azurite this object started, or one named by
    TIMELAKE_TEST_AZURE_ENDPOINT. `stop`, `owned`, `start`, `from_env*`: see EmulatorServer."""

    NAME = "azurite"
    ENDPOINT_VARIABLE = ENDPOINT_VARIABLE
    START_TIMEOUT_S = 60.0  # Azurite takes ~3 s on two busy cores

    account = ACCOUNT
    account_key = ACCOUNT_KEY

    @classmethod
    def command(cls, host: str, port: int) -> list[str]:
        return [str(tool("azurite/node_modules/.bin/azurite-blob", "Azurite")),
                "--blobHost", host, "--blobPort", str(port),
                "--inMemoryPersistence",      # nothing on disk; a stopped server forgets all
                "--skipApiVersionCheck",      # clients newer than this Azurite are served too
                "--loose",                    # ignore headers Azurite does not know
                "--disableProductStyleUrl",   # the account is always the first path segment
                "--disableTelemetry"]

    @classmethod
    def is_ready(cls, endpoint: str) -> bool:
        url = urlparse(endpoint)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=1.0)
        try:
            conn.request("HEAD", f"/{ACCOUNT}")
            response = conn.getresponse()
            response.read()
            return (response.getheader("Server") or "").startswith("Azurite-Blob")
        except OSError:
            return False
        finally:
            conn.close()

    # -- clients -----------------------------------------------------------------------------

    def storage_options(self, endpoint: str | None = None) -> dict[str, str]:
        """timelake (and delta-rs) `storage_options` for this server, or for `endpoint` (a proxy
        in front of it) when given."""
        return {
            "azure_storage_account_name": self.account,
            "azure_storage_account_key": self.account_key,
            "azure_storage_endpoint": f"{(endpoint or self.endpoint).rstrip('/')}/{self.account}",
            "allow_http": "true",
        }

    def request(self, method: str, path: str, query: dict[str, str] | None = None,
                headers: dict[str, str] | None = None, body: bytes = b"",
                expect: tuple[int, ...] = (200, 201, 202)) -> tuple[int, dict[str, str], bytes]:
        """Sends a SharedKey-signed request for `path` (`/container` or `/container/blob`,
        unencoded, under the account) and returns (status, headers, body); AzureError if the
        status is not in `expect`."""
        query = dict(query or {})
        target_path = f"/{self.account}{quote(path)}"
        headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": API_VERSION,
                   "Content-Length": str(len(body)), **(headers or {})}
        headers["Authorization"] = shared_key_signature(
            method, target_path, query, headers, self.account, self.account_key)
        target = target_path + (f"?{urlencode(query)}" if query else "")
        url = urlparse(self.endpoint)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        try:
            conn.request(method, target, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status not in expect:
            raise AzureError(method, target, response.status, data)
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def create_container(self, name: str | None = None) -> str:
        """Creates container `name` (a fresh unique name if None); returns the name."""
        name = name or f"tl-{uuid.uuid4().hex[:20]}"
        self.request("PUT", f"/{name}", {"restype": "container"}, expect=(201,))
        return name

    def list_blobs(self, container: str, prefix: str = "") -> list[str]:
        """The names of the blobs in `container` that start with `prefix`, in order."""
        names, marker = [], ""
        while True:
            query = {"restype": "container", "comp": "list"}
            if prefix:
                query["prefix"] = prefix
            if marker:
                query["marker"] = marker
            _, _, data = self.request("GET", f"/{container}", query, expect=(200,))
            root = ElementTree.fromstring(data)
            names += [blob.findtext("Name") for blob in root.iter("Blob")]
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return names

    def put_blob(self, container: str, name: str, data: bytes) -> None:
        """Uploads `data` as block blob `name` (replacing it)."""
        self.request("PUT", f"/{container}/{name}", headers={"x-ms-blob-type": "BlockBlob"},
                     body=data, expect=(201,))

    def get_blob(self, container: str, name: str) -> bytes:
        """The content of blob `name`; AzureError (status 404) if there is none."""
        return self.request("GET", f"/{container}/{name}", expect=(200,))[2]


if __name__ == "__main__":
    sys.exit(AzureServer.main())
