"""Offline scores of the exported models: Paddle-native (Paddle Inference + paddlenlp's ErnieTokenizer) and
ONNX (onnxruntime + the serving tokenizer). The served score must equal these.

Both paths end in the same per-text predictions the server returns (a label name per text, or a list of
entities with character offsets), scored by the same function as the gRPC clients' results.

Every function takes the model's record (core.spec.ModelSpec) whole and reads from it what a model decides: its
labels, max_seq_len and lowercasing, how it reads a long text (windows and their size, stride and cut, or a cut),
its NER decoding and its thresholds. Beside the record go only what is no fact of the model: the texts and the files
(the static model, the ONNX model, the vocabulary). A reading other than the record's is a record changed
(`ModelSpec.updated`), so the defaults of a record that does not say are decided in one place (`long_text`,
`window_of`, `head_tokens`), the ones `build` serves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.evaluate.metrics import kind_evaluate, score
from ernie_deploy.evaluate.windows import window_of
from ernie_deploy.export.static import PaddlePredictor, StaticModel
from ernie_deploy.fetch.data import read_split_file
from ernie_deploy.kinds.token.evaluate import decoded_entities
from ernie_deploy.serving import record_defaults
from ernie_deploy.serving.encoding import Encoded, encode_items, encode_whole
from ernie_deploy.serving.entities import DECODINGS
from ernie_deploy.serving.multi_label import THRESHOLDS_FILE, read_thresholds
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.tokenizer import CLS, PAD, SEP, build_tokenizer, read_vocab
from ernie_deploy.serving.windows import check_stride, head_tail_ids, merge_windows, windows_from_tokens


def _chars(item) -> int:
    """Characters in a text, or in both texts of a (text, text_pair) tuple."""
    return sum(map(len, item)) if isinstance(item, tuple) else len(item)


def length_batches(texts: list, batch_size: int):
    """Length-sorted batches (less padding), yielded with their original positions."""
    order = sorted(range(len(texts)), key=lambda i: _chars(texts[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        yield idx, [texts[i] for i in idx]


# ----------------------------------------------------------------------------------------------------
# How a record reads a text: the defaults of what it does not say


def long_text(model: ModelSpec) -> str:
    """How `model` reads a text longer than max_seq_len: as its record says; a record `build` has not completed
    (an export's, a conversion's) reads as `build` serves its kind by default, the kind's first long-text mode."""
    return record_defaults.long_text(model)


def head_tokens(model: ModelSpec) -> int | None:
    """Tokens a head+tail cut keeps from a long text's head (the record's, else serving.windows'
    default_head_tokens); None where `model` keeps the head alone."""
    return record_defaults.head_tokens(model)


def with_thresholds(model: ModelSpec, folder: str | Path) -> ModelSpec:
    """`model` with the thresholds the server decides a multi-label model's labels by: its record's, else those
    `convert` wrote beside the ONNX model in `folder` (a record read from the export, which the conversion did not
    complete, carries none). A model of another kind is returned as it is."""

    if not model.task_spec.per_label_thresholds or model.thresholds is not None:
        return model
    return replace(model, thresholds=read_thresholds(Path(folder) / THRESHOLDS_FILE, list(model.labels)))


def _answer_facts(model: ModelSpec, every_decoding: bool) -> dict:
    """What the kind's postprocess reads from the record besides the labels: a token model's NER decoding (every
    one of serving.entities.DECODINGS with `every_decoding`, a dict per text then), a multi-label model's
    thresholds."""
    if model.kind_facts.entities:
        return {"decoding": DECODINGS if every_decoding else record_defaults.decoding(model)}
    if model.task_spec.per_label_thresholds:
        return {"thresholds": model.thresholds}
    return {}


# ----------------------------------------------------------------------------------------------------
# Texts cut to max_seq_len (the head, or the head and the tail)


