"""The model, texts and peer of the embed bench (benchmarks/embed.py): an ErnieEncoder at ERNIE 3.0 nano's shape with
random weights, taken through `ernie-deploy add --task embed` as users add one, twice (the default build, and one with
`--max-batch-size 1` that merges no requests); the step the server runs, built
in-process from the added model; InsuranceQA's test questions and answers or a fixed list; and the peer, infinity-emb
serving a Hugging Face BERT of the same shape from a local folder, run from its own virtual environment."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np

from benchmarks.scores_in_process import step_config
from benchmarks.uie_model import _artifacts_at
from ernie_deploy.client.grpc_client import Client
from ernie_deploy.core.errors import (
    BadCheckpointError,
    BadDataError,
    BadOptionsError,
    FailedRequestsError,
    ParityError,
    ServerNotReadyError,
)
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import EMBED, TOKENIZER_STEP
from ernie_deploy.fetch.data import data_dir, read_split
from ernie_deploy.fetch.shapes import SEED, checkpoint_facts, get_shape, make_checkpoint, shape_config
from ernie_deploy.kinds.embed import KIND
from ernie_deploy.server.preflight import free_ports
from ernie_deploy.server.procs import _pdeathsig_preexec, log_tail, stop_group, wait_http_ok
from ernie_deploy.serving.steps import STEPS

NAME = "embed_bench"
NAME_MBS1 = f"{NAME}_mbs1"  # the same model, added with --max-batch-size 1: Triton runs each request alone
SHAPE = "nano"
TEXTS = 400  # distinct texts the cells cycle through
VOCAB = Path(__file__).resolve().parent.parent / "demo" / "seq_cls" / "vocab.txt"
# The peer's BERT has BERT's own position table (512); the rest is the shape's.
PEER_MAX_POSITIONS = 512
# The engines infinity-emb offers on a CPU: PyTorch, ONNX Runtime through optimum (it reads a model.onnx from the
# model's folder, exported here with optimum's exporter), and CTranslate2.
ENGINES = ("torch", "optimum", "ctranslate2")
# sentence-transformers' pooling of a plain BERT (what the torch and ctranslate2 engines do), named for every engine so
# that the optimum engine (which pools [CLS] unless told) computes the same vectors.
POOLING = "mean"
FALLBACK_TEXTS = [
    "医疗保险能报销门诊费用吗？",
    "如果我提前退保，能拿回多少钱？",
    "意外险包括哪些情况？",
    "买了重疾险以后还需要买医疗险吗？",
    "门诊费用能否报销要看保单的条款，多数基本医疗保险只报销住院费用，部分商业保险附加门诊责任，购买前请仔细阅读。",
    "提前退保只能拿回保单的现金价值，在保单生效的头几年，现金价值往往远低于已经交纳的保费，所以退保通常会有损失。",
    "意外险保障的是外来的、突发的、非本意的、非疾病的事故造成的身故、伤残和医疗费用，疾病导致的住院一般不在保障之内。",
    "重疾险在确诊合同约定的疾病后一次性给付保险金，医疗险则按实际花费报销，两者的作用不同，很多家庭会同时配置。",
    "年金保险适合做养老规划吗？",
    "年金保险在约定的时间按期给付，可以作为养老收入的补充，但它的收益率通常不高，流动性也较差，适合长期稳定的资金。",
    "保险公司拒赔了怎么办？",
    "先请保险公司出具书面的拒赔理由，对照合同条款核实，如果认为不合理，可以向监管部门投诉，或者通过仲裁和诉讼解决。",
]
# The peer's model folder, made in its own python (transformers, torch, optimum are the peer's, not this project's):
# argv = folder, vocab file, max_seq_len, seed, config JSON, whether to export ONNX into folder/onnx.
PEER_SCRIPT = """\
import json, sys
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast
folder, vocab, length, seed, config, onnx = sys.argv[1:7]
torch.manual_seed(int(seed))
model = BertModel(BertConfig(**json.loads(config)))
model.save_pretrained(folder)
BertTokenizerFast(vocab_file=vocab, do_lower_case=True, model_max_length=int(length)).save_pretrained(folder)
if onnx == "1":
    from optimum.exporters.onnx import main_export
    main_export(folder, output=folder + "/onnx", task="feature-extraction")
