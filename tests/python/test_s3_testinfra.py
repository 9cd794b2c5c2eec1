"""The S3 test infrastructure itself: the moto server (s3_server.py) and the fault-injecting proxy
(fault_proxy.py), driven with boto3 and http.client, never with timelake.

The S3 store's tests trust that a fault armed on the proxy reaches the client as the failure it
names, and that everything else passes through untouched; these tests check exactly that.
botocore's retries are off (retries=0) unless a test is about them, so each fault is seen."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest
from botocore.exceptions import (ClientError, ConnectionClosedError, IncompleteReadError,
                                 ReadTimeoutError, ResponseStreamingError)

from fault_proxy import KINDS, FaultControl, FaultProxy
from s3_server import ENDPOINT_VARIABLE, S3Server, answers_http

HERE = Path(__file__).parent


def client_through(s3_server: S3Server, proxy: FaultProxy, **options):
    return s3_server.client(endpoint=proxy.endpoint, **options)


def exists(client, bucket: str, key: str) -> bool:
    try:
        client.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError as e:
        if e.response["Error"]["Code"] in ("404", "NoSuchKey"):
            return False
        raise


def error_code(error: ClientError) -> str:
    return error.response["Error"]["Code"]


def http_connection(endpoint: str, timeout_s: float = 30) -> http.client.HTTPConnection:
    url = urlparse(endpoint)
    return http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)


def presigned_path(s3_server, proxy, method: str, bucket: str, key: str) -> str:
    """A presigned request target for the proxy (path?query), so plain http.client can send
    signed requests."""
    url = client_through(s3_server, proxy).generate_presigned_url(
        method, Params={"Bucket": bucket, "Key": key}, ExpiresIn=600)
    parsed = urlparse(url)
    return f"{parsed.path}?{parsed.query}"


# -- the server ------------------------------------------------------------------------------


def test_started_server_answers_until_stop_ends_it():
    server = S3Server.start()
    try:
        assert server.owned
        bucket = server.create_bucket()
        assert bucket in [b["Name"] for b in server.client().list_buckets()["Buckets"]]
    finally:
        server.stop()
    assert server.process is None
    assert not answers_http(server.endpoint)


def test_endpoint_variable_names_a_server_that_stop_leaves_running(s3_server, monkeypatch):
    monkeypatch.setenv(ENDPOINT_VARIABLE, s3_server.endpoint + "/")
    named = S3Server.from_env_or_start()
    assert named.endpoint == s3_server.endpoint
    assert not named.owned
    named.stop()
    deadline = time.monotonic() + 30  # polled: one probe can meet a busy server
    while not answers_http(s3_server.endpoint) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert answers_http(s3_server.endpoint)


def test_unset_endpoint_variable_names_no_server(monkeypatch):
    monkeypatch.delenv(ENDPOINT_VARIABLE, raising=False)
    assert S3Server.from_env() is None


def test_storage_options_point_at_the_given_endpoint(s3_server, fault_proxy):
    options = s3_server.storage_options(fault_proxy.endpoint)
    assert options["aws_endpoint"] == fault_proxy.endpoint
    assert options["aws_allow_http"] == "true"
    assert {"aws_access_key_id", "aws_secret_access_key", "aws_region"} <= set(options)


def test_moto_wants_a_signature_but_does_not_check_it(s3_server, s3_bucket):
    """What moto can and cannot catch: a request without Authorization is refused, but any
    signature passes, so SigV4 is checked against AWS's examples and botocore, not against moto."""
    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"hello")
    unsigned = http_connection(s3_server.endpoint)
    unsigned.request("GET", f"/{s3_bucket}/k")
    assert unsigned.getresponse().status == 403
    unsigned.close()
    garbage = http_connection(s3_server.endpoint)
    garbage.request("GET", f"/{s3_bucket}/k", headers={
        "Authorization": "AWS4-HMAC-SHA256 Credential=nobody/20260101/us-east-1/s3/aws4_request, "
                         "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
        "x-amz-date": "20260101T000000Z", "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    response = garbage.getresponse()
    assert (response.status, response.read()) == (200, b"hello")
    garbage.close()


# -- the proxy passes requests through -------------------------------------------------------


def test_proxy_forwards_the_host_header_unchanged():
    seen = {}

    class Recorder(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            seen["host"] = self.headers["Host"]
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    try:
        with FaultProxy(f"http://127.0.0.1:{upstream.server_address[1]}") as proxy:
            conn = http_connection(proxy.endpoint)
            conn.request("GET", "/bucket/key")  # http.client sends Host: the proxy's host:port
            assert conn.getresponse().status == 200
            conn.close()
            assert seen["host"] == urlparse(proxy.endpoint).netloc
    finally:
        upstream.shutdown()
        upstream.server_close()


def test_signed_requests_signed_for_the_proxy_are_accepted_by_the_server(
        s3_server, s3_bucket, fault_proxy):
    client = client_through(s3_server, fault_proxy)
    body = os.urandom(2 << 20)  # large enough for botocore to send Expect: 100-continue
    client.put_object(Bucket=s3_bucket, Key="a/one", Body=body)
    assert client.get_object(Bucket=s3_bucket, Key="a/one")["Body"].read() == body
    ranged = client.get_object(Bucket=s3_bucket, Key="a/one", Range="bytes=10-19")
    assert ranged["Body"].read() == body[10:20]
    assert client.head_object(Bucket=s3_bucket, Key="a/one")["ContentLength"] == len(body)
    listed = client.list_objects_v2(Bucket=s3_bucket, Prefix="a/")
    assert [o["Key"] for o in listed["Contents"]] == ["a/one"]
    client.delete_object(Bucket=s3_bucket, Key="a/one")
    assert not exists(s3_server.client(), s3_bucket, "a/one")
    stats = fault_proxy.stats()
    assert stats["forwarded"] == stats["requests"] == 6
    assert sum(stats["injected"].values()) == 0


def test_second_create_with_if_none_match_is_412_through_the_proxy(
        s3_server, s3_bucket, fault_proxy):
    client = client_through(s3_server, fault_proxy)
    client.put_object(Bucket=s3_bucket, Key="v/0", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as raised:
        client.put_object(Bucket=s3_bucket, Key="v/0", Body=b"second", IfNoneMatch="*")
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert client.get_object(Bucket=s3_bucket, Key="v/0")["Body"].read() == b"first"


def test_chunked_request_body_is_forwarded_whole(s3_server, s3_bucket, fault_proxy):
    target = presigned_path(s3_server, fault_proxy, "put_object", s3_bucket, "chunked")
    conn = http_connection(fault_proxy.endpoint)
    conn.request("PUT", target, body=iter([b"abc", b"defg", b"h"]), encode_chunked=True)
    assert conn.getresponse().status == 200
    conn.close()
    got = s3_server.client().get_object(Bucket=s3_bucket, Key="chunked")["Body"].read()
    assert got == b"abcdefgh"


def test_client_connection_is_kept_alive_across_requests(s3_server, s3_bucket, fault_proxy):
    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"hello")
    target = presigned_path(s3_server, fault_proxy, "get_object", s3_bucket, "k")
    conn = http_connection(fault_proxy.endpoint)
    for _ in range(3):
        conn.request("GET", target)
        response = conn.getresponse()
        assert (response.status, response.read()) == (200, b"hello")
    conn.close()
    assert fault_proxy.stats()["connections"] == 1
    assert fault_proxy.stats()["requests"] == 3


def test_error_fault_keeps_the_connection_alive(s3_server, s3_bucket, fault_proxy):
    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"hello")
    target = presigned_path(s3_server, fault_proxy, "get_object", s3_bucket, "k")
    fault_proxy.add_rule("internal_error")
    conn = http_connection(fault_proxy.endpoint)
    conn.request("GET", target)
    response = conn.getresponse()
    assert response.status == 500
    assert b"<Code>InternalError</Code>" in response.read()
    conn.request("GET", target)
    response = conn.getresponse()
    assert (response.status, response.read()) == (200, b"hello")
    conn.close()
    assert fault_proxy.stats()["connections"] == 1


# -- each fault kind, as a client sees it ----------------------------------------------------


def test_slow_down_burst_is_seen_then_requests_pass(s3_server, s3_bucket, fault_proxy):
    client = client_through(s3_server, fault_proxy)
    fault_proxy.add_rule("slow_down", count=3, method="PUT")
    for _ in range(3):
        with pytest.raises(ClientError) as raised:
            client.put_object(Bucket=s3_bucket, Key="k", Body=b"x")
        assert error_code(raised.value) == "SlowDown"
        assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert not exists(s3_server.client(), s3_bucket, "k")
    client.put_object(Bucket=s3_bucket, Key="k", Body=b"x")
    assert fault_proxy.counts()["slow_down"] == 3


def test_botocore_retries_ride_out_a_slow_down_burst(s3_server, s3_bucket, fault_proxy):
    client = client_through(s3_server, fault_proxy, retries=4)
    fault_proxy.add_rule("slow_down", count=3, method="PUT")
    client.put_object(Bucket=s3_bucket, Key="k", Body=b"x")
    assert fault_proxy.counts()["slow_down"] == 3
    assert exists(s3_server.client(), s3_bucket, "k")


@pytest.mark.parametrize("kind, status, code", [
    ("internal_error", 500, "InternalError"),
    ("service_unavailable", 503, "ServiceUnavailable"),
])
def test_error_fault_answers_its_status_without_forwarding(
        s3_server, s3_bucket, fault_proxy, kind, status, code):
    client = client_through(s3_server, fault_proxy)
    fault_proxy.add_rule(kind, method="PUT")
    with pytest.raises(ClientError) as raised:
        client.put_object(Bucket=s3_bucket, Key="k", Body=b"x")
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert error_code(raised.value) == code
    assert not exists(s3_server.client(), s3_bucket, "k")
    assert fault_proxy.counts()[kind] == 1


def test_error_fault_with_forward_lands_the_write(s3_server, s3_bucket, fault_proxy):
    client = client_through(s3_server, fault_proxy)
    fault_proxy.add_rule("internal_error", method="PUT", forward=True)
    with pytest.raises(ClientError) as raised:
        client.put_object(Bucket=s3_bucket, Key="k", Body=b"landed")
    assert error_code(raised.value) == "InternalError"
    direct = s3_server.client()
    assert direct.get_object(Bucket=s3_bucket, Key="k")["Body"].read() == b"landed"


def test_lost_reply_put_lands_while_the_client_sees_a_connection_error(
        s3_server, s3_bucket, fault_proxy):
    client = client_through(s3_server, fault_proxy)
    fault_proxy.add_rule("lost_reply", method="PUT")
    with pytest.raises(ConnectionClosedError):
        client.put_object(Bucket=s3_bucket, Key="k", Body=b"landed", IfNoneMatch="*")
    direct = s3_server.client()
    assert direct.get_object(Bucket=s3_bucket, Key="k")["Body"].read() == b"landed"
    with pytest.raises(ClientError) as raised:  # the retry a client would make: "exists"
        client.put_object(Bucket=s3_bucket, Key="k", Body=b"landed", IfNoneMatch="*")
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert fault_proxy.counts()["lost_reply"] == 1


def test_dropped_request_does_not_land(s3_server, s3_bucket, fault_proxy):
    client = client_through(s3_server, fault_proxy)
    fault_proxy.add_rule("drop_request", method="PUT")
    with pytest.raises(ConnectionClosedError):
        client.put_object(Bucket=s3_bucket, Key="k", Body=b"x")
    assert not exists(s3_server.client(), s3_bucket, "k")
    assert fault_proxy.counts()["drop_request"] == 1


def test_rst_drop_resets_the_connection(s3_server, s3_bucket, fault_proxy):
    target = presigned_path(s3_server, fault_proxy, "get_object", s3_bucket, "k")
    fault_proxy.add_rule("drop_request", rst=True)
    url = urlparse(fault_proxy.endpoint)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n".encode())
        with pytest.raises(ConnectionResetError):
            while sock.recv(4096):
                pass


def test_mid_body_drop_surfaces_as_an_incomplete_read(s3_server, s3_bucket, fault_proxy):
    body = os.urandom(100_000)
    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=body)
    client = client_through(s3_server, fault_proxy)
    fault_proxy.add_rule("cut_body", method="GET")
    reply = client.get_object(Bucket=s3_bucket, Key="k")  # the headers arrive whole
    assert reply["ContentLength"] == len(body)
    with pytest.raises((ResponseStreamingError, IncompleteReadError)):
        reply["Body"].read()
    assert fault_proxy.counts()["cut_body"] == 1


def test_mid_body_drop_of_a_reply_without_body_is_an_error(s3_server, s3_bucket, fault_proxy):
    client = client_through(s3_server, fault_proxy)
    fault_proxy.add_rule("cut_body", method="PUT")
    with pytest.raises(ConnectionClosedError):
        client.put_object(Bucket=s3_bucket, Key="k", Body=b"landed")
    assert exists(s3_server.client(), s3_bucket, "k")


def test_mid_body_drop_sends_exactly_keep_bytes(s3_server, s3_bucket, fault_proxy):
    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"0123456789")
    target = presigned_path(s3_server, fault_proxy, "get_object", s3_bucket, "k")
    fault_proxy.add_rule("cut_body", keep_bytes=3)
    conn = http_connection(fault_proxy.endpoint)
    conn.request("GET", target)
    response = conn.getresponse()
    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead) as raised:
        response.read()
    assert raised.value.partial == b"012"
    conn.close()


