"""What the commands read from earlier stages: the exported model, found by its task or given by path."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.layout import artifact_dir
from ernie_deploy.core.tasks import get_task
from ernie_deploy.export.static import StaticModel

DEFAULT_TASK = "seq_cls"
TASK_HELP = f"default: the task the --static model was exported for, else {DEFAULT_TASK}"


def static_model(task: str | None, static: str | None) -> StaticModel:
    """--static if given, else artifacts/static/<task>. The model's task is the one `export` recorded; a --task
    that contradicts it is refused rather than served with the wrong head."""
    model = StaticModel.load(static or artifact_dir("static", get_task(task or DEFAULT_TASK).name))
    if task and get_task(task) != model.task:
        raise ErnieDeployError(
            f"{model.root} was exported for task {model.task.name}, not {get_task(task).name}",
            f"drop --task (it is read from the export), or pass --task {model.task.name}",
        )
    return model


def onnx_file(model: StaticModel, onnx: str | None) -> Path:
    """--onnx if given, else the converted model of the static model's task."""
    return Path(onnx or artifact_dir("onnx", model.task.name) / "model.onnx")
