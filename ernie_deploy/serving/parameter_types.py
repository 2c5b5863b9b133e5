"""The parts of serving.parameters' schema: a parameter's Type (how its value is written as its config's string),
the Parameter (its name, type and default, read from a config and written for one), and a Group (the parameters one
step reads, and their writer).

Core only: it runs inside Triton's python backend.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Generic, TypeVar

from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, ErnieDeployError
from ernie_deploy.core.shadow import ShadowPlan
from ernie_deploy.core.tasks import TASKS, TaskSpec, get_task

# What a reader's refusal tells the user to do: only `build` writes these configs.
FIX = "rebuild the repository with `ernie-deploy build`"

T = TypeVar("T")


# Types ---------------------------------------------------------------------------------------------------------------
class Type(Generic[T]):
    """How a value of one parameter is written as its config's string: `parse` a text, `text` a value; each raises
    ValueError for what is not of the type (the Parameter turns it into a refusal naming itself). `what` says what it
    takes, in that refusal."""

    what: str

    def parse(self, text: str) -> T:
        raise NotImplementedError

    def text(self, value: T) -> str:
        raise NotImplementedError


_WHOLE = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class Whole(Type[int]):
    """A whole number of at least `minimum`, in decimal digits (no plus sign, spaces or underscores: what str(int)
    writes)."""

    minimum: int = 0

    @property
    def what(self) -> str:
        return f"a whole number of at least {self.minimum}"

    def parse(self, text: str) -> int:
        if not _WHOLE.fullmatch(text):
            raise ValueError(text)
        value = int(text)
        self.text(value)
        return value

    def text(self, value: int) -> str:
        if isinstance(value, bool) or not isinstance(value, Integral) or value < self.minimum:
            raise ValueError(value)
        return str(int(value))


@dataclass(frozen=True)
class Probability(Type[float]):
    """A probability in [0, 1), as repr(float) writes it (a threshold a probability must pass)."""

    what = "a probability from 0 up to (not including) 1"

    def parse(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(text) from None
        self.text(value)
        return value

    def text(self, value: float) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
            raise ValueError(value)
        return repr(float(value))


@dataclass(frozen=True)
class Json(Type[Any]):
    """A JSON value, written compact with its characters as they are (`check`: what a value must be, raising ValueError
    otherwise)."""

    what: str = "a JSON value"
    check: Callable[[Any], Any] | None = None

    def parse(self, text: str) -> Any:
        import json

        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(text) from None
        self.text(value)
        return value

    def text(self, value: Any) -> str:
        import json

        if self.check is not None:
            try:
                self.check(value)
            except ErnieDeployError:
                raise ValueError(value) from None
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class FileName(Type[str]):
    """A file in the step's version folder, by its bare name: a path out of the folder is never one of its files."""

    what = "a file name in the version folder (no folder part)"

    def parse(self, text: str) -> str:
        return self.text(text)

    def text(self, value: str) -> str:
        if not isinstance(value, str) or not value or value in (".", "..") or "/" in value or "\\" in value:
            raise ValueError(value)
        return value


@dataclass(frozen=True)
class Name(Type[str]):
    """A name that is not empty (a Triton model's)."""

    what = "a name"

    def parse(self, text: str) -> str:
        return self.text(text)

    def text(self, value: str) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError(value)
        return value


@dataclass(frozen=True)
class Choice(Type[str]):
    """One of `values`."""

    values: tuple[str, ...]

    @property
    def what(self) -> str:
        return f"one of {', '.join(self.values)}"

    def parse(self, text: str) -> str:
        return self.text(text)

    def text(self, value: str) -> str:
        if value not in self.values:
            raise ValueError(value)
        return value


@dataclass(frozen=True)
class Flag(Type[bool]):
    """On where the config holds `on`, off where it holds nothing: off is written as the empty text, which reads as
    absent."""

    on: str

    @property
    def what(self) -> str:
        return f"{self.on!r} or nothing"

    def parse(self, text: str) -> bool:
        if text != self.on:
            raise ValueError(text)
        return True

    def text(self, value: bool) -> str:
        if not isinstance(value, bool):
            raise ValueError(value)
        return self.on if value else ""


