"""Running one parsed command the way `ernie-deploy` runs it: a library error is printed under the command's name
and becomes exit status 2, Ctrl-C becomes 130. Shared by the entry point and by `apply`, which runs other commands."""

from __future__ import annotations

import argparse
import sys

from ernie_deploy.core.errors import ErnieDeployError


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command (`args.func`); its exit status."""
    try:
        args.func(args)
    except ErnieDeployError as exc:
        print(f"ernie-deploy {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
