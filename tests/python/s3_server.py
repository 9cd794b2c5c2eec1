"""An S3 server for tests and benchmarks: moto's `moto_server`, run as a child process on 127.0.0.1.

Nothing here uses timelake: the S3 store is tested against this, so this must not depend on it.

    server = S3Server.from_env_or_start()   # the server in TIMELAKE_TEST_S3_ENDPOINT, or a new one
    bucket = server.create_bucket()         # a fresh, empty bucket (signed boto3 call)
    lake = timelake.Lake(f"s3://{bucket}/warehouse", storage_options=server.storage_options())
    server.stop()                           # stops the process if this object started it

`S3Server` is also a context manager. In pytest use the `s3_server` and `s3_bucket` fixtures
(conftest.py). As a program it keeps a server up until it gets SIGTERM or SIGINT, for scripts that
need one (scripts/test.sh, benchmarks):

    python tests/python/s3_server.py [--endpoint-file FILE]

prints `TIMELAKE_TEST_S3_ENDPOINT=http://127.0.0.1:PORT` once the server answers, and also stops
when the process that started it dies.

moto accepts any credentials and does not check signatures against its own host name, but it
does want requests signed (an unsigned GET is refused), so buckets are created with boto3.
"""

from __future__ import annotations

import argparse
import ctypes
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

ENDPOINT_VARIABLE = "TIMELAKE_TEST_S3_ENDPOINT"

# moto takes any key pair; these only have to be the same for every client of one server.
ACCESS_KEY_ID = "timelake-test-key"
SECRET_ACCESS_KEY = "timelake-test-secret"
REGION = "us-east-1"

