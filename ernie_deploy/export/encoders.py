"""Reading an ERNIE encoder's weights as saved by paddlenlp and by the recipes built on it: the state's parameter
names and shapes (without the weights' memory until needed), the prefix its encoder sits under, and an ErnieModel or
Linear layer filled from it with every parameter accounted for. Shared by the kinds whose export reads a checkpoint
with their own code (kinds/<kind>/export.py)."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError
from ernie_deploy.fetch.checkpoints import DYGRAPH_PARAMS

# Where the encoder's parameters sit in each saved form: paddlenlp's heads and RocketQA's ErnieEncoder keep it as
# `ernie`, the neural-search recipe's SemanticIndexBase as `ptm`; a plain ErnieModel has no prefix.
ENCODER_PREFIXES = ("ernie.", "ptm.")
# A parameter every ERNIE encoder has, by which its prefix is found.
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


def read_state(root: str | Path) -> dict:
    """The checkpoint's saved parameters, name -> numpy array (model_state.pdparams)."""
    import paddle

    path = Path(root) / DYGRAPH_PARAMS
    try:
        state = paddle.load(str(path), return_numpy=True)
    except Exception as exc:  # paddle's own errors for a file it cannot read: named, with the file
        raise BadCheckpointError(
            f"{path} cannot be read as paddle parameters: {str(exc).strip()[:300]}",
            "save the model with paddle.save(model.state_dict(), ...) or paddlenlp's save_pretrained",
        ) from None
    if not isinstance(state, dict):
        raise BadCheckpointError(f"{path} holds no parameter table", "save a model's state_dict, not a tensor")
    return state


def encoder_prefix(state: dict, path: str | Path) -> str:
    """The prefix the encoder's parameters carry ("" for a plain ErnieModel), or a refusal naming what was found."""
    for prefix in ("", *ENCODER_PREFIXES):
        if prefix + WORD_EMBEDDINGS in state:
            return prefix
    shown = ", ".join(sorted(state)[:6])
    raise BadCheckpointError(
        f"{path} holds no ERNIE encoder (no {WORD_EMBEDDINGS}, bare or under {' or '.join(ENCODER_PREFIXES)}; it "
        f"holds {shown}{', ...' if len(state) > 6 else ''})",
        "convert an ERNIE checkpoint: paddlenlp's save_pretrained of ErnieModel, ErnieEncoder or a head over them",
    )


def under(state: dict, prefix: str) -> dict:
    """The parameters under `prefix`, the prefix taken off."""
    return {name[len(prefix) :]: value for name, value in state.items() if name.startswith(prefix)}


def fill(layer, state: dict, what: str) -> None:
    """Set `layer`'s parameters from `state` (name -> array), refusing a missing, extra or misshapen one: a layer
    left partly at its initial weights would convert, pass parity with itself and answer nonsense."""
    import numpy as np

    own = layer.state_dict()
    missing = sorted(set(own) - set(state))
    extra = sorted(set(state) - set(own))
    wrong = [name for name in own if name in state and tuple(own[name].shape) != tuple(np.shape(state[name]))]
    if missing or extra or wrong:
        parts = [
            f"missing {', '.join(missing[:4])}" if missing else "",
            f"unexpected {', '.join(extra[:4])}" if extra else "",
            f"shaped otherwise {', '.join(wrong[:4])}" if wrong else "",
        ]
        raise BadCheckpointError(
            f"the weights of {what} do not fit its configuration: {'; '.join(p for p in parts if p)}",
            "convert the checkpoint with the config.json it was trained with (its hidden size, layers and vocabulary)",
        )
    layer.set_state_dict({name: state[name] for name in own})


def ernie_model(root: str | Path, state: dict):
    """An ErnieModel of the checkpoint's config.json, filled from `state` (its parameters, prefix taken off), in
    eval mode."""
    from paddlenlp.transformers import ErnieConfig, ErnieModel

    model = ErnieModel(ErnieConfig.from_pretrained(str(root)))
    fill(model, state, f"the encoder of {root}")
    model.eval()
    return model


def linear(state: dict, prefix: str, what: str):
    """A Linear layer from `prefix`weight and `prefix`bias ([in, out] and [out], paddle's layout)."""
    import paddle

    weight = state[prefix + "weight"]
    layer = paddle.nn.Linear(int(weight.shape[0]), int(weight.shape[1]))
    fill(layer, under({k: v for k, v in state.items() if k.startswith(prefix)}, prefix), what)
    layer.eval()
    return layer
