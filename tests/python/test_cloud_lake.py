"""Lakes in object stores beyond what the shared suite checks on them, on every cloud (S3 on moto,
Azure Blob on Azurite, GCS on fake-gcs-server: the `cloud` fixture, cloud.py): secrets, errors,
foreign options, the SQL file cache, selective SQL over large files, and failed multipart
uploads. Then what one cloud alone has: AWS credentials from other sources and virtual-hosted
addressing (S3); account keys from connection strings and the environment (Azure)."""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import timelake
from azure_server import ACCOUNT_KEY
from cloud import GcsCloud
from fault_proxy import FaultProxy
from gcs_server import GcsServer
from helpers import IOT_SCHEMA, T0, iot_series, iot_table, sql_rows
from s3_server import free_port

SECRET = "s3cr3t-VALUE-never-shown"


@pytest.fixture
def cloud_lake(cloud, cloud_bucket):
    return cloud.url(cloud_bucket), cloud.storage_options()


# ------------------------------------------------------------------ secrets and clear errors

# kind -> the option naming the service's URL, and the spelling of allow_http that kind documents.
ENDPOINT_OPTION = {"s3": "aws_endpoint", "azure": "azure_storage_endpoint", "gcs": "google_base_url"}
ALLOW_HTTP_OPTION = {"s3": "aws_allow_http", "azure": "allow_http", "gcs": "allow_http"}


def with_secrets(cloud) -> tuple[dict, list[str]]:
    """Storage options that carry secrets and work against the test server, and the secrets.
    moto checks no signature, so made-up AWS keys work; Azurite checks SharedKey signatures, so
    the secret is the account key itself; fake-gcs-server takes any bearer token."""
    options = cloud.storage_options()
    if cloud.kind == "s3":
        options.update(aws_secret_access_key=SECRET, aws_session_token=SECRET + "-token")
        return options, [SECRET]
    if cloud.kind == "azure":
        return options, [ACCOUNT_KEY, ACCOUNT_KEY[:24]]
    del options["google_skip_signature"]
    options["google_bearer_token"] = SECRET
    return options, [SECRET]


def test_secrets_never_appear_in_repr_location_info_or_errors(cloud, cloud_bucket):
    options, secrets = with_secrets(cloud)
    url = cloud.url(cloud_bucket)
    lake = timelake.Lake(url, storage_options=options)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(T0, 3)))
    assert sql_rows(lake, "SELECT count(*) AS n FROM readings") == [{"n": 9}]  # the secrets work
    shown = [repr(lake), lake.location, repr(t), t.location, json.dumps(t.info(), default=str)]
    errors = []
    bad_values = [{ALLOW_HTTP_OPTION[cloud.kind]: "maybe"}, {"timeout": "soon"},
                  {ENDPOINT_OPTION[cloud.kind]: "no-scheme"}, {"max_retries": "lots"}]
    if cloud.kind == "s3":
        bad_values.append({"aws_conditional_put": "dynamo"})
    for bad in bad_values:
        with pytest.raises(ValueError) as e:
            timelake.Lake(url, storage_options=dict(options, **bad))
        errors.append(str(e.value))
        assert next(iter(bad)) in str(e.value)  # names the key
    unreachable = dict(options, max_retries="1", retry_timeout="30s",  # a refusal is at once
                       **{ENDPOINT_OPTION[cloud.kind]: "http://127.0.0.1:9"})
    with pytest.raises(RuntimeError) as e:
        timelake.Lake(url, storage_options=unreachable).tables()
    errors.append(str(e.value))
    assert "attempts" in str(e.value)
    for text in shown + errors:
        for secret in secrets:
            assert secret not in text, text


