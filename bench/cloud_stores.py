"""The object stores bench_s3.py measures on, one class per emulator: S3 (moto), Azure Blob
(Azurite), GCS (fake-gcs-server).

A `Store` starts its server (the test suite's, tests/python/{s3,azure,gcs}_server.py), hands out
one bucket (container) per table, says how timelake and delta-rs reach it (URLs, storage_options,
directly or through a proxy), lists and deletes what the tables wrote, and counts the requests the
server served from the server's own request log: moto, Azurite (its access log) and
fake-gcs-server (`-log-level info`) each write one line per request whatever the benchmark does,
so counting adds nothing to the timed code. A store whose emulator delta-rs cannot write to says
why in `delta_write_error` (GCS).

Nothing here asserts; errors propagate to the benchmark, which reports them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote, urlencode

REPO = Path(__file__).resolve().parents[1]

# `"GET /target HTTP/1.1" 200`: moto's lines (maybe with colour codes), Azurite's access log, and
# fake-gcs-server's, which quotes the request line inside a quoted message (\"GET ... \").
_REQUEST_LINE = re.compile(
    r'\\?"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP/[0-9.]+(?:\x1b\[[0-9;]*m)*\\?" (\d{3})')


class RequestLog:
    """Counts the requests a server served between two marks, from its log (a line per request),
    by kind (`classify(method, target)`).

    Servers write a request's line after answering it, so a mark first waits until the log has
    stopped growing; call it outside timed code."""

    def __init__(self, path: Path, classify):
        self.path = path
        self.classify = classify

    def _settle(self, quiet_s: float = 0.08, limit_s: float = 2.0) -> int:
        size, deadline = -1, time.monotonic() + limit_s
        while time.monotonic() < deadline:
            now = self.path.stat().st_size
            if now == size:
                return now
            size = now
            time.sleep(quiet_s)
        return self.path.stat().st_size

    def mark(self) -> int:
        return self._settle()

    def since(self, mark: int) -> dict:
        end = self._settle()
        with open(self.path, "rb") as f:
            f.seek(mark)
            text = f.read(end - mark).decode("utf-8", "replace")
        kinds: dict = {}
        errors: dict = {}
        total = 0
        for m in _REQUEST_LINE.finditer(text):
            method, target, status = m.group(1), m.group(2), m.group(3)
            kind = self.classify(method, target)
            kinds[kind] = kinds.get(kind, 0) + 1
            if status[0] in "45":
                errors[status] = errors.get(status, 0) + 1
            total += 1
        return {"requests": total, "by_kind": kinds, "error_statuses": errors}


class Store:
    """One emulator and the benchmark's buckets in it, one per table (per first segment of a
    prefix): the emulators list a prefix by going over the bucket's keys, so one table's listings
    must not grow with the others' objects.

    Subclasses define the server, the names, the clients' options, `_list`, `_delete` and
    `classify`."""

    key = ""                 # --store value, and the results' file name
    short = ""               # "S3": what the tables call it ("S3 requests")
    server_name = ""         # "moto"
    title = ""               # "S3 (moto)"
    scheme = ""
    delta_write_error: str | None = None  # set when delta-rs cannot write to this emulator
    proxy_rewrites_host = False  # the byte-counting proxy forwards with the server's Host
    # Markdown bullets for the report: what the server is, how requests are counted, how
    # delta-rs is configured.
    server_note = ""
    delta_note = ""

    def __init__(self, server):
        self.server = server
        self.endpoint = server.endpoint
        self.names: dict[str, str] = {}
        self.requests = RequestLog(server.log_path, self.classify)

    # -- what a subclass defines ---------------------------------------------------------------

    def _create_bucket(self) -> str:
        raise NotImplementedError

    def _list(self, bucket: str, prefix: str):
        """(key, size) of every object under prefix."""
        raise NotImplementedError

    def _delete(self, bucket: str, keys: list[str]) -> None:
        raise NotImplementedError

    @staticmethod
    def classify(method: str, target: str) -> str:
        raise NotImplementedError

    def tl_options(self, endpoint: str | None = None) -> dict:
        """timelake storage_options, for the server or for `endpoint` (a proxy in front of it)."""
        return self.server.storage_options(endpoint)

    def delta_options(self, endpoint: str | None = None) -> dict:
        return self.server.storage_options(endpoint)

    def server_version(self) -> str:
        return "?"

    # -- shared ----------------------------------------------------------------------------------

    def stop(self) -> None:
        self.server.stop()

    def name(self, prefix: str) -> str:
        """The bucket of `prefix` (created when first asked for)."""
        top = prefix.split("/", 1)[0]
        if top not in self.names:
            self.names[top] = self._create_bucket()
        return self.names[top]

    def url(self, prefix: str) -> str:
        return f"{self.scheme}://{self.name(prefix)}/{prefix}"

    def objects(self, prefix: str):
        return self._list(self.name(prefix), prefix)

    def usage(self, prefix: str) -> dict:
        """Objects and bytes under prefix; data files are the Parquet files outside the log and
        timelake's index (_delta_log/, _timelake/)."""
        prefix = prefix.rstrip("/") + "/"
        out = {"objects": 0, "bytes": 0, "data_files": 0, "data_bytes": 0}
        for key, size in self.objects(prefix):
            out["objects"] += 1
            out["bytes"] += size
            rel = key[len(prefix):]
            if rel.endswith(".parquet") and not any(p.startswith("_") for p in rel.split("/")[:-1]):
                out["data_files"] += 1
                out["data_bytes"] += size
        return out

    def log_state(self, table_prefix: str) -> dict:
        """What a reader of this table's _delta_log must read: newest checkpoint and the commits
        after it (as bench_commits_latest.log_state, over a listing of the store)."""
        log_prefix = table_prefix.rstrip("/") + "/_delta_log/"
        names = [key[len(log_prefix):] for key, _ in self.objects(log_prefix)]
        commits = sorted(int(n[:20]) for n in names if n.endswith(".json") and n[:20].isdigit())
        cps = sorted({int(n[:20]) for n in names if ".checkpoint." in n and n[:20].isdigit()})
        cp = cps[-1] if cps else None
        after = [c for c in commits if cp is None or c > cp]
        return {"version": commits[-1] if commits else None, "last_checkpoint": cp,
                "commits_after_checkpoint": len(after), "log_objects": len(names)}

    def delete(self, prefix: str) -> None:
        keys = [key for key, _ in self.objects(prefix.rstrip("/") + "/")]
        self._delete(self.name(prefix), keys)

    def describe(self) -> dict:
        return {"store": self.key, "endpoint": self.endpoint, "buckets": self.names}


