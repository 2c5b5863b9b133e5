"""The one schema of the serving steps' config parameters (serving.parameters): every parameter a committed config
carries is in it, no reader keeps a name or a default of its own, every parameter round-trips from writer to reader
and refuses a malformed value by name, and the defaults that follow from others are serving.windows' own."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError
from ernie_deploy.core.profile import WATCHED_MODEL_PARAMETER
from ernie_deploy.core.shadow import ShadowPlan
from ernie_deploy.core.spec import SPEC_PARAMETER, ModelSpec
from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN, SEQ_CLS, TASKS, TOKEN_CLS
from ernie_deploy.repository.layouts.base import LAYOUT_PARAMETER
from ernie_deploy.repository.served import TOKENIZER_FINGERPRINT_PARAMETER
from ernie_deploy.repository.unmade import FILE_SUFFIX
from ernie_deploy.repository.versions import SETTING_PARAMETERS
from ernie_deploy.serving import windows
from ernie_deploy.serving.limits import ReadingLimits
from ernie_deploy.serving.parameter_types import Choice, FileName, Flag, Json, Name, Plan, Probability, Task, Whole
from ernie_deploy.serving.parameters import (
    GROUPS,
    MAX_SEQ_LEN,
    ORT_SPINNING,
    SCHEMA,
    TASK,
    TOKENIZER,
    WATCH,
    WATCHED_MODEL,
    WATCHED_TASK,
    WINDOW_CUT,
    WINDOW_SIZE,
    WINDOW_STRIDE,
    Parameter,
    parameters,
)

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ernie_deploy"

# What a config may carry that no step reads: what the repository writes for itself (the model's record, the shared
# tokenizer's fingerprint, the entry's layout), and the settings a version carries for Triton's onnxruntime backend,
# which reads them itself (repository.versions: the settings no step reads).
REPOSITORY_OWN = {SPEC_PARAMETER, TOKENIZER_FINGERPRINT_PARAMETER, LAYOUT_PARAMETER}
ORT_BACKEND = SETTING_PARAMETERS - set(SCHEMA)


def _config(texts: dict[str, str], name: str = "m") -> dict:
    """A config as Triton hands it to a python model, with these parameter texts."""
    return {"name": name, "parameters": {key: {"string_value": text} for key, text in texts.items()}}


def _committed() -> dict[str, mc.ModelConfig]:
    paths = sorted((ROOT / "models").glob("*/config.pbtxt"))
    assert paths, "no committed configs under models/"
    return {p.parent.name: text_format.Parse(p.read_text(encoding="utf-8"), mc.ModelConfig()) for p in paths}


# (a) What the committed configs carry --------------------------------------------------------------------------------
def test_every_parameter_a_committed_config_carries_is_in_the_schema():
    assert ORT_BACKEND, "repository.versions names the ORT backend's settings"
    for exception in REPOSITORY_OWN | ORT_BACKEND:
        assert exception not in SCHEMA, f"{exception!r} means one thing to the repository and another to a step"
    for name, config in _committed().items():
        unknown = set(config.parameters) - set(SCHEMA) - REPOSITORY_OWN - ORT_BACKEND
        assert not unknown, f"models/{name} carries parameters no step reads and the schema lacks: {sorted(unknown)}"


def test_every_committed_value_reads_and_writes_back_to_the_same_text():
    """The schema reads what `build` wrote, and writes a value read back as the same text: a repository built through
    it keeps its configs byte for byte."""
    for name, config in _committed().items():
        for key, value in config.parameters.items():
            if key in SCHEMA:
                parameter = SCHEMA[key]
                assert parameter.text(parameter.parse(value.string_value, name)) == value.string_value, key


# (b) No reader keeps a name or a default of its own -------------------------------------------------------------------
READERS = sorted(
    [p for p in (PACKAGE / "serving").glob("*.py") if p.name not in ("parameters.py", "parameter_types.py")]
    + list(PACKAGE.glob("kinds/*/serving.py"))
)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _name_constants(tree: ast.Module) -> set[int]:
    """A module-level `X_PARAMETER = "name"`: the one home of a name the schema takes from it."""
    return {
        id(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id.endswith("_PARAMETER")
        and isinstance(node.value, ast.Constant)
    }


def _reads(node: ast.AST, calls: tuple[str, ...] = ("read", "given")) -> bool:
    """Whether `node` holds a schema read (`X.read(config)`, `X.given(config)`)."""
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in calls for n in ast.walk(node)
    )


def _default_beside(node: ast.IfExp) -> bool:
    """`<default> if X.given(config) is None else ...`, or `X.read(config) if ... else <literal>`."""
    branches = (node.body, node.orelse)
    literal = any(isinstance(b, ast.Constant) for b in branches) and any(_reads(b) for b in branches)
    return _reads(node.test, ("given",)) or literal


def _is_stride_formula(node: ast.AST) -> bool:
    """`(window - 2) // 2`: serving.windows.default_stride's rule."""
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.FloorDiv)
        and isinstance(node.right, ast.Constant)
        and node.right.value == 2
        and isinstance(node.left, ast.BinOp)
        and isinstance(node.left.op, ast.Sub)
        and isinstance(node.left.right, ast.Constant)
        and node.left.right.value == 2
    )


