"""Rollout engines of ``turngym train``: :class:`Engine` and the table :data:`ENGINES` (``docs/engines.md``)."""

from turngym.trainers.engines.base import Engine, EngineHost
from turngym.trainers.engines.registry import ENGINES, engine_class, register_engine

__all__ = ["ENGINES", "Engine", "EngineHost", "engine_class", "register_engine"]
