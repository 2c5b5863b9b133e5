"""Offline scores of the exported models: Paddle-native (Paddle Inference + paddlenlp's ErnieTokenizer) and
ONNX (onnxruntime + the serving tokenizer). The served score must equal these.

Both paths end in the same per-text predictions the server returns (a label name per text, or a list of
entities with character offsets), scored by the same function as the gRPC clients' results.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN, TaskSpec
from ernie_deploy.export.static import StaticModel
from ernie_deploy.kinds import table
from ernie_deploy.serving.encoding import Encoded
from ernie_deploy.serving.entities import DEFAULT_DECODING
from ernie_deploy.serving.windows import DEFAULT_CUT, recorded_cut


def _chars(item) -> int:
    """Characters in a text, or in both texts of a (text, text_pair) tuple."""
    return sum(map(len, item)) if isinstance(item, tuple) else len(item)


def _batches(texts: list, batch_size: int):
    """Length-sorted batches (less padding), yielded with their original positions."""
    order = sorted(range(len(texts)), key=lambda i: _chars(texts[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        yield idx, [texts[i] for i in idx]


# Logits of one batch -> what the ensemble returns per text (the postprocess steps' logic), per task kind
# (ernie_deploy/kinds/<kind>/evaluate.py).
PREDICTORS = table("evaluate", "predict")


def predictions(
    task: TaskSpec, labels: list[str], logits: np.ndarray, enc: Encoded, texts: list[str], **model_files
) -> list:
    """`model_files`: what a model stores beside its labels, for the kinds that read it (thresholds=...)."""
    return PREDICTORS[task.kind](labels, logits, enc, texts, **model_files)


def predict(
    task: TaskSpec,
    labels: list[str],
    texts: list[str],
    encode: Callable[[list[str]], Encoded],
    run: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    batch_size: int = 64,
    desc: str = "",
    **model_files,
) -> list:
    out: list = [None] * len(texts)
    for idx, batch in tqdm(list(_batches(texts, batch_size)), desc=desc, unit="batch", leave=False):
        enc = encode(batch)
        logits = run(enc.input_ids, enc.token_type_ids)
        for i, value in zip(idx, predictions(task, labels, logits, enc, batch, **model_files)):
            out[i] = value
    return out


def paddle_encoder(
    vocab_file: str | Path, max_seq_len: int, do_lower_case: bool = True
) -> Callable[[list[str]], Encoded]:
    """paddlenlp's ErnieTokenizer, its output laid out like the serving tokenizer's (padded to the longest).

    max_seq_len and do_lower_case: the exported model's (StaticModel.max_seq_len, .do_lower_case)."""
    from paddlenlp.transformers import ErnieTokenizer

    tokenizer = ErnieTokenizer(str(vocab_file), do_lower_case=do_lower_case)

    def encode(batch: list) -> Encoded:
        # A batch of (text, text_pair) tuples goes in as paddlenlp takes pairs: the texts, then their pairs.
        columns = list(zip(*batch)) if batch and isinstance(batch[0], tuple) else [batch]
        enc = tokenizer(
            *map(list, columns),
            max_length=max_seq_len,
            truncation=True,
            return_offsets_mapping=True,
            return_attention_mask=False,
        )
        lengths = np.array([len(ids) for ids in enc["input_ids"]], np.int64)
        width = int(lengths.max())
        ids = np.zeros((len(batch), width), np.int64)
        types = np.zeros_like(ids)
        offsets = np.zeros((len(batch), width, 2), np.int64)
        for row, n in enumerate(lengths):
            ids[row, :n] = enc["input_ids"][row]
            types[row, :n] = enc["token_type_ids"][row]
            offsets[row, :n] = enc["offset_mapping"][row]
        # Informational only (no score reads it): a row that fills max_seq_len was most likely cut.
        return Encoded(ids, types, offsets, lengths, lengths >= max_seq_len)

    return encode


def paddle_predictions(task: TaskSpec, static: StaticModel, texts: list[str], **model_files) -> list:
    """The Paddle-native reference."""
    from ernie_deploy.export.static import PaddlePredictor

    return predict(
        task,
        static.labels,
        texts,
        paddle_encoder(static.vocab_file, static.max_seq_len, static.do_lower_case),
        PaddlePredictor(static),
        desc="paddle",
        **model_files,
    )


