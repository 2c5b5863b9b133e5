"""Task specs: every fact of a task, in one place.

Every stage (fetch, export, convert, repository, serve, client, metrics) takes a TaskSpec and reads what it
needs from it; no stage branches on a task's name or metric, and none has a copy per task. What follows from the
task's kind (what a prediction is, how it is scored, what a long text becomes) is the kind's: a TaskSpec reads it
from its Kind record (ernie_deploy.kinds), and where behaviour differs a stage looks it up by the spec's `kind` in
one table of its own, built from the kinds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.kinds import KINDS, Kind, get_kind


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a Triton model, per request item (the batch dimension is implied)."""

    name: str
    data_type: str  # Triton's name without the TYPE_ prefix: "INT64", "FP32", "BYTES"
    dims: tuple[int, ...]
    # A request may leave it out (Triton's `optional`): the step that reads it says what it takes instead.
    optional: bool = False
    # What a warm-up or a probe sends for it where it is not a text (a text input gets a text).
    example: str | None = None


# The ensemble's inputs: one text per item, and for text pairs its second text.
TEXT_INPUT = TensorSpec("text", "BYTES", (1,))
TEXT_PAIR_INPUT = TensorSpec("text_pair", "BYTES", (1,))
# What to extract from each text (UIE): a schema in Taskflow's JSON forms (serving.spans.parse_schema); left out, the
# one the model was built with (`build --schema`).
SCHEMA_INPUT = TensorSpec("schema", "BYTES", (1,), optional=True, example='["时间"]')


# The longest input in tokens ([CLS] and [SEP] included) an export takes when neither the user nor the checkpoint
# says otherwise (a task's `default_max_seq_len` where it has its own).
DEFAULT_MAX_SEQ_LEN = 128
# Taskflow's information_extraction reads 512 tokens (its `max_seq_len` default, and PaddleNLP's UIE fine-tuning's):
# a UIE checkpoint that records no length of its own is served at it.
TASKFLOW_MAX_SEQ_LEN = 512


@dataclass(frozen=True)
class TaskSpec:
    name: str  # CLI name: "seq_cls"
    kind: str  # what one prediction is: the name of a kind in ernie_deploy.kinds (its facts: `kind_facts`)
    dataset: str  # key in ernie_deploy.fetch.datasets.DATASETS
    paddle_class: str  # paddlenlp.transformers class that carries the task head
    # Other paddlenlp classes whose save_pretrained checkpoints the task serves (its kind's export reads each).
    other_heads: tuple[str, ...] = ()
    # What the ensemble returns: postprocess outputs, or tokenizer outputs passed straight through.
    outputs: tuple[TensorSpec, ...] = field(default_factory=tuple)
    # What the postprocess reads besides the logits: tokenizer outputs (offsets) or the request's text.
    postprocess_extra_inputs: tuple[TensorSpec, ...] = field(default_factory=tuple)
    # What the ensemble takes, per request item: the text, or a text and its pair.
    inputs: tuple[TensorSpec, ...] = (TEXT_INPUT,)
    # What a request may send beside its texts, per text (UIE: what to extract from it).
    options: tuple[TensorSpec, ...] = ()
    # The longest input an export takes when neither the user nor the checkpoint says (at most the model's positions).
    default_max_seq_len: int = DEFAULT_MAX_SEQ_LEN

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"task {self.name}: kind {self.kind!r} is not one of {sorted(KINDS)}")
        if self.prediction not in {o.name for o in self.outputs}:
            raise ValueError(f"task {self.name}: prediction {self.prediction!r} is not one of its outputs")

    @property
    def heads(self) -> tuple[str, ...]:
        """Every paddlenlp class whose checkpoints the task serves, its own first."""
        return (self.paddle_class, *self.other_heads)

    @property
    def kind_facts(self) -> Kind:
        """The facts of this task's kind (ernie_deploy/kinds/<kind>/__init__.py)."""
        return get_kind(self.kind)

    # What follows from the kind, read where the task is at hand.

    @property
    def logits_rank(self) -> int:
        """Dims of the logits per text: [classes] or [tokens, classes]."""
        return self.kind_facts.logits_rank

    @property
    def metric(self) -> str:
        """The number the client prints last and the gate checks ("accuracy", "f1", "micro_f1")."""
        return self.kind_facts.metric

    @property
    def postprocess(self) -> str:
        """The key of the postprocess step in ernie_deploy.serving.steps.STEPS."""
        return self.kind_facts.postprocess

    @property
    def prediction(self) -> str:
        """The ensemble output that holds a text's prediction ("label", "entities", "labels")."""
        return self.kind_facts.prediction

    @property
    def split_format(self) -> str:
        return self.kind_facts.split_format

    @property
    def per_label_thresholds(self) -> bool:
        """Whether its models keep one decision threshold per label (thresholds.json beside labels.json)."""
        return self.kind_facts.per_label_thresholds

    @property
    def graph_postprocess(self) -> str:
        return self.kind_facts.graph_postprocess


# Triton takes a model name as a folder name; these characters keep it a plain one on every filesystem and in URLs.
_MODEL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


