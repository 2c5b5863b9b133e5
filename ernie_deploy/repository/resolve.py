"""Resolve one record: a model's record, the build's overrides and its serving settings become the record as served.

`resolve` decides every open field of one record (its layout, how it reads long texts and in what windows, its
limits, its decoding, its wire, its extraction schema, and the fields a flag sets as given: `recorded`) and checks
each once; `repository.plan` settles what a whole build decides first (the runtime, the layout asked for, the cache, a
new version's wire, the thresholds) and resolves each record with it. Every config, file and fact of the served model
is then read from the completed record (repository.configs, repository.layouts), never worked out again; each default
it fills in has its home in serving.record_defaults, or for a field a flag sets as given in its parameter
(serving.parameters.RECORDED). A field the record already holds stays as it is unless an override names another value:
a record resolved again with no overrides is itself (what `tune` and a new version's build rely on). The overrides
and settings come checked: a BuildOptions (repository.options) is checked when it is made.
"""

from __future__ import annotations

from dataclasses import replace

from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError
from ernie_deploy.core.io import NATIVE, wire
from ernie_deploy.core.settings import AUTO, ServingSettings
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.kinds import KINDS
from ernie_deploy.repository.options import (
    BuildOptions,
    RecordOverrides,
    recorded_default,
    recorded_flag,
    require_settled,
)
from ernie_deploy.serving.entities import check_decoding
from ernie_deploy.serving.limits import ReadingLimits
from ernie_deploy.serving.parameters import RECORDED, read_by
from ernie_deploy.serving.record_defaults import decoding, head_tokens, long_text, windows
from ernie_deploy.serving.schema import parse_schema, schema_names
from ernie_deploy.serving.windows import check_head_tokens, check_stride


def resolve(record: ModelSpec, overrides: RecordOverrides, settings: ServingSettings) -> ModelSpec:
    """`record` as served with `overrides` and `settings` (the runtime settled), every field decided, or a refusal
    that names the flag and the fix."""
    require_settled(settings)
    settings = settings.settings
    model = replace(
        record,
        ner_decoding=decides_decoding(record, overrides),
        io=_io(record, overrides),
        **_extraction(record, overrides),
        **recorded(record, overrides),
        **_reading(record, overrides),
        layout=None,
        serving=settings,
    )
    return replace(model, layout=_layout(record, overrides, model).name)


def resolve_options(record: ModelSpec, options: BuildOptions) -> ModelSpec:
    """`resolve` with the build options' two parts."""
    return resolve(record, options.overrides, options.settings)


def resolves(record: ModelSpec, options: BuildOptions) -> bool:
    """Whether `record` can be served with `options` (its layout fits it and the settings): what a search over
    layouts and settings tries before it builds."""

    try:
        resolve_options(record, options)
    except ErnieDeployError:
        return False
    return True


def _io(record: ModelSpec, overrides: RecordOverrides) -> str:
    """The wire the model answers in (core.io): the override, else what its record says, else ernie-deploy's own; a
    refusal where its kind has no such wire."""

    io = overrides.io or record.io or NATIVE
    wire(record.task_spec, io, record.name)
    return io


def _extraction(record: ModelSpec, overrides: RecordOverrides) -> dict:
    """An extraction model's default schema: the override, else the record's; refused for a model of another kind."""
    import json

    if not record.kind_facts.staged:
        if overrides.schema is not None:
            raise BadOptionsError(
                f"--schema sets what an extraction model extracts; {record.name!r} is a {record.kind} model",
                "drop --schema, or build extraction models separately with it (--task uie or --model N)",
            )
        return {}
    schema = record.schema
    if overrides.schema is not None:
        try:
            schema = json.loads(overrides.schema)
            parse_schema(schema)
        except (ValueError, ErnieDeployError) as exc:
            raise BadOptionsError(
                f"--schema {overrides.schema!r} is not a schema: {exc}",
                'pass JSON in Taskflow\'s forms, e.g. --schema \'["人名", "地名"]\' or \'{"人物": ["出生地"]}\'',
            ) from None
    # Its labels are the names it answers when a request sends no schema (the series of span types count them), else
    # the types it was trained on.
    labels = record.labels if schema is None else tuple(schema_names(parse_schema(schema)))
    return {"schema": schema, "labels": labels}


def recorded(record: ModelSpec, overrides: RecordOverrides) -> dict:
    """The record fields a flag sets as given (serving.parameters.RECORDED), for a model whose steps read them: the
    override, else the record's value, else the parameter's default, checked by the parameter's type; an override for
    a model whose steps read no such parameter is refused, naming the kinds whose steps do."""
    reads = read_by(record.kind_facts)
    given = dict(overrides.recorded)
    out = {}
    for parameter in RECORDED:
        flag = recorded_flag(parameter)
        if parameter.name not in reads:
            if parameter.name in given:
                kinds = [kind.name for kind in KINDS.values() if parameter.name in read_by(kind)]
                raise BadOptionsError(
                    f"{flag} sets what {' and '.join(kinds)} models read; {record.name!r} is a {record.kind} model",
                    f"drop {flag}, or build those models separately with it (--task or --model N)",
                )
            continue
        value = given.get(parameter.name, getattr(record, parameter.name))
        value = recorded_default(parameter) if value is None else value
        if value is not None:
            try:
                parameter.type.text(value)
            except ValueError:
                raise BadOptionsError(
                    f"model {record.name!r} records {parameter.name} {value!r}, not {parameter.type.what}",
                    f"build it with {flag} (or leave it out for the default)",
                ) from None
        out[parameter.name] = value
    return out


