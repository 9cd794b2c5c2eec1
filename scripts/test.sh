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

echo "==> C++ unit tests"
cmake -S . -B build/cpp -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIMELAKE_TESTS=ON \
  -DTIMELAKE_PYTHON=OFF -DTIMELAKE_WERROR=ON -DPython_EXECUTABLE="$PWD/.venv/bin/python" >/dev/null
ninja -C build/cpp -j "$jobs" timelake_tests
ctest --test-dir build/cpp --output-on-failure -j "$jobs"

echo "==> Python package (incremental rebuild)"
.venv/bin/python -m pip install -q --no-build-isolation --no-deps .

echo "==> Python tests"
.venv/bin/python -m pytest tests/python -q "$@"