def check_model_name(name: str) -> str:
    """A model name users call (the ensemble, and the prefix of its steps' names), or a clear error."""
    if not isinstance(name, str) or not _MODEL_NAME.fullmatch(name):
        raise BadOptionsError(
            f"model name {name!r} is not usable",
            "use 1-64 characters: a letter first, then letters, digits, '_' or '-' (e.g. news_classifier)",
        )
    return name


# The ensemble config parameter that records which task a served model performs, so a client or tool that knows
# only the model's name learns how to read its answers.
TASK_PARAMETER = "task"

# One tokenizer step serves every task that shares a vocabulary.
TOKENIZER_STEP = "ernie_tokenizer"
# Inputs of the exported ERNIE graph; paddlenlp derives the attention mask from pad ids.
MODEL_INPUTS = ("input_ids", "token_type_ids")
LOGITS = "logits"
# Everything the tokenizer step can return, per text. Fixed whatever tasks share the tokenizer, so that
# rebuilding one task never takes away what another task's ensemble reads; each ensemble maps only the
# tensors it uses, and the step computes only the outputs a request asks for.
TOKENIZER_OUTPUTS = (
    TensorSpec("input_ids", "INT64", (-1,)),
    TensorSpec("token_type_ids", "INT64", (-1,)),
    TensorSpec("offsets", "INT64", (-1, 2)),  # [start, end) of each token in the text, in characters
    TensorSpec("lengths", "INT64", (1,)),  # real tokens, [CLS] and [SEP] included
    TensorSpec("truncated", "BOOL", (1,)),  # the text had more tokens than max_seq_len
    # The whole text as overlapping windows of max_seq_len (build --long-text window; ernie_deploy.serving.windows)
    TensorSpec("window_ids", "INT64", (-1, -1)),  # [windows, tokens]: [CLS] a slice of the text's tokens [SEP]
    TensorSpec("window_type_ids", "INT64", (-1, -1)),
    TensorSpec("window_starts", "INT64", (-1,)),  # each window's first token among the text's tokens; -1: padding
    TensorSpec("window_ends", "INT64", (-1,)),  # one past each window's last token; -1: padding
    TensorSpec("text_offsets", "INT64", (-1, 2)),  # offsets of the whole, untruncated token sequence
    TensorSpec("text_lengths", "INT64", (1,)),  # its tokens, [CLS] and [SEP] included
)
# The tokenizer outputs that carry a text as windows (one text per item: a pair tokenizer has none).
WINDOW_OUTPUTS = ("window_ids", "window_type_ids", "window_starts", "window_ends", "text_offsets", "text_lengths")
# The windowed model step reads the windows under their own names, so one tokenizer serves models of every mode.
WINDOW_INPUTS = ("window_ids", "window_type_ids")
# A classifier's answers a client gets only by naming them (tritonclient's `outputs`): every label's probability in
# labels.json order (softmax for a label per text, each label's sigmoid for a set of labels), and the model's raw
# logits (Hugging Face's function_to_apply="none", TEI's raw_scores). A python step computes them only for a request
# that names them; clients of this project name every other output and leave these out unless asked.
PROBABILITIES = TensorSpec("probabilities", "FP32", (-1,))
RAW_LOGITS = TensorSpec(LOGITS, "FP32", (-1,))
ON_REQUEST = frozenset({PROBABILITIES.name, RAW_LOGITS.name})

SEQ_CLS = TaskSpec(
    name="seq_cls",
    kind="sequence",
    dataset="thucnews",
    paddle_class="ErnieForSequenceClassification",
    outputs=(
        TensorSpec("label_id", "INT64", (1,)),
        TensorSpec("label", "BYTES", (1,)),
        TensorSpec("confidence", "FP32", (1,)),
        TensorSpec("truncated", "BOOL", (1,)),  # the text was cut to max_seq_len (head, or head and tail)
        PROBABILITIES,  # softmax over every label (on request)
        RAW_LOGITS,  # the logits the label comes from, passed through (on request)
    ),
)

TOKEN_CLS = TaskSpec(
    name="token_cls",
    kind="token",
    dataset="msra_ner",
    paddle_class="ErnieForTokenClassification",
    outputs=(
        TensorSpec("entities", "BYTES", (1,)),  # JSON list of {"type", "start", "end", "text"}
        # head: entities past the cut are not found; window: always false, every token is decided
        TensorSpec("truncated", "BOOL", (1,)),
    ),
    postprocess_extra_inputs=(TEXT_INPUT, TOKENIZER_OUTPUTS[2], TOKENIZER_OUTPUTS[3]),
)

# Two texts, one label: do they say the same thing, does one answer the other, do they belong together. The
# tokenizer encodes `[CLS] text [SEP] text_pair [SEP]` with token types 0 and 1, as ERNIE was trained.
PAIR_CLS = TaskSpec(
    name="pair_cls",
    kind="sequence",
    dataset="thucnews_pairs",
    paddle_class="ErnieForSequenceClassification",
    outputs=SEQ_CLS.outputs,
    inputs=(TEXT_INPUT, TEXT_PAIR_INPUT),
)

