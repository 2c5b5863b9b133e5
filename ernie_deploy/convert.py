"""Paddle static model -> ONNX with paddle2onnx, tensors named for the pipeline, parity checked against Paddle."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .errors import ErnieDeployError
from .export import StaticModel
from .paths import atomic_path
from .tasks import LOGITS, MODEL_INPUTS

DEFAULT_OPSET = 14  # ORT 1.32 and the NGC containers' ORT backend both run it; 13 lacks some fusions.


def convert(static: StaticModel, out_path: str | Path, *, opset: int = DEFAULT_OPSET) -> Path:
    """Convert with paddle2onnx into out_path (atomically), renaming the output to `logits`."""
    import onnx
    import paddle2onnx

    if opset < 13:
        raise ErnieDeployError(f"opset {opset} is too old", "use --opset 13 or newer")
    out_path = Path(out_path)
    with atomic_path(out_path, suffix=".onnx") as tmp:
        log = io.StringIO()
        # paddle2onnx logs failures instead of raising; keep its chatter and report it if nothing comes out.
        with contextlib.redirect_stdout(log):
            paddle2onnx.export(str(static.model_file), str(static.params_file), str(tmp), opset_version=opset,
                               auto_upgrade_opset=False, enable_onnx_checker=True, optimize_tool="polygraphy")
        if not tmp.exists() or tmp.stat().st_size == 0:
            raise ErnieDeployError(f"paddle2onnx produced no model from {static.model_file}: {log.getvalue()[-800:]}")
        model = onnx.load(str(tmp))
        name_tensors(model)
        onnx.checker.check_model(model)
        onnx.save(model, str(tmp))
    return out_path


def name_tensors(model) -> None:
    """Give the graph the pipeline's tensor names: inputs as exported, the single output as `logits`."""
    inputs = [i.name for i in model.graph.input]
    if sorted(inputs) != sorted(MODEL_INPUTS):
        raise ErnieDeployError(f"the exported graph has inputs {inputs}, expected {list(MODEL_INPUTS)}",
                               "export the model with `ernie-deploy export`, which fixes the input names")
    if len(model.graph.output) != 1:
        raise ErnieDeployError(f"expected one graph output, found {[o.name for o in model.graph.output]}")
    old = model.graph.output[0].name
    if old == LOGITS:
        return
    for node in model.graph.node:
        node.output[:] = [LOGITS if n == old else n for n in node.output]
        node.input[:] = [LOGITS if n == old else n for n in node.input]
    model.graph.output[0].name = LOGITS


@dataclass
class ParityReport:
    n: int
    max_abs_diff: float
    labels_agree: float  # fraction of rows whose argmax matches
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.tolerance and self.labels_agree == 1.0

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def check_parity(static: StaticModel, onnx_path: str | Path, texts: list[str], *, max_seq_len: int = 128,
                 batch_size: int = 32, tolerance: float = 1e-4) -> ParityReport:
    """Run the same batches through Paddle Inference and onnxruntime and compare logits."""
    from .export import PaddlePredictor
    from .runtime import OnnxModel
    from .tokenizer import build_tokenizer, encode_batch

    if not texts:
        raise ErnieDeployError("parity check needs at least one text")
    tokenizer = build_tokenizer(static.vocab_file)
    paddle_model, onnx_model = PaddlePredictor(static), OnnxModel(onnx_path)
    worst, agree = 0.0, 0
    for start in range(0, len(texts), batch_size):
        enc = encode_batch(tokenizer, texts[start:start + batch_size], max_seq_len)
        a = paddle_model(enc.input_ids, enc.token_type_ids)
        b = onnx_model(enc.input_ids, enc.token_type_ids)
        worst = max(worst, float(np.max(np.abs(a - b))))
        same = a.argmax(-1) == b.argmax(-1)
        if same.ndim == 2:  # per-token labels: a text agrees when every real token does (padding is ignored)
            same = (same | ~enc.attention_mask.astype(bool)).all(axis=-1)
        agree += int(same.sum())
    return ParityReport(len(texts), worst, agree / len(texts), tolerance)


def require_parity(report: ParityReport, onnx_path: Path) -> None:
    if not report.ok:
        raise ErnieDeployError(
            f"Paddle and ONNX disagree on {onnx_path}: max abs logit diff {report.max_abs_diff:.3g} "
            f"(tolerance {report.tolerance:g}), labels agree on {report.labels_agree:.2%} of {report.n} texts",
            "try another --opset, or convert without optimization; do not serve this model",
        )


def write_report(report: ParityReport, path: Path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
