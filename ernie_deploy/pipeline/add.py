"""One checkpoint to one named, served model, beside the models a repository holds: what `scripts/convert.sh --task T
--model NAME --source DIR|URL` runs (`ernie-deploy add`).

`check_new_model` refuses bad input by name before anything is written: a folder that is not a checkpoint (saying
what it lacks), a checkpoint whose head is not the task's, a URL without its sha256, a name that is not usable or
that another model's step already takes. `add_model` then runs fetch, export, convert and build in one process,
over only the dataset of the model's task (convert's parity gate reads its test split, build's reference profile its
dev split) and trains nothing for a checkpoint of one's own; `build` leaves every other model byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.core.io import wire
from ernie_deploy.core.tasks import DEMO_MODELS, TASKS, TOKENIZER_STEP, TaskSpec, check_model_name, get_task
from ernie_deploy.export.heads import export_facts
from ernie_deploy.export.static import choose_max_seq_len, label_names_from_config
from ernie_deploy.export.static_probe import static_logits_rank
from ernie_deploy.fetch.archives import archive_format
from ernie_deploy.fetch.checkpoints import inspect_checkpoint, is_url
from ernie_deploy.fetch.datasets import prepare
from ernie_deploy.fetch.downloads import normalize_sha256
from ernie_deploy.pipeline.build import build_models, resolve_build_options
from ernie_deploy.pipeline.convert import convert_model
from ernie_deploy.pipeline.options import ConvertOptions, ExportOptions, FetchOptions
from ernie_deploy.pipeline.stages import export_model, fetch_model
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.repository.served import Existing, served_model, served_models

Log = Callable[[str], None]


@dataclass(frozen=True)
class NewModel:
    """A model to add, checked: its task, its name, where its checkpoint comes from and the repository it joins."""

    task: TaskSpec
    name: str
    fetch: FetchOptions
    repository: Path
    export: ExportOptions = ExportOptions()
    convert: ConvertOptions = ConvertOptions()
    build: BuildOptions = BuildOptions()

    def client_command(self) -> str:
        """The client command that calls it, once a server serves its repository (one flag per input it takes)."""
        flags = " ".join(f'--{spec.name.replace("_", "-")} "TEXT"' for spec in self.task.inputs)
        return f"python clients/{self.task.name}_grpc_client.py --model {self.name} {flags}"

    def next_steps(self) -> str:
        """What to run next: the server on the repository, then the client."""
        return (
            f"{self.name} is served from {self.repository}/ beside its other models. Serve and call it:\n"
            f"  source .venv/bin/activate\n"
            f"  tritonserver --model-repository={self.repository}     # until Ctrl-C; in another shell:\n"
            f"  {self.client_command()}"
        )


_PER = {1: "a label per text", 2: "a label per token"}


def check_head(task: TaskSpec, checkpoint) -> None:
    """Refuse a checkpoint whose head is not the one `task` serves (a tagger converted as a classifier exports and
    converts, then answers nonsense): a dygraph checkpoint by the class its config names (one that names none is let
    through), a static model by the rank of its logits."""
    if checkpoint.kind == "static":
        _check_static_head(task, checkpoint)
        return
    heads = checkpoint.heads
    if not heads or set(task.heads) & set(heads):
        return
    fits = sorted(name for name, spec in TASKS.items() if set(spec.heads) & set(heads))
    fix = (
        f"use {' or '.join(f'--task {name}' for name in fits)}, which serves that head"
        if fits
        else f"convert a checkpoint saved from {task.paddle_class} (paddlenlp's save_pretrained of that class)"
    )
    raise BadCheckpointError(
        f"{checkpoint.root} holds the head {', '.join(heads)} (its {Path(checkpoint.config_file).name} says), and "
        f"--task {task.name} serves the head {' or '.join(task.heads)}",
        fix,
    )


def _check_static_head(task: TaskSpec, checkpoint) -> None:

    try:
        rank = static_logits_rank(checkpoint.model_file, checkpoint.params_file)
    except Exception as exc:  # Paddle's own errors for a program it cannot run: named, with the file
        raise BadCheckpointError(
            f"Paddle Inference cannot run the static model {checkpoint.model_file}: {str(exc).strip()[:300]}",
            "export it again with paddle.jit.save (both inputs, input_ids and token_type_ids, of shape [None, None])",
        ) from None
    if rank == task.logits_rank:
        return
    fits = sorted(name for name, spec in TASKS.items() if spec.logits_rank == rank)
    raise BadCheckpointError(
        f"{checkpoint.root} is a static model that answers {_PER.get(rank, f'logits of rank {rank} per text')}, and "
        f"--task {task.name} reads {_PER[task.logits_rank]}",
        f"use {' or '.join(f'--task {name}' for name in fits)}" if fits else "export a classifier or a tagger",
    )


def check_labels(task: TaskSpec, checkpoint, export: ExportOptions) -> None:
    """Refuse a checkpoint whose label names cannot be read (its config has neither id2label nor num_labels) unless
    --labels names them; a model with no label head (UIE) has none to read."""

    if task.kind_facts.label_head and not export.labels:
        label_names_from_config(checkpoint.model_config())


def check_max_seq_len(checkpoint, export: ExportOptions) -> None:
    """Refuse a --max-seq-len the checkpoint's positions cannot hold, as export does, before anything is written."""

    if export.max_seq_len is not None:
        choose_max_seq_len(export.max_seq_len, checkpoint.max_positions)


def check_checkpoint(task: TaskSpec, checkpoint, export: ExportOptions) -> None:
    """What a checkpoint found on disk must be to serve as `task`: its head the task's, its labels readable, its
    positions enough for --max-seq-len, and for a kind whose export reads it with its own code, a form that code
    reads, under the options it is given (--pooling, --score)."""
    check_head(task, checkpoint)
    check_labels(task, checkpoint, export)
    check_max_seq_len(checkpoint, export)
    export_facts(task, checkpoint, {"pooling": export.pooling, "score": export.score})