def predictions(
    model: ModelSpec, logits: np.ndarray, enc: Encoded, texts: list[str], *, every_decoding: bool = False
) -> list:
    """Each text's answer from one batch's logits, as the model's postprocess step gives it (its kind's `predict`,
    with `_answer_facts`)."""
    predict = kind_evaluate(model.task_spec).predict
    return predict(list(model.labels), logits, enc, texts, **_answer_facts(model, every_decoding))


def predict(
    model: ModelSpec,
    texts: list[str],
    encode: Callable[[list[str]], Encoded],
    run: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    batch_size: int = 64,
    desc: str = "",
    every_decoding: bool = False,
) -> list:
    out: list = [None] * len(texts)
    for idx, batch in tqdm(list(length_batches(texts, batch_size)), desc=desc, unit="batch", leave=False):
        enc = encode(batch)
        logits = run(enc.input_ids, enc.token_type_ids)
        for i, value in zip(idx, predictions(model, logits, enc, batch, every_decoding=every_decoding)):
            out[i] = value
    return out


def paddle_encoder(model: ModelSpec, vocab_file: str | Path) -> Callable[[list[str]], Encoded]:
    """paddlenlp's ErnieTokenizer (lowercasing as `model` does), its output laid out like the serving tokenizer's
    (padded to the longest), a long text cut as `model` reads it: its first max_seq_len tokens, or with head_tail
    its head and its tail (serving.windows.head_tail_ids, the tokenizer step's cut)."""
    from paddlenlp.transformers import ErnieTokenizer

    tokenizer = ErnieTokenizer(str(vocab_file), do_lower_case=model.do_lower_case)
    max_seq_len, head = model.max_seq_len, head_tokens(model)
    keep = max_seq_len - 2

    def encode(batch: list) -> Encoded:
        if head is None:
            # A batch of (text, text_pair) tuples goes in as paddlenlp takes pairs: the texts, then their pairs.
            columns = list(zip(*batch)) if batch and isinstance(batch[0], tuple) else [batch]
            enc = tokenizer(
                *map(list, columns),
                max_length=max_seq_len,
                truncation=True,
                return_offsets_mapping=True,
                return_attention_mask=False,
            )
            rows = list(zip(enc["input_ids"], enc["token_type_ids"], enc["offset_mapping"]))
            # Informational only (no score reads it): a row that fills max_seq_len was most likely cut.
            cut = [len(ids) >= max_seq_len for ids, _, _ in rows]
        else:  # head_tail cuts one text (build refuses it for pairs): whole, then its middle left out
            enc = tokenizer(list(batch), truncation=False, return_offsets_mapping=True, return_attention_mask=False)
            rows, cut = [], []
            for ids, spans in zip(enc["input_ids"], enc["offset_mapping"]):
                kept = [ids[0], *head_tail_ids(ids[1:-1], keep, head), ids[-1]]
                rows.append((kept, [0] * len(kept), [spans[0], *head_tail_ids(spans[1:-1], keep, head), spans[-1]]))
                cut.append(len(ids) - 2 > keep)
        lengths = np.array([len(ids) for ids, _, _ in rows], np.int64)
        width = int(lengths.max())
        ids = np.zeros((len(batch), width), np.int64)
        types = np.zeros_like(ids)
        offsets = np.zeros((len(batch), width, 2), np.int64)
        for row, (n, (row_ids, row_types, row_offsets)) in enumerate(zip(lengths, rows)):
            ids[row, :n] = row_ids
            types[row, :n] = row_types
            offsets[row, :n] = row_offsets
        return Encoded(ids, types, offsets, lengths, np.array(cut, dtype=bool))

    return encode


def paddle_predictions(
    model: ModelSpec, static: StaticModel, texts: list[str], *, every_decoding: bool = False
) -> list:
    """The Paddle-native reference (paddlenlp's tokens, Paddle Inference's logits of `static`'s files), each text
    read as `model` reads it: in its windows (`paddle_window_predictions`), or cut."""

    if long_text(model) == "window":
        return paddle_window_predictions(model, static, texts, every_decoding=every_decoding)
    return predict(
        model,
        texts,
        paddle_encoder(model, static.vocab_file),
        PaddlePredictor(static),
        desc="paddle",
        every_decoding=every_decoding,
    )


