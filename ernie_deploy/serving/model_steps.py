"""The model step in a python model: onnxruntime runs the exported model on the token ids, for servers without
Triton's onnxruntime backend, and inside the fused steps (serving.tokenizer_steps, serving.pipeline).
onnxruntime is imported when the step is built, so that a python model that does not run it never loads it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS, WINDOW_INPUTS
from ernie_deploy.serving.parameters import INTRA_OP_THREADS, MODEL_FILE, ORT_SPINNING, PAD_TOKEN_ID
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.step import Step, split_rows


class OnnxStep(Step):
    """input_ids, token_type_ids -> logits with onnxruntime: the model step on servers without the ORT backend.

    Requests of different lengths are padded to the longest of the merged batch (with the vocabulary's pad
    id, which the exported model masks out) and run at once; per-token logits are cut back to each
    request's own length."""

    def __init__(self, config: dict, version_dir: Path):

        threads = INTRA_OP_THREADS.read(config)
        # What the model answers: its logits, or (build --graph-postprocess) the postprocess's tensors, one row per
        # text, which the graph computed after the logits (and the logits themselves, passed through on request).
        outputs = [o["name"] for o in config.get("output", [])]
        self.outputs = (LOGITS,) if outputs in ([], [LOGITS]) else tuple(outputs)
        self.model = OnnxModel(
            Path(version_dir) / MODEL_FILE.read(config),
            intra_op_threads=threads or None,
            spinning=ORT_SPINNING.read(config),
            outputs=self.outputs,
        )
        self.pad_id = PAD_TOKEN_ID.read(config)
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
                f"{shape} shape",
                "send both with the same shape, as the tokenizer step writes them",
            )
        return ids, types

    def run(self, items, requested=None):
        if self.outputs != (LOGITS,):
            return self._run_graph(items, requested)
        if items and items[0][0].ndim == 3:
            return self._run_windows(items)
        if len(items) == 1:
            return [{LOGITS: self.model(*items[0])}]
        logits = self.model(*self._merged(items))
        results = []
        for rows, (own, _) in zip(split_rows([len(i) for i, _ in items]), items):
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

    def _run_graph(self, items, requested=None):
        """A model with its postprocess in the graph: one padded run, then each request's rows. Label names come
        out of onnxruntime as str; Triton sends BYTES, as the python postprocess returns them."""
        values = self.model.run(*self._merged(items))
        values = [
            np.array([v.encode("utf-8") for v in value.reshape(-1)], dtype=np.object_).reshape(value.shape)
            if value.dtype == np.object_
            else value
            for value in values
        ]
        # Each request's rows of what some request names: the graph computes its softmax anyway, but an answer
        # computed on request only (core.tasks.ON_REQUEST) is not copied out for requests that do not read it.
        named = [(name, value) for name, value in zip(self.outputs, values) if requested is None or name in requested]
        return [
            {name: np.ascontiguousarray(value[rows]) for name, value in named}
            for rows in split_rows([len(i) for i, _ in items])
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
