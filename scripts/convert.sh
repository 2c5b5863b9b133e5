#!/usr/bin/env bash
# Checkpoint -> static model -> ONNX (parity-checked) -> Triton model repository in models/.
#
#   scripts/convert.sh --task seq_cls --model news --source DIR   # a checkpoint of your own, served as `news`
#   scripts/convert.sh --task seq_cls --model news --source URL --sha256 HEX   # an archive of one, verified
#   scripts/convert.sh                                   # the demo models: the checkpoints shipped in demo/
#   scripts/convert.sh --task token_cls                  # one demo task (repeatable)
#   scripts/convert.sh --train                           # train the demo models here, with the shipped recipes
#   scripts/convert.sh --budget 20                       # train each demo model for 20 minutes instead
#   scripts/convert.sh --repository DIR                  # build into DIR instead of models/
#   scripts/convert.sh --runtime onnxruntime             # model step on Triton's ORT backend (NGC container)
#   scripts/convert.sh --quantize int8                   # serve INT8 models (FP32 kept as model.fp32.onnx)
#   scripts/convert.sh --fp16                            # FP16 models for GPUs (FP32 kept; slower on CPU)
#   scripts/convert.sh --io paddlenlp                    # answer in PaddleNLP's Triton pipeline tensors
#   scripts/convert.sh --task seq_cls --model news --source DIR --max-seq-len 512   # texts read to 512 tokens
#   scripts/convert.sh --task embed --model query_tower --source DIR     # a RocketQA tower: a vector per text
#   scripts/convert.sh --task embed --model docs --source DIR --pooling mean  # a plain ErnieModel, mean-pooled
#   scripts/convert.sh --task rerank --model ranker --source DIR --score raw  # a cross-encoder answering its logit
#
# With --model NAME the model joins the others in the repository, which stay byte for byte; its input is checked
# before anything is written (a folder that is not a checkpoint, a head that is not the task's, labels it cannot
# name, a name another model's step takes), only its task's dataset is fetched, a --source is converted without
# training anything (with no --source the task's bootstrap model is trained under that name), and the client command
# is printed (`ernie-deploy add` does the work; `--labels FILE` names the labels of a checkpoint whose config has
# none). Without --model it builds the demo models of the tasks given. --max-seq-len defaults to the length the
# checkpoint's training record or config records, else the task's (128; uie, Taskflow's 512), at most its positions.
# ERNIE_DEPLOY_PARSE_ONLY=1: check the arguments and exit (0 fine, 2 not), before making .venv or writing anything.
set -euo pipefail

tasks=() model="" source_arg="" sha_arg=() runtime="auto" repository="models" quantize="none" fp16_arg=()
budget_arg=() io_arg=() labels_arg=() train_arg=() seq_len_arg=() pooling_arg=() score_arg=()
usage() { echo "convert.sh: $1 (see scripts/convert.sh --help)" >&2; exit 2; }
value() { [ $# -ge 2 ] && [ -n "$2" ] || usage "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --task) value "$@"; tasks+=("$2"); shift 2 ;;
    --model) value "$@"; model="$2"; shift 2 ;;
    --source) value "$@"; source_arg="$2"; shift 2 ;;
    --sha256) value "$@"; sha_arg=(--sha256 "$2"); shift 2 ;;
    --runtime) value "$@"; runtime="$2"; shift 2 ;;
    --repository) value "$@"; repository="$2"; shift 2 ;;
    --quantize) value "$@"; quantize="$2"; shift 2 ;;
    --fp16) fp16_arg=(--fp16); shift ;;
    --budget) value "$@"; budget_arg=(--budget "$2"); shift 2 ;;
    --train) train_arg=(--train); shift ;;
    --io) value "$@"; io_arg=(--io "$2"); shift 2 ;;
    --labels) value "$@"; labels_arg=(--labels "$(realpath -m -- "$2")"); shift 2 ;;
    --max-seq-len) value "$@"; seq_len_arg=(--max-seq-len "$2"); shift 2 ;;
    --pooling) value "$@"; pooling_arg=(--pooling "$2"); shift 2 ;;
    --score) value "$@"; score_arg=(--score "$2"); shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) usage "unknown argument $1" ;;
  esac
