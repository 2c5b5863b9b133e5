#!/usr/bin/env bash
# Prometheus and promtool for the monitoring files in deploy/prometheus/ and their tests: Debian's `prometheus`
# package, unpacked (not installed) into the cache, so no root is needed and nothing system-wide changes.
# Idempotent: returns at once when both programs are on PATH or already unpacked. Prints the bin folder last.
#   bash scripts/install_prometheus.sh         then: PATH="$(bash scripts/install_prometheus.sh | tail -1):$PATH"
# Takes no arguments (-h: this text). ERNIE_DEPLOY_PARSE_ONLY=1: exit 0, or 2 given an argument, before anything
# is downloaded or written.
set -euo pipefail
if [ $# -gt 0 ]; then
  case "$1" in
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "install_prometheus.sh: takes no arguments, given: $*" >&2; exit 2 ;;
  esac
fi
[ "${ERNIE_DEPLOY_PARSE_ONLY:-}" != 1 ] || exit 0
CACHE="${ERNIE_DEPLOY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ernie-deploy}"
DEST="$CACHE/tools/prometheus"  # the package's tree: $DEST/usr/bin/{prometheus,promtool}
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  dirname "$(command -v promtool)"
  exit 0
fi
if [ -x "$DEST/usr/bin/prometheus" ] && [ -x "$DEST/usr/bin/promtool" ]; then
  echo "$DEST/usr/bin"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
  echo "error: prometheus and promtool are not on PATH, and this machine has no apt-get/dpkg to fetch Debian's" >&2
  echo "fix: install Prometheus 2.x (https://prometheus.io/download/) so both are on PATH, then run this again" >&2
  exit 2
fi
echo "==> fetching Debian's prometheus package into $DEST" >&2
mkdir -p "$CACHE/tools"
work="$(mktemp -d "$CACHE/tools/.prometheus.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# apt-get download needs the package lists; a fresh container has none until `apt-get update` (root only).
if ! (cd "$work" && apt-get download -q prometheus >&2); then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q >&2
    (cd "$work" && apt-get download -q prometheus >&2)
  else
    echo "error: apt-get download prometheus failed (no package lists?)" >&2
    echo "fix: run 'sudo apt-get update' once, or install prometheus so it is on PATH, then run this again" >&2
    exit 2
  fi
fi
dpkg -x "$work"/prometheus_*.deb "$work/tree"
"$work/tree/usr/bin/promtool" --version >/dev/null
# One rename makes it appear whole; a concurrent run that got there first wins and this copy is dropped.
mv -T "$work/tree" "$DEST" 2>/dev/null || [ -x "$DEST/usr/bin/promtool" ]
echo "$DEST/usr/bin"
