"""Drift on a real Prometheus scraping the real server: the news classifier's test split replayed raises no drift
alert, MSRA's sentences sent to it shift its text lengths, and texts of one class only drift its answers, which
alerts once the window holds enough texts and not before.

The rules are drift.yml's, generated with a 30 s window and no `for` (drift_rules(window="30s", alert_for="0s")), the
scrape and evaluation every second. Each test starts its own Prometheus, so its windows hold only the texts the test
sends (increase() counts from the first scrape) whatever other tests sent to the same server before. The series
come from the answering step (serving/watch.py) and its reference from reference.json, written at build from the dev
split: a server without them fails here, it does not skip.
"""

from __future__ import annotations

import random
import time

import pytest
import yaml

from ernie_deploy.core import profile
from ernie_deploy.deployfiles import drift_rules
from tests.test_prometheus import _Prometheus, _wait_for

pytestmark = pytest.mark.integration

WINDOW = "30s"
# 300 texts a case (a few seconds on 2 cores) against a minimum of 100: the 200-text sampling noise of the label
# JS (max 0.021 measured, drift_rules.py) stays well under ANSWER_JS, and 50 texts stay under the minimum.
SENT = 300
MIN_TEXTS = 100
RULES = drift_rules.names(WINDOW)


@pytest.fixture
def prom(server, tmp_path):
    """A Prometheus on `server` with the drift rules over WINDOW, each alert firing as soon as its condition holds."""
    rules = tmp_path / "drift.yml"
    rules.write_text(yaml.safe_dump(drift_rules.drift_rules(window=WINDOW, alert_for="0s", min_texts=MIN_TEXTS)))
    prom = _Prometheus(tmp_path, server.metrics_url.split("//")[1].split("/")[0], rule_files=[rules])
    try:
        prom.wait_ready()
        yield prom
    finally:
        prom.stop()


def _model() -> str:
    from ernie_deploy.core.tasks import DEMO_MODELS, SEQ_CLS

    return DEMO_MODELS[SEQ_CLS.name]


def _watched(prom: _Prometheus, model: str) -> None:
    """Wait for the model's profile, texts and reference series to be scraped (the baseline that increase() needs
    before any text is sent); fail naming what is missing."""
    wanted = (profile.PROFILE_METRIC, profile.TEXTS_METRIC, profile.REFERENCE_METRIC)

    def missing() -> list[str]:
        return [name for name in wanted if not prom.query(f'{name}{{model="{model}"}}')]

    absent = _wait_for(missing, timeout=20.0)
    assert not absent, (
        f"{model} exports no {', '.join(absent)} on the server's metrics port: the answering step's watch "
        "(serving/watch.py) or the reference.json written at build is missing"
    )
    # Every bucket of the classifier's series is there from the start (created at 0), the reference's too.
    series = {r["metric"]["series"] for r in prom.query(f'{profile.PROFILE_METRIC}{{model="{model}"}}')}
    assert {profile.LABEL, profile.CONFIDENCE, profile.CHARS} <= series, series
    time.sleep(2.0)  # two scrapes: the counters' values before the first text


def _send(server, texts: list[str], batch: int = 16) -> None:
    """`texts` to the news classifier, `batch` a request."""
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.core.tasks import SEQ_CLS

    with Client(SEQ_CLS, server.grpc_url) as client:
        for start in range(0, len(texts), batch):
            client.infer(texts[start : start + batch])


def _value(prom: _Prometheus, promql: str) -> dict[str, float]:
    """{series label or "": value} of a query's answer."""
    return {r["metric"].get("series", ""): float(r["value"][1]) for r in prom.query(promql)}


def _recorded(prom: _Prometheus, rule: str, model: str) -> dict[str, float]:
    """The model's values of a recorded series (RULES' key `rule`): per series, or {"": value}."""
    return _value(prom, f'{RULES[rule]}{{model="{model}"}}')


def _texts_at_least(prom: _Prometheus, model: str, count: float, timeout: float = 20.0) -> float:
    def short() -> bool:
        got = _recorded(prom, "texts", model)
        return not got or got[""] < count

    assert not _wait_for(short, timeout=timeout, interval=0.5), (
        f"Prometheus counts {_value(prom, RULES['texts'])} texts in {WINDOW}, wanted {count} for {model}"
    )
    return _recorded(prom, "texts", model)[""]


def _firing(prom: _Prometheus, model: str) -> dict[str, set[str]]:
    """{alert name: series (or "") it fires for} of the model's drift alerts firing now."""
    firing: dict[str, set[str]] = {}
    for alert in prom.api("alerts")["alerts"]:
        labels = alert["labels"]
        if (
            alert["state"] == "firing"
            and labels.get("model") == model
            and labels["alertname"].startswith("ErnieDeploy")
        ):
            firing.setdefault(labels["alertname"], set()).add(labels.get("series", ""))
    return firing


