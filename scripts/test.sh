#!/usr/bin/env bash
# Runs every test: the C++ unit tests (GoogleTest via CTest) and the Python tests (pytest).
# Needs scripts/setup.sh to have run once. Rebuilds what changed first.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  echo "no .venv here: run scripts/setup.sh first" >&2
  exit 1
fi
jobs=${JOBS:-2}

# The S3 server the tests use (moto, with atomic conditional writes: tests/servers/moto_atomic.py),
# on a free port of 127.0.0.1, stopped when this script ends however it ends.
if [ -z "${TIMELAKE_TEST_S3_ENDPOINT:-}" ]; then
  port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  .venv/bin/python tests/servers/moto_atomic.py -H 127.0.0.1 -p "$port" >"${TMPDIR:-/tmp}/timelake-moto-$port.log" 2>&1 &
  moto_pid=$!
  trap 'kill $moto_pid 2>/dev/null; sleep 1; kill -9 $moto_pid 2>/dev/null || true' EXIT
  export TIMELAKE_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
  for _ in $(seq 100); do
    if .venv/bin/python -c "import urllib.request as u; u.urlopen('$TIMELAKE_TEST_S3_ENDPOINT/moto-api/', timeout=1)" 2>/dev/null; then break; fi
    sleep 0.2
  done
  echo "==> S3 test server (moto) at $TIMELAKE_TEST_S3_ENDPOINT"
fi

echo "==> C++ unit tests"
cmake -S . -B build/cpp -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIMELAKE_TESTS=ON \
  -DTIMELAKE_PYTHON=OFF -DTIMELAKE_WERROR=ON -DPython_EXECUTABLE="$PWD/.venv/bin/python" >/dev/null
ninja -C build/cpp -j "$jobs" timelake_tests
ctest --test-dir build/cpp --output-on-failure -j "$jobs"

echo "==> Python package (incremental rebuild)"
.venv/bin/python -m pip install -q --no-build-isolation --no-deps .

echo "==> Python tests"
.venv/bin/python -m pytest tests/python -q "$@"
