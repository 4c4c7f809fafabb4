"""Agent specs: the strings ``turngym eval --agent SPEC`` accepts.

A spec is ``kind`` or ``kind:argument`` (``oracle``, ``random``, ``hf:/path/to/model``,
``openai:http://host/v1``). Each kind maps to a factory; dispatch is by table, never by an
``if/elif`` chain on strings.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from turngym.agents.base import Policy
from turngym.agents.scripted import OracleAgent, RandomAgent
from turngym.core.errors import ConfigError

__all__ = ["AGENT_KINDS", "make_agent", "register_agent"]

AgentFactory = Callable[..., Policy]

AGENT_KINDS: dict[str, AgentFactory] = {
    "oracle": lambda arg, **kw: OracleAgent(),
    "random": lambda arg, **kw: RandomAgent(seed=kw.get("seed", 0)),
    "naive-rag": lambda arg, **kw: _naive_rag(),
}


def _naive_rag() -> Policy:
    from turngym.envs.search.baselines import NaiveRAGAgent  # search family's retrieve-once baseline

    return NaiveRAGAgent()


def register_agent(kind: str, factory: AgentFactory) -> None:
    """Add an agent kind: ``factory(argument_or_None, **options) -> Policy``."""
    AGENT_KINDS[kind] = factory


def make_agent(spec: str, **options: Any) -> Policy:
    """Build a policy from a spec string such as ``"oracle"`` or ``"random"``."""
    kind, _, arg = spec.partition(":")
    factory = AGENT_KINDS.get(kind)
    if factory is None:
        close = difflib.get_close_matches(kind, list(AGENT_KINDS), n=2)
        hint = f" Did you mean {' or '.join(close)}?" if close else ""
        raise ConfigError(f"unknown agent {spec!r}.{hint} Known kinds: {', '.join(sorted(AGENT_KINDS))}")
    return factory(arg or None, **options)
