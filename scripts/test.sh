#!/usr/bin/env bash
# Runs every test: the C++ unit tests (GoogleTest via CTest) and the Python tests (pytest).
# Needs scripts/setup.sh to have run once. Rebuilds what changed first.
# Starts the servers the tests need and stops them when it exits, whether the tests pass or not:
#   S3 (moto)                  named to the tests by TIMELAKE_TEST_S3_ENDPOINT
#   Azure Blob (Azurite)       TIMELAKE_TEST_AZURE_ENDPOINT
#   GCS (fake-gcs-server)      TIMELAKE_TEST_GCS_ENDPOINT
# A variable already set is used as it is and that server is not started. Azurite and
# fake-gcs-server come from .tools/ (scripts/setup.sh installs them). TIMELAKE_TEST_STORES=local,s3
# narrows the store kinds the lake tests run on (docs/testing.md); all of them run by default.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  echo "no .venv here: run scripts/setup.sh first" >&2
  exit 1
fi
jobs=${JOBS:-2}

servers_dir=$(mktemp -d)
server_pids=()
stop_servers() {
  local pid
  for pid in "${server_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true  # the wrapper stops its server, then exits
  done
  for pid in "${server_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$servers_dir"
}
trap stop_servers EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server NAME VARIABLE COMMAND...: runs COMMAND (which writes its endpoint to the file
# given after --endpoint-file, then serves until SIGTERM) and exports VARIABLE=endpoint.
start_server() {
  local name=$1 variable=$2
  shift 2
  local file="$servers_dir/$name.endpoint"
  "$@" --endpoint-file "$file" >"$servers_dir/$name.log" 2>&1 &
  server_pids+=($!)
  local waited=0
  until [ -s "$file" ]; do
    if ! kill -0 "${server_pids[-1]}" 2>/dev/null || ((waited >= 900)); then
      echo "the $name server did not start; its output:" >&2
      cat "$servers_dir/$name.log" >&2
      exit 1
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  export "$variable=$(cat "$file")"
  echo "    $name: ${!variable}"
}

# start_server_unless_given NAME VARIABLE COMMAND...: start_server, unless VARIABLE is set already.
start_server_unless_given() {
  local name=$1 variable=$2
  if [ -n "${!variable:-}" ]; then
    echo "    $name: ${!variable} (given)"
  else
    start_server "$@"
  fi
}

echo "==> test servers"
start_server_unless_given s3 TIMELAKE_TEST_S3_ENDPOINT .venv/bin/python tests/python/s3_server.py
start_server_unless_given azure TIMELAKE_TEST_AZURE_ENDPOINT .venv/bin/python tests/python/azure_server.py
start_server_unless_given gcs TIMELAKE_TEST_GCS_ENDPOINT .venv/bin/python tests/python/gcs_server.py

echo "==> C++ unit tests"
cmake -S . -B build/cpp -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIMELAKE_TESTS=ON \
  -DTIMELAKE_PYTHON=OFF -DTIMELAKE_WERROR=ON -DPython_EXECUTABLE="$PWD/.venv/bin/python" >/dev/null
ninja -C build/cpp -j "$jobs" timelake_tests
ctest --test-dir build/cpp --output-on-failure -j "$jobs"

echo "==> Python package (incremental rebuild)"
.venv/bin/python -m pip install -q --no-build-isolation --no-deps .

echo "==> Python tests"
.venv/bin/python -m pytest tests/python -q -rs "$@"  # -rs: every skip prints its reason