def test_azure_secrets_refused_by_the_server_are_not_repeated(azure_server, azure_container):
    """A wrong account key and a SAS token Azurite refuses: the 403 says which credentials were
    used, never their values (the key, the SAS signature)."""
    url = f"az://{azure_container}/lake"
    wrong_key = "V1JPTkctS0VZLW5ldmVyLXNob3du" + ACCOUNT_KEY[28:]
    options = dict(azure_server.storage_options(), azure_storage_account_key=wrong_key)
    with pytest.raises(RuntimeError, match="access denied .*HTTP 403.*account key") as e:
        timelake.Lake(url, storage_options=options).tables()
    assert wrong_key not in str(e.value) and wrong_key[:20] not in str(e.value)
    sas_options = {k: v for k, v in azure_server.storage_options().items()
                   if k != "azure_storage_account_key"}
    sas_options["azure_storage_sas_token"] = (
        "sv=2023-11-03&ss=b&srt=sco&sp=rwdlac&se=2099-01-01T00:00:00Z&sig=" + SECRET)
    lake = timelake.Lake(url, storage_options=sas_options)
    with pytest.raises(RuntimeError, match="access denied .*HTTP 403.*SAS") as e:
        lake.tables()
    assert SECRET not in str(e.value) and SECRET not in repr(lake)


# kind -> what a lake in a missing bucket (container) says.
MISSING_BUCKET = {
    "s3": "bucket 'no-such-bucket-here' does not exist",
    "azure": "container 'no-such-bucket-here' does not exist in account 'devstoreaccount1'",
    "gcs": "bucket 'no-such-bucket-here' does not exist",
}


def test_missing_bucket_is_a_clear_error(cloud):
    lake = timelake.Lake(cloud.url("no-such-bucket-here"), storage_options=cloud.storage_options())
    with pytest.raises(RuntimeError, match=MISSING_BUCKET[cloud.kind]):
        lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    with pytest.raises(RuntimeError, match=MISSING_BUCKET[cloud.kind]):
        lake.tables()


# kind -> (a misspelt key of its own, keys of the other clouds).
FOREIGN_OPTIONS = {
    "s3": ("aws_regoin", ["azure_storage_account_name", "google_base_url"]),
    "azure": ("azure_storage_acount_name", ["aws_region", "google_base_url"]),
    "gcs": ("google_bucket_nmae", ["aws_region", "azure_storage_account_name"]),
}


def test_unknown_and_foreign_options_are_value_errors(cloud, cloud_lake):
    url, options = cloud_lake
    typo, foreign = FOREIGN_OPTIONS[cloud.kind]
    with pytest.raises(ValueError, match=typo):
        timelake.Lake(url, storage_options=dict(options, **{typo: "x"}))
    for key in foreign:
        with pytest.raises(ValueError, match=f"{key}.*another cloud"):
            timelake.Lake(url, storage_options=dict(options, **{key: "x"}))
    if cloud.kind == "s3":
        with pytest.raises(ValueError, match="aws_secret_access_key"):
            half = dict(options)
            del half["aws_secret_access_key"]
            timelake.Lake(url, storage_options=half)


# ------------------------------------------------------------------------- the SQL file cache

def test_sql_reads_local_copies_and_recovers_a_damaged_cache(cloud_lake):
    url, options = cloud_lake
    lake = timelake.Lake(url, storage_options=options)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(T0, 50)))
    expected = sql_rows(lake, "SELECT count(*) AS n, sum(temp) AS s FROM readings")
    cache = Path(lake._core.cache_directory)
    copies = [p for p in cache.rglob("*.parquet")]
    assert len(copies) == 1 and copies[0].stat().st_size > 0
    # A copy cut short (a crash mid-write outside timelake, a full disk) is noticed by its size
    # and fetched again; a removed cache is rebuilt.
    copies[0].write_bytes(copies[0].read_bytes()[:100])
    fresh = timelake.Lake(url, storage_options=options)
    assert sql_rows(fresh, "SELECT count(*) AS n, sum(temp) AS s FROM readings") == expected
    for p in cache.rglob("*"):
        if p.is_file():
            p.unlink()
    fresh = timelake.Lake(url, storage_options=options)
    assert sql_rows(fresh, "SELECT count(*) AS n, sum(temp) AS s FROM readings") == expected
    # Only the files a query's plan keeps are fetched: a query for another day fetches nothing new.
    for p in cache.rglob("*.parquet"):
        p.unlink()
    fresh = timelake.Lake(url, storage_options=options)
    sql_rows(fresh, "SELECT count(*) FROM readings WHERE time >= TIMESTAMPTZ '2031-01-01'")
    assert list(cache.rglob("*.parquet")) == []


