"""Lint a Triton model repository before serving: the mistakes that otherwise surface only as a model that
fails to load (or loads and then fails every request) in the server log."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadRepositoryError, ErnieDeployError
from ernie_deploy.core.host import gpu_count
from ernie_deploy.core.spec import REBUILD, SPEC_FILE, ModelSpec
from ernie_deploy.core.tasks import TASK_PARAMETER
from ernie_deploy.repository.check_onnx import check_onnx, graph_serving_models, onnx_file
from ernie_deploy.repository.configs import parse
from ernie_deploy.repository.layouts import entry_record
from ernie_deploy.repository.options import ORT_GRAPH_LEVELS
from ernie_deploy.repository.problem import Problem
from ernie_deploy.repository.served import served_models, served_steps
from ernie_deploy.repository.unmade import entry_unmade, files_named
from ernie_deploy.repository.versions import VersionedModel
from ernie_deploy.serving.entities import DECODING_PARAMETER, DECODINGS
from ernie_deploy.serving.multi_label import THRESHOLDS_FILE, read_thresholds


def _versions(model_dir: Path) -> list[Path]:
    return sorted((p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def _load(model_dir: Path) -> tuple[mc.ModelConfig | None, Problem | None]:
    path = model_dir / "config.pbtxt"
    name = model_dir.name
    if not path.is_file():
        return None, Problem(name, "no config.pbtxt", "regenerate the repository with `ernie-deploy build`")
    try:
        config = parse(path.read_text(encoding="utf-8"))
    except (text_format.ParseError, UnicodeDecodeError) as exc:
        return None, Problem(name, f"config.pbtxt does not parse: {exc}", "fix the syntax or rebuild the repository")
    return config, None


def _check_ensemble(name: str, config: mc.ModelConfig, configs: dict[str, mc.ModelConfig]) -> list[Problem]:
    problems = []
    available = {t.name for t in config.input}
    for step in config.ensemble_scheduling.step:
        target = configs.get(step.model_name)
        if target is None:
            problems.append(
                Problem(
                    name,
                    f"step model {step.model_name!r} is not in the repository",
                    f"add {step.model_name}/ or fix the step's model_name",
                )
            )
        if target is not None and step.model_version > 0:
            loaded = list(target.version_policy.specific.versions)
            if loaded and step.model_version not in loaded:
                problems.append(
                    Problem(
                        name,
                        f"step {step.model_name} is pinned to version {step.model_version}, which its "
                        f"version_policy does not load (it loads {loaded})",
                        f"add {step.model_version} to {step.model_name}'s version_policy, or roll out with "
                        "`ernie-deploy rollout`, which keeps the two in step",
                    )
                )
        for key, value in step.input_map.items():
            if value not in available:
                problems.append(
                    Problem(
                        name,
                        f"step {step.model_name} reads {value!r}, which is neither an "
                        "ensemble input nor an earlier step's output",
                        "map it to an ensemble input or an earlier step's output_map value",
                    )
                )
            if target is not None and key not in {t.name for t in target.input}:
                problems.append(
                    Problem(
                        name,
                        f"step {step.model_name} input_map key {key!r} is not an input of {step.model_name}",
                        "use the step model's input names as keys",
                    )
                )
        for key, value in step.output_map.items():
            if target is not None and key not in {t.name for t in target.output}:
                problems.append(
                    Problem(
                        name,
                        f"step {step.model_name} output_map key {key!r} is not an output of {step.model_name}",
                        "use the step model's output names as keys",
                    )
                )
            available.add(value)
    for tensor in config.output:
        if tensor.name not in available:
            problems.append(
                Problem(
                    name,
                    f"ensemble output {tensor.name!r} is produced by no step",
                    "map a step output to it in output_map",
                )
            )
    return problems


def _check_python(name: str, config: mc.ModelConfig, versions: list[Path]) -> list[Problem]:
    problems = []
    file_name = config.default_model_filename or "model.py"
    for version in versions:
        path = version / file_name
        if not path.is_file():
            problems.append(
                Problem(
                    name,
                    f"no {version.name}/{file_name} for the python backend",
                    "rebuild the repository with `ernie-deploy build`",
                )
            )
            continue
        # compile, never import: the module needs triton_python_backend_utils, which only the server has
        try:
            compile(path.read_text(encoding="utf-8"), str(path), "exec")
        except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
            problems.append(
                Problem(
                    name, f"{version.name}/{file_name} does not compile: {exc}", f"fix {path} or rebuild the repository"
                )
            )
        for needed in sorted(files_named(config)):
            if not (version / needed).is_file():
                problems.append(
                    Problem(
                        name,
                        f"no {version.name}/{needed}, which its config names",
                        "rebuild the model it belongs to (`ernie-deploy build --model NAME`, after its convert)",
                    )
                )
        problems.extend(_check_thresholds(name, version))
    return problems


def _check_thresholds(name: str, version: Path) -> list[Problem]:
    """A multi-label postprocess's thresholds.json must fit its labels.json, or the step does not load."""
    import json

    if not (version / THRESHOLDS_FILE).is_file() or not (version / "labels.json").is_file():
        return []
    try:
        read_thresholds(version / THRESHOLDS_FILE, json.loads((version / "labels.json").read_text(encoding="utf-8")))
    except ErnieDeployError as exc:
        return [Problem(name, exc.problem, exc.fix or "rebuild the repository")]
    except (UnicodeDecodeError, ValueError) as exc:
        return [Problem(name, f"{version.name}/labels.json is not JSON: {exc}", "rebuild the repository")]
    return []


