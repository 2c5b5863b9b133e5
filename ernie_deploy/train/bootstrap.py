"""Offline bootstrap: train a small ERNIE from random init on the local data split, on CPU, once per content.

The checkpoints of the tasks' own recipes ship with the repository (demo/<task>/, ernie_deploy.fetch.shipped):
`train` returns those, verified, and trains only when asked (`retrain`, `--train`, a budget or a recipe of the
caller's), with the same recipes.

No pretrained weights can be downloaded here, so the pipeline (export, convert, serve, measure) gets a
real, accurate-enough checkpoint by training one (ernie_deploy.train.loop): a vocabulary built from train splits
only (by default one vocabulary from both datasets, shared by both tasks as real ERNIE checkpoints share theirs), a
standard `ErnieConfig`, and the task's paddlenlp class. The result is a directory in PaddleNLP layout
(`config.json`, `model_state.pdparams`, `vocab.txt`, `tokenizer_config.json`) so that a real
checkpoint takes exactly the same path later, plus `bootstrap.json` with the recipe and the numbers.

Results are cached under `cache_dir()/bootstrap/<key>`, the key being a sha256 over the train and dev
files, the vocabulary's source files, the recipe and RECIPE_VERSION; a second call returns at once. Nothing
about where the code lives enters the key.

paddle and paddlenlp are imported inside functions: importing ernie_deploy stays paddle-free.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ernie_deploy.core.errors import BadCheckpointError, BadDataError, BadOptionsError, ErnieDeployError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.paths import cache_dir
from ernie_deploy.core.tasks import TaskSpec, get_task
from ernie_deploy.fetch import data as data_mod
from ernie_deploy.fetch import datasets, shipped
from ernie_deploy.train.loop import META_FILE, train_into
from ernie_deploy.train.recipes import RECIPE_VERSION, recipe_for
from ernie_deploy.train.rows import record_lengths
from ernie_deploy.train.vocab import vocab_sources

# --------------------------------------------------------------------------------------------------
# Cache key


def cache_key(data_dir: Path, recipe: dict[str, Any]) -> str:
    """sha256 over the train and dev files, the vocabulary's sources, the recipe and RECIPE_VERSION."""
    digest = hashlib.sha256()
    digest.update(f"ernie-deploy-bootstrap v{RECIPE_VERSION}\n".encode())
    files = {split: data_mod.split_file(data_dir, split, recipe["split_format"]) for split in ("train", "dev")}
    for name, path in vocab_sources(data_dir, recipe).items():
        files.setdefault(f"vocab:{name}", path)
    for role, path in files.items():
        path = Path(path)
        if not path.exists():
            raise BadDataError(f"no such data file: {path}", "run `ernie-deploy fetch-data` first")
        content = path.read_bytes()
        digest.update(f"{role} {len(content)}\n".encode())
        digest.update(content)
    digest.update(json.dumps(_normalised(recipe), sort_keys=True).encode())
    return digest.hexdigest()


