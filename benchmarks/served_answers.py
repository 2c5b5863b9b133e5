"""Every served answer, byte for byte: what the models of a repository answer a fixed set of texts over gRPC, recorded
so that two checkouts (before and after a change that promises the same answers) can be compared exactly.

    python -m benchmarks.served_answers build --out ROOT [--inputs DIR]     # the repositories below, into ROOT/<name>
    python -m benchmarks.served_answers build --out ROOT --print            # the commands `build` runs, as a script
    python -m benchmarks.served_answers collect --repository DIR --out FILE.json
    python -m benchmarks.served_answers collect --root ROOT --out-dir DIR   # every repository in ROOT: DIR/<name>.json
    python -m benchmarks.served_answers compare A.json B.json               # exit 0: identical; 1: each difference
    python -m benchmarks.served_answers compare DIR_A DIR_B                 # every <name>.json of both folders

Run from the root of the checkout under test with PYTHONPATH set to it: the server's python models import the
`ernie_deploy` the collector imports (its path is recorded with the answers, as `ernie_deploy`).

What `build` makes, from the five demo checkpoints (demo/<task>) and one ERNIE 3.0 nano-shaped seq_cls model (random
weights, fetch.shapes), every step on the python runtime so that a machine with the ORT backend builds the same
layouts:

    default      the five demo models, `news_nano`, and `uie_people` (the uie model built with a default schema of
                 its own), each in the layout `auto` picks
    ensemble     the four but uie, tokenizer -> model -> postprocess steps wired by an ensemble
    graph        seq_cls and pair_cls with the postprocess in the ONNX graph
    tim          the four but uie with the tokenizer in the model step (tokenizer-in-model)
    long         token_cls reading long texts in sentence windows, `ner_sliding` in sliding windows,
                 `ner_small_windows` in windows of 32 tokens, `ner_head` reading the head alone, seq_cls reading head
                 and tail
    paddlenlp    seq_cls, token_cls and pair_cls answering in PaddleNLP's pipeline tensors (INPUT / label, confidence,
                 OUTPUT)
    classic      the four but uie in the fixed-shape baseline layout (every text padded to max_seq_len, no batching)

`build` exports and converts each model once into --inputs (ERNIE_DEPLOY_ARTIFACTS for every command, with the
datasets under <inputs>/data): a later `build` from another checkout finds the static and ONNX models there and only
builds the repositories, so both checkouts serve the same ONNX files. Pass a fresh --inputs (with data/ linked in) to
export and convert with the checkout under test instead.

`collect` reads nothing of ernie_deploy but the server starter (server.process.TritonServer): the models users call are
those whose config names a task (parameter `task`), their inputs and outputs come from the server's metadata, and the
texts from the prepared splits under artifacts/data. Each model gets the first 200 test texts of its task's split,
edge texts (a text far past any max_seq_len, one character, mixed scripts and emoji, whitespace, an empty text), one
batched request of eight texts, and for an extraction model 20 of the texts and the long one again with an explicit
schema, and one with a relation schema. Every output
the metadata lists is asked for (those answered only on request included), and each is recorded as the raw bytes the
server sent, with dtype and shape; a refused request is recorded as its status and message, which must match too.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import ernie_deploy
from benchmarks.served_answers_build import build, make_shape
from benchmarks.served_answers_texts import requests_for
from ernie_deploy.cli.arguments import exact_parser
from ernie_deploy.core.errors import (
    BadOptionsError,
    BadRepositoryError,
    ErnieDeployError,
    ServerNotReadyError,
)
from ernie_deploy.server.process import TritonServer

START_SECONDS = 900
FORMAT = 1
# --------------------------------------------------------------------------------------------------------------------
# Asking the server


def _digest(items: list[dict]) -> str:
    return hashlib.sha256(json.dumps(items, ensure_ascii=False, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def _tensor(name: str, datatype: str, shape: list[int], items: list[dict]):
    import numpy as np
    from tritonclient.grpc import InferInput

    # A batching model lists [-1, 1] (the batch first); one without batching lists the item's dims alone.
    values = np.array([item[name].encode("utf-8") for item in items], dtype=np.object_)
    dims = [len(items) if d == -1 and k == 0 else (1 if d == -1 else d) for k, d in enumerate(shape)]
    if len(items) > 1 and (not dims or dims[0] != len(items)):
        raise BadRepositoryError(
            f"input {name} has shape {shape}: no batch dimension to send {len(items)} texts in",
            "send the texts one per request",
        )
    tensor = InferInput(name, dims, datatype)
    tensor.set_data_from_numpy(values.reshape(dims))
    return tensor


def ask(client, model: str, metadata: dict, items: list[dict]) -> dict:
    """One request's answer: every output as base64 of its raw bytes with dtype and shape, or the refusal."""
    from tritonclient.grpc import InferRequestedOutput
    from tritonclient.utils import InferenceServerException

    tensors = [
        _tensor(i["name"], i["datatype"], i["shape"], items) for i in metadata["inputs"] if i["name"] in items[0]
    ]
    asked = [InferRequestedOutput(o["name"]) for o in metadata["outputs"]]
    try:
        result = client.infer(model, tensors, outputs=asked)
    except InferenceServerException as exc:
        return {"inputs": _digest(items), "error": {"status": exc.status(), "message": exc.message()}}
    response = result.get_response()
    outputs = {}
    for tensor, raw in zip(response.outputs, response.raw_output_contents):
        outputs[tensor.name] = {
            "dtype": tensor.datatype,
            "shape": list(tensor.shape),
            "bytes": base64.b64encode(raw).decode("ascii"),
        }
    return {"inputs": _digest(items), "outputs": outputs}


