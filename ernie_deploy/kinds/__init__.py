"""Task kinds, one subpackage each: everything in which a label per text, a label per token and a set of labels per
text differ lives under ernie_deploy/kinds/<kind>/.

A kind's `__init__.py` holds its facts (KIND, a base.Kind); beside it, one module per layer that treats the kind
its own way, named after that layer (`serving.py`, `client.py`, `evaluate.py`, `train.py`, `repository.py`)
and held to that layer's import rules. Each layer builds its table of per-kind behaviour here, with
`table`, from the kinds found by walking this package: adding a kind is adding a subpackage.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from importlib import import_module
from importlib.util import find_spec
from types import ModuleType
from typing import Any

from ernie_deploy.core.errors import BadOptionsError, InstallError
from ernie_deploy.kinds.base import Kind


def discover() -> dict[str, Kind]:
    """Every kind subpackage of this package, by name, from the package's path as it is now."""
    found = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not module.ispkg:
            continue
        kind = getattr(import_module(f"{__name__}.{module.name}"), "KIND", None)
        if not isinstance(kind, Kind):
            raise InstallError(
                f"ernie_deploy/kinds/{module.name} has no KIND record",
                f"define KIND = Kind(name={module.name!r}, ...) in its __init__.py (ernie_deploy.kinds.base.Kind)",
            )
        if kind.name != module.name:
            raise InstallError(
                f"ernie_deploy/kinds/{module.name} defines kind {kind.name!r}",
                f"name the kind after its folder: Kind(name={module.name!r}, ...)",
            )
        found[kind.name] = kind
    return found


KINDS: dict[str, Kind] = discover()


def get_kind(name: str) -> Kind:
    if name not in KINDS:
        raise BadOptionsError(f"unknown task kind {name!r}", f"use one of: {', '.join(sorted(KINDS))}")
    return KINDS[name]


def layer(kind: Kind, name: str, *, optional: bool = False) -> ModuleType | None:
    """The module of `kind` for layer `name` (ernie_deploy.kinds.<kind>.<name>); with `optional`, None where the
    kind has none (it does without that layer's behaviour)."""
    module = f"{__name__}.{kind.name}.{name}"
    if find_spec(module) is None:
        if optional:
            return None
        raise InstallError(
            f"kind {kind.name!r} has no {name} module ({module})",
            f"add ernie_deploy/kinds/{kind.name}/{name}.py with what the {name} layer reads of each kind",
        )
    return import_module(module)


def table(
    name: str,
    attribute: str,
    *,
    key: Callable[[Kind], str] = lambda kind: kind.name,
    optional: bool = False,
    kinds: dict[str, Kind] | None = None,
) -> dict[str, Any]:
    """One layer's per-kind table: `attribute` of each kind's `name` module, under `key(kind)` (the kind's name by
    default). With `optional`, kinds without that module are left out. kinds: those of this package by default."""
    out = {}
    for kind in (KINDS if kinds is None else kinds).values():
        module = layer(kind, name, optional=optional)
        if module is None:
            continue
        if not hasattr(module, attribute):
            raise InstallError(
                f"{module.__name__} has no {attribute}", f"define {attribute} there: the {name} layer reads it"
            )
        out[key(kind)] = getattr(module, attribute)
    return out
