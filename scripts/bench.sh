#!/usr/bin/env bash
# This repository's benchmarks (benchmarks/, `python -m benchmarks`): the served pipeline next to its limits
# (in-process onnxruntime, Paddle Inference, the classic padded layout, PaddleNLP SimpleServing, the ERNIE 3.0 sizes)
# for every task, on the artifacts that scripts/convert.sh made; writes docs/bench.json, docs/BENCHMARKS.md (between
# its bench markers) and docs/bench.png. One measurement a run, named by the first word (default: run).
#
#   scripts/bench.sh                          # defaults: concurrency 1,4,8,16, 10 s per served cell (~10 min)
#   scripts/bench.sh --smoke                  # every row in about a minute (what CI runs; timings mean nothing)
#   scripts/bench.sh run --task seq_cls --duration 5 --repository models
#   scripts/bench.sh render docs/bench.json   # rewrite BENCHMARKS.md and bench.png only
#   scripts/bench.sh monitoring               # the watch's cost: watched vs build --no-monitor, one server
#   scripts/bench.sh levers --task seq_cls --concurrency 1,8   # also: overload, cache, input-cost, gateway, long-texts
#
# To time your own served model against its in-process limit, run `ernie-deploy bench` (the installed package).
set -euo pipefail
EXTRAS=export,serve,bench source "$(dirname "$0")/_env.sh"
case "${1:-}" in -h|--help) sed -n '2,14p' "$0"; exec python -m benchmarks --help ;; esac
exec python -m benchmarks "$@"