def test_delay_triggers_the_client_read_timeout(s3_server, s3_bucket, fault_proxy):
    s3_server.client().put_object(Bucket=s3_bucket, Key="k", Body=b"x")
    client = client_through(s3_server, fault_proxy, read_timeout_s=1)
    fault_proxy.add_rule("delay", method="GET")  # holds the reply 40 s
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        client.get_object(Bucket=s3_bucket, Key="k")
    assert time.monotonic() - started < 20
    assert fault_proxy.counts()["delay"] == 1


def test_late_forwarded_put_lands_after_the_client_gave_up(s3_server, s3_bucket, fault_proxy):
    client = client_through(s3_server, fault_proxy, read_timeout_s=0.5)
    direct = s3_server.client()  # made first: making a client can take seconds on a busy machine
    # Held 15 s: the checks below that it has not landed yet must come before it does.
    fault_proxy.add_rule("delay", method="PUT", delay_s=15, forward_late=True)
    with pytest.raises(ReadTimeoutError):
        client.put_object(Bucket=s3_bucket, Key="k", Body=b"late")
    assert fault_proxy.stats()["forwarded"] == 0
    assert not exists(direct, s3_bucket, "k")
    deadline = time.monotonic() + 60
    while not exists(direct, s3_bucket, "k"):
        assert time.monotonic() < deadline, "the late PUT never landed"
        time.sleep(0.2)


