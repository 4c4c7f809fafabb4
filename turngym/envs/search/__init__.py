"""Search QA: multi-hop questions over a local corpus, with retrieval-grounded signals (``turngym/SearchQA-v0``)."""

from typing import Any

from turngym.agents.registry import register_agent
from turngym.core.registry import register

__all__ = ["MAX_TURNS"]

#: The family's default turn budget: its registrations and ``SearchQAEnv.default_max_turns`` both read
#: this one number (it lives here, not on the class, because registering must not import the env module).
MAX_TURNS = 10

register(
    "turngym/SearchQA-v0",
    "turngym.envs.search.env:SearchQAEnv",
    description="Search-R1 protocol over a seeded synthetic encyclopedia (1-4 hops); gold evidence retrieval as signals",
    max_turns=MAX_TURNS,
    family="search",
)


def _naive_rag(arg: str | None, **options: Any) -> Any:
    from turngym.envs.search.baselines import NaiveRAGAgent  # imported when the agent is built

    return NaiveRAGAgent()


register_agent("naive-rag", _naive_rag)  # ``--agent naive-rag``: the retrieve-once baseline