EVICTOR = """
import json, sys, timelake
lake = timelake.Lake(sys.argv[1], storage_options=json.loads(sys.argv[2]))
print(lake.sql("SELECT count(*) AS n FROM other").column("n")[0].as_py())
"""


def test_a_statement_keeps_its_local_copies_while_another_process_evicts(cloud, cloud_lake, tmp_path):
    """A statement pins the cache copies it reads: another process whose cache budget is 1 byte
    (so every copy idle for a minute is due) evicts around them while the statement runs, and
    evicts them once it has ended. Pins are files beside the copies, one per statement, gone
    afterwards."""
    url, options = cloud_lake
    lake = timelake.Lake(url, storage_options=options)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], chunk="day")
    t.append(iot_table(iot_series(T0, 2000)))
    other = iot_table(iot_series(T0, 3))
    other_rows = other.num_rows
    lake.create_table("other", IOT_SCHEMA, series_key=["device_id"]).append(other)
    expected = sql_rows(lake, "SELECT count(*) AS n, round(sum(temp), 3) AS s FROM readings")
    copies_dir = Path(lake._core.cache_directory)
    pins = copies_dir / ".pins"
    # The evictor shares this process's cache (the folder of a store is named by its identity).
    env = dict(os.environ, TIMELAKE_CACHE_DIR=str(copies_dir.parent), TIMELAKE_CACHE_MAX_BYTES="1")

    def copies():
        return sorted(p for p in (copies_dir / "default" / "readings").rglob("*.parquet"))

    def idle_all():
        for p in copies_dir.rglob("*"):
            if p.is_file() and p.parent != pins:
                os.utime(p, (p.stat().st_atime, p.stat().st_mtime - 120))

    def evict():
        # The evictor downloads `other` again: a pass runs after a download.
        for p in (copies_dir / "default" / "other").rglob("*.parquet"):
            p.unlink()
        out = subprocess.run([sys.executable, "-c", EVICTOR, url, json.dumps(options)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == str(other_rows)

    held = copies()
    assert len(held) > 1
    assert list(pins.glob("*.pin")) == [], "a finished statement left its pin"
    catalog = lake._catalog()
    catalog.begin("default")  # a statement in progress, past planning: its copies are pinned
    catalog.add_table("default", "readings")
    assert len(list(pins.glob("*.pin"))) == 1
    idle_all()
    evict()
    assert copies() == held, "copies a running statement reads were evicted"
    catalog.end()
    assert list(pins.glob("*.pin")) == []
    idle_all()
    evict()
    assert copies() == [], "copies of an ended statement stayed past the budget"
    assert sql_rows(lake, "SELECT count(*) AS n, round(sum(temp), 3) AS s FROM readings") == expected


def test_sql_cannot_read_the_cache_of_another_lake_or_the_log(cloud, cloud_lake):
    url, options = cloud_lake
    lake = timelake.Lake(url, storage_options=options)
    lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"]).append(iot_table(iot_series(T0, 5)))
    other = timelake.Lake(cloud.url(cloud.new_bucket()), storage_options=options)
    other.create_table("secret", IOT_SCHEMA, series_key=["device_id"]).append(iot_table(iot_series(T0, 5)))
    sql_rows(other, "SELECT count(*) FROM secret")  # its copies are in the cache now
    other_copy = next(Path(other._core.cache_directory).rglob("*.parquet"))
    sql_rows(lake, "SELECT count(*) FROM readings")
    with pytest.raises((ValueError, RuntimeError)):
        lake.sql(f"SELECT * FROM read_parquet('{other_copy}')")


def _large_day(devices: int = 40, per_device: int = 30000, seed: int = 7):
    """One day of rows for `devices` series, enough for a file of several row groups (≥ 8 MiB)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = devices * per_device
    start = int(T0.timestamp() * 1_000_000)
    times = start + (np.arange(n) % per_device) * 2_880_000  # every 2.88 s over one day
    names = np.array([f"dev-{i:03d}" for i in range(devices)])[np.arange(n) // per_device]
    return pa.table({
        "time": pa.array(times, pa.timestamp("us", tz="UTC")),
        "device_id": pa.array(names),
        "temp": pa.array(rng.normal(20, 5, n)),
    })


def _allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


@pytest.mark.parametrize("dedup", [None, "last"])
def test_selective_sql_on_a_large_file_fetches_only_the_row_groups_it_needs(cloud_lake, tmp_path, dedup):
    url, options = cloud_lake
    lake = timelake.Lake(url, storage_options=options)
    local = timelake.Lake(str(tmp_path / "local"))
    data = _large_day()
    for target in (lake, local):
        t = target.create_table("readings", IOT_SCHEMA, series_key=["device_id"], chunk="day", dedup=dedup)
        t.append(data)
        if dedup:  # a second commit rewriting one series: files that overlap, deduplicated at read time
            t.append(data.filter(pc.equal(data["device_id"], "dev-017")).set_column(
                2, "temp", pa.array([99.0] * 30000, pa.float64())))
    plan = lake.table("readings")._core.scan()
    big = max(plan.files, key=lambda f: f.size)
    assert big.size >= 8 << 20, "the test needs a file large enough for row-group copies"

    cache = Path(lake._core.cache_directory)
    queries = [
        "SELECT count(*) AS n, round(avg(temp), 9) AS a, min(time) AS lo, max(time) AS hi FROM readings WHERE device_id = 'dev-017'",
        "SELECT time, temp FROM readings WHERE device_id = 'dev-003' AND time < TIMESTAMPTZ '2024-03-05 01:00:00+00' ORDER BY time",
        "SELECT count(*) AS n FROM readings WHERE device_id = 'dev-999'",
    ]
    for q in queries:
        assert sql_rows(lake, q) == sql_rows(local, q), q
    copies = [p for p in cache.rglob("*.parquet*") if ".rg-" in p.name]
    assert copies, "a selective query over a large file should make row-group copies"
    assert not any(p.name.endswith(".parquet") and p.stat().st_size == big.size for p in cache.rglob("*.parquet")), \
        "no whole copy of the large file should be fetched for selective queries"
    assert max(_allocated(p) for p in copies) < big.size // 2
    # A query without a usable filter reads every row: a whole copy, same answer as local.
    q = "SELECT device_id, count(*) AS n, round(sum(temp), 6) AS s FROM readings GROUP BY device_id ORDER BY device_id"
    assert sql_rows(lake, q) == sql_rows(local, q)
    # A new handle with the copies evicted between queries fetches them again.
    for p in copies:
        p.unlink()
    fresh = timelake.Lake(url, storage_options=options)
    assert sql_rows(fresh, queries[0]) == sql_rows(local, queries[0])


# ------------------------------------------------------------------ failed multipart uploads

class _GcsBehindProxy(GcsServer):
    """A fake-gcs-server whose -public-host is a port a FaultProxy will take: the session URLs
    of resumable uploads it hands out (`Location`) lead back through the proxy, so their chunks
    can be faulted. (The session's server hands out its own host:port, which bypasses a proxy.)"""

    proxy_port = 0

    @classmethod
    def command(cls, host: str, port: int) -> list[str]:
        argv = super().command(host, port)
        argv[argv.index("-public-host") + 1] = f"{host}:{cls.proxy_port}"
        return argv


@pytest.fixture
def upload_proxy(cloud):
    """(cloud, proxy): a FaultProxy in front of `cloud`'s server through which every request of
    a multipart upload passes. For GCS that takes a server of its own (_GcsBehindProxy)."""
    if cloud.kind != "gcs":
        with FaultProxy(cloud.server.endpoint) as proxy:
            yield cloud, proxy
        return
    server_class = type("GcsBehindProxy", (_GcsBehindProxy,), {"proxy_port": free_port()})
    with server_class.start() as server:
        with FaultProxy(server.endpoint, port=server_class.proxy_port) as proxy:
            yield GcsCloud(server), proxy


# kind -> FaultRule fields for a part of a multipart upload: S3 UploadPart, Azure Put Block,
# GCS a chunk PUT to a resumable session.
PART_UPLOAD = {
    "s3": {"method": "PUT", "path": r"[?&]partNumber="},
    "azure": {"method": "PUT", "path": r"[?&]comp=block(&|$)"},
    "gcs": {"method": "PUT", "path": r"[?&]upload_id="},
}
# kind -> what completes (S3, Azure) or cancels (GCS) an upload: it must not be sent / must be.
UPLOAD_COMPLETE = {
    "s3": {"method": "POST", "path": r"[?&]uploadId="},
    "azure": {"method": "PUT", "path": r"[?&]comp=blocklist(&|$)"},
}
UPLOAD_CANCEL = {"gcs": {"method": "DELETE", "path": r"[?&]upload_id="}}


def test_a_failed_multipart_upload_fails_the_append_and_leaves_nothing(upload_proxy):
    """Every part upload of a large data file answers 500: the append is a RuntimeError, nothing
    is committed, the upload is never completed (on GCS: cancelled), no data object appears, and
    the next append works."""
    cloud, proxy = upload_proxy
    bucket = cloud.new_bucket()
    url = cloud.url(bucket)
    options = dict(cloud.storage_options(proxy.endpoint), max_retries="1", retry_timeout="5s")
    lake = timelake.Lake(url, storage_options=options)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], chunk="day")
    t.append(iot_table(iot_series(T0, 5)))
    version = t.version

    def data_objects():
        return sorted(cloud.list_keys(bucket, "lake/default/readings/data/"))

    before = data_objects()
    assert len(before) == 1, before
    proxy.add_rule("internal_error", count=None, **PART_UPLOAD[cloud.kind])
    for fields in (UPLOAD_COMPLETE.get(cloud.kind), UPLOAD_CANCEL.get(cloud.kind)):
        if fields:  # forwarded untouched; the log shows whether it was sent
            proxy.add_rule("delay", count=None, delay_s=0, **fields)
    with pytest.raises(RuntimeError, match="HTTP 500"):
        t.append(_large_day())
    log = proxy.stats()["log"]
    faulted = [e for e in log if e["kind"] == "internal_error"]
    assert faulted and all(e["method"] == "PUT" for e in faulted), log
    sent = [e for e in log if e["kind"] == "delay"]
    if cloud.kind == "gcs":
        assert sent and all(e["method"] == "DELETE" for e in sent), "the session must be cancelled"
    else:
        assert sent == [], f"a failed upload must not be completed: {sent}"
    proxy.clear_rules()
    assert t.version == version
    assert timelake.Lake(url, storage_options=options).table("readings").version == version
    assert data_objects() == before
    if cloud.kind == "s3":
        uploads = cloud.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        assert uploads == [], "the failed upload must be aborted"
    t.append(_large_day())
    assert sql_rows(lake, "SELECT count(*) AS n FROM readings") == [{"n": 15 + 40 * 30000}]
    assert len(data_objects()) == 2


# ------------------------------------------------------------------------------- S3 alone

@pytest.mark.parametrize("fault", ["lost_reply", "cut_body"])
def test_a_multipart_upload_started_twice_leaves_no_orphan(s3_server, s3_bucket, fault):
    """The reply to CreateMultipartUpload is lost after S3 started the upload (the request is
    not idempotent: the retry, or curl's own resend on a new connection, starts a second one).
    The append lands once and the bucket holds no incomplete upload afterwards: the one nobody
    would complete is aborted."""
    with FaultProxy(s3_server.endpoint) as proxy:
        options = dict(s3_server.storage_options(), aws_endpoint=proxy.endpoint)
        url = f"s3://{s3_bucket}/lake"
        lake = timelake.Lake(url, storage_options=options)
        t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], chunk="day")
        proxy.add_rule(fault, count=1, method="POST", path=r"[?&]uploads(=|&|$)")
        t.append(_large_day())
        assert proxy.counts()[fault] == 1
        assert sql_rows(lake, "SELECT count(*) AS n FROM readings") == [{"n": 40 * 30000}]
    client = s3_server.client()
    assert client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []


def _child(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


CHILD = """
import json, sys, timelake
lake = timelake.Lake(sys.argv[1] if len(sys.argv) > 1 else {url!r}, storage_options={options!r})
print(json.dumps(lake.tables()))
"""


def _base_env(prefix: str = "AWS_") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefix)}
    env["HOME"] = os.environ.get("HOME", "/tmp")
    return env


def test_credentials_from_environment_and_profile_files(s3_server, s3_bucket, tmp_path):
    url = f"s3://{s3_bucket}/lake"
    options = s3_server.storage_options()
    timelake.Lake(url, storage_options=options).create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    without_keys = {k: v for k, v in options.items() if k not in ("aws_access_key_id", "aws_secret_access_key")}
    code = CHILD.format(url=url, options=without_keys)
    env = _base_env()
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    # Nothing configured: a clear error naming what was tried.
    out = _child(code, dict(env, AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_CONFIG_FILE=str(tmp_path / "none")))
    assert out.returncode != 0 and "credentials" in out.stderr.lower(), out.stderr
    # The environment.
    out = _child(code, dict(env, AWS_ACCESS_KEY_ID=s3_server.access_key_id, AWS_SECRET_ACCESS_KEY=s3_server.secret_access_key))
    assert out.returncode == 0 and json.loads(out.stdout) == ["default.readings"], out.stderr
    # A named profile in the shared credentials file.
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = wrong\n\n[tests]\naws_access_key_id = {s3_server.access_key_id}\n"
                     f"aws_secret_access_key = {s3_server.secret_access_key}\n")
    out = _child(code, dict(env, AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_PROFILE="tests"))
    assert out.returncode == 0 and json.loads(out.stdout) == ["default.readings"], out.stderr