# -- choosing requests -----------------------------------------------------------------------


def test_rule_matches_method_and_path_and_lets_after_requests_through(
        s3_server, s3_bucket, fault_proxy):
    client = client_through(s3_server, fault_proxy)
    fault_proxy.add_rule("internal_error", count=1, method="PUT", path=r"/_delta_log/", after=1)
    client.put_object(Bucket=s3_bucket, Key="data/part-0", Body=b"x")  # other path
    client.put_object(Bucket=s3_bucket, Key="_delta_log/0.json", Body=b"x")  # the `after` one
    client.get_object(Bucket=s3_bucket, Key="_delta_log/0.json")  # other method
    with pytest.raises(ClientError):
        client.put_object(Bucket=s3_bucket, Key="_delta_log/1.json", Body=b"x")
    client.put_object(Bucket=s3_bucket, Key="_delta_log/1.json", Body=b"x")  # count used up
    assert fault_proxy.counts()["internal_error"] == 1
    assert fault_proxy.stats()["log"] == [
        {"kind": "internal_error", "method": "PUT", "target": f"/{s3_bucket}/_delta_log/1.json"}]


def test_rule_without_count_faults_until_cleared(s3_server, s3_bucket, fault_proxy):
    client = client_through(s3_server, fault_proxy)
    fault_proxy.add_rule("service_unavailable", count=None, method="GET")
    for _ in range(4):
        with pytest.raises(ClientError):
            client.list_objects_v2(Bucket=s3_bucket)
    fault_proxy.clear_rules()
    client.list_objects_v2(Bucket=s3_bucket)
    assert fault_proxy.counts()["service_unavailable"] == 4


