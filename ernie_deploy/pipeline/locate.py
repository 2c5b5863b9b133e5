"""Where a model's artifacts are: found by its model name or task, or given by path. A named model's files live under
its name (artifacts/<stage>/<name>); the demo models under their task's."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.core.paths import artifact_dir
from ernie_deploy.core.tasks import artifact_name as model_folder
from ernie_deploy.core.tasks import check_model_name, get_task
from ernie_deploy.export.static import StaticModel

DEFAULT_TASK = "seq_cls"


def artifact_name(task: str | None, name: str | None) -> str:
    """The folder name of a model's artifacts: its name (see core.tasks.artifact_name), else its task's."""
    return model_folder(check_model_name(name)) if name else get_task(task or DEFAULT_TASK).name


def static_model(task: str | None, static: str | Path | None, name: str | None = None) -> StaticModel:
    """`static` if given, else artifacts/static/<name or task>. The model's task is the one `export` recorded; a
    `task` that contradicts it is refused rather than served with the wrong head."""
    path = Path(static or artifact_dir("static", artifact_name(task, name)))
    if name and not static and not path.exists():
        raise BadCheckpointError(
            f"no exported model named {name!r} (looked in {path})",
            f"export it first: `ernie-deploy export --model {name} ...`, or pass --static DIR",
        )
    model = StaticModel.load(path)
    if task and get_task(task).name != model.task.name:
        raise BadOptionsError(
            f"{model.root} was exported for task {model.task.name}, not {get_task(task).name}",
            f"drop --task (it is read from the export), or pass --task {model.task.name}",
        )
    return model


def onnx_file(model: StaticModel, onnx: str | Path | None, name: str | None = None) -> Path:
    """`onnx` if given, else the converted model of this model name (or of the static model's task)."""
    return Path(onnx or artifact_dir("onnx", artifact_name(model.task.name, name)) / "model.onnx")
