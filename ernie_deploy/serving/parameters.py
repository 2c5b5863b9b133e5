"""Every parameter a serving step reads from its Triton model config, in one typed schema: each one's name, its type,
and its default or that it is required, each said once, here. The steps read through it (`Parameter.read`: the typed
value, or a refusal that names the parameter), and `ernie-deploy build` writes through it (`parameters`, a group's
`parameters`, or `Parameter.text`), so neither side keeps a name, a default or a formula of its own.

What is written: every value the writer gives, as it gives it, a value equal to the default too; a value it leaves
out (or gives as None) is absent, and the reader takes the default. Which parameters a config holds is so the writer's
choice alone: it settles a tokenizer's fingerprint, and a repository built again keeps its configs byte for byte.
A parameter whose text is empty reads as absent.

The groups are what each python step reads from its own config: TOKENIZER, MODEL, POSTPROCESS and WATCH (the step
that answers, when watched); and the steps that hold several in one config, TOKENIZER_MODEL (`--tokenizer-in-model`)
and PIPELINE (the fused model). A parameter two steps read is one object in both groups.

The parts (a parameter's Type, Parameter, Group) are serving.parameter_types'. Core, kinds and serving modules only:
it runs inside Triton's python backend.
"""

from __future__ import annotations

from typing import Any

from ernie_deploy.core.errors import InstallError
from ernie_deploy.core.io import IO_PARAMETER, IOS, NATIVE
from ernie_deploy.core.profile import WATCHED_MODEL_PARAMETER
from ernie_deploy.core.shadow import SHADOW_PARAMETER
from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN, TASK_PARAMETER
from ernie_deploy.kinds import KINDS, rerank
from ernie_deploy.kinds.base import Kind
from ernie_deploy.serving import schema, windows
from ernie_deploy.serving.entities import DECODING_PARAMETER, DECODINGS, DEFAULT_DECODING
from ernie_deploy.serving.multi_label import THRESHOLDS_FILE
from ernie_deploy.serving.parameter_types import (
    FIX,
    REQUIRED,
    Choice,
    Derived,
    FileName,
    Flag,
    Group,
    Json,
    Name,
    Parameter,
    Plan,
    Probability,
    Task,
    Type,
    Whole,
    union,
)
from ernie_deploy.serving.runtime import SPIN_MODES

# The parts a reader or writer names besides the schema itself, from here.
__all__ = ["FIX", "REQUIRED", "Derived", "Group", "Parameter", "Type", "parameters"]

# The tokenizer step (serving.tokenizer_steps) -------------------------------------------------------------------------
TOKENIZER_FILE = Parameter("tokenizer_file", FileName(), "tokenizer.json")
MAX_SEQ_LEN = Parameter("max_seq_len", Whole(3), DEFAULT_MAX_SEQ_LEN)  # tokens, [CLS] and [SEP] too
# Request lengths are padded up to a multiple of it (length buckets for model steps that batch one shape only).
PAD_TO_MULTIPLE_OF = Parameter("pad_to_multiple_of", Whole(1), 1)
# Windows (serving.windows): tokens per window, [CLS] and [SEP] too; the stride between starts; how they are cut.
WINDOW_SIZE = Parameter("window_size", Whole(3), Derived(MAX_SEQ_LEN.read, MAX_SEQ_LEN.name))
WINDOW_STRIDE = Parameter(
    "window_stride",
    Whole(1),
    Derived(lambda config: windows.default_stride(WINDOW_SIZE.read(config)), f"default_stride({WINDOW_SIZE.name})"),
)
WINDOW_CUT = Parameter("window_cut", Choice(windows.CUTS), windows.DEFAULT_CUT)
# Tokens a cut text keeps from its head, the rest from its tail; absent: the head alone.
HEAD_TOKENS = Parameter("head_tokens", Whole(0), None)
# The limits of each reading (serving.limits): required, so that a model never runs unbounded.
CUT_MAX_TEXT_CHARS = Parameter("cut_max_text_chars", Whole(1))
CUT_MAX_REQUEST_CHARS = Parameter("cut_max_request_chars", Whole(1))
WINDOW_MAX_TEXT_CHARS = Parameter("window_max_text_chars", Whole(1))
WINDOW_MAX_REQUEST_CHARS = Parameter("window_max_request_chars", Whole(1))

TOKENIZER = Group(
    "tokenizer",
    (
        TOKENIZER_FILE,
        MAX_SEQ_LEN,
        PAD_TO_MULTIPLE_OF,
        WINDOW_SIZE,
        WINDOW_STRIDE,
        WINDOW_CUT,
        HEAD_TOKENS,
        CUT_MAX_TEXT_CHARS,
        CUT_MAX_REQUEST_CHARS,
        WINDOW_MAX_TEXT_CHARS,
        WINDOW_MAX_REQUEST_CHARS,
    ),
)

# The model step in a python model (serving.model_steps) ---------------------------------------------------------------
MODEL_FILE = Parameter("model_file", FileName(), "model.onnx")
PAD_TOKEN_ID = Parameter("pad_token_id", Whole(0), 0)
INTRA_OP_THREADS = Parameter("intra_op_threads", Whole(0), 0)  # 0: onnxruntime's own choice
# How onnxruntime's threads wait for work (serving.runtime.SPIN_MODES).
ORT_SPINNING = Parameter("ort_spinning", Choice(SPIN_MODES), "off")

MODEL = Group("model", (MODEL_FILE, PAD_TOKEN_ID, INTRA_OP_THREADS, ORT_SPINNING))

