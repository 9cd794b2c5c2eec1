"""S3 lakes beyond what the shared suite checks on them: errors, secrets, credentials from other
sources, and the SQL file cache."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import timelake
from helpers import IOT_SCHEMA, T0, iot_series, iot_table, sql_rows

SECRET = "s3cr3t-VALUE-never-shown"


@pytest.fixture
def s3_lake(s3_server, s3_bucket):
    url = f"s3://{s3_bucket}/lake"
    return url, s3_server.storage_options()


def test_secrets_never_appear_in_repr_location_info_or_errors(s3_server, s3_bucket):
    # moto accepts any key pair, so a made-up secret works and can be searched for everywhere.
    options = dict(s3_server.storage_options(), aws_secret_access_key=SECRET, aws_session_token=SECRET + "-token")
    lake = timelake.Lake(f"s3://{s3_bucket}/lake", storage_options=options)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(T0, 3)))
    shown = [repr(lake), lake.location, repr(t), t.location, json.dumps(t.info(), default=str)]
    errors = []
    for bad in ({"aws_allow_http": "maybe"}, {"timeout": "soon"}, {"aws_conditional_put": "dynamo"},
                {"aws_endpoint": "no-scheme"}, {"max_retries": "lots"}):
        with pytest.raises(ValueError) as e:
            timelake.Lake(f"s3://{s3_bucket}/lake", storage_options=dict(options, **bad))
        errors.append(str(e.value))
        assert next(iter(bad)) in str(e.value)  # names the key
    unreachable = dict(options, aws_endpoint="http://127.0.0.1:9", max_retries="1", retry_timeout="1s")
    with pytest.raises(RuntimeError) as e:
        timelake.Lake(f"s3://{s3_bucket}/lake", storage_options=unreachable).tables()
    errors.append(str(e.value))
    assert "attempts" in str(e.value)
    for text in shown + errors:
        assert SECRET not in text, text


def test_missing_bucket_is_a_clear_error(s3_server):
    lake = timelake.Lake("s3://no-such-bucket-here/lake", storage_options=s3_server.storage_options())
    with pytest.raises(RuntimeError, match="bucket 'no-such-bucket-here' does not exist"):
        lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])


def test_unknown_and_foreign_options_are_value_errors(s3_lake):
    url, options = s3_lake
    with pytest.raises(ValueError, match="aws_regoin"):
        timelake.Lake(url, storage_options=dict(options, aws_regoin="x"))
    with pytest.raises(ValueError, match="azure_storage_account_name"):
        timelake.Lake(url, storage_options=dict(options, azure_storage_account_name="x"))
    with pytest.raises(ValueError, match="aws_secret_access_key"):
        half = dict(options)
        del half["aws_secret_access_key"]
        timelake.Lake(url, storage_options=half)


def _child(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


CHILD = """
import json, sys, timelake
lake = timelake.Lake(sys.argv[1] if len(sys.argv) > 1 else {url!r}, storage_options={options!r})
print(json.dumps(lake.tables()))
"""


def _base_env(s3_server) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = os.environ.get("HOME", "/tmp")
    return env


def test_credentials_from_environment_and_profile_files(s3_server, s3_bucket, tmp_path):
    url = f"s3://{s3_bucket}/lake"
    options = s3_server.storage_options()
    timelake.Lake(url, storage_options=options).create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    without_keys = {k: v for k, v in options.items() if k not in ("aws_access_key_id", "aws_secret_access_key")}
    code = CHILD.format(url=url, options=without_keys)
    env = _base_env(s3_server)
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
        env = _base_env(s3_server)
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


def test_sql_reads_local_copies_and_recovers_a_damaged_cache(s3_lake, tmp_path):
    url, options = s3_lake
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


def test_sql_cannot_read_the_cache_of_another_lake_or_the_log(s3_server, s3_lake):
    url, options = s3_lake
    lake = timelake.Lake(url, storage_options=options)
    lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"]).append(iot_table(iot_series(T0, 5)))
    other_bucket = s3_server.create_bucket()
    other = timelake.Lake(f"s3://{other_bucket}/lake", storage_options=options)
    other.create_table("secret", IOT_SCHEMA, series_key=["device_id"]).append(iot_table(iot_series(T0, 5)))
    sql_rows(other, "SELECT count(*) FROM secret")  # its copies are in the cache now
    other_copy = next(Path(other._core.cache_directory).rglob("*.parquet"))
    sql_rows(lake, "SELECT count(*) FROM readings")
    with pytest.raises((ValueError, RuntimeError)):
        lake.sql(f"SELECT * FROM read_parquet('{other_copy}')")


def _large_day(devices: int = 40, per_device: int = 30000, seed: int = 7):
    """One day of rows for `devices` series, enough for a file of several row groups (≥ 8 MiB)."""
    import numpy as np
    import pyarrow as pa

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
def test_selective_sql_on_a_large_file_fetches_only_the_row_groups_it_needs(s3_lake, tmp_path, dedup):
    url, options = s3_lake
    lake = timelake.Lake(url, storage_options=options)
    local = timelake.Lake(str(tmp_path / "local"))
    data = _large_day()
    for target in (lake, local):
        t = target.create_table("readings", IOT_SCHEMA, series_key=["device_id"], chunk="day", dedup=dedup)
        t.append(data)
        if dedup:  # a second commit rewriting one series: files that overlap, deduplicated at read time
            t.append(data.filter(pa_compute_equal(data, "dev-017")).set_column(
                2, "temp", pa_float_array([99.0] * 30000)))
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


def pa_compute_equal(table, device):
    import pyarrow.compute as pc

    return pc.equal(table["device_id"], device)


def pa_float_array(values):
    import pyarrow as pa

    return pa.array(values, pa.float64())


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


def test_a_failed_multipart_upload_fails_the_append_and_leaves_nothing(s3_server, s3_bucket, fault_proxy):
    """Every part upload of a large data file answers 500: the append is a RuntimeError, nothing
    is committed, the upload is aborted (no data object appears), and the next append works."""
    url = f"s3://{s3_bucket}/lake"
    options = dict(s3_server.storage_options(fault_proxy.endpoint), max_retries="1", retry_timeout="5s")
    lake = timelake.Lake(url, storage_options=options)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"], chunk="day")
    t.append(iot_table(iot_series(T0, 5)))
    version = t.version
    client = s3_server.client()
    def data_objects():
        listing = client.list_objects_v2(Bucket=s3_bucket, Prefix="lake/default/readings/data/")
        return sorted(o["Key"] for o in listing.get("Contents", []))
    before = data_objects()
    fault_proxy.add_rule("internal_error", count=None, method="PUT", path=r"[?&]partNumber=")
    with pytest.raises(RuntimeError, match="HTTP 500"):
        t.append(_large_day())
    faulted = [e for e in fault_proxy.stats()["log"] if e["kind"] == "internal_error"]
    assert faulted and all("partNumber=" in e["target"] for e in faulted)
    fault_proxy.clear_rules()
    assert t.version == version and timelake.Lake(url, storage_options=options).table("readings").version == version
    assert data_objects() == before
    uploads = client.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", [])
    assert uploads == [], "the failed upload must be aborted"
    t.append(_large_day())
    assert sql_rows(lake, "SELECT count(*) AS n FROM readings") == [{"n": 15 + 40 * 30000}]
