"""Runs moto's S3 server with its conditional writes made atomic.

moto checks `If-None-Match: *` and `If-Match` and then stores the object in two steps, without a
lock, so two racing conditional PUTs of one key can both succeed (measured: about one round in
250 of 16 racing writers; boto3 with fewer threads rarely hits it). AWS S3 decides conditional
writes atomically, and timelake's commits rely on that, so the test server must too: this wrapper
serialises moto's handling of writes to single keys (PUT, POST, DELETE), then starts moto's own
server with the arguments it was given (`python moto_atomic.py -H 127.0.0.1 -p PORT`). Reads stay
concurrent.
"""

from __future__ import annotations

import sys
import threading

from moto.s3.responses import S3Response
from moto.server import main

_WRITE_LOCK = threading.Lock()
_key_response = S3Response._key_response


def _serialised_key_response(self, request, full_url):  # type: ignore[no-untyped-def]
    if getattr(request, "method", "GET") in ("PUT", "POST", "DELETE"):
        with _WRITE_LOCK:
            return _key_response(self, request, full_url)
    return _key_response(self, request, full_url)


S3Response._key_response = _serialised_key_response

if __name__ == "__main__":
    main(sys.argv[1:])