print(json.dumps({"params": sum(p.numel() for p in model.parameters())}))
"""
PEER_VERSIONS = ("infinity-emb", "torch", "onnxruntime", "optimum", "optimum-onnx", "transformers", "ctranslate2")


def bench_texts(max_seq_len: int, n: int = TEXTS) -> tuple[list[str], str]:
    """(texts, where they come from): InsuranceQA's test questions and answers, alternating, each distinct and short
    enough to fit `max_seq_len` tokens whole (at most max_seq_len - 2 characters: a token covers at least one), when
    the split is prepared already (nothing is downloaded for the benchmark); else the fixed list."""
    try:
        pairs, _ = read_split(data_dir(EMBED.dataset), "test", EMBED.split_format)
    except (OSError, ValueError, BadDataError):  # no prepared split: the fixed texts, and the source says so
        return list(FALLBACK_TEXTS), "fixed insurance questions and answers (benchmarks/embed_model.py)"
    fits = max_seq_len - 2
    questions = [t for t in dict.fromkeys(q for q, _ in pairs) if len(t) <= fits]
    answers = [t for t in dict.fromkeys(a for _, a in pairs) if len(t) <= fits]
    texts = [t for pair in zip(questions, answers) for t in pair][:n]
    return texts, (
        f"InsuranceQA's test split, its first {len(texts) // 2} distinct questions and {len(texts) - len(texts) // 2} "
        f"distinct answers that fit {max_seq_len} tokens, alternating"
    )


def peer_config() -> dict:
    """The shape in Hugging Face BertConfig's names."""
    shape = shape_config(get_shape(SHAPE))
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    return {**{k: shape[k] for k in keys}, "max_position_embeddings": PEER_MAX_POSITIONS}


def build_model(workdir: Path, texts: list[str]) -> tuple[Path, dict]:
    """(repository, model facts): an ErnieEncoder (a RocketQA tower without projection) at the nano shape, random
    weights (seeded), added with `ernie-deploy add --task embed` into `workdir`/models twice from the same checkpoint,
    as NAME (the default build) and as NAME_MBS1 (`--max-batch-size 1`); the parity gate runs the first texts."""
    from ernie_deploy.cli import main

    vocab = [line for line in VOCAB.read_text(encoding="utf-8").splitlines() if line]
    checkpoint = make_checkpoint(get_shape(SHAPE), EMBED, [], vocab, workdir / "checkpoint")
    parity = workdir / "parity.tsv"
    pairs = zip(texts[0:16:2], texts[1:16:2])
    parity.write_text("query\tpassage\n" + "".join(f"{q}\t{p}\n" for q, p in pairs), encoding="utf-8")
    repo = workdir / "models"
    for name, flags in ((NAME, []), (NAME_MBS1, ["--max-batch-size", "1"])):
        argv = ["add", "--task", "embed", "--model", name, "--source", str(checkpoint), "--repository", str(repo)]
        with _artifacts_at(workdir / "artifacts"):
            if main([*argv, *flags, "--parity-data", str(parity)]) != 0:
                raise BadCheckpointError(f"`ernie-deploy {' '.join([*argv, *flags])}` failed", "read its message above")
    facts = checkpoint_facts(checkpoint)
    spec = ModelSpec.read(repo / NAME / "1")
    return repo, {
        "checkpoint": f"an ErnieEncoder at ERNIE 3.0 {SHAPE}'s shape with random weights (seeded)",
        "layers": facts["num_hidden_layers"],
        "hidden": facts["hidden_size"],
        "params": facts["params"],
        "dim": spec.dim,
        "pooling": spec.pooling,
        "max_seq_len": spec.max_seq_len,
        # each build's max_batch_size, as its config.pbtxt says
        "max_batch_size": {name: int(step_config(repo / name)["max_batch_size"]) for name in (NAME, NAME_MBS1)},
    }


def load_step(repo: Path):
    """The step the server runs for the model, built as the python backend builds it: from its config.pbtxt (as the
    JSON Triton hands `initialize`) and its version folder."""
    from ernie_deploy.repository.layouts import get_layout

    model = ModelSpec.read(repo / NAME / "1")
    name = get_layout(model.layout).python_steps(model, TOKENIZER_STEP, "python")[NAME]
    return STEPS[name](step_config(repo / NAME), repo / NAME / "1")


# -- the peer, and the OpenAI-style bodies of both HTTP routes --------------------------------------------------------


