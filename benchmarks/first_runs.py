"""How long a new user waits, measured on a clean clone with empty caches, into docs/first_runs.json (the README's
first-run figures are held to it by tests/test_docs_figures.py).

- `python -m benchmarks.first_runs own`: a checkpoint of one's own to its first served answer. A PaddleNLP
  save_pretrained folder of the ERNIE 3.0 medium shape (6 x 768, random weights, a seq_cls head of three labels) is
  made outside the clone; then, in a fresh clone with empty pip and model caches: `scripts/convert.sh --task seq_cls
  --model news --source DIR` (install, data, export, ONNX, parity, build), `tritonserver --model-repository=models`
  until ready, and `python clients/seq_cls_grpc_client.py --model news --text ...` until it prints its answer.
- `python -m benchmarks.first_runs demo REPORT`: the demo's first run, from the report
  (artifacts/reports/quickstart.json) that `bash scripts/quickstart.sh` wrote in a fresh clone run with an empty
  ERNIE_DEPLOY_CACHE (pip's cache warm).

Each records the load average around it: the host is shared, and its speed moves between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from ernie_deploy.core.tasks import SEQ_CLS
from ernie_deploy.fetch.shapes import filled_vocab, random_model

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "first_runs.json"
TEXT = "国足公布世预赛名单"


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _record(key: str, run: dict) -> None:
    """Put `run` under runs.<key> of the results file, written whole or not at all."""
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": {}}
    results["runs"][key] = run
    tmp = RESULTS.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, RESULTS)
    print(json.dumps(run, indent=2, ensure_ascii=False))


def _medium_checkpoint(out: Path) -> Path:
    """A save_pretrained folder in ERNIE 3.0 medium's shape, random weights: what a user's fine-tuned model looks like
    on disk (about 290 MB)."""
    from paddlenlp.transformers import ErnieTokenizer
    from paddlenlp.transformers.ernie.configuration import ERNIE_PRETRAINED_INIT_CONFIGURATION

    base = dict(ERNIE_PRETRAINED_INIT_CONFIGURATION["ernie-3.0-medium-zh"])
    model = random_model(base, SEQ_CLS, ["negative", "neutral", "positive"])
    out.mkdir(parents=True)
    tokens = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", *sorted(set(TEXT))]
    (out / "vocab.txt").write_text("\n".join(filled_vocab(tokens, model.config.vocab_size)) + "\n", encoding="utf-8")
    model.save_pretrained(str(out))
    ErnieTokenizer(str(out / "vocab.txt")).save_pretrained(str(out))
    return out


def own(args) -> None:
    work = Path(tempfile.mkdtemp(prefix="first-run-"))
    try:
        checkpoint = _medium_checkpoint(work / "checkpoint")
        clone = work / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {
            **os.environ,
            "PIP_CACHE_DIR": str(work / "pip-cache"),
            "ERNIE_DEPLOY_CACHE": str(work / "cache"),
            "PATH": f"{clone / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
        }
        env.pop("VIRTUAL_ENV", None)
        load_start, t0 = _load(), time.monotonic()
        convert = subprocess.run(
            ["bash", "scripts/convert.sh", "--task", "seq_cls", "--model", "news", "--source", str(checkpoint)],
            cwd=clone, env=env, capture_output=True, text=True,
        )  # fmt: skip
        if convert.returncode:
            sys.exit(convert.stdout[-3000:] + convert.stderr[-3000:])
        t1 = time.monotonic()
        log = open(work / "server.log", "w")
        server = subprocess.Popen(
            ["tritonserver", "--model-repository=models", f"--http-port={args.http_port}",
             f"--grpc-port={args.grpc_port}", f"--metrics-port={args.metrics_port}"],
            cwd=clone, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while True:
                if time.monotonic() > deadline:
                    sys.exit(f"tritonserver was not ready after 300 s: {work / 'server.log'}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{args.http_port}/v2/health/ready", timeout=2):
                        break
                except OSError:
                    if server.poll() is not None:
                        sys.exit((work / "server.log").read_text())
                    time.sleep(0.1)
            t2 = time.monotonic()
            answer = subprocess.run(
                [str(clone / ".venv" / "bin" / "python"), "clients/seq_cls_grpc_client.py", "--model", "news",
                 "--grpc-url", f"127.0.0.1:{args.grpc_port}", "--text", TEXT],
                cwd=clone, env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            t3 = time.monotonic()
        finally:
            server.terminate()
            server.wait(timeout=60)
        made = (clone / "artifacts" / "checkpoints").iterdir()
        _record(
            "own_checkpoint",
            {
                "command": "scripts/convert.sh --task seq_cls --model news --source DIR; tritonserver "
                "--model-repository=models; python clients/seq_cls_grpc_client.py --model news --text TEXT",
                "checkpoint": "PaddleNLP save_pretrained, ERNIE 3.0 medium (6 x 768), seq_cls head, random weights",
                "clone": "clean",
                "caches": "empty (ERNIE_DEPLOY_CACHE and PIP_CACHE_DIR)",
                "load_average": {"start": load_start, "end": _load()},
                "total_s": round(t3 - t0),
                "stages_s": {
                    "convert.sh (install, data, export, ONNX, parity, build)": round(t1 - t0),
                    "server ready": round(t2 - t1, 1),
                    "first answer": round(t3 - t2, 1),
                },
                "models_made": sorted(p.name for p in made),
                "answer": answer.stdout.strip(),
            },
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def demo(args) -> None:
    report = json.loads(Path(args.report).read_text())
    _record(
        "demo",
        {
            "command": report["command"],
            "clone": "clean",
            "caches": "empty ERNIE_DEPLOY_CACHE (no model cached), pip's cache warm",
            "load_average": report["load_average"],
            "total_s": report["total_s"],
            "stages_s": report["stages_s"],
            "training_s": report["training_s"],
            "scores": {
                task: {k: score[k] for k in ("metric", "paddle", "onnx", "served")}
                for task, score in report["scores"].items()
            },
        },
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.first_runs", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser(
        "own", allow_abbrev=False, help="a checkpoint of one's own to its first served answer, from a clean clone"
    )
    p.add_argument("--http-port", type=int, default=18100)
    p.add_argument("--grpc-port", type=int, default=18101)
    p.add_argument("--metrics-port", type=int, default=18102)
    p.set_defaults(func=own)
    p = sub.add_parser("demo", allow_abbrev=False, help="record the demo's first run from the quickstart's report")
    p.add_argument("report", help="artifacts/reports/quickstart.json of a quickstart run on a clean clone")
    p.set_defaults(func=demo)
    args = parser.parse_args(argv)
    args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
