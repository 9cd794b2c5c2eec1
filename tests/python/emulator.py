"""What the Azure and GCS test servers (azure_server.py, gcs_server.py) share: running an emulator
from the repository's `.tools/` as a child process on 127.0.0.1, or naming one somebody else runs.

Nothing here uses timelake: the object stores are tested against these servers, so these must not
depend on them. Standard library only.

An `EmulatorServer` subclass says which program to run (`command`), how to tell that it is up and
that it is the emulator answering (`is_ready`), and which environment variable names a server
already running (`ENDPOINT_VARIABLE`). The lifecycle is that of s3_server.py: a free port, a retry
on a new port when the emulator loses it to another process, SIGTERM when the thread that started
it ends (Linux's parent-death signal), SIGTERM then SIGKILL on `stop`.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from s3_server import free_port

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools"  # scripts/setup.sh installs the emulators here (gitignored)

STOP_GRACE_S = 5.0


def die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGTERM it when the thread that started it dies,
    so a killed test run leaves no emulator behind. Linux only."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def tool(relative: str, what: str) -> Path:
    """The executable `.tools/<relative>`; RuntimeError naming scripts/setup.sh if it is not
    there."""
    path = TOOLS / relative
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{what} is not installed: no executable {path}. Run scripts/setup.sh "
                           f"(or `scripts/setup.sh --only-emulators`) to install it.")
    return path


class EmulatorServer:
    """A storage emulator for tests: either one this object started (and `stop` ends), or one
    somebody else runs (named by ENDPOINT_VARIABLE), which `stop` leaves alone.

    Subclasses set NAME, ENDPOINT_VARIABLE and START_TIMEOUT_S and define `command` and
    `is_ready`. Thread-safe for the request methods of subclasses; `stop` once, from the owner."""

    NAME = "emulator"
    ENDPOINT_VARIABLE = ""
    START_TIMEOUT_S = 60.0

    def __init__(self, endpoint: str, process: subprocess.Popen | None = None,
                 log_path: Path | None = None):
        self.endpoint = endpoint.rstrip("/")
        self.process = process
        self.log_path = log_path

    # -- what a subclass defines -------------------------------------------------------------

    @classmethod
    def command(cls, host: str, port: int) -> list[str]:
        """The program and arguments that serve on host:port until SIGTERM."""
        raise NotImplementedError

    @classmethod
    def is_ready(cls, endpoint: str) -> bool:
        """True once the emulator answers at `endpoint` (and it is this emulator that answers,
        not some other server that holds the port)."""
        raise NotImplementedError

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def start(cls, host: str = "127.0.0.1", port: int | None = None,
              timeout_s: float | None = None, attempts: int = 3):
        """Starts the emulator on host:port (a free port unless given) and returns once it
        answers. Retries on a new port if the emulator exits early (the port was taken between
        choosing and binding it). RuntimeError with the emulator's log if it never answers.

        The emulator gets SIGTERM when the thread that called `start` ends: call it from a thread
        that outlives the server, such as the main thread."""
        timeout_s = cls.START_TIMEOUT_S if timeout_s is None else timeout_s
        last_error = ""
        for _ in range(attempts if port is None else 1):
            chosen = port if port is not None else free_port(host)
            endpoint = f"http://{host}:{chosen}"
            argv = cls.command(host, chosen)  # RuntimeError if the emulator is not installed
            fd, log_name = tempfile.mkstemp(prefix=f"{cls.NAME}-server-", suffix=".log")
            with os.fdopen(fd, "wb") as log:
                # A file, not a pipe: an emulator that logs requests would block on a full pipe.
                process = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    cwd=tempfile.gettempdir(), preexec_fn=die_with_parent)
            server = cls(endpoint, process, Path(log_name))
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and process.poll() is None:
                if cls.is_ready(endpoint) and process.poll() is None:
                    return server
                time.sleep(0.1)
            last_error = (f"{cls.NAME} on {endpoint} ({' '.join(argv)}) "
                          + (f"exited with {process.returncode}" if process.poll() is not None
                             else f"did not answer within {timeout_s:.0f} s")
                          + f"; its log ({log_name}):\n{server.log_tail()}")
            server.stop()
        raise RuntimeError(last_error)

    @classmethod
    def from_env(cls):
        """The server named by ENDPOINT_VARIABLE (not owned: `stop` leaves it running), or None
        when the variable is unset or empty."""
        endpoint = os.environ.get(cls.ENDPOINT_VARIABLE, "").strip()
        return cls(endpoint) if endpoint else None

    @classmethod
    def from_env_or_start(cls):
        """The server named by ENDPOINT_VARIABLE if set, else a new one."""
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

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tail(self, limit: int = 4000) -> str:
        """The end of the server's output, for error messages ("" if not started here)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[-limit:].decode("utf-8", "replace")

    # -- program mode ------------------------------------------------------------------------

    @classmethod
    def main(cls, argv: list[str] | None = None) -> int:
        """Serves until SIGTERM/SIGINT/SIGHUP or until the parent process dies; prints
        `VARIABLE=endpoint` (and writes the endpoint to --endpoint-file) once it answers."""
        parser = argparse.ArgumentParser(
            description=f"Run {cls.NAME} on 127.0.0.1 until SIGTERM/SIGINT (for scripts/test.sh "
                        "and benchmarks).")
        parser.add_argument("--port", type=int, default=None, help="default: a free port")
        parser.add_argument("--endpoint-file", type=Path,
                            help="write the endpoint URL here once the server answers")
        args = parser.parse_args(argv)

        stopping = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: stopping.set())
        parent = os.getppid()
        server = cls.start(port=args.port)
        try:
            if args.endpoint_file:
                tmp = args.endpoint_file.with_suffix(".tmp")
                tmp.write_text(server.endpoint + "\n")
                tmp.replace(args.endpoint_file)  # readers never see half a URL
            print(f"{cls.ENDPOINT_VARIABLE}={server.endpoint}", flush=True)
            while not stopping.is_set() and os.getppid() == parent:  # also stop when orphaned
                if server.process.poll() is not None:
                    print(f"{cls.NAME} exited with {server.process.returncode}:\n"
                          f"{server.log_tail()}", file=sys.stderr)
                    return 1
                stopping.wait(0.5)
            return 0
        finally:
            server.stop()
