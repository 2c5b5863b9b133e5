"""Rollout and rollback of a named model's version on a running server, with no request lost.

Triton has no traffic split, so a canary here is a second model, `<name>_canary`, that answers with the new
version: for a layout whose entry is an ensemble, a second ensemble pinned to the new version and wired to the same
steps (rollout first loads the new version beside the serving one in the versioned steps); for a fused model, a copy
of the model holding the new version. Rollout probes the canary with real text (and callers may send their own canary
traffic to it by name), and only then re-points `<name>` at the new version in one reload: Triton finishes in-flight
requests on the old config while new ones take the new. The old version is unloaded last.
Every config a move writes is rendered from the record of the version it serves, as `build` renders it
(repository.versions.VersionedModel.pinned), so a version's serving settings go live with it and come back with a
rollback. Every edit is written to the repository's configs first (atomically), so a restarted server serves what was
rolled out. The server must run in explicit model control mode (the project's launcher does) and, where its
repository API is guarded, the caller must hold the admin key.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.client.admin import RepositoryAdmin
from ernie_deploy.client.grpc_client import Client, decode_outputs
from ernie_deploy.core.errors import (
    BadOptionsError,
    BadRepositoryError,
    ErnieDeployError,
    FailedRequestsError,
    ServerNotReadyError,
)
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tls import Tls
from ernie_deploy.repository.served import served_model
from ernie_deploy.repository.versions import VersionedModel

# Real text for the canary probe when the caller gives none: Chinese, Latin and digits, one long enough to be cut.
PROBE_TEXTS = ("国足公布世预赛名单", "张三在北京大学读书", "股市大涨 abc 123", "中国" * 100)


@dataclass
class RolloutReport:
    name: str
    from_version: int
    to_version: int
    probe_texts: int = 0
    # seconds: loading the new version beside the old, probing the canary, switching the ensemble, unloading
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def rollout(
    repository: str | Path,
    name: str,
    to_version: int,
    admin: RepositoryAdmin,
    probe: Callable[[ModelSpec, Sequence[str]], None],
    *,
    probe_texts: Sequence[str] = PROBE_TEXTS,
    log: Callable[[str], None] = lambda line: None,
) -> RolloutReport:
    """Move served model `name` to `to_version`. `probe(canary, texts)` sends real text to the canary (the model's
    record under the canary's name) and raises if an answer is missing or malformed. On a failure before the
    switch, the canary and the new version are taken away again and the model keeps serving its old version."""
    move = Move.begin(repository, name, to_version, admin, probe_texts, log)
    move.load_candidate(probe, probe_texts)
    move.switch()
    return move.report


@dataclass
class Move:
    """One move of a served model from its serving version to another, in its phases: `begin` (checks), then
    `load_candidate` (the new version beside the serving one, the canary answering with it, probed), then `switch`
    (the model answers with the new version, the old one goes) or `undo` (the new one goes). Rollout runs them in a
    row; a shadow evaluation (operate/shadow.py) compares the two versions between the load and the switch."""

    model: VersionedModel
    served: ModelSpec
    current: int
    to_version: int
    admin: RepositoryAdmin
    report: RolloutReport
    log: Callable[[str], None]
    clock: float = field(default_factory=time.perf_counter)

    @classmethod
    def begin(
        cls,
        repository: str | Path,
        name: str,
        to_version: int,
        admin: RepositoryAdmin,
        probe_texts: Sequence[str] = PROBE_TEXTS,
        log: Callable[[str], None] = lambda line: None,
    ) -> Move:
        model = VersionedModel.read(repository, name)
        served = served_model(repository, name)
        current = model.serving_version()
        _check_served_from(model, admin)
        if to_version == current:
            raise BadOptionsError(
                f"{name} already serves version {to_version}", "nothing to do; to move it, name another version"
            )
        if to_version not in model.on_disk():
            raise BadRepositoryError(
                f"{name} has no version {to_version} in {model.repository} (versions: {model.on_disk()})",
                f"add it with `ernie-deploy build --model {name} --version {to_version}`",
            )
        report = RolloutReport(name, current, to_version, len(probe_texts))
        return cls(model, served, current, to_version, admin, report, log)

    @property
    def canary_dir(self) -> Path:
        return self.model.repository / self.model.canary

    def phase(self, name: str) -> None:
        now = time.perf_counter()
        self.report.seconds[name] = round(now - self.clock, 3)
        self.clock = now
        self.log(f"{self.model.name}: {name} done in {self.report.seconds[name]:.2f}s")

    def load_candidate(self, probe: Callable[[ModelSpec, Sequence[str]], None], probe_texts: Sequence[str]) -> None:
        """Load the new version beside the serving one (in the versioned steps, where the entry routes to them) and
        the canary answering with it, and probe the canary; on a failure, undo and raise."""
        model, admin, to_version = self.model, self.admin, self.to_version
        try:
            if model.routed:  # both versions loaded: the serving one keeps answering throughout
                for step in model.steps:
                    model.write(self.both_versions(step))
                    admin.load(step)
            self.phase("load")
            model.write_canary(to_version)
            _load_canary(model, admin)
            # The canary answers as the candidate's record says (its labels, its wire), under the canary's name.
            probe(replace(model.record(to_version), name=model.canary), list(probe_texts))
            self.phase("probe")
        except BaseException:
            self.undo()
            raise

    def both_versions(self, step: str) -> mc.ModelConfig:
        """A versioned step's config while the move is under way: the serving and the new version loaded. Settings
        are per Triton model: while both versions are loaded, both run with the new version's (its record's)."""
        return self.model.with_versions(step, [self.current, self.to_version], rendered_from=self.to_version)

    def switch(self) -> None:
        """The switch: in-flight requests finish on the old config, new ones take the new. A model that holds its
        versions itself loads the new version and only then lets the old one go."""
        model, admin = self.model, self.admin
        model.write(model.pinned(self.to_version))
        try:
            admin.load(model.name)
        except BaseException:
            model.write(model.pinned(self.current))
            self.undo()
            raise
        self.phase("switch")
        admin.unload(model.canary)
        shutil.rmtree(self.canary_dir, ignore_errors=True)
        if model.routed:
            for step in model.steps:
                model.write(model.with_versions(step, [self.to_version], rendered_from=self.to_version))
                admin.load(step)
        self.phase("unload")

    def undo(self) -> None:
        _undo(self.model, self.admin, self.current, self.canary_dir, self.log)


def _check_served_from(model: VersionedModel, admin: RepositoryAdmin) -> None:
    """Refuse to edit configs the server does not load: every model of this repository must be in the server's
    repository index (a server may have more than one repository, so it may list more). The configs are written
    before each load, so another folder's edits would be loaded by nobody, or the wrong model reloaded."""
    served = {m.get("name") for m in admin.index()}
    local = sorted(p.name for p in model.repository.iterdir() if (p / "config.pbtxt").is_file())
    missing = [name for name in local if name not in served]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise BadRepositoryError(
            f"the server at {admin.url} does not run {model.repository}: its repository has no {shown}",
            "pass --repository the folder the server was started with (its --model-repository)",
        )


