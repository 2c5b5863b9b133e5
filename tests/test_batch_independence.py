"""A text's served answer does not depend on the texts the server batches it with.

Triton's dynamic batcher merges concurrent requests into one model run, so the texts of one user share a batch
with other users' texts. For FP32 and for static INT8 (`convert --quantize int8`) that changes nothing: the same
texts, near ties included, sent alone and sent in random merged batches at concurrency get the same labels and
entities. Dynamic INT8 (`--quantize int8-dynamic`) scales each batch by its own range, so a near tie's label can
depend on its companions; the in-process test below shows it. docs/RELIABILITY.md, "Answers independent of
neighbours", holds the figures.
"""

from __future__ import annotations

import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ernie_deploy.client.grpc_client import Client
from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN, SEQ_CLS, TOKEN_CLS

from .conftest import artifacts

pytestmark = pytest.mark.integration

TEXTS = 400  # per task, from the test split: the model's NEAR_TIES nearest ties, the rest drawn at random
NEAR_TIES = 150
ROUNDS = 3  # each text is sent ROUNDS times in merged batches, each time among other random companions
CONCURRENCY = 8
TEXTS_PER_REQUEST = (1, 6)
QUEUE_DELAY_US = 2000  # the batcher waits up to 2 ms for more requests: more merging than the default (0)
SEED = 23
PRECISIONS = ("fp32", "int8")  # int8: what `convert --quantize int8` makes (static scales)


def _margins(task, onnx_path, static, texts: list[str]) -> np.ndarray:
    """Per text, the gap between its best and second-best logit (for NER, the smallest over its real tokens), each
    text run alone, in-process: the smaller, the nearer a tie."""
    from ernie_deploy.serving.encoding import encode_items
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(static.vocab_file, lowercase=static.do_lower_case)
    model = OnnxModel(onnx_path)
    out = []
    for text in texts:
        enc = encode_items(tokenizer, [text], DEFAULT_MAX_SEQ_LEN)
        top = np.sort(model(enc.input_ids, enc.token_type_ids)[0], axis=-1)
        gaps = top[..., -1] - top[..., -2]
        out.append(float(gaps.min()))  # NER: rows are the text's tokens, [CLS] and [SEP] included
    return np.array(out)


def _pick(task, onnx_path, static, data) -> tuple[list[str], tuple[float, float]]:
    """TEXTS texts of the test split: the NEAR_TIES with the smallest margins under this model, then random ones;
    and the smallest and the largest margin among the near ties."""
    from ernie_deploy.fetch.data import read_split

    texts = read_split(data, "test", task.split_format)[0]
    margins = _margins(task, onnx_path, static, texts)
    order = [int(i) for i in np.argsort(margins, kind="stable")]
    near, rest = order[:NEAR_TIES], order[NEAR_TIES:]
    picked = near + random.Random(SEED).sample(rest, TEXTS - NEAR_TIES)
    return [texts[i] for i in picked], (float(margins[near].min()), float(margins[near].max()))


def _static_int8(pipeline, out):
    """The model `convert --quantize int8` serves: static scales, calibrated on the first texts of the dev split."""
    from ernie_deploy.export.precision import DEFAULT_CALIBRATION_N, Calibration, quantize_int8_static
    from ernie_deploy.fetch.data import read_split

    task, static = pipeline.task, pipeline.static
    dev = read_split(pipeline.data, "dev", task.split_format)[0][:DEFAULT_CALIBRATION_N]
    calibration = Calibration(tuple(dev), static.vocab_file, DEFAULT_MAX_SEQ_LEN, lowercase=static.do_lower_case)
    quantize_int8_static(pipeline.onnx, out, calibration)
    return out


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory, seq_cls_pipeline, token_cls_pipeline):
    """One server with both demo models in FP32 (their own names) and in static INT8 (`<name>_int8`), and per
    (task, precision) the model's record and the texts to send."""
    from ernie_deploy.repository.build import BuildOptions, build
    from ernie_deploy.server.process import TritonServer

    work = tmp_path_factory.mktemp("neighbours")
    entries, cases = [], {}
    for p in (seq_cls_pipeline, token_cls_pipeline):
        for precision in PRECISIONS:
            name = p.static.spec.name if precision == "fp32" else f"{p.static.spec.name}_int8"
            onnx_path = p.onnx if precision == "fp32" else _static_int8(p, work / f"{p.task.name}.int8.onnx")
            entries.append(artifacts(p, name, onnx=onnx_path))
            cases[(p.task.name, precision)] = (entries[-1].model, *_pick(p.task, onnx_path, p.static, p.data))
    repo = work / "models"
    build(entries, repo, BuildOptions(runtime="python", layout="ensemble", max_queue_delay_us=QUEUE_DELAY_US))
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=work / "server.log") as server:
        yield server, cases


