"""UIE (paddlenlp.transformers.UIE) checkpoint -> Paddle static model -> ONNX, gated by parity.

A UIE model is an ERNIE encoder with two pointer heads: for `[CLS] prompt [SEP] text [SEP]` it answers, per
token, the probability (a sigmoid) that an answer span starts there (`start_prob`) and that one ends there
(`end_prob`), float32 [batch, seq]. Its forward also takes position_ids and attention_mask; both are left to
paddlenlp's defaults (positions 0.., padding masked where input_ids is the pad id), so the saved program takes the
project's two inputs (core.tasks.MODEL_INPUTS) like every other model it serves.

The static model is written by export.static.export like every other (its record, model.json, names task `uie`);
what this module adds is recognising the checkpoint, converting both heads and the parity gate on them.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadCheckpointError, ParityError
from ernie_deploy.core.files import atomic_path, staging_dir, write_json
from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN, MODEL_INPUTS, UIE
from ernie_deploy.export.onnx import DEFAULT_OPSET, paddle2onnx_model
from ernie_deploy.export.static import PaddlePredictor, StaticModel, export
from ernie_deploy.fetch.checkpoints import Checkpoint
from ernie_deploy.fetch.uie import inspect_uie
from ernie_deploy.serving.encoding import encode_pairs
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.tokenizer import build_tokenizer

OUTPUTS = ("start_prob", "end_prob")
# Max abs diff of start/end probabilities between Paddle Inference and onnxruntime (opset 14, CPU) on
# PARITY_EXAMPLES, measured on random-weight ERNIE 3.0 shapes (2-core x86 host; tests/test_uie_export.py prints them):
# 1.8e-07 (nano) to 4.5e-07 (base) with the heads as initialised, whose probabilities all sit near 0.5; 6.9e-07 to
# 4.7e-06 with the heads scaled to decide (a trained head's probabilities spread to 0 and 1, where a logit's error
# moves them less, but its steeper slope near 0.5 moves them more). It grows with depth and width, so 5e-5 leaves 10x
# room over the steeper heads at base for other hosts' kernels, while a wrong graph (the heads swapped) differs by
# 0.35 on nano; Taskflow's answers are compared at 1e-4.
TOLERANCE = 5e-5
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


def export_uie(checkpoint: Checkpoint, out_dir: str | Path, *, name: str | None = None, max_seq_len=None):
    """The static model of a UIE checkpoint (inspect_uie's) in out_dir (export.static.export, task `uie`): inputs
    MODEL_INPUTS (int64 [batch, seq], both dynamic), outputs start_prob then end_prob."""

    return export(inspect_uie(checkpoint.root), UIE, out_dir, max_seq_len=max_seq_len, name=name)


def convert_uie(static: StaticModel, out_path: str | Path, *, opset: int | None = None) -> Path:
    """paddle2onnx of the static model into out_path (atomically), its outputs named start_prob and end_prob.
    export.onnx.convert does not fit: it takes a model with a record and one output, which it names logits."""
    import onnx

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


def static_runner(static: StaticModel):
    """Paddle Inference over the static model, both outputs of a run (static.PaddlePredictor answers the first)."""

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
    static: StaticModel, onnx_path: str | Path, examples=PARITY_EXAMPLES, *, tolerance: float = TOLERANCE
) -> UIEParityReport:
    """Paddle Inference and onnxruntime on the same `examples` ((prompt, text) pairs, tokenized as the serving
    tokenizer does: `[CLS] prompt [SEP] text [SEP]`, token types 0 then 1), start and end probabilities compared."""

    prompts, texts = zip(*examples)
    max_seq_len = min(DEFAULT_MAX_SEQ_LEN, static.max_positions or DEFAULT_MAX_SEQ_LEN)
    enc = encode_pairs(build_tokenizer(static.vocab_file), prompts, texts, max_seq_len)
    paddle_out = static_runner(static)(enc.input_ids, enc.token_type_ids)
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
    static: StaticModel,
    out: str | Path,
    *,
    examples=PARITY_EXAMPLES,
    tolerance: float = TOLERANCE,
    opset: int | None = None,
    log=print,
) -> UIEParityReport:
    """static -> `out` (ONNX) with parity.json and the record (model.json) beside it, moved in only after the parity
    gate passed; a
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
        record = replace(static.spec, precision="fp32").write(staging)
        os.replace(staging / "parity.json", out.parent / "parity.json")
        os.replace(record, out.parent / record.name)  # the model last: never one without its report and record
        os.replace(model, out)
    return report