def onnx_predictions(
    model: ModelSpec,
    onnx_path: str | Path,
    vocab_file: str | Path,
    texts: list[str],
    *,
    every_decoding: bool = False,
) -> list:
    """What the server computes, in-process: the serving tokenizer and onnxruntime, each text read as `model` reads
    it: in its windows (`onnx_window_predictions`), or cut as the tokenizer step cuts it."""

    if long_text(model) == "window":
        return onnx_window_predictions(model, onnx_path, vocab_file, texts, every_decoding=every_decoding)
    tokenizer = build_tokenizer(vocab_file, lowercase=model.do_lower_case)
    head = head_tokens(model)
    return predict(
        model,
        texts,
        lambda batch: encode_items(tokenizer, batch, model.max_seq_len, head_tokens=head),
        OnnxModel(onnx_path),
        desc="onnx",
        every_decoding=every_decoding,
    )


def served_predictions(model: ModelSpec, onnx_path: str | Path, vocab_file: str | Path, texts: list[str]) -> list:
    """What the served model answers, in process, read as its record says it is served (the served record, or the
    artifacts' record, which reads as `build` serves it by default), deciding a multi-label model's labels by the
    thresholds it is served with (`with_thresholds`: the record's, else those beside `onnx_path`)."""
    model = with_thresholds(model, Path(onnx_path).parent)
    return onnx_predictions(model, onnx_path, vocab_file, texts)


def evaluate(model: ModelSpec, static: StaticModel, onnx_path: str | Path, split_file: str | Path) -> dict:
    """{"paddle": report, "onnx": report} on a split file (the task's format: TSV or JSON Lines), each model reading
    the texts as `model`'s record says (`static` and `onnx_path`: its files): a record `build` has not completed
    reads as `build` serves it by default (a token model in windows of `ModelSpec.window_default`), so the scores
    are the served ones. A multi-label model decides by its record's thresholds, else those beside `onnx_path`.

    A token model is scored under every NER decoding from one run of each model: "paddle" and "onnx" are the
    scores under the decoding its record names (the one `build` serves), "ner_decoding" names it, and
    "decodings" holds {decoding: {"paddle": report, "onnx": report}} for each of serving.entities.DECODINGS."""

    if model.kind_facts.staged:  # its answers come from staged model runs, not one batch of logits: its own reading
        return kind_evaluate(model.task_spec).offline(model, static, onnx_path, split_file)
    task, labels = model.task_spec, list(model.labels)
    model = with_thresholds(model, Path(onnx_path).parent)
    texts, gold = read_split_file(split_file)
    every = model.kind_facts.entities
    paddle = paddle_predictions(model, static, texts, every_decoding=every)
    onnx = onnx_predictions(model, onnx_path, static.vocab_file, texts, every_decoding=every)
    if not every:
        return {"paddle": score(task, texts, gold, paddle, labels), "onnx": score(task, texts, gold, onnx, labels)}
    each = {
        d: {
            name: score(task, texts, gold, [p[d] for p in predicted], labels)
            for name, predicted in (("paddle", paddle), ("onnx", onnx))
        }
        for d in DECODINGS
    }
    served = record_defaults.decoding(model)
    return {**each[served], "ner_decoding": served, "decodings": each}


# ----------------------------------------------------------------------------------------------------
# Texts longer than the model's window: NER over overlapping windows (ernie_deploy.serving.windows)


