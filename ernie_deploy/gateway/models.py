"""What the gateway knows of the served models: each model's record (task, labels, wire), its request limits and
its batch size, read from the repository folder (repository.served) at start and again when a request names a model
it does not know (one added since), at most once a second so that a stream of unknown names costs no more."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import SCHEMA_INPUT
from ernie_deploy.kinds.embed import KIND as EMBED
from ernie_deploy.kinds.rerank import DEFAULT_SCORE
from ernie_deploy.kinds.rerank import KIND as RERANK
from ernie_deploy.serving.limits import TextLimits

log = logging.getLogger("ernie_deploy.gateway")

# The least time between two reads of the repository for a model the gateway does not know.
REREAD_S = 1.0


@dataclass(frozen=True)
class ServedModel:
    """One model users call, as the record of the version it serves says (core.spec): its task, labels and wire, the
    most texts one Triton request may hold (`serving.max_batch_size`, the entry's own, which its config is rendered
    from) and the limits its tokenizer holds a request to (serving.limits.TextLimits)."""

    record: ModelSpec

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def max_batch_size(self) -> int:
        return self.record.serving.max_batch_size

    @property
    def limits(self) -> TextLimits:
        return TextLimits(self.record.max_text_chars, self.record.max_request_chars)

    def info(self) -> dict:
        record, wire = self.record, self.record.wire
        out = {
            "name": record.name,
            "task": record.task,
            "kind": record.kind,
            "labels": list(record.labels),
            "io": wire.name,
            "inputs": [spec.name for spec in wire.input_specs()],
            "outputs": [spec.name for spec in wire.output_specs()],
            "max_seq_len": record.max_seq_len,
            "max_text_chars": record.max_text_chars,
            "max_request_chars": record.max_request_chars,
            "max_batch_size": self.max_batch_size,
            "layout": record.layout,
            "long_text": record.long_text,
            "thresholds": record.thresholds,
            "serving": record.serving.to_dict(),
            "routes": self.routes(),
        }
        if record.kind == EMBED.name:
            # The vector's size (None: not recorded, read from an answer) and whether the graph answers it at length 1.
            out |= {"dim": record.dim, "normalized": record.normalized}
        elif record.kind == RERANK.name:
            out["scoring"] = record.scoring or DEFAULT_SCORE
        return out

    def routes(self) -> dict[str, str]:
        """The routes that answer this model: every model's, and those of its kind."""
        name, kind = self.record.name, self.record.kind
        routes = {"simple_serving": f"/models/{name}"}
        if reads_schema(self.record):
            routes["taskflow"] = f"/taskflow/{name}"
        routes["hugging_face"] = f"/hf/{name}"
        if kind == EMBED.name:  # TEI's /predict answers classifiers
            routes |= {
                "tei_embed": f"/hf/{name}/embed",
                "tei_similarity": f"/hf/{name}/similarity",
                "openai_embeddings": "/v1/embeddings",
            }
        else:
            routes["tei_predict"] = f"/hf/{name}/predict"
        if kind == RERANK.name:
            routes["tei_rerank"] = f"/hf/{name}/rerank"
        routes["tei_tokenize"] = f"/hf/{name}/tokenize"
        return routes


def reads_schema(record: ModelSpec) -> bool:
    """Whether the model reads a schema (an extraction model): the models SimpleServing's taskflow route serves."""
    task = record.task_spec
    return any(spec.name == SCHEMA_INPUT.name for spec in (*task.inputs, *task.options))


def read_models(repository: str | Path) -> dict[str, ServedModel]:
    """Every model the repository serves, by name, each as the record of the version it serves."""
    from ernie_deploy.repository.served import served_models

    return {name: ServedModel(record) for name, record in served_models(repository).items()}


class ModelTable:
    """The served models, read again (off the event loop) when asked for one it does not hold."""

    def __init__(self, repository: str | Path):
        self.repository = Path(repository)
        self._stamp = self._configs_stamp()
        self.models: dict[str, ServedModel] = read_models(self.repository)
        self._read_at = time.monotonic()
        self._lock = asyncio.Lock()

    async def get(self, name: str) -> ServedModel | None:
        if name in self.models:
            return self.models[name]
        async with self._lock:
            if name not in self.models and time.monotonic() - self._read_at >= REREAD_S:
                await self.reread()
        return self.models.get(name)

    async def refreshed(self) -> dict[str, ServedModel]:
        """The models, read again where a served model's config changed since they were read: a rollout moves the
        record a model serves by (repository.versions), and what the gateway shows follows it. One stat per model."""
        async with self._lock:
            if await asyncio.to_thread(self._configs_stamp) != self._stamp:
                await self.reread()
        return self.models

    def _configs_stamp(self) -> tuple:
        """When each config of the repository was last written (what a build or a rollout rewrites)."""
        stamps = []
        for path in sorted(self.repository.glob("*/config.pbtxt")):
            try:
                stamps.append((path.parent.name, path.stat().st_mtime_ns))
            except OSError:  # removed since the listing
                continue
        return tuple(stamps)

    async def reread(self) -> None:
        try:
            # Stamped before the read: a config written during it is read again next time.
            stamp = await asyncio.to_thread(self._configs_stamp)
            self.models = await asyncio.to_thread(read_models, self.repository)
            self._stamp = stamp
        except Exception as exc:  # a repository being rebuilt: keep serving what was read before
            log.warning(
                "reading the models of %s failed, keeping the %d read before: %s",
                self.repository,
                len(self.models),
                exc,
            )
        self._read_at = time.monotonic()
