"""Recognising a PaddleNLP UIE checkpoint (paddlenlp.transformers.UIE): the class its config names, and the types it
was trained to extract where its config records them."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError
from ernie_deploy.fetch.checkpoints import Checkpoint, inspect_checkpoint

UIE_CLASS = "UIE"
# The key of a checkpoint's config.json that lists the types it was trained to extract (the offline bootstrap writes
# it; paddlenlp ignores it): export records them as the model's labels and its default schema.
TRAINED_SCHEMA = "uie_schema"
# Heads of paddlenlp's other UIE families: other encoders and inputs (ERNIE-M takes no token_type_ids, ERNIE-Layout
# takes a layout), so this export does not fit them; named in the refusal rather than called "not UIE".
OTHER_UIE = ("UIEM", "UIEX")


def inspect_uie(path: str | Path) -> Checkpoint:
    """The PaddleNLP UIE checkpoint at `path` (config.json naming UIE, model_state.pdparams, vocab.txt), else
    BadCheckpointError naming what the folder is."""
    checkpoint = inspect_checkpoint(path)  # refuses missing weights, config or vocab.txt, and a misfit vocab
    if checkpoint.kind != "dygraph":
        raise BadCheckpointError(
            f"{checkpoint.root} is a static model; the UIE export reads a PaddleNLP checkpoint",
            f"point at the folder {UIE_CLASS}.save_pretrained wrote (config.json, model_state.pdparams, vocab.txt)",
        )
    heads = checkpoint.heads
    if UIE_CLASS in heads:
        return checkpoint
    name = Path(checkpoint.config_file).name
    if not heads:
        raise BadCheckpointError(
            f"{checkpoint.root}: {name} names no model class (no architectures), so it cannot be told to be UIE",
            f'add "architectures": ["{UIE_CLASS}"] to {name} if the weights are a UIE model\'s',
        )
    other = [head for head in heads if head in OTHER_UIE]
    raise BadCheckpointError(
        f"{checkpoint.root} holds {', '.join(heads)} (its {name} says), not {UIE_CLASS}"
        + (f": {other[0]} is another encoder with other inputs, which this export does not take" if other else ""),
        f"export a checkpoint saved from paddlenlp.transformers.{UIE_CLASS}; a classifier or tagger is exported "
        "with `ernie-deploy export --task ...`",
    )


def trained_schema(config: dict) -> list[str]:
    """The types a UIE checkpoint was trained to extract, where its config.json records them (TRAINED_SCHEMA, which the
    offline bootstrap writes); none for a checkpoint that does not say."""
    types = config.get(TRAINED_SCHEMA) or []
    if not isinstance(types, list) or not all(isinstance(t, str) and t.strip() for t in types):
        raise BadCheckpointError(
            f"{TRAINED_SCHEMA} in the checkpoint's config.json is {types!r}, not a list of type names",
            f"write it as a JSON list of the types the model was trained on, or remove {TRAINED_SCHEMA}",
        )
    return types