def _delete_each(delete_one, keys: list[str]) -> None:
    """One request per object (the emulators' batch APIs differ), eight at a time."""
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(delete_one, keys))


class S3Store(Store):
    key, short, server_name, title, scheme = "s3", "S3", "moto", "S3 (moto)", "s3"
    server_note = (
        "* Both systems against one moto S3 server on 127.0.0.1 (started by the benchmark, "
        "`tests/python/s3_server.py`), in the same run, on the same data. moto is a Python process on the "
        "same 2 cores: each request costs milliseconds of its CPU, so request counts matter as much as bytes. "
        "**Ratios > 1 mean timelake is faster**: for commits/s timelake's rate over the peer's, for times "
        "the peer's time over timelake's.\n"
        "* `S3 requests` is what moto served for the step (counted from its request log): per call for "
        "small appends, warm reads and opens; for one cold read; for the whole bulk append. `S3 bytes cold` "
        "is what one more cold read (untimed) received from S3, counted by a forwarding proxy "
        "(`tests/python/fault_proxy.py` in its own process, no fault armed).")
    delta_note = (
        "delta-rs: `storage_options` AWS_ENDPOINT_URL, keys, region, AWS_ALLOW_HTTP, "
        "`aws_conditional_put=etag` (delta-rs 1.6 sends `If-None-Match: *` for each commit file either "
        "way); `write_deltalake` defaults (no partitioning).")

    @classmethod
    def start(cls) -> "S3Store":
        from s3_server import S3Server

        return cls(S3Server.start())

    def __init__(self, server):
        super().__init__(server)
        self.client = server.client(retries=3)

    def _create_bucket(self) -> str:
        return self.server.create_bucket()

    def _list(self, bucket, prefix):
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                yield o["Key"], o["Size"]

    def _delete(self, bucket, keys):
        for i in range(0, len(keys), 1000):
            self.client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})

    @staticmethod
    def classify(method, target):
        return "LIST" if method == "GET" and ("list-type=" in target or "prefix=" in target) else method

    def delta_options(self, endpoint=None):
        # delta-rs 1.x names; conditional put "etag" as delta-rs documents for S3-compatible
        # stores (object_store also takes the key without its aws_ prefix). delta-rs 1.6 sends
        # `If-None-Match: *` for commit files either way.
        s = self.server
        return {"AWS_ENDPOINT_URL": endpoint or s.endpoint, "AWS_ACCESS_KEY_ID": s.access_key_id,
                "AWS_SECRET_ACCESS_KEY": s.secret_access_key, "AWS_REGION": s.region, "AWS_ALLOW_HTTP": "true",
                "aws_conditional_put": "etag"}

    def server_version(self):
        import moto

        return moto.__version__


