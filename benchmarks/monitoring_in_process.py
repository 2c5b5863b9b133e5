"""The monitoring bench's in-process part (benchmarks/monitoring.py runs it after the served rounds): the fused step
watched and unwatched, and the watch's own work (`Watched._observe`: serving.watch.observe and the counts) timed with
timeit on the step's real inputs and outputs for the test texts, which says where the served difference goes."""

from __future__ import annotations

import timeit
from pathlib import Path

import numpy as np

from benchmarks.monitoring_results import WATCHED, model_name
from benchmarks.scores_in_process import step_config
from ernie_deploy.core.profile import Profile, chars_bucket
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.serving.postprocess_steps import WATCHES
from ernie_deploy.serving.steps import STEPS
from ernie_deploy.serving.watch import TEXT_NAMES, Watched, _readings, _text, observe


class _Answered:
    """A step that has already answered: what the watch wraps when only the watch is timed."""

    def close(self) -> None:
        pass


def time_in_process(item: ModelInputs, repo: Path, *, texts: int = 200, repeat: int = 5) -> dict:
    """The fused step (the default layout's one Triton model) watched and unwatched, one text a call, and the watch's
    own work on the same real inputs and outputs, split into its parts; microseconds per text."""

    steps, configs = {}, {}
    for w in WATCHED:
        folder = repo / model_name("default", w)
        configs[w] = step_config(folder)
        steps[w] = STEPS["pipeline"](configs[w], folder / "1")
    name = configs["watched"]["input"][0]["name"]
    requests = [{name: np.array([[t.encode("utf-8")]], dtype=np.object_)} for t in item.texts[:texts]]

    def run_all(step):
        return lambda: [step(r) for r in requests]

    for w in WATCHED:  # warm: onnxruntime's first runs, the tokenizer's caches
        run_all(steps[w])()
    whole = {}
    for _ in range(repeat):  # alternating, so that a disturbance hits both alike
        for w in WATCHED:
            t = timeit.timeit(run_all(steps[w]), number=1) / len(requests)
            whole[w] = min(whole.get(w, float("inf")), 1e6 * t)

    # The watch alone, on what the fused step hands it: the tokenizer's tensors, the logits and the texts (seen),
    # and the postprocess's answers (outputs).
    pipeline = steps["unwatched"]
    seen_outputs = []
    for r in requests:
        item_, texts_ = pipeline.check(r)
        tokens = pipeline.tokenizer.run([item_], pipeline.tokens)[0]
        logits = pipeline.model.run([tuple(tokens[n] for n in pipeline.inputs)])[0]
        seen = {**tokens, **logits, **texts_}
        post = pipeline.post
        outputs = post.run([post.check(seen)], {"label_id", "confidence"})[0]
        seen_outputs.append((seen, outputs))
    folder = repo / model_name("default", "watched")
    kind = item.task.kind
    watch = WATCHES[kind]
    watched = Watched(_Answered(), configs["watched"], folder / "1", watch)
    labels = watched.labels

    profiles = []
    for seen, outputs in seen_outputs:
        profiles.append(Profile())
        observe(profiles[-1], watch, labels, seen, outputs)
    triples = [(s, o, p) for (s, o), p in zip(seen_outputs, profiles)]

    def each(fn):
        return lambda: [fn(s, o, p) for s, o, p in triples]

    def count(s, o, p):  # what _observe does after observe: the batch's counts added to the pushed ones
        added = {watched.keys[key]: n for key, n in p.counts.items()}
        added[watched.texts_key] = p.texts
        watched.counts.add_keys(added)

    def chars(s, o, p):  # observe's length part, as observe computes it
        texts = [np.asarray(s[n]).reshape(1, -1) for n in TEXT_NAMES if s.get(n) is not None]
        return chars_bucket(sum(len(_text(t[0][0])) for t in texts))

    parts = {
        "observe_and_count": lambda s, o, p: watched._observe([(None, s)], [o]),
        "observe": lambda s, o, p: observe(Profile(), watch, labels, s, o),
        "read": lambda s, o, p: watch.read(o, labels),
        "answer_series": lambda s, o, p: [watch.profile(a) for a in watch.read(o, labels)],
        "chars": chars,
        "readings": lambda s, o, p: _readings(s, o, 1),
        "count": count,
    }
    timed: dict[str, float] = {}
    for _ in range(repeat):  # the parts in turn, each its best pass: none is always first on a busy host
        for key, fn in parts.items():
            t = 1e6 * timeit.timeit(each(fn), number=1) / len(seen_outputs)
            timed[key] = min(timed.get(key, float("inf")), t)
    for step in steps.values():
        step.close()
    watched.close()
    return {
        "texts": len(requests),
        "fused_step_us": whole,
        "fused_step_added_us": whole["watched"] - whole["unwatched"],
        "watch_us": timed,
    }
