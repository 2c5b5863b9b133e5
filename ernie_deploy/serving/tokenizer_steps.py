"""The tokenizer step (text -> token ids, cut or in windows, as serving.encoding cuts them), alone or chained with
the model step in one python model. `tokenizers` is imported when the step is built or run, so that a python model
that does not tokenize never loads it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadRepositoryError
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS, TEXT_INPUT, TOKENIZER_OUTPUTS, WINDOW_INPUTS, WINDOW_OUTPUTS
from ernie_deploy.serving.encoding import encode_items, encode_whole, encode_windows, padded_width
from ernie_deploy.serving.limits import ReadingLimits
from ernie_deploy.serving.model_steps import OnnxStep
from ernie_deploy.serving.parameters import (
    HEAD_TOKENS,
    LONG_TEXT,
    MAX_SEQ_LEN,
    PAD_TO_MULTIPLE_OF,
    TOKENIZER_FILE,
    WINDOW_CUT,
    WINDOW_SIZE,
    WINDOW_STRIDE,
)
from ernie_deploy.serving.step import Step, split_rows
from ernie_deploy.serving.texts import decode_inputs
from ernie_deploy.serving.tokenizer import PAD, load_tokenizer

_WINDOW_OUTPUTS = frozenset(WINDOW_OUTPUTS)


class TokenizerStep(Step):
    """text [B, 1] BYTES -> input_ids, token_type_ids [B, L] INT64 (padded to the longest text of the request),
    offsets [B, L, 2] INT64, lengths [B, 1] INT64, truncated [B, 1] BOOL; or the whole text in windows:
    window_ids, window_type_ids [B, W, L], window_starts and window_ends [B, W], text_offsets [B, T, 2],
    text_lengths [B, 1] (see tasks.TOKENIZER_OUTPUTS). Only the outputs a request asks for are computed."""

    def __init__(self, config: dict, version_dir: Path):

        self.tokenizer = load_tokenizer(Path(version_dir) / TOKENIZER_FILE.read(config))
        # What it reads: the text, or a text and its pair (from its config's inputs).
        self.inputs = [i["name"] for i in config.get("input", [])] or [TEXT_INPUT.name]
        self.max_seq_len = MAX_SEQ_LEN.read(config)
        self.pad_to_multiple_of = PAD_TO_MULTIPLE_OF.read(config)
        # How texts longer than max_seq_len are cut (ernie_deploy.serving.encoding): windows for the models that
        # read `window_*`, the head (or head and tail) for those that read `input_ids`.
        self.window = WINDOW_SIZE.read(config)
        self.stride = WINDOW_STRIDE.read(config)
        self.cut = WINDOW_CUT.read(config)
        self.head_tokens = HEAD_TOKENS.read(config)
        # What one request may cost (serving.limits), per reading: checked before anything is tokenized.
        self.limits = ReadingLimits.from_config(config)
        # What it can make: every tokenizer output, but windows for a single text only (a pair is cut, never windowed).
        able = [t.name for t in TOKENIZER_OUTPUTS if len(self.inputs) == 1 or t.name not in WINDOW_OUTPUTS]
        self.outputs = [o["name"] for o in config.get("output", [])] or able
        unknown = set(self.outputs) - set(able)
        if unknown:
            raise BadRepositoryError(
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

        names = [n for n in self.outputs if requested is None or n in requested]
        flat = [t for texts in items for t in texts]
        cut = [n for n in names if n not in _WINDOW_OUTPUTS]
        # One tokenization of each text, shared by its cut and its windows. A pair is cut one token at a time from
        # the longer text, as ErnieTokenizer cuts it, and never windowed: a pair model reads `input_ids`, and its
        # tokenizer declares no windows (repository.configs.tokenizer_config).
        whole = encode_whole(self.tokenizer, flat) if len(self.inputs) == 1 else None
        enc = None
        if cut:
            enc = encode_items(
                self.tokenizer,
                flat,
                self.max_seq_len,
                head_tokens=self.head_tokens,
                pad_to_multiple_of=self.pad_to_multiple_of,
                whole=whole,
            )
        windowed = len(cut) < len(names)
        results = []
        for rows in split_rows([len(texts) for texts in items]):
            out = {}
            if windowed:
                # Windows per request, not over the merged batch: a batch's window tensors are padded to its longest
                # text, so one long text would make every request it was merged with pay for its windows.
                out.update(self._windows(flat[rows], whole[rows], names))
            if enc is not None:
                out.update(self._cut(enc, rows, cut))
            results.append(out)
        return results

    def _windows(self, texts: list[str], whole: list, names: list[str]) -> dict[str, np.ndarray]:

        win = encode_windows(self.tokenizer, texts, self.window, self.stride, whole=whole, cut=self.cut)
        own = _own_windows(win, self.window, self.pad_to_multiple_of, self.tokenizer)
        return {name: own[name] for name in names if name in own}

    def _cut(self, enc, rows: slice, names: list[str]) -> dict[str, np.ndarray]:
        """One request's rows of the cut texts' tensors."""

        # Each request gets its own width (its longest text), whatever it was tokenized with: a response
        # never depends on which other requests shared the batch.
        width = padded_width(int(enc.lengths[rows].max()), self.max_seq_len, self.pad_to_multiple_of)
        out = {}
        for name in names:
            value = getattr(enc, name)[rows]
            if name in ("input_ids", "token_type_ids", "offsets"):
                value = np.ascontiguousarray(value[:, :width])
            out[name] = value.reshape(-1, 1) if value.ndim == 1 else value  # per-text scalars: [B, 1]
        return out


def _own_windows(win, window: int, pad_to_multiple_of: int, tokenizer) -> dict[str, np.ndarray]:
    """One request's window tensors (`win`: its texts' windows). The width goes to a length bucket with
    pad_to_multiple_of, as `input_ids` do (for model steps that batch only requests of one shape)."""

    # the widest window of the request: sentence windows may all be shorter than the window size
    width = padded_width(min(win.window_ids.shape[2], window), window, pad_to_multiple_of)
    ids, types = win.window_ids[:, :, :width], win.window_type_ids[:, :, :width]
    if ids.shape[2] < width:
        pad = ((0, 0), (0, 0), (0, width - ids.shape[2]))
        ids = np.pad(ids, pad, constant_values=tokenizer.token_to_id(PAD) or 0)
        types = np.pad(types, pad, constant_values=0)
    return {
        "window_ids": np.ascontiguousarray(ids),
        "window_type_ids": np.ascontiguousarray(types),
        "window_starts": win.window_starts,
        "window_ends": win.window_ends,
        "text_offsets": win.text_offsets,
        "text_lengths": win.text_lengths.reshape(-1, 1),
    }


class TokenizerOnnxStep(Step):
    """The tokenizer and the model step in one python model (build --tokenizer-in-model): text -> logits and the
    tokenizer outputs the postprocess reads, one hop fewer than the ensemble, the postprocess still a step of its
    own. The same two steps as the ensemble runs, chained in one process (as PipelineStep chains three)."""

    def __init__(self, config: dict, version_dir: Path):
        self.tokenizer = TokenizerStep({**config, "output": []}, version_dir)  # reads the model's text inputs
        self.model = OnnxStep({**config, "output": []}, version_dir)
        self.inputs = WINDOW_INPUTS if LONG_TEXT.read(config) else MODEL_INPUTS
        self.outputs = [o["name"] for o in config.get("output", [])] or [LOGITS]

    def check(self, inputs):
        return self.tokenizer.check_request(inputs, set(self.inputs))

    def run(self, items, requested=None):
        wanted = set(self.outputs if requested is None else requested) | set(self.inputs)
        tokens = self.tokenizer.run(items, wanted)
        logits = self.model.run([tuple(t[name] for name in self.inputs) for t in tokens])
        return [{**{n: t[n] for n in self.outputs if n in t}, **out} for t, out in zip(tokens, logits)]