def window_predict(
    model: ModelSpec,
    texts: list[str],
    whole: Callable[[list[str]], list[tuple[list[int], list]]],
    run: Callable[[np.ndarray, np.ndarray], np.ndarray],
    specials: tuple[int, int, int],
    *,
    batch_size: int = 64,
    desc: str = "",
    every_decoding: bool = False,
) -> list:
    """Entities of each text read in `model`'s windows (`window_of`: size, stride and cut), as the served windowed
    model returns them: `whole` tokenizes texts untruncated into (ids, offsets) of their real tokens, the windows
    and their merge are the serving code's (serving.windows), `run` gives logits of [windows, tokens] ids.
    specials: the [CLS], [SEP] and [PAD] ids. Decoded under the record's NER decoding, or with `every_decoding`
    under each of serving.entities.DECODINGS (a dict per text)."""
    # Windows are how a model that decides every token reads a long text, so what they end in is entities.

    if not model.kind_facts.reads_windows:
        raise BadOptionsError(
            f"{model.name} is a {model.kind} model, which does not read texts in windows",
            "read it cut: a record whose long_text is one of " + ", ".join(model.kind_facts.long_text_modes),
        )
    size, stride, cut = window_of(model)
    decoding = _answer_facts(model, every_decoding)["decoding"]
    labels = list(model.labels)
    check_stride(stride, size)
    cls_id, sep_id, pad_id = specials
    out: list = [None] * len(texts)
    # batch_size texts at a time (length-sorted), their windows run batch_size at a time.
    for idx, batch in tqdm(list(length_batches(texts, batch_size)), desc=desc, unit="batch", leave=False):
        tokens = whole(batch)
        win = windows_from_tokens(
            [ids for ids, _ in tokens],
            [o for _, o in tokens],
            size - 2,
            stride,
            cls_id,
            sep_id,
            pad_id,
            texts=batch if cut == "sentences" else None,
        )
        real = win.window_starts >= 0
        ids, types = win.window_ids[real], win.window_type_ids[real]
        logits = np.concatenate(
            [run(ids[i : i + batch_size], types[i : i + batch_size]) for i in range(0, len(ids), batch_size)]
        )
        window_logits = np.zeros((*win.window_ids.shape, logits.shape[-1]), dtype=logits.dtype)
        window_logits[real] = logits
        merged = merge_windows(window_logits, win.window_starts, win.window_ends, win.text_lengths)
        decoded = decoded_entities(labels, merged, win.text_lengths, win.text_offsets, batch, decoding)
        for i, entities in zip(idx, decoded):
            out[i] = entities
    return out


def paddle_whole(model: ModelSpec, vocab_file: str | Path) -> Callable[[list[str]], list]:
    """paddlenlp's ErnieTokenizer without truncation (lowercasing as `model` does): (ids, offsets) of each text's
    real tokens."""
    from paddlenlp.transformers import ErnieTokenizer

    tokenizer = ErnieTokenizer(str(vocab_file), do_lower_case=model.do_lower_case)

    def whole(batch: list[str]) -> list:
        enc = tokenizer(batch, truncation=False, return_offsets_mapping=True, return_attention_mask=False)
        return [(ids[1:-1], spans[1:-1]) for ids, spans in zip(enc["input_ids"], enc["offset_mapping"])]

    return whole


def _specials(vocab_file: str | Path) -> tuple[int, int, int]:

    vocab = read_vocab(vocab_file)
    return vocab[CLS], vocab[SEP], vocab[PAD]


def paddle_window_predictions(
    model: ModelSpec, static: StaticModel, texts: list[str], *, every_decoding: bool = False
) -> list:
    """The Paddle-native reference of a windowed model: paddlenlp's tokens, Paddle Inference's logits of `static`'s
    files, in the windows `model`'s record reads (`window_of`)."""

    return window_predict(
        model,
        texts,
        paddle_whole(model, static.vocab_file),
        PaddlePredictor(static),
        _specials(static.vocab_file),
        desc="paddle windows",
        every_decoding=every_decoding,
    )


def onnx_window_predictions(
    model: ModelSpec, onnx_path: str | Path, vocab_file: str | Path, texts: list[str], *, every_decoding: bool = False
) -> list:
    """What the windowed server computes, in-process: the serving tokenizer and onnxruntime, in the windows
    `model`'s record reads (`window_of`)."""

    tokenizer = build_tokenizer(vocab_file, lowercase=model.do_lower_case)
    return window_predict(
        model,
        texts,
        lambda batch: encode_whole(tokenizer, batch),
        OnnxModel(onnx_path),
        _specials(vocab_file),
        desc="onnx windows",
        every_decoding=every_decoding,
    )
