#!/usr/bin/env bash
# Checkpoint -> static model -> ONNX (parity-checked) -> Triton model repository in models/.
#
#   scripts/convert.sh                                   # every task, offline bootstrap checkpoints
#   scripts/convert.sh --task token_cls                  # one task (repeatable)
#   scripts/convert.sh --budget 20                       # train each bootstrap model for 20 minutes
#   scripts/convert.sh --task seq_cls --source https://host/ckpt.tar.gz --sha256 <hex>
#   scripts/convert.sh --task seq_cls --source /path/to/checkpoint_dir
#   scripts/convert.sh --runtime onnxruntime             # model step on Triton's ORT backend (NGC container)
#   scripts/convert.sh --quantize int8                   # serve INT8 models (FP32 kept as model.fp32.onnx)
#   scripts/convert.sh --fp16                            # FP16 models for GPUs (FP32 kept; slower on CPU); then
#                                                        #   ernie-deploy build --runtime onnxruntime --device gpu
#   scripts/convert.sh --io paddlenlp                    # answer in PaddleNLP's Triton pipeline tensors, so its
#                                                        #   clients run unchanged (docs/FROM_PADDLENLP.md)
set -euo pipefail
source "$(dirname "$0")/_env.sh"

build_tasks=() tasks=() source_arg="" sha_arg=() runtime="auto" repository="models" quantize="none" fp16_arg=()
budget_arg=() io_arg=()
while [ $# -gt 0 ]; do
  case "$1" in
    --task) tasks+=("$2"); shift 2 ;;
    --source) source_arg="$2"; shift 2 ;;
    --sha256) sha_arg=(--sha256 "$2"); shift 2 ;;
    --runtime) runtime="$2"; shift 2 ;;
    --repository) repository="$2"; shift 2 ;;
    --quantize) quantize="$2"; shift 2 ;;
    --fp16) fp16_arg=(--fp16); shift ;;
    --budget) budget_arg=(--budget "$2"); shift 2 ;;
    --io) io_arg=(--io "$2"); shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "convert.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#tasks[@]} -gt 0 ] || tasks=(seq_cls token_cls)
if [ -n "$source_arg" ] && [ ${#tasks[@]} -ne 1 ]; then
  echo "convert.sh: --source needs exactly one --task" >&2; exit 2
fi

ernie-deploy fetch-data
if [ -z "$source_arg" ] && [ ${#tasks[@]} -gt 1 ]; then
  # The bootstrap models not cached yet train at once, each on its share of the cores: one model runs its step only
  # 1.44-1.64x as fast on two cores as on one (docs/CONVERT.md#training-time). The fetches below then find them cached.
  budget_set=()
  [ ${#budget_arg[@]} -eq 0 ] || budget_set=(--set "budget_minutes=${budget_arg[1]}")
  python -m ernie_deploy.train.bootstrap "${tasks[@]}" "${budget_set[@]}"
fi
for task in "${tasks[@]}"; do
  if [ -n "$source_arg" ]; then
    ernie-deploy fetch "$source_arg" "${sha_arg[@]}" --task "$task"
  else
    ernie-deploy fetch --bootstrap --task "$task" "${budget_arg[@]}"
  fi
  ernie-deploy export --task "$task"
  ernie-deploy convert --task "$task" --quantize "$quantize" "${fp16_arg[@]}"
  build_tasks+=(--task "$task")
done
ernie-deploy build "${build_tasks[@]}" --repository "$repository" --runtime "$runtime" "${io_arg[@]}"
