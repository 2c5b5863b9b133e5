"""Warm-up is not traffic: on a real server, the answer series (serving.watch) count exactly the texts clients were
answered, never the `model_warmup` Triton runs through each instance as it loads. A classifier served fused and as
an ensemble, with 1 and 2 instances, shows 0 texts before any request and exactly 300 after 300 client texts; an
instance added by a reload runs its own warm-up, which is not counted either. The warm-up itself (each instance runs
its config's samples once at load) is checked offline against `warmup_requests`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import SEQ_CLS
from tests.conftest import NEWS_TEXTS, artifacts
from tests.test_layout_matrix import settled_counts

pytestmark = pytest.mark.integration

LABELS = ["sports", "stocks", "science"]
TEXTS = [NEWS_TEXTS[i % len(NEWS_TEXTS)] + "中" * (i % 7) for i in range(300)]
MODELS = {  # name -> (layout, instances)
    "fused_1": ("fused", 1),
    "fused_2": ("fused", 2),
    "ensemble_1": ("ensemble", 1),
    "ensemble_2": ("ensemble", 2),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_pipeline):
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer

    repo = tmp_path_factory.mktemp("warmup") / "models"
    for name, (layout, instances) in MODELS.items():
        build(artifacts(tiny_pipeline, name), repo, BuildOptions(runtime="python", layout=layout, instances=instances))
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=repo.parent / "server.log") as server:
        yield server


def _texts_counted(server, name: str) -> float:
    return settled_counts(server.metrics_url, name).get(("texts", ""), 0.0)


def _send(server, name: str, texts: list[str]) -> None:
    """Each text its own request, 4 at a time, so that a model's instances all answer some."""
    from ernie_deploy.client.grpc_client import Client

    model = ModelSpec.new(SEQ_CLS, name, labels=LABELS)

    def send(part: list[str]) -> None:
        with Client(model.task_spec, server.grpc_url, model=model) as client:
            for text in part:
                client.infer([text])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(send, [texts[i::4] for i in range(4)]))


@pytest.mark.parametrize("name", list(MODELS))
def test_300_client_texts_are_counted_as_300(served, name):
    assert _texts_counted(served, name) == 0, f"{name}: its warm-up was counted as answered texts"
    _send(served, name, TEXTS)
    assert _texts_counted(served, name) == len(TEXTS)


def test_an_instance_added_by_a_reload_does_not_count_its_warm_up(served):
    from ernie_deploy.client.admin import RepositoryAdmin

    name = "fused_1"
    before = _texts_counted(served, name)
    with RepositoryAdmin(served.grpc_url) as admin:
        config = admin.config(name)
        config["instance_group"][0]["count"] = 2
        admin.load(name, config)
    # A reload keeps the instance it had (its counts go on) or starts the model afresh (they start at 0); either way
    # no warm-up text is added.
    reloaded = _texts_counted(served, name)
    assert reloaded in (0, before), f"{name}: {reloaded} texts after its reload, {before} before"
    _send(served, name, TEXTS)
    assert _texts_counted(served, name) == reloaded + len(TEXTS)


def test_each_instance_skips_the_warm_up_its_config_declares(tmp_path):
    """Offline: a step whose config declares warm-up samples (2 requests twice, then 1) counts from the 6th request
    it sees, and neither counts nor mirrors those 5, even one its step refuses."""
    import json

    from ernie_deploy.core.errors import BadRequest
    from ernie_deploy.serving.postprocess_steps import WATCHES
    from ernie_deploy.serving.step import Step
    from ernie_deploy.serving.watch import WARMUP, Watched, warmup_requests

    class Answers(Step):
        def check(self, inputs):
            if inputs.get("refuse"):
                raise BadRequest("refused", "send another")
            return inputs

        def run(self, items, requested=None):
            return [{"label_id": np.array([[0]]), "confidence": np.array([[0.9]], np.float32)} for _ in items]

    from ernie_deploy.core.profile import TEXTS_METRIC, WATCHED_MODEL_PARAMETER
    from ernie_deploy.core.tasks import TASK_PARAMETER

    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "labels.json").write_text(json.dumps(LABELS))
    config = {
        "name": "post",
        "parameters": {
            WATCHED_MODEL_PARAMETER: {"string_value": "m"},
            TASK_PARAMETER: {"string_value": SEQ_CLS.name},
        },
        "model_warmup": [{"name": "a", "batch_size": 2, "count": 2}, {"name": "b", "batch_size": 1}],
    }
    assert warmup_requests(config) == 5
    watched = Watched(Answers(), config, tmp_path / "1", WATCHES["sequence"])
    refused = watched.run_requests([{"refuse": True}, {}])  # a warm-up request the step refuses is still warm-up
    assert isinstance(refused[0], BadRequest) and watched.counts.value(TEXTS_METRIC, **watched.own) == 0
    watched.run_requests([{}, {}, {}])  # the last 3 of the 5
    assert watched.counts.value(TEXTS_METRIC, **watched.own) == 0
    watched.run_requests([{}, {}])  # clients'
    assert watched.counts.value(TEXTS_METRIC, **watched.own) == 2
    assert watched._seen({}) is not WARMUP
