"""Every command speaks one grammar: the repository is `--repository DIR` (`-r`), a model is `--model NAME`, a task
kind is `--task`; the spellings of the release before still parse, print one deprecation line naming the new
spelling, and give the options the new spelling gives. Fast: argparse only, no server, no model."""

from __future__ import annotations

import argparse

import pytest

from ernie_deploy.cli import build_parser, main
from ernie_deploy.cli.arguments import _OldSpelling, _SwitchTakingModel
from ernie_deploy.repository.options import BuildOptions

# The commands that read or write a model repository. The others (fetch-data, fetch, export, convert, eval,
# dashboard, probe, long-texts) work on artifacts or on a running server, never on a repository folder.
REPOSITORY_COMMANDS = {
    "add", "apply", "bench", "build", "check", "gateway", "manifests", "rollback", "rollout", "serve", "soak", "stats",
    "tune",
}  # fmt: skip
# long-texts runs nothing any more (it moved to benchmarks/): it parses its former flags, hidden, only to name the
# command that replaced them.
EXEMPT = {"long-texts"}

# Each old spelling (the command, and the old flag or the positional argument's name), a command line with it, the
# same command line in the new spelling, and what the deprecation line must say to write instead.
OLD_AND_NEW = [
    (("serve", "repository"), ["serve", "repo"], ["serve", "--repository", "repo"], "--repository repo"),
    (("check", "repository"), ["check", "repo"], ["check", "-r", "repo"], "--repository repo"),
    (
        ("soak", "repository"),
        ["soak", "repo", "--requests", "5"],
        ["soak", "--repository", "repo", "--requests", "5"],
        "--repository repo",
    ),
    (("manifests", "repository"), ["manifests", "repo"], ["manifests", "--repository", "repo"], "--repository repo"),
    (("manifests", "--name"), ["manifests", "--name", "nlp"], ["manifests", "--app-name", "nlp"], "--app-name nlp"),
    (
        ("build", "--name"),
        ["build", "--name", "a", "--name", "b"],
        ["build", "--model", "a", "--model", "b"],
        "--model a",
    ),
    (
        ("build", "--name"),
        ["build", "--name", "a", "--model", "b"],
        ["build", "--model", "a", "--model", "b"],
        "--model a",
    ),
    (("bench", "--name"), ["bench", "--name", "news"], ["bench", "--model", "news"], "--model news"),
    (
        ("fetch", "--name"),
        ["fetch", "--name", "news", "--bootstrap"],
        ["fetch", "--model", "news", "--bootstrap"],
        "--model news",
    ),
    (("export", "--name"), ["export", "--name", "news"], ["export", "--model", "news"], "--model news"),
    (("convert", "--name"), ["convert", "--name", "news"], ["convert", "--model", "news"], "--model news"),
    (("eval", "--name"), ["eval", "--name", "news"], ["eval", "--model", "news"], "--model news"),
    (
        ("rollout", "model"),
        ["rollout", "news", "--to", "2"],
        ["rollout", "--model", "news", "--to", "2"],
        "--model news",
    ),
    (("rollback", "model"), ["rollback", "news"], ["rollback", "--model", "news"], "--model news"),
    (
        ("tune", "model"),
        ["tune", "news", "-r", "repo"],
        ["tune", "--model", "news", "--repository", "repo"],
        "--model news",
    ),
    (
        ("soak", "--rollout"),
        ["soak", "repo", "--rollout", "news", "--to", "2"],
        ["soak", "--repository", "repo", "--rollout", "--model", "news", "--to", "2"],
        "--rollout --model news",
    ),
]


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _old(action: argparse.Action) -> bool:
    """Whether `action` is an old spelling (hidden from --help, parsed with the deprecation line)."""
    return isinstance(action, _OldSpelling)


def test_every_command_that_takes_a_repository_takes_it_as_the_repository_flag():
    commands = _commands()
    assert REPOSITORY_COMMANDS <= set(commands)
    for name, parser in commands.items():
        flags = [a for a in parser._actions if a.dest == "repository" and a.option_strings]
        if name not in REPOSITORY_COMMANDS:
            assert not flags, f"{name} takes a repository: list it in REPOSITORY_COMMANDS"
            continue
        assert len(flags) == 1, f"{name}: no --repository flag"
        if name not in EXEMPT:
            assert flags[0].option_strings == ["-r", "--repository"], name
            assert flags[0].metavar == "DIR", name


def test_no_command_takes_a_positional_repository_or_model_but_as_an_old_spelling():
    for name, parser in _commands().items():
        for action in parser._actions:
            if action.option_strings:
                continue
            if action.dest in ("repository", "model", "name"):
                assert _old(action) and action.help is argparse.SUPPRESS, f"{name}: positional {action.dest}"


def test_a_model_is_the_model_flag():
    for name, parser in _commands().items():
        if name in EXEMPT:
            continue
        shown = [a for a in parser._actions if a.option_strings and not _old(a)]
        for action in shown:
            # the one flag that names a model is --model; --name is gone from every command
            assert "--name" not in action.option_strings, f"{name}: --name is shown"
            if action.dest == "model":
                assert action.option_strings == ["--model"] and action.metavar == "NAME", name
        tasks = [a for a in shown if a.dest == "task"]
        assert all(a.option_strings == ["--task"] for a in tasks), name


