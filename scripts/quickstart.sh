#!/usr/bin/env bash
# The main job end to end on a fresh machine: install, data, model, convert, serve, measure, stop.
# It serves the demo models that ship with the repository (demo/, sha256-checked): nothing trains unless asked.
# Arguments go to scripts/convert.sh, e.g. `--train` trains the demo models here with the recipes that made the shipped
# ones, `--budget 20` trains each for up to 20 minutes instead;
# `--task T` (repeatable) runs those tasks instead of the two demo models, `--all-tasks` every task kind. Any argument
# builds into artifacts/models/, leaving the committed demo repository models/ as it is.
# It refuses a Python outside setup.cfg's python_requires, or too little free disk, before it installs anything
# (scripts/_env.sh). Its stage timings and scores go to artifacts/reports/quickstart.json.
# ERNIE_DEPLOY_PARSE_ONLY=1: check the arguments and exit (0 fine, 2 not), before making .venv or writing anything.
set -euo pipefail
start_all=$SECONDS
start_epoch=$(date +%s)
invocation="bash scripts/quickstart.sh${*:+ $*}"
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "")
elapsed() { local s=$((SECONDS - start_all)); printf '%d:%02d' $((s / 60)) $((s % 60)); }
stage() { echo; echo "==> [$(elapsed)] $1"; stage_start=$SECONDS; }
timings=() stage_names=() stage_seconds=()
done_stage() {
  timings+=("$(printf '%-34s %4ds' "$1" $((SECONDS - stage_start)))")
  stage_names+=("$1") stage_seconds+=($((SECONDS - stage_start)))
  echo "==> [$(elapsed)] $1: done in $((SECONDS - stage_start))s"
}

tasks=() convert_args=() all_tasks=0
while [ $# -gt 0 ]; do
  case "$1" in
    --task) [ $# -ge 2 ] || { echo "quickstart.sh: --task needs a value" >&2; exit 2; }; tasks+=("$2"); shift 2 ;;
    --all-tasks) all_tasks=1; shift ;;
    --repository) echo "quickstart.sh: --repository is not taken here: the quickstart builds models/ (the demo models)" \
      "or artifacts/models/ (any argument); for another folder use scripts/convert.sh --repository DIR" >&2; exit 2 ;;
    --model|--source|--sha256) echo "quickstart.sh: $1 is for a checkpoint of your own, which scripts/convert.sh" \
      "takes: scripts/convert.sh --task T --model NAME --source DIR" >&2; exit 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) convert_args+=("$1"); shift ;;
  esac
done
if [ "${ERNIE_DEPLOY_PARSE_ONLY:-}" = 1 ]; then
  task_args=()
  for task in "${tasks[@]}"; do task_args+=(--task "$task"); done
  exec bash "$(dirname "$0")/convert.sh" "${task_args[@]}" --repository artifacts/models "${convert_args[@]}"
fi

cat <<'MSG'
ernie-deploy quickstart: the two demo models that ship with the repository (demo/), converted, served and scored.
`--train` trains them on this machine first, with the recipes that made them (docs/CONVERT.md#the-demo-models says
how long that took); `--budget MINUTES` trains each for that long instead.
MSG

stage "install (.venv, pip install -e .[export,serve])"
source "$(dirname "$0")/_env.sh"
done_stage "install"

