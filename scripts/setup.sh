#!/usr/bin/env bash
# Sets up timelake on a fresh Debian 12 machine and runs the demo:
#   system packages (compiler, CMake, Ninja, RapidJSON, OpenSSL, GoogleTest),
#   a virtual environment .venv at the repository root with timelake and its test tools,
#   then `python -m timelake.demo` on a local lake (skip it with --no-demo).
set -euo pipefail
cd "$(dirname "$0")/.."

run_demo=1
for arg in "$@"; do
  case "$arg" in
    --no-demo) run_demo=0 ;;
    *) echo "usage: scripts/setup.sh [--no-demo]" >&2; exit 2 ;;
  esac
done

packages=(build-essential cmake ninja-build ccache rapidjson-dev libssl-dev libcurl4-openssl-dev libexpat1-dev
          libgtest-dev python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "==> installing system packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if [ -x .venv/bin/python ] && ! .venv/bin/python -m pip --version > /dev/null 2>&1; then
  echo "==> .venv is incomplete (an interrupted setup?): making it again"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
echo "==> installing Python packages"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements-dev.txt
echo "==> building and installing timelake"
.venv/bin/python -m pip install -q --no-build-isolation --no-deps .
.venv/bin/python -c "import timelake; print('timelake', timelake.__version__, 'installed in .venv')"

if ((run_demo)); then
  echo "==> running the demo"
  .venv/bin/python -m timelake.demo --lake ./demo-lake
fi
