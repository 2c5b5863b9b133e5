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
#   scripts/bench.sh scores-cost              # every label's probability on request: its cost to clients not asking
#   scripts/bench.sh levers --task seq_cls --concurrency 1,8   # also: overload, cache, input-cost, gateway, long-texts
#
# To time your own served model against its in-process limit, run `ernie-deploy bench` (the installed package).
# ERNIE_DEPLOY_PARSE_ONLY=1: parse the arguments with `python -m benchmarks`'s parser, then exit 0 when they are fine,
# 2 when not, 3 when .venv is not made yet, before making .venv or measuring anything.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${ERNIE_DEPLOY_PARSE_ONLY:-}" = 1 ]; then
  source "$ROOT/scripts/_parse_only.sh"
  parse_with benchmarks "$@"  # its main parses and returns under ERNIE_DEPLOY_PARSE_ONLY=1
  exit 0
fi
EXTRAS=export,serve,bench source "$ROOT/scripts/_env.sh"
case "${1:-}" in -h|--help) sed -n '2,16p' "$0"; exec python -m benchmarks --help ;; esac
exec python -m benchmarks "$@"
