"""A UIE schema: what to extract, in Taskflow's forms, read into a tree and held to its limits.

A schema is a type name, a list of type names and dicts, or a dict from a type name to its relation names (a name or
a list of the same forms), to any depth. Each top-level type is asked of every text; each relation of every span its
parent found (serving.spans).

Standard library and core only: the config schema (serving.parameters) reads it, inside Triton's python backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ernie_deploy.core.errors import BadRequest

DEFAULT_POSITION_PROB = 0.5  # Taskflow's position_prob
DEFAULT_MAX_SEQ_LEN = 512  # Taskflow's max_seq_len for UIE
# At most this many names (types and relations, at every depth) in one schema. Each top-level type costs a model row
# per text window, and each relation a row per distinct span its parent found, so a request's cost grows with the
# schema as much as with its texts; Taskflow's published schemas have under 20 names, and 64 leaves room for a rich
# one while keeping a single request from fanning out into thousands of rows.
MAX_SCHEMA_NAMES = 64
_SCHEMA_FIX = (
    "send a type name, a list of them, or a dict from a type name to its relation names, "
    'e.g. ["人物", {"公司": ["总部"]}]'
)
# The most model rows (texts x top-level types x windows) a request's first stage may take: refused past it, by name.
# Later stages are bounded by it too: a relation is asked of each span found, and a row holds at most one span per
# token, so their rows grow with the first stage's tokens and the schema's names (MAX_SCHEMA_NAMES). 512 rows are as
# many windows as a token model reads in about 16,000 characters, half the windows reading's request limit
# (serving.limits), since a UIE row carries its prompt as well as its text.
MAX_REQUEST_ROWS = 512


@dataclass(frozen=True)
class SchemaNode:
    """One name of a schema: a top-level type (entity) or a relation of its parent's spans; children: the
    relations asked of the spans this node finds."""

    name: str
    children: tuple[SchemaNode, ...] = ()


def _nodes(items: list, where: str) -> tuple[SchemaNode, ...]:
    """The nodes of one level: each item a name, or a dict name -> a name or a list of items (Taskflow's forms)."""
    nodes: list[SchemaNode] = []
    for item in items:
        if isinstance(item, str):
            nodes.append(SchemaNode(_name(item, where)))
        elif isinstance(item, dict):
            for key, value in item.items():
                name = _name(key, where)
                if isinstance(value, str):
                    value = [value]
                if not isinstance(value, list):
                    raise BadRequest(
                        f"schema {where}: the relations of {name!r} are {type(value).__name__}, not a list or a name",
                        _SCHEMA_FIX,
                    )
                nodes.append(SchemaNode(name, _nodes(value, f"under {name!r}")))
        else:
            raise BadRequest(f"schema {where}: an item is {type(item).__name__}, not a name or a dict", _SCHEMA_FIX)
    names = [node.name for node in nodes]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        # Taskflow would run such a name twice and answer its spans twice.
        raise BadRequest(f"schema {where}: {', '.join(map(repr, repeated))} named twice", "name each once")
    return tuple(nodes)


def _name(name, where: str) -> str:
    if not isinstance(name, str):
        raise BadRequest(f"schema {where}: a name is {type(name).__name__}, not a string", _SCHEMA_FIX)
    if not name.strip():
        raise BadRequest(f"schema {where}: an empty type or relation name", "give every type and relation a name")
    return name


def _count(nodes: Sequence[SchemaNode]) -> int:
    return sum(1 + _count(node.children) for node in nodes)


def schema_names(nodes: Sequence[SchemaNode]) -> list[str]:
    """Every name of a parsed schema, each once, types before their relations (depth first, in order)."""
    names: dict[str, None] = {}
    for node in nodes:
        names.setdefault(node.name, None)
        names.update(dict.fromkeys(schema_names(node.children)))
    return list(names)


def parse_schema(schema) -> tuple[SchemaNode, ...]:
    """Taskflow's schema forms as a tree: a name; a list of names and dicts; a dict name -> a name or a list of the
    same forms, to any depth. Refused (BadRequest): any other value, an empty name, a name twice among siblings, an
    empty schema, more than MAX_SCHEMA_NAMES names in all."""
    if isinstance(schema, (str, dict)):
        schema = [schema]
    if not isinstance(schema, list):
        raise BadRequest(f"the schema is {type(schema).__name__}, not a name, list or dict", _SCHEMA_FIX)
    nodes = _nodes(schema, "at the top")
    if not nodes:
        raise BadRequest("the schema names no type", _SCHEMA_FIX)
    if (total := _count(nodes)) > MAX_SCHEMA_NAMES:
        raise BadRequest(
            f"the schema names {total} types and relations, more than the {MAX_SCHEMA_NAMES} one request may ask",
            "split the schema over several requests",
        )
    return nodes
