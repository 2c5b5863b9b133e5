"""Dygraph checkpoint -> Paddle static inference model (the stage before ONNX).

Paddle 3 saves PIR programs (`inference.json` + `inference.pdiparams`); a checkpoint that is already a
static model (PIR `.json` or legacy `.pdmodel`) is copied through unchanged.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import atomic_path, write_json
from ernie_deploy.core.tasks import MODEL_INPUTS, TaskSpec, get_task

PREFIX = "inference"


@dataclass(frozen=True)
class StaticModel:
    """A Paddle inference model plus what serving needs beside it (vocab, label names)."""

    root: Path
    model_file: Path  # inference.json (PIR) or *.pdmodel (legacy)
    params_file: Path
    vocab_file: Path
    labels: list[str]
    task: TaskSpec  # what it was exported for, recorded in export.json: later stages need not be told again

    @classmethod
    def load(cls, root: str | Path) -> StaticModel:
        root = Path(root)
        meta = root / "export.json"
        if not meta.exists():
            raise ErnieDeployError(
                f"{root} is not an exported model (no export.json)", "run `ernie-deploy export` first"
            )
        info = json.loads(meta.read_text())
        if "task" not in info:
            raise ErnieDeployError(
                f"{meta} does not say which task the model is for",
                "export it again with `ernie-deploy export --task ...`",
            )
        return cls(
            root,
            root / info["model_file"],
            root / info["params_file"],
            root / "vocab.txt",
            info["labels"],
            get_task(info["task"]),
        )


def label_names_from_config(config: dict) -> list[str]:
    """Label names in id order from a PaddleNLP config; generic names when it carries none."""
    id2label = config.get("id2label") or {}
    num = config.get("num_labels") or config.get("num_classes") or len(id2label)
    if not num:
        raise ErnieDeployError(
            "the checkpoint config has neither id2label nor num_labels",
            "add id2label to config.json, or pass --labels with a JSON list of names",
        )
    return [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(int(num))]


def _read_config(path: Path) -> dict:
    config = json.loads(path.read_text())
    # Old PaddleNLP layout (model_config.json) nests the arguments under init_args.
    return config["init_args"][0] if "init_args" in config else config


def export(checkpoint, task: TaskSpec, out_dir: str | Path, labels: list[str] | None = None) -> StaticModel:
    """Write a static inference model for `task` from a fetch.Checkpoint into out_dir (atomically)."""
    out_dir = Path(out_dir)
    root = Path(checkpoint.root)
    config = _read_config(Path(checkpoint.config_file)) if checkpoint.config_file else {}
    labels = labels or label_names_from_config(config)
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        if checkpoint.kind == "static":
            model_file = Path(checkpoint.model_file)
            shutil.copy2(model_file, tmp / f"{PREFIX}{model_file.suffix}")
            shutil.copy2(checkpoint.params_file, tmp / f"{PREFIX}.pdiparams")
            model_name = f"{PREFIX}{model_file.suffix}"
        else:
            model_name = _save_static(root, task, tmp / PREFIX)
        shutil.copy2(checkpoint.vocab_file, tmp / "vocab.txt")
        meta = {"task": task.name, "model_file": model_name, "params_file": f"{PREFIX}.pdiparams", "labels": labels}
        write_json(meta, tmp / "export.json")
    return StaticModel.load(out_dir)


def _save_static(root: Path, task: TaskSpec, prefix: Path) -> str:
    import paddle
    import paddlenlp.transformers as transformers

    paddle.set_device("cpu")
    model = getattr(transformers, task.paddle_class).from_pretrained(str(root))
    model.eval()
    # Both axes dynamic: batch and sequence length vary per request.
    spec = [paddle.static.InputSpec([None, None], "int64", name) for name in MODEL_INPUTS]
    static = paddle.jit.to_static(model, input_spec=spec, full_graph=True)
    paddle.jit.save(static, str(prefix))
    for suffix in (".json", ".pdmodel"):
        if prefix.with_suffix(suffix).exists():
            return prefix.name + suffix
    raise ErnieDeployError(f"paddle.jit.save wrote no model file at {prefix}")


class PaddlePredictor:
    """Paddle Inference over a static model: the Paddle-native reference for parity and accuracy."""

    def __init__(self, static: StaticModel, threads: int = 0):
        from paddle import inference

        config = inference.Config(str(static.model_file), str(static.params_file))
        config.disable_gpu()
        if threads:
            config.set_cpu_math_library_num_threads(threads)
        config.disable_glog_info()
        self.predictor = inference.create_predictor(config)
        self.inputs = self.predictor.get_input_names()

    def __call__(self, input_ids, token_type_ids):
        import numpy as np

        feeds = {"input_ids": input_ids, "token_type_ids": token_type_ids}
        for name in self.inputs:
            handle = self.predictor.get_input_handle(name)
            array = np.ascontiguousarray(feeds[name], dtype=np.int64)
            handle.reshape(array.shape)
            handle.copy_from_cpu(array)
        self.predictor.run()
        return self.predictor.get_output_handle(self.predictor.get_output_names()[0]).copy_to_cpu()