def _check_source(task: TaskSpec, fetch: FetchOptions, export: ExportOptions) -> None:

    if fetch.bootstrap:
        return
    if not fetch.source:
        raise BadOptionsError(
            "no checkpoint given", "pass --source DIR (a checkpoint folder) or --source URL --sha256 HEX"
        )
    if is_url(fetch.source):
        if not fetch.sha256:
            raise BadOptionsError(
                f"the checkpoint URL {fetch.source} has no pinned sha256",
                "pass its sha256: --sha256 HEX (`sha256sum FILE` on a trusted copy); downloads are always verified",
            )
        normalize_sha256(fetch.sha256)
        return  # checked once downloaded, before export (add_model)
    path = Path(fetch.source).expanduser()
    if path.is_dir():
        check_checkpoint(task, inspect_checkpoint(path), export)  # names what a folder that is no checkpoint lacks
    elif path.is_file():
        if archive_format(path) is None:
            raise BadCheckpointError(
                f"{path} is neither a checkpoint folder nor an archive (.tar.gz, .tgz, .tar, .zip)",
                "pass the folder model.save_pretrained wrote, or an archive of it",
            )
    else:
        raise BadCheckpointError(
            f"no such checkpoint: {path}",
            "pass a checkpoint folder, an archive of one, or an http(s) URL with --sha256",
        )


def _check_name(task: TaskSpec, name: str) -> None:
    """Names that belong to something else: a task's name is the folder of its demo model's artifacts, a demo model's
    name is that task's, and the shared tokenizer steps take theirs."""
    check_model_name(name)
    demo = {model: task_name for task_name, model in DEMO_MODELS.items()}
    if name in TASKS:
        raise BadOptionsError(
            f"model name {name!r} names the folders of the files of demo model {DEMO_MODELS[name]} "
            f"(artifacts/<stage>/{name})",
            "choose another --model",
        )
    if name in demo and demo[name] != task.name:
        raise BadOptionsError(
            f"model name {name!r} is the {demo[name]} demo model's, and this model is a {task.name} model",
            "choose another --model",
        )
    if name == TOKENIZER_STEP or name.startswith(f"{TOKENIZER_STEP}_"):
        raise BadOptionsError(f"model name {name!r} is kept for the shared tokenizer steps", "choose another --model")


def _check_name_free(name: str, repository: Path) -> None:
    """Refuse a name some other model's entry already takes: a step of another model (`news_model` beside `news`, a
    shared tokenizer), or one whose steps would take another model's entries. The model's own name is free: adding
    it again replaces it."""

    if not repository.is_dir():
        return
    existing = Existing.read(repository)
    served = set(existing.served())
    wanted = {name, f"{name}_model", f"{name}_postprocess"}  # what its layouts may name its entries
    for model in sorted(served - {name}):
        taken = wanted & existing.members(model)
        if taken:
            raise BadOptionsError(
                f"model name {name!r} collides with {', '.join(sorted(taken))} of model {model!r} in {repository}",
                "choose another --model",
            )
    if name in existing.configs and name not in served:
        raise BadOptionsError(
            f"model name {name!r} is taken by an entry of {repository} that no model is served as (a shared step)",
            "choose another --model",
        )


def check_new_model(
    task: str,
    name: str,
    fetch: FetchOptions,
    repository: str | Path,
    *,
    export: ExportOptions | None = None,
    convert: ConvertOptions | None = None,
    build: BuildOptions | None = None,
) -> NewModel:
    """The request checked before anything is written: the task, the name, the checkpoint (a folder is inspected:
    its head and its labels), the name's place in the repository, and every stage's options."""

    spec = get_task(task)
    export, convert, build = export or ExportOptions(), convert or ConvertOptions(), build or BuildOptions()
    _check_name(spec, name)
    if fetch.budget is not None and not fetch.bootstrap:
        raise BadOptionsError("--budget sets how long a bootstrap model trains", "drop --budget with --source")
    if export.labels and not Path(export.labels).is_file():
        raise BadOptionsError(f"--labels {export.labels} does not exist", "give a JSON file listing the label names")
    _check_source(spec, fetch, export)
    repository = Path(repository)
    _check_name_free(name, repository)
    convert.check(spec, name)
    build = resolve_build_options(build, repository)
    wire(spec, build.io, name)
    return NewModel(spec, name, fetch, repository, export, convert, build)


def add_model(new: NewModel, *, log: Log = print) -> None:
    """Fetch, export, convert and build `new` (checked by check_new_model) into its repository. A checkpoint that
    came as an archive or a URL is checked as a folder is once unpacked, before export."""

    task, name = new.task.name, new.name
    replaced = served_models(new.repository).get(name) if new.repository.is_dir() else None
    if replaced is not None:
        log(f"{name}: replaces the {replaced.task} model of that name in {new.repository}")
    if new.fetch.bootstrap or not (new.convert.parity_data or new.convert.skip_parity):
        # The task's data: what a bootstrap trains on, and the texts the parity gate runs unless given its own.
        log(f"{new.task.dataset}: {prepare(new.task.dataset)}")
    fetched = fetch_model(task, name, new.fetch, log=log)
    if not new.fetch.bootstrap:
        check_checkpoint(new.task, inspect_checkpoint(fetched.path), new.export)
    export_model(task, name, new.export, log=log)
    convert_model(name, new.convert, log=log)
    built = build_models([name], new.build, new.repository, log=log)
    served = served_model(new.repository, name)
    log(f"{name}: {task} model in {new.repository}, layout {served.layout}, model step {built.options.runtime}")