done
if [ -n "$model" ]; then
  [ ${#tasks[@]} -eq 1 ] || usage "--model names one model: give it exactly one --task"
  [ -z "$source_arg" ] || [ ${#budget_arg[@]} -eq 0 ] || usage "--budget trains a bootstrap model; drop it with --source"
  [ -z "$source_arg" ] || [ ${#train_arg[@]} -eq 0 ] || usage "--train trains a bootstrap model; drop it with --source"
elif [ -n "$source_arg" ]; then
  usage "a checkpoint of your own is served under a name: add --model NAME (and one --task)"
fi
[ ${#sha_arg[@]} -eq 0 ] || [ -n "$source_arg" ] || usage "--sha256 pins the archive --source URL names; add --source"
[ ${#labels_arg[@]} -eq 0 ] || [ -n "$model" ] || usage "--labels names a checkpoint of your own's labels; add --model"
[ ${#pooling_arg[@]} -eq 0 ] || [ -n "$model" ] || usage "--pooling reads an embedding checkpoint of your own; add --model"
[ ${#score_arg[@]} -eq 0 ] || [ -n "$model" ] || usage "--score reads a rerank checkpoint of your own; add --model"
# Paths the user gives are read from where the command was run (the run itself works from the checkout's root).
case "$source_arg" in ""|http://*|https://*|HTTP://*|HTTPS://*) ;; *) source_arg="$(realpath -m -- "$source_arg")" ;; esac
[ "$repository" = models ] || repository="$(realpath -m -- "$repository")"
[ ${#tasks[@]} -gt 0 ] || tasks=(seq_cls token_cls)

# The commands below, built once: what a run runs, and what a parse-only run checks with the CLI's own parser.
if [ -n "$model" ]; then
  if [ -n "$source_arg" ]; then from=(--source "$source_arg" "${sha_arg[@]}")
  else from=(--bootstrap "${budget_arg[@]}" "${train_arg[@]}"); fi
  add_cmd=(add --task "${tasks[0]}" --model "$model" "${from[@]}" --repository "$repository" --quantize "$quantize"
    "${fp16_arg[@]}" --runtime "$runtime" "${io_arg[@]}" "${labels_arg[@]}" "${seq_len_arg[@]}" "${pooling_arg[@]}"
    "${score_arg[@]}")
fi
build_cmd=(build --repository "$repository" --runtime "$runtime" "${io_arg[@]}")
for task in "${tasks[@]}"; do build_cmd+=(--task "$task"); done
convert_opts=(--quantize "$quantize" "${fp16_arg[@]}")

# Every value checked by the parser of the command it goes to: under ERNIE_DEPLOY_PARSE_ONLY=1 that is all a run does;
# otherwise it is done before the data, the training and the conversions, so a bad value fails first.
source "$(dirname "$0")/_parse_only.sh"
check_arguments() {
  check() { parse_with ernie_deploy.cli.parse_only "$@"; }
  if [ -n "$model" ]; then check "${add_cmd[@]}"; return; fi
  check "${build_cmd[@]}"
  check convert "${convert_opts[@]}"
  [ ${#seq_len_arg[@]} -eq 0 ] || check export "${seq_len_arg[@]}"
  [ ${#budget_arg[@]} -eq 0 ] && [ ${#train_arg[@]} -eq 0 ] || check fetch --bootstrap "${budget_arg[@]}" "${train_arg[@]}"
}
if [ "${ERNIE_DEPLOY_PARSE_ONLY:-}" = 1 ]; then
  check_arguments
  exit 0
fi

source "$(dirname "$0")/_env.sh"
if [ -n "$model" ]; then
  exec ernie-deploy "${add_cmd[@]}"  # checks its arguments and its input before it writes anything
fi
check_arguments

ernie-deploy fetch-data
if [ ${#tasks[@]} -gt 1 ] && [ ${#budget_arg[@]} -gt 0 -o ${#train_arg[@]} -gt 0 ]; then
  # Asked to train: the models not cached yet train at once, each on its share of the cores: one model runs its step
  # far less than twice as fast on two cores as on one (docs/CONVERT.md#two-models-at-once). The fetches below then
  # find them cached.
  budget_set=()
  [ ${#budget_arg[@]} -eq 0 ] || budget_set=(--set "budget_minutes=${budget_arg[1]}")
  python -m ernie_deploy.train.bootstrap "${tasks[@]}" "${budget_set[@]}" "${train_arg[@]}"
fi
for task in "${tasks[@]}"; do
  ernie-deploy fetch --bootstrap --task "$task" "${budget_arg[@]}" "${train_arg[@]}"
  ernie-deploy export --task "$task" "${seq_len_arg[@]}"
  ernie-deploy convert --task "$task" "${convert_opts[@]}"
done
ernie-deploy "${build_cmd[@]}"