[ $all_tasks -eq 0 ] || read -r -a tasks <<< "$(python -c 'from ernie_deploy.core.tasks import TASKS; print(*TASKS)')"
read -r -a demo_tasks <<< "$(python -c 'from ernie_deploy.core.tasks import DEFAULT_TASKS; print(*DEFAULT_TASKS)')"
[ ${#tasks[@]} -gt 0 ] || tasks=("${demo_tasks[@]}")
# models/ is the committed demo repository (a test keeps it equal to what `build` makes of the demo models): the
# plain demo run rebuilds it unchanged; any other choice of tasks, and any convert option (a training budget, INT8,
# ...), whose configs record other facts, builds its own repository under artifacts/ (ignored).
repository=models
[ "${tasks[*]}" = "${demo_tasks[*]}" ] && [ ${#convert_args[@]} -eq 0 ] || repository=artifacts/models
task_args=()
for task in "${tasks[@]}"; do task_args+=(--task "$task"); done

stage "convert: data, demo models (shipped, or trained if asked), export, ONNX, parity, repository"
bash scripts/convert.sh "${task_args[@]}" --repository "$repository" "${convert_args[@]}"
done_stage "convert (scripts/convert.sh)"

mkdir -p artifacts/reports
for task in "${tasks[@]}"; do
  stage "offline $task score: Paddle and ONNX"
  ernie-deploy eval --task "$task" --report "artifacts/reports/${task}_offline.json"
  done_stage "offline eval $task"
done

stage "serve $repository/ (tritonserver on 127.0.0.1)"
http_port=${HTTP_PORT:-8000} grpc_port=${GRPC_PORT:-8001} metrics_port=${METRICS_PORT:-8002}
ernie-deploy serve --repository "$repository" --http-port "$http_port" --grpc-port "$grpc_port" \
  --metrics-port "$metrics_port" \
  > artifacts/reports/server.log 2>&1 &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true' EXIT
ready() { python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
  "http://127.0.0.1:$http_port/v2/health/ready" 2>/dev/null; }
for _ in $(seq 1 120); do
  if ready; then break; fi
  if ! kill -0 $server_pid 2>/dev/null; then cat artifacts/reports/server.log; echo "server exited" >&2; exit 1; fi
  sleep 1
done
ready || { tail -50 artifacts/reports/server.log; exit 1; }
# One text through each ensemble: the check a container's liveness probe runs (deploy/k8s).
ernie-deploy probe --http-url "http://127.0.0.1:$http_port"
done_stage "server start"

for task in "${tasks[@]}"; do
  stage "served $task score over gRPC (clients/${task}_grpc_client.py)"
  python "clients/${task}_grpc_client.py" --grpc-url "127.0.0.1:$grpc_port" --report "artifacts/reports/${task}_served.json"
  done_stage "served eval $task (gRPC client)"
done
if [[ " ${tasks[*]} " == *" token_cls "* ]]; then
  python clients/token_cls_grpc_client.py --grpc-url "127.0.0.1:$grpc_port" --text "江泽民主席在北京会见了联合国秘书长。"
fi

stage "stop server"
kill -TERM $server_pid; wait $server_pid 2>/dev/null || true; trap - EXIT
done_stage "server stop"

echo
echo "==> stage timings"
printf '%s\n' "${timings[@]}"
printf '%-34s %4ds\n' "total" $((SECONDS - start_all))
stage_json=$(for i in "${!stage_names[@]}"; do printf '%s\t%s\n' "${stage_names[$i]}" "${stage_seconds[$i]}"; done)
python - "$invocation" "$start_epoch" "$((SECONDS - start_all))" "$load_start" "$stage_json" "${tasks[@]}" <<'PY'
import json
import os
import sys
import time
from pathlib import Path

invocation, start, total, load_start, stage_lines = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:6]
tasks = sys.argv[6:]
record = {
    "command": invocation,
    "total_s": total,
    "stages_s": {name: int(s) for name, s in (line.split("\t") for line in stage_lines.splitlines() if line)},
    "load_average": {"start": load_start, "end": " ".join(open("/proc/loadavg").read().split()[:3])},
    "cores": os.cpu_count(),
    "training_s": {},
    "scores": {},
}
# Inside convert: the bootstrap training each model took, where it was trained by this run (else it came cached).
for task in tasks:
    meta_file = Path(f"artifacts/checkpoints/{task}/bootstrap.json")
    if meta_file.is_file():
        meta = json.loads(meta_file.read_text())
        created = time.mktime(time.strptime(meta["created"][:19], "%Y-%m-%dT%H:%M:%S"))
        if created >= start:
            record["training_s"][task] = round(meta["timings_s"]["total"])
            print(f"  of which training {task:<14} {meta['timings_s']['total']:5.0f}s"
                  f" ({meta['steps']} steps, {meta['threads']} threads)")
        else:
            record["training_s"][task] = 0
            print(f"  of which training {task:<14}     0s (shipped or cached: trained {meta['created'][:10]})")
for task in tasks:
    offline = json.load(open(f"artifacts/reports/{task}_offline.json"))
    served = json.load(open(f"artifacts/reports/{task}_served.json"))
    metric = served["metric"]
    record["scores"][task] = {"metric": metric, "paddle": offline["paddle"][metric], "onnx": offline["onnx"][metric],
                              "served": served[metric], "n": served["n"]}
    print(f"{task:<9} {metric:<8} paddle {offline['paddle'][metric]:.4f}  onnx {offline['onnx'][metric]:.4f}"
          f"  served {served[metric]:.4f}  (n={served['n']})")
out = Path("artifacts/reports/quickstart.json")
tmp = out.with_suffix(".json.tmp")
tmp.write_text(json.dumps(record, indent=2) + "\n")
os.replace(tmp, out)
print(f"timings and scores: {out}")
PY
cat <<MSG

Next: serve $repository/ again and query it (the server above has stopped), in one shell:
  source .venv/bin/activate
  tritonserver --model-repository=$repository
or \`bash scripts/serve.sh $repository\`, the same server, which prints a client command per model; in another shell:
  source .venv/bin/activate
MSG
for task in "${tasks[@]}"; do
  echo "  python clients/${task}_grpc_client.py --help   # --text TEXT for one text; none: its test split, scored"
done