def _check_ort_options(name: str, config: mc.ModelConfig) -> list[Problem]:
    """ORT backend settings that the backend ignores without a word."""
    problems = []
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    groups = config.instance_group
    if accelerators and groups and all(g.kind == mc.ModelInstanceGroup.KIND_CPU for g in groups):
        # the backend reads GPU accelerators only for GPU (or AUTO) instances
        problems.append(
            Problem(
                name,
                f"gpu_execution_accelerator {[a.name for a in accelerators]} is ignored: "
                "every instance group is KIND_CPU",
                "build with --device gpu, or drop --trt-fp16",
            )
        )
    level = config.optimization.graph.level
    if config.platform == "onnxruntime_onnx" and level not in ORT_GRAPH_LEVELS.values():
        problems.append(
            Problem(
                name,
                f"optimization graph level {level} is not one the ORT backend knows (it runs "
                "all optimizations instead)",
                "use -1 (basic), 1 (extended) or 2 (disabled), or `build --ort-graph-level`",
            )
        )
    return problems


def _check_ner_decoding(name: str, config: mc.ModelConfig) -> list[Problem]:
    """A token postprocess's NER decoding must be one it knows, or the step does not load."""

    if DECODING_PARAMETER not in config.parameters:
        return []
    value = config.parameters[DECODING_PARAMETER].string_value
    if value in DECODINGS:
        return []
    return [
        Problem(
            name,
            f"parameter {DECODING_PARAMETER} is {value!r}, not one of {', '.join(DECODINGS)}",
            f"rebuild the model with `ernie-deploy build --ner-decoding {DECODINGS[0]}` (or {DECODINGS[1]})",
        )
    ]


def ner_decodings(path: str | Path) -> dict[str, str]:
    """Each token model served from the repository at `path` -> the NER decoding its postprocess runs (the step that
    answers the entities: the ensemble's last step, or a fused model itself), as its config says."""

    root, out = Path(path), {}
    steps = served_steps(root)
    for name, model in served_models(root).items():
        if not model.kind_facts.entities:
            continue
        config, _ = _load(root / steps[name][-1])
        parameters = config.parameters if config is not None else {}
        out[name] = parameters[DECODING_PARAMETER].string_value if DECODING_PARAMETER in parameters else "(none)"
    return out