class _ContainerCredentials(http.server.BaseHTTPRequestHandler):
    """The ECS/EKS container credentials endpoint: JSON credentials for the right token."""

    seen: list = []

    def do_GET(self):  # noqa: N802 (the base class's name)
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        body = json.dumps({"AccessKeyId": "ASIA-CONTAINER", "SecretAccessKey": SECRET, "Token": "container-token",
                           "Expiration": "2099-01-01T00:00:00Z"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_credentials_from_a_container_endpoint(s3_server, s3_bucket, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ContainerCredentials)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"s3://{s3_bucket}/lake"
        options = {k: v for k, v in s3_server.storage_options().items()
                   if k not in ("aws_access_key_id", "aws_secret_access_key")}
        code = CHILD.format(url=url, options=options) + """
t = lake.create_table("readings", __import__("helpers").IOT_SCHEMA, series_key=["device_id"])
print(t.append(__import__("helpers").iot_table(__import__("helpers").iot_series(__import__("helpers").T0, 2)))["rows"])
"""
        env = _base_env()
        env.update(AWS_CONTAINER_CREDENTIALS_FULL_URI=f"http://127.0.0.1:{server.server_address[1]}/v2/creds",
                   AWS_CONTAINER_AUTHORIZATION_TOKEN="auth-token-123",
                   AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_CONFIG_FILE=str(tmp_path / "none"),
                   PYTHONPATH=str(Path(__file__).parent))
        out = _child(code, env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split()[-1] == "6"
        assert ("/v2/creds", "auth-token-123") in _ContainerCredentials.seen
        assert SECRET not in out.stdout + out.stderr
    finally:
        server.shutdown()


def test_virtual_hosted_addressing_reaches_the_same_bucket(s3_server, s3_bucket):
    """`aws_virtual_hosted_style_request=true` puts the bucket in the host name
    (<bucket>.localhost:<port>, which resolves to 127.0.0.1 and which moto reads as a virtual-hosted
    request); what it writes is what path-style addressing reads, and the other way round."""
    port = s3_server.endpoint.rsplit(":", 1)[1]
    virtual = dict(s3_server.storage_options(), aws_endpoint=f"http://localhost:{port}",
                   aws_virtual_hosted_style_request="true")
    path_style = s3_server.storage_options()
    url = f"s3://{s3_bucket}/lake"
    vlake = timelake.Lake(url, storage_options=virtual)
    t = vlake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(T0, 20)), batch_id="v-1")
    plake = timelake.Lake(url, storage_options=path_style)
    q = "SELECT device_id, count(*) AS n, max(temp) AS hi FROM readings GROUP BY device_id ORDER BY device_id"
    assert sql_rows(plake, q) == sql_rows(vlake, q) == [
        {"device_id": d, "n": 20, "hi": 20.0 + 19 + j / 10} for j, d in enumerate("abc")]
    plake.table("readings").append(iot_table(iot_series(T0 + dt.timedelta(hours=5), 5)))
    assert vlake.table("readings").append(iot_table(iot_series(T0, 20)), batch_id="v-1")["duplicate"]
    assert vlake.latest("readings").num_rows == 3
    assert sql_rows(vlake, "SELECT count(*) AS n FROM readings") == [{"n": 75}]
    assert vlake.table("readings").maintain()["partitions_compacted"] == 1  # T0's day: two files
    assert sql_rows(plake, "SELECT count(*) AS n FROM readings") == [{"n": 75}]


# ---------------------------------------------------------------------------- Azure alone

def test_azure_connection_string_reaches_the_lake_and_is_never_shown(azure_server, azure_container):
    """`azure_storage_connection_string` (AccountName, AccountKey, BlobEndpoint) opens the same
    lake the separate options do; its key appears in no repr and no error; a malformed one is a
    ValueError that does not repeat it."""
    url = f"az://{azure_container}/lake"
    timelake.Lake(url, storage_options=azure_server.storage_options()).create_table(
        "readings", IOT_SCHEMA, series_key=["device_id"]).append(iot_table(iot_series(T0, 4)))
    conn = (f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={azure_server.endpoint}/devstoreaccount1;")
    lake = timelake.Lake(url, storage_options={"azure_storage_connection_string": conn,
                                               "allow_http": "true"})
    assert lake.tables() == ["default.readings"]
    assert sql_rows(lake, "SELECT count(*) AS n FROM readings") == [{"n": 12}]
    assert ACCOUNT_KEY not in repr(lake) + lake.location
    wrong_key = base64.b64encode(SECRET.encode() * 2).decode()
    wrong = conn.replace(ACCOUNT_KEY, wrong_key)
    with pytest.raises(RuntimeError, match="access denied") as e:
        timelake.Lake(url, storage_options={"azure_storage_connection_string": wrong,
                                            "allow_http": "true"}).tables()
    assert wrong_key[:16] not in str(e.value)
    with pytest.raises(ValueError, match="connection string") as e:
        timelake.Lake(url, storage_options={"azure_storage_connection_string": f"junk;AccountKey={SECRET}"})
    assert SECRET not in str(e.value)


def test_azure_account_key_from_the_environment(azure_server, azure_container):
    """AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY fill in what storage_options
    leave out, as in delta-rs; options win over the environment."""
    url = f"az://{azure_container}/lake"
    timelake.Lake(url, storage_options=azure_server.storage_options()).create_table(
        "readings", IOT_SCHEMA, series_key=["device_id"])
    only_endpoint = {"azure_storage_endpoint": f"{azure_server.endpoint}/devstoreaccount1",
                     "allow_http": "true"}
    code = CHILD.format(url=url, options=only_endpoint)
    env = dict(_base_env("AZURE_"), AZURE_STORAGE_ACCOUNT_NAME="devstoreaccount1",
               AZURE_STORAGE_ACCOUNT_KEY=ACCOUNT_KEY)
    out = _child(code, env)
    assert out.returncode == 0 and json.loads(out.stdout) == ["default.readings"], out.stderr
    # A wrong key in the environment is overridden by the right one in the options.
    with_key = dict(only_endpoint, azure_storage_account_name="devstoreaccount1",
                    azure_storage_account_key=ACCOUNT_KEY)
    out = _child(CHILD.format(url=url, options=with_key),
                 dict(env, AZURE_STORAGE_ACCOUNT_KEY=base64.b64encode(SECRET.encode()).decode()))
    assert out.returncode == 0 and json.loads(out.stdout) == ["default.readings"], out.stderr
    # And a wrong key in the environment alone is refused, without being shown.
    out = _child(code, dict(env, AZURE_STORAGE_ACCOUNT_KEY="V1JPTkc=" + ACCOUNT_KEY[8:]))
    assert out.returncode != 0 and "access denied" in out.stderr, out.stderr
    assert ACCOUNT_KEY[8:] not in out.stderr
