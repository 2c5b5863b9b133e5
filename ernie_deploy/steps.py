"""The serving steps that run inside Triton's python backend, as plain testable classes.

Each step is built from its model config (the dict Triton passes to `initialize`) and the version
folder holding its files, and maps a dict of numpy arrays (one request) to a dict of numpy arrays.
Only numpy, tokenizers and onnxruntime are imported here: paddle is for export, not serving.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .errors import ErnieDeployError
from .tasks import LOGITS, MODEL_INPUTS, TOKENIZER_OUTPUTS


def parameter(config: dict, key: str, default: str | None = None) -> str:
    value = config.get("parameters", {}).get(key, {}).get("string_value", default)
    if value is None:
        raise ErnieDeployError(f"model {config.get('name')!r} has no parameter {key!r}",
                               "rebuild the repository with `ernie-deploy build`")
    return value


def decode_texts(array: np.ndarray) -> list[str]:
    """BYTES tensor [B, 1] -> list of str, rejecting what the model cannot use with a message that says why."""
    if array.dtype != np.object_:
        raise ErnieDeployError(f"input 'text' has dtype {array.dtype}; expected BYTES (TYPE_STRING)",
                               "send UTF-8 strings as a BYTES tensor of shape [batch, 1]")
    texts = []
    for i, item in enumerate(array.reshape(-1)):
        try:
            text = item.decode("utf-8") if isinstance(item, bytes) else str(item)
        except UnicodeDecodeError as exc:
            raise ErnieDeployError(f"text {i} is not valid UTF-8 ({exc.reason} at byte {exc.start})",
                                   "encode texts as UTF-8") from None
        if not text.strip():
            raise ErnieDeployError(f"text {i} is empty", "send at least one non-space character per text")
        texts.append(text)
    return texts


class TokenizerStep:
    """text [B, 1] BYTES -> input_ids, token_type_ids [B, L] INT64 (padded to the longest text of the request),
    offsets [B, L, 2] INT64, lengths [B, 1] INT64, truncated [B, 1] BOOL (see tasks.TOKENIZER_OUTPUTS)."""

    def __init__(self, config: dict, version_dir: Path):
        from .tokenizer import load_tokenizer

        self.tokenizer = load_tokenizer(Path(version_dir) / parameter(config, "tokenizer_file", "tokenizer.json"))
        self.max_seq_len = int(parameter(config, "max_seq_len", "128"))
        self.outputs = [o["name"] for o in config.get("output", [])] or [t.name for t in TOKENIZER_OUTPUTS]
        unknown = set(self.outputs) - {t.name for t in TOKENIZER_OUTPUTS}
        if unknown:
            raise ErnieDeployError(f"model {config.get('name')!r} declares outputs {sorted(unknown)} the tokenizer "
                                   "cannot produce", "rebuild the repository with `ernie-deploy build`")

    def __call__(self, inputs: dict[str, np.ndarray], requested: set[str] | None = None) -> dict[str, np.ndarray]:
        from .tokenizer import encode_batch

        encoded = encode_batch(self.tokenizer, decode_texts(inputs["text"]), self.max_seq_len)
        out = {}
        for name in self.outputs:
            if requested is None or name in requested:
                value = getattr(encoded, name)
                out[name] = value.reshape(-1, 1) if value.ndim == 1 else value  # per-text scalars: [B, 1]
        return out


class OnnxStep:
    """input_ids, token_type_ids -> logits with onnxruntime: the model step on servers without the ORT backend."""

    def __init__(self, config: dict, version_dir: Path):
        from .runtime import OnnxModel

        self.model = OnnxModel(Path(version_dir) / parameter(config, "model_file", "model.onnx"))

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name in MODEL_INPUTS:
            if inputs[name].dtype != np.int64:
                raise ErnieDeployError(f"input {name!r} has dtype {inputs[name].dtype}; expected int64")
        return {LOGITS: self.model(inputs["input_ids"], inputs["token_type_ids"])}


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


class SeqClsPostprocess:
    """logits [B, C] -> label_id INT64, label BYTES, confidence FP32, each [B, 1]."""

    def __init__(self, config: dict, version_dir: Path):
        self.labels = _read_labels(Path(version_dir) / parameter(config, "labels_file", "labels.json"))

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        logits = inputs[LOGITS]
        if logits.shape[-1] != len(self.labels):
            raise ErnieDeployError(f"logits have {logits.shape[-1]} classes but labels.json names {len(self.labels)}",
                                   "rebuild the repository so labels.json comes from the same model")
        probs = softmax(logits.astype(np.float32))
        ids = probs.argmax(axis=-1)
        return {
            "label_id": ids.astype(np.int64).reshape(-1, 1),
            "label": np.array([self.labels[i].encode("utf-8") for i in ids], dtype=np.object_).reshape(-1, 1),
            "confidence": probs.max(axis=-1).astype(np.float32).reshape(-1, 1),
        }


class TokenClsPostprocess:
    """logits [B, L, C], text [B, 1], offsets [B, L, 2], lengths [B, 1] -> entities [B, 1] BYTES: a JSON list of
    {"type", "start", "end", "text"} per text, character offsets into the text as sent (end exclusive)."""

    def __init__(self, config: dict, version_dir: Path):
        self.labels = _read_labels(Path(version_dir) / parameter(config, "labels_file", "labels.json"))

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from .entities import decode_entities, entities_to_json

        logits, offsets = inputs[LOGITS], inputs["offsets"]
        lengths = inputs["lengths"].reshape(-1)
        if logits.ndim != 3 or logits.shape[-1] != len(self.labels):
            raise ErnieDeployError(f"logits have shape {list(logits.shape)}; expected [batch, tokens, "
                                   f"{len(self.labels)}] for the labels in labels.json",
                                   "rebuild the repository so labels.json comes from the same model")
        if offsets.shape[:2] != logits.shape[:2]:
            raise ErnieDeployError(f"offsets {list(offsets.shape)} do not match logits {list(logits.shape)}")
        texts = decode_texts(inputs["text"])
        predicted = logits.argmax(axis=-1)  # one vectorised argmax for the batch; decoding is per text
        entities = [entities_to_json(decode_entities(text, predicted[i], offsets[i], int(lengths[i]), self.labels))
                    for i, text in enumerate(texts)]
        return {"entities": np.array(entities, dtype=np.object_).reshape(-1, 1)}


def _read_labels(labels_file: Path) -> list[str]:
    if not labels_file.exists():
        raise ErnieDeployError(f"no label names at {labels_file}", "rebuild the repository with `ernie-deploy build`")
    return json.loads(labels_file.read_text(encoding="utf-8"))


STEPS = {"tokenizer": TokenizerStep, "onnx": OnnxStep, "seq_cls_postprocess": SeqClsPostprocess,
         "token_cls_postprocess": TokenClsPostprocess}
