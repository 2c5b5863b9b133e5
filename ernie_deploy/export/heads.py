"""The export's table of the kinds whose checkpoints their own code reads (Kind.own_export): the forms each takes,
the facts it records and the layer it saves (the EXPORT of kinds/<kind>/export.py), by the kind's name."""

from __future__ import annotations

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.export.kind_export import KindExport
from ernie_deploy.kinds import layer_table
from ernie_deploy.kinds.embed.export import EXPORT as EMBED
from ernie_deploy.kinds.rerank.export import EXPORT as RERANK

# A kind is one import above and one line here.
KIND_EXPORTS: dict[str, KindExport] = layer_table(
    "export",
    __name__,
    {
        "embed": EMBED,
        "rerank": RERANK,
    },
    reads=lambda kind: kind.own_export,
)
# Every option some kind's export reads (`export --pooling`, `--score`), each refused for the kinds that read none.
KIND_OPTIONS = sorted({name for export in KIND_EXPORTS.values() for name in export.options})


def export_facts(task, checkpoint, options: dict) -> dict:
    """The facts `task`'s kind records for `checkpoint` (empty for a kind the export reads by its paddlenlp class),
    with `options` (the kind options by name, None where not given) checked: one the kind does not read is refused
    by name."""
    own = KIND_EXPORTS.get(task.kind)
    reads = own.options if own else ()
    for name, value in options.items():
        if value is not None and name not in reads:
            raise_option(task, name)
    if own is None:
        return {}
    return own.facts(checkpoint, **{name: options.get(name) for name in reads})


def raise_option(task, name: str):
    readers = [kind for kind, export in KIND_EXPORTS.items() if name in export.options]
    raise BadOptionsError(
        f"--{name} is read by {' and '.join(readers)} models; {task.name} is a {task.kind} task",
        f"drop --{name}",
    )
