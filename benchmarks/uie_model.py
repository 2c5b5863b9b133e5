"""The model and texts of the UIE bench (benchmarks/uie.py): a checkpoint given (such as the demo's, demo/uie), else
UIE over an ERNIE 3.0 shape's configuration (nano unless told) with random weights and its pointer heads scaled and
biased, taken through `ernie-deploy export`, `convert` and `build --runtime python` with the commands users run; the
step the server runs, built in-process from the built model; MSRA NER's test sentences or a fixed list."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from benchmarks.scores_in_process import step_config
from ernie_deploy.core.errors import BadCheckpointError, BadDataError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TOKEN_CLS, TOKENIZER_STEP, UIE
from ernie_deploy.fetch.data import data_dir, read_split
from ernie_deploy.fetch.shapes import filled_vocab, get_shape, random_model, shape_config
from ernie_deploy.serving.steps import STEPS

NAME = "uie_bench"
# Each schema shape the bench measures: one type, three types in one stage, one type and two relations (two stages).
SCHEMAS = {
    "1 type": ["人物"],
    "3 types": ["人物", "地点", "机构"],
    "relation": {"人物": ["机构", "地点"]},
}
SHAPE = "nano"  # the ERNIE 3.0 shape of the random model (fetch.shapes), unless a checkpoint is given
TEXTS = 400  # distinct texts the cells cycle through
# Scale and bias of the random heads. Unscaled, a random head answers about 0.5 for every token, so whether a token
# passes 0.5 is noise; scaled by 10 its logits spread far from 0, and these biases keep about the top 6% of start and
# of end logits over 0.5 on MSRA sentences (measured on the scaled heads' logits), which finds 1-2 spans a type per
# text: a trained model's order, where the relation stage has prompts to run.
HEAD_SCALE, START_BIAS, END_BIAS = 10.0, -1.2, -1.8
FALLBACK_TEXTS = [
    "国务院总理李鹏今天在北京会见了来访的日本外务大臣。",
    "新华社上海三月五日电，上海市市长徐匡迪在浦东新区考察了多家外资企业。",
    "中国人民银行行长戴相龙表示，今年的货币政策将保持稳定。",
    "据香港媒体报道，特区政府将于下月在湾仔举行大型展览。",
    "江泽民主席在中南海会见了美国国务卿奥尔布赖特一行。",
    "北京大学校长陈佳洱出席了在人民大会堂举行的颁奖仪式。",
    "联合国秘书长安南在纽约总部发表讲话，呼吁各方保持克制。",
    "广东省委书记谢非在深圳听取了有关部门的工作汇报。",
]


def bench_texts(n: int = TEXTS) -> tuple[list[str], str]:
    """(texts, where they come from): MSRA NER's test sentences when the dataset is prepared already (nothing is
    downloaded for the benchmark), else the fixed list."""

    folder = data_dir(TOKEN_CLS.dataset)
    try:
        texts, _ = read_split(folder, "test", TOKEN_CLS.split_format)
    except (OSError, ValueError, BadDataError):  # no prepared split: the fixed texts, and the source says so
        return list(FALLBACK_TEXTS), "fixed news-like sentences (benchmarks/uie_model.py)"
    return texts[:n], f"MSRA NER test split, first {min(n, len(texts))} sentences"


def schema_names() -> list[str]:
    names = []
    for schema in SCHEMAS.values():
        for name, children in schema.items() if isinstance(schema, dict) else ((n, []) for n in schema):
            names += [name, *children]
    return names


def biased_checkpoint(folder: Path, texts: list[str], shape: str = SHAPE) -> dict:
    """A PaddleNLP UIE checkpoint in `folder`: an ERNIE 3.0 shape's configuration (`shape`), random weights
    (seeded), heads scaled and biased (HEAD_SCALE, START_BIAS, END_BIAS); its vocabulary holds the characters of
    `texts` and the schemas' names (with 的, the relation prompts' joint), one token each. Returns what the record
    says of it."""
    import paddle
    from paddlenlp.transformers import ErnieTokenizer

    config = shape_config(get_shape(shape))
    chars = sorted(set("".join(texts) + "".join(schema_names()) + "的") - set(" \t\n"))
    latin = list("abcdefghijklmnopqrstuvwxyz0123456789")
    tokens = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", *chars, *(f"##{c}" for c in latin)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(filled_vocab(tokens, config["vocab_size"])) + "\n", "utf-8")
    model = random_model(config, UIE, [])
    for head, bias in ((model.linear_start, START_BIAS), (model.linear_end, END_BIAS)):
        head.weight.set_value(head.weight * HEAD_SCALE)
        head.bias.set_value(paddle.full_like(head.bias, bias))
    model.save_pretrained(str(folder))
    ErnieTokenizer(str(folder / "vocab.txt")).save_pretrained(str(folder))
    return {
        "checkpoint": f"ERNIE 3.0 {shape} shape, random weights (seeded), pointer heads scaled and biased",
        "shape": shape,
        "layers": config["num_hidden_layers"],
        "hidden": config["hidden_size"],
        "params": sum(int(p.size) for p in model.parameters()),
        "head_scale": HEAD_SCALE,
        "start_bias": START_BIAS,
        "end_bias": END_BIAS,
    }


@contextmanager
def _artifacts_at(folder: Path):
    before = os.environ.get("ERNIE_DEPLOY_ARTIFACTS")
    os.environ["ERNIE_DEPLOY_ARTIFACTS"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("ERNIE_DEPLOY_ARTIFACTS", None)
        else:
            os.environ["ERNIE_DEPLOY_ARTIFACTS"] = before


def build_model(
    workdir: Path, texts: list[str], checkpoint: Path | None = None, shape: str = SHAPE
) -> tuple[Path, dict]:
    """(repository, model facts): the checkpoint (`checkpoint`, else the biased one of `shape` made in `workdir`)
    through the commands users run, into `workdir`/models."""
    from ernie_deploy.cli import main

    if checkpoint is None:
        checkpoint = workdir / "checkpoint"
        facts = biased_checkpoint(checkpoint, texts, shape)
    else:
        config = json.loads((Path(checkpoint) / "config.json").read_text(encoding="utf-8"))
        facts = {
            "checkpoint": f"trained, {checkpoint}",
            "layers": config.get("num_hidden_layers"),
            "hidden": config.get("hidden_size"),
        }
    repo = workdir / "models"
    with _artifacts_at(workdir / "artifacts"):
        for argv in (
            ["export", "--task", "uie", "--model", NAME, "--checkpoint", str(checkpoint)],
            ["convert", "--model", NAME],
            ["build", "--model", NAME, "-r", str(repo), "--runtime", "python"],
        ):
            if main(argv) != 0:
                raise BadCheckpointError(f"`ernie-deploy {' '.join(argv)}` failed", "read its message above")
    return repo, facts


def load_step(repo: Path):
    """The step the server runs for the model, built as the python backend builds it: from its config.pbtxt (as the
    JSON Triton hands `initialize`) and its version folder."""
    from ernie_deploy.repository.layouts import get_layout

    model = ModelSpec.read(repo / NAME / "1")
    name = get_layout(model.layout).python_steps(model, TOKENIZER_STEP, "python")[NAME]
    return STEPS[name](step_config(repo / NAME), repo / NAME / "1")


def request(text: str, schema: str) -> dict[str, np.ndarray]:
    """One text and its schema as a request's tensors ([1, 1] BYTES each)."""
    return {
        "text": np.array([[text.encode("utf-8")]], dtype=np.object_),
        "schema": np.array([[schema.encode("utf-8")]], dtype=np.object_),
    }


def extraction_step(step):
    """The ExtractionStep inside `step` (itself, or the one a watch wraps)."""
    while not hasattr(step, "_run"):
        step = step.step
    return step


def spans_of(answer: dict, above: str = "") -> list[tuple]:
    """Every span of an answer, relations included, as (types from the top, start, end, probability), sorted."""
    out = []
    for name, spans in answer.items():
        path = f"{above}/{name}"
        for span in spans:
            out.append((path, span["start"], span["end"], span["probability"]))
            out += spans_of(span.get("relations", {}), f"{path}@{span['start']}")
    return sorted(out)