def _check_record(model_dir: Path, config: mc.ModelConfig) -> list[Problem]:
    """A model users call carries its record in this version's format (an older repository is rebuilt, not read
    through fallbacks), and it is the record of the version it serves (`<name>/<version>/model.json`)."""

    name = model_dir.name
    if config.platform == "ensemble" and TASK_PARAMETER not in config.parameters:
        return [Problem(name, "an ensemble that names no task: built by an older ernie-deploy", REBUILD)]
    try:
        record = entry_record(name, config)
        if record is None:
            return []
        serving = VersionedModel.read(model_dir.parent, name).serving_version()
        if not (model_dir / str(serving) / SPEC_FILE).is_file():
            return [Problem(name, f"version {serving}, which it serves, has no record ({SPEC_FILE})", REBUILD)]
        if record != ModelSpec.read(model_dir / str(serving)):
            return [
                Problem(
                    name,
                    f"the record its config carries is not that of version {serving}, which it serves "
                    f"({name}/{serving}/{SPEC_FILE})",
                    f"put the version live again: ernie-deploy rollout --model {name} --to {serving}",
                )
            ]
    except ErnieDeployError as exc:
        return [Problem(name, exc.problem, exc.fix or REBUILD)]
    return []


def _check_model(
    model_dir: Path, config: mc.ModelConfig, configs: dict[str, mc.ModelConfig], gpus: int, graph_models: set[str]
) -> list[Problem]:
    name = model_dir.name
    problems = []
    # an empty name is filled in with the folder name by Triton
    if config.name and config.name != name:
        problems.append(
            Problem(
                name,
                f"config name {config.name!r} differs from the folder name",
                f'set name: "{name}" or rename the folder',
            )
        )
    versions = _versions(model_dir)
    if not versions:
        # Triton loads no version of a model without one, ensembles included
        problems.append(Problem(name, "no numeric version folder", f"create {name}/1/ with the model files"))
    missing = sorted(set(config.version_policy.specific.versions) - {int(v.name) for v in versions})
    if missing:
        problems.append(
            Problem(
                name,
                f"version_policy loads versions {missing}, which have no folder",
                f"build them (`ernie-deploy build --model NAME --version {missing[0]}`) or take them out of the policy",
            )
        )
    file_name = onnx_file(config, graph_models)
    if file_name:
        for version in versions:
            problems.extend(check_onnx(name, config, version, file_name))
    if config.platform == "ensemble":
        problems.extend(_check_ensemble(name, config, configs))
    if config.backend == "python":
        problems.extend(_check_python(name, config, versions))
    if gpus == 0 and any(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in config.instance_group):
        problems.append(
            Problem(
                name,
                "KIND_GPU instance group on a machine with no GPU",
                "rebuild with `ernie-deploy build --device cpu` (KIND_CPU), or check and serve "
                "this repository on a GPU machine",
            )
        )
    problems.extend(_check_ort_options(name, config))
    problems.extend(_check_ner_decoding(name, config))
    problems.extend(_check_record(model_dir, config))
    for warmup in config.model_warmup:
        for input_name, item in warmup.inputs.items():
            if item.input_data_file and not (model_dir / "warmup" / item.input_data_file).is_file():
                problems.append(
                    Problem(
                        name,
                        f"warmup {warmup.name!r} input {input_name!r}: warmup/{item.input_data_file} is missing",
                        "rebuild the repository (`build` writes the warmup files)",
                    )
                )
    return problems


def model_dirs(path: str | Path) -> list[Path]:
    """The model folders of a repository (hidden folders are not models)."""
    return sorted(p for p in Path(path).iterdir() if p.is_dir() and not p.name.startswith("."))


def check_repository(path: str | Path) -> list[Problem]:
    """Every problem found in the model repository at `path`, one Problem each; an empty list when clean."""
    root = Path(path)
    if not root.is_dir():
        raise BadRepositoryError(f"{root} is not a directory", "pass the model repository folder")
    dirs = model_dirs(root)
    if not dirs:
        return [Problem(str(root), "no model folders", "build the repository with `ernie-deploy build`")]
    problems, configs = [], {}
    for model_dir in dirs:
        config, problem = _load(model_dir)
        if problem:
            problems.append(problem)
        else:
            configs[model_dir.name] = config
    gpus = gpu_count()
    graph_models = graph_serving_models(configs)
    for model_dir in dirs:
        # An entry that holds its config alone was never made: not a fault of its files, but a model to make, which
        # `ernie-deploy check` names with its command (repository.unmade) and no server loads.
        if model_dir.name in configs and not entry_unmade(model_dir, configs[model_dir.name]):
            problems.extend(_check_model(model_dir, configs[model_dir.name], configs, gpus, graph_models))
    return problems