def _load_canary(model: VersionedModel, admin: RepositoryAdmin) -> None:
    """A server that runs a copy of this repository (the same models, another folder) passes _check_served_from;
    the canary just written here is where it shows: Triton fails to find it in its repository (measured), which
    RepositoryAdmin raises as BadRepositoryError."""
    try:
        admin.load(model.canary)
    except BadRepositoryError:
        raise BadRepositoryError(
            f"the server at {admin.url} does not see {model.canary}, just written to {model.repository}: it runs "
            "another folder",
            "pass --repository the folder the server was started with (its --model-repository)",
        ) from None


def _undo(model: VersionedModel, admin: RepositoryAdmin, current: int, canary_dir: Path, log) -> None:
    """Take the canary and the new version away again; the serving version was never touched."""
    log(f"{model.name}: the new version was not switched to; taking it away again")
    for action in (lambda: admin.unload(model.canary), lambda: shutil.rmtree(canary_dir, ignore_errors=True)):
        try:
            action()
        except ErnieDeployError:
            pass
    if not model.routed:
        return  # the serving model itself was not touched before the switch
    for step in model.steps:
        model.write(model.with_versions(step, [current], rendered_from=current))
        try:
            admin.load(step)
        except ErnieDeployError as exc:  # the configs on disk are right; a restart or the next load applies them
            log(f"{model.name}: could not reload {step}: {exc.problem}")


def canary_probe(url: str, tls: Tls | None = None) -> Callable[[ModelSpec, Sequence[str]], None]:
    """The probe `rollout` takes: every text sent to the canary over gRPC (with `tls`, over TLS) must come back as a
    well-formed answer."""

    def probe(canary: ModelSpec, texts: Sequence[str]) -> None:
        task = canary.task_spec
        with Client(task, url, model=canary, tls=tls) as client:
            _wait_model_ready(client, canary.name)
            # A pair model gets each text paired with itself, as `ernie-deploy probe` sends it.
            items = [t if len(task.inputs) == 1 else (t,) * len(task.inputs) for t in texts]
            answers = decode_outputs(task, client.infer(items))
        if len(answers) != len(texts):
            raise FailedRequestsError(
                f"the canary {canary.name} answered {len(answers)} of {len(texts)} texts",
                "read the server's log for the new version's errors; the serving version keeps answering",
            )

    return probe


def _wait_model_ready(client: Client, model: str, timeout_s: float = 30.0) -> None:
    """Wait for the canary itself to be ready. Not the server's readiness: while a model loads or a replaced version
    unloads (a rollback right after a rollout: the old canary's version still unloading), a strict-readiness server
    reports itself not ready for a moment, and that says nothing of the canary."""
    deadline = time.monotonic() + timeout_s
    while not client.client.is_model_ready(model):
        if time.monotonic() > deadline:
            raise ServerNotReadyError(
                f"the canary {model} is not ready on {client.url} after {timeout_s:.0f} s", "read the server log"
            )
        time.sleep(0.1)


def previous_version(repository: str | Path, name: str) -> int:
    """The version rollback returns to: the newest one on disk older than the serving one."""
    model = VersionedModel.read(repository, name)
    current = model.serving_version()
    older = [v for v in model.on_disk() if v < current]
    if not older:
        raise BadRepositoryError(
            f"{name} serves version {current} and has no older version on disk to go back to",
            "name one with --to, or build one with `ernie-deploy build --model NAME --version N`",
        )
    return older[-1]
