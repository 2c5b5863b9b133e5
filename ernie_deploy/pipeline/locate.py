"""Where a model's artifacts are: found by its model name or task, or given by path. A named model's files live under
its name (artifacts/<stage>/<name>); the demo models under their task's. What task a fetched checkpoint is: the one
`fetch` recorded beside it, else the one the class its config names serves."""

from __future__ import annotations

import json
from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.core.paths import artifact_dir
from ernie_deploy.core.tasks import TASKS, TaskSpec, check_model_name, get_task, tasks_of_heads
from ernie_deploy.core.tasks import artifact_name as model_folder
from ernie_deploy.export.static import StaticModel
from ernie_deploy.fetch.checkpoints import Checkpoint, training_record

DEFAULT_TASK = "seq_cls"
# Beside a fetched checkpoint's files (artifacts/checkpoints/<name>/): the task `fetch` was given, so that a later
# stage told only the model's name exports it for that task.
FETCH_RECORD = "fetched.json"


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


def recorded_task(folder: str | Path) -> TaskSpec | None:
    """The task the checkpoint in `folder` was fetched for (FETCH_RECORD), else trained for (a bootstrap's training
    record); None where neither says."""
    name = _fetch_record(Path(folder)).get("task") or training_record(folder).get("task")
    return get_task(name) if name else None


def _fetch_record(folder: Path) -> dict:
    path = folder / FETCH_RECORD
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        record = None
    if not isinstance(record, dict) or record.get("task") not in TASKS:
        raise BadCheckpointError(
            f"{path} does not name a task (one of {', '.join(sorted(TASKS))})",
            f"fetch the checkpoint again with --task T, or delete {path.name} and pass --task T to each stage",
        )
    return record


def checkpoint_task(task: str | None, checkpoint: Checkpoint) -> TaskSpec:
    """The task to export `checkpoint` for: `task` where given, else the one recorded beside it (recorded_task), else
    the one the class its config names serves (`architectures`), else DEFAULT_TASK. A `task` that contradicts the
    record or the class is refused, naming both: exported so, the model would answer nonsense or fail later."""
    recorded = recorded_task(checkpoint.root)
    if task is None:
        return recorded or _task_of_heads(checkpoint)
    given = get_task(task)
    if recorded is not None and recorded is not given:
        raise BadOptionsError(
            f"{checkpoint.root} was fetched as a {recorded.name} model ({FETCH_RECORD}), not a {given.name} model",
            f"drop --task (the recorded {recorded.name} is read), or fetch it again with --task {given.name}",
        )
    check_heads(given, checkpoint)
    return given


def check_heads(task: TaskSpec, checkpoint: Checkpoint) -> None:
    """Refuse `task` for a checkpoint whose config names a class only other tasks serve; one that names none, or one
    no task serves, is let through (the export names what it cannot read)."""
    fits = tasks_of_heads(checkpoint.heads)
    if not fits or task in fits:
        return
    names = " or ".join(fit.name for fit in fits)
    raise BadOptionsError(
        f"{checkpoint.root} holds {', '.join(checkpoint.heads)} (the architectures of its "
        f"{Path(checkpoint.config_file).name}), a {names} model, not a {task.name} model ({task.paddle_class})",
        f"pass {' or '.join(f'--task {fit.name}' for fit in fits)}, or drop --task to read it from the checkpoint; "
        f"a {task.name} model is a checkpoint saved from paddlenlp's {task.paddle_class}",
    )


def _task_of_heads(checkpoint: Checkpoint) -> TaskSpec:
    """The task the checkpoint's class serves; DEFAULT_TASK where its config names none, or where that class is
    DEFAULT_TASK's too (a label per text, a pair or a set of labels all load as ErnieForSequenceClassification)."""
    fits = tasks_of_heads(checkpoint.heads)
    default = get_task(DEFAULT_TASK)
    if not fits or default in fits:
        return default
    if len(fits) == 1:
        return fits[0]
    names = ", ".join(fit.name for fit in fits)
    raise BadOptionsError(
        f"{checkpoint.root} holds {', '.join(checkpoint.heads)}, which tasks {names} all serve",
        f"pass --task with the one it is: {names}",
    )
