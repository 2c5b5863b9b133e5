"""The postprocess step of a label per token: logits -> entities with character offsets into the text as sent, from
a text that fit or from the merged logits of its windows."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.profile import ENTITIES_PER_TEXT, ENTITY_TYPE, count_bucket
from ernie_deploy.core.tasks import LOGITS
from ernie_deploy.serving.entities import decode_entities, entities_from_json, entities_to_json, label_ids
from ernie_deploy.serving.entity_scores import chosen_probabilities
from ernie_deploy.serving.kind_serving import KindServing
from ernie_deploy.serving.parameters import LABELS_FILE, LONG_TEXT, NER_DECODING
from ernie_deploy.serving.step import Step, read_labels
from ernie_deploy.serving.texts import decode_texts
from ernie_deploy.serving.watch import KindWatch, json_item
from ernie_deploy.serving.windows import merge_windows


class TokenClsPostprocess(Step):
    """logits [B, L, C], text [B, 1], offsets [B, L, 2], lengths [B, 1] -> entities [B, 1] BYTES: a JSON list of
    {"type", "start", "end", "text", "score"} per text, character offsets into the text as sent (end exclusive), the
    score the mean probability of the entity's tokens' chosen tags (serving.entity_scores)."""

    def __init__(self, config: dict, version_dir: Path):
        self.labels = read_labels(Path(version_dir) / LABELS_FILE.read(config))
        # build --long-text window: the logits of each text's windows, merged here
        self.windowed = LONG_TEXT.read(config)
        # build --ner-decoding (or what export recorded): argmax as PaddleNLP, or the best valid IOB2 sequence
        self.decoding = NER_DECODING.read(config)

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
            raise BadRequest(
                f"offsets {list(offsets.shape)} do not match logits {list(logits.shape)}",
                "send the tokenizer step's offsets unchanged, with the logits of the same texts",
            )
        lengths = inputs["lengths"].reshape(-1)
        return (decode_texts(inputs["text"]), *self._decoded(logits, lengths), offsets, lengths)

    def _decoded(self, logits: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The label ids [B, L] the decoding chose and their probabilities [B, L], which the entities' scores are."""

        ids = label_ids(logits, lengths, self.labels, self.decoding)
        return ids, chosen_probabilities(logits, ids)

    def _check_windows(self, inputs):
        """The windowed form (build --long-text window): logits [B, W, L, C] of each text's windows, window_starts
        and window_ends [B, W], and the whole text's text_offsets [B, T, 2] and text_lengths [B, 1]; merged into
        whole-text logits (ernie_deploy.serving.windows), then decoded like a text that fit."""

        logits, starts, ends = inputs[LOGITS], inputs["window_starts"], inputs.get("window_ends")
        offsets, lengths = inputs["text_offsets"], inputs["text_lengths"].reshape(-1)
        if logits.ndim != 4 or logits.shape[-1] != len(self.labels):
            raise BadRequest(
                f"logits have shape {list(logits.shape)}; expected [batch, windows, tokens, "
                f"{len(self.labels)}] for the labels in labels.json",
                "rebuild the repository so labels.json comes from the same model",
            )
        fits = ends is not None and starts.shape == ends.shape == logits.shape[:2]
        if not fits or offsets.shape[:1] != logits.shape[:1] or len(lengths) != len(logits):
            raise BadRequest(
                f"window_starts {list(starts.shape)}, window_ends {None if ends is None else list(ends.shape)}, "
                f"text_offsets "
                f"{list(offsets.shape)} and text_lengths {list(lengths.shape)} do not fit logits {list(logits.shape)}",
                "send the tokenizer's window tensors unchanged",
            )
        # An empty sequence (Triton's zero-filled warmup request) has nothing to merge: no entities.
        empty = lengths < 2
        lengths = np.where(empty, 2, lengths)
        first = np.arange(starts.shape[1]) == 0
        starts = np.where(empty[:, None], np.where(first, 0, -1), starts)
        ends = np.where(empty[:, None], np.where(first, 0, -1), ends)
        for b, (own, own_ends, length) in enumerate(zip(starts, ends, lengths.tolist())):
            real = own >= 0
            own, own_ends = own[real], own_ends[real]
            tokens = length - 2
            # Windows in order that cover every token: each starts at or before the previous one's end, ends after
            # its own start (an empty text's one window aside) and after the previous end, the last on the last token.
            ordered = len(own) and own[0] == 0 and (np.diff(own) > 0).all() and (np.diff(own_ends) > 0).all()
            if not ordered or (own[1:] > own_ends[:-1]).any() or own_ends[-1] != tokens or own[-1] > max(tokens - 1, 0):
                raise BadRequest(
                    f"text {b}: window_starts {own.tolist()} and window_ends {own_ends.tolist()} do not cover its "
                    f"{tokens} tokens",
                    "send the tokenizer's window tensors unchanged",
                )
            if offsets.shape[1] < length or (own_ends - own).max() + 2 > logits.shape[2]:
                raise BadRequest(
                    f"text {b}: {length} tokens do not fit its text_offsets ({offsets.shape[1]} rows) or its "
                    f"windows ({len(own)} of {logits.shape[2]} tokens)",
                    "send the tokenizer's window tensors unchanged",
                )
        merged = merge_windows(logits, starts, ends, lengths)
        # Checked above: every token lies in a window, so no entity was cut off (the response's `truncated`).
        truncated = np.zeros((len(lengths), 1), dtype=bool)
        lengths = np.where(empty, 0, lengths)
        # Scored from the merged logits, so a token two windows decide has one probability per tag.
        return decode_texts(inputs["text"]), *self._decoded(merged, lengths), offsets, lengths, truncated

    def run(self, items, requested=None):

        results = []
        for texts, predicted, probabilities, offsets, lengths, *truncated in items:  # decoding walks each text's spans
            entities = [
                entities_to_json(
                    decode_entities(
                        text, predicted[i], offsets[i], int(lengths[i]), self.labels, self.decoding, probabilities[i]
                    )
                )
                for i, text in enumerate(texts)
            ]
            results.append({"entities": np.array(entities, dtype=np.object_).reshape(-1, 1)})
            if truncated:
                results[-1]["truncated"] = truncated[0]
        return results


