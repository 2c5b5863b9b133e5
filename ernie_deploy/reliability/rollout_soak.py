"""Traffic through a rollout and a rollback: every request answered, none lost, none resent, and every answer the
offline prediction of a version that was serving when it was asked (docs/RELIABILITY.md).

Clients send one text per request from several threads while the main thread rolls the model out to the new
version and back. An answer is "explained" if it equals the offline prediction of the old or the new version for
that text; requests sent wholly inside a window where only one version can be serving (after a switch returned,
before the next began) must match that version.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ernie_deploy.client.admin import RepositoryAdmin
from ernie_deploy.client.grpc_client import NO_RETRY, Client, decode_outputs
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TOKENIZER_STEP
from ernie_deploy.core.tls import ServerTls, Tls
from ernie_deploy.evaluate.offline import head_tokens, predictions, window_predict, with_thresholds
from ernie_deploy.operate.rollout import canary_probe, rollout
from ernie_deploy.repository.served import FIRST_VERSION, served_model
from ernie_deploy.repository.versions import VersionedModel
from ernie_deploy.server.process import TritonServer
from ernie_deploy.serving.encoding import encode_items, encode_whole
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.tokenizer import CLS, PAD, SEP, load_tokenizer


@dataclass
class RolloutSoakReport:
    requests: int = 0
    answered: int = 0
    failed: int = 0
    lost: int = 0
    resent: int = 0
    unexplained: int = 0  # answers equal to neither version's offline prediction
    wrong_version: int = 0  # answers of the other version, inside a window where only one was serving
    by_version: dict[str, int] = field(default_factory=dict)  # answers that only one version gives, per version
    switches: list[dict] = field(default_factory=list)  # each rollout's report
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.failed or self.lost or self.unexplained or self.wrong_version)

    def to_dict(self) -> dict:
        return {**asdict(self), "clean": self.clean}


def rollout_soak(
    url: str,
    repository,
    model: ModelSpec,
    versions: tuple[int, int],
    references: dict[int, list],
    texts: Sequence[str],
    *,
    admin: RepositoryAdmin,
    concurrency: int = 4,
    settle_s: float = 2.0,
    tls: Tls | None = None,
) -> RolloutSoakReport:
    """Traffic on served model `model` throughout: `settle_s`, rollout to versions[1], `settle_s`, rollback to
    versions[0], `settle_s`. `references[v][i]` is version v's offline prediction for texts[i]."""
    old, new = versions
    task = model.task_spec
    report = RolloutSoakReport()
    records: list[tuple[float, float, int, object]] = []  # (sent, answered, text index, prediction or None)
    lock = threading.Lock()
    stop = threading.Event()
    sent = [0]

    def worker(seed: int) -> None:
        # No retries: a request the switch disturbs must show up as failed, not be hidden by a resend.
        with Client(task, url, model=model, retry=NO_RETRY, tls=tls) as client:
            i = seed
            while not stop.is_set():
                i = (i + concurrency) % len(texts)
                t0 = time.monotonic()
                with lock:
                    sent[0] += 1
                try:
                    answer = decode_outputs(task, client.infer([texts[i]]))[0]
                except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                    with lock:
                        report.errors.append(str(exc)[:300])
                    answer = None
                with lock:
                    records.append((t0, time.monotonic(), i, answer))
            with lock:
                report.resent += client.retries

    threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in range(concurrency)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    windows = []  # (from, to, the only version serving)
    time.sleep(settle_s)
    windows.append((start, time.monotonic(), old))
    for target in (new, old):
        report.switches.append(rollout(repository, model.name, target, admin, canary_probe(url, tls)).to_dict())
        switched = time.monotonic()
        time.sleep(settle_s)
        windows.append((switched, time.monotonic(), target))
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    report.seconds = round(time.monotonic() - start, 2)
    report.requests = sent[0]
    report.answered = sum(1 for r in records if r[3] is not None)
    report.failed = sum(1 for r in records if r[3] is None)
    report.lost = report.requests - len(records)
    counts = {str(old): 0, str(new): 0}
    for t0, t1, i, answer in records:
        if answer is None:
            continue
        matches = [v for v in (old, new) if references[v][i] == answer]
        if not matches:
            report.unexplained += 1
            continue
        if len(matches) == 1:
            counts[str(matches[0])] += 1
        only = [v for a, b, v in windows if a <= t0 and t1 <= b]
        if only and only[0] not in matches:
            report.wrong_version += 1
    report.by_version = counts
    return report


