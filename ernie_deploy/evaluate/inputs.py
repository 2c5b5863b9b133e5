"""One model's files and test texts (ModelInputs), and what the served model must answer for them: what the in-process
rows of `bench` and `tune` run, what the soaks check every answer against."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError, BadDataError
from ernie_deploy.core.paths import artifact_dir
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TaskSpec, artifact_name
from ernie_deploy.evaluate.offline import served_predictions
from ernie_deploy.export.static import StaticModel
from ernie_deploy.fetch.data import data_dir, read_split_file, split_file


@dataclass
class ModelInputs:
    """One model's record (under the name it is served by), its files and texts: what the in-process rows run, and
    what the repositories are built from."""

    model: ModelSpec
    onnx: Path
    static: StaticModel  # vocab and the Paddle model
    texts: list[str]

    @property
    def task(self) -> TaskSpec:
        return self.model.task_spec

    @property
    def name(self) -> str:
        return self.model.name

    @classmethod
    def load(
        cls,
        name: str,
        *,
        static: str | Path | None = None,
        onnx: str | Path | None = None,
        data: str | Path | None = None,
        max_texts: int | None = None,
    ) -> ModelInputs:
        """Model `name`'s artifacts (artifacts/static/<folder>, artifacts/onnx/<folder>/model.onnx; see
        core.tasks.artifact_name) and the non-blank texts of its task's test split, unless given; the first
        `max_texts` texts only, if set."""
        folder = artifact_name(name)
        exported = StaticModel.load(static or artifact_dir("static", folder))
        onnx_path = Path(onnx or artifact_dir("onnx", folder) / "model.onnx")
        if not onnx_path.exists():
            raise BadCheckpointError(f"no ONNX model at {onnx_path}", f"run `ernie-deploy convert --model {name}`")
        model = replace(exported.spec, name=name)
        return cls(model, onnx_path, exported, cls.texts_of(model.task_spec, max_texts, data))

    @staticmethod
    def texts_of(task: TaskSpec, max_texts: int | None = None, data: str | Path | None = None) -> list:
        """The non-blank texts (or pairs, both texts non-blank) of a split file (default: the task's test split),
        the first `max_texts` if set."""

        data = Path(data or split_file(data_dir(task.dataset), "test", task.split_format))
        if not data.exists():
            raise BadDataError(f"no test texts at {data}", "run `ernie-deploy fetch-data`")
        texts = [
            t for t in read_split_file(data)[0] if all(part.strip() for part in (t if isinstance(t, tuple) else (t,)))
        ]
        return texts[:max_texts] if max_texts else texts


def reference_predictions(inputs: ModelInputs, texts: list[str], model: ModelSpec | None = None) -> list:
    """What the served model must answer for `texts`: in-process ONNX with the serving tokenizer and the
    postprocess logic, read as served (`model`: the served model's record; default: the artifacts' record, as
    `build` serves it by default)."""

    return served_predictions(model or inputs.model, inputs.onnx, inputs.static.vocab_file, texts)
