"""The typed options of each stage, and one way to read them from a mapping (a deployment file's stage options).

The command-line flags of `fetch`, `export` and `convert` fill these same objects (their flags' dests are the field
names), so a deployment file and the equivalent commands produce equal objects and are checked by the same rules.
The build stage uses repository.options.BuildOptions; `build_options_from_mapping` reads it.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Collection, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError
from ernie_deploy.core.io import IOS
from ernie_deploy.export.drift import reduced
from ernie_deploy.export.gates import (
    DEFAULT_FP16_MIN_AGREE,
    DEFAULT_FP16_TOLERANCE,
    DEFAULT_INT8_MIN_AGREE,
    DEFAULT_TOLERANCE,
)
from ernie_deploy.export.onnx import DEFAULT_OPSET
from ernie_deploy.export.precision import DEFAULT_CALIBRATION_N
from ernie_deploy.kinds.embed import POOLINGS
from ernie_deploy.kinds.rerank import SCORES
from ernie_deploy.repository.layouts import LAYOUTS
from ernie_deploy.repository.options import (
    AUTO,
    DEVICES,
    LONG_TEXT,
    ORT_GRAPH_LEVELS,
    RUNTIMES,
    SPIN_MODES,
    BuildOptions,
)
from ernie_deploy.serving.entities import DECODINGS
from ernie_deploy.serving.parameters import RECORDED

QUANTIZE = ("none", "int8", "int8-static", "int8-dynamic")
DEFAULT_PARITY_N = 256


def _choices(values) -> dict[str, Any]:
    return {"choices": tuple(values)}


class _StageOptions:
    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], where: str, *, fixed: Mapping[str, Any] | None = None):
        """These options from a mapping (a deployment file's stage options), checked: see `from_mapping`."""
        return from_mapping(cls, mapping, where, fixed=fixed)


@dataclass(frozen=True)
class FetchOptions(_StageOptions):
    source: str | None = None  # an http(s) URL of an archive, or a local folder / archive
    sha256: str | None = None  # required with a URL: the archive's pinned sha256
    bootstrap: bool = False  # the task's demo model: the checkpoint the repository ships (demo/<task>)
    train: bool = False  # with bootstrap: train it on this machine with its recipe (cached) instead
    force: bool = False  # with bootstrap: train it again even if cached
    budget: float | None = None  # with bootstrap: train for this many minutes on every train row instead

    def __post_init__(self):
        for flag, value in (("--budget", self.budget is not None), ("--train", self.train), ("--force", self.force)):
            if value and not self.bootstrap:
                raise BadOptionsError(
                    f"{flag} is about training a --bootstrap model", f"add --bootstrap, or drop {flag}"
                )


@dataclass(frozen=True)
class ExportOptions(_StageOptions):
    # None: the length the checkpoint records, else the task's; at most its max_position_embeddings
    max_seq_len: int | None = None
    ner_decoding: str | None = field(default=None, metadata=_choices(DECODINGS))  # token models; None: constrained
    labels: str | None = None  # a JSON file listing the label names, when the checkpoint's config has none
    # Embedding models: how an ErnieModel's vector is pooled (kinds/embed/export.py); None: its form's, else cls.
    pooling: str | None = field(default=None, metadata=_choices(POOLINGS))
    # Rerank models: what `score` answers, the probability or the raw logit (kinds.rerank.SCORES); None: probability.
    score: str | None = field(default=None, metadata=_choices(SCORES))


@dataclass(frozen=True)
class ConvertOptions(_StageOptions):
    quantize: str = field(default="none", metadata=_choices(QUANTIZE))
    fp16: bool = False
    optimize: bool = False  # onnxruntime's transformer fusions before the parity gate
    opset: int = DEFAULT_OPSET
    tolerance: float = DEFAULT_TOLERANCE  # Paddle vs ONNX, max abs logit difference
    parity_data: str | None = None  # a split file of parity texts; None: the task's test split
    parity_n: int = DEFAULT_PARITY_N
    skip_parity: bool = False
    dev: str | None = None  # multi-label models: the split whose F1 chooses each label's threshold
    calibration_data: str | None = None  # static INT8: the texts that fix the activation scales
    calibration_n: int = DEFAULT_CALIBRATION_N
    int8_min_agree: float = DEFAULT_INT8_MIN_AGREE
    fp16_tolerance: float = DEFAULT_FP16_TOLERANCE
    fp16_min_agree: float = DEFAULT_FP16_MIN_AGREE

    def __post_init__(self):
        # Contradictions any model would refuse; what depends on the model is refused by `check`.
        if self.quantize != "none" and self.fp16:
            raise BadOptionsError(
                f"--fp16 and --quantize {self.quantize} each turn model.onnx into a reduced-precision copy of "
                "the FP32 model; they do not combine",
                "choose one: --fp16 for GPU serving, --quantize int8 for CPU serving",
            )

    @property
    def precision(self) -> str:
        """What convert makes: fp32, fp16, or the INT8 kind asked for."""
        return self.quantize if self.quantize != "none" else "fp16" if self.fp16 else "fp32"

    @property
    def calibrated(self) -> bool:
        """Whether this run makes a static INT8 model, whose activation scales are fixed on calibration texts."""
        return self.quantize != "none" and reduced(self.quantize).calibrated

    def check(self, task, name: str | None = None) -> None:
        """Refuse what does not fit model `name` of `task` (a core.tasks.TaskSpec), before any conversion work."""
        if self.dev and not task.per_label_thresholds:
            raise BadOptionsError(
                f"--dev chooses a multi-label model's thresholds; {name or task.name} is a {task.name} model",
                "drop --dev",
            )
        if not self.calibrated and self.calibration_data:
            raise BadOptionsError(
                "--calibration-data fixes a static INT8 model's scales; this run makes none",
                "drop --calibration-data, or add --quantize int8",
            )
        if self.calibrated and self.calibration_n < 1:
            raise BadOptionsError(
                f"--calibration-n {self.calibration_n}: calibration needs at least one text", "pass 1 or more"
            )


# The build options a deployment file may set, beyond BuildOptions' own checks: the values each one takes. Their
# defaults are BuildOptions', as `ernie-deploy build`'s are.
BUILD_CHOICES = {
    "runtime": (AUTO, *RUNTIMES),
    "device": DEVICES,
    "ort_graph_level": tuple(ORT_GRAPH_LEVELS),
    "ort_spinning": SPIN_MODES,
    "layout": (AUTO, *LAYOUTS),
    "long_text": LONG_TEXT,
    "ner_decoding": DECODINGS,
    "io": IOS,
}


def from_mapping(
    cls,
    mapping: Mapping[str, Any],
    where: str,
    *,
    fixed: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
    choices: Mapping[str, tuple] | None = None,
    gathered: tuple[str, Collection[str]] | None = None,
):
    """An options object of dataclass `cls` from `mapping` (option name -> value), every key and value checked and
    a bad one named as `where.key` with the fix. `fixed`: fields the caller sets (a key naming one is refused);
    `defaults`: the caller's defaults, where they differ from the class's; `choices`: the values a field takes,
    beside those in a field's metadata; `gathered`: a field and the keys it gathers, name -> value (BuildOptions'
    `recorded`: one key per recorded parameter, each value checked by the class as it is made), the field itself no
    key."""
    fixed, defaults = dict(fixed or {}), dict(defaults or {})
    into, keys = gathered or (None, ())
    known = {f.name: f for f in fields(cls) if f.name != into}
    hints = typing.get_type_hints(cls)
    values = {**defaults}
    for key, value in mapping.items():
        name = key.replace("-", "_")
        if name in fixed:
            raise BadOptionsError(f"{where}.{key}: is set from the model's own fields, not here", f"remove {key}")
        if name in keys:
            values[into] = {**values.get(into, {}), name: value}
            continue
        if name not in known:
            settable = sorted((set(known) - set(fixed)) | set(keys))
            raise BadOptionsError(f"{where}.{key}: unknown option", f"use one of: {', '.join(settable)}")
        allowed = (choices or {}).get(name) or known[name].metadata.get("choices")
        values[name] = _checked(f"{where}.{key}", value, hints[name], allowed)
    try:
        return cls(**{**values, **fixed})
    except ErnieDeployError as exc:  # named with its place, and of its own type still
        raise type(exc)(f"{where}: {exc.problem}", exc.fix) from None


def _checked(where: str, value: Any, hint, allowed: tuple | None) -> Any:
    """`value` as a value of type `hint` (bool, int, float, str, or one of them | None), within `allowed` if given."""
    kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None:
        if type(None) in kinds:
            return None
        raise BadOptionsError(f"{where}: needs a value", "give one, or remove the option for its default")
    if bool in kinds:
        if not isinstance(value, bool):
            raise BadOptionsError(f"{where}: is a switch, got {value!r}", "write true or false")
    elif int in kinds:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadOptionsError(f"{where}: needs a whole number, got {value!r}", "write e.g. 128")
    elif float in kinds:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadOptionsError(f"{where}: needs a number, got {value!r}", "write e.g. 0.5")
        value = float(value)
    elif str in kinds and not isinstance(value, str):
        # YAML reads on, off, yes and no as true and false: a mode named so must be quoted.
        raise BadOptionsError(f"{where}: needs text, got {value!r}", "write it as text, in quotes: e.g. 'off'")
    if allowed is not None and value not in allowed:
        raise BadOptionsError(f"{where}: {value!r} is not one of {', '.join(map(str, allowed))}", "pick one of them")
    return value


def build_options_from_mapping(mapping: Mapping[str, Any], where: str) -> BuildOptions:
    """BuildOptions from a deployment file's `build` section: what `ernie-deploy build` with those flags makes (the
    name of a recorded parameter, serving.parameters.RECORDED, is the key that sets it, as its flag does)."""
    return from_mapping(BuildOptions, mapping, where, choices=BUILD_CHOICES, gathered=("recorded", RECORDED.names))


def changed(options, defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fields of an options object that differ from its class's defaults (or `defaults`, where they differ), in
    field order, each gathered value (BuildOptions' `recorded`) under its own name: what a plan shows."""
    out = {}
    for f in fields(options):
        default = f.default if f.default is not MISSING else None
        value = getattr(options, f.name)
        if f.name == "recorded":
            out.update(value)
        elif value != (defaults or {}).get(f.name, default):
            out[f.name] = value
    return out