def _offline_env(hf_home: Path | None = None) -> dict:
    """A local folder, no hub: nothing is fetched, and nothing is reported home. `hf_home`: the peer's cache (where
    its engines keep what they convert), one per run, so that no conversion of an earlier run's weights is reused."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"}
    if hf_home is not None:
        env |= {"HF_HOME": str(hf_home), "HF_HUB_CACHE": str(hf_home / "hub")}
    return env


def peer_versions(python: str) -> dict:
    code = (
        "import json; from importlib import metadata as m\n"
        "def v(d):\n    try: return m.version(d)\n    except m.PackageNotFoundError: return None\n"
        f"print(json.dumps({{d: v(d) for d in {list(PEER_VERSIONS)!r}}}))"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True, env=_offline_env())
    return json.loads(done.stdout.splitlines()[-1])


def build_peer_model(python: str, folder: Path, max_seq_len: int, onnx: bool) -> dict:
    """The peer's model folder: a BertModel of the same shape, random weights (seeded), and a fast BERT tokenizer of
    the same vocabulary and lower-casing (so both read the same tokens), its model_max_length `max_seq_len`; with
    `onnx`, optimum's ONNX export of it in folder/onnx (what infinity-emb's optimum engine reads)."""
    config = peer_config()
    argv = [python, "-c", PEER_SCRIPT, str(folder), str(VOCAB), str(max_seq_len), str(SEED), json.dumps(config)]
    done = subprocess.run([*argv, "1" if onnx else "0"], capture_output=True, text=True, env=_offline_env())
    if done.returncode != 0:
        raise BadOptionsError(
            f"the peer's model could not be made in {python}: {done.stderr.strip()[-600:]}",
            "install the peer as benchmarks/embed.py's docstring says",
        )
    return {"config": config, "params": json.loads(done.stdout.splitlines()[-1])["params"]}


class Infinity:
    """infinity-emb's server (`infinity_emb v2`) on one engine, in its own process group (its CPU time is counted
    like tritonserver's), started from this process so that it runs on the same cores (the affinity it inherits).
    It reads the model from its folder as `--model-id .` (its optimum engine finds the ONNX file only so)."""

    def __init__(self, python: str, folder: Path, engine: str, name: str, log_file: Path):
        self.python, self.engine, self.name, self.log_path = python, engine, name, log_file
        self.hf_home = folder.parent / "hf"
        self.folder = folder / "onnx" if engine == "optimum" else folder
        self.port = 0
        self.start_seconds: float | None = None
        self._proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def command(self) -> list[str]:
        return [
            self.python, "-m", "infinity_emb.cli", "v2", "--model-id", ".", "--served-model-name", self.name,
            "--engine", self.engine, "--device", "cpu", "--host", "127.0.0.1", "--port", str(self.port),
            "--pooling-method", POOLING, "--no-vector-disk-cache",
        ]  # fmt: skip

    def start(self, timeout: float = 600) -> Infinity:
        t0 = time.monotonic()
        self.port = free_ports(1, "127.0.0.1")[0]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                self.command(),
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_offline_env(self.hf_home),
                start_new_session=True,  # its own group: its CPU time is counted, stop() reaches it all
                preexec_fn=_pdeathsig_preexec(),  # and it ends with this process
            )
        try:
            wait_http_ok(self._proc, f"{self.url}/health", timeout, self._fail, name="infinity-emb", interval=0.5)
        except BaseException:
            self.stop(timeout=5)
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _fail(self, what: str, timed_out: bool = False) -> None:
        raise ServerNotReadyError(
            f"infinity-emb ({self.engine}): {what} (log: {self.log_path})\n{log_tail(self.log_path)}",
            "read the log; leave this engine out with --peer-engines",
        )

    def stop(self, timeout: float = 15) -> None:
        if self._proc is not None:
            stop_group(self._proc, timeout)
            self._proc = None


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


def openai_body(model: str, text: str) -> bytes:
    return json.dumps({"model": model, "input": [text]}, ensure_ascii=False).encode("utf-8")


def post(url: str, body: bytes) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {"error": exc.read()[:300].decode(errors="replace")}


def openai_answer(answer, request) -> str | None:
    """What is wrong with an OpenAI-style embeddings answer to `request`, or None: one vector a text."""
    data = answer.get("data") if isinstance(answer, dict) else None
    if isinstance(data, list) and len(data) == request.size and all(len(d.get("embedding", ())) for d in data):
        return None
    return f"malformed answer: {json.dumps(answer)[:160]}"


def check_peer(url: str, texts: list[str], dim: int) -> tuple[np.ndarray, float]:
    """The peer's vectors of `texts` (one a request), each checked to be of `dim` numbers, and the tokens a text its
    answers count."""
    vectors, tokens = [], 0
    for text in texts:
        status, answer = post(f"{url}/embeddings", openai_body(NAME, text))
        if status != 200 or len(answer["data"][0]["embedding"]) != dim:
            raise FailedRequestsError(f"the peer answered {status}: {json.dumps(answer)[:200]}", "read its log")
        vectors.append(answer["data"][0]["embedding"])
        tokens += answer.get("usage", {}).get("prompt_tokens", 0)
    return np.asarray(vectors), tokens / len(texts)


def start_peers(python, folder, engines, texts, dim, work, stack, skipped) -> tuple[dict, dict]:
    """Each engine's server, started (stopped by `stack`) and checked on `texts`; an engine that fails is skipped,
    and `skipped` says why. Returns the servers by engine, and what the checks found: each engine's start time and
    tokens a text as its answers count them, and its vectors' least cosine to the first engine's."""
    peers, facts = {}, {"start_s": {}, "tokens_per_text": {}, "agree_min_cosine": {}}
    first = None
    for engine in engines:
        server = Infinity(python, folder, engine, NAME, work / f"peer-{engine}.log")
        try:
            stack.callback(server.start().stop)
            vectors, tokens = check_peer(server.url, texts, dim)
        except (ServerNotReadyError, FailedRequestsError, OSError) as exc:
            skipped[f"peer {engine}"] = str(exc).splitlines()[0][:300]
            print(f"peer {engine} skipped: {skipped[f'peer {engine}']}", flush=True)
            server.stop(timeout=5)
            continue
        peers[engine] = server
        facts["start_s"][engine] = round(server.start_seconds, 1)
        facts["tokens_per_text"][engine] = tokens
        first = vectors if first is None else first
        facts["agree_min_cosine"][engine] = min(cosine(a, b) for a, b in zip(vectors, first))
    return peers, facts


# -- the checks: the served vectors against the in-process step's ----------------------------------------------------


def step_request(text: str) -> dict[str, np.ndarray]:
    """One text as the step (and Triton's python backend) takes it."""
    return {"text": np.array([[text.encode("utf-8")]], dtype=np.object_)}


def in_process_vectors(step, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(vectors [n, dim], tokens read [n]) of the in-process step, one text a call."""
    outs = [step.run_requests([step_request(t)])[0] for t in texts]
    return np.concatenate([o["embedding"] for o in outs]), np.concatenate([o["lengths"].reshape(-1) for o in outs])


def check_grpc(url: str, ours: np.ndarray, texts: list[str], model: str = NAME) -> float:
    """The least cosine between the server's vector of `model` and the in-process one over `texts` (one a request);
    raises below the kind's parity."""
    with Client(EMBED, url, model=model) as client:
        served = [client.infer([t])["embedding"][0] for t in texts]
    return _parity(f"gRPC ({model})", [cosine(a, b) for a, b in zip(served, ours)], texts)


def check_openai(url: str, ours: np.ndarray, texts: list[str]) -> float | str:
    """As check_grpc, through the gateway's /v1/embeddings; a str (why) when the route does not answer 200."""
    vectors = []
    for text in texts:
        status, answer = post(f"{url}/v1/embeddings", openai_body(NAME, text))
        if status != 200:
            return f"POST /v1/embeddings answered {status}: {json.dumps(answer, ensure_ascii=False)[:200]}"
        vectors.append(answer["data"][0]["embedding"])
    return _parity("the gateway's /v1/embeddings", [cosine(a, b) for a, b in zip(vectors, ours)], texts)


def _parity(where: str, cosines: list[float], texts: list[str]) -> float:
    worst = int(np.argmin(cosines))
    if cosines[worst] < KIND.parity_cosine:
        raise ParityError(
            f"{where} answers {texts[worst]!r} with a vector at cosine {cosines[worst]:.6f} to the in-process one "
            f"(at least {KIND.parity_cosine} expected)",
            "the in-process step is not what the server runs: check the added model",
        )
    return cosines[worst]
