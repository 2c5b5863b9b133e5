"""The grammar every command shares: a repository is `--repository DIR` (`-r`), a model is `--model NAME`, a task
kind is `--task`. A command adds these flags through the functions here, never by hand, so that they read alike
everywhere (tests/test_cli_grammar.py walks every command to hold them to it).

The spellings of the release before keep working for one more release: a positional repository, `--name` for a
model, a positional model, `manifests --name` for the Kubernetes objects' name and `soak --rollout NAME`. Each one
prints a line on stderr that names its replacement, then fills the same option as the new spelling, so a command
cannot tell which spelling it was given. Both spellings on one command line act as one flag given twice: the last
one counts, and a repeatable flag keeps each.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.kinds.embed import POOLINGS
from ernie_deploy.kinds.rerank import SCORES
from ernie_deploy.repository.options import Unread, recorded_flag
from ernie_deploy.serving.parameter_types import Parameter

REPOSITORY = "models"  # the repository a command reads or writes when none is named
MODEL_HELP = "the model's name: its artifacts' folder and the name clients call it by (default: the task's demo model)"


def exact_parser(**kwargs) -> argparse.ArgumentParser:
    """A subcommand's parser, for `add_subparsers(parser_class=exact_parser)`: like every parser of the project it
    takes a flag written whole only (allow_abbrev=False), so that `--task` is never read from `--ta` and a command
    line that parses today cannot stop parsing, or change meaning, the day a second flag shares its start."""
    return argparse.ArgumentParser(allow_abbrev=False, **kwargs)


def deprecated(parser: argparse.ArgumentParser, old: str, new: str) -> None:
    """The one line an old spelling prints: what was written, and what to write instead."""
    print(
        f"{parser.prog}: deprecated: {old}; write {new} (the old spelling goes away in the next release)",
        file=sys.stderr,
    )


class _OldSpelling(argparse.Action):
    """An earlier release's spelling of an option (`--name`) or a positional argument: it prints the deprecation
    line naming `new`, then stores its value where the new spelling does (appends, for a repeatable one). It is left
    out of --help and of the usage line; its default is argparse.SUPPRESS, so the new spelling's default stands."""

    def __init__(self, option_strings, dest, *, new: str, append: bool = False, **kwargs):
        self.new, self.append = new, append
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        value = shlex.quote(values)
        old = f"{option_string} {value}" if option_string else f"the {self.dest} as a positional argument ({value})"
        deprecated(parser, old, f"{self.new} {value}")
        if self.append:
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, values)


def add_repository(
    p: argparse.ArgumentParser, help: str, *, default: str | None = REPOSITORY, positional: bool = False
) -> None:
    """`--repository DIR` (`-r`), the repository the command reads or writes. `positional`: the command took it as
    a positional argument before, which still parses, with the deprecation line."""
    shown = f" (default: {default})" if default is not None else ""
    p.add_argument("-r", "--repository", default=default, metavar="DIR", help=help + shown)
    if positional:
        p.add_argument("repository", nargs="?", action=_OldSpelling, new="--repository")


def add_model(
    p: argparse.ArgumentParser,
    help: str = MODEL_HELP,
    *,
    repeat: bool = False,
    old_name: bool = True,
    positional: bool = False,
) -> None:
    """`--model NAME`, the model the command works on (`repeat`: one or more, each with its own --model). The old
    spellings it still parses: `--name NAME` (`old_name`), and the model as a positional argument (`positional`),
    which made the model required; a command that needs one checks with `required_model`."""
    p.add_argument("--model", action="append" if repeat else "store", metavar="NAME", help=help)
    if old_name:
        p.add_argument("--name", dest="model", action=_OldSpelling, new="--model", append=repeat)
    if positional:
        p.add_argument("model", nargs="?", action=_OldSpelling, new="--model")


