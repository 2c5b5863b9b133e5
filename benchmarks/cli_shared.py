"""What the benchmark subcommands share (benchmarks/cli.py and benchmarks/cli_comparisons.py): the output folder and
the research configuration read from the flags."""

from __future__ import annotations

from pathlib import Path

from benchmarks.config import ResearchConfig
from ernie_deploy.cli.bench import config_from_args
from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.paths import artifacts_dir
from ernie_deploy.fetch.shapes import get_shape


def sizes_of(text: str) -> tuple[str, ...]:

    if text.strip() == "none":
        return ()
    return tuple(get_shape(size.strip()).name for size in text.split(",") if size.strip())


def add_out(p, what: str) -> None:
    p.add_argument("--out", help=f"folder for {what} (default docs/; --smoke: artifacts/bench-smoke/)")


def out_folder(args) -> Path:
    return Path(args.out or (artifacts_dir() / "bench-smoke" if args.smoke else "docs"))


def research_config(args) -> ResearchConfig:
    """ResearchConfig from the flags: `ernie-deploy bench`'s, then the sizes and the rows left out."""
    changes = {}
    sizes = getattr(args, "sizes", None)
    if sizes:
        changes["sizes"] = sizes_of(sizes)
    if args.repository:
        if changes.get("sizes"):
            raise BadOptionsError(
                "--repository serves a repository built without the size models", "drop --sizes, or --repository"
            )
        changes["sizes"] = ()  # a given repository holds only its own models
    for flag, field in (("no_paddle", "paddle"), ("no_classic", "classic"), ("no_ensemble", "ensemble")):
        if getattr(args, flag, False):
            changes[field] = False
    for flag, field in (("no_int8", "int8"), ("no_peer", "peer")):
        if getattr(args, flag, False):
            changes[field] = False
    return config_from_args(args, ResearchConfig, **changes)
