"""The postprocess steps: a model's logits -> what the client reads (a label, entities, label sets), as the
ensemble's last python model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadRequest, ErnieDeployError
from ernie_deploy.core.tasks import LOGITS
from ernie_deploy.serving.step import Step, parameter, split_rows
from ernie_deploy.serving.texts import decode_texts


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
            for rows in split_rows([len(i) for i in items])
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
        return [{"labels": labels[rows], "scores": scores[rows]} for rows in split_rows([len(i) for i in items])]


def _read_labels(labels_file: Path) -> list[str]:
    if not labels_file.exists():
        raise ErnieDeployError(f"no label names at {labels_file}", "rebuild the repository with `ernie-deploy build`")
    return json.loads(labels_file.read_text(encoding="utf-8"))


# The postprocess a TaskSpec names (its `postprocess`), by its key in serving.steps.STEPS.
POSTPROCESS_STEPS = {
    "seq_cls_postprocess": SeqClsPostprocess,
    "token_cls_postprocess": TokenClsPostprocess,
    "multi_label_postprocess": MultiLabelPostprocess,
}
