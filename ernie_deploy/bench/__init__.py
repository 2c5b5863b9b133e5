"""Measurement: the benchmark (in-process limits, served layouts, levers, report, plot) and the soak.

Imports: anything below the CLI.
"""
