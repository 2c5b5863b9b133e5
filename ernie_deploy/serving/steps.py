"""The serving steps that run inside Triton's python backend, as plain testable classes.

Each step is built from its model config (the dict Triton passes to `initialize`) and the version
folder holding its files, and maps a dict of numpy arrays (one request) to a dict of numpy arrays.
Only numpy, tokenizers and onnxruntime are imported here: paddle is for export, not serving.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadRequest, ErnieDeployError
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS, TEXT_INPUT, TOKENIZER_OUTPUTS, WINDOW_INPUTS, WINDOW_OUTPUTS
from ernie_deploy.serving.limits import ReadingLimits, TextLimits


def parameter(config: dict, key: str, default: str | None = None) -> str:
    value = config.get("parameters", {}).get(key, {}).get("string_value", default)
    if value is None:
        raise ErnieDeployError(
            f"model {config.get('name')!r} has no parameter {key!r}", "rebuild the repository with `ernie-deploy build`"
        )
    return value


def text_problem(item) -> str | None:
    """Why one element of a BYTES text tensor cannot be served, or None when it can."""
    try:
        text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
    except UnicodeDecodeError as exc:
        return f"is not valid UTF-8 ({exc.reason} at byte {exc.start})"
    if not text.strip():
        return "is empty"
    if not any(_kept(ch) for ch in text):
        # The tokenizer drops control and format characters (NUL included): nothing would be left to classify.
        return "has only control or format characters, which the tokenizer drops"
    return None


def _kept(ch: str) -> bool:
    return not (ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") or ch == "\ufffd")


_FIXES = {
    "is not": "encode texts as UTF-8",
    "is empty": "send at least one visible character per text",
    "has only": "send at least one visible character per text",
}


def decode_texts(array: np.ndarray, name: str = "text", limits: TextLimits | None = None) -> list[str]:
    """BYTES tensor [B, 1] -> list of str, rejecting what the model cannot use with a message that names
    every bad text of the request by its input and index (so a caller can resend the good ones). With `limits`, a
    text over the model's length limit is one of those, found before it is decoded where its bytes tell."""
    if array.dtype != np.object_:
        raise BadRequest(
            f"input {name!r} has dtype {array.dtype}; expected BYTES (TYPE_STRING)",
            "send UTF-8 strings as a BYTES tensor of shape [batch, 1]",
        )
    texts, problems, fixes = [], [], {}
    for i, item in enumerate(array.reshape(-1)):
        text, problem, fix = _decode_one(item, limits)
        if problem:
            problems.append(f"{name} {i} {problem}")
            fixes[fix] = None
        texts.append(text)
    if problems:
        raise BadRequest("; ".join(problems), "; ".join(fixes))
    return texts


def _decode_one(item, limits: TextLimits | None) -> tuple[str | None, str | None, str | None]:
    """(text, None, None) for a text the model can serve, else (None, problem, fix)."""
    if limits is not None and isinstance(item, bytes) and (problem := limits.bytes_problem(item)):
        return None, problem, limits.text_fix  # too long to be within the limit, whatever it decodes to
    problem = text_problem(item)
    if problem:
        return None, problem, next(fix for key, fix in _FIXES.items() if problem.startswith(key))
    text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
    if limits is not None and (problem := limits.text_problem(text)):
        return None, problem, limits.text_fix
    return text, None, None


