"""Task kinds, one subpackage each: everything in which a label per text, a label per token, a set of labels per
text, extracted spans, a vector per text and a score per pair differ lives under ernie_deploy/kinds/<kind>/.

A kind's `__init__.py` holds its facts (KIND, a base.Kind), and this module registers it by name (KINDS). Beside
the facts, one module per layer that treats the kind its own way, named after that layer (`serving.py`, `client.py`,
`evaluate.py`, `gateway.py`, `train.py`, `repository.py`), held to that layer's import rules and holding the one object
the layer reads. Each layer lists those objects in one table of its own, an import and an entry per kind, checked here
to cover exactly the kinds (`layer_table`). Adding a kind is its folder, its name below (in the import and in KINDS),
and its import and entry in each layer table it has code for.

This module counts as core: it imports the kinds' facts and nothing above them.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

from ernie_deploy.core.errors import BadOptionsError, InstallError
from ernie_deploy.kinds import (
    embed,
    multi_label,
    rerank,
    sequence,
    token,
    uie,
)
from ernie_deploy.kinds.base import Kind

T = TypeVar("T")


def registered(*packages: ModuleType) -> dict[str, Kind]:
    """The kinds of `packages` (the kinds' facts packages) by name, each checked to hold its record under its folder's
    name."""
    found = {}
    for package in packages:
        folder = package.__name__.rpartition(".")[2]
        kind = getattr(package, "KIND", None)
        if not isinstance(kind, Kind):
            raise InstallError(
                f"ernie_deploy/kinds/{folder} has no KIND record",
                f"define KIND = Kind(name={folder!r}, ...) in its __init__.py (ernie_deploy.kinds.base.Kind)",
            )
        if kind.name != folder:
            raise InstallError(
                f"ernie_deploy/kinds/{folder} defines kind {kind.name!r}",
                f"name the kind after its folder: Kind(name={folder!r}, ...)",
            )
        found[kind.name] = kind
    return found


# Every kind, by name: one package per kind, in the order of their names.
KINDS: dict[str, Kind] = registered(
    embed,
    multi_label,
    rerank,
    sequence,
    token,
    uie,
)


def get_kind(name: str) -> Kind:
    if name not in KINDS:
        raise BadOptionsError(f"unknown task kind {name!r}", f"use one of: {', '.join(sorted(KINDS))}")
    return KINDS[name]


def layer_table(
    layer: str,
    where: str,
    table: dict[str, T],
    *,
    reads: Callable[[Kind], bool] = lambda kind: True,
    kinds: dict[str, Kind] | None = None,
) -> dict[str, T]:
    """`table` (one layer's object of each kind, by the kind's name, as the layer module `where` lists them), checked
    to cover exactly the kinds the layer `reads` (every kind by default), in the order of KINDS; an InstallError
    names the kind and the file to edit. kinds: KINDS by default."""
    kinds = KINDS if kinds is None else kinds
    path = f"{where.replace('.', '/')}.py"
    wanted = [name for name, kind in kinds.items() if reads(kind)]
    for name in wanted:
        if name not in table:
            raise InstallError(
                f"the {layer} layer's table ({path}) has no entry for kind {name!r}",
                f"give ernie_deploy/kinds/{name}/{layer}.py what the {layer} layer reads of each kind (the other "
                f"kinds' {layer}.py show it), and import it by name in {path}",
            )
    for name in table:
        if name not in kinds:
            raise InstallError(
                f"{path} lists kind {name!r}, which is not registered",
                f"register it in ernie_deploy/kinds/__init__.py (an import of ernie_deploy.kinds.{name}), or remove "
                f"its line from {path}",
            )
        if name not in wanted:
            raise InstallError(
                f"{path} lists kind {name!r}, whose record gives the {layer} layer nothing to read there",
                f"remove its line from {path}, or set the fact in ernie_deploy/kinds/{name}/__init__.py that the "
                "table's comment names",
            )
    return {name: table[name] for name in wanted}