MULTI_LABEL = TaskSpec(
    name="multi_label",
    kind="multi_label",
    dataset="msra_multilabel",
    paddle_class="ErnieForSequenceClassification",
    outputs=(
        TensorSpec("labels", "BYTES", (1,)),  # JSON list of {"label", "score"} over each label's threshold, best first
        TensorSpec("scores", "FP32", (-1,)),  # every label's sigmoid score, in labels.json order
        # The same values as `scores`, under the name every classifier answers them by (on request): a client that
        # reads `probabilities` reads any classifier; `scores` stays for the clients that read it already.
        PROBABILITIES,
        RAW_LOGITS,
    ),
)

# Spans of the types a schema names, and their relations (PaddleNLP's UIE): one JSON answer per text.
UIE = TaskSpec(
    name="uie",
    kind="uie",
    dataset="msra_ner",
    paddle_class="UIE",
    outputs=(TensorSpec("result", "BYTES", (1,)),),  # JSON: {type: [{"text", "start", "end", "probability", ...}]}
    options=(SCHEMA_INPUT,),
    default_max_seq_len=TASKFLOW_MAX_SEQ_LEN,
)

# The tokenizer's outputs an ensemble passes through as they are: each text's tokens ([CLS] and [SEP] included), and
# whether it was cut to max_seq_len.
LENGTHS, TRUNCATED = TOKENIZER_OUTPUTS[3], TOKENIZER_OUTPUTS[4]

# A vector per text (semantic search's recall), pooled as the checkpoint pools it (`export --pooling` for a plain
# encoder): RocketQA's query or passage tower (paddlenlp's ErnieEncoder), a plain ErnieModel, or the neural-search
# recipe's saved state. Its tokens and truncation come with it, for the gateway's usage counts and TEI's refusal of a
# text past the model's length.
EMBED = TaskSpec(
    name="embed",
    kind="embed",
    dataset="insuranceqa",
    paddle_class="ErnieEncoder",
    other_heads=("ErnieModel",),
    outputs=(TensorSpec("embedding", "FP32", (-1,)), LENGTHS, TRUNCATED),
)

# A relevance score per (query, text) pair (semantic search's ranking): RocketQA's cross-encoder (an ErnieEncoder
# with a 2-label classifier, read as ErnieCrossEncoder.matching reads it) or an ErnieForSequenceClassification of 1 or
# 2 labels. `score` is P(relevant) unless the model was exported with `--score raw`; the logit it comes from (the
# log-odds of relevance) is answered on request.
RERANK = TaskSpec(
    name="rerank",
    kind="rerank",
    dataset="insuranceqa",
    paddle_class="ErnieEncoder",
    other_heads=("ErnieForSequenceClassification",),
    outputs=(TensorSpec("score", "FP32", (1,)), LENGTHS, TRUNCATED, TensorSpec(LOGITS, "FP32", (1,))),
    inputs=(TEXT_INPUT, TEXT_PAIR_INPUT),
)

TASKS: dict[str, TaskSpec] = {t.name: t for t in (SEQ_CLS, TOKEN_CLS, PAIR_CLS, MULTI_LABEL, UIE, EMBED, RERANK)}
# What a request may send beside its texts, every task's, by name (a probe sends each its example).
OPTIONS: dict[str, TensorSpec] = {option.name: option for task in TASKS.values() for option in task.options}
# The demo model of each task: the name a model of that task gets when none is given (the Triton model users call,
# and the prefix of its steps). A model's name is a fact of the model (core.spec.ModelSpec.name), not of its task.
DEMO_MODELS: dict[str, str] = {
    "seq_cls": "ernie_seqcls",
    "token_cls": "ernie_tokencls",
    "pair_cls": "ernie_paircls",
    "multi_label": "ernie_multilabel",
    "uie": "ernie_uie",
    "embed": "ernie_embed",
    "rerank": "ernie_rerank",
}
# The demo models: what the quickstart, `scripts/convert.sh`, `build` and `bench` take when no task is named. The
# other tasks are one `--task` away (their bootstraps start from these two and add minutes the quickstart skips).
DEFAULT_TASKS = ("seq_cls", "token_cls")


def artifact_name(model: str) -> str:
    """The folder of a model's files under each stage (artifacts/<stage>/<folder>): the model's name, except for
    the demo models, whose files live under their task's name (artifacts/static/seq_cls for ernie_seqcls)."""
    demo = {name: task for task, name in DEMO_MODELS.items()}
    return demo.get(model, model)


def tasks_of_heads(heads: list[str]) -> list[TaskSpec]:
    """The tasks that serve a checkpoint saved from one of `heads` (paddlenlp class names, a config's
    `architectures`): several where tasks share a class (a label per text, text pairs and label sets are all
    ErnieForSequenceClassification), none where no task serves it."""
    return [task for task in TASKS.values() if set(task.heads) & set(heads)]


def get_task(name: str) -> TaskSpec:
    key = name.replace("-", "_")
    if key not in TASKS:
        raise BadOptionsError(f"unknown task {name!r}", f"use one of: {', '.join(sorted(TASKS))}")
    return TASKS[key]
