"""UIE (paddlenlp.transformers.UIE) checkpoint -> Paddle static model -> ONNX, gated by parity.

A UIE model is an ERNIE encoder with two pointer heads: for `[CLS] prompt [SEP] text [SEP]` it answers, per
token, the probability (a sigmoid) that an answer span starts there (`start_prob`) and that one ends there
(`end_prob`), float32 [batch, seq]. Its forward also takes position_ids and attention_mask; both are left to
paddlenlp's defaults (positions 0.., padding masked where input_ids is the pad id), so the saved program takes the
project's two inputs (core.tasks.MODEL_INPUTS) like every other model it serves.

Standalone on purpose: UIE is no task kind yet, so nothing here writes the model record (model.json) the kinds'
stages read; export.json beside the static model says what the later steps of this module need.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ernie_deploy.core.errors import BadCheckpointError, ParityError
from ernie_deploy.core.files import atomic_path, staging_dir, write_json
from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN, MODEL_INPUTS
from ernie_deploy.fetch.checkpoints import TOKENIZER_CONFIG, Checkpoint, inspect_checkpoint

UIE_CLASS = "UIE"
OUTPUTS = ("start_prob", "end_prob")
# Heads of paddlenlp's other UIE families: other encoders and inputs (ERNIE-M takes no token_type_ids, ERNIE-Layout
# takes a layout), so this export does not fit them; named in the refusal rather than called "not UIE".
OTHER_UIE = ("UIEM", "UIEX")
# Max abs diff of start/end probabilities between Paddle Inference and onnxruntime (opset 14, CPU) on
# PARITY_EXAMPLES, measured on random-weight ERNIE 3.0 shapes (2-core x86 host): nano 1.8e-07, mini 2.1e-07,
# medium 3.6e-07, base 4.5e-07 (tests/test_uie_export.py prints them). It grows with depth and width, so 1e-5 leaves
# 20x room over base for other hosts' kernels, while a wrong graph (the heads swapped) differs by 0.35 on nano.
TOLERANCE = 1e-5
# Chinese sentences under the prompts of entity extraction; both heads are compared on every real token.
PARITY_EXAMPLES = (
    ("人名", "杜甫生于河南巩县，晚年漂泊于四川和湖南一带。"),
    ("地名", "杜甫生于河南巩县，晚年漂泊于四川和湖南一带。"),
    ("人名", "张伟上周在深圳参加了华为公司举办的技术论坛，并做了二十分钟的报告。"),
    ("机构名", "张伟上周在深圳参加了华为公司举办的技术论坛，并做了二十分钟的报告。"),
    ("地名", "小明明天要从上海出发去杭州参加阿里巴巴举办的开发者大会。"),
    ("机构名", "小明明天要从上海出发去杭州参加阿里巴巴举办的开发者大会。"),
    ("时间", "中国人民银行决定于2023年3月27日下调金融机构存款准备金率0.25个百分点。"),
    ("机构名", "中国人民银行决定于2023年3月27日下调金融机构存款准备金率0.25个百分点。"),
)


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


@dataclass(frozen=True)
class UIEStatic:
    """A UIE Paddle inference model with its vocabulary, as export_uie wrote it."""

    root: Path
    model_file: Path
    params_file: Path
    vocab_file: Path
    max_positions: int | None

    @classmethod
    def load(cls, root: str | Path) -> UIEStatic:
        root = Path(root)
        meta = root / "export.json"
        info = json.loads(meta.read_text()) if meta.exists() else {}
        if info.get("model") != UIE_CLASS:
            raise BadCheckpointError(f"{root} is not an exported UIE model", "run export_uie on the checkpoint first")
        files = (root / info["model_file"], root / info["params_file"], root / "vocab.txt")
        return cls(root, *files, info.get("max_positions"))


def export_uie(checkpoint: Checkpoint, out_dir: str | Path) -> UIEStatic:
    """Write the Paddle static model of a UIE checkpoint (inspect_uie's) into out_dir, atomically: inputs
    MODEL_INPUTS (int64 [batch, seq], both dynamic), outputs start_prob then end_prob."""
    from ernie_deploy.export.static import PREFIX, _save_static

    config = checkpoint.model_config()
    max_positions = int(config["max_position_embeddings"]) if config.get("max_position_embeddings") else None
    out_dir = Path(out_dir)
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        # static's saver loads the paddlenlp class a task names; UIE is that class here.
        model_name = _save_static(Path(checkpoint.root), SimpleNamespace(paddle_class=UIE_CLASS), tmp / PREFIX)
        shutil.copy2(checkpoint.vocab_file, tmp / "vocab.txt")
        tokenizer_config = {}
        if checkpoint.tokenizer_config_file is not None:
            tokenizer_config = json.loads(Path(checkpoint.tokenizer_config_file).read_text(encoding="utf-8"))
        write_json({**tokenizer_config, "do_lower_case": checkpoint.do_lower_case}, tmp / TOKENIZER_CONFIG)
        meta = {
            "model": UIE_CLASS,
            "model_file": model_name,
            "params_file": f"{PREFIX}.pdiparams",
            "inputs": list(MODEL_INPUTS),
            "outputs": list(OUTPUTS),  # in the program's fetch order
            "max_positions": max_positions,
        }
        write_json(meta, tmp / "export.json")
    return UIEStatic.load(out_dir)


def convert_uie(static: UIEStatic, out_path: str | Path, *, opset: int | None = None) -> Path:
    """paddle2onnx of the static model into out_path (atomically), its outputs named start_prob and end_prob.
    export.onnx.convert does not fit: it takes a model with a record and one output, which it names logits."""
    import onnx

    from ernie_deploy.export.onnx import DEFAULT_OPSET, paddle2onnx_model

    out_path = Path(out_path)
    with atomic_path(out_path, suffix=".onnx") as tmp:
        model = paddle2onnx_model(static.model_file, static.params_file, tmp, opset or DEFAULT_OPSET)
        _name_outputs(model, static.model_file)
        onnx.checker.check_model(model)
        onnx.save(model, str(tmp))
    return out_path


def _name_outputs(model, source: Path) -> None:
    inputs = sorted(i.name for i in model.graph.input)
    outputs = [o.name for o in model.graph.output]
    if inputs != sorted(MODEL_INPUTS) or len(outputs) != len(OUTPUTS):
        raise BadCheckpointError(
            f"the graph converted from {source} has inputs {inputs} and outputs {outputs}; expected inputs "
            f"{list(MODEL_INPUTS)} and two outputs",
            "export the checkpoint with export_uie, which fixes the inputs and the two heads",
        )
    rename = dict(zip(outputs, OUTPUTS))  # paddle2onnx keeps the program's fetch order: start, then end
    for node in model.graph.node:
        node.output[:] = [rename.get(n, n) for n in node.output]
        node.input[:] = [rename.get(n, n) for n in node.input]
    for output in model.graph.output:
        output.name = rename[output.name]


def _paddle_runner(static: UIEStatic):
    """Paddle Inference over the static model, both outputs of a run (static.PaddlePredictor answers the first)."""
    from ernie_deploy.export.static import PaddlePredictor

    predictor = PaddlePredictor(static).predictor

    def run(input_ids, token_type_ids) -> list[np.ndarray]:
        feeds = {"input_ids": input_ids, "token_type_ids": token_type_ids}
        for name in predictor.get_input_names():
            array = np.ascontiguousarray(feeds[name], dtype=np.int64)
            handle = predictor.get_input_handle(name)
            handle.reshape(array.shape)
            handle.copy_from_cpu(array)
        predictor.run()
        return [predictor.get_output_handle(name).copy_to_cpu() for name in predictor.get_output_names()]

    return run


@dataclass
class UIEParityReport:
    n: int  # (prompt, text) rows
    max_abs_diff: dict[str, float]  # per output, over real tokens (padding is not compared)
    # Fraction of rows whose tokens past 0.5 (where UIE's decoding places span starts and ends) are the same.
    spans_agree: float
    tolerance: float

    @property
    def worst(self) -> float:
        return max(self.max_abs_diff.values())

    @property
    def ok(self) -> bool:
        return self.worst <= self.tolerance

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}

    def summary(self) -> str:
        each = ", ".join(f"{name} {diff:.2e}" for name, diff in self.max_abs_diff.items())
        return f"UIE parity on {self.n} rows: max abs diff {each}; spans agree {self.spans_agree:.2%}"


def check_uie_parity(
    static: UIEStatic, onnx_path: str | Path, examples=PARITY_EXAMPLES, *, tolerance: float = TOLERANCE
) -> UIEParityReport:
    """Paddle Inference and onnxruntime on the same `examples` ((prompt, text) pairs, tokenized as the serving
    tokenizer does: `[CLS] prompt [SEP] text [SEP]`, token types 0 then 1), start and end probabilities compared."""
    from ernie_deploy.serving.encoding import encode_pairs
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import build_tokenizer

    prompts, texts = zip(*examples)
    max_seq_len = min(DEFAULT_MAX_SEQ_LEN, static.max_positions or DEFAULT_MAX_SEQ_LEN)
    enc = encode_pairs(build_tokenizer(static.vocab_file), prompts, texts, max_seq_len)
    paddle_out = _paddle_runner(static)(enc.input_ids, enc.token_type_ids)
    onnx_out = OnnxModel(onnx_path, outputs=OUTPUTS).run(enc.input_ids, enc.token_type_ids)
    real = enc.attention_mask.astype(bool)
    diffs, same = {}, np.ones(len(prompts), bool)
    for name, a, b in zip(OUTPUTS, paddle_out, onnx_out):
        if a.shape != b.shape or a.shape != real.shape:
            raise BadCheckpointError(
                f"{name}: Paddle answers shape {a.shape}, ONNX {b.shape}, for inputs of shape {real.shape}",
                "export and convert the checkpoint again with export_uie and convert_uie",
            )
        diffs[name] = float(np.max(np.abs(a - b)[real]))
        same &= (((a > 0.5) == (b > 0.5)) | ~real).all(axis=-1)
    return UIEParityReport(len(prompts), diffs, float(same.mean()), tolerance)


def convert_uie_checked(
    static: UIEStatic,
    out: str | Path,
    *,
    examples=PARITY_EXAMPLES,
    tolerance: float = TOLERANCE,
    opset: int | None = None,
    log=print,
) -> UIEParityReport:
    """static -> `out` (ONNX) with parity.json beside it, both moved in only after the parity gate passed; a
    refused model (ParityError) leaves nothing behind and whatever was at `out` as it was."""
    out = Path(out)
    with staging_dir(out.parent, f"{out.stem}.uie") as staging:
        model = convert_uie(static, staging / out.name, opset=opset)
        report = check_uie_parity(static, model, examples, tolerance=tolerance)
        log(report.summary())
        if not report.ok:
            raise ParityError(
                f"Paddle and ONNX disagree on {out.name}: max abs probability diff {report.worst:.3g} "
                f"(tolerance {tolerance:g}) over {report.n} rows",
                "convert again with another opset; do not serve this model",
            )
        write_json(report.to_dict(), staging / "parity.json")
        os.replace(staging / "parity.json", out.parent / "parity.json")  # the model last: never one without it
        os.replace(model, out)
    return report
