#!/usr/bin/env bash
# Sets up timelake on a fresh Debian 12 machine and runs the demo:
#   system packages (compiler, CMake, Ninja, RapidJSON, OpenSSL, GoogleTest),
#   a virtual environment .venv at the repository root with timelake and its test tools,
#   the storage emulators the tests start (Azurite, fake-gcs-server) in .tools/,
#   then `python -m timelake.demo` on a local lake (skip it with --no-demo).
# --only-emulators installs the emulators and nothing else. Every step skips what is already
# there, so running it again is quick.
set -euo pipefail
cd "$(dirname "$0")/.."

run_demo=1
only_emulators=0
for arg in "$@"; do
  case "$arg" in
    --no-demo) run_demo=0 ;;
    --only-emulators) only_emulators=1 ;;
    *) echo "usage: scripts/setup.sh [--no-demo] [--only-emulators]" >&2; exit 2 ;;
  esac
done

# Pinned emulator versions (tests/python/azure_server.py and gcs_server.py run them from .tools/).
AZURITE_VERSION=3.37.0
FAKE_GCS_SERVER_VERSION=v1.56.1
NODE_MIN_MAJOR=20   # Azurite 3.37 declares Node >= 22 but runs on 20 (tested with 20.20)
GO_MIN=1.26         # fake-gcs-server v1.56.1's go.mod says `go 1.26`

apt_install() {
  local sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "$@" >/dev/null
}

# Azurite (Azure Blob emulator), an npm package, into .tools/azurite.
install_azurite() {
  local installed
  installed=$(sed -n '/^ *"version":/{s/^ *"version": *"\([^"]*\)".*/\1/p;q}' \
              .tools/azurite/node_modules/azurite/package.json 2>/dev/null || true)
  if [ "$installed" = "$AZURITE_VERSION" ] && [ -x .tools/azurite/node_modules/.bin/azurite-blob ]; then
    echo "==> Azurite $AZURITE_VERSION: already in .tools/azurite"
    return
  fi
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "==> installing Node.js and npm (for Azurite)"
    apt_install nodejs npm
  fi
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  if ((major < NODE_MIN_MAJOR)); then
    echo "Azurite needs Node.js >= $NODE_MIN_MAJOR, and this machine has $(node --version)." >&2
    echo "Install a newer Node.js (e.g. from https://github.com/nodesource/distributions)," \
         "then run scripts/setup.sh again." >&2
    exit 1
  fi
  echo "==> installing Azurite $AZURITE_VERSION into .tools/azurite${installed:+ (replacing $installed)}"
  mkdir -p .tools/azurite
  npm install --prefix .tools/azurite --no-audit --no-fund --save-exact --loglevel=error \
    "azurite@$AZURITE_VERSION" >/dev/null
}

# fake-gcs-server (GCS emulator), a Go program, into .tools/bin. Go's module and build caches stay
# where Go keeps them (go env GOMODCACHE GOCACHE), so a reinstall is quick.
install_fake_gcs_server() {
  local binary=.tools/bin/fake-gcs-server built=""
  if [ -x "$binary" ] && command -v go >/dev/null; then
    # The module line of the build info: "<tab>mod<tab>github.com/fsouza/fake-gcs-server<tab>v1.56.1<tab>h1:…"
    built=$(go version -m "$binary" 2>/dev/null | awk '$1 == "mod" { print $3 }' || true)
  fi
  if [ "$built" = "$FAKE_GCS_SERVER_VERSION" ]; then
    echo "==> fake-gcs-server $FAKE_GCS_SERVER_VERSION: already in .tools/bin"
    return
  fi
  if ! command -v go >/dev/null; then
    echo "fake-gcs-server $FAKE_GCS_SERVER_VERSION is built from source and needs Go >= $GO_MIN," \
         "which is not on PATH. Debian 12's golang package is 1.19, too old: install Go from" \
         "https://go.dev/dl/ (e.g. into /usr/local/go, with /usr/local/go/bin on PATH), then run" \
         "scripts/setup.sh again." >&2
    exit 1
  fi
  local have
  have=$(go env GOVERSION)  # go1.26.8
  if ! printf '%s\n%s\n' go1.21 "$have" | sort -V -C; then
    echo "Go $have is too old to build fake-gcs-server $FAKE_GCS_SERVER_VERSION (it needs Go >= $GO_MIN," \
         "or Go >= 1.21 to fetch that toolchain itself): install Go from https://go.dev/dl/, then" \
         "run scripts/setup.sh again." >&2
    exit 1
  fi
  if ! printf '%s\n%s\n' "go$GO_MIN" "$have" | sort -V -C; then
    # Go >= 1.21 fetches the toolchain the module asks for (through the Go module proxy).
    echo "==> Go $have is older than $GO_MIN: letting it fetch the toolchain fake-gcs-server needs"
    export GOTOOLCHAIN=auto
  fi
  echo "==> installing fake-gcs-server $FAKE_GCS_SERVER_VERSION into .tools/bin${built:+ (replacing $built)}"
  mkdir -p .tools/bin
  GOBIN="$PWD/.tools/bin" go install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_SERVER_VERSION"
}

install_emulators() {
  install_azurite
  install_fake_gcs_server
}

if ((only_emulators)); then
  install_emulators
  exit 0
fi

packages=(build-essential cmake ninja-build ccache rapidjson-dev libssl-dev libcurl4-openssl-dev libexpat1-dev
          libgtest-dev python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Java for the Spark interop tests (pyspark 4.1 runs on Java 17).
command -v java > /dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
if ((${#missing[@]})); then
  echo "==> installing system packages: ${missing[*]}"
  apt_install "${missing[@]}"
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
install_emulators
echo "==> fetching Spark's Delta jars from Maven Central (once; the Spark tests start a session with them)"
mkdir -p .tools
if ! SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python scripts/spark_session.py 2> .tools/spark-setup.log; then
  cat .tools/spark-setup.log >&2
  echo "setup: starting Spark with Delta failed (log above)" >&2
  exit 1
fi

if ((run_demo)); then
  echo "==> running the demo"
  .venv/bin/python -m timelake.demo --lake ./demo-lake
fi
