"""ModelSpec: one typed record of a model's facts, the unit users name.

It is written beside the model's artifacts by `export` (artifacts/static/<name>/model.json), completed by `convert`
(artifacts/onnx/<name>/model.json: the thresholds it chose, the precision) and by `build`, which records it on the
model in the served repository: each version folder of the model users call holds that version's complete record
(`<model>/<version>/model.json`), and the entry config carries the serving version's (the `model_spec` parameter,
moved by rollout and rollback), where the tools that see only a repository or a running server read it. Every stage
reads the record instead of being told again; a flag given to a later stage overrides a field and is then recorded.

Fields that a stage decides (the layout, the long-text reading, the limits) stay None until that stage has decided
them: None always means "the default of the stage that decides it", never a guess.

In memory the record is the model: code that works on a model takes its ModelSpec (and, where it needs files, a
small paths object beside it); code that needs only what the task's kind decides takes the TaskSpec
(`ModelSpec.task_spec`). Format 3 is the one format there is: a record of another format is refused with the
command that writes it again (`ernie-deploy check` says the same of a whole repository).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.io import wire
from ernie_deploy.core.settings import ServingSettings
from ernie_deploy.core.tasks import (
    DEFAULT_MAX_SEQ_LEN,
    DEMO_MODELS,
    TaskSpec,
    artifact_name,
    check_model_name,
    get_task,
)
from ernie_deploy.kinds import Kind

SPEC_FILE = "model.json"
# The entry config parameter that carries the served model's record (JSON).
SPEC_PARAMETER = "model_spec"
# 3: the serving settings are typed (core.settings.ServingSettings) and every version of a served model carries its
# own record.
FORMAT = 3
# What to run to write a model's records again in this format.
REBUILD = (
    "run `ernie-deploy export`, `convert` and `build` with --model NAME again (scripts/convert.sh for the demo models)"
)


# What `summary` leaves out: the name it is shown under, what is too long for a line (the labels, counted instead; the
# reference profile, which `stats` compares live answers with), and the serving settings, summed apart.
_NOT_SUMMED = {"name", "labels", "reference", "tokenizer_sha256", "serving"}


class OldRecord(BadRepositoryError):
    """A model record (model.json, or a served model's `model_spec`) in a format this version does not read."""


@dataclass(frozen=True)
class ModelSpec:
    name: str  # what users call: the ensemble (or fused model) name, and the artifacts' folder
    task: str  # a key of core.tasks.TASKS: the head, the data format and the kind of answer
    labels: tuple[str, ...]
    max_seq_len: int  # the longest input in tokens, [CLS] and [SEP] included
    do_lower_case: bool = True
    max_positions: int | None = None  # the checkpoint's max_position_embeddings, when its config said
    # The token length of the texts the model was trained on (the bootstrap records its own: the longest training
    # text); None: not known, which reads as max_seq_len. A model reads long texts best in windows of about this size.
    trained_tokens: int | None = None
    ner_decoding: str | None = None  # token models: serving.entities.DECODINGS; None: the default
    # Embedding models: how the vector is pooled (cls, pooled or mean: `export --pooling`), whether the graph
    # L2-normalizes it (the neural-search recipe's does), and its size; None for other models.
    pooling: str | None = None
    normalized: bool | None = None
    dim: int | None = None
    # Rerank models: what their `score` output is, "probability" or "raw" (the logit: `export --score raw`).
    scoring: str | None = None
    thresholds: dict[str, float] | None = None  # multi-label models: per label, chosen by `convert` on the dev split
    precision: str | None = None  # what `convert` made: fp32, fp16, int8-static or int8-dynamic
    # How a text longer than max_seq_len is read (repository.options.LONG_TEXT) and its windows or cut.
    long_text: str | None = None
    window_size: int | None = None
    window_stride: int | None = None
    window_cut: str | None = None  # serving.windows.CUTS; None: not windowed
    head_tokens: int | None = None
    # What one request may cost, in characters (serving.limits), for the reading the model does.
    max_text_chars: int | None = None
    max_request_chars: int | None = None
    # Extraction models (UIE): the schema a request that sends none is answered with (Taskflow's forms, as JSON), and
    # the probability a span's start and end must pass (serving.spans.DEFAULT_POSITION_PROB where None).
    schema: list | dict | str | None = None
    position_prob: float | None = None
    layout: str | None = None  # repository.layouts.LAYOUTS
    # The names and formats clients send and read (core.io: ernie-deploy or paddlenlp); None: ernie-deploy's own.
    io: str | None = None
    # How the served model runs (runtime, instances, batching, threads, cache, monitoring); None: not built yet.
    serving: ServingSettings | None = None
    version: int | None = None  # the version of the served model this record is; None: not built yet
    tokenizer_sha256: str | None = None  # the fingerprint of the tokenizer step that serves it
    # What the model answered at build on texts like those it will serve (repository.reference): {"source": "dev
    # split" or the --reference file's name, "texts": N, "shares": {series: {bucket: share}}}, the baseline its live
    # answers are compared with (core.profile); None: none was recorded (no texts, or `build --no-monitor`).
    reference: dict | None = None

    def __post_init__(self):
        check_model_name(self.name)
        get_task(self.task)
        object.__setattr__(self, "labels", tuple(self.labels))
        if self.max_seq_len < 2:
            raise BadOptionsError(
                f"model {self.name}: max_seq_len {self.max_seq_len} leaves no room for a token",
                "give a max_seq_len of 3 or more (`ernie-deploy export --max-seq-len`)",
            )
        if isinstance(self.serving, dict):
            object.__setattr__(self, "serving", ServingSettings.from_dict(self.serving, f"model {self.name}'s record"))

    @classmethod
    def new(cls, task: TaskSpec | str, name: str | None = None, **facts) -> ModelSpec:
        """A record of a `task` model that no stage has written yet: under `name` (None: the task's demo name), with
        no labels and the default max_seq_len unless `facts` say otherwise."""
        task = get_task(task) if isinstance(task, str) else task
        facts = {"labels": (), "max_seq_len": DEFAULT_MAX_SEQ_LEN, **facts}
        return cls(name=name or DEMO_MODELS[task.name], task=task.name, **facts)

    @property
    def task_spec(self) -> TaskSpec:
        """What this model's task decides: its kind, inputs, outputs and data (no model facts)."""
        return get_task(self.task)

    @property
    def kind(self) -> str:
        return get_task(self.task).kind

    @property
    def kind_facts(self) -> Kind:
        """The facts of this model's kind (ernie_deploy/kinds/<kind>/__init__.py)."""
        return get_task(self.task).kind_facts

    @property
    def model_step(self) -> str:
        """The Triton model that runs the ONNX model, in layouts that split the model into steps."""
        return f"{self.name}_model"

    @property
    def postprocess_step(self) -> str:
        return f"{self.name}_postprocess"

    @property
    def artifact_name(self) -> str:
        """The folder of this model's files under each stage (core.tasks.artifact_name)."""
        return artifact_name(self.name)

    @property
    def wire(self):
        """The tensors this model's clients send and read (core.io.Wire), as its record says."""

        return wire(self.task_spec, self.io, self.name)

    @property
    def window_default(self) -> int:
        """Tokens per window when none is given: the length the model was trained on (with [CLS] and [SEP]), at
        least 3 and at most max_seq_len; max_seq_len where it is not known."""
        if self.trained_tokens is None:
            return self.max_seq_len
        return max(3, min(self.max_seq_len, self.trained_tokens))

    def updated(self, **changes) -> ModelSpec:
        """This record with `changes` (None values leave a field as it is: an option that was not given)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def summary(self) -> str:
        """Every fact of the record on one line, for `check` and `stats`: each field that is set, the labels counted,
        the serving settings where they are not ServingSettings' defaults (the runtime always)."""
        facts = [f"{len(self.labels)} labels"]
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _NOT_SUMMED or value is None:
                continue
            facts.append(f"{f.name} {json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value}")
        if self.serving is not None:
            default = ServingSettings().to_dict()
            changed = {k: v for k, v in self.serving.to_dict().items() if k == "runtime" or v != default[k]}
            facts.append("serving: " + ", ".join(f"{k} {v}" for k, v in changed.items()))
        return "; ".join(facts)

    # As JSON ------------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        out = {"format": FORMAT, **asdict(self)}
        out["labels"] = list(self.labels)
        out["serving"] = self.serving.to_dict() if self.serving is not None else None
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict, where: str = "the model record") -> ModelSpec:
        data = dict(data)
        version = data.pop("format", None)
        if version != FORMAT:
            raise OldRecord(
                f"{where} is in record format {version}; this ernie-deploy reads format {FORMAT}",
                f"write it again with this version: {REBUILD}",
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        missing = sorted({"name", "task", "labels", "max_seq_len"} - data.keys())
        if unknown or missing:
            raise BadRepositoryError(
                f"{where}: "
                + "; ".join(
                    part
                    for part in (
                        f"unknown fields {', '.join(unknown)}" if unknown else "",
                        f"missing fields {', '.join(missing)}" if missing else "",
                    )
                    if part
                ),
                "write it again with the stage that made it (export, convert or build)",
            )
        return cls(**data)

    @classmethod
    def read(cls, folder: str | Path) -> ModelSpec:
        path = Path(folder) / SPEC_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BadRepositoryError(
                f"{folder} holds no {SPEC_FILE}", "run `ernie-deploy export` for it first"
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRepositoryError(
                f"{path} is not JSON: {exc}", "write it again with `ernie-deploy export`"
            ) from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_json(cls, text: str, where: str = "the model record") -> ModelSpec:
        return cls.from_dict(json.loads(text), where)

    def write(self, folder: str | Path) -> Path:
        """model.json in `folder`, atomically."""
        return write_json(self.to_dict(), Path(folder) / SPEC_FILE)
