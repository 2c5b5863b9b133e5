"""Measurement: the benchmark (config, rows, in-process limits, load, served layouts, targets, report, plot,
levers) and the soak.

Imports: anything below the CLI.
"""