def _reader_problems(source: str, where: str) -> list[str]:
    tree = ast.parse(source)
    # a keyword's value names something else (a thread's name), but `parameter(config, key="...")` is looked for
    keywords = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.keyword)}
    skip = _docstrings(tree) | _name_constants(tree) | keywords
    problems = []
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            given = [*node.args, *(k.value for k in node.keywords)]
            if called == "parameter" and any(isinstance(a, ast.Constant) for a in given):
                problems.append(f"{line}: parameter(config, <literal>) reads around the schema")
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and any(map(_reads, node.values)):
            problems.append(f"{line}: `<read> or <default>` keeps a default of its own")
        elif isinstance(node, ast.IfExp) and _default_beside(node):
            problems.append(f"{line}: a default chosen beside a read keeps a default of its own")
        elif _is_stride_formula(node) and not where.endswith("serving/windows.py"):
            problems.append(f"{line}: a copy of windows.default_stride's formula")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if node.value in SCHEMA:
                problems.append(f"{line}: names parameter {node.value!r} itself (read it through serving.parameters)")
            elif node.value in ("string_value", "parameters"):
                problems.append(f"{line}: reads a config's parameters around the schema ({node.value!r})")
    return problems


def test_no_reader_keeps_a_parameter_name_or_a_default_of_its_own():
    assert any(p.name == "watch.py" for p in READERS) and any(p.parent.name == "token" for p in READERS)
    problems = [
        problem
        for path in READERS
        for problem in _reader_problems(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "source, found",
    [
        ('x = parameter(config, "max_seq_len", "128")', "reads around the schema"),
        ("x = MAX_SEQ_LEN.read(config) or 128", "keeps a default of its own"),
        ('cut = "sliding" if WINDOW_CUT.given(config) is None else WINDOW_CUT.read(config)', "default of its own"),
        ('cut = WINDOW_CUT.read(config) if windowed else "sliding"', "default of its own"),
        ('x = parameter(config, key="max_seq_len")', "reads around the schema"),
        ("stride = max(1, (window - 2) // 2)", "windows.default_stride's formula"),
        ('name = "labels_file"', "names parameter 'labels_file' itself"),
        ('name = "watched_model"', "names parameter 'watched_model' itself"),
        ('x = config["parameters"]["max_seq_len"]', "around the schema ('parameters')"),
    ],
)
def test_the_scan_catches_a_reader_that_goes_around_the_schema(source, found):
    assert any(found in problem for problem in _reader_problems(source, "x.py")), _reader_problems(source, "x.py")


def test_the_scan_lets_a_name_constant_and_a_docstring_be():
    source = '"""Reads labels_file."""\nDECODING_PARAMETER = "ner_decoding"\n\n\ndef f():\n    """max_seq_len"""\n'
    assert _reader_problems(source, "x.py") == []
    assert _reader_problems("inputs = WINDOW_INPUTS if LONG_TEXT.read(config) else MODEL_INPUTS", "x.py") == []


# (c) Round trips and refusals -----------------------------------------------------------------------------------------
PLAN = ShadowPlan(model="m", serving_version=1, candidate="m_canary", version=2)


def _values(parameter: Parameter) -> list:
    """Values of the parameter's type to write and read back."""
    kind = parameter.type
    if isinstance(kind, Whole):
        return [kind.minimum, kind.minimum + 7, 100_000]
    if isinstance(kind, Choice):
        return list(kind.values)
    return {
        FileName: ["x.json"],
        Name: ["some_model"],
        Flag: [True, False],
        Task: list(TASKS.values()),
        Plan: [PLAN, ShadowPlan(model="m", serving_version=3, candidate="m", version=4, fraction=1.0, sends="step")],
        Probability: [0.0, 0.5, 0.875],
        Json: [["人名"], {"人物": ["出生地", {"公司": "总部"}]}, "地名"],
    }[type(kind)]


def _malformed(parameter: Parameter) -> list[str]:
    """Texts a config could hold that are not of the parameter's type."""
    kind = parameter.type
    if isinstance(kind, Whole):
        return ["abc", "1.5", " 3", "+3", "1_000", str(kind.minimum - 1)]
    return {
        FileName: ["../labels.json", "a/b.json", "..", "x\\y"],
        Name: [],  # any text but the empty one, which reads as absent
        Choice: ["nope"],
        Flag: ["yes", "true"],
        Task: ["nope"],
        Plan: ["{", "[]", '{"model": "m"}', json.dumps({**json.loads(PLAN.to_json()), "fraction": 2.0})],
        Probability: ["abc", "1.0", "-0.1", "nan"],
        Json: ["[人名", "42", '[""]', "[]"],
    }[type(kind)]


def _unwritable(parameter: Parameter) -> list:
    """Values the writer refuses for the parameter."""
    kind = parameter.type
    if isinstance(kind, Whole):
        return [kind.minimum - 1, str(kind.minimum), True, 1.0]
    return {
        FileName: ["a/b.json", "", 3],
        Name: ["", 3],
        Choice: ["nope"],
        Flag: ["window", 1],
        Task: [SEQ_CLS.name],
        Plan: [PLAN.to_json()],
        Probability: [1.0, -0.5, "0.5", True],
        Json: [42, [""], {"a": 3}],
    }[type(kind)]


@pytest.mark.parametrize("parameter", SCHEMA.values(), ids=list(SCHEMA))
def test_every_parameter_round_trips_from_writer_to_reader(parameter):
    for value in _values(parameter):
        written = parameters(**{parameter.name: value})
        assert set(written) == {parameter.name} and all(isinstance(t, str) for t in written.values())
        assert parameter.read(_config(written)) == value
        for group in GROUPS:  # each step's writer writes it the same way
            if parameter.name in group:
                assert group.parameters(**{parameter.name: value}) == written


@pytest.mark.parametrize("parameter", SCHEMA.values(), ids=list(SCHEMA))
def test_a_malformed_value_is_refused_by_name_with_the_rebuild(parameter):
    for text in _malformed(parameter):
        with pytest.raises(BadRepositoryError) as refused:
            parameter.read(_config({parameter.name: text}, name="served"))
        assert f"parameter {parameter.name!r}" in refused.value.problem and "'served'" in refused.value.problem
        assert "rebuild the repository with `ernie-deploy build`" in refused.value.fix
    for value in _unwritable(parameter):
        with pytest.raises(BadOptionsError, match=f"parameter {parameter.name!r}"):
            parameter.text(value)


@pytest.mark.parametrize("parameter", SCHEMA.values(), ids=list(SCHEMA))
def test_an_absent_or_empty_parameter_is_its_default_or_refused_as_missing(parameter):
    # a derived default needs what it derives from: every entry's task, and max_seq_len's own default
    base = {TASK.name: SEQ_CLS.name} if parameter is WATCHED_TASK else {}
    for texts in (base, {**base, parameter.name: ""}):
        if parameter.required:
            with pytest.raises(BadRepositoryError, match=f"has no parameter {parameter.name!r}") as refused:
                parameter.read(_config(texts))
            assert "ernie-deploy build" in refused.value.fix
        else:
            assert parameter.read(_config(texts)) == parameter.default_in(_config(texts))


def test_a_writer_names_only_parameters_its_step_reads():
    with pytest.raises(BadOptionsError, match="reads no parameter 'nope'"):
        parameters(nope=1)
    with pytest.raises(BadOptionsError, match="the tokenizer step reads no parameter 'labels_file'"):
        TOKENIZER.parameters(labels_file="labels.json")
    assert TOKENIZER.parameters(head_tokens=None, max_seq_len=64) == {"max_seq_len": "64"}  # None: left out


def test_a_parameter_is_read_by_its_own_name_and_values_alone():
    # `monitor` is the build option that turns watching on, never a config's name for the watched model
    assert WATCHED_MODEL.read(_config({"monitor": "ernie_seqcls"})) is None
    # onnxruntime's spinning is one of SPIN_MODES, not a yes or a no
    for text in ("true", "false"):
        with pytest.raises(BadRepositoryError, match="parameter 'ort_spinning' is"):
            ORT_SPINNING.read(_config({ORT_SPINNING.name: text}))


def test_the_watched_model_has_one_name_for_writer_and_reader_and_it_is_not_the_build_option():
    from dataclasses import fields

    from ernie_deploy.repository.configs import watch_parameters
    from ernie_deploy.repository.options import BuildOptions

    assert WATCHED_MODEL.name == WATCHED_MODEL_PARAMETER
    assert WATCHED_MODEL.name not in {f.name for f in fields(BuildOptions)}
    written = watch_parameters(ModelSpec.new(TOKEN_CLS))
    assert set(written) <= set(WATCH.names)
    assert WATCHED_MODEL.read(_config(written)) == "ernie_tokencls" and WATCHED_TASK.read(_config(written)) == TOKEN_CLS


def test_file_parameters_are_the_ones_the_repository_finds_files_by():
    """repository.unmade finds the files a config names by the `_file` ending: every file parameter has it."""
    files = {p.name for p in SCHEMA.values() if isinstance(p.type, FileName)}
    assert files == {name for name in SCHEMA if name.endswith(FILE_SUFFIX)}


def test_the_limits_read_through_the_schema_and_refuse_a_malformed_one_by_name():
    written = ReadingLimits().parameters()
    assert ReadingLimits.from_config(_config({k: str(v) for k, v in written.items()})) == ReadingLimits()
    with pytest.raises(BadRepositoryError, match="parameter 'cut_max_text_chars' is 'lots'"):
        ReadingLimits.from_config(_config({**{k: str(v) for k, v in written.items()}, "cut_max_text_chars": "lots"}))
    assert set(ReadingLimits.PARAMETERS) <= set(TOKENIZER.names)


# (d) Defaults that follow from others ---------------------------------------------------------------------------------
@pytest.mark.parametrize("max_seq_len", [16, DEFAULT_MAX_SEQ_LEN, 512])
def test_the_window_defaults_are_serving_windows_own(max_seq_len):
    config = _config({MAX_SEQ_LEN.name: str(max_seq_len)})
    assert WINDOW_SIZE.read(config) == max_seq_len
    assert WINDOW_STRIDE.read(config) == windows.default_stride(max_seq_len)
    sized = _config({MAX_SEQ_LEN.name: str(max_seq_len), WINDOW_SIZE.name: "12"})
    assert WINDOW_STRIDE.read(sized) == windows.default_stride(12)
    assert WINDOW_STRIDE.read(_config({WINDOW_STRIDE.name: "3"})) == 3


def test_the_default_cut_is_the_one_windows_gives_a_model_that_recorded_none():
    """A tokenizer config without a cut reads as windows.recorded_cut says of a record without one: DEFAULT_CUT,
    the cut `build` makes unless told another."""
    assert WINDOW_CUT.read(_config({})) == windows.recorded_cut(None) == windows.DEFAULT_CUT
    assert WINDOW_CUT.read(_config({WINDOW_CUT.name: windows.DEFAULT_CUT})) == windows.DEFAULT_CUT
    assert MAX_SEQ_LEN.read(_config({})) == DEFAULT_MAX_SEQ_LEN


def test_the_tokenizer_step_reads_its_windows_through_the_schema(tmp_path):
    from ernie_deploy.serving.tokenizer import save_tokenizer
    from ernie_deploy.serving.tokenizer_steps import TokenizerStep

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    save_tokenizer(tmp_path / "vocab.txt", tmp_path / "tokenizer.json")
    written = TOKENIZER.parameters(max_seq_len=64, window_size=30, **ReadingLimits().parameters())
    step = TokenizerStep(_config(written), tmp_path)
    assert (step.max_seq_len, step.window, step.stride) == (64, 30, windows.default_stride(30))
    assert step.cut == windows.DEFAULT_CUT and step.head_tokens is None
    assert step.limits == ReadingLimits()