def onnx_predictions(
    task: TaskSpec,
    onnx_path: str | Path,
    vocab_file: str | Path,
    labels: list[str],
    texts: list[str],
    *,
    max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
    **model_files,
) -> list:
    """What the server computes, in-process: the serving tokenizer (texts cut to the model's `max_seq_len` tokens)
    and onnxruntime."""
    from ernie_deploy.serving.encoding import encode_items
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(vocab_file)
    return predict(
        task,
        labels,
        texts,
        lambda batch: encode_items(tokenizer, batch, max_seq_len),
        OnnxModel(onnx_path),
        desc="onnx",
        **model_files,
    )


def served_predictions(
    task: TaskSpec,
    onnx_path: str | Path,
    vocab_file: str | Path,
    labels: list[str],
    texts: list[str],
    spec=None,
    **model_files,
) -> list:
    """What the served model answers, in process, read as its record says it is served (core.spec.ModelSpec: the
    served record, or the artifacts' record, whose window `build` takes by default): a model that reads long texts in
    windows, in those windows; any other, cut. Without a record, windows of max_seq_len."""
    mode = (spec.long_text if spec is not None else None) or task.kind_facts.long_text_modes[0]
    max_seq_len = spec.max_seq_len if spec is not None else DEFAULT_MAX_SEQ_LEN
    if mode != "window":
        return onnx_predictions(task, onnx_path, vocab_file, labels, texts, max_seq_len=max_seq_len, **model_files)
    window = (spec.window_size or spec.window_default) if spec is not None else max_seq_len
    stride = spec.window_stride if spec is not None else None
    decoding = model_files.get("decoding", DEFAULT_DECODING)
    cut = recorded_cut(spec.window_cut, spec.long_text) if spec is not None else DEFAULT_CUT
    return onnx_window_predictions(
        task, onnx_path, vocab_file, labels, texts, stride, window=window, decoding=decoding, cut=cut
    )


def evaluate(
    task: TaskSpec, static: StaticModel, onnx_path: str | Path, split_file: str | Path, long_text: str | None = None
) -> dict:
    """{"paddle": report, "onnx": report} on a split file (the task's format: TSV or JSON Lines). long_text: how
    a text longer than max_seq_len is read, "window" or a cut ("head"; head_tail is the tokenizer step's alone);
    None: as `build` serves the task by default (its kind's first long-text mode, in windows of the length the model
    was trained on), so the scores are the served ones.

    A token model is scored under every NER decoding from one run of each model: "paddle" and "onnx" are the
    scores under the decoding its export recorded (the one `build` serves), "ner_decoding" names it, and
    "decodings" holds {decoding: {"paddle": report, "onnx": report}} for each of serving.entities.DECODINGS."""
    from ernie_deploy.evaluate.metrics import score
    from ernie_deploy.fetch.data import read_split_file
    from ernie_deploy.serving.entities import DECODINGS

    texts, gold = read_split_file(split_file)
    kind = task.kind_facts
    mode = long_text or kind.long_text_modes[0]
    decodings = {"decoding": DECODINGS} if kind.entities else {}
    if mode == "window":
        # in windows of the length the model was trained on, as `build` serves it (core.spec.window_default)
        window = {"window": static.spec.window_default, "cut": DEFAULT_CUT, **decodings}
        paddle = paddle_window_predictions(task, static, texts, **window)
        onnx = onnx_window_predictions(task, onnx_path, static.vocab_file, static.labels, texts, **window)
    else:
        files = {**model_files(task, Path(onnx_path).parent, static.labels), **decodings}
        paddle = paddle_predictions(task, static, texts, **files)
        onnx = onnx_predictions(
            task, onnx_path, static.vocab_file, static.labels, texts, max_seq_len=static.max_seq_len, **files
        )
    if not decodings:
        return {
            "paddle": score(task, texts, gold, paddle, static.labels),
            "onnx": score(task, texts, gold, onnx, static.labels),
        }
    each = {
        d: {
            name: score(task, texts, gold, [p[d] for p in predicted], static.labels)
            for name, predicted in (("paddle", paddle), ("onnx", onnx))
        }
        for d in DECODINGS
    }
    served = static.ner_decoding or DEFAULT_DECODING
    return {**each[served], "ner_decoding": served, "decodings": each}


def model_files(task: TaskSpec, folder: str | Path, labels: list[str]) -> dict:
    """What the postprocess reads besides labels.json, from `folder` (the converted model's, where `convert` wrote
    them, or a postprocess step's version folder): a multi-label model's thresholds, so that offline predictions
    decide as the server does."""
    from ernie_deploy.serving.multi_label import THRESHOLDS_FILE, read_thresholds

    return {"thresholds": read_thresholds(Path(folder) / THRESHOLDS_FILE, labels)} if task.thresholds else {}


# ----------------------------------------------------------------------------------------------------
# Texts longer than the model's window: NER over overlapping windows (ernie_deploy.serving.windows)