def version_predictions(repository: str | Path, name: str, version: int, texts: Sequence[str]) -> list:
    """What `version` of served model `name` answers, computed in-process with the serving code from the model's
    record (how it reads a text: max_seq_len, windows, NER decoding) and that version's own files (tokenizer,
    model.onnx, labels.json and thresholds, which a version may hold differently)."""

    repository = Path(repository)
    record = served_model(repository, name)
    model = VersionedModel.read(repository, name)
    layout = model.layout
    shared = model.entry.ensemble_scheduling.step[0].model_name if layout.shares_tokenizer else TOKENIZER_STEP
    homes = layout.homes(record, shared)

    def folder(home: str) -> Path:  # a versioned model's folder of that version, a shared one's only folder
        return repository / home / (str(version) if home in model.steps else FIRST_VERSION)

    tokenizer = load_tokenizer(folder(homes["tokenizer"]) / "tokenizer.json")
    labels = json.loads((folder(homes["labels"]) / "labels.json").read_text("utf-8"))
    if layout.answers_in_graph:  # the served model.onnx answers the labels itself
        onnx = OnnxModel(folder(homes["model"]) / "model.onnx", outputs=("label",))
    else:
        onnx = OnnxModel(folder(homes["model"]) / "model.onnx")
    # The record as that version answers: its own labels and (a multi-label model's) thresholds, read from its
    # folder rather than from the record of the version serving now; the reading and the NER decoding are the record's.
    own = with_thresholds(replace(record, labels=tuple(labels), thresholds=None), folder(homes["labels"]))
    if record.long_text == "window":
        return _in_windows(own, tokenizer, onnx, list(texts))
    out: list = []
    for start in range(0, len(texts), 64):
        batch = list(texts[start : start + 64])
        enc = encode_items(tokenizer, batch, own.max_seq_len, head_tokens=head_tokens(own))
        answer = onnx(enc.input_ids, enc.token_type_ids)
        if layout.answers_in_graph:
            out += [label.decode("utf-8") if isinstance(label, bytes) else str(label) for label in answer.reshape(-1)]
        else:
            out += predictions(own, answer, enc, batch)
    return out


def _in_windows(record: ModelSpec, tokenizer, onnx, texts: list[str]) -> list:
    """A model that reads texts in windows, read in the windows its record says it is served with."""

    specials = tuple(tokenizer.token_to_id(token) for token in (CLS, SEP, PAD))
    whole = lambda batch: encode_whole(tokenizer, batch)  # noqa: E731 - the one-line reader window_predict takes
    return window_predict(record, texts, whole, onnx, specials)


def run_rollout_soak(
    repository: str | Path,
    name: str,
    to_version: int,
    texts: Sequence[str],
    *,
    concurrency: int = 4,
    settle_s: float = 5.0,
    grpc_tls: ServerTls | None = None,
    tls: Tls | None = None,
) -> dict:
    """Serve `repository` on free loopback ports and run traffic on `name` through a rollout to `to_version` and a
    rollback; the report's `clean` says whether nothing failed, got lost or was answered by the wrong version."""

    model = served_model(repository, name)
    current = VersionedModel.read(repository, name).serving_version()
    references = {v: version_predictions(repository, name, v, texts) for v in (current, to_version)}
    differ = sum(a != b for a, b in zip(references[current], references[to_version]))
    with TritonServer(repository, http_port=0, grpc_port=0, metrics_port=0, grpc_tls=grpc_tls) as server:
        with RepositoryAdmin(server.grpc_url, server.admin_key, tls=tls) as admin:
            report = rollout_soak(
                server.grpc_url,
                repository,
                model,
                (current, to_version),
                references,
                texts,
                admin=admin,
                concurrency=concurrency,
                settle_s=settle_s,
                tls=tls,
            )
    return {
        "model": name,
        "versions": [current, to_version],
        "texts": len(texts),
        "texts_the_versions_answer_differently": differ,
        **report.to_dict(),
    }
