"""The `timelake` command, run as a real process (python -m timelake)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import IOT_SCHEMA, T0, iot_series, iot_table


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "timelake", *args], capture_output=True, text=True, timeout=120)


def test_cli_lists_tables_and_prints_info(lake, lake_path):
    t = lake.create_table("iot.readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(T0, 3)))
    out = run("tables", str(lake_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["iot.readings"]
    info = json.loads(run("info", str(lake_path), "iot.readings").stdout)
    assert info["size"]["rows"] == 9
    assert info["contract"]["series_key"] == ["device_id"]


def test_cli_runs_sql_and_latest(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(T0, 3)))
    out = run("sql", str(lake_path), "SELECT device_id, count(*) AS n FROM readings GROUP BY 1 ORDER BY 1")
    assert out.returncode == 0, out.stderr
    assert "(3 rows)" in out.stdout and "a " in out.stdout
    out = run("latest", str(lake_path), "readings")
    assert out.returncode == 0, out.stderr
    assert "(3 rows)" in out.stdout


def test_cli_maintain_reports_what_it_did(lake, lake_path):
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    for i in range(3):
        t.append(iot_table(iot_series(T0, 1, devices=(f"d{i}",))))
    out = run("maintain", str(lake_path), "readings")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["files_rewritten"] == 3


def test_cli_reports_a_missing_table_as_an_error(lake, lake_path):
    out = run("info", str(lake_path), "nope")
    assert out.returncode == 1
    assert "KeyError" in out.stderr and "nope" in out.stderr


def test_cli_works_on_an_s3_lake_with_options_and_environment(s3_server, s3_bucket):
    import os

    import timelake

    url = f"s3://{s3_bucket}/lake"
    options = s3_server.storage_options()
    lake = timelake.Lake(url, storage_options=options)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    for i in range(3):
        t.append(iot_table(iot_series(T0, 4)), batch_id=f"b{i}")
    # Endpoint and region as options, the key pair from the environment (where secrets belong).
    flags = [a for key in ("aws_endpoint", "aws_region", "aws_allow_http") for a in ("-o", f"{key}={options[key]}")]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=options["aws_access_key_id"],
               AWS_SECRET_ACCESS_KEY=options["aws_secret_access_key"])

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "timelake", *args], capture_output=True, text=True,
                              timeout=120, env=env)

    out = cli("tables", url, *flags)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["default.readings"]
    out = cli("sql", url, "SELECT count(*) AS n FROM readings", *flags)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[2] == "36"  # three appends of 4 rows for each of 3 devices
    out = cli("latest", url, "readings", *flags)
    assert out.returncode == 0, out.stderr
    assert "(3 rows)" in out.stdout
    out = cli("maintain", url, "readings", *flags)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["files_rewritten"] == 3
    info = json.loads(cli("info", url, "readings", *flags).stdout)
    assert info["size"]["files"] == 1
    # A malformed option is a clear error that does not echo what was given.
    out = cli("tables", url, "-o", "s3cr3t")
    assert out.returncode == 1 and "KEY=VALUE" in out.stderr and "s3cr3t" not in out.stderr
    # An unknown key names the key.
    out = cli("tables", url, "-o", "aws_regoin=x")
    assert out.returncode == 1 and "aws_regoin" in out.stderr


def test_cli_works_on_an_azure_lake_with_the_key_in_the_environment(azure_server, azure_container):
    import os

    import timelake

    url = f"az://{azure_container}/lake"
    options = azure_server.storage_options()
    lake = timelake.Lake(url, storage_options=options)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    for i in range(2):
        t.append(iot_table(iot_series(T0, 4)), batch_id=f"b{i}")
    # The account and endpoint as options, the key from the environment, as delta-rs reads it.
    flags = [a for key in ("azure_storage_account_name", "azure_storage_endpoint", "allow_http")
             for a in ("-o", f"{key}={options[key]}")]
    env = dict(os.environ, AZURE_STORAGE_ACCOUNT_KEY=options["azure_storage_account_key"])

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "timelake", *args], capture_output=True, text=True,
                              timeout=120, env=env)

    out = cli("sql", url, "SELECT count(*) AS n FROM readings", *flags)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[2] == "24"
    out = cli("latest", url, "readings", *flags)
    assert out.returncode == 0, out.stderr
    assert "(3 rows)" in out.stdout
    out = cli("maintain", url, "readings", *flags)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["files_rewritten"] == 2
    # Without the key the account refuses, and the error says to check the credentials.
    env.pop("AZURE_STORAGE_ACCOUNT_KEY")
    env["AZURE_STORAGE_ACCOUNT_KEY"] = "d3Jvbmcga2V5"  # base64 of "wrong key"
    out = cli("tables", url, *flags)
    assert out.returncode == 1 and "credentials" in out.stderr and "d3Jvbmcga2V5" not in out.stderr


def test_cli_works_on_a_gcs_lake_with_options_and_environment(gcs_server, gcs_bucket):
    import os

    import timelake

    url = f"gs://{gcs_bucket}/lake"
    options = gcs_server.storage_options()
    lake = timelake.Lake(url, storage_options=options)
    t = lake.create_table("readings", IOT_SCHEMA, series_key=["device_id"])
    t.append(iot_table(iot_series(T0, 5)), batch_id="b0")
    # The base URL from the environment (GOOGLE_BASE_URL, as delta-rs reads it), the rest as options.
    flags = [a for key in ("google_skip_signature", "allow_http") for a in ("-o", f"{key}={options[key]}")]
    env = dict(os.environ, GOOGLE_BASE_URL=options["google_base_url"])
    out = subprocess.run([sys.executable, "-m", "timelake", "sql", url, "SELECT count(*) AS n FROM readings", *flags],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[2] == "15"
    out = subprocess.run([sys.executable, "-m", "timelake", "info", url, "readings", *flags],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["size"]["rows"] == 15


def test_openssl_users_load_in_any_order_with_timelake():
    # libparquet from the pyarrow wheel carries its own copy of OpenSSL's symbols; timelake (whose
    # HTTP client loads the system OpenSSL) once let that copy capture the system library's calls,
    # and Python's hashlib crashed the process when imported after timelake (as duckdb does).
    orders = [
        "import timelake, hashlib, hmac, ssl; hashlib.sha256(b'x').hexdigest(); ssl.create_default_context()",
        "import pyarrow.parquet, timelake, hashlib; hashlib.md5(b'x').hexdigest()",
        "import hashlib, timelake, pyarrow.parquet; import ssl; ssl.create_default_context()",
    ]
    for code in orders:
        out = subprocess.run([sys.executable, "-c", code + "; print('ok')"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == "ok", (code, out.returncode, out.stderr[-2000:])