def fault_pattern(s3_server, bucket: str, proxy: FaultProxy, n: int) -> list[str]:
    """The error code (or "ok") of n list requests, one after another."""
    client = client_through(s3_server, proxy)
    pattern = []
    for _ in range(n):
        try:
            client.list_objects_v2(Bucket=bucket)
            pattern.append("ok")
        except ClientError as e:
            pattern.append(error_code(e))
    return pattern


def test_random_mode_repeats_its_faults_for_a_seed(s3_server, s3_bucket, fault_proxy):
    fault_proxy.set_random(0.5, ["internal_error", "slow_down"], seed=7)
    first = fault_pattern(s3_server, s3_bucket, fault_proxy, 30)
    counts = fault_proxy.counts()
    fault_proxy.reset()
    fault_proxy.set_random(0.5, ["internal_error", "slow_down"], seed=7)
    assert fault_pattern(s3_server, s3_bucket, fault_proxy, 30) == first
    assert {"ok", "InternalError", "SlowDown"} == set(first)
    assert counts["internal_error"] == first.count("InternalError")
    assert counts["slow_down"] == first.count("SlowDown")


def test_rules_take_precedence_over_random_mode(s3_server, s3_bucket, fault_proxy):
    fault_proxy.set_random(1.0, ["slow_down"])
    fault_proxy.add_rule("internal_error", count=1)
    assert fault_pattern(s3_server, s3_bucket, fault_proxy, 2) == ["InternalError", "SlowDown"]