def decode_inputs(inputs: dict[str, np.ndarray], names: list[str], limits: TextLimits | None = None) -> list:
    """The request's texts (one input) or (text, text_pair) tuples (two inputs), every input checked and named in
    the error: a pair with an empty side fails with that side's name and index. With `limits`, each text is held to
    the model's length limit and the request's texts together to its request limit."""
    missing = [n for n in names if inputs.get(n) is None]
    if missing:
        raise BadRequest(
            f"the request has no {' and no '.join(repr(n) for n in missing)} input",
            f"this model takes {' and '.join(repr(n) for n in names)}, one element per item each",
        )
    columns, problems = [], []
    for name in names:
        try:
            columns.append(decode_texts(inputs[name], name, limits))
        except BadRequest as exc:
            problems.append(exc)
    if problems:
        raise BadRequest("; ".join(e.problem for e in problems), "; ".join(dict.fromkeys(e.fix for e in problems)))
    if limits is not None:
        problem = limits.request_problem(sum(map(len, (t for c in columns for t in c))), sum(map(len, columns)))
        if problem:
            raise BadRequest(problem, limits.request_fix)
    if len(columns) == 1:
        return columns[0]
    if len({len(c) for c in columns}) != 1:
        raise BadRequest(
            f"{' and '.join(f'{len(c)} {n}' for c, n in zip(columns, names))} elements",
            "send one text_pair per text",
        )
    return list(zip(*columns))


class Step:
    """A serving step. Triton hands a python model every request its dynamic batcher merged into one
    `execute`; a step checks each request alone (a bad one fails with its own message, the rest go on)
    and then runs all the good ones as ONE batch: one tokenizer call, one onnxruntime run. That merged
    run, not a loop per request, is what makes dynamic batching pay off in a python backend."""

    def check(self, inputs: dict[str, np.ndarray]):
        """Validate and unpack one request; raise BadRequest naming what is wrong with it."""
        return inputs

    def check_request(self, inputs: dict[str, np.ndarray], wanted: set[str] | None):
        """`check`, for a step whose checks depend on what the request asks of it (`wanted`: its output names; None:
        all)."""
        return self.check(inputs)

    def run(self, items: list, requested: set[str] | None) -> list[dict[str, np.ndarray]]:
        """The checked requests -> their outputs, in order; `requested`: the outputs anyone reads (None: all)."""
        raise NotImplementedError

    def run_requests(
        self,
        requests: list[dict[str, np.ndarray]],
        requested: set[str] | None = None,
        wanted: list[set[str]] | None = None,
    ) -> list[dict[str, np.ndarray] | ErnieDeployError]:
        """`requested`: the outputs any request reads (None: all); `wanted`: each request's own (None: `requested`)."""
        results: list = [None] * len(requests)
        good, items = [], []
        for i, inputs in enumerate(requests):
            try:
                items.append(self.check_request(inputs, requested if wanted is None else wanted[i]))
                good.append(i)
            except ErnieDeployError as exc:
                results[i] = exc
        if items:
            try:
                outputs = self.run(items, requested)
            except ErnieDeployError as exc:  # a fault of the model, not of one request: every request hears it
                outputs = [exc] * len(items)
            except Exception:
                # Something in one request broke the merged run (say, a token id past the vocabulary sent
                # straight to the model step): run them one by one so only the culprit fails.
                outputs = [self._run_alone(item, requested) for item in items]
            for i, out in zip(good, outputs):
                results[i] = out
        return results

    def _run_alone(self, item, requested):
        try:
            return self.run([item], requested)[0]
        except ErnieDeployError as exc:
            return exc
        except Exception as exc:
            return ErnieDeployError(
                f"{type(self).__name__} failed on this request: {exc}",
                "check the request's tensors against the model's config",
            )

    def __call__(self, inputs: dict[str, np.ndarray], requested: set[str] | None = None) -> dict[str, np.ndarray]:
        """One request, as a plain function (tests, offline use)."""
        result = self.run_requests([inputs], requested)[0]
        if isinstance(result, ErnieDeployError):
            raise result
        return result


_WINDOW_OUTPUTS = frozenset(WINDOW_OUTPUTS)


def _split_rows(counts: list[int]) -> list[slice]:
    bounds = np.cumsum([0, *counts])
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