def _merged(url: str, model, texts: list[str]) -> list[list]:
    """Every text sent ROUNDS times at CONCURRENCY, in requests of 1-6 texts drawn at random (each round shuffles
    anew, so a text meets other companions in its request and in the merged batch); its answers, by text."""
    rng = random.Random(SEED)
    requests = []
    for _ in range(ROUNDS):
        order = list(range(len(texts)))
        rng.shuffle(order)
        while order:
            size = rng.randint(*TEXTS_PER_REQUEST)
            requests.append(order[:size])
            order = order[size:]
    rng.shuffle(requests)
    local, clients = threading.local(), []

    def send(indices: list[int]) -> list:
        if not hasattr(local, "client"):
            local.client = Client(model.task_spec, url, model=model.name)
            clients.append(local.client)
        return local.client.predict([texts[i] for i in indices], batch_size=len(indices), progress=False)

    answers: list[list] = [[] for _ in texts]
    try:
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            for indices, got in zip(requests, pool.map(send, requests)):
                for i, answer in zip(indices, got):
                    answers[i].append(answer)
    finally:
        for client in clients:
            client.close()
    return answers


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("task", [SEQ_CLS, TOKEN_CLS], ids=lambda t: t.name)
def test_a_texts_answer_does_not_depend_on_its_batch_companions(neighbours, task, precision):
    """The same texts, near ties first, sent alone (one text per request, one request at a time) and in random
    merged batches at concurrency 8: every answer (label; entities with their offsets) equals the text's answer
    alone, and the batcher did merge requests."""
    from ernie_deploy.server.stats import snapshot

    server, cases = neighbours
    served, texts, (closest, farthest) = cases[(task.name, precision)]
    with Client(served.task_spec, server.grpc_url, model=served.name) as client:
        alone = [client.predict([text], batch_size=1, progress=False)[0] for text in texts]
    before = snapshot(server.http_url)
    merged = _merged(server.grpc_url, served, texts)
    step = snapshot(server.http_url)[served.model_step] - before[served.model_step]
    differ = [i for i, answers in enumerate(merged) if any(answer != alone[i] for answer in answers)]
    print(
        json.dumps(
            {
                "model": served.name,
                "texts": len(texts),
                "near_ties": NEAR_TIES,
                "near_tie_margins": [round(closest, 6), round(farthest, 4)],
                "answers_compared": sum(map(len, merged)),
                "model_step_requests": step.requests,
                "model_runs": step.executions,
                "texts_per_run": round(step.texts / step.executions, 2),
                "differ": len(differ),
            }
        )
    )
    assert all(len(answers) == ROUNDS for answers in merged)
    assert step.executions < step.requests / 2, step  # requests were merged with other requests
    assert differ == [], [(texts[i], alone[i], merged[i]) for i in differ[:5]]


@pytest.mark.parametrize("task", [SEQ_CLS, TOKEN_CLS], ids=lambda t: t.name)
def test_dynamic_int8_answers_move_with_batch_companions(task, request, tmp_path):
    """In-process, on the demo model's nearest ties: each text run alone and in batches with random companions.
    FP32 and static INT8 logits stay put (float rounding at most); dynamic INT8's move, and labels flip."""
    from ernie_deploy.export.precision import quantize_int8
    from ernie_deploy.serving.encoding import encode_items
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import build_tokenizer

    pipeline = request.getfixturevalue(f"{task.name}_pipeline")
    static = pipeline.static
    models = {
        "fp32": pipeline.onnx,
        "int8-static": _static_int8(pipeline, tmp_path / "static.onnx"),
        "int8-dynamic": tmp_path / "dynamic.onnx",
    }
    quantize_int8(pipeline.onnx, models["int8-dynamic"])
    texts, _ = _pick(task, models["int8-dynamic"], static, pipeline.data)
    texts = texts[:NEAR_TIES]
    tokenizer = build_tokenizer(static.vocab_file, lowercase=static.do_lower_case)
    rng = random.Random(SEED)
    batches = [rng.sample(range(len(texts)), 8) for _ in range(3 * len(texts) // 8)]
    found = {}
    for kind, path in models.items():
        model = OnnxModel(path)
        alone = []
        for text in texts:
            enc = encode_items(tokenizer, [text], DEFAULT_MAX_SEQ_LEN)
            alone.append(model(enc.input_ids, enc.token_type_ids)[0])
        moved, flipped = 0.0, 0
        for batch in batches:
            enc = encode_items(tokenizer, [texts[i] for i in batch], DEFAULT_MAX_SEQ_LEN)
            logits = model(enc.input_ids, enc.token_type_ids)
            for row, i in enumerate(batch):
                own = logits[row][: alone[i].shape[0]] if logits.ndim == 3 else logits[row]
                moved = max(moved, float(np.abs(own - alone[i]).max()))
                flipped += int((own.argmax(-1) != alone[i].argmax(-1)).any())
        found[kind] = {"max_logit_move": moved, "texts_whose_labels_flipped": flipped}
    print(json.dumps({"task": task.name, "near_ties": len(texts), "runs": 8 * len(batches), **found}))
    for kind in ("fp32", "int8-static"):
        assert found[kind]["max_logit_move"] <= 1e-5 and found[kind]["texts_whose_labels_flipped"] == 0, found
    assert found["int8-dynamic"]["max_logit_move"] > 1e-3, found
    assert found["int8-dynamic"]["texts_whose_labels_flipped"] > 0, found
