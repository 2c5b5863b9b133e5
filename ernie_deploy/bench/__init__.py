"""Measurement: the benchmark (config, rows, in-process limits, load, served layouts, the peer's rows, targets, the
results, BENCHMARKS.md, report, plot, levers), overload, input cost, long texts and model sizes.

Imports: ernie_deploy.core, serving, fetch, export, repository, server, client, evaluate and peer. The soak and the
rollout soak, which check answers rather than measure, are in ernie_deploy.reliability.
"""