def _metadata(client, name: str) -> dict:
    meta = client.get_model_metadata(name)
    config = client.get_model_config(name).config
    optional = {i.name for i in config.input if i.optional}
    return {
        "inputs": [
            {"name": i.name, "datatype": i.datatype, "shape": list(i.shape), "optional": i.name in optional}
            for i in meta.inputs
        ],
        "outputs": [{"name": o.name, "datatype": o.datatype, "shape": list(o.shape)} for o in meta.outputs],
        "versions": list(meta.versions),
        # what runs it: an ensemble's steps in order, or the one backend (a fused python model)
        "layout": [step.model_name for step in config.ensemble_scheduling.step] or [config.backend or config.platform],
    }


def served_entries(client) -> dict[str, dict]:
    """The models users call, by name: the ready ones whose config names their task, with that task and record."""
    entries = {}
    for model in client.get_model_repository_index().models:
        if model.state != "READY" or model.name in entries:
            continue
        parameters = client.get_model_config(model.name).config.parameters
        if "task" in parameters:
            record = parameters["model_spec"].string_value if "model_spec" in parameters else None
            entries[model.name] = {"task": parameters["task"].string_value, "record": record}
    return dict(sorted(entries.items()))


def stub_paths(server_pid: int) -> list[str]:
    """The PYTHONPATH of each python-backend stub the server started: the package the served models import, where
    it is the checkout's rather than the installed one (Linux /proc; [] elsewhere)."""
    paths = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != server_pid:
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):  # gone since listed, or not ours to read
            continue
        for entry in environ:
            if entry.startswith(b"PYTHONPATH="):
                paths.add(entry[len(b"PYTHONPATH=") :].decode("utf-8", "replace"))
    return sorted(paths)


