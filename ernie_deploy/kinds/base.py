"""The facts record of a task kind: what one prediction is, and every fact the stages read to treat it right."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One kind of task. A task (core.tasks.TaskSpec) names its kind; the stages read these facts instead of
    comparing names, and find the kind's code for their layer in their table of the kinds, which lists each kind's
    ernie_deploy/kinds/<name>/<layer>.py."""

    name: str  # the subpackage under ernie_deploy/kinds, and TaskSpec.kind
    logits_rank: int  # dims of the logits per text: 1 ([classes]) or 2 ([tokens, classes])
    # What a text longer than max_seq_len becomes (`build --long-text`); the first is the default (`auto`).
    long_text_modes: tuple[str, ...]
    prediction: str  # the answer tensor that holds a text's prediction ("label", "entities", "labels")
    metric: str  # the number its reports lead with, the client prints last and the gate checks
    postprocess: str  # the key of its postprocess step in ernie_deploy.serving.steps.STEPS (part of built repositories)
    # The data split format: "tsv" (label<TAB>text), "jsonl" ({"text", "labels"} per character) or "labels.tsv"
    # (labels<TAB>text, a text's labels joined by "|").
    split_format: str
    # Per-label decision thresholds stored with the model (thresholds.json beside model.onnx): `convert` chooses
    # them on the dev split, `build` puts them beside labels.json (or takes --thresholds FILE).
    per_label_thresholds: bool = False
    # Its answers are entities decoded from per-token labels, under a NER decoding (`--ner-decoding`).
    entities: bool = False
    # How `build --graph-postprocess` expresses its postprocess as ONNX nodes appended to the converted graph (the
    # `graph` of its repository module), or "" where the postprocess stays a python step (entity decoding and
    # per-label thresholds with JSON answers are not graph operations).
    graph_postprocess: str = ""
    # What PaddleNLP's ERNIE 3.0 Triton pipeline answers for this kind (`build --io paddlenlp`, core.io): (its output
    # name, the task's output it holds) pairs, in its order; empty where that pipeline had no such models.
    paddlenlp_outputs: tuple[tuple[str, str], ...] = ()
    # The task's outputs that wire writes in another format, by the kind's serving step (`paddlenlp_formats` of
    # kinds/<kind>/serving.py's SERVING) and read back by its client (`paddlenlp_readers` of kinds/<kind>/client.py's
    # CLIENT).
    paddlenlp_formats: tuple[str, ...] = ()
    # What its ONNX model answers, in order: the logits of a label head, or (UIE) a start and an end probability per
    # token. Each has `logits_rank` dims per row.
    model_outputs: tuple[str, ...] = ("logits",)
    # Its model ends in a label head, whose size the checkpoint's config gives (id2label, num_labels); False: it has
    # no fixed labels (UIE extracts the types a schema names, per request).
    label_head: bool = True
    # Its model runs in stages within one request, each prompted by what the one before found (UIE: a relation is
    # asked of each span found): only a layout that runs the whole pipeline in one python model can serve it.
    staged: bool = False
    # Its checkpoint is read by its own export code (kinds/<kind>/export.py: the forms it takes, the layer saved and
    # the facts recorded with it) rather than by its task's paddlenlp class alone.
    own_export: bool = False
    # The least cosine between Paddle's and onnxruntime's answer for one text the convert gate takes, for a kind whose
    # answer is a vector (its direction is what a search compares); None: the answer is not a vector.
    parity_cosine: float | None = None
    # Its split is scored text by text against gold answers (evaluate's table, kinds/<kind>/evaluate.py); False: a
    # retrieval kind, scored over a corpus (recall@k, MRR@k: evaluate.retrieval) by its client.
    scored_per_text: bool = True
    # The kind whose model proposes the candidates this kind's model re-orders (rerank: an embed model's top 20, as its
    # client and its offline scores take them); None: it ranks on its own, or ranks nothing.
    proposed_by: str | None = None

    def __post_init__(self):
        if self.logits_rank not in (1, 2):
            raise ValueError(f"kind {self.name}: logits rank {self.logits_rank} is not 1 or 2")
        if not self.long_text_modes:
            raise ValueError(f"kind {self.name}: no long-text mode; name at least one, the default first")

    @property
    def reads_windows(self) -> bool:
        """A text longer than the model's window can be read whole, in overlapping windows (`--long-text window`)."""
        return "window" in self.long_text_modes
