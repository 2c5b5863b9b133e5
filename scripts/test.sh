#!/usr/bin/env bash
# The whole test suite, integration tests against a real tritonserver included, after the lint and format checks.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not integration"`.
# ERNIE_DEPLOY_PARSE_ONLY=1: exit 0 at once, before making .venv: pytest, which takes the arguments, checks them.
set -euo pipefail
[ "${ERNIE_DEPLOY_PARSE_ONLY:-}" != 1 ] || exit 0
EXTRAS=dev source "$(dirname "$0")/_env.sh"
echo "==> ruff check and ruff format --check"
ruff check .
ruff format --check .
echo "==> Prometheus and promtool (Debian's package, unpacked once into the cache)"
bash scripts/install_prometheus.sh >/dev/null
exec python -m pytest "$@"
