"""What a converted model must pass before it replaces the previous one, and the defaults of each gate."""

from __future__ import annotations

from dataclasses import dataclass

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import TaskSpec

DEFAULT_TOLERANCE = 1e-4  # Paddle vs ONNX FP32, max abs logit diff (measured ~2e-7 on ERNIE shapes)
DEFAULT_INT8_MIN_AGREE = 0.97
# Measured FP16-vs-FP32 drift on the bootstrap models' whole test splits: max abs logit diff 0.013 (seq_cls,
# 1,000 texts, all labels equal) and 0.028 (token_cls, 5,000 texts, 99.99% of tokens equal).
DEFAULT_FP16_TOLERANCE = 0.05
DEFAULT_FP16_MIN_AGREE = 0.99


@dataclass(frozen=True)
class Gates:
    """What a converted model must pass before it replaces the previous one."""

    texts: tuple[str, ...] = ()  # empty: no checks at all (--skip-parity)
    tolerance: float = DEFAULT_TOLERANCE  # Paddle vs ONNX FP32, max abs logit diff
    int8_min_agree: float = DEFAULT_INT8_MIN_AGREE
    fp16_tolerance: float = DEFAULT_FP16_TOLERANCE
    fp16_min_agree: float = DEFAULT_FP16_MIN_AGREE


def require_logits_rank(task: TaskSpec, logits, source) -> None:
    """Logits must have the shape the task's kind gives them ([batch, classes] or [batch, tokens, classes]):
    every comparison of two models reads labels per text or per token from it."""
    if logits.ndim != 1 + task.logits_rank:
        expected = "[batch, classes]" if task.logits_rank == 1 else "[batch, tokens, classes]"
        raise ErnieDeployError(
            f"{source} returns logits of shape {list(logits.shape)}; a {task.kind} task "
            f"({task.name}) expects {expected}",
            "export the model for the task it was trained for (`ernie-deploy export --task`)",
        )
