"""How many math threads a training run uses: every core its process may use, followed as they change (a run
trained beside another is handed the other's cores when that one ends)."""

from __future__ import annotations

import os


def training_threads() -> int:
    """Every core this process may use. Paddle sets its math library to one thread on import (measured:
    OMP_NUM_THREADS reads "1" after `import paddle`); two threads ran the token_cls training step 1.64x as
    fast on 2 cores."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def follow_cores() -> int:
    """Use as many math threads as this process now has cores: a run trained beside another (train.bootstrap.
    train_together) is given the other's cores when that one finishes, and takes them up here, every 20 steps."""
    import paddle

    threads = training_threads()
    if threads != _threads_in_use.get("n"):
        paddle.base.core.set_num_threads(threads)
        _threads_in_use["n"] = threads
    return threads


_threads_in_use: dict[str, int] = {}


def threads_in_use(default: int) -> int:
    """The math threads follow_cores last set (`default` before its first call)."""
    return _threads_in_use.get("n", default)
