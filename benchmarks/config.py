"""What the repository's benchmark measures beyond `ernie-deploy bench` (ResearchConfig): the INT8 and optimized
graphs, Paddle Inference, the ensemble and classic layouts, the peer and the model sizes; and the concurrency its
ratios read."""

from __future__ import annotations

from dataclasses import dataclass

from ernie_deploy.bench.config import BenchConfig

REFERENCE_CONCURRENCY = 8  # the ratios compare served and classic at this concurrency
# The ERNIE 3.0 shapes remade from the classifier for the size rows (fetch.shapes.SHAPES; micro sits between nano
# and mini and adds little); the smoke run times a 2-layer shape instead.
SIZES = ("nano", "mini", "medium", "base")


@dataclass
class ResearchConfig(BenchConfig):
    paddle: bool = True
    int8: bool = True  # quantize the model (as `convert --quantize int8` does) and add its in-process rows
    ensemble: bool = True  # the ensemble layout's rows beside the default build's
    classic: bool = True
    peer: bool = True  # PaddleNLP SimpleServing on the same model (benchmarks/peer_rows.py), where it is installed
    sizes: tuple[str, ...] = SIZES  # the classifier remade in these shapes, benched beside it (benchmarks.sizes)

    @classmethod
    def smoke(cls, **overrides) -> ResearchConfig:
        """A tiny run that exercises every row (what CI runs), the smallest shape for the size rows."""
        return super().smoke(**{"sizes": ("tiny",), **overrides})
