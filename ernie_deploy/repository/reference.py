"""The reference profile `build` records for each model it builds: what the model answers on texts like those it
will serve, counted in the buckets of core.profile, the baseline its live answers are compared with (drift).

The profile is counted the way the served model counts its own answers: the model runs offline as one fused python
step (the fused layout's: serving.pipeline.PipelineStep, or a staged kind's own, built from the config dict Triton
would hand it, over a version folder holding the files the build serves) on requests of up to REQUEST_TEXTS texts,
and each request's texts and answers go through the same `serving.watch.observe` the answering step calls. The texts
are the `--reference FILE` given, else the model's dev split when the build finds it (the demo models have one; a
model trained on other data does not).

The result goes into the record (`ModelSpec.reference`) and, as reference.json, into the version folder of the
answering step (`Layout.answering`), where the served step reads it at load and exports it as gauges.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadDataError, ErnieDeployError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.io import NATIVE
from ernie_deploy.core.profile import CHARS, READING, Profile
from ernie_deploy.core.settings import ServingSettings
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TOKENIZER_STEP
from ernie_deploy.fetch.data import data_dir, read_split_file, split_file, task_texts
from ernie_deploy.serving.multi_label import THRESHOLDS_FILE
from ernie_deploy.serving.postprocess_steps import WATCHES
from ernie_deploy.serving.steps import STEPS
from ernie_deploy.serving.texts import text_problem
from ernie_deploy.serving.watch import REFERENCE_FILE, observe

# At most this many texts make a reference, reading at most MAX_REFERENCE_CHARS characters in all. The drift score
# compares shares with Jensen-Shannon divergence, and the divergence of a sample of n texts from the distribution it
# was drawn from is about (buckets - 1) / (8 n ln 2): for 10 labels 0.002 at 1,000 texts and 0.008 at 200, against
# the alerts' threshold of 0.1 (deployfiles/drift_rules.py). So a few hundred texts are enough, and the bound is the
# build's time: the characters the model reads (a cut text's first max_seq_len, a windowed text's every one) are what
# it costs. Measured on this 2-core host, with other work running: the demo classifier's 1,000 dev titles (19k
# characters) took 1.8-2.4 s (2 CPU seconds), and 1,000 of the demo NER model's dev sentences (42k characters, most
# read in windows) 6.9 CPU seconds; at 25,000 characters the NER model reads 586 of them in 3.9-5.2 s (3.5 CPU s).
MAX_REFERENCE_TEXTS = 1_000
MAX_REFERENCE_CHARS = 25_000
# The largest --reference file read at all, checked before reading it: 1,000 texts of 16 KiB each (a cut text is read
# up to the model's length; the rest of a longer one only costs the build its bytes).
REFERENCE_FILE_BYTES = 16 * 1024 * 1024
# Texts per request sent through the offline step: what a batch client sends, and a bound on the padding one long
# text costs the texts it is merged with.
REQUEST_TEXTS = 32
# A dev split past those bounds is sampled with this seed: a seeded sample is the same at every build, and unlike the
# first N texts it does not inherit the file's order (a split written class by class, or source by source).
SAMPLE_SEED = 0
DEV_SPLIT = "dev split"
# What a user gives when the build finds no texts of the model's own.
REFERENCE_FIX = (
    "pass `--reference FILE`: texts like those the model will serve, one per line (UTF-8; a pair model's as "
    f"text<TAB>text_pair), at most {MAX_REFERENCE_TEXTS:,}; or a .tsv / .jsonl split file of the model's format"
)


@dataclass(frozen=True)
class ReferenceTexts:
    source: str  # DEV_SPLIT, or the --reference file's name
    texts: list  # each a str, or a (text, text_pair) tuple for a pair model


# Which texts -----------------------------------------------------------------------------------------------------
def read_reference_file(path: str | Path, model: ModelSpec) -> ReferenceTexts:
    """The texts of a `--reference` file for `model`, every one checked as the served model would check it; a clear
    refusal naming the line (or text) and the fix otherwise."""
    path = Path(path)
    if not path.is_file():
        raise BadDataError(f"--reference {path}: no such file", REFERENCE_FIX)
    if path.stat().st_size > REFERENCE_FILE_BYTES:
        raise BadDataError(
            f"--reference {path} is {path.stat().st_size:,} bytes; a reference file is at most "
            f"{REFERENCE_FILE_BYTES:,} (it is read whole, and at most {MAX_REFERENCE_TEXTS:,} of its texts are used)",
            f"pass at most {MAX_REFERENCE_TEXTS:,} texts like the traffic to expect",
        )
    pairs = len(model.task_spec.inputs) == 2
    if path.suffix in (".tsv", ".jsonl"):
        texts = read_split_file(path)[0]
        where = [f"text {i}" for i in range(1, len(texts) + 1)]
        if texts and pairs != isinstance(texts[0], tuple):
            raise BadDataError(
                f"--reference {path} holds {'text pairs' if not pairs else 'single texts'}; model {model.name!r} "
                f"takes {'a text and a text_pair' if pairs else 'one text'}",
                "give a split file of the model's own format (`label<TAB>text`, or `label<TAB>text<TAB>text_pair` "
                "for a pair model)",
            )
    else:
        texts, where = _text_lines(path, pairs)
    if not texts:
        raise BadDataError(f"--reference {path} holds no texts", REFERENCE_FIX)
    if len(texts) > MAX_REFERENCE_TEXTS:
        raise BadDataError(
            f"--reference {path} holds {len(texts):,} texts; a reference is at most {MAX_REFERENCE_TEXTS:,} (enough "
            "for the drift score, in seconds)",
            f"pass a sample of at most {MAX_REFERENCE_TEXTS:,} of them, e.g. `shuf -n {MAX_REFERENCE_TEXTS} "
            "--random-source=FILE FILE > sample.txt`",
        )
    limit = model.max_text_chars
    for text, at in zip(texts, where):
        problem = _text_problem(text, limit)
        if problem:
            raise BadDataError(
                f"--reference {path}, {at}: {problem}",
                f"give texts the model serves: at least one visible character and at most {limit:,} characters each "
                "(its max_text_chars), or build it with a larger --max-text-chars",
            )
    read = [read_chars(t, model) for t in texts]
    if sum(read) > MAX_REFERENCE_CHARS:
        fit = int(np.searchsorted(np.cumsum(read), MAX_REFERENCE_CHARS, side="right"))
        raise BadDataError(
            f"--reference {path}: the model would read {sum(read):,} characters of its texts; a reference reads at "
            f"most {MAX_REFERENCE_CHARS:,}, to keep the build within seconds",
            f"pass fewer or shorter texts (its first {fit:,} fit)",
        )
    return ReferenceTexts(path.name, list(texts))


def read_chars(text, model: ModelSpec) -> int:
    """The characters of `text` (a str or a pair) the model reads: all of them in windows, else at most max_seq_len
    (a cut text's tokens are at most that many, and a token is at least one character)."""
    chars = sum(map(len, text)) if isinstance(text, tuple) else len(text)
    return chars if model.long_text == "window" else min(chars, model.max_seq_len)


def _text_lines(path: Path, pairs: bool) -> tuple[list, list[str]]:
    """A text file's texts, one per line (blank lines skipped), with where each is ("line N")."""
    raw = path.read_bytes()
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise BadDataError(
            f"--reference {path}, line {line}: not UTF-8 ({exc.reason} at byte {exc.start})",
            "save the file as UTF-8",
        ) from None
    texts, where = [], []
    # Split on "\n" only: str.splitlines would also break at characters such as U+2028, which a text may hold.
    for number, line in enumerate(content.removeprefix("\ufeff").split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        if pairs:
            fields = line.split("\t")
            if len(fields) != 2:
                raise BadDataError(
                    f"--reference {path}, line {number}: {len(fields)} tab-separated fields; a pair model takes "
                    "text<TAB>text_pair",
                    "write each pair on one line as text<TAB>text_pair",
                )
            texts.append(tuple(fields))
        else:
            texts.append(line)
        where.append(f"line {number}")
    return texts, where


def _text_problem(text, limit: int | None) -> str | None:
    """Why the served model would refuse `text` (a str or a pair), or None."""

    for part in text if isinstance(text, tuple) else (text,):
        problem = text_problem(part)
        if problem:
            return f"the text {problem}"
        if limit is not None and len(part) > limit:
            return f"a text of {len(part):,} characters, over the model's limit of {limit:,} (max_text_chars)"
    return None


def dev_split_texts(model: ModelSpec) -> tuple[ReferenceTexts | None, str]:
    """The model's dev split (its task's dataset, prepared by `ernie-deploy fetch-data`) as reference texts: a seeded
    sample of at most MAX_REFERENCE_TEXTS, reading at most MAX_REFERENCE_CHARS characters; or None and why not: the
    split is not there, or it is labelled with labels the model does not have (a model of the task trained on other
    data: those texts are not its own)."""

    task = model.task_spec
    path = split_file(data_dir(task.dataset), "dev", task.split_format)
    if not path.is_file():
        return None, f"no dev split of its own ({path} is not there)"
    try:
        texts, gold = read_split_file(path)
    except ErnieDeployError as exc:
        return None, f"its dev split {path} cannot be read ({exc.problem})"
    named = {label for g in gold for label in ([g] if isinstance(g, str) else g)}
    # A retrieval split labels its pairs relevant, which is no label of the model: its texts are still its own.
    if task.kind_facts.scored_per_text and not named <= set(model.labels):
        return None, f"{path} is labelled with labels the model does not have: not its data"
    texts = task_texts(task, texts)
    # Texts the served model would refuse are not what it answers.
    texts = [t for t in texts if _text_problem(t, model.max_text_chars) is None]
    if not texts:
        return None, f"its dev split {path} holds no texts it serves"
    order = list(range(len(texts)))
    random.Random(SAMPLE_SEED).shuffle(order)
    kept, read = [], 0
    for i in order:
        read += read_chars(texts[i], model)
        if len(kept) == MAX_REFERENCE_TEXTS or read > MAX_REFERENCE_CHARS:
            break
        kept.append(i)
    return ReferenceTexts(DEV_SPLIT, [texts[i] for i in sorted(kept)]), ""


# The profile -------------------------------------------------------------------------------------------------------
def reference_profile(
    model: ModelSpec, onnx: Path, tokenizer_json: bytes, pad_token_id: int, texts: ReferenceTexts
) -> dict:
    """`model` (its record as served) run offline on `texts`: {"source", "texts", "shares"}
    (ModelSpec.reference), every bucket of the kind's series, chars and reading."""

    profile = count_profile(model, onnx, tokenizer_json, pad_token_id, texts.texts)
    series = (*WATCHES[model.kind].series, CHARS, READING)
    return {"source": texts.source, "texts": profile.texts, "shares": profile.shares(series, model.labels)}


def count_profile(model: ModelSpec, onnx: Path, tokenizer_json: bytes, pad_token_id: int, texts: list) -> Profile:
    """What `model` answers to `texts` (each a str, or a pair), counted as its served step counts: one fused python
    step over a version folder of the served files, fed requests of up to REQUEST_TEXTS texts, each request's texts
    and answers counted by serving.watch.observe."""
    from ernie_deploy.repository.layouts import get_layout

    labels = list(model.labels)
    watch = WATCHES[model.kind]
    config = offline_config(model, onnx, pad_token_id)
    profile = Profile()
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-reference.") as tmp:
        folder = Path(tmp)
        (folder / "tokenizer.json").write_bytes(tokenizer_json)
        _link_or_copy(Path(onnx), folder / "model.onnx")
        write_json(labels, folder / "labels.json")
        if model.thresholds is not None:
            write_json(model.thresholds, folder / THRESHOLDS_FILE)
        # The fused model's step (the whole pipeline; a staged kind's own extraction step).
        step = STEPS[get_layout("fused").python_steps(model, TOKENIZER_STEP, "python")[model.name]](config, folder)
        try:
            for request in _requests(texts, model):
                result = step.run_requests([request])[0]
                if isinstance(result, ErnieDeployError):
                    raise BadDataError(
                        f"model {model.name!r} refused reference texts: {result.problem}", result.fix or REFERENCE_FIX
                    )
                observe(profile, watch, labels, request, _as_sent(result))
        finally:
            step.close()
    return profile


def offline_config(model: ModelSpec, onnx: Path, pad_token_id: int) -> dict:
    """The config dict Triton would hand `model`'s fused python step (tokenizer, model and postprocess in one), built
    as the fused layout builds it from the record as served: the same reading (cut or windows, their
    sizes, the limits), decoding and thresholds as the served model in any layout. Only what does not change an
    answer differs: the python runtime on the CPU, ernie-deploy's own tensor names (the served watch reads them before
    a PaddleNLP wire renames them), no cache and no monitoring. It also answers the tensor that says how each text
    was read (`truncated`, or a windowed model's `window_starts`), which the served watch reads among its inputs."""
    from google.protobuf.json_format import MessageToDict

    from ernie_deploy.repository.layouts import task_configs

    # ServingSettings' defaults where they change no answer, with every core for onnxruntime (the build waits for it).
    offline = ServingSettings(runtime="python", monitor=False, max_batch_size=model.serving.max_batch_size)
    fused = replace(model, io=NATIVE, layout="fused", serving=offline)
    config = task_configs(fused, onnx, TOKENIZER_STEP, pad_token_id)[-1]
    as_dict = MessageToDict(config, preserving_proto_field_name=True)
    reading = "window_starts" if model.long_text == "window" else "truncated"
    if reading not in {o["name"] for o in as_dict.get("output", [])}:
        as_dict.setdefault("output", []).append({"name": reading})
    return as_dict


def _requests(texts: list, model: ModelSpec) -> Iterator[dict[str, np.ndarray]]:
    """Requests of up to REQUEST_TEXTS texts, each within the model's max_request_chars, as Triton hands them to a
    python step: BYTES [B, 1] of UTF-8 per input."""
    budget = model.max_request_chars
    batch: list = []
    chars = 0
    for text in texts:
        size = sum(map(len, text)) if isinstance(text, tuple) else len(text)
        if batch and (len(batch) == REQUEST_TEXTS or (budget is not None and chars + size > budget)):
            yield _tensors(batch)
            batch, chars = [], 0
        batch.append(text)
        chars += size
    if batch:
        yield _tensors(batch)


def _tensors(batch: list) -> dict[str, np.ndarray]:
    columns = list(zip(*batch)) if isinstance(batch[0], tuple) else [batch]
    names = ("text", "text_pair")
    return {
        name: np.array([t.encode("utf-8") for t in column], dtype=np.object_).reshape(-1, 1)
        for name, column in zip(names, columns)
    }


def _as_sent(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs as Triton sends them: a BYTES tensor's str elements as UTF-8 bytes (a step may answer either)."""
    out = {}
    for name, array in outputs.items():
        if array.dtype == np.object_ and any(isinstance(item, str) for item in array.reshape(-1)):
            items = [item.encode("utf-8") if isinstance(item, str) else item for item in array.reshape(-1)]
            array = np.array(items, dtype=np.object_).reshape(array.shape)
        out[name] = array
    return out


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.symlink(source.absolute(), target)
    except OSError:
        shutil.copyfile(source, target)


# At build ----------------------------------------------------------------------------------------------------------
def model_reference(
    model: ModelSpec,
    onnx: Path,
    tokenizer_json: bytes,
    reference_texts: str | None,
    pad_token_id: int,
    log: Callable[[str], None] | None = None,
) -> dict | None:
    """The reference profile `build` records for `model` (its record as served): on the texts of the file
    `reference_texts`, else on its dev split; None for a model built unmonitored (`build --no-monitor`), or where there
    are no texts (said in one line, with the fix)."""
    log = log or (lambda line: None)
    if not model.serving.monitor:
        return None
    if reference_texts is not None:
        texts = read_reference_file(reference_texts, model)
    else:
        texts, why = dev_split_texts(model)
        if texts is None:
            log(f"{model.name}: no reference profile recorded: {why}; {REFERENCE_FIX}")
            return None
    start = time.perf_counter()
    reference = reference_profile(model, onnx, tokenizer_json, pad_token_id, texts)
    log(
        f"{model.name}: reference profile of {reference['texts']:,} texts ({texts.source}) in "
        f"{time.perf_counter() - start:.1f} s"
    )
    return reference


def check_reference_file(model: ModelSpec, reference_texts: str | None) -> None:
    """Refuse a bad --reference file for `model` (the build calls it before anything is computed or written)."""
    if model.serving.monitor and reference_texts is not None:
        read_reference_file(reference_texts, model)


def write_reference(reference: dict, version_dir: Path) -> Path:
    """reference.json in the answering step's version folder, atomically."""

    return write_json(reference, Path(version_dir) / REFERENCE_FILE)
