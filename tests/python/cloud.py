"""One object-store service for the cloud tests (test_cloud_*.py), whichever cloud it is: S3
(moto, s3_server.py), Azure Blob (Azurite, azure_server.py) or GCS (fake-gcs-server,
gcs_server.py).

A `Cloud` says how timelake and deltalake reach the service and gives the tests what they need
from the raw service, past timelake: fresh buckets, listings, reads and writes of single objects,
and regexes that pick a request out of the fault proxy's traffic. Nothing here uses timelake.

    cloud = make_cloud("azure", server)        # or the `cloud` fixture (conftest.py)
    bucket = cloud.new_bucket()                # an S3 bucket, an Azure container, a GCS bucket
    lake = timelake.Lake(cloud.url(bucket), storage_options=cloud.storage_options(proxy.endpoint))
    cloud.list_keys(bucket, "lake/default/readings/_delta_log/")
    proxy.add_rule("lost_reply", **cloud.commit_write())

"Bucket" below means an Azure container too. Keys are object names ("lake/default/t/x.json").
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa

from gcs_server import GcsError

CLOUD_KINDS = ("s3", "azure", "gcs")

# Why tests in which deltalake writes are skipped on GCS (docs/testing.md, "delta-rs against the
# emulators"; test_cloud_testinfra.py pins it).
DELTA_RS_CANNOT_WRITE_GCS = (
    "delta-rs cannot upload to fake-gcs-server: object_store ignores google_skip_signature for "
    "writes and asks the GCE metadata server for a token (and with a made-up service-account key "
    "its XML-API PUT gets 400 'invalid uploadType')")


class Cloud:
    """What a cloud test needs from one service. Subclasses fill in the raw operations."""

    kind = ""
    scheme = ""
    # The method of a request that creates an object (a commit, a data file).
    write_method = "PUT"
    # None if deltalake can write tables on this service's emulator, else why not.
    delta_write_unsupported: str | None = None

    def __init__(self, server):
        self.server = server

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.server.endpoint})"

    # -- how timelake and deltalake reach it ---------------------------------------------------

    def url(self, bucket: str, path: str = "lake") -> str:
        return f"{self.scheme}://{bucket}/{path}" if path else f"{self.scheme}://{bucket}"

    def storage_options(self, proxy: str | None = None) -> dict[str, str]:
        """timelake storage_options for the server, or for `proxy` (a FaultProxy's endpoint in
        front of it)."""
        return self.server.storage_options(proxy)

    def delta_options(self) -> dict[str, str]:
        """deltalake storage_options for reading."""
        return self.server.storage_options()

    def delta_write_options(self) -> dict[str, str]:
        """deltalake storage_options for writing (committing safely)."""
        return self.delta_options()

    # -- the raw service -----------------------------------------------------------------------

    def new_bucket(self) -> str:
        raise NotImplementedError

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        raise NotImplementedError

    def get(self, bucket: str, key: str) -> bytes:
        raise NotImplementedError

    def exists(self, bucket: str, key: str) -> bool:
        raise NotImplementedError

    def put(self, bucket: str, key: str, data: bytes) -> None:
        raise NotImplementedError

    # -- requests as the fault proxy sees them -------------------------------------------------

    def key_pattern(self, tail: str) -> str:
        """`tail`, a regex over the end of a key written with '/', as it appears in request
        targets (GCS percent-encodes '/' in object names)."""
        return tail

    def object_write(self, tail: str) -> dict[str, str]:
        """FaultRule fields (method, path) that pick the request creating an object whose key
        ends with regex `tail` (e.g. r"/_delta_log/\\d{20}\\.json")."""
        return {"method": self.write_method, "path": self.key_pattern(tail) + "$"}

    def object_read(self, tail: str) -> dict[str, str]:
        """FaultRule fields that pick a GET of the content of an object whose key ends with
        regex `tail` (not a metadata lookup)."""
        return {"method": "GET", "path": self.key_pattern(tail) + "$"}

    def commit_write(self) -> dict[str, str]:
        """FaultRule fields that pick the put of a commit (a version file of a table's log)."""
        return self.object_write(r"/_delta_log/\d{20}\.json")

    # -- deltalake, in a child process ---------------------------------------------------------

    def delta_read(self, uri: str, scratch: Path) -> tuple[pa.Table, int]:
        """deltalake.DeltaTable(uri).to_pyarrow_table() and its version."""
        out = scratch / f"delta-read-{time.monotonic_ns()}.arrow"
        run_child(_DELTA_READ, uri, json.dumps(self.delta_options()), str(out))
        with pa.memory_map(str(out)) as f:
            table = pa.ipc.open_file(f).read_all()
        return table, json.loads(Path(str(out) + ".json").read_text())["version"]

    def delta_write(self, uri: str, data: pa.Table, scratch: Path) -> None:
        """deltalake.write_deltalake(uri, data, mode="append") on the service."""
        assert self.delta_write_unsupported is None, self.delta_write_unsupported
        delta_write(uri, data, self.delta_write_options(), scratch)


class S3Cloud(Cloud):
    kind = "s3"
    scheme = "s3"

    def delta_options(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.server.endpoint,
            "AWS_ACCESS_KEY_ID": self.server.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.server.secret_access_key,
            "AWS_REGION": self.server.region,
            "AWS_ALLOW_HTTP": "true",
        }

    def delta_write_options(self) -> dict[str, str]:
        return {**self.delta_options(), "conditional_put": "etag"}

    def client(self):
        return self.server.client()

    def new_bucket(self) -> str:
        return self.server.create_bucket()

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        keys = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                            Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return keys

    def get(self, bucket: str, key: str) -> bytes:
        return self.client().get_object(Bucket=bucket, Key=key)["Body"].read()

    def exists(self, bucket: str, key: str) -> bool:
        client = self.client()
        try:
            client.head_object(Bucket=bucket, Key=key)
            return True
        except client.exceptions.ClientError as e:
            if e.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=bucket, Key=key, Body=data)


