"""What a running server serves, asked from the server: the models users call, the models each one's requests run
through, and each loaded model's warm-up. For tools that report on a server (`stats`), whatever folder they run in.

A server started by ernie-deploy keeps its repository index and model configs behind the admin key
(core.admin_key). With the key, or on a server that leaves those APIs open, they say it all: every ready model, each
ensemble's steps in order, each model's `model_warmup` and instances. Without it only the statistics and metadata
APIs answer (what `probe` uses): they name the loaded models and which of them users call (platform "ensemble", or
a fused model that takes texts), but not which models an ensemble runs. A local repository's record gives those
steps where it matches what the server serves: the same ensemble with the same inputs and outputs, every step it
names loaded there with the inputs and outputs its config declares. Any other loaded model is shown on its own.

Warm-up, measured on Triton 2.51 (the tiny classifier, 2 shared cores): right after load each step has answered its
warm-up and nothing else, 1 request per sample taking 20-200 ms, where one warm request through the whole ensemble
took 3.3 ms; a tokenizer with 2 instances had 2 requests, a model whose sample has batch_size 2 and count 3 had 6
requests in 3 executions. So a model's warm-up requests per load are instances x batch_size x max(count, 1), summed
over its samples, times its loaded versions; an ensemble has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote

from ernie_deploy.core.admin_key import ADMIN_KEY_ENV, ADMIN_KEY_FILE_ENV, AdminKey
from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, ServerNotReadyError
from ernie_deploy.core.spec import SPEC_PARAMETER, ModelSpec
from ernie_deploy.core.tasks import TASK_PARAMETER
from ernie_deploy.core.tls import Tls
from ernie_deploy.server.probe import ProbeFailed, http_json, takes_texts
from ernie_deploy.server.stats import loaded_stats

# Triton 2.51's HTTP 403 text for a restricted API called without the right header (or with another key).
_RESTRICTED = "is restricted, expecting header"
KEY_HINT = (
    f"pass --admin-key-file, or set {ADMIN_KEY_FILE_ENV} or {ADMIN_KEY_ENV}, to the key the server was started with"
)


@dataclass(frozen=True)
class RecordedModel:
    """A model as a local repository's config records it: what matching it against the server needs."""

    inputs: frozenset[str]
    outputs: frozenset[str]
    steps: tuple[str, ...] = ()  # an ensemble's steps in order; () for any other model


@dataclass(frozen=True)
class LocalRecord:
    """What a local repository folder records, by model (read by the caller: this package parses no configs)."""

    folder: str
    models: dict[str, RecordedModel]
    records: dict[str, ModelSpec] = field(default_factory=dict)  # each served model's record (core.spec)
    unread: dict[str, str] = field(default_factory=dict)  # each model whose record could not be read -> why, fix


@dataclass(frozen=True)
class ServedOnServer:
    """What one server serves."""

    url: str
    # Every model users call -> the models its requests run through, in order (a fused model: itself); None for an
    # ensemble whose steps the server did not say and no local repository matched.
    steps: dict[str, list[str] | None]
    loaded: list[str]  # every loaded model
    # Per loaded model, the warm-up requests its counters hold since it loaded; None where the configs were not read.
    warmups: dict[str, int] | None
    # Without the configs: the served ensembles whose steps came from a local repository's record, and that folder.
    local: list[str] = field(default_factory=list)
    repository: str = ""
    # Each served model's record (core.spec), of the version it serves: from the server's configs where they answer,
    # else from the local repository's.
    records: dict[str, ModelSpec] = field(default_factory=dict)
    # Each served model whose record could not be read (of another format, unreadable) -> the problem and its fix:
    # its numbers stand without it, and notes() names it so that a missing record line is never a silent one.
    unread: dict[str, str] = field(default_factory=dict)

    @property
    def unattached(self) -> list[str]:
        """Loaded models that are neither served nor a known step of a served model."""
        known = set(self.steps) | {s for members in self.steps.values() for s in members or ()}
        return [name for name in self.loaded if name not in known]

    def notes(self, others_shown: bool = True) -> list[str]:
        """Where the grouping came from, for a reader of the numbers, where it was not the server's configs
        (`others_shown`: the unattached models are in the table)."""
        out = []
        if self.local:
            out.append(
                f"the steps of {', '.join(self.local)} are those the repository {self.repository} records, which "
                "matches what the server serves: the server's own configs need its admin key"
            )
        unknown = [name for name, members in self.steps.items() if members is None]
        if unknown:
            shown = ", so its other loaded models are shown on their own" if others_shown and self.unattached else ""
            out.append(
                f"the steps of {', '.join(unknown)} are not known: the server keeps its model configs behind its "
                f"admin key{shown}; {KEY_HINT}, or --repository the folder the server serves"
            )
        elif self.unattached and others_shown:
            out.append(f"{', '.join(self.unattached)}: loaded, and run by no served model known here; {KEY_HINT}")
        for name, why in sorted(self.unread.items()):
            out.append(f"{name}: its record is not shown: {why}")
        return out


def unread_record(exc: BadRepositoryError | BadOptionsError) -> str:
    """What a record that could not be read says to the reader: its problem and, where known, its fix."""
    return f"{exc.problem}; fix: {exc.fix}" if exc.fix else exc.problem