def collect_one(repository: Path, data: Path, log) -> dict:
    from tritonclient.grpc import InferenceServerClient

    started = time.monotonic()
    logfile = Path(f"/tmp/served_answers_{repository.name}_{os.getpid()}.log")
    server = TritonServer(repository, http_port=0, grpc_port=0, metrics_port=0, log_file=logfile)
    # Many python stubs start at once on a shared 2-core host: the starter's two minutes are too few.
    server.start(timeout=START_SECONDS)
    try:
        client = InferenceServerClient(url=server.grpc_url)
        entries = served_entries(client)
        if not entries:
            raise ServerNotReadyError(
                f"the server on {repository} has no ready model that names its task",
                f"read its log, {logfile}, for the models that failed to load",
            )
        stubs = stub_paths(server.pid)
        models = {}
        for name, entry in entries.items():
            metadata = _metadata(client, name)
            answers = {}
            for key, items in requests_for(entry["task"], metadata["inputs"], data):
                answers[key] = ask(client, name, metadata, items)
            models[name] = {**entry, "metadata": metadata, "answers": answers}
            refused = sum("error" in a for a in answers.values())
            log(
                f"{repository.name}/{name} ({entry['task']}, {'+'.join(metadata['layout'])}): "
                f"{len(answers)} requests, {refused} refused"
            )
        client.close()
    finally:
        server.stop()
    return {
        "format": FORMAT,
        "repository": str(repository),
        "ernie_deploy": str(Path(ernie_deploy.__file__).parent),
        "stub_pythonpath": stubs,
        "seconds": round(time.monotonic() - started, 1),
        "models": models,
    }


def _repositories(root: Path) -> list[Path]:
    found = sorted(p for p in root.iterdir() if p.is_dir() and any(p.glob("*/config.pbtxt")))
    if not found:
        raise BadRepositoryError(f"{root} holds no model repository", "pass the --out folder `build` wrote")
    return found


