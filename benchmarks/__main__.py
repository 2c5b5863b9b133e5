"""`python -m benchmarks ...`: the repository's benchmarks (benchmarks/cli.py)."""

import sys

from benchmarks.cli import main

sys.exit(main())