# -- control from other processes, and stopping ----------------------------------------------


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=HERE,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_another_process_arms_faults_and_reads_the_counts(s3_server, s3_bucket, fault_proxy):
    run_python(f"""
        from fault_proxy import FaultControl
        FaultControl({fault_proxy.endpoint!r}).add_rule("slow_down", count=2, method="PUT")
    """)
    client = client_through(s3_server, fault_proxy)
    for _ in range(2):
        with pytest.raises(ClientError):
            client.put_object(Bucket=s3_bucket, Key="k", Body=b"x")
    client.put_object(Bucket=s3_bucket, Key="k", Body=b"x")
    counts = json.loads(run_python(f"""
        import json
        from fault_proxy import FaultControl
        print(json.dumps(FaultControl({fault_proxy.endpoint!r}).counts()))
    """))
    assert counts == {**{kind: 0 for kind in KINDS}, "slow_down": 2}


def test_control_endpoint_rejects_an_unknown_kind_naming_the_kinds(fault_proxy):
    with pytest.raises(RuntimeError, match="unknown fault kind 'bogus'.*slow_down"):
        FaultControl(fault_proxy.endpoint).add_rule("bogus")


def test_stop_wakes_held_replies_and_leaves_no_thread(s3_server, s3_bucket):
    threads_before = set(threading.enumerate())
    proxy = FaultProxy(s3_server.endpoint).start()
    proxy.add_rule("delay", method="GET")  # 40 s
    outcome = []

    def get():
        try:
            client_through(s3_server, proxy).get_object(Bucket=s3_bucket, Key="k")
        except Exception as e:  # noqa: BLE001 (any transport error will do)
            outcome.append(e)

    getter = threading.Thread(target=get)
    getter.start()
    deadline = time.monotonic() + 30
    while proxy.counts()["delay"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    started = time.monotonic()
    proxy.stop()
    assert time.monotonic() - started < 5
    getter.join(timeout=30)
    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionClosedError)
    assert set(threading.enumerate()) - threads_before == set()


def test_writer_processes_under_random_faults_see_them_and_keep_only_acknowledged_writes(
        s3_server, s3_bucket, fault_proxy):
    """A small soak: three writer processes through one proxy at p=0.5. Every write a writer saw
    acknowledged is on the server, and the proxy counted every kind it was given."""
    kinds = ["internal_error", "slow_down", "lost_reply", "drop_request", "cut_body"]
    fault_proxy.set_random(0.5, kinds, seed=11, method="PUT")
    writer = f"""
        import json, sys
        from botocore.exceptions import BotoCoreError, ClientError
        from s3_server import S3Server
        server = S3Server({s3_server.endpoint!r})
        client = server.client(endpoint={fault_proxy.endpoint!r})
        acknowledged = []
        for i in range(20):
            key = f"w{{sys.argv[1]}}/{{i}}"
            try:
                client.put_object(Bucket={s3_bucket!r}, Key=key, Body=key.encode())
                acknowledged.append(key)
            except (BotoCoreError, ClientError):
                pass
        print(json.dumps(acknowledged))
    """
    processes = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(writer), str(n)],
                                  cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for n in range(3)]
    acknowledged = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        acknowledged += json.loads(out)
    direct = s3_server.client()
    for key in acknowledged:
        assert direct.get_object(Bucket=s3_bucket, Key=key)["Body"].read() == key.encode()
    counts = fault_proxy.counts()
    assert sum(counts.values()) + len(acknowledged) == 60  # one attempt per write
    assert all(counts[kind] > 0 for kind in kinds), counts