class AzureCloud(Cloud):
    """Azure Blob on Azurite: request targets are /devstoreaccount1/<container>/<blob> with '/'
    unencoded, so key regexes are the same as S3's; a block of a large upload is
    `PUT ...?comp=block&blockid=...`."""

    kind = "azure"
    scheme = "az"

    def new_bucket(self) -> str:
        return self.server.create_container()

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        return self.server.list_blobs(bucket, prefix)

    def get(self, bucket: str, key: str) -> bytes:
        return self.server.get_blob(bucket, key)

    def exists(self, bucket: str, key: str) -> bool:
        status, _, _ = self.server.request("HEAD", f"/{bucket}/{key}", expect=(200, 404))
        return status == 200

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.server.put_blob(bucket, key, data)


class GcsCloud(Cloud):
    """GCS on fake-gcs-server, through the JSON API: an object's name is percent-encoded ('/' as
    %2F) in the query of an upload (`POST /upload/storage/v1/b/<b>/o?...&name=<name>&...`) and
    in the path of a read (`GET /storage/v1/b/<b>/o/<name>?alt=media`; `?fields=...` without
    alt=media is a metadata lookup). A resumable upload's chunks go to the session URL the
    server hands out, on its -public-host, not through a proxy in front of it."""

    kind = "gcs"
    scheme = "gs"
    write_method = "POST"
    delta_write_unsupported = DELTA_RS_CANNOT_WRITE_GCS

    def new_bucket(self) -> str:
        return self.server.create_bucket()

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        return self.server.list_objects(bucket, prefix)

    def get(self, bucket: str, key: str) -> bytes:
        return self.server.get_object(bucket, key)

    def exists(self, bucket: str, key: str) -> bool:
        try:
            self.server.request(
                "GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(key, safe='')}?fields=name")
            return True
        except GcsError as e:
            if e.status == 404:
                return False
            raise

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.server.put_object(bucket, key, data)

    def key_pattern(self, tail: str) -> str:
        return tail.replace("/", "%2F")

    def object_write(self, tail: str) -> dict[str, str]:
        return {"method": "POST",
                "path": r"^/upload/storage/v1/b/[^/?]+/o\?(.*&)?name=[^&]*" + self.key_pattern(tail)
                        + "(&|$)"}

    def object_read(self, tail: str) -> dict[str, str]:
        return {"method": "GET",
                "path": r"^/storage/v1/b/[^/?]+/o/[^?]*" + self.key_pattern(tail)
                        + r"\?(.*&)?alt=media(&|$)"}


CLOUDS = {"s3": S3Cloud, "azure": AzureCloud, "gcs": GcsCloud}


def make_cloud(kind: str, server) -> Cloud:
    return CLOUDS[kind](server)



# -- deltalake in a child process --------------------------------------------------------------
# As in helpers.py: deltalake's Arrow scanner threads may abort the interpreter at exit now and
# then (delta-rs#2184), which must fail neither the test nor hide an abort of timelake's.

_DELTA_READ = r"""
import json, os, sys
import pyarrow as pa
import deltalake
uri, options, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
d = deltalake.DeltaTable(uri, storage_options=options)
t = d.to_pyarrow_table()
with pa.OSFile(out, "wb") as f:
    with pa.ipc.new_file(f, t.schema) as w:
        w.write_table(t)
with open(out + ".json", "w") as f:
    json.dump({"version": d.version()}, f)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""

_DELTA_WRITE = r"""
import json, os, sys
import pyarrow as pa
import deltalake
uri, options, src = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
with pa.OSFile(src, "rb") as f:
    t = pa.ipc.open_file(f).read_all()
deltalake.write_deltalake(uri, t, mode="append", storage_options=options)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def delta_write(uri: str, data: pa.Table, options: dict[str, str], scratch: Path) -> None:
    """deltalake.write_deltalake(uri, data, mode="append", storage_options=options)."""
    src = scratch / f"delta-write-{time.monotonic_ns()}.arrow"
    with pa.OSFile(str(src), "wb") as f:
        with pa.ipc.new_file(f, data.schema) as w:
            w.write_table(data)
    run_child(_DELTA_WRITE, uri, json.dumps(options), str(src))


def run_child(script: str, *args: str) -> None:
    proc = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"deltalake child failed ({proc.returncode}):\n{proc.stderr}")