def _normalised(value: Any) -> Any:
    """The recipe as the key sees it: 8, 8.0 and 8.00 are one number, so they never train twice."""
    if isinstance(value, dict):
        return {k: _normalised(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalised(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def cache_root() -> Path:
    """Where the trained checkpoints are kept, each in a folder named by its cache key."""
    return cache_dir() / "bootstrap"


def checkpoint_dir(task: TaskSpec, data_dir: Path, recipe: dict[str, Any] | None = None) -> Path:
    """Where `train` puts (or finds) the checkpoint for this task, data and recipe."""
    full = _with_base(recipe_for(task, recipe), Path(data_dir), lambda t, d: checkpoint_dir(t, d))
    return cache_root() / cache_key(Path(data_dir), full)


def _with_base(recipe: dict[str, Any], data_dir: Path, base_checkpoint) -> dict[str, Any]:
    """The recipe with the checkpoint it starts from (`init_from`) resolved by `base_checkpoint(task, data_dir)`
    (found, or trained): its cache key, so a retrained base retrains this model too."""
    if not recipe.get("init_from"):
        return recipe

    base_task = get_task(recipe["init_from"])
    base_data = datasets.prepare(base_task.dataset, data_dir.parent)
    return {**recipe, "init_checkpoint": _key_of(base_checkpoint(base_task, base_data))}


def _key_of(checkpoint: Path) -> str:
    """A checkpoint's cache key: its folder's name in the cache, its manifest's where it ships (demo/<task>)."""
    record = shipped.manifest(checkpoint.name, checkpoint.parent) if checkpoint.parent == shipped.SHIPPED_ROOT else None
    return record["cache_key"] if record else checkpoint.name


def _base_dir(recipe: dict[str, Any], retrain: bool) -> Path | None:
    """The checkpoint a recipe with `init_from` starts from (resolved by `_with_base`), or None: the shipped one of
    that key, unless the run retrains (its base was then trained here too, into the cache)."""
    if not recipe.get("init_from"):
        return None
    key = recipe["init_checkpoint"]
    return (None if retrain else shipped.find_shipped(key)) or cache_root() / key


def _shipped(task: TaskSpec, data_dir: Path, key: str, recipe: dict[str, Any] | None, retrain: bool) -> Path | None:
    """The checkpoint that ships with the repository for `task`, checked against its manifest (sha256 of every file,
    and `key`: this checkout's recipe and data), where the caller takes the task's own recipe on the data it was made
    from and does not ask to train; None where it asks to, trains on other data, or the task ships none."""
    record = None if retrain or recipe is not None else shipped.manifest(task.name)
    if record is None or not shipped.made_from(record, data_dir, task.split_format):
        return None
    return shipped.verified(task.name, key)


def is_complete(ckpt: Path) -> bool:
    return all((ckpt / name).is_file() for name in ("config.json", "model_state.pdparams", "vocab.txt", META_FILE))


def train(
    task: TaskSpec,
    data_dir: Path,
    *,
    force: bool = False,
    progress: bool = True,
    recipe: dict[str, Any] | None = None,
    position: int | None = None,
    retrain: bool = False,
) -> Path:
    """The bootstrap checkpoint for `task`; returns its directory: the one that ships with the repository (demo/,
    verified), unless the caller asks to train (`retrain`, `force`, or a `recipe` of its own); then the one in the
    cache, trained here first if the cache lacks it (`force`: trained again).

    `recipe` overrides entries of DEFAULT_RECIPE (tests use a tiny one); it is part of the cache key.
    """
    data_dir = Path(data_dir)
    retrain = retrain or force
    full = _with_base(recipe_for(task, recipe), data_dir, lambda t, d: train(t, d, progress=progress, retrain=retrain))
    key = cache_key(data_dir, full)
    found = _shipped(task, data_dir, key, recipe, retrain)
    if found is not None:
        return found
    final = cache_root() / key
    if not force and _usable(final):
        return final
    # One trainer per checkpoint: a second process asking for the same one waits and then finds it cached,
    # instead of spending the same minutes again on the same cores.
    with _exclusive(cache_dir() / "locks" / f"bootstrap-{final.name}.lock"):
        if is_complete(final) and not force:
            # cached before the trained lengths were recorded: add them, as training would have
            record_lengths(final, task, data_dir, full, META_FILE)
            return final
        # A run of this checkpoint killed outright (SIGKILL, or its parent gone: end_with_parent) leaves its
        # temporary folder behind; the lock held here says no run of it is alive, so those are dead and go.
        for stale in final.parent.glob(f".{final.name}.*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)
        with atomic_path(final) as tmp:
            tmp.mkdir()
            train_into(tmp, task, data_dir, full, progress, _base_dir(full, retrain), position)
    return final


def is_cached(task: TaskSpec, data_dir: Path, recipe: dict[str, Any] | None = None, retrain: bool = False) -> bool:
    """Whether `train` would return this checkpoint without training (its base, if any, at hand too)."""
    record = None if retrain or recipe is not None else shipped.manifest(task.name)
    if record is not None and shipped.made_from(record, data_dir, task.split_format):
        return True  # shipped: `train` returns it, or names why it cannot
    full = recipe_for(task, recipe)
    if full.get("init_from"):
        base_task = get_task(full["init_from"])
        base_data = datasets.prepare(base_task.dataset, Path(data_dir).parent)
        if not is_cached(base_task, base_data, retrain=retrain):
            return False
    return _usable(checkpoint_dir(task, data_dir, recipe))


def _usable(ckpt: Path) -> bool:
    """A complete checkpoint that records its training lengths: what `train` returns as it is."""
    return is_complete(ckpt) and "trained_tokens" in load_meta(ckpt)


def train_together(
    tasks: list[TaskSpec],
    *,
    recipe: dict[str, Any] | None = None,
    progress: bool = True,
    data: dict[str, Path] | None = None,
    retrain: bool = False,
) -> list[Path]:
    """Train (or find cached) several tasks' bootstrap checkpoints, those that need training at once: each in a
    process of its own, pinned to its share of the cores. Two processes pinned to a core each did 1.53x the training
    steps per second of one process on both cores (`python -m benchmarks.train_cores`, docs/CONVERT.md). A task
    that starts from another's checkpoint (`init_from`) trains in a later wave, after it. Returns each task's
    checkpoint, in order. data: each task's data folder by name (default: its prepared dataset). retrain: train
    those the repository ships too (into the cache), as `train` does."""
    cores = sorted(os.sched_getaffinity(0))
    data = {t.name: Path(data[t.name]) if data else datasets.prepare(t.dataset) for t in tasks}
    todo = [t for t in tasks if not is_cached(t, data[t.name], recipe, retrain)]
    while todo:
        # a wave: the tasks whose base checkpoint (if any) no task of this call still has to train, one per core
        waiting = {t.name for t in todo}
        wave = [t for t in todo if recipe_for(t, recipe).get("init_from") not in waiting][: len(cores)]
        if len(wave) > 1:
            _train_at_once(wave, data, cores, recipe, progress, retrain)
        else:
            train(wave[0], data[wave[0].name], progress=progress, recipe=recipe, retrain=retrain)
        todo = [t for t in todo if t not in wave]
    return [train(task, data[task.name], progress=progress, recipe=recipe, retrain=retrain) for task in tasks]


def _train_at_once(
    wave: list[TaskSpec], data: dict, cores: list[int], recipe, progress: bool, retrain: bool = False
) -> None:
    """Train `wave` in processes of their own, each pinned to its share of `cores`."""
    import multiprocessing

    shares = [cores[i :: len(wave)] for i in range(len(wave))]
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: paddle's threads start from the share
    runs = [
        context.Process(
            target=_train_pinned,
            args=(task.name, str(data[task.name]), share, recipe, progress, position, os.getpid(), retrain),
            name=f"bootstrap-{task.name}",
        )
        for position, (task, share) in enumerate(zip(wave, shares))
    ]
    for run in runs:
        run.start()
    # A run that ends hands its cores to those still training (they take them up within 20 steps: train.loop.
    # follow_cores): the two demo models differ in length, and a core left idle would make the longer one the
    # time of both on one core.
    running = dict(zip(runs, shares))
    while running:
        done = [run for run in running if not run.is_alive()]
        if not done:
            time.sleep(1)
            continue
        freed = [core for run in done for core in running.pop(run)]
        for i, run in enumerate(running):
            running[run] = running[run] + freed[i :: len(running)]
            try:
                os.sched_setaffinity(run.pid, running[run])
            except ProcessLookupError:  # it ended meanwhile: the next pass frees its cores
                pass
    for run in runs:
        run.join()
    failed = [f"{task.name} (exit {run.exitcode})" for task, run in zip(wave, runs) if run.exitcode]
    if failed:
        raise BadCheckpointError(
            f"training the bootstrap models at once failed for {', '.join(failed)}",
            "train each alone to see its error: `ernie-deploy fetch --bootstrap --task TASK`",
        )


def end_with_parent(parent: int) -> None:
    """End this process when `parent` ends (Linux; elsewhere nothing): a training run started by `train_together`
    would otherwise go on training, holding its cores, after the command that started it was stopped by a signal
    it could not pass on (seen: a killed convert left both demo models training). Its checkpoint is written to a
    temporary folder and renamed when complete: a run ended this way leaves no half-written checkpoint at its path."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if os.getppid() != parent:  # the parent ended before the line above
        os._exit(1)


def _train_pinned(
    task_name: str,
    data_dir: str,
    cores: list[int],
    recipe: dict[str, Any] | None,
    progress: bool,
    position: int,
    parent: int,
    retrain: bool = False,
) -> None:
    """One process of `train_together`: on `cores` only (training_threads reads them), then train."""

    end_with_parent(parent)
    os.sched_setaffinity(0, cores)
    try:
        train(get_task(task_name), Path(data_dir), progress=progress, recipe=recipe, position=position, retrain=retrain)
    except ErnieDeployError as exc:
        print(f"error: {task_name}: {exc}", file=sys.stderr)
        sys.exit(2)


@contextmanager
def _exclusive(lock_file: Path):
    import fcntl

    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes, also if the process dies
        yield


def load_meta(ckpt: Path) -> dict[str, Any]:
    path = Path(ckpt) / META_FILE
    if not path.exists():
        raise BadCheckpointError(
            f"{ckpt} is not a bootstrap checkpoint (no {META_FILE})", "pass a folder made by `fetch --bootstrap`"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - exercised by hand / CLI
    import argparse

    parser = argparse.ArgumentParser(description="Train the offline bootstrap checkpoint", allow_abbrev=False)
    parser.add_argument(
        "task", nargs="*", default=["seq_cls"], help="one task, or several: those not cached train at once"
    )
    parser.add_argument(
        "--train",
        action="store_true",
        help="train on this machine (cached after) instead of taking the checkpoint the repository ships",
    )
    parser.add_argument("--force", action="store_true", help="retrain even if cached")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="override a recipe entry")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = json.loads(value)
    if len(args.task) > 1:
        if args.force:
            raise BadOptionsError("--force retrains one task", "pass one task with --force")
        tasks = [get_task(name) for name in args.task]
        for ckpt in train_together(tasks, recipe=overrides or None, retrain=args.train):
            print(f"checkpoint: {ckpt}")
        return 0
    task = get_task(args.task[0])
    t0 = time.time()
    ckpt = train(task, datasets.prepare(task.dataset), force=args.force, recipe=overrides or None, retrain=args.train)
    meta = load_meta(ckpt)
    print(f"checkpoint: {ckpt}")
    print(
        f"{meta['metric']}: dev {meta['dev']:.4f} (best epoch {meta['best_epoch']}; "
        "the test split is scored by `ernie-deploy eval`)"
    )
    if "unk_rate_test" in meta:  # a run of the shared loop, which builds its tokenizer's rows itself
        unk = meta["unk_rate_test"]
        print(f"[UNK] rate on test: {unk['token_rate']:.4%} of tokens, {unk['texts_with_unk']:.2%} of texts")
    epochs = [h["seconds"] for h in meta["history"]]
    print(
        f"train time: {meta['timings_s']['train']:.1f}s (epochs {epochs}), "
        f"total when trained {meta['timings_s']['total']:.1f}s, this call {time.time() - t0:.1f}s"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    try:
        sys.exit(main())
    except ErnieDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
