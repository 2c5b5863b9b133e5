"""A finding of `ernie-deploy check`: which model, what is wrong, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    model: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.model}: {self.message} (fix: {self.fix})"
