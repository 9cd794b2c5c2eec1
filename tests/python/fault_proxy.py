"""FaultProxy: an HTTP/1.1 reverse proxy on 127.0.0.1 that injects the failures S3 clients meet.

Put it between a client and an S3 server (moto, see s3_server.py) and tell it which requests to
fail and how. Everything else is forwarded unchanged, Host header included: a client signs
(SigV4) for the proxy's host:port, and the server sees exactly the headers that were signed.

    with FaultProxy(server.endpoint) as proxy:            # threads in this process
        client = server.client(endpoint=proxy.endpoint)
        proxy.add_rule("slow_down", count=3, method="PUT")
        ...
        assert proxy.counts()["slow_down"] == 3

Fault kinds (KINDS):
  internal_error       answer 500 InternalError without forwarding (`forward=True`: forward
                       first, so the request takes effect, and answer the error anyway)
  service_unavailable  the same with 503 ServiceUnavailable
  slow_down            the same with 503 SlowDown
  drop_request         close the connection without forwarding or answering (nothing landed)
  lost_reply           forward (the write lands), then close without answering
  cut_body             forward, send the reply's headers and `keep_bytes` of its body (default
                       half, at most all but one byte), then close; a reply without a body (a
                       PUT's, a HEAD's) is cut inside its status line instead, since clients
                       take headers that end at a close for complete ones
  delay                forward, hold the reply `delay_s` seconds (default 40), then send it;
                       with `forward_late=True` hold first, then forward (the write lands late,
                       after the client has given up)
Closing sends a FIN; `rst=True` sends a TCP reset instead.

Rules (`add_rule`) are tried in the order added; the first one that matches the request (method,
and a regex searched in the request target "path?query") and is armed applies. `after=N` lets
the first N matching requests through; `count=N` faults the next N (None: every one). When no
rule applies, the random mode (`set_random`) faults each matching request with probability p,
with a kind drawn from its list, from one seeded generator (the sequence is repeatable for
requests that arrive in the same order).

Other processes (writer processes of a soak test) steer the same proxy over HTTP with
`FaultControl(proxy.endpoint)`, which has the same methods, or with plain requests under
/__fault__/ (no S3 bucket can be named that):
  POST   /__fault__/rules    {"kind": "slow_down", "count": 3, "method": "PUT", ...}
  DELETE /__fault__/rules
  POST   /__fault__/random   {"p": 0.1, "kinds": ["slow_down", "lost_reply"], "seed": 7, ...}
  DELETE /__fault__/random
  POST   /__fault__/reset    (rules, random mode and counters)
  GET    /__fault__/stats    {"connections", "requests", "forwarded", "upstream_errors",
                              "injected": {kind: n}, "log": [{"kind", "method", "target"}, ...]}

Connections from clients are kept alive; each forwarded request opens its own connection to the
server (closed after the reply), so a fault never leaves a half-used upstream connection.
Run alone: `python tests/python/fault_proxy.py --upstream http://127.0.0.1:PORT`.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import random
import re
import signal
import socket
import socketserver
import struct
import sys
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlparse

CONTROL_PREFIX = "/__fault__"

# kind -> (status, reason, S3 error code, message) for the kinds answered with an error.
ERROR_REPLIES = {
    "internal_error": (500, "Internal Server Error", "InternalError",
                       "We encountered an internal error. Please try again."),
    "service_unavailable": (503, "Service Unavailable", "ServiceUnavailable",
                            "Service is unable to handle request."),
    "slow_down": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
}
KINDS = (*ERROR_REPLIES, "drop_request", "lost_reply", "cut_body", "delay")

# Connection-level headers, not passed through (RFC 9110 7.6.1); framing is redone per hop.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
              "trailer", "upgrade", "proxy-authenticate", "proxy-authorization", "expect",
              "content-length"}

UPSTREAM_TIMEOUT_S = 120.0
IDLE_CLIENT_TIMEOUT_S = 120.0
LOG_LIMIT = 1000
SEEN_LIMIT = 1_000_000


@dataclass
class FaultRule:
    """What to do to which requests. See the module docstring for the kinds."""

    kind: str
    count: int | None = 1         # matching requests faulted; None: all of them
    method: str | None = None     # "PUT", "GET", ... (any case); None: any method
    path: str | None = None       # regex searched in the request target (path?query); None: any
    after: int = 0                # matching requests let through before the first fault
    delay_s: float = 40.0         # delay: how long the reply is held
    forward_late: bool = False    # delay: forward after the delay, not before
    keep_bytes: int | None = None  # cut_body: body bytes sent before the cut; None: half
    forward: bool = False         # error kinds: forward first (the request takes effect)
    rst: bool = False             # closing kinds: reset the connection instead of a FIN

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; kinds are {', '.join(KINDS)}")
        if self.count is not None and self.count < 0:
            raise ValueError(f"count must be >= 0 or None, got {self.count}")
        if self.path is not None:
            re.compile(self.path)  # a bad regex fails here, not in the proxy's threads

    @classmethod
    def from_json(cls, fields: dict) -> "FaultRule":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - names)
        if unknown:
            raise ValueError(f"unknown fault rule fields {unknown}; fields are {sorted(names)}")
        return cls(**fields)

    def matches(self, method: str, target: str) -> bool:
        return ((self.method is None or self.method.upper() == method.upper())
                and (self.path is None or re.search(self.path, target) is not None))


class FaultPlan:
    """The rules, the random mode and the counters of one proxy. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._random: tuple[float, list[FaultRule], random.Random] | None = None
        self._stats = self._zero_stats()
        self._seen: list[tuple[str, str]] = []

    @staticmethod
    def _zero_stats() -> dict:
        return {"connections": 0, "requests": 0, "forwarded": 0, "upstream_errors": 0,
                "injected": {kind: 0 for kind in KINDS}, "log": []}

    def add_rule(self, rule: FaultRule) -> None:
        with self._lock:
            self._rules.append(rule)

    def clear_rules(self) -> None:
        with self._lock:
            self._rules.clear()

    def set_random(self, p: float, kinds: list[str], seed: int = 0, method: str | None = None,
                   path: str | None = None, **params) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"probability p must be in [0, 1], got {p}")
        if not kinds:
            raise ValueError("random faults need at least one kind")
        templates = [FaultRule.from_json({"kind": k, "count": None, "method": method,
                                          "path": path, **params}) for k in kinds]
        with self._lock:
            self._random = (p, templates, random.Random(seed))

    def clear_random(self) -> None:
        with self._lock:
            self._random = None

    def reset(self) -> None:
        with self._lock:
            self._rules.clear()
            self._random = None
            self._stats = self._zero_stats()
            self._seen = []

    def choose(self, method: str, target: str) -> FaultRule | None:
        """The fault for this request, or None to forward it; counts the request and the fault."""
        with self._lock:
            self._stats["requests"] += 1
            self._seen.append((method, target))
            del self._seen[:-SEEN_LIMIT]
            chosen = None
            for rule in self._rules:
                if not rule.matches(method, target):
                    continue
                if rule.after > 0:
                    rule.after -= 1
                    continue
                if rule.count is not None:
                    rule.count -= 1
                chosen = rule
                break
            self._rules = [r for r in self._rules if r.count is None or r.count > 0]
            if chosen is None and self._random is not None:
                p, templates, rng = self._random
                if templates[0].matches(method, target) and rng.random() < p:
                    chosen = rng.choice(templates)
            if chosen is not None:
                self._stats["injected"][chosen.kind] += 1
                log = self._stats["log"]
                log.append({"kind": chosen.kind, "method": method, "target": target})
                del log[:-LOG_LIMIT]
            return chosen

    def note(self, counter: str) -> None:
        with self._lock:
            self._stats[counter] += 1

    def stats(self) -> dict:
        with self._lock:
            return json.loads(json.dumps(self._stats))  # a deep copy

    def seen(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._seen)


