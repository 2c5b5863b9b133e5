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
case " $* " in
  *"not integration"*) ;;
  *)
    # The integration tests serve all four bootstrap models: on a machine that has none cached, train them here, two
    # at a time, each on its share of the cores (docs/CONVERT.md#two-models-at-once), instead of one by one inside
    # the suite. Cached ones return at once.
    echo "==> the bootstrap models the integration tests serve (trained on a first run, cached after)"
    python -m ernie_deploy.train.bootstrap seq_cls token_cls pair_cls multi_label
    ;;
esac
exec python -m pytest "$@"