@dataclass(frozen=True)
class Task(Type[TaskSpec]):
    """A task (core.tasks), written by its name."""

    @property
    def what(self) -> str:
        return f"a task: one of {', '.join(TASKS)}"

    def parse(self, text: str) -> TaskSpec:
        try:
            return get_task(text)
        except ErnieDeployError:
            raise ValueError(text) from None

    def text(self, value: TaskSpec) -> str:
        if not isinstance(value, TaskSpec) or TASKS.get(value.name) != value:
            raise ValueError(value)
        return value.name


@dataclass(frozen=True)
class Plan(Type[ShadowPlan]):
    """A shadow plan (core.shadow.ShadowPlan), as its JSON."""

    what = "a shadow plan in JSON (core.shadow.ShadowPlan)"

    def parse(self, text: str) -> ShadowPlan:
        try:
            return ShadowPlan.from_json(text)
        except (ValueError, TypeError, ErnieDeployError):  # not JSON, not an object of its fields, a bad fraction
            raise ValueError(text) from None

    def text(self, value: ShadowPlan) -> str:
        if not isinstance(value, ShadowPlan):
            raise ValueError(value)
        return value.to_json()


# Parameters ----------------------------------------------------------------------------------------------------------
class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


# The default of a parameter that has none: a config without it is refused.
REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Derived:
    """A default that follows from the config's other parameters: `of(config)`, read through their own Parameters,
    so that the rule lives in one function (`says` names it)."""

    of: Callable[[Mapping], Any]
    says: str


@dataclass(frozen=True)
class Parameter(Generic[T]):
    """One config parameter: its `name`, its `type` and its `default` (a value; None: absent reads as None; a
    Derived; or REQUIRED)."""

    name: str
    type: Type[T]
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def given(self, config: Mapping) -> str | None:
        """The text the config holds for it, or None where it holds none (or an empty one)."""
        text = ((config.get("parameters") or {}).get(self.name) or {}).get("string_value")
        if text is None or text == "":
            return None
        return str(text)  # Triton hands strings; a config made by hand may hold the number itself

    def read(self, config: Mapping) -> T:
        """Its typed value in `config` (the dict Triton hands a python model), or its default where it is absent."""
        text = self.given(config)
        return self.default_in(config) if text is None else self.parse(text, config.get("name"))

    def default_in(self, config: Mapping) -> T:
        if self.default is REQUIRED:
            raise BadRepositoryError(f"model {config.get('name')!r} has no parameter {self.name!r}", FIX)
        if isinstance(self.default, Derived):
            return self.default.of(config)
        return self.default

    def parse(self, text: str, model: str | None = None) -> T:
        """A config's text of it -> its value; a text not of its type is refused, naming it (and `model`)."""
        try:
            return self.type.parse(text)
        except ValueError:
            where = f"model {model!r}: " if model else ""
            raise BadRepositoryError(f"{where}parameter {self.name!r} is {text!r}, not {self.type.what}", FIX) from None

    def text(self, value: T) -> str:
        """Its value as the config's string; a value not of its type is refused, naming it."""
        try:
            return self.type.text(value)
        except ValueError:
            raise BadOptionsError(
                f"parameter {self.name!r} cannot be {value!r}", f"give it {self.type.what}, or leave it out"
            ) from None


@dataclass(frozen=True)
class Group:
    """The parameters one kind of step reads from its config."""

    step: str
    members: tuple[Parameter, ...]

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self.members)

    def __contains__(self, name: str) -> bool:
        return any(p.name == name for p in self.members)

    def __getitem__(self, name: str) -> Parameter:
        for p in self.members:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.members)

    def parameters(self, **values: Any) -> dict[str, str]:
        """The config's parameters (name -> text) of `values` (name -> typed value): each written as given; None
        leaves it out. A name this step does not read is refused: it would be a parameter nobody reads."""
        unknown = sorted(set(values) - set(self.names))
        if unknown:
            raise BadOptionsError(
                f"the {self.step} step reads no parameter {', '.join(map(repr, unknown))}",
                f"write only its own: {', '.join(self.names)}",
            )
        return {name: self[name].text(value) for name, value in values.items() if value is not None}


def union(step: str, *groups: Group | Parameter) -> Group:
    members: list[Parameter] = []
    for part in groups:
        for p in part if isinstance(part, Group) else (part,):
            if p not in members:
                members.append(p)
    return Group(step, tuple(members))