def test_every_old_spelling_has_its_row_below():
    """Each old spelling a parser holds is parsed and compared with its new spelling in OLD_AND_NEW."""
    found = set()
    for name, parser in _commands().items():
        for action in parser._actions:
            if _old(action):
                found.add((name, action.option_strings[0] if action.option_strings else action.dest))
            elif isinstance(action, _SwitchTakingModel):
                found.add((name, action.option_strings[0]))
    assert found == {spelling for spelling, *_ in OLD_AND_NEW}


@pytest.mark.parametrize(
    ("spelling", "old", "new", "named"), OLD_AND_NEW, ids=[" ".join(old) for _, old, _, _ in OLD_AND_NEW]
)
def test_an_old_spelling_parses_to_the_new_ones_options_with_one_line_naming_it(spelling, old, new, named, capsys):
    parsed_new = build_parser().parse_args(new)
    assert capsys.readouterr().err == ""
    parsed_old = build_parser().parse_args(old)
    lines = capsys.readouterr().err.splitlines()
    assert parsed_old == parsed_new
    assert lines and all(line.startswith(f"ernie-deploy {old[0]}: deprecated: ") for line in lines)
    assert any(f"write {named} " in line for line in lines), lines


def test_a_command_on_one_served_model_needs_it(capsys):
    assert main(["rollout", "--to", "2"]) == 2
    assert "--model NAME" in capsys.readouterr().err


def test_build_with_no_flags_is_the_default_build_options():
    parser = _commands()["build"]
    fields = set(BuildOptions.__dataclass_fields__)
    # every flag that fills a field leaves the default to the field: none is repeated by hand here
    for action in parser._actions:
        if action.dest in fields:
            assert action.default is None, f"build {action.option_strings[0]} repeats a default"
    from ernie_deploy.cli import build as build_cmd

    assert build_cmd.options(build_parser().parse_args(["build"])) == BuildOptions()
    assert BuildOptions().runtime == BuildOptions().layout == "auto"  # settled per machine when the build runs


def _parsers(parser: argparse.ArgumentParser, name: str):
    """(name, parser) of `parser` and of every subcommand under it."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _parsers(child, f"{name} {sub}")


def test_a_flag_is_written_whole_an_abbreviation_is_refused(capsys):
    """No parser takes an abbreviated flag (allow_abbrev=False): `--ta` is never read as `--task`, so a command line
    that parses today cannot change meaning or stop parsing the day a second flag shares its start."""
    from benchmarks.cli import build_parser as benchmarks_parser

    for name, parser in [*_parsers(build_parser(), "ernie-deploy"), *_parsers(benchmarks_parser(), "benchmarks")]:
        assert parser.allow_abbrev is False, name
    assert build_parser().parse_args(["build", "--task", "seq_cls", "--layout=ensemble"]).layout == "ensemble"
    for argv, abbreviation in [
        (["build", "--ta", "seq_cls"], "--ta"),
        (["build", "--layout=ensemble", "--fus"], "--fus"),
        (["serve", "--repo", "models"], "--repo"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(argv)
        assert exit_.value.code == 2
        assert f"unrecognized arguments: {abbreviation}" in capsys.readouterr().err, argv
    with pytest.raises(SystemExit):
        benchmarks_parser().parse_args(["levers", "--tas", "seq_cls"])
    assert "unrecognized arguments: --tas" in capsys.readouterr().err


def test_every_parser_of_the_project_is_made_to_refuse_abbreviations():
    """Every argparse.ArgumentParser(...) of the package, the benchmarks and the clients passes allow_abbrev=False,
    and every subcommand's parser is made with it too: by add_subparsers(parser_class=exact_parser), or by each
    add_parser(...) of a file whose add_subparsers has no parser_class."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = [p for folder in ("ernie_deploy", "benchmarks", "clients") for p in sorted((root / folder).rglob("*.py"))]

    def keywords(call: ast.Call) -> dict[str, ast.expr]:
        return {k.arg: k.value for k in call.keywords if k.arg}

    def refuses(call: ast.Call) -> bool:
        value = keywords(call).get("allow_abbrev")
        return isinstance(value, ast.Constant) and value.value is False

    seen = 0
    for path in files:
        calls = [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Call)]
        named = [(c, c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")) for c in calls]
        where = path.relative_to(root)
        for call, name in named:
            if name == "ArgumentParser":
                seen += 1
                assert refuses(call), f"{where}:{call.lineno}: ArgumentParser(...) without allow_abbrev=False"
        if any(name == "add_subparsers" and "parser_class" not in keywords(call) for call, name in named):
            for call, name in named:
                if name == "add_parser":
                    assert refuses(call), f"{where}:{call.lineno}: add_parser(...) without allow_abbrev=False"
    assert seen >= 10
