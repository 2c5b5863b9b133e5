"""Whether two bootstrap models train sooner at once, one a core, than one after the other on every core: the
training step rate of the demo encoder (2 layers x 256, batches of 16 x 128 tokens, token classification) in one
process on every core, then in one process per core at the same time, each pinned to its core
(`python -m benchmarks.train_cores`; the figures in docs/CONVERT.md#two-models-at-once).

Random ids and labels: the step's arithmetic is what is measured, not what the model learns.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time


def _steps_per_second(cores: list[int], steps: int, ffn: int, out) -> None:
    os.sched_setaffinity(0, cores)
    import numpy as np
    import paddle
    from paddlenlp.transformers import ErnieConfig, ErnieForTokenClassification

    paddle.base.core.set_num_threads(len(cores))  # as the bootstrap's training does (train.cores.training_threads)
    config = ErnieConfig(
        vocab_size=5820,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=ffn,
        max_position_embeddings=512,
        num_labels=7,
    )
    model = ErnieForTokenClassification(config)
    optimizer = paddle.optimizer.AdamW(1e-3, parameters=model.parameters())
    rng = np.random.default_rng(0)
    ids = paddle.to_tensor(rng.integers(5, 5000, size=(16, 128)).astype("int64"))
    labels = paddle.to_tensor(rng.integers(0, 7, size=(16, 128)).astype("int64"))
    warm = 5
    for step in range(steps + warm):
        if step == warm:
            start = time.perf_counter()
        loss = paddle.nn.functional.cross_entropy(model(ids), labels)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
    out.put(steps / (time.perf_counter() - start))


def measure(steps: int = 40, ffn: int = 1024) -> dict:
    cores = sorted(os.sched_getaffinity(0))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    alone = context.Process(target=_steps_per_second, args=(cores, steps, ffn, queue))
    alone.start()
    alone.join()
    one_process = queue.get()
    runs = [context.Process(target=_steps_per_second, args=([core], steps, ffn, queue)) for core in cores]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    pinned = [queue.get() for _ in runs]
    return {
        "cores": len(cores),
        "one_process_steps_per_s": one_process,
        "pinned_steps_per_s": pinned,
        "ratio": sum(pinned) / one_process,
        "load_average": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--ffn", type=int, default=1024, help="intermediate_size (the demo recipe's: 1024)")
    args = parser.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2:
        print("one core: nothing to run at once", file=sys.stderr)
        return 2
    r = measure(args.steps, args.ffn)
    print(
        f"one process on {r['cores']} cores: {r['one_process_steps_per_s']:.2f} steps/s; one pinned process a core: "
        f"{' + '.join(f'{v:.2f}' for v in r['pinned_steps_per_s'])} = {sum(r['pinned_steps_per_s']):.2f} steps/s "
        f"({r['ratio']:.2f}x); load average {r['load_average'][0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