def decides_decoding(record: ModelSpec, overrides: RecordOverrides) -> str | None:
    """How a token model turns logits into entities: the override, else what its record says, else the default; None
    for a model of another kind, which has no entities (an override for it is refused)."""

    if not record.kind_facts.entities:
        if overrides.ner_decoding is not None:
            raise BadOptionsError(
                f"--ner-decoding sets how a token model decodes entities; {record.name!r} is a {record.kind} model",
                "build token models separately with it (--task token_cls or --model N), or record it per model "
                "with `ernie-deploy export --ner-decoding` (a deployment file's export: {ner_decoding: ...})",
            )
        return None
    return check_decoding(decoding(record, overrides.ner_decoding))


def _reading(record: ModelSpec, overrides: RecordOverrides) -> dict:
    """How the model reads a text longer than max_seq_len, its windows or its head, and what one request may cost:
    the record fields `long_text`, `window_*`, `head_tokens`, `max_text_chars` and `max_request_chars`."""

    modes = record.kind_facts.long_text_modes
    mode = (overrides.long_text if overrides.long_text != AUTO else None) or long_text(record)
    if mode not in modes:
        why = {
            "window": "a window decides each token, but a label per text needs the text in one model input",
            "head_tail": "cutting out a text's middle leaves no labels for the tokens there",
        }.get(mode, "")
        raise BadOptionsError(
            f"--long-text {mode} does not fit {record.kind} model {record.name!r}{': ' + why if why else ''}",
            f"build it with --long-text {' or '.join(('auto', *modes))} (build models of other kinds separately, "
            "with --task or --model)",
        )
    if mode == "head_tail" and len(record.task_spec.inputs) != 1:
        raise BadOptionsError(
            f"--long-text head_tail cuts one text; {record.name!r} takes {len(record.task_spec.inputs)}",
            "build it with --long-text head (pairs are cut the longer text first)",
        )
    # The record's own reading is kept where the mode is the one it has; another mode starts from the defaults.
    kept = record if record.long_text == mode else replace(record, **dict.fromkeys(_READING))
    length = record.max_seq_len
    out = dict.fromkeys(_READING)
    out["long_text"] = mode
    if mode == "head_tail":
        out["head_tokens"] = head_tokens(replace(kept, long_text=mode), overrides.head_tokens)
        check_head_tokens(out["head_tokens"], length)
    if mode == "window":
        window, stride, cut = windows(kept, overrides.window_size, overrides.window_stride, overrides.window_cut)
        if not 3 <= window <= length:
            raise BadOptionsError(
                f"--window-size {window} does not fit model {record.name!r}: a window holds [CLS], [SEP] and at "
                f"least one token, and at most the model's max_seq_len ({length}) tokens",
                f"pass --window-size from 3 to {length}, or leave it out for {record.window_default}",
            )
        check_stride(stride, window)
        out.update(window_size=window, window_stride=stride, window_cut=cut)
    given = (overrides.max_text_chars, overrides.max_request_chars)
    if any(v is not None for v in given):
        limits = ReadingLimits.given(*given).reading(mode == "window")
        out.update(max_text_chars=limits.max_text_chars, max_request_chars=limits.max_request_chars)
    elif kept.max_text_chars is not None and kept.max_request_chars is not None:
        out.update(max_text_chars=kept.max_text_chars, max_request_chars=kept.max_request_chars)
    else:
        limits = ReadingLimits().reading(mode == "window")
        out.update(max_text_chars=limits.max_text_chars, max_request_chars=limits.max_request_chars)
    return out


# The record fields `_reading` decides together.
_READING = (
    "long_text", "window_size", "window_stride", "window_cut", "head_tokens", "max_text_chars", "max_request_chars",
)  # fmt: skip


def _layout(record: ModelSpec, overrides: RecordOverrides, model: ModelSpec):
    """The layout the model is served in: the override, else the record's, else the first default of its runtime
    that fits it (layouts.DEFAULT_LAYOUTS); a refusal where the one named does not fit."""
    from ernie_deploy.repository.layouts import default_layout, get_layout

    named = (overrides.layout if overrides.layout != AUTO else None) or record.layout
    if named is None:
        return default_layout(model)
    layout = get_layout(named)
    layout.check_serving_settings(model.serving)
    layout.check(model)
    return layout