class AzureStore(Store):
    key, short, server_name, title, scheme = "azure", "Azure", "Azurite", "Azure Blob (Azurite)", "az"
    server_note = (
        "* Both systems against one Azurite blob server on 127.0.0.1 (started by the benchmark, "
        "`tests/python/azure_server.py`: in-memory, SharedKey with the development account), in the same "
        "run, on the same data. Azurite is one Node.js process on the same 2 cores: each request costs it "
        "CPU, so request counts matter as much as bytes. **Ratios > 1 mean timelake is faster**: for "
        "commits/s timelake's rate over the peer's, for times the peer's time over timelake's.\n"
        "* `Azure requests` is what Azurite served for the step, counted from its access log (one line per "
        "request, which Azurite writes in every run: no proxy in the timed path): per call for small "
        "appends, warm reads and opens; for one cold read; for the whole bulk append. `Azure bytes cold` is "
        "what one more cold read (untimed) received from the server, counted by a forwarding proxy "
        "(`tests/python/fault_proxy.py` in its own process, no fault armed).")
    delta_note = ("delta-rs: `AzureServer.storage_options()` (account name and key, "
                  "`azure_storage_endpoint`, `allow_http`); `write_deltalake` defaults (no partitioning).")

    @classmethod
    def start(cls) -> "AzureStore":
        from azure_server import AzureServer

        return cls(AzureServer.start())

    def _create_bucket(self):
        return self.server.create_container()

    def _list(self, bucket, prefix):
        marker = ""
        while True:
            query = {"restype": "container", "comp": "list", "prefix": prefix}
            if marker:
                query["marker"] = marker
            _, _, data = self.server.request("GET", f"/{bucket}", query, expect=(200,))
            root = ElementTree.fromstring(data)
            for blob in root.iter("Blob"):
                yield blob.findtext("Name"), int(blob.findtext("Properties/Content-Length") or 0)
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return

    def _delete(self, bucket, keys):
        _delete_each(lambda k: self.server.request("DELETE", f"/{bucket}/{k}", expect=(202,)), keys)

    @staticmethod
    def classify(method, target):
        comp = re.search(r"[?&]comp=([a-z]+)", target)
        if comp and comp.group(1) == "list":
            return "LIST"
        return f"{method} {comp.group(1)}" if comp else method

    def server_version(self):
        try:
            return json.loads((REPO / ".tools/azurite/node_modules/azurite/package.json").read_text())["version"]
        except (OSError, ValueError, KeyError) as e:
            return f"? ({e})"


