#!/usr/bin/env bash
# Serve models/ (what scripts/quickstart.sh or scripts/convert.sh built) on 127.0.0.1 until Ctrl-C.
#
#   bash scripts/serve.sh                  # tritonserver on 127.0.0.1:8000 (HTTP), 8001 (gRPC), 8002 (metrics)
#   bash scripts/serve.sh other_models     # another repository; extra flags go to `ernie-deploy serve`
#   bash scripts/serve.sh --gateway        # models/ with these flags of `ernie-deploy serve`
#
# ERNIE_DEPLOY_PARSE_ONLY=1: check the arguments (the flags with `ernie-deploy serve`'s parser), then exit 0 when
# they are fine, 2 when not, 3 when .venv is not made yet, before making .venv or starting anything.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
  -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
  ""|-*) repository=models ;;
  *) repository="$1"; shift ;;
esac
if [ "${ERNIE_DEPLOY_PARSE_ONLY:-}" = 1 ]; then
  source "$ROOT/scripts/_parse_only.sh"
  parse_with ernie_deploy.cli.parse_only serve --repository "$repository" "$@"
  exit 0
fi
source "$ROOT/scripts/_env.sh"
if ! compgen -G "$repository/*/config.pbtxt" > /dev/null; then
  echo "serve.sh: no models in $repository/; build them first: bash scripts/quickstart.sh (or scripts/convert.sh)" >&2
  exit 2
fi
# One client command per served model, from the tasks its ensembles record (pair and multi-label models too).
clients=$(python - "$repository" <<'PY'
import sys

from ernie_deploy.core.tasks import DEMO_MODELS
from ernie_deploy.repository.served import served_models

for name, spec in served_models(sys.argv[1]).items():
    model = "" if name == DEMO_MODELS[spec.task] else f" --model {name}"
    print(f"      python clients/{spec.task}_grpc_client.py{model}   # {name}: its test split, scored")
PY
)
cat <<MSG
==> serving $repository/ on 127.0.0.1 (Ctrl-C stops it). Once it says ready, in another shell:
      cd $ROOT && source .venv/bin/activate
      python clients/seq_cls_grpc_client.py --text "姚明缺阵火箭不敌湖人"
      python clients/token_cls_grpc_client.py --text "江泽民主席在北京会见了联合国秘书长。"
$clients
MSG
exec ernie-deploy serve --repository "$repository" "$@"