class _Reply:
    def __init__(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes,
                 head_length: str | None = None):
        self.status = status
        self.reason = reason
        self.headers = headers          # without hop-by-hop headers and Content-Length
        self.body = body
        self.head_length = head_length  # the server's Content-Length, for a HEAD reply


def _error_reply(kind: str) -> _Reply:
    status, reason, code, message = ERROR_REPLIES[kind]
    request_id = uuid.uuid4().hex[:16].upper()
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<RequestId>{request_id}</RequestId><HostId>fault-proxy</HostId></Error>").encode()
    return _Reply(status, reason, [("Content-Type", "application/xml"),
                                   ("x-amz-request-id", request_id)], body)


def _json_reply(status: int, value) -> _Reply:
    body = json.dumps(value).encode()
    return _Reply(status, http.client.responses.get(status, ""),
                  [("Content-Type", "application/json")], body)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless the client says Connection: close
    timeout = IDLE_CLIENT_TIMEOUT_S
    server: "_Server"

    def setup(self):
        super().setup()
        self.server.track(self.connection, True)

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass

    def _serve(self):
        try:
            body = self._read_body()
        except (ValueError, OSError):
            self.close_connection = True
            return
        if self.path == CONTROL_PREFIX or self.path.startswith(CONTROL_PREFIX + "/"):
            self._send(self._control(body))
            return
        plan = self.server.plan
        rule = plan.choose(self.command, self.path)
        try:
            if rule is None:
                self._send(self._forward(body))
            elif rule.kind in ERROR_REPLIES:
                if rule.forward:
                    self._forward(body)
                self._send(_error_reply(rule.kind))
            elif rule.kind == "drop_request":
                self._drop(rule.rst)
            elif rule.kind == "lost_reply":
                self._forward(body)
                self._drop(rule.rst)
            elif rule.kind == "cut_body":
                self._send(self._forward(body), cut=True, keep_bytes=rule.keep_bytes)
                self._drop(rule.rst)
            elif rule.kind == "delay":
                reply = None if rule.forward_late else self._forward(body)
                if self.server.stopping.wait(rule.delay_s):
                    self._drop(rule.rst)  # the proxy is stopping: do not forward late
                    return
                self._send(reply or self._forward(body))
        except OSError:
            self.close_connection = True  # the client went away (timed out, say)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = _serve

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self._read_exactly(size))
                self.rfile.readline(3)
        length = int(self.headers.get("Content-Length", "0") or 0)
        return self._read_exactly(length) if length else b""

    def _read_exactly(self, n: int) -> bytes:
        data = self.rfile.read(n)
        if len(data) != n:
            raise ConnectionError(f"request body ended after {len(data)} of {n} bytes")
        return data

    def _forward(self, body: bytes) -> _Reply:
        upstream = self.server.upstream
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port,
                                          timeout=UPSTREAM_TIMEOUT_S)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    conn.putheader(name, value)  # Host too: the signature covers it
            if body or "Content-Length" in self.headers or "Transfer-Encoding" in self.headers:
                conn.putheader("Content-Length", str(len(body)))
            conn.putheader("Connection", "close")
            conn.endheaders(body or None)
            response = conn.getresponse()
            data = response.read()
            headers = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP]
            reply = _Reply(response.status, response.reason, headers, data,
                           response.getheader("Content-Length"))
            self.server.plan.note("forwarded")
            return reply
        except (OSError, http.client.HTTPException) as e:
            self.server.plan.note("upstream_errors")
            return _Reply(502, "Bad Gateway", [("Content-Type", "text/plain")],
                          f"fault proxy: upstream {upstream.geturl()} failed: {e!r}".encode())
        finally:
            conn.close()

    def _send(self, reply: _Reply, cut: bool = False, keep_bytes: int | None = None) -> None:
        lines = [f"HTTP/1.1 {reply.status} {reply.reason}"]
        lines += [f"{k}: {v}" for k, v in reply.headers]
        body = reply.body
        if self.command == "HEAD":
            if reply.head_length is not None:
                lines.append(f"Content-Length: {reply.head_length}")
            body = b""
        elif reply.status >= 200 and reply.status not in (204, 304):
            lines.append(f"Content-Length: {len(body)}")
        if self.close_connection:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if not cut:
            self.wfile.write(head + body)
        elif body:
            keep = len(body) // 2 if keep_bytes is None else keep_bytes
            self.wfile.write(head + body[:max(0, min(keep, len(body) - 1))])
        else:
            self.wfile.write(head[:5])  # "HTTP/": a cut header block might pass for a whole one

    def _drop(self, rst: bool) -> None:
        """Ends the connection now, without (more of) a reply."""
        self.close_connection = True
        if rst:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.server.mark_reset(self.connection)
        else:
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _control(self, body: bytes) -> _Reply:
        plan = self.server.plan
        op = (self.command, self.path[len(CONTROL_PREFIX):].rstrip("/"))
        try:
            fields = json.loads(body) if body else {}
            if op == ("POST", "/rules"):
                plan.add_rule(FaultRule.from_json(fields))
            elif op == ("DELETE", "/rules"):
                plan.clear_rules()
            elif op == ("POST", "/random"):
                plan.set_random(**fields)
            elif op == ("DELETE", "/random"):
                plan.clear_random()
            elif op == ("POST", "/reset"):
                plan.reset()
            elif op in (("GET", "/stats"), ("GET", "")):
                return _json_reply(200, plan.stats())
            else:
                return _json_reply(404, {"error": f"no control operation {op[0]} "
                                                  f"{self.path}; see fault_proxy.py"})
        except (ValueError, TypeError, re.error) as e:
            return _json_reply(400, {"error": str(e)})
        return _json_reply(200, {"ok": True})


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = False
    block_on_close = True  # server_close() joins the handler threads
    request_queue_size = 128

    def __init__(self, address, upstream: str, plan: FaultPlan):
        self.upstream = urlparse(upstream)
        self.plan = plan
        self.stopping = threading.Event()
        self._open: set[socket.socket] = set()
        self._reset: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, _Handler)

    def track(self, sock: socket.socket, is_open: bool) -> None:
        with self._open_lock:
            if is_open:
                self._open.add(sock)
            else:
                self._open.discard(sock)
        if is_open:
            self.plan.note("connections")

    def mark_reset(self, sock: socket.socket) -> None:
        with self._open_lock:
            self._reset.add(sock)

    def shutdown_request(self, request):
        with self._open_lock:
            reset = request in self._reset
            self._reset.discard(request)
        if reset:
            self.close_request(request)  # no FIN first: SO_LINGER 0 makes close() a reset
        else:
            super().shutdown_request(request)

    def close_open_connections(self) -> None:
        with self._open_lock:
            socks = list(self._open)
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class FaultProxy:
    """A fault-injecting reverse proxy to `upstream` (http://host:port), served by threads of
    this process on host:port (port 0: a free one). Methods may be called from any thread."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0):
        self.upstream = upstream.rstrip("/")
        self._plan = FaultPlan()
        self._server = _Server((host, port), self.upstream, self._plan)
        self._thread: threading.Thread | None = None
        self._stopped = False
        bound_host, bound_port = self._server.server_address[:2]
        self.endpoint = f"http://{bound_host}:{bound_port}"

    def start(self) -> "FaultProxy":
        """Starts serving (once; a stopped proxy does not start again)."""
        if self._stopped or self._thread is not None:
            raise RuntimeError(f"fault proxy {self.endpoint} was already started")
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=f"fault-proxy {self.endpoint}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops accepting, wakes delayed replies, closes client connections and waits for the
        handler threads; closes the listening socket even if never started. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._server.stopping.set()
        if self._thread is not None:
            self._server.shutdown()
        self._server.close_open_connections()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def add_rule(self, kind: str, count: int | None = 1, **fields) -> None:
        """Faults `count` matching requests with `kind`; fields as FaultRule's (method, path,
        after, delay_s, forward_late, keep_bytes, forward, rst)."""
        self._plan.add_rule(FaultRule(kind=kind, count=count, **fields))

    def clear_rules(self) -> None:
        self._plan.clear_rules()

    def set_random(self, p: float, kinds: list[str], seed: int = 0, method: str | None = None,
                   path: str | None = None, **params) -> None:
        """Each matching request no rule claims gets a fault with probability `p`, its kind drawn
        from `kinds`; `params` are FaultRule fields for the faults (delay_s, keep_bytes, ...)."""
        self._plan.set_random(p, list(kinds), seed, method, path, **params)

    def clear_random(self) -> None:
        self._plan.clear_random()

    def reset(self) -> None:
        """No rules, no random mode, counters at zero."""
        self._plan.reset()

    def stats(self) -> dict:
        """connections, requests, forwarded, upstream_errors, injected {kind: n}, and a log of
        the last faults [{kind, method, target}]."""
        return self._plan.stats()

    def seen(self) -> list[tuple[str, str]]:
        """(method, target) of every request since the start or the last reset (the last
        SEEN_LIMIT), in arrival order: what request-count tests count."""
        return self._plan.seen()

    def counts(self) -> dict[str, int]:
        """Injected faults by kind (every kind present)."""
        return self.stats()["injected"]


class FaultControl:
    """Steers a FaultProxy running elsewhere (another process) through its control endpoint.
    The same methods as FaultProxy's; errors come back as RuntimeError with the proxy's text."""

    def __init__(self, endpoint: str, timeout_s: float = 10.0):
        self.endpoint = endpoint.rstrip("/")
        self._url = urlparse(self.endpoint)
        self._timeout_s = timeout_s

    def _call(self, method: str, op: str, fields: dict | None = None):
        conn = http.client.HTTPConnection(self._url.hostname, self._url.port,
                                          timeout=self._timeout_s)
        try:
            body = json.dumps(fields).encode() if fields is not None else None
            conn.request(method, f"{CONTROL_PREFIX}/{op}", body=body,
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            value = json.loads(response.read() or b"null")
            if response.status != 200:
                raise RuntimeError(f"fault proxy {self.endpoint}: {method} {op} answered "
                                   f"{response.status}: {value}")
            return value
        finally:
            conn.close()

    def add_rule(self, kind: str, count: int | None = 1, **fields) -> None:
        self._call("POST", "rules", {"kind": kind, "count": count, **fields})

    def clear_rules(self) -> None:
        self._call("DELETE", "rules")

    def set_random(self, p: float, kinds: list[str], seed: int = 0, method: str | None = None,
                   path: str | None = None, **params) -> None:
        self._call("POST", "random", {"p": p, "kinds": list(kinds), "seed": seed,
                                      "method": method, "path": path, **params})

    def clear_random(self) -> None:
        self._call("DELETE", "random")

    def reset(self) -> None:
        self._call("POST", "reset", {})

    def stats(self) -> dict:
        return self._call("GET", "stats")

    def counts(self) -> dict[str, int]:
        return self.stats()["injected"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a FaultProxy until SIGTERM/SIGINT.")
    parser.add_argument("--upstream", required=True, help="http://host:port of the S3 server")
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    parser.add_argument("--endpoint-file", type=Path,
                        help="write the proxy's endpoint URL here once it listens")
    args = parser.parse_args(argv)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stopping.set())
    with FaultProxy(args.upstream, port=args.port) as proxy:
        if args.endpoint_file:
            tmp = args.endpoint_file.with_suffix(".tmp")
            tmp.write_text(proxy.endpoint + "\n")
            tmp.replace(args.endpoint_file)
        print(f"fault proxy {proxy.endpoint} -> {proxy.upstream}", flush=True)
        parent = os.getppid()
        while not stopping.wait(0.5) and os.getppid() == parent:  # also stop when orphaned
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