class GcsStore(Store):
    key, short, server_name, title, scheme = "gcs", "GCS", "fake-gcs-server", "GCS (fake-gcs-server)", "gs"
    proxy_rewrites_host = True  # it routes XML-API requests (delta-rs's) only for its own Host
    server_note = (
        "* Both systems against one fake-gcs-server on 127.0.0.1 (started by the benchmark, "
        "`tests/python/gcs_server.py`: in-memory, JSON API, no credentials checked), in the same run. "
        "fake-gcs-server is one Go process on the same 2 cores. **Ratios > 1 mean timelake is faster**: for "
        "commits/s timelake's rate over the peer's, for times the peer's time over timelake's.\n"
        "* **delta-rs cannot write to fake-gcs-server**: it ignores `google_skip_signature` on writes and "
        "asks the GCE metadata server for a token (the error is under Failures; one write is tried at the "
        "start). So its write rows are reported as `cannot write`, and its read rows (DuckDB, pyarrow, "
        "QueryBuilder, `latest` by SQL, open) **read the tables timelake wrote** (valid Delta tables: one "
        "file per day chunk, sorted by series and time, with statistics), not tables delta-rs wrote as on "
        "S3 and Azure. The read comparison is therefore reader against reader over the same files.\n"
        "* `GCS requests` is what fake-gcs-server served for the step, counted from its request log "
        "(`-log-level info`, one line per request, written in every run: no proxy in the timed path): per "
        "call for small appends, warm reads and opens; for one cold read; for the whole bulk append. "
        "`GCS bytes cold` is what one more cold read (untimed) received from the server, counted by a "
        "forwarding proxy (`tests/python/fault_proxy.py` in its own process, no fault armed).")
    delta_note = ("delta-rs: `GcsServer.storage_options()` (`google_base_url`, `google_skip_signature`, "
                  "`allow_http`), which delta-rs reads with but cannot write with.")

    @classmethod
    def start(cls) -> "GcsStore":
        from gcs_server import GcsServer

        store = cls(GcsServer.start())
        store.delta_write_error = probe_delta_write(store)
        return store

    def _create_bucket(self):
        return self.server.create_bucket()

    def _list(self, bucket, prefix):
        token = ""
        while True:
            query = {"prefix": prefix, **({"pageToken": token} if token else {})}
            listing = json.loads(self.server.request("GET", f"/storage/v1/b/{quote(bucket, safe='')}/o?"
                                                     + urlencode(query)))
            for item in listing.get("items", []):
                yield item["name"], int(item.get("size", 0))
            token = listing.get("nextPageToken", "")
            if not token:
                return

    def _delete(self, bucket, keys):
        _delete_each(lambda k: self.server.request(
            "DELETE", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(k, safe='')}", expect=(200, 204)), keys)

    @staticmethod
    def classify(method, target):
        path, _, query = target.partition("?")
        if path.startswith("/upload/"):
            return "UPLOAD"
        if path.startswith("/batch/"):
            return "BATCH"
        if method == "GET" and (re.fullmatch(r"/storage/v1/b/[^/]+/o/?", path)  # JSON API
                                or ("list-type=" in query and path.count("/") == 1)):  # XML API
            return "LIST"
        if method == "GET" and path.startswith("/storage/v1/b/") and "/o/" in path and "alt=media" not in query:
            return "GET metadata"
        return method

    def server_version(self):
        go = shutil.which("go") or "/usr/local/go/bin/go"
        try:
            out = subprocess.run([go, "version", "-m", str(REPO / ".tools/bin/fake-gcs-server")],
                                 capture_output=True, text=True, timeout=30).stdout
            m = re.search(r"\bmod\s+github.com/fsouza/fake-gcs-server\s+(\S+)", out)
            return m.group(1) if m else "?"
        except (OSError, subprocess.SubprocessError) as e:
            return f"? ({e})"


STORES = {s.key: s for s in (S3Store, AzureStore, GcsStore)}


def _try_delta_write(url: str, options: dict, conn) -> None:
    """The probe's process: one small write_deltalake; sends None or the error text."""
    import pyarrow as pa
    from deltalake import write_deltalake

    try:
        write_deltalake(url, pa.table({"x": [1]}), mode="append", storage_options=options)
        conn.send(None)
    except Exception as e:  # noqa: BLE001 - the reason is the result
        conn.send(f"{type(e).__name__}: {e}")


def probe_delta_write(store: Store, timeout_s: float = 120) -> str | None:
    """None if delta-rs can write a table to `store`, else why not (`cannot write to …: reason`).
    In its own process: the failed write panics a runtime thread and might hang on a token."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_try_delta_write, args=(store.url("delta-write-probe"), store.delta_options(), send),
                    daemon=True)
    p.start()
    reason = receive.recv() if receive.poll(timeout_s) else f"no answer within {timeout_s:.0f} s"
    p.join(timeout=10)
    if p.is_alive():  # only the process this function started, by its handle
        p.terminate()
        p.join(timeout=10)
    return None if reason is None else f"cannot write to {store.server_name}: {reason}"
