"""The rollout engines ``turngym train --engine NAME`` knows: a table, name → class.

Dispatch is by this table, never by ``if engine == ...`` in the trainer. Each engine module
imports its backend lazily, so reading the table (config checks, the CLI's choices) imports
neither torch nor vLLM.
"""

from __future__ import annotations

import difflib

from turngym.core.errors import ConfigError
from turngym.trainers.engines.base import Engine
from turngym.trainers.engines.hf import HFEngine
from turngym.trainers.engines.vllm import VLLMEngine

__all__ = ["ENGINES", "engine_class", "register_engine"]

ENGINES: dict[str, type[Engine]] = {cls.name: cls for cls in (HFEngine, VLLMEngine)}


def register_engine(cls: type[Engine]) -> type[Engine]:
    """Add an engine under ``cls.name`` (usable as a class decorator)."""
    ENGINES[cls.name] = cls
    return cls


def engine_class(name: str) -> type[Engine]:
    """The engine registered as ``name``; :class:`ConfigError` naming the known ones otherwise."""
    cls = ENGINES.get(name)
    if cls is None:
        close = difflib.get_close_matches(str(name), list(ENGINES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"engine must be {' or '.join(repr(n) for n in ENGINES)}, got {name!r}{hint}")
    return cls
