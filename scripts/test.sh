#!/usr/bin/env bash
# The whole test suite, integration tests against a real tritonserver included.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not integration"`.
set -euo pipefail
source "$(dirname "$0")/_env.sh"
exec python -m pytest "$@"
