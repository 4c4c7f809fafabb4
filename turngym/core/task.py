"""The task: what an episode is about, as plain serialisable data.

Families subclass :class:`Task` as frozen dataclasses with their own fields. A task carries
its ``gold`` (the answer, the target product, the goal state) so that rewards such as
information gain can score the policy's belief in it, and so oracles can solve it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from turngym.core.errors import TaskError

__all__ = ["Task", "read_jsonl", "write_jsonl"]

T = TypeVar("T", bound="Task")


@dataclass(frozen=True)
class Task:
    """Base class of every task.

    Attributes:
        id: stable identifier; ``env.reset(options={"task": id})`` replays this task.
        prompt: the natural-language statement shown to the agent.
        gold: the reference solution in the family's own form (an answer string, a goal dict…).
        meta: free-form, JSON-serialisable facts (difficulty, split, source).
    """

    id: str
    prompt: str
    gold: Any = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (tuples become lists)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
        """Inverse of :meth:`to_dict`; unknown keys are an error, not silently dropped."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise TaskError(f"{cls.__name__}.from_dict: unknown field(s) {unknown}; expected {sorted(names)}")
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name in data:
                kwargs[f.name] = _as_field_type(f, data[f.name])
        return cls(**kwargs)


def _as_field_type(f: dataclasses.Field[Any], value: Any) -> Any:
    # JSON turns tuples into lists; restore tuples for fields declared as tuples.
    if isinstance(value, list) and str(f.type).startswith("tuple"):
        return tuple(tuple(v) if isinstance(v, list) else v for v in value)
    return value


def write_jsonl(tasks: Iterable[Task], path: str | Path) -> int:
    """Write one task per line; returns the count."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield each JSON object of a JSONL file, with the line number in any error."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise TaskError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield obj
