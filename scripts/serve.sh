#!/usr/bin/env bash
# Serve models/ (what scripts/quickstart.sh or scripts/convert.sh built) on 127.0.0.1 until Ctrl-C.
#
#   bash scripts/serve.sh                  # tritonserver on 127.0.0.1:8000 (HTTP), 8001 (gRPC), 8002 (metrics)
#   bash scripts/serve.sh other_models     # another repository; extra flags go to `ernie-deploy serve`
set -euo pipefail
source "$(dirname "$0")/_env.sh"
repository="${1:-models}"
[ $# -gt 0 ] && shift
if ! compgen -G "$repository/*/config.pbtxt" > /dev/null; then
  echo "serve.sh: no models in $repository/; build them first: bash scripts/quickstart.sh (or scripts/convert.sh)" >&2
  exit 2
fi
# One client command per served model, from the tasks its ensembles record (pair and multi-label models too).
clients=$(python - "$repository" <<'PY'
import sys

from ernie_deploy.core.tasks import get_task
from ernie_deploy.repository.build import served_models

for name, task in served_models(sys.argv[1]).items():
    model = "" if name == get_task(task.name).ensemble else f" --model {name}"
    print(f"      python clients/{task.name}_grpc_client.py{model}   # {name}: its test split, scored")
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