START_TIMEOUT_S = 60.0  # moto imports a lot; on two busy cores it has taken ~10 s
STOP_GRACE_S = 5.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the kernel's pick for port 0).

    Another process may take it before the caller binds it; callers that start a server on it
    retry with a new port if the server fails to start."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def answers_http(endpoint: str, timeout_s: float = 1.0) -> bool:
    """True if something at `endpoint` (http://host:port) answers an HTTP request, any status."""
    url = urlparse(endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
    try:
        conn.request("HEAD", "/")
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


def moto_server_command() -> list[str]:
    """moto's server with atomic conditional writes (tests/servers/moto_atomic.py), run by this
    interpreter (the venv's, which has moto)."""
    return [sys.executable, str(Path(__file__).resolve().parents[1] / "servers" / "moto_atomic.py")]


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGTERM it when the thread that started it dies,
    so a killed test run (pytest or test.sh's server) does not leave moto behind. Linux only."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class S3Server:
    """An S3 endpoint for tests: either a moto_server this object started (and stops), or one
    somebody else runs (named by TIMELAKE_TEST_S3_ENDPOINT), which `stop` leaves alone.

    Thread-safe for `create_bucket` and `client`; `stop` once, from the owner."""

    def __init__(self, endpoint: str, process: subprocess.Popen | None = None,
                 log_path: Path | None = None):
        self.endpoint = endpoint.rstrip("/")
        self.process = process
        self.log_path = log_path
        self.access_key_id = ACCESS_KEY_ID
        self.secret_access_key = SECRET_ACCESS_KEY
        self.region = REGION

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def start(cls, host: str = "127.0.0.1", port: int | None = None,
              timeout_s: float = START_TIMEOUT_S, attempts: int = 3) -> "S3Server":
        """Starts `moto_server -H host -p port` (a free port unless given) and returns once it
        answers HTTP. Retries on a new port if the server exits early (the port was taken
        between choosing and binding it). RuntimeError with the server's log if it never
        answers.

        The server gets SIGTERM when the thread that called `start` ends (Linux's parent-death
        signal, so a killed test run leaves no server behind): call it from a thread that
        outlives the server, such as the main thread."""
        last_error = ""
        for _ in range(attempts if port is None else 1):
            chosen = port if port is not None else free_port(host)
            endpoint = f"http://{host}:{chosen}"
            fd, log_name = tempfile.mkstemp(prefix="moto-server-", suffix=".log")
            with os.fdopen(fd, "wb") as log:
                # The log is a file, not a pipe: moto logs every request and would block on a
                # pipe nobody reads.
                process = subprocess.Popen(
                    [*moto_server_command(), "-H", host, "-p", str(chosen)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent)
            server = cls(endpoint, process, Path(log_name))
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    break
                if answers_http(endpoint):
                    return server
                time.sleep(0.1)
            last_error = (f"moto_server on {endpoint} "
                          + (f"exited with {process.returncode}" if process.poll() is not None
                             else f"did not answer within {timeout_s:.0f} s")
                          + f"; its log ({log_name}):\n{server.log_tail()}")
            server.stop()
        raise RuntimeError(last_error)

    @classmethod
    def from_env(cls) -> "S3Server | None":
        """The server named by TIMELAKE_TEST_S3_ENDPOINT (not owned: `stop` leaves it running),
        or None when the variable is unset or empty."""
        endpoint = os.environ.get(ENDPOINT_VARIABLE, "").strip()
        return cls(endpoint) if endpoint else None

    @classmethod
    def from_env_or_start(cls) -> "S3Server":
        """The server named by TIMELAKE_TEST_S3_ENDPOINT if set, else a new moto_server."""
        return cls.from_env() or cls.start()

    @property
    def owned(self) -> bool:
        """True if this object started the server (and `stop` ends it)."""
        return self.process is not None

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Ends the server if this object started it: SIGTERM, then SIGKILL after `grace_s`.
        Removes its log. A no-op for a server named by the environment, and when called twice."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process is not None and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> "S3Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tail(self, limit: int = 4000) -> str:
        """The end of the server's output, for error messages ("" if not started here)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[-limit:].decode("utf-8", "replace")

    # -- clients -----------------------------------------------------------------------------

    def storage_options(self, endpoint: str | None = None) -> dict[str, str]:
        """timelake `storage_options` for this server, or for `endpoint` (a proxy in front of
        it) when given."""
        return {
            "aws_endpoint": endpoint or self.endpoint,
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key,
            "aws_region": self.region,
            "aws_allow_http": "true",
        }

    def client(self, endpoint: str | None = None, retries: int = 0, connect_timeout_s: float = 5,
               read_timeout_s: float = 30):
        """A boto3 S3 client for this server, or for `endpoint` (a proxy in front of it).

        `retries` is how many times botocore may retry (0: every failure reaches the caller);
        path-style addressing, so the Host header is the endpoint's host:port."""
        import boto3
        from botocore.config import Config

        config = Config(
            retries={"total_max_attempts": retries + 1, "mode": "standard"},
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            s3={"addressing_style": "path"},
        )
        return boto3.session.Session().client(
            "s3", endpoint_url=endpoint or self.endpoint, region_name=self.region,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key, config=config)

    def create_bucket(self, name: str | None = None) -> str:
        """Creates bucket `name` (a fresh unique name if None) with a signed request; returns
        the name."""
        name = name or f"tl-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name)
        return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run moto_server on 127.0.0.1 until SIGTERM/SIGINT (for scripts/test.sh "
                    "and benchmarks).")
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--endpoint-file", type=Path,
                        help="write the endpoint URL here once the server answers")
    args = parser.parse_args(argv)

    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stopping.set())
    parent = os.getppid()
    server = S3Server.start(port=args.port)
    try:
        if args.endpoint_file:
            tmp = args.endpoint_file.with_suffix(".tmp")
            tmp.write_text(server.endpoint + "\n")
            tmp.replace(args.endpoint_file)  # readers never see half a URL
        print(f"{ENDPOINT_VARIABLE}={server.endpoint}", flush=True)
        while not stopping.is_set() and os.getppid() == parent:  # also stop when orphaned
            if server.process.poll() is not None:
                print(f"moto_server exited with {server.process.returncode}:\n"
                      f"{server.log_tail()}", file=sys.stderr)
                return 1
            stopping.wait(0.5)
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
