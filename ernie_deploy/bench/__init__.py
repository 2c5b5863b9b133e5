"""Measuring a deployment on its own machine: `ernie-deploy bench` (a served model timed against its in-process
limit: config, rows, inprocess, server_rows, run, summary), the load generators (load, perf_analyzer,
perf_analyzer_rate, machine) and `ernie-deploy tune` (tune).

The repository's own research (the SimpleServing peer, model sizes, levers, overload, the response cache, input cost,
long texts, and the writing of docs/BENCHMARKS.md and its plots) is outside the package, in benchmarks/
(`bash scripts/bench.sh`), and builds on these modules.

Imports: ernie_deploy.core, serving, repository, server, client and evaluate. The soak and the rollout soak, which
check answers rather than measure, are in ernie_deploy.reliability.
"""
