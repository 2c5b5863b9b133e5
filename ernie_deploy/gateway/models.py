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

log = logging.getLogger("ernie_deploy.gateway")

# The least time between two reads of the repository for a model the gateway does not know.
REREAD_S = 1.0


@dataclass(frozen=True)
class ServedModel:
    """One model users call: its record, the most texts one Triton request may hold (its config's max_batch_size),
    and the limits its tokenizer holds a request to (serving.limits.TextLimits; None where the repository does not
    say)."""

    record: ModelSpec
    max_batch_size: int
    limits: object | None

    @property
    def name(self) -> str:
        return self.record.name

    def info(self) -> dict:
        record, wire = self.record, self.record.wire
        limits = self.limits
        return {
            "name": record.name,
            "task": record.task,
            "kind": record.kind,
            "labels": list(record.labels),
            "io": wire.name,
            "inputs": [spec.name for spec in wire.input_specs()],
            "outputs": [spec.name for spec in wire.output_specs()],
            "max_seq_len": record.max_seq_len,
            "max_text_chars": limits.max_text_chars if limits else record.max_text_chars,
            "max_request_chars": limits.max_request_chars if limits else record.max_request_chars,
            "max_batch_size": self.max_batch_size,
            "routes": {
                "simple_serving": f"/models/{record.name}",
                "hugging_face": f"/hf/{record.name}",
                "tei_predict": f"/hf/{record.name}/predict",
            },
        }


def read_models(repository: str | Path) -> dict[str, ServedModel]:
    """Every model the repository serves, by name."""
    from ernie_deploy.repository.served import Existing, served_limits, served_models

    records = served_models(repository)
    configs = Existing.read(Path(repository)).configs
    limits = served_limits(repository)
    return {
        name: ServedModel(
            record,
            configs[name].max_batch_size,
            limits[name][1] if name in limits else None,
        )
        for name, record in records.items()
    }


class ModelTable:
    """The served models, read again (off the event loop) when asked for one it does not hold."""

    def __init__(self, repository: str | Path):
        self.repository = Path(repository)
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

    async def reread(self) -> None:
        try:
            self.models = await asyncio.to_thread(read_models, self.repository)
        except Exception as exc:  # a repository being rebuilt: keep serving what was read before
            log.warning(
                "reading the models of %s failed, keeping the %d read before: %s",
                self.repository,
                len(self.models),
                exc,
            )
        self._read_at = time.monotonic()
