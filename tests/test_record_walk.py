"""A record field that a flag sets, the record carries and a step reads is four files: the record field
(core/spec.py), its typed Parameter listed in RECORDED (serving/parameters.py: its type, its default, its check), its
flag (cli/build.py, declared with the Parameter) and the step that reads the Parameter. The options, the planning, the
deployment file and the configs carry such fields by their parameters, naming none (docs/ARCHITECTURE.md, "Adding a
record field")."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace
from pathlib import Path

import pytest

from ernie_deploy.cli import build as build_cmd
from ernie_deploy.cli import build_parser, main
from ernie_deploy.cli.arguments import add_recorded
from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.pipeline.options import build_options_from_mapping, changed
from ernie_deploy.repository.configs import extraction_config
from ernie_deploy.repository.options import BuildOptions, RecordOverrides
from ernie_deploy.repository.plan import plan
from ernie_deploy.repository.resolve import resolve
from ernie_deploy.serving import parameters
from ernie_deploy.serving.parameter_types import Parameter, Whole
from ernie_deploy.serving.parameters import EXTRACTION, POSITION_PROB, RECORDED

ROOT = Path(__file__).resolve().parent.parent

# Every plain recorded field: its flag, and the step module that reads its parameter.
PLAIN = {
    "position_prob": ("--position-prob", "ernie_deploy/kinds/uie/serving.py"),
}
# What carries every such field by its parameter, naming none.
GENERIC = (
    "ernie_deploy/cli/arguments.py",
    "ernie_deploy/cli/inputs.py",
    "ernie_deploy/pipeline/options.py",
    "ernie_deploy/repository/configs.py",
    "ernie_deploy/repository/deployment.py",
    "ernie_deploy/repository/options.py",
    "ernie_deploy/repository/plan.py",
    "ernie_deploy/repository/resolve.py",
)
WHERE = "deploy.yaml: build"


def _build(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The `build` subcommand's parser of the command line `parser`."""
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subcommands.choices["build"]


def _as_triton(config) -> dict:
    """A generated config as the dict Triton hands a python model."""
    return {
        "name": config.name,
        "parameters": {k: {"string_value": v.string_value} for k, v in config.parameters.items()},
    }


def _uie(**facts) -> ModelSpec:
    return ModelSpec.new("uie", max_seq_len=64, **facts)


def test_the_plain_recorded_fields_are_the_table():
    assert set(RECORDED.names) == set(PLAIN)


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_a_plain_recorded_field_is_a_record_field_a_parameter_a_flag_and_a_reader(name):
    flag, reader = PLAIN[name]
    parameter = RECORDED[name]
    assert name in {f.name for f in fields(ModelSpec)}
    constant = next(k for k, v in vars(parameters).items() if v is parameter)
    action = next(a for a in _build(build_parser())._actions if flag in a.option_strings)
    assert action.dest == "recorded" and action.parameter is parameter
    assert f"{constant}.read(config)" in (ROOT / reader).read_text(encoding="utf-8")
    for path in GENERIC:
        text = (ROOT / path).read_text(encoding="utf-8")
        assert name not in text and constant not in text and flag not in text, f"{path} names {name}"


def test_position_prob_the_flag_wins_over_the_record_which_wins_over_the_parameters_default():
    options = build_cmd.options(build_parser().parse_args(["build", "--runtime", "python", "--position-prob", "0.4"]))
    assert options.recorded == (("position_prob", 0.4),)
    assert options == build_options_from_mapping({"runtime": "python", "position_prob": 0.4}, WHERE)
    assert changed(options) == {"runtime": "python", "position_prob": 0.4}
    (given,) = plan([_uie(position_prob=0.3)], options)
    (kept,) = plan([_uie(position_prob=0.3)], BuildOptions(runtime="python"))
    (default,) = plan([_uie()], BuildOptions(runtime="python"))
    assert (given.position_prob, kept.position_prob, default.position_prob) == (0.4, 0.3, POSITION_PROB.default)
    assert POSITION_PROB.read(_as_triton(extraction_config(given))) == 0.4
    assert resolve(given, RecordOverrides(), given.serving) == given  # resolved again: itself


def test_position_prob_is_refused_out_of_its_range_and_for_a_model_whose_steps_do_not_read_it(capsys, tmp_path):
    assert main(["build", "-r", str(tmp_path / "models"), "--position-prob", "1.5"]) == 2
    assert "error: --position-prob 1.5 is not a probability from 0 up to" in capsys.readouterr().err
    with pytest.raises(BadOptionsError, match="--position-prob half is not a probability"):
        build_cmd.options(build_parser().parse_args(["build", "--position-prob", "half"]))
    with pytest.raises(BadOptionsError, match=r"build: --position-prob 1\.5 is not a probability") as refused:
        build_options_from_mapping({"position_prob": 1.5}, WHERE)
    assert "leave it out for 0.5" in refused.value.fix
    with pytest.raises(BadOptionsError, match=r"build\.recorded: unknown option") as unknown:
        build_options_from_mapping({"recorded": 1}, WHERE)
    assert "position_prob" in unknown.value.fix
    seq_cls = ModelSpec.new("seq_cls", labels=("a", "b"))
    with pytest.raises(BadOptionsError, match="--position-prob sets what uie models read; 'ernie_seqcls' is a seq"):
        plan([seq_cls], BuildOptions(runtime="python", recorded={"position_prob": 0.4}))
    (untouched,) = plan([seq_cls], BuildOptions(runtime="python"))
    assert untouched.position_prob is None
    with pytest.raises(BadOptionsError, match="records position_prob 2, not a probability"):
        plan([_uie(position_prob=2)], BuildOptions(runtime="python"))


# A new field, added in its four places only ----------------------------------------------------------------------
SPAN_LIMIT = Parameter("span_limit", Whole(1), 7)  # 2. serving/parameters.py: its type and default


@dataclass(frozen=True)
class _Record(ModelSpec):
    span_limit: int | None = None  # 1. core/spec.py: the record field


@pytest.fixture
def span_limit():
    """SPAN_LIMIT listed in RECORDED and in the group of the step that reads it (EXTRACTION), as serving/parameters.py
    would list it; the groups as they were after."""
    groups = [(group, group.members) for group in (RECORDED, EXTRACTION)]
    for group, members in groups:
        object.__setattr__(group, "members", (*members, SPAN_LIMIT))
    try:
        yield SPAN_LIMIT
    finally:
        for group, members in groups:
            object.__setattr__(group, "members", members)


def test_a_new_field_in_its_four_files_flows_from_its_flag_to_the_step(span_limit):
    parser = build_parser()
    add_recorded(_build(parser), span_limit, "the most spans per type")  # 3. cli/build.py: its flag
    options = build_cmd.options(parser.parse_args(["build", "--runtime", "python", "--span-limit", "3"]))
    assert options == build_options_from_mapping({"runtime": "python", "span_limit": 3}, WHERE)
    (served,) = plan([_Record.new("uie", max_seq_len=64)], options)
    (default,) = plan([_Record.new("uie", max_seq_len=64)], replace(options, recorded=()))
    assert (served.span_limit, default.span_limit) == (3, 7)
    # 4. the step: reads it from its config
    assert span_limit.read(_as_triton(extraction_config(served))) == 3
    assert span_limit.read(_as_triton(extraction_config(default))) == 7
    with pytest.raises(BadOptionsError, match="--span-limit 0 is not a whole number of at least 1"):
        build_options_from_mapping({"span_limit": 0}, WHERE)
    with pytest.raises(BadOptionsError, match="--span-limit sets what uie models read"):
        plan([_Record.new("seq_cls", labels=("a", "b"))], options)
