"""Checkpoints in the real shapes of ERNIE 3.0, with random weights, for timing: what a model of each size costs
does not depend on what it learned, and model hubs are out of reach here.

The shapes are paddlenlp's own configurations (ERNIE_PRETRAINED_INIT_CONFIGURATION); `tiny` is a 2-layer shape
for smoke runs. The vocabulary is a trained model's (the demo model of the same task), filled up to the size's
vocab_size with unused tokens, so the test texts tokenize to exactly the lengths the demo model sees: real
lengths, because a model's cost grows with them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.tasks import TaskSpec


@dataclass(frozen=True)
class Shape:
    name: str
    source: str | None  # the paddlenlp configuration it is read from; None: `config` is the whole shape
    config: tuple = ()  # (key, value) pairs over the source's


SHAPES = {
    "tiny": Shape(
        "tiny",
        None,
        (
            ("hidden_size", 64),
            ("num_hidden_layers", 2),
            ("num_attention_heads", 2),
            ("intermediate_size", 128),
            ("max_position_embeddings", 512),
            ("type_vocab_size", 4),
            ("vocab_size", 40000),
            ("hidden_act", "gelu"),
        ),
    ),
    "nano": Shape("nano", "ernie-3.0-nano-zh"),
    "micro": Shape("micro", "ernie-3.0-micro-zh"),
    "mini": Shape("mini", "ernie-3.0-mini-zh"),
    "medium": Shape("medium", "ernie-3.0-medium-zh"),
    "base": Shape("base", "ernie-3.0-base-zh"),
}
SEED = 14


def get_shape(name: str) -> Shape:
    if name not in SHAPES:
        raise BadOptionsError(f"unknown model size {name!r}", f"use one of {', '.join(SHAPES)}")
    return SHAPES[name]


def shape_config(shape: Shape) -> dict:
    """The model configuration of a shape (layers, hidden size, heads, vocabulary size, ...)."""
    base = {}
    if shape.source:
        from paddlenlp.transformers.ernie.configuration import ERNIE_PRETRAINED_INIT_CONFIGURATION

        base = dict(ERNIE_PRETRAINED_INIT_CONFIGURATION[shape.source])
    return {**base, **dict(shape.config)}


def filled_vocab(tokens: list[str], size: int) -> list[str]:
    """`tokens` (a trained vocabulary, kept in order so its ids stay the same) followed by unused tokens up to
    `size`; a vocabulary longer than `size` cannot be served by that shape's embedding table."""
    if len(tokens) > size:
        raise BadOptionsError(
            f"the vocabulary has {len(tokens)} tokens, more than the {size} rows of the shape's embeddings",
            "use a shape with a larger vocab_size",
        )
    return tokens + [f"[unused{i}]" for i in range(size - len(tokens))]


def shape_key(shape: Shape, task: TaskSpec, labels: list[str], vocab: list[str]) -> str:
    """What a made checkpoint depends on: a changed vocabulary, label set or shape makes a new one."""
    text = json.dumps([shape_config(shape), task.paddle_class, labels, vocab, SEED], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def random_model(config: dict, task: TaskSpec, labels: list[str]):
    """`task`'s paddlenlp head over an ERNIE of `config` (a shape_config), weights drawn from a fixed seed, in
    eval mode; its full configuration is `model.config`."""
    import paddle
    import paddlenlp.transformers as transformers
    from paddlenlp.transformers import ErnieConfig

    model_config = ErnieConfig(
        **config,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )
    paddle.seed(SEED)
    model = getattr(transformers, task.paddle_class)(model_config)
    model.eval()
    return model


def make_checkpoint(shape: Shape, task: TaskSpec, labels: list[str], vocab: list[str], out: str | Path) -> Path:
    """A save_pretrained checkpoint (config.json, model_state.pdparams, vocab.txt, tokenizer_config.json) of
    `task`'s head over an ERNIE of `shape`, random weights (seeded), written atomically to `out`. Reused when
    `out` holds one made from the same inputs."""
    out = Path(out)
    key = shape_key(shape, task, labels, vocab)
    stamp = out / "shape.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("key") == key:
        return out
    from paddlenlp.transformers import ErnieTokenizer

    config = shape_config(shape)
    model = random_model(config, task, labels)
    with atomic_path(out) as tmp:
        tmp.mkdir(parents=True)
        (tmp / "vocab.txt").write_text("\n".join(filled_vocab(vocab, model.config.vocab_size)) + "\n", "utf-8")
        model.save_pretrained(str(tmp))
        ErnieTokenizer(str(tmp / "vocab.txt")).save_pretrained(str(tmp))
        params = sum(int(p.size) for p in model.parameters())
        (tmp / "shape.json").write_text(json.dumps({"key": key, "shape": shape.name, "params": params, **config}))
    return out


def checkpoint_facts(root: str | Path) -> dict:
    """What make_checkpoint recorded: the shape's name, its parameter count and configuration."""
    return json.loads((Path(root) / "shape.json").read_text())
