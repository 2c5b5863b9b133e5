"""build --graph-postprocess and --tokenizer-in-model on a real tritonserver: the same answers as the default
ensemble on the same texts, under concurrent load (so requests of different lengths share merged batches), and a bad
request inside a merged batch fails alone."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ernie_deploy.client.grpc_client import Client
from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.tasks import SEQ_CLS, TOKEN_CLS
from tests.conftest import artifacts

# model name -> (task, build options): one repository holds every layout, one server serves them all.
LAYOUTS = {
    "news": (SEQ_CLS, {"layout": "ensemble"}),
    "news_graph": (SEQ_CLS, {"layout": "graph-postprocess"}),
    "news_tok": (SEQ_CLS, {"layout": "tokenizer-in-model"}),
    "ner": (TOKEN_CLS, {"layout": "ensemble"}),
    "ner_tok": (TOKEN_CLS, {"layout": "tokenizer-in-model"}),
}


@pytest.fixture(scope="module")
def layouts_server(tmp_path_factory, seq_cls_pipeline, token_cls_pipeline):
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.repository.served import served_steps
    from ernie_deploy.server.process import TritonServer

    repo = tmp_path_factory.mktemp("layouts")
    pipelines = {SEQ_CLS.name: seq_cls_pipeline, TOKEN_CLS.name: token_cls_pipeline}
    for name, (task, options) in LAYOUTS.items():
        p = pipelines[task.name]
        build(
            artifacts(p, name),
            repo,
            BuildOptions(runtime="python", **options),
        )
    steps = served_steps(repo)
    assert len(steps["news"]) == 3 and len(steps["news_graph"]) == 2 and len(steps["news_tok"]) == 2
    assert steps["news_graph"][0] == steps["news"][0], "the graph layout keeps the shared tokenizer step"
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=repo.parent / "layouts.log") as s:
        yield s


def _served(url, task, name, texts, threads=8):
    """Every output of every text to model `name`, one text per request from `threads` clients at once."""

    def one(chunk):
        with Client(task, url, model=name) as client:
            return [client.infer([t]) for t in chunk]

    with ThreadPoolExecutor(threads) as pool:
        parts = list(pool.map(one, [texts[i::threads] for i in range(threads)]))
    ordered = [None] * len(texts)
    for i in range(threads):
        ordered[i::threads] = parts[i]
    return ordered


@pytest.mark.parametrize("name", ["news_graph", "news_tok", "ner_tok"])
def test_layout_answers_as_the_default_layout(name, layouts_server, request):
    from ernie_deploy.fetch.data import read_split

    task, _ = LAYOUTS[name]
    base = "news" if task is SEQ_CLS else "ner"
    pipeline = request.getfixturevalue(f"{task.name}_pipeline")
    texts = read_split(pipeline.data, "test", task.split_format)[0][:300]
    texts[7] = texts[7] * 20  # longer than max_seq_len: cut (seq_cls) or windowed (token_cls) in both layouts
    want = _served(layouts_server.grpc_url, task, base, texts)
    got = _served(layouts_server.grpc_url, task, name, texts)
    for w, g in zip(want, got):
        assert sorted(g) == sorted(w)
        for key in w:
            if w[key].dtype == np.float32:
                np.testing.assert_allclose(g[key], w[key], atol=1e-5, rtol=0, err_msg=key)
            else:
                assert g[key].tolist() == w[key].tolist(), key
    if task is SEQ_CLS:
        assert len({w["label"][0, 0] for w in want}) > 3, "a trained classifier should answer several labels"


@pytest.mark.parametrize("name", ["news_graph", "news_tok", "ner_tok"])
def test_a_bad_request_fails_alone_inside_a_merged_batch(name, layouts_server):
    task, _ = LAYOUTS[name]
    texts = ["国足公布世预赛名单", "股市大涨，沪指收复三千点", "新华社北京电"] * 8
    want = _served(layouts_server.grpc_url, task, name, texts, threads=1)

    def one(i):
        with Client(task, layouts_server.grpc_url, model=name) as client:
            if i % 6 == 3:
                with pytest.raises(BadRequest, match="text 1 is empty"):
                    client.infer(["国足", " "])
                return None
            return client.infer([texts[i]])

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, range(len(texts))))
    for i, g in enumerate(got):
        if g is not None:
            assert g[task.prediction].tolist() == want[i][task.prediction].tolist()
