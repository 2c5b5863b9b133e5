"""What the commands that work on artifacts share: the help of --task, the model found by its name or task
(ernie_deploy.pipeline.locate), and typed options filled from the parsed flags (the flags themselves:
cli/arguments.py)."""

from __future__ import annotations

from dataclasses import fields

from ernie_deploy.pipeline.locate import DEFAULT_TASK, onnx_file, static_model

__all__ = ["DEFAULT_TASK", "MAX_SEQ_LEN_HELP", "TASK_HELP", "onnx_file", "options_from", "static_model"]

TASK_HELP = f"default: the task the --static model was exported for, else {DEFAULT_TASK}"
# `export --max-seq-len` and `add --max-seq-len`: one flag, one meaning (export.static.default_max_seq_len).
MAX_SEQ_LEN_HELP = (
    "the longest input in tokens, [CLS] and [SEP] included, that convert, build and serve tokenize to (default: the "
    "length the checkpoint's training record or config.json records, else the task's: 128, uie Taskflow's 512; at "
    "most the model's max_position_embeddings)"
)


def options_from(cls, args, **given):
    """An options dataclass `cls` from the parsed command line: every field whose flag was given (a flag's dest is
    its field's name; a flag left out keeps the field's default), then `given` (what a command sets itself)."""
    values = {f.name: getattr(args, f.name) for f in fields(cls) if getattr(args, f.name, None) is not None}
    return cls(**{**values, **given})