def served_on_server(
    url: str,
    key: AdminKey | None = None,
    local: LocalRecord | None = None,
    timeout: float = 5.0,
    tls: Tls | None = None,
) -> ServedOnServer:
    """Ask the server at `url` (its HTTP endpoint) what it serves: from its index and configs where they answer
    (sent `key`), else from its statistics and metadata, with the steps of its ensembles taken from the `local`
    record of a repository where that matches."""
    names = sorted({entry["name"] for entry in loaded_stats(url, timeout, tls)})
    headers = key.headers() if key is not None else None
    try:
        index = http_json(f"{url}/v2/repository/index", timeout, {}, headers=headers, tls=tls)
        configs = _answers(url, names, "/config", timeout, headers=headers, tls=tls)
    except ProbeFailed as exc:
        if _RESTRICTED not in exc.problem:
            raise ServerNotReadyError(
                f"cannot read {url}'s repository index: {exc.problem}",
                "check that the server is up and serves Triton's API",
            ) from None
        if key is not None:
            raise BadOptionsError(
                f"{url} refused the admin key from {key.source}, which is not the key it was started with "
                f"({exc.problem})",
                "use the key the server was started with (its ERNIE_DEPLOY_ADMIN_KEY or admin key file; on "
                "Kubernetes, the Secret its Deployment mounts)",
            ) from None
        return _from_metadata(url, _answers(url, names, "", timeout, tls=tls), local)
    return _from_configs(url, index, configs)


def _answers(url: str, names: list[str], path: str, timeout: float, **kw) -> dict[str, dict]:
    """`GET <url>/v2/models/<name><path>` for each model, by name. A model that went away since the statistics
    named it (a rollout's canary, an unload) is left out; a refusal by the admin key raises ProbeFailed."""
    out = {}
    for name in names:
        try:
            out[name] = http_json(f"{url}/v2/models/{quote(name, safe='')}{path}", timeout, **kw)
        except ProbeFailed as exc:
            if _RESTRICTED in exc.problem:
                raise
    return out


def _from_configs(url: str, index: list[dict], configs: dict[str, dict]) -> ServedOnServer:
    versions: dict[str, int] = {}
    for entry in index:
        if entry.get("state") == "READY":
            versions[entry["name"]] = versions.get(entry["name"], 0) + 1
    steps: dict[str, list[str] | None] = {}
    for name, config in configs.items():
        if config.get("platform") == "ensemble":
            steps[name] = [s["model_name"] for s in config.get("ensemble_scheduling", {}).get("step", [])]
        elif TASK_PARAMETER in config.get("parameters", {}):
            steps[name] = [name]
    # A loaded model no served model runs is still shown, as its own one step.
    used = {s for members in steps.values() for s in members or ()}
    for name in configs:
        if name not in steps and name not in used:
            steps[name] = [name]
    # Each loaded version ran its own warm-up (the versions of a model share its config).
    warmups = {name: max(1, versions.get(name, 1)) * _warmup_per_load(config) for name, config in configs.items()}
    records, unread = {}, {}
    for name, config in configs.items():
        text = config.get("parameters", {}).get(SPEC_PARAMETER, {}).get("string_value")
        if text:
            try:
                records[name] = ModelSpec.from_json(text, f"{name}'s record on {url}")
            # OldRecord (another format) or a record this version cannot read (BadRepositoryError), or one whose
            # task or values it does not know (BadOptionsError): the numbers stand without it; the note names it
            except (BadRepositoryError, BadOptionsError) as exc:
                unread[name] = unread_record(exc)
    return ServedOnServer(url, dict(sorted(steps.items())), sorted(configs), warmups, records=records, unread=unread)


def _warmup_per_load(config: dict) -> int:
    """The requests one load of a model runs as warm-up: every instance runs every sample `count` times (at least
    once), each run `batch_size` requests (see the module's measurement)."""
    instances = sum(
        int(group.get("count", 1)) * max(1, len(group.get("gpus", []))) for group in config.get("instance_group", [])
    )
    per_instance = sum(
        max(1, int(sample.get("batch_size", 1))) * max(1, int(sample.get("count", 0)))
        for sample in config.get("model_warmup", [])
    )
    return max(1, instances) * per_instance


def _from_metadata(url: str, meta: dict[str, dict], local: LocalRecord | None) -> ServedOnServer:
    steps: dict[str, list[str] | None] = {}
    for name, m in meta.items():
        if m.get("platform") == "ensemble":
            steps[name] = None
        elif takes_texts(m):
            steps[name] = [name]
    recorded = _local_steps(local, meta) if local is not None else {}
    matched = sorted(name for name in steps if steps[name] is None and name in recorded)
    for name in matched:
        steps[name] = recorded[name]
    records = {name: record for name, record in (local.records if local else {}).items() if name in steps}
    unread = {name: why for name, why in (local.unread if local else {}).items() if name in steps}
    return ServedOnServer(
        url,
        steps,
        sorted(meta),
        None,
        local=matched,
        repository=local.folder if local else "",
        records=records,
        unread=unread,
    )


def _local_steps(local: LocalRecord, meta: dict[str, dict]) -> dict[str, list[str]]:
    """The ensembles of the `local` record that match the server's: same name and tensors, every step loaded there
    with the tensors the record declares."""

    def same(name: str) -> bool:
        recorded, m = local.models.get(name), meta.get(name)
        if recorded is None or m is None:
            return False
        served = (frozenset(t["name"] for t in m.get("inputs", [])), frozenset(t["name"] for t in m.get("outputs", [])))
        return (recorded.inputs, recorded.outputs) == served

    out = {}
    for name, recorded in local.models.items():
        if not recorded.steps or meta.get(name, {}).get("platform") != "ensemble":
            continue
        if same(name) and all(same(step) for step in recorded.steps):
            out[name] = list(recorded.steps)
    return out
