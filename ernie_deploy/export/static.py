"""Dygraph checkpoint -> Paddle static inference model (the stage before ONNX).

Paddle 3 saves PIR programs (`inference.json` + `inference.pdiparams`); a checkpoint that is already a
static model (PIR `.json` or legacy `.pdmodel`) is copied through unchanged.

export.json, beside the model, carries what later stages must agree on: the task, the label names, the
longest input (`max_seq_len`, at most the model's `max_position_embeddings`) and the tokenizer's
`do_lower_case` (also written to tokenizer_config.json beside vocab.txt, where the serving tokenizer reads it);
for a token model, its NER decoding (`ner_decoding`, serving.entities.DECODINGS), which `build` serves.

ERNIE 3.0 checkpoints (`use_task_id`) export with the same two inputs as the others: given no task_type_ids,
paddlenlp's embedding layer adds the row of the config's `task_id` (0) to every token, and that constant
lookup is part of the saved program.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.core.files import atomic_path, write_json
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN, MODEL_INPUTS, TaskSpec
from ernie_deploy.export.heads import KIND_EXPORTS, export_facts
from ernie_deploy.fetch.checkpoints import TOKENIZER_CONFIG, read_model_config, trained_max_seq_len, trained_tokens
from ernie_deploy.fetch.uie import inspect_uie, trained_schema
from ernie_deploy.serving.entities import check_decoding
from ernie_deploy.serving.record_defaults import decoding

PREFIX = "inference"


@dataclass(frozen=True)
class StaticModel:
    """A Paddle inference model plus what serving needs beside it (vocab, and the model's record: core.spec)."""

    root: Path
    model_file: Path  # inference.json (PIR) or *.pdmodel (legacy)
    params_file: Path
    vocab_file: Path
    # What it was exported for, recorded in model.json: later stages need not be told again.
    spec: ModelSpec

    @property
    def task(self) -> TaskSpec:
        return self.spec.task_spec

    @property
    def labels(self) -> list[str]:
        return list(self.spec.labels)

    @property
    def max_seq_len(self) -> int:
        return self.spec.max_seq_len

    @property
    def max_positions(self) -> int | None:
        return self.spec.max_positions

    @property
    def do_lower_case(self) -> bool:
        return self.spec.do_lower_case

    @property
    def ner_decoding(self) -> str | None:
        return self.spec.ner_decoding

    @classmethod
    def load(cls, root: str | Path) -> StaticModel:
        root = Path(root)
        meta = root / "export.json"
        if not meta.exists():
            raise BadCheckpointError(
                f"{root} is not an exported model (no export.json)", "run `ernie-deploy export` first"
            )
        info = json.loads(meta.read_text())  # the file names; the model's facts are its record, model.json
        return cls(
            root, root / info["model_file"], root / info["params_file"], root / "vocab.txt", ModelSpec.read(root)
        )


def label_names_from_config(config: dict) -> list[str]:
    """Label names in id order from a PaddleNLP config; generic names when it carries none."""
    id2label = config.get("id2label") or {}
    num = config.get("num_labels") or config.get("num_classes") or len(id2label)
    if not num:
        raise BadCheckpointError(
            "the checkpoint config has neither id2label nor num_labels",
            "add id2label to config.json, or pass --labels with a JSON list of names",
        )
    return [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(int(num))]


def choose_max_seq_len(requested: int | None, max_positions: int | None, default: int = DEFAULT_MAX_SEQ_LEN) -> int:
    """The longest input to serve, in tokens ([CLS] and [SEP] included): `requested`, else `default` (at most the
    model's positions). A request beyond the model's positions is refused: the position embedding has no row for
    them, and onnxruntime fails on such an input at run time."""
    if requested is None:
        return min(default, max_positions) if max_positions else default
    if requested < 2:
        raise BadOptionsError(
            f"max_seq_len {requested} leaves no room for a token", "use --max-seq-len 2 or more ([CLS] and [SEP])"
        )
    if max_positions and requested > max_positions:
        raise BadOptionsError(
            f"max_seq_len {requested} is more than the model's {max_positions} positions (max_position_embeddings "
            "in its config.json)",
            f"export with --max-seq-len {max_positions} or less; longer texts are truncated to it",
        )
    return requested


def default_max_seq_len(task: TaskSpec, root: str | Path, config: dict) -> int:
    """The length an export takes when not told: the one the checkpoint was trained at, where its training record or
    config says (a model reads best at its own length), else the task's (core.tasks: 128; UIE, Taskflow's 512)."""
    return trained_max_seq_len(root, config) or task.default_max_seq_len


def recorded_decoding(task: TaskSpec, ner_decoding: str | None) -> str | None:
    """The NER decoding an export of `task` records: `ner_decoding`, else the default, for a model with entities;
    None for the others, for which a decoding is refused (before anything is read)."""

    if not task.kind_facts.entities:
        if ner_decoding is not None:
            raise BadOptionsError(
                f"--ner-decoding sets how a token model decodes entities; {task.name} is a {task.kind} task",
                "drop --ner-decoding",
            )
        return None
    return check_decoding(decoding(task, ner_decoding))


def export(
    checkpoint,
    task: TaskSpec,
    out_dir: str | Path,
    labels: list[str] | None = None,
    *,
    max_seq_len: int | None = None,
    ner_decoding: str | None = None,
    name: str | None = None,
    pooling: str | None = None,
    score: str | None = None,
) -> StaticModel:
    """Write a static inference model for `task` from a fetch.Checkpoint into out_dir (atomically).

    max_seq_len: the longest input, in tokens, that later stages tokenize to (default: default_max_seq_len, at most
    the model's max_position_embeddings). ner_decoding: a token model's NER decoding (serving.entities.DECODINGS;
    default constrained), recorded for `build`; "argmax" decodes as PaddleNLP's own pipeline does. name: the model's
    name (default: the task's demo model). The record (model.json) also carries the token length the checkpoint was
    trained on, where the checkpoint says (fetch.checkpoints.TRAINED_TOKENS). pooling (embed models) and score
    (rerank models): what their kind's export reads and records (kinds/<kind>/export.py), refused for other kinds."""
    decoding = recorded_decoding(task, ner_decoding)
    out_dir = Path(out_dir)
    root = Path(checkpoint.root)
    config = read_model_config(checkpoint.config_file) if checkpoint.config_file else {}
    facts = export_facts(task, checkpoint, {"pooling": pooling, "score": score})
    if task.kind_facts.label_head:
        labels = labels or label_names_from_config(config)
    elif task.kind_facts.own_export:
        labels = ()  # its answer is a vector or a score, named by no label
    else:
        # No label head (UIE): the labels are the types it was trained to extract, where its config says, which are
        # also what it answers a request that sends no schema.

        if checkpoint.kind == "dygraph":
            inspect_uie(root)  # a classifier's weights would export as UIE's heads' and answer nonsense
        labels = labels or trained_schema(config)
        facts["schema"] = list(labels) or None
    max_positions = int(config["max_position_embeddings"]) if config.get("max_position_embeddings") else None
    max_seq_len = choose_max_seq_len(max_seq_len, max_positions, default_max_seq_len(task, root, config))
    do_lower_case = checkpoint.do_lower_case
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        if checkpoint.kind == "static":
            model_file = Path(checkpoint.model_file)
            shutil.copy2(model_file, tmp / f"{PREFIX}{model_file.suffix}")
            shutil.copy2(checkpoint.params_file, tmp / f"{PREFIX}.pdiparams")
            model_name = f"{PREFIX}{model_file.suffix}"
        else:
            model_name = _save_static(root, task, tmp / PREFIX, facts)
        shutil.copy2(checkpoint.vocab_file, tmp / "vocab.txt")
        tokenizer_config = {}
        if checkpoint.tokenizer_config_file is not None:
            tokenizer_config = json.loads(Path(checkpoint.tokenizer_config_file).read_text(encoding="utf-8"))
        write_json({**tokenizer_config, "do_lower_case": do_lower_case}, tmp / TOKENIZER_CONFIG)
        write_json({"model_file": model_name, "params_file": f"{PREFIX}.pdiparams"}, tmp / "export.json")
        ModelSpec.new(
            task,
            name,
            labels=tuple(labels),
            max_seq_len=max_seq_len,
            do_lower_case=do_lower_case,
            max_positions=max_positions,
            trained_tokens=trained_tokens(root),
            ner_decoding=decoding,
            **facts,
        ).write(tmp)
    return StaticModel.load(out_dir)


def _save_static(root: Path, task: TaskSpec, prefix: Path, facts: dict) -> str:
    import paddle
    import paddlenlp.transformers as transformers

    paddle.set_device("cpu")
    if task.kind in KIND_EXPORTS:
        model = KIND_EXPORTS[task.kind].layer(root, facts)
    else:
        model = getattr(transformers, task.paddle_class).from_pretrained(str(root))
    model.eval()
    # Both axes dynamic: batch and sequence length vary per request.
    spec = [paddle.static.InputSpec([None, None], "int64", name) for name in MODEL_INPUTS]
    static = paddle.jit.to_static(model, input_spec=spec, full_graph=True)
    paddle.jit.save(static, str(prefix))
    for suffix in (".json", ".pdmodel"):
        if prefix.with_suffix(suffix).exists():
            return prefix.name + suffix
    raise BadCheckpointError(
        f"paddle.jit.save wrote no model file at {prefix}",
        "read paddle's messages above for why; export with the paddlepaddle of the [export] extra, which writes "
        "the .json or .pdmodel file looked for",
    )


class PaddlePredictor:
    """Paddle Inference over a static model: the Paddle-native reference for parity and accuracy."""

    def __init__(self, static: StaticModel, threads: int = 0, mkldnn: bool = False):
        """mkldnn: Paddle's oneDNN kernels on, as PaddleNLP's Taskflow runs on a CPU (benchmarks/uie_paddle.py)."""
        from paddle import inference

        config = inference.Config(str(static.model_file), str(static.params_file))
        config.disable_gpu()
        if mkldnn:
            config.enable_mkldnn()
        if threads:
            config.set_cpu_math_library_num_threads(threads)
        config.disable_glog_info()
        self.predictor = inference.create_predictor(config)
        self.inputs = self.predictor.get_input_names()

    def __call__(self, input_ids, token_type_ids):
        """The first output (the logits, for a classifier)."""
        return self.run(input_ids, token_type_ids)[0]

    def run(self, input_ids, token_type_ids) -> list:
        """Every output, in the model's order."""
        import numpy as np

        feeds = {"input_ids": input_ids, "token_type_ids": token_type_ids}
        for name in self.inputs:
            handle = self.predictor.get_input_handle(name)
            array = np.ascontiguousarray(feeds[name], dtype=np.int64)
            handle.reshape(array.shape)
            handle.copy_from_cpu(array)
        self.predictor.run()
        return [self.predictor.get_output_handle(n).copy_to_cpu() for n in self.predictor.get_output_names()]
