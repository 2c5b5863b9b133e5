#!/usr/bin/env bash
# Throughput and latency of the served pipeline next to its limits (in-process onnxruntime, Paddle Inference,
# the classic padded layout), for every task, on the artifacts that scripts/convert.sh made.
# Writes docs/bench.json, docs/BENCHMARKS.md (between its bench markers) and docs/bench.png.
#
#   scripts/bench.sh                          # defaults: concurrency 1,4,8,16, 10 s per served cell (~10 min)
#   scripts/bench.sh --smoke                  # every row in about a minute (what CI runs; timings mean nothing)
#   scripts/bench.sh --task seq_cls --duration 5 --repository models
#   scripts/bench.sh --render docs/bench.json # rewrite BENCHMARKS.md and bench.png only
set -euo pipefail
EXTRAS=export,serve,bench source "$(dirname "$0")/_env.sh"
case "${1:-}" in -h|--help) sed -n '2,9p' "$0"; exec ernie-deploy bench --help ;; esac
exec ernie-deploy bench "$@"