def _fires(prom: _Prometheus, model: str, alert: str, timeout: float = 15.0) -> dict[str, set[str]]:
    """Wait for `alert` to fire for `model` (well within WINDOW); return what fires then."""
    assert not _wait_for(lambda: alert not in _firing(prom, model), timeout=timeout, interval=0.5), (
        f"{alert} did not fire for {model}: drift {_recorded(prom, 'js', model)}, texts "
        f"{_recorded(prom, 'texts', model)}, firing {_firing(prom, model)}"
    )
    return _firing(prom, model)


def _split(folder, split: str, fmt: str) -> tuple[list[str], list]:
    from ernie_deploy.fetch.data import read_split

    return read_split(folder, split, fmt)


def test_the_test_split_replayed_raises_no_drift_alert(prom, server, thucnews):
    model = _model()
    _watched(prom, model)
    texts, _ = _split(thucnews, "test", "tsv")
    sample = random.Random(0).sample(texts, SENT)  # the split's classes in its proportions, not its file order
    _send(server, sample)
    _texts_at_least(prom, model, 0.9 * SENT)
    # Watched over several evaluations while the window holds the texts: its divergences stay under the thresholds,
    # and no drift alert fires for it.
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        assert not _firing(prom, model), (_firing(prom, model), _recorded(prom, "js", model))
        time.sleep(0.5)
    js = _recorded(prom, "js", model)
    assert {profile.LABEL, profile.CONFIDENCE, profile.CHARS} <= set(js), js
    assert js[profile.LABEL] < drift_rules.ANSWER_JS / 2, js
    assert js[profile.CHARS] < drift_rules.CHARS_JS / 2, js
    low = _recorded(prom, "low", model)[""]
    reference_low = _recorded(prom, "reference_low", model)[""]
    assert low - reference_low < drift_rules.LOW_CONFIDENCE_RISE / 2, (low, reference_low)


def test_msra_sentences_sent_to_the_news_classifier_shift_its_text_lengths(prom, server, msra_ner):
    """MSRA's sentences (20-100 characters) where the classifier's reference holds news titles (10-30): their
    lengths' divergence was measured at 0.44 against the titles'."""
    model = _model()
    _watched(prom, model)
    sentences, _ = _split(msra_ner, "test", "jsonl")
    _send(server, random.Random(0).sample(sentences, SENT))
    _texts_at_least(prom, model, MIN_TEXTS)
    firing = _fires(prom, model, "ErnieDeployTextLengthShift")
    assert firing["ErnieDeployTextLengthShift"] == {profile.CHARS}, firing
    js = _recorded(prom, "js", model)
    assert js[profile.CHARS] > drift_rules.CHARS_JS, js


def test_texts_of_one_class_drift_the_answers_once_the_window_holds_enough(prom, server, thucnews):
    """Sports news only: the classifier answers sports for most of them (it is right 83 % of the time on the test
    split) where its reference answers every class about as often. Under MIN_TEXTS nothing fires though the
    divergence is already high; past it ErnieDeployAnswerDrift fires. (Sports titles of the train split are a little
    longer than the dev split's titles of every class, chars JS 0.13 measured, so their lengths may alert too.)"""
    model = _model()
    _watched(prom, model)
    texts, labels = _split(thucnews, "train", "tsv")
    sports = [t for t, label in zip(texts, labels) if label == "sports"]
    assert len(sports) >= SENT, len(sports)
    few = MIN_TEXTS // 2
    _send(server, sports[:few])
    _texts_at_least(prom, model, few * 0.9)

    def drifted() -> bool:
        return _recorded(prom, "js", model).get(profile.LABEL, 0) <= 0.3

    assert not _wait_for(drifted, timeout=10.0), _recorded(prom, "js", model)
    time.sleep(2.0)  # two more evaluations with the drift recorded and too few texts
    assert _recorded(prom, "texts", model)[""] < MIN_TEXTS, _recorded(prom, "texts", model)
    assert "ErnieDeployAnswerDrift" not in _firing(prom, model), (_firing(prom, model), _recorded(prom, "js", model))

    _send(server, sports[few:SENT])
    _texts_at_least(prom, model, MIN_TEXTS)
    firing = _fires(prom, model, "ErnieDeployAnswerDrift")
    assert firing["ErnieDeployAnswerDrift"] == {profile.LABEL}, firing
    assert _recorded(prom, "js", model)[profile.LABEL] > 0.5  # one class of ten: 0.76 if every answer is right