def paddlenlp_entities(item: bytes) -> bytes:
    """One text's entities as PaddleNLP's pipeline answers them (`build --io paddlenlp`): a list of
    {"pos": [start, end], "label"}, `end` inclusive, in characters of the text as sent. Written as JSON, which is also
    the Python list literal that pipeline's clients read with `ast.literal_eval`, and which a client of this project
    reads with json (kinds/token/client.py): nothing received is ever evaluated."""
    import json

    spans = [{"pos": [e["start"], e["end"] - 1], "label": e["type"]} for e in entities_from_json(item)]
    return json.dumps(spans, ensure_ascii=False).encode("utf-8")


def _answers(outputs: dict, labels: list[str]) -> list[tuple[tuple[str, int, int], ...]]:
    """Each text's entities as (type, start, end) with `end` exclusive, from the native JSON or PaddleNLP's
    (`pos` [start, end] with `end` inclusive, `label`), so the two wires' answers compare."""

    out = []
    for raw in np.asarray(outputs["entities"]).reshape(-1):
        spans = json_item(raw)
        out.append(
            tuple(
                (e["label"], int(e["pos"][0]), int(e["pos"][1]) + 1)
                if "pos" in e
                else (e["type"], e["start"], e["end"])
                for e in spans
            )
        )
    return out


def _profile(answer) -> list[tuple[str, str]]:
    return [*((ENTITY_TYPE, kind) for kind, _, _ in answer), (ENTITIES_PER_TEXT, count_bucket(len(answer)))]


# What a text's entities are to the watch (serving.watch): two answers agree on the whole list of spans and types. A
# decoded entity carries no probability (constrained decoding picks a path, not a score), so there is no confidence
# series, and no flip table: a text's answer is a list, not a label.
WATCH = KindWatch(
    series=(ENTITY_TYPE, ENTITIES_PER_TEXT), needs=("entities",), read=_answers, profile=_profile, key=lambda a: a
)


# What the serving layer reads of this kind (listed in serving.postprocess_steps): its postprocess step, served
# under the kind's `postprocess` key (serving.steps.STEPS), its part of the watch, and the outputs it writes otherwise
# under PaddleNLP's wire (Kind.paddlenlp_formats): one element in, one out.
SERVING = KindServing(postprocess=TokenClsPostprocess, watch=WATCH, paddlenlp_formats={"entities": paddlenlp_entities})
