#!/usr/bin/env bash
# perf_analyzer, Triton's C++ load generator, for `ernie-deploy bench` (its served rows) and its tests.
# Newer PyPI perf-analyzer wheels need glibc 2.38; the `tritonclient==2.41.0` wheel still carries a perf_analyzer
# binary that runs on glibc 2.36 given two libraries: Debian's libb64 (libb64.so.0d) and the CUDA runtime
# (libcudart.so.12, from the nvidia-cuda-runtime-cu12 wheel; no GPU or driver is needed to load it).
# Nothing is installed: both wheels are downloaded (hash-checked, no dependencies) and only the three files are
# taken out of them and out of Debian's package, into the cache, so the project's own tritonclient is untouched:
#   $DEST/libexec/perf_analyzer   the binary
#   $DEST/lib/                    libb64.so.0d, libcudart.so.12
#   $DEST/bin/perf_analyzer       a wrapper that puts lib/ on LD_LIBRARY_PATH and runs the binary
# Exit status 3 when PyPI or the Debian mirrors cannot be reached, 2 for any other failure, each with a fix.
# Idempotent: returns at once when a working perf_analyzer is on PATH or already unpacked. Prints the bin folder
# last.      bash scripts/install_perf_analyzer.sh    then: PATH="$(bash scripts/install_perf_analyzer.sh | tail -1):$PATH"
# Takes no arguments (-h: this text). ERNIE_DEPLOY_PARSE_ONLY=1: exit 0, or 2 given an argument, before anything
# is downloaded or written.
set -euo pipefail
if [ $# -gt 0 ]; then
  case "$1" in
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "install_perf_analyzer.sh: takes no arguments, given: $*" >&2; exit 2 ;;
  esac
fi
[ "${ERNIE_DEPLOY_PARSE_ONLY:-}" != 1 ] || exit 0
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ERNIE_DEPLOY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ernie-deploy}"
DEST="$CACHE/tools/perf_analyzer"
if command -v perf_analyzer >/dev/null 2>&1 && perf_analyzer --version >/dev/null 2>&1; then
  dirname "$(command -v perf_analyzer)"
  exit 0
fi
if [ -x "$DEST/bin/perf_analyzer" ] && "$DEST/bin/perf_analyzer" --version >/dev/null 2>&1; then
  echo "$DEST/bin"
  exit 0
fi
rm -rf "$DEST"  # absent, or unpacked but not starting (an interrupted or foreign copy): unpack again
# Exit 3: a registry (PyPI, the Debian mirrors) could not be reached; exit 2: anything else.
fail() {
  echo "error: $1" >&2
  echo "fix: $2" >&2
  exit "${3:-2}"
}
[ "$(uname -sm)" = "Linux x86_64" ] || fail "perf_analyzer from the tritonclient wheel is built for Linux x86_64 only" \
  "run inside NVIDIA's Triton SDK image (nvcr.io/nvidia/tritonserver:<version>-py3-sdk), where it is on PATH"
PYTHON_BIN="${PYTHON:-}"
if [ -z "$PYTHON_BIN" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON_BIN="$ROOT/.venv/bin/python"; else PYTHON_BIN=python3; fi
fi
"$PYTHON_BIN" -m pip --version >/dev/null 2>&1 || fail "no pip for $PYTHON_BIN (needed to download two wheels)" \
  "set PYTHON to a Python that has pip, e.g. PYTHON=.venv/bin/python bash $0"
command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 || fail \
  "this machine has no apt-get/dpkg to fetch Debian's libb64-0d" \
  "put perf_analyzer on PATH another way (NVIDIA's Triton SDK image has it), then run this again"

echo "==> unpacking perf_analyzer 2.41.0 and its libraries into $DEST" >&2
mkdir -p "$CACHE/tools"
work="$(mktemp -d "$CACHE/tools/.perf_analyzer.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# Pinned by hash: a wheel that changed under the same name is refused.
cat >"$work/requirements.txt" <<'EOF'
tritonclient==2.41.0 --hash=sha256:cf4ed5df836fa99937678a9fd852f86ba05c7b83656dd0a540e20afdb9ab4629
nvidia-cuda-runtime-cu12==12.9.79 --hash=sha256:25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3
EOF
"$PYTHON_BIN" -m pip download -q --no-deps --only-binary=:all: --require-hashes \
  --platform manylinux2014_x86_64 -r "$work/requirements.txt" -d "$work/wheels" >&2 ||
  fail "could not download tritonclient 2.41.0 and nvidia-cuda-runtime-cu12 12.9.79 from PyPI" \
    "check that PyPI is reachable (pip's index settings, a proxy), then run this again" 3
# apt-get download needs the package lists; a fresh container has none until `apt-get update` (root only).
if ! (cd "$work" && apt-get download -q libb64-0d >&2 2>/dev/null); then
  [ "$(id -u)" = 0 ] || fail "apt-get download libb64-0d failed (no package lists?)" \
    "run 'sudo apt-get update' once, then run this again"
  apt-get update -q >&2 || fail "apt-get update failed" "check that the Debian mirrors are reachable, then run this again" 3
  (cd "$work" && apt-get download -q libb64-0d >&2) || fail "apt-get download libb64-0d failed" \
    "check that the Debian mirrors are reachable and carry libb64-0d, then run this again" 3
fi
tree="$work/tree"
mkdir -p "$tree/bin" "$tree/lib" "$tree/libexec"
"$PYTHON_BIN" - "$work/wheels" "$tree" <<'EOF' || fail "the wheels do not hold the files expected (see above)" \
  "report it; meanwhile run inside NVIDIA's Triton SDK image, where perf_analyzer is on PATH"
import shutil, sys, zipfile
from pathlib import Path

wheels, tree = Path(sys.argv[1]), Path(sys.argv[2])
wanted = {
    "tritonclient-2.41.0.data/data/bin/perf_analyzer": tree / "libexec" / "perf_analyzer",
    "nvidia/cuda_runtime/lib/libcudart.so.12": tree / "lib" / "libcudart.so.12",
}
for wheel in wheels.glob("*.whl"):
    with zipfile.ZipFile(wheel) as archive:
        for name in set(archive.namelist()) & wanted.keys():
            with archive.open(name) as src, open(wanted.pop(name), "wb") as dst:
                shutil.copyfileobj(src, dst)
if wanted:
    sys.exit(f"not found in the wheels: {sorted(wanted)}")
EOF
dpkg -x "$work"/libb64-0d_*.deb "$work/deb"
cp "$work"/deb/usr/lib/*/libb64.so.0d "$tree/lib/"
chmod 755 "$tree/libexec/perf_analyzer"
cat >"$tree/bin/perf_analyzer" <<'EOF'
#!/bin/sh
# perf_analyzer 2.41.0 (from the tritonclient wheel) with the libraries it was unpacked with.
here="$(cd "$(dirname "$0")/.." && pwd)"
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/libexec/perf_analyzer" "$@"
EOF
chmod 755 "$tree/bin/perf_analyzer"
"$tree/bin/perf_analyzer" --version >&2 || fail "the unpacked perf_analyzer does not start (see above)" \
  "run inside NVIDIA's Triton SDK image (nvcr.io/nvidia/tritonserver:<version>-py3-sdk), where it is on PATH"
# One rename makes it appear whole; a concurrent run that got there first wins and this copy is dropped.
mv -T "$tree" "$DEST" 2>/dev/null || [ -x "$DEST/bin/perf_analyzer" ]
echo "$DEST/bin"
