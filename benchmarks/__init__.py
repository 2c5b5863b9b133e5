"""This repository's benchmarks: the research behind docs/BENCHMARKS.md, outside the installed package and run from a
checkout by `bash scripts/bench.sh` (`python -m benchmarks`, benchmarks/cli.py).

What a user runs to measure their own deployment stays in the package: `ernie-deploy bench` (a served model timed
against its in-process limit), `ernie-deploy tune`, and the load generators and perf_analyzer runs
(ernie_deploy.bench). These modules build on them and add what this repository studies:

    benchmark.py   the whole run: INT8 and optimized graphs, Paddle (paddle.py), the ensemble and classic layouts, the
                   peer (peer_rows.py, peer/: PaddleNLP SimpleServing), the ERNIE 3.0 sizes (sizes.py)
    levers.py, overload.py, cache.py, input_cost.py, long_text.py   one measurement each
    targets.py, results.py, markdown.py, plot.py, report.py   the targets, the results read back, BENCHMARKS.md,
                   the plots and the printed report

Imports: anything of ernie_deploy; nothing in ernie_deploy imports these (tests/test_layers.py).
"""