def window_predict(
    labels: list[str],
    texts: list[str],
    whole: Callable[[list[str]], list[tuple[list[int], list]]],
    run: Callable[[np.ndarray, np.ndarray], np.ndarray],
    specials: tuple[int, int, int],
    max_seq_len: int,
    stride: int,
    *,
    batch_size: int = 64,
    desc: str = "",
    decoding: str | tuple = DEFAULT_DECODING,
    cut: str = DEFAULT_CUT,
) -> list:
    """Entities of each text read in windows, as the served windowed model returns them: `whole` tokenizes texts
    untruncated into (ids, offsets) of their real tokens, the windows and their merge are the serving code's
    (serving.windows), `run` gives logits of [windows, tokens] ids. specials: the [CLS], [SEP] and [PAD] ids.
    decoding: the NER decoding, or a tuple of them (decoded_entities). cut: "sentences" (whole sentences packed
    into windows) or "sliding" (serving.windows.CUTS)."""
    # Windows are how a model that decides every token reads a long text, so what they end in is entities.
    from ernie_deploy.kinds.token.evaluate import decoded_entities
    from ernie_deploy.serving.windows import check_stride, merge_windows, windows_from_tokens

    check_stride(stride, max_seq_len)
    cls_id, sep_id, pad_id = specials
    out: list = [None] * len(texts)
    # batch_size texts at a time (length-sorted), their windows run batch_size at a time.
    for idx, batch in tqdm(list(_batches(texts, batch_size)), desc=desc, unit="batch", leave=False):
        tokens = whole(batch)
        win = windows_from_tokens(
            [ids for ids, _ in tokens],
            [o for _, o in tokens],
            max_seq_len - 2,
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


def paddle_whole(vocab_file: str | Path, do_lower_case: bool = True) -> Callable[[list[str]], list]:
    """paddlenlp's ErnieTokenizer without truncation: (ids, offsets) of each text's real tokens."""
    from paddlenlp.transformers import ErnieTokenizer

    tokenizer = ErnieTokenizer(str(vocab_file), do_lower_case=do_lower_case)

    def whole(batch: list[str]) -> list:
        enc = tokenizer(batch, truncation=False, return_offsets_mapping=True, return_attention_mask=False)
        return [(ids[1:-1], spans[1:-1]) for ids, spans in zip(enc["input_ids"], enc["offset_mapping"])]

    return whole


def _specials(vocab_file: str | Path) -> tuple[int, int, int]:
    from ernie_deploy.serving.tokenizer import CLS, PAD, SEP, read_vocab

    vocab = read_vocab(vocab_file)
    return vocab[CLS], vocab[SEP], vocab[PAD]


def paddle_window_predictions(
    task: TaskSpec,
    static: StaticModel,
    texts: list[str],
    stride: int | None = None,
    *,
    window: int | None = None,
    decoding: str | tuple = DEFAULT_DECODING,
    cut: str = DEFAULT_CUT,
) -> list:
    """The Paddle-native reference of a windowed model: paddlenlp's tokens, Paddle Inference's logits. window: tokens
    per window, [CLS] and [SEP] included (default the export's max_seq_len); stride: default half a window."""
    from ernie_deploy.export.static import PaddlePredictor
    from ernie_deploy.serving.windows import default_stride

    window = window or static.max_seq_len
    return window_predict(
        static.labels,
        texts,
        paddle_whole(static.vocab_file, static.do_lower_case),
        PaddlePredictor(static),
        _specials(static.vocab_file),
        window,
        stride or default_stride(window),
        desc="paddle windows",
        decoding=decoding,
        cut=cut,
    )


def onnx_window_predictions(
    task: TaskSpec,
    onnx_path: str | Path,
    vocab_file: str | Path,
    labels: list[str],
    texts: list[str],
    stride: int | None = None,
    *,
    window: int | None = None,
    decoding: str | tuple = DEFAULT_DECODING,
    cut: str = DEFAULT_CUT,
) -> list:
    """What the windowed server computes, in-process: the serving tokenizer and onnxruntime."""
    from ernie_deploy.serving.encoding import encode_whole
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import build_tokenizer
    from ernie_deploy.serving.windows import default_stride

    tokenizer = build_tokenizer(vocab_file)
    window = window or DEFAULT_MAX_SEQ_LEN
    return window_predict(
        labels,
        texts,
        lambda batch: encode_whole(tokenizer, batch),
        OnnxModel(onnx_path),
        _specials(vocab_file),
        window,
        stride or default_stride(window),
        desc="onnx windows",
        decoding=decoding,
        cut=cut,
    )