class TokenizerStep(Step):
    """text [B, 1] BYTES -> input_ids, token_type_ids [B, L] INT64 (padded to the longest text of the request),
    offsets [B, L, 2] INT64, lengths [B, 1] INT64, truncated [B, 1] BOOL; or the whole text in windows:
    window_ids, window_type_ids [B, W, L], window_starts [B, W], text_offsets [B, T, 2], text_lengths [B, 1]
    (see tasks.TOKENIZER_OUTPUTS). Only the outputs a request asks for are computed."""

    def __init__(self, config: dict, version_dir: Path):
        from ernie_deploy.serving.tokenizer import load_tokenizer

        self.tokenizer = load_tokenizer(Path(version_dir) / parameter(config, "tokenizer_file", "tokenizer.json"))
        # What it reads: the text, or a text and its pair (from its config's inputs).
        self.inputs = [i["name"] for i in config.get("input", [])] or [TEXT_INPUT.name]
        self.max_seq_len = int(parameter(config, "max_seq_len", "128"))
        self.pad_to_multiple_of = int(parameter(config, "pad_to_multiple_of", "1"))
        # How texts longer than max_seq_len are cut (ernie_deploy.serving.windows): windows for the models that
        # read `window_*`, the head (or head and tail) for those that read `input_ids`.
        self.window = int(parameter(config, "window_size", str(self.max_seq_len)))  # tokens, [CLS] and [SEP] too
        self.stride = int(parameter(config, "window_stride", str(max(1, (self.window - 2) // 2))))
        head = parameter(config, "head_tokens", "")
        self.head_tokens = int(head) if head else None
        # What one request may cost (serving.limits), per reading: checked before anything is tokenized.
        self.limits = ReadingLimits.from_parameters(lambda key: parameter(config, key, "") or None)
        # What it can make: every tokenizer output, but windows for a single text only (a pair is cut, never windowed).
        able = [t.name for t in TOKENIZER_OUTPUTS if len(self.inputs) == 1 or t.name not in WINDOW_OUTPUTS]
        self.outputs = [o["name"] for o in config.get("output", [])] or able
        unknown = set(self.outputs) - set(able)
        if unknown:
            raise ErnieDeployError(
                f"model {config.get('name')!r} declares outputs {sorted(unknown)} the tokenizer cannot produce",
                "rebuild the repository with `ernie-deploy build`",
            )

    def check(self, inputs):
        return self.check_request(inputs, None)

    def check_request(self, inputs, wanted):
        # A request that asks for the window tensors has its whole text read by the model: the windows' limits.
        windows = bool(_WINDOW_OUTPUTS.intersection(self.outputs if wanted is None else wanted))
        return decode_inputs(inputs, self.inputs, self.limits.reading(windows))

    def run(self, items: list[list], requested=None) -> list[dict[str, np.ndarray]]:
        from ernie_deploy.serving.tokenizer import encode_pairs, padded_width
        from ernie_deploy.serving.windows import encode_cut, encode_whole, encode_windows

        names = [n for n in self.outputs if requested is None or n in requested]
        flat = [t for texts in items for t in texts]
        cut = [n for n in names if n not in _WINDOW_OUTPUTS]
        if len(self.inputs) > 1:
            # Pairs are cut one token at a time from the longer text, as ErnieTokenizer cuts them. A pair model reads
            # `input_ids`; its tokenizer declares no windows (repository.configs.tokenizer_config).
            whole = None
            enc = encode_pairs(
                self.tokenizer, *zip(*flat), self.max_seq_len, pad_to_multiple_of=self.pad_to_multiple_of
            )
        else:
            whole = encode_whole(self.tokenizer, flat)  # one tokenization; each cut below is taken from it
            enc = (
                encode_cut(
                    self.tokenizer,
                    flat,
                    self.max_seq_len,
                    head_tokens=self.head_tokens,
                    pad_to_multiple_of=self.pad_to_multiple_of,
                    whole=whole,
                )
                if cut
                else None
            )
        windowed = len(cut) < len(names)
        results = []
        for rows in _split_rows([len(texts) for texts in items]):
            out = {}
            if windowed:
                # Windows per request, not over the merged batch: a batch's window tensors are padded to its longest
                # text, so one long text would make every request it was merged with pay for its windows.
                win = encode_windows(self.tokenizer, flat[rows], self.window, self.stride, whole=whole[rows])
                own = _own_windows(win, self.window, self.pad_to_multiple_of, self.tokenizer)
                out.update({name: own[name] for name in names if name in own})
            if enc is None:
                results.append(out)
                continue
            # Each request gets its own width (its longest text), whatever it was tokenized with: a response
            # never depends on which other requests shared the batch.
            width = padded_width(int(enc.lengths[rows].max()), self.max_seq_len, self.pad_to_multiple_of)
            for name in cut:
                value = getattr(enc, name)[rows]
                if name in ("input_ids", "token_type_ids", "offsets"):
                    value = np.ascontiguousarray(value[:, :width])
                out[name] = value.reshape(-1, 1) if value.ndim == 1 else value  # per-text scalars: [B, 1]
            results.append(out)
        return results


def _own_windows(win, window: int, pad_to_multiple_of: int, tokenizer) -> dict[str, np.ndarray]:
    """One request's window tensors (`win`: its texts' windows). The width goes to a length bucket with
    pad_to_multiple_of, as `input_ids` do (for model steps that batch only requests of one shape)."""
    from ernie_deploy.serving.tokenizer import PAD, padded_width

    longest = int(win.text_lengths.max())
    width = padded_width(min(longest, window), window, pad_to_multiple_of)
    ids, types = win.window_ids[:, :, :width], win.window_type_ids[:, :, :width]
    if ids.shape[2] < width:
        pad = ((0, 0), (0, 0), (0, width - ids.shape[2]))
        ids = np.pad(ids, pad, constant_values=tokenizer.token_to_id(PAD) or 0)
        types = np.pad(types, pad, constant_values=0)
    return {
        "window_ids": np.ascontiguousarray(ids),
        "window_type_ids": np.ascontiguousarray(types),
        "window_starts": win.window_starts,
        "text_offsets": win.text_offsets,
        "text_lengths": win.text_lengths.reshape(-1, 1),
    }


class OnnxStep(Step):
    """input_ids, token_type_ids -> logits with onnxruntime: the model step on servers without the ORT backend.

    Requests of different lengths are padded to the longest of the merged batch (with the vocabulary's pad
    id, which the exported model masks out) and run at once; per-token logits are cut back to each
    request's own length."""

    def __init__(self, config: dict, version_dir: Path):
        from ernie_deploy.serving.runtime import OnnxModel, spin_mode

        threads = int(parameter(config, "intra_op_threads", "0"))
        # What the model answers: its logits, or (build --graph-postprocess) the postprocess's tensors, one row per
        # text, which the graph computed after the logits.
        outputs = [o["name"] for o in config.get("output", [])]
        self.outputs = (LOGITS,) if not outputs or LOGITS in outputs else tuple(outputs)
        self.model = OnnxModel(
            Path(version_dir) / parameter(config, "model_file", "model.onnx"),
            intra_op_threads=threads or None,
            spinning=spin_mode(parameter(config, "ort_spinning", "off")),
            outputs=self.outputs,
        )
        self.pad_id = int(parameter(config, "pad_token_id", "0"))
        # The config's inputs: input_ids and token_type_ids, or a windowed model's window_ids and window_type_ids.
        names = [i["name"] for i in config.get("input", [])]
        self.names = tuple(names) if names in (list(MODEL_INPUTS), list(WINDOW_INPUTS)) else MODEL_INPUTS
        self.rank = 3 if self.names == WINDOW_INPUTS else 2

    def check(self, inputs):
        for name in self.names:
            if inputs[name].dtype != np.int64:
                raise BadRequest(
                    f"input {name!r} has dtype {inputs[name].dtype}; expected int64", "send token ids as INT64"
                )
        ids, types = (inputs[name] for name in self.names)
        if ids.ndim != self.rank or ids.shape != types.shape:
            shape = "[batch, windows, tokens]" if self.rank == 3 else "[batch, tokens]"
            raise BadRequest(
                f"{self.names[0]} {list(ids.shape)} and {self.names[1]} {list(types.shape)} must have the same "
                f"{shape} shape"
            )
        return ids, types

    def run(self, items, requested=None):
        if self.outputs != (LOGITS,):
            return self._run_graph(items)
        if items and items[0][0].ndim == 3:
            return self._run_windows(items)
        if len(items) == 1:
            return [{LOGITS: self.model(*items[0])}]
        logits = self.model(*self._merged(items))
        results = []
        for rows, (own, _) in zip(_split_rows([len(i) for i, _ in items]), items):
            part = logits[rows]
            if part.ndim == 3:  # per-token logits: back to this request's length
                part = part[:, : own.shape[1]]
            results.append({LOGITS: np.ascontiguousarray(part)})
        return results

    def _merged(self, items) -> tuple[np.ndarray, np.ndarray]:
        """The requests' ids and token types as one batch, padded to the longest."""
        width = max(ids.shape[1] for ids, _ in items)
        ids = np.concatenate([_pad(ids, width, self.pad_id) for ids, _ in items])
        types = np.concatenate([_pad(types, width, 0) for _, types in items])
        return ids, types

    def _run_graph(self, items):
        """A model with its postprocess in the graph: one padded run, then each request's rows. Label names come
        out of onnxruntime as str; Triton sends BYTES, as the python postprocess returns them."""
        values = self.model.run(*self._merged(items))
        values = [
            np.array([v.encode("utf-8") for v in value.reshape(-1)], dtype=np.object_).reshape(value.shape)
            if value.dtype == np.object_
            else value
            for value in values
        ]
        return [
            {name: np.ascontiguousarray(value[rows]) for name, value in zip(self.outputs, values)}
            for rows in _split_rows([len(i) for i, _ in items])
        ]

    # Windows per onnxruntime run: bounds the activations of a batch of long texts (a 3,000-character document is
    # ~50 windows of 128 tokens at the default stride; 64 such documents, ~3,000 windows, in one run would hold
    # every layer's activations for all of them at once).
    WINDOW_CHUNK = 256

    def _run_windows(self, items):
        """[batch, windows, tokens] per request -> logits [batch, windows, tokens, labels]. Only real windows run:
        requests and texts have different window counts, and a padding window (all pad ids) would cost as
        much as a real one; its logits come back as zeros. A text's first window always runs (even all pad)."""
        width = max(ids.shape[2] for ids, _ in items)
        masks, flat_ids, flat_types = [], [], []
        for ids, types in items:
            real = (ids != self.pad_id).any(axis=2)
            real[:, :1] = True
            pad = ((0, 0), (0, 0), (0, width - ids.shape[2]))
            flat_ids.append(np.pad(ids, pad, constant_values=self.pad_id)[real])
            flat_types.append(np.pad(types, pad, constant_values=0)[real])
            masks.append(real)
        ids, types = np.concatenate(flat_ids), np.concatenate(flat_types)
        chunk = self.WINDOW_CHUNK
        runs = range(0, len(ids), chunk)
        logits = np.concatenate([self.model(ids[i : i + chunk], types[i : i + chunk]) for i in runs])
        results, start = [], 0
        for (own, _), real in zip(items, masks):
            out = np.zeros((*own.shape, logits.shape[-1]), dtype=logits.dtype)
            count = int(real.sum())
            out[real] = logits[start : start + count, : own.shape[2]]
            start += count
            results.append(out)
        return [{LOGITS: out} for out in results]


def _pad(array: np.ndarray, width: int, value: int) -> np.ndarray:
    if array.shape[1] == width:
        return array
    return np.pad(array, ((0, 0), (0, width - array.shape[1])), constant_values=value)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


class SeqClsPostprocess(Step):
    """logits [B, C] -> label_id INT64, label BYTES, confidence FP32, each [B, 1]."""

    def __init__(self, config: dict, version_dir: Path):
        self.labels = _read_labels(Path(version_dir) / parameter(config, "labels_file", "labels.json"))
        self._names = np.array([label.encode("utf-8") for label in self.labels], dtype=np.object_)

    def check(self, inputs):
        logits = inputs[LOGITS]
        if logits.ndim != 2 or logits.shape[-1] != len(self.labels):
            raise BadRequest(
                f"logits have {logits.shape[-1]} classes but labels.json names {len(self.labels)}",
                "rebuild the repository so labels.json comes from the same model",
            )
        return logits

    def run(self, items, requested=None):
        probs = softmax(np.concatenate(items).astype(np.float32))
        ids = probs.argmax(axis=-1)
        label_id = ids.astype(np.int64).reshape(-1, 1)
        label = self._names[ids].reshape(-1, 1)
        confidence = probs.max(axis=-1).astype(np.float32).reshape(-1, 1)
        return [
            {"label_id": label_id[rows], "label": label[rows], "confidence": confidence[rows]}
            for rows in _split_rows([len(i) for i in items])
        ]


class TokenClsPostprocess(Step):
    """logits [B, L, C], text [B, 1], offsets [B, L, 2], lengths [B, 1] -> entities [B, 1] BYTES: a JSON list of
    {"type", "start", "end", "text"} per text, character offsets into the text as sent (end exclusive)."""

    def __init__(self, config: dict, version_dir: Path):
        self.labels = _read_labels(Path(version_dir) / parameter(config, "labels_file", "labels.json"))
        # build --long-text window: the logits of each text's windows, merged here
        self.windowed = parameter(config, "long_text", "") == "window"
        from ernie_deploy.serving.entities import DECODING_PARAMETER, DEFAULT_DECODING, check_decoding

        # build --ner-decoding (or what export recorded): argmax as PaddleNLP, or the best valid IOB2 sequence
        self.decoding = check_decoding(parameter(config, DECODING_PARAMETER, DEFAULT_DECODING))

    def check(self, inputs):
        if self.windowed:
            return self._check_windows(inputs)
        logits, offsets = inputs[LOGITS], inputs["offsets"]
        if logits.ndim != 3 or logits.shape[-1] != len(self.labels):
            raise BadRequest(
                f"logits have shape {list(logits.shape)}; expected [batch, tokens, "
                f"{len(self.labels)}] for the labels in labels.json",
                "rebuild the repository so labels.json comes from the same model",
            )
        if offsets.shape[:2] != logits.shape[:2]:
            raise BadRequest(f"offsets {list(offsets.shape)} do not match logits {list(logits.shape)}")
        from ernie_deploy.serving.entities import label_ids

        lengths = inputs["lengths"].reshape(-1)
        return decode_texts(inputs["text"]), label_ids(logits, lengths, self.labels, self.decoding), offsets, lengths

    def _check_windows(self, inputs):
        """The windowed form (build --long-text window): logits [B, W, L, C] of each text's windows, window_starts
        [B, W], and the whole text's text_offsets [B, T, 2] and text_lengths [B, 1]; merged into whole-text logits
        (ernie_deploy.serving.windows), then decoded like a text that fit."""
        from ernie_deploy.serving.entities import label_ids
        from ernie_deploy.serving.windows import merge_windows

        logits, starts = inputs[LOGITS], inputs["window_starts"]
        offsets, lengths = inputs["text_offsets"], inputs["text_lengths"].reshape(-1)
        if logits.ndim != 4 or logits.shape[-1] != len(self.labels):
            raise BadRequest(
                f"logits have shape {list(logits.shape)}; expected [batch, windows, tokens, "
                f"{len(self.labels)}] for the labels in labels.json",
                "rebuild the repository so labels.json comes from the same model",
            )
        if starts.shape != logits.shape[:2] or offsets.shape[:1] != logits.shape[:1] or len(lengths) != len(logits):
            raise BadRequest(
                f"window_starts {list(starts.shape)}, text_offsets {list(offsets.shape)} and text_lengths "
                f"{list(lengths.shape)} do not fit logits {list(logits.shape)}",
                "send the tokenizer's window tensors unchanged",
            )
        # An empty sequence (Triton's zero-filled warmup request) has nothing to merge: no entities.
        empty = lengths < 2
        lengths = np.where(empty, 2, lengths)
        starts = np.where(empty[:, None], np.where(np.arange(starts.shape[1]) == 0, 0, -1), starts)
        for b, (own, length) in enumerate(zip(starts, lengths.tolist())):
            own = own[own >= 0]
            tokens = length - 2
            if not len(own) or own[0] != 0 or (np.diff(own) <= 0).any() or own[-1] > max(tokens - 1, 0):
                raise BadRequest(
                    f"text {b}: window_starts {own.tolist()} are not windows over its {tokens} tokens",
                    "send the tokenizer's window tensors unchanged",
                )
            if offsets.shape[1] < length or own[-1] + logits.shape[2] - 2 < tokens:
                raise BadRequest(
                    f"text {b}: {length} tokens do not fit its text_offsets ({offsets.shape[1]} rows) or its "
                    f"windows ({len(own)} of {logits.shape[2]} tokens)",
                    "send the tokenizer's window tensors unchanged",
                )
        merged = merge_windows(logits, starts, lengths)
        # Checked above: every token lies in a window, so no entity was cut off (the response's `truncated`).
        truncated = np.zeros((len(lengths), 1), dtype=bool)
        lengths = np.where(empty, 0, lengths)
        predicted = label_ids(merged, lengths, self.labels, self.decoding)
        return decode_texts(inputs["text"]), predicted, offsets, lengths, truncated

    def run(self, items, requested=None):
        from ernie_deploy.serving.entities import decode_entities, entities_to_json

        results = []
        for texts, predicted, offsets, lengths, *truncated in items:  # decoding walks each text's spans
            entities = [
                entities_to_json(
                    decode_entities(text, predicted[i], offsets[i], int(lengths[i]), self.labels, self.decoding)
                )
                for i, text in enumerate(texts)
            ]
            results.append({"entities": np.array(entities, dtype=np.object_).reshape(-1, 1)})
            if truncated:
                results[-1]["truncated"] = truncated[0]
        return results


class MultiLabelPostprocess(Step):
    """logits [B, C] -> labels [B, 1] BYTES: a JSON list of {"label", "score"} for each label whose sigmoid score
    reaches its threshold (thresholds.json), best first; scores [B, C] FP32: every label's sigmoid score."""

    def __init__(self, config: dict, version_dir: Path):
        from ernie_deploy.serving.multi_label import THRESHOLDS_FILE, read_thresholds

        version_dir = Path(version_dir)
        self.labels = _read_labels(version_dir / parameter(config, "labels_file", "labels.json"))
        thresholds_file = version_dir / parameter(config, "thresholds_file", THRESHOLDS_FILE)
        self.thresholds = read_thresholds(thresholds_file, self.labels)

    def check(self, inputs):
        logits = inputs[LOGITS]
        if logits.ndim != 2 or logits.shape[-1] != len(self.labels):
            raise BadRequest(
                f"logits have shape {list(logits.shape)}; expected [batch, {len(self.labels)}] for the labels in "
                "labels.json",
                "rebuild the repository so labels.json comes from the same model",
            )
        return logits

    def run(self, items, requested=None):
        from ernie_deploy.serving.multi_label import labels_over, sigmoid

        scores = sigmoid(np.concatenate(items))
        kept = labels_over(scores, self.labels, self.thresholds)
        labels = np.array([json.dumps(k, ensure_ascii=False) for k in kept], dtype=np.object_).reshape(-1, 1)
        scores = scores.astype(np.float32)
        return [{"labels": labels[rows], "scores": scores[rows]} for rows in _split_rows([len(i) for i in items])]


class PipelineStep(Step):
    """Tokenizer, model and postprocess in one python model: text -> the task's outputs, the same tensors
    as the ensemble. It saves the ensemble's two hops between processes per request (measured in
    docs/BENCHMARKS.md); it needs onnxruntime inside the python backend, so it is a pip-only layout."""

    def __init__(self, config: dict, version_dir: Path):
        self.tokenizer = TokenizerStep({**config, "output": []}, version_dir)  # reads the pipeline's inputs
        self.model = OnnxStep({**config, "output": []}, version_dir)  # answers logits
        self.post = STEPS[parameter(config, "postprocess")](config, version_dir)
        self.outputs = [o["name"] for o in config.get("output", [])]
        # The tensors the ensemble's steps would pass: the windows (build --long-text window) or the cut text.
        windowed = parameter(config, "long_text", "") == "window"
        self.inputs = WINDOW_INPUTS if windowed else MODEL_INPUTS
        self.tokens = set(_WINDOW_OUTPUTS) if windowed else {t.name for t in TOKENIZER_OUTPUTS} - _WINDOW_OUTPUTS

    def check(self, inputs):
        return self.tokenizer.check_request(inputs, set(self.inputs)), inputs["text"]

    def run(self, items, requested=None):
        tokens = self.tokenizer.run([texts for texts, _ in items], self.tokens)
        logits = self.model.run([tuple(t[name] for name in self.inputs) for t in tokens])
        post_items = [self.post.check({**t, **out, "text": text}) for t, out, (_, text) in zip(tokens, logits, items)]
        # What the ensemble passes through from the tokenizer (e.g. `truncated`) comes from `tokens`.
        return [
            {name: {**t, **out}[name] for name in self.outputs} for t, out in zip(tokens, self.post.run(post_items))
        ]


class TokenizerOnnxStep(Step):
    """The tokenizer and the model step in one python model (build --tokenizer-in-model): text -> logits and the
    tokenizer outputs the postprocess reads, one hop fewer than the ensemble, the postprocess still a step of its
    own. The same two steps as the ensemble runs, chained in one process (as PipelineStep chains three)."""

    def __init__(self, config: dict, version_dir: Path):
        self.tokenizer = TokenizerStep({**config, "output": []}, version_dir)  # reads the model's text inputs
        self.model = OnnxStep({**config, "output": []}, version_dir)
        self.inputs = WINDOW_INPUTS if parameter(config, "long_text", "") == "window" else MODEL_INPUTS
        self.outputs = [o["name"] for o in config.get("output", [])] or [LOGITS]

    def check(self, inputs):
        return self.tokenizer.check_request(inputs, set(self.inputs))

    def run(self, items, requested=None):
        wanted = set(self.outputs if requested is None else requested) | set(self.inputs)
        tokens = self.tokenizer.run(items, wanted)
        logits = self.model.run([tuple(t[name] for name in self.inputs) for t in tokens])
        return [{**{n: t[n] for n in self.outputs if n in t}, **out} for t, out in zip(tokens, logits)]


def _read_labels(labels_file: Path) -> list[str]:
    if not labels_file.exists():
        raise ErnieDeployError(f"no label names at {labels_file}", "rebuild the repository with `ernie-deploy build`")
    return json.loads(labels_file.read_text(encoding="utf-8"))


# What a model.py names as its `step` (written by `ernie-deploy build`); a TaskSpec's `postprocess` is one of
# these keys. The keys are part of every built repository: renaming one breaks repositories already built.
STEPS = {
    "tokenizer": TokenizerStep,
    "onnx": OnnxStep,
    "seq_cls_postprocess": SeqClsPostprocess,
    "token_cls_postprocess": TokenClsPostprocess,
    "multi_label_postprocess": MultiLabelPostprocess,
    "pipeline": PipelineStep,
    "tokenizer_onnx": TokenizerOnnxStep,
}