def required_model(args: argparse.Namespace) -> str:
    """The model a command that works on exactly one served model was given."""

    if not args.model:
        raise BadOptionsError(f"`ernie-deploy {args.command}` works on one served model", "name it: --model NAME")
    return args.model


def add_renamed(p: argparse.ArgumentParser, old: str, new: str, **kwargs) -> None:
    """Flag `new`, which replaces flag `old` (renamed because `old` meant something else than it does in the other
    commands): `old` still parses, with the deprecation line."""
    p.add_argument(new, **kwargs)
    dest = new.lstrip("-").replace("-", "_")
    p.add_argument(old, dest=dest, action=_OldSpelling, new=new)


class _SwitchTakingModel(argparse.Action):
    """A switch that took the model as its value before (`soak --rollout NAME`); now the switch stands alone and the
    model is --model. Given a value, it prints the deprecation line and sets both."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs="?", const=True, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if values is not True:
            value = shlex.quote(values)
            deprecated(parser, f"{option_string} {value}", f"{option_string} --model {value}")
            namespace.model = values
        setattr(namespace, self.dest, True)


class _SwitchFormatter(argparse.HelpFormatter):
    """Help that shows a _SwitchTakingModel as the switch it is now: it takes a value only for its old spelling."""

    def _format_actions_usage(self, actions, groups):
        return super()._format_actions_usage([_as_switch(a) for a in actions], groups)

    def _format_action_invocation(self, action):
        return super()._format_action_invocation(_as_switch(action))


def _as_switch(action: argparse.Action) -> argparse.Action:
    if not isinstance(action, _SwitchTakingModel):
        return action
    return argparse._StoreTrueAction(action.option_strings, action.dest, help=action.help)


def add_switch_taking_model(p: argparse.ArgumentParser, flag: str, help: str) -> None:
    """Switch `flag`, which works on the model named by --model; `flag NAME`, its old spelling, still parses."""
    p.add_argument(flag, action=_SwitchTakingModel, help=help)
    p.formatter_class = _SwitchFormatter


class _Recorded(argparse.Action):
    """A flag that sets a recorded parameter (serving.parameters.RECORDED): its text, read by the parameter's type,
    joins the `recorded` mapping under the parameter's name (BuildOptions.recorded); a text the type does not read
    joins it as given (repository.options.Unread), which the options refuse by the flag's name as they are made."""

    def __init__(self, option_strings, dest, parameter: Parameter, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.parameter = parameter

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            value = self.parameter.type.parse(values)
        except ValueError:
            value = Unread(values)
        # A new mapping each time: the namespace's default is never changed in place.
        setattr(namespace, self.dest, {**(getattr(namespace, self.dest, None) or {}), self.parameter.name: value})


def add_recorded(p: argparse.ArgumentParser, parameter: Parameter, help: str) -> None:
    """The flag of a record field a build sets as given: named after `parameter`, its value read by the parameter's
    type, into the options' `recorded` (cli.inputs.options_from fills it as any field)."""
    p.add_argument(
        recorded_flag(parameter), dest="recorded", action=_Recorded, parameter=parameter,
        metavar=parameter.name.upper(), help=help,
    )  # fmt: skip


POOLING_HELP = (
    "embed models: how a plain ErnieModel's vector is pooled, recorded with the model: cls (the default: the [CLS] "
    "hidden state), pooled (the pooler's output) or mean (the mean of the real tokens); RocketQA's ErnieEncoder and "
    "the neural-search recipe's state are read as their own code reads them"
)
SCORE_HELP = (
    "rerank models: what `score` answers, recorded with the model: probability (the default: P(relevant), "
    "ErnieCrossEncoder.matching's) or raw (the logit, its log-odds)"
)


def add_kind_exports(p) -> None:
    """The export flags a kind's own export reads (export.heads.KIND_OPTIONS): --pooling and --score."""
    p.add_argument("--pooling", choices=POOLINGS, help=POOLING_HELP)
    p.add_argument("--score", choices=SCORES, help=SCORE_HELP)