# The postprocess step (kinds/<kind>/serving.py POSTPROCESS, wrapped by serving.wire) ----------------------------------
LABELS_FILE = Parameter("labels_file", FileName(), "labels.json")
THRESHOLDS = Parameter("thresholds_file", FileName(), THRESHOLDS_FILE)  # a set of labels per text
NER_DECODING = Parameter(DECODING_PARAMETER, Choice(DECODINGS), DEFAULT_DECODING)  # a label per token
# What a rerank model's `score` output is (the record's `scoring`, `export --score`): the probability, or the logit.
SCORING = Parameter("scoring", Choice(rerank.SCORES), rerank.DEFAULT_SCORE)
# The step reads each text's windows (`build --long-text window`), not its cut: a label per token's postprocess merges
# them; the tokenizer inside the model step and the fused model make them.
LONG_TEXT = Parameter("long_text", Flag("window"), False)
# The wire the answers are written in (core.io).
IO = Parameter(IO_PARAMETER, Choice(IOS), NATIVE)

POSTPROCESS = Group("postprocess", (LABELS_FILE, THRESHOLDS, NER_DECODING, SCORING, LONG_TEXT, IO))

# The step that answers, watched (serving.watch) -----------------------------------------------------------------------
# The model its series are labelled with; absent, it is not watched.
WATCHED_MODEL = Parameter(WATCHED_MODEL_PARAMETER, Name(), None)
# The task of the model served: every entry carries it (it is what marks one).
TASK = Parameter(TASK_PARAMETER, Task())
# The task of the watched model, on a step that is not an entry; an entry's is its own task.
WATCHED_TASK = Parameter("monitor_task", Task(), Derived(TASK.read, TASK.name))
# While a candidate is shadowed: what this step mirrors to it (core.shadow).
SHADOW = Parameter(SHADOW_PARAMETER, Plan(), None)

WATCH = Group("watch", (WATCHED_MODEL, WATCHED_TASK, TASK, SHADOW, LABELS_FILE, IO))

# The steps that hold several in one config ---------------------------------------------------------------------------
TOKENIZER_MODEL = union("tokenizer_model", TOKENIZER, MODEL, LONG_TEXT)
# The fused model's postprocess step (a kind's `postprocess` key: serving.postprocess_steps.POSTPROCESS_STEPS).
POSTPROCESS_STEP = Parameter("postprocess", Choice(tuple(kind.postprocess for kind in KINDS.values())))
PIPELINE = union("pipeline", TOKENIZER, MODEL, POSTPROCESS, WATCH, POSTPROCESS_STEP)

# The extraction model (kinds/uie/serving.py): tokenizer, model runs and span decoding in one python model ----------
# The schema a request that sends none is answered with (the record's `schema`); absent: every request sends one.
SCHEMA_DEFAULT = Parameter("schema", Json("a schema in Taskflow's JSON forms", schema.parse_schema), None)
# How sure the model must be of a span's start and of its end (the record's `position_prob`, `build --position-prob`).
POSITION_PROB = Parameter("position_prob", Probability(), schema.DEFAULT_POSITION_PROB)
# The most model rows (texts x prompts x windows) one request's first stage may take (serving.schema.MAX_REQUEST_ROWS).
MAX_REQUEST_ROWS = Parameter("max_request_rows", Whole(1), schema.MAX_REQUEST_ROWS)
EXTRACTION = union(
    "extraction",
    TOKENIZER_FILE,
    MAX_SEQ_LEN,
    WINDOW_SIZE,
    WINDOW_STRIDE,
    WINDOW_MAX_TEXT_CHARS,
    WINDOW_MAX_REQUEST_CHARS,
    MODEL,
    SCHEMA_DEFAULT,
    POSITION_PROB,
    MAX_REQUEST_ROWS,
    WATCH,
)

GROUPS = (TOKENIZER, MODEL, POSTPROCESS, WATCH, TOKENIZER_MODEL, PIPELINE, EXTRACTION)
# Every parameter by name, and every step's (the writer's `parameters`).
EVERY = union("any", *GROUPS)
SCHEMA: dict[str, Parameter] = {p.name: p for p in EVERY}
if len(SCHEMA) != len(EVERY.members):  # two parameters of one name: one would shadow the other in a config
    raise InstallError(
        f"serving.parameters names a parameter twice, among {sorted(p.name for p in EVERY)}",
        "give each parameter of serving/parameters.py its own name",
    )


# The record fields a build flag sets as given, each a parameter here under the field's own name: the record field
# (core.spec.ModelSpec), the `build` flag (`--position-prob`), the deployment file's build key and the config parameter
# are one name. repository.resolve records the flag's value, else the record's, else the default here, for a model
# whose steps read it (`read_by`), checked by its type; the configs write it from the record. A field with a rule of
# its own (the windows, the limits, the decoding) is decided in repository.resolve instead.
RECORDED = Group("recorded", (POSITION_PROB,))
# What the steps of a kind that is not staged read, in any layout.
_UNSTAGED = union("unstaged", TOKENIZER, MODEL, POSTPROCESS, WATCH, TOKENIZER_MODEL, PIPELINE)


def read_by(kind: Kind) -> Group:
    """Every parameter the steps of `kind` read: a staged kind's one python model reads EXTRACTION, another kind's
    steps the rest."""
    return EXTRACTION if kind.staged else _UNSTAGED


def parameters(**values: Any) -> dict[str, str]:
    """Parameters of any step, name -> text, from name -> typed value (see Group.parameters)."""
    return EVERY.parameters(**values)