def collect(args) -> int:
    data = Path(args.data or Path(os.environ.get("ERNIE_DEPLOY_ARTIFACTS") or "artifacts") / "data").absolute()
    jobs = []
    if args.repository:
        if not args.out:
            raise BadOptionsError("--repository needs --out FILE.json", "add --out")
        jobs.append((Path(args.repository).absolute(), Path(args.out)))
    else:
        if not (args.root and args.out_dir):
            raise BadOptionsError("collect needs --repository and --out, or --root and --out-dir", "add them")
        jobs = [(repo, Path(args.out_dir) / f"{repo.name}.json") for repo in _repositories(Path(args.root))]
    failed = []
    for repository, out in jobs:
        try:
            answers = collect_one(repository, data, lambda line: print(line, flush=True))
        except ErnieDeployError as exc:  # the other repositories' answers are still worth having
            print(f"error: {repository}: {exc}", file=sys.stderr, flush=True)
            failed.append(repository.name)
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(answers, ensure_ascii=False, indent=0, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{out}: {len(answers['models'])} models in {answers['seconds']} s", flush=True)
    if failed:
        print(f"not collected: {', '.join(failed)}", file=sys.stderr)
        return 2
    return 0


# --------------------------------------------------------------------------------------------------------------------
# Comparing


def differences(a: dict, b: dict) -> tuple[list[str], dict]:
    """Each way answers `a` and `b` differ, a line each, and what was compared (models, requests, outputs)."""
    lines = []
    counts = {"models": 0, "requests": 0, "outputs": 0}
    for model in sorted(set(a["models"]) | set(b["models"])):
        if model not in a["models"] or model not in b["models"]:
            lines.append(f"{model}: served only in {'the second' if model not in a['models'] else 'the first'}")
            continue
        counts["models"] += 1
        ma, mb = a["models"][model], b["models"][model]
        if ma["task"] != mb["task"]:
            lines.append(f"{model}: task {ma['task']} != {mb['task']}")
        for key in sorted(set(ma["answers"]) | set(mb["answers"])):
            if key not in ma["answers"] or key not in mb["answers"]:
                lines.append(
                    f"{model} {key}: asked only in {'the second' if key not in ma['answers'] else 'the first'}"
                )
                continue
            counts["requests"] += 1
            ra, rb = ma["answers"][key], mb["answers"][key]
            if ra["inputs"] != rb["inputs"]:
                lines.append(f"{model} {key}: different texts were sent (is the data the same?)")
                continue
            if "error" in ra or "error" in rb:
                if ra.get("error") != rb.get("error"):
                    lines.append(f"{model} {key}: {_short(ra)} != {_short(rb)}")
                continue
            oa, ob = ra["outputs"], rb["outputs"]
            for name in sorted(set(oa) | set(ob)):
                counts["outputs"] += 1
                if oa.get(name) != ob.get(name):
                    lines.append(f"{model} {key} {name}: {_describe(oa.get(name))} != {_describe(ob.get(name))}")
    return lines, counts


def _short(answer: dict) -> str:
    if "error" in answer:
        message = answer["error"]["message"][:200].replace("\n", " ")  # one line per difference
        return f"refused {answer['error']['status']}: {message}"
    return f"answered {sorted(answer['outputs'])}"


def _describe(tensor: dict | None) -> str:
    if tensor is None:
        return "absent"
    raw = base64.b64decode(tensor["bytes"])
    shown = raw[:120].decode("utf-8", "replace") if tensor["dtype"] == "BYTES" else raw[:48].hex()
    return f"{tensor['dtype']}{tensor['shape']} {shown!r}{'...' if len(raw) > 120 else ''}"


def _pairs(a: Path, b: Path) -> list[tuple[str, Path | None, Path | None]]:
    if a.is_dir() and b.is_dir():
        names = sorted({p.name for p in a.glob("*.json")} | {p.name for p in b.glob("*.json")})
        return [(n, a / n if (a / n).exists() else None, b / n if (b / n).exists() else None) for n in names]
    if a.is_dir() or b.is_dir():
        raise BadOptionsError(f"compare takes two files or two folders, got {a} and {b}", "pass two of a kind")
    return [(a.name, a, b)]


def compare(args) -> int:
    total = {"models": 0, "requests": 0, "outputs": 0}
    found = 0
    for name, a, b in _pairs(Path(args.a), Path(args.b)):
        if a is None or b is None:
            print(f"{name}: only in {args.a if b is None else args.b}")
            found += 1
            continue
        lines, counts = differences(json.loads(a.read_text("utf-8")), json.loads(b.read_text("utf-8")))
        for line in lines:
            print(f"{name}: {line}")
        found += len(lines)
        total = {k: total[k] + counts[k] for k in total}
    print(
        f"compared {total['models']} models, {total['requests']} requests, {total['outputs']} outputs: "
        f"{'identical' if not found else f'{found} differences'}"
    )
    return 0 if not found else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=exact_parser)
    p = sub.add_parser("build", help="build the repositories of this benchmark into --out")
    p.add_argument("--out", required=True)
    p.add_argument("--inputs", default="/tmp/answers_inputs", help="static and ONNX models (default %(default)s)")
    p.add_argument("--print", action="store_true", help="print the commands as a bash script instead")
    p = sub.add_parser("make-shape", help="a shaped checkpoint (what build runs where --inputs lacks it)")
    p.add_argument("shape")
    p.add_argument("task")
    p.add_argument("out")
    p = sub.add_parser("collect", help="serve a repository and record every answer")
    p.add_argument("--repository")
    p.add_argument("--out")
    p.add_argument("--root", help="a folder of repositories (build's --out): each is collected")
    p.add_argument("--out-dir")
    p.add_argument("--data", help="the prepared splits (default: $ERNIE_DEPLOY_ARTIFACTS/data, else artifacts/data)")
    p = sub.add_parser("compare", help="exit 0 when two collections answer byte for byte the same")
    p.add_argument("a")
    p.add_argument("b")
    args = parser.parse_args(argv)
    try:
        return {"build": build, "make-shape": make_shape, "collect": collect, "compare": compare}[args.command](args)
    except ErnieDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`compare ... | head`): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
