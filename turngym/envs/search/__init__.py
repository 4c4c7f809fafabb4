"""Search QA: multi-hop questions over a local corpus, with retrieval-grounded signals (``turngym/SearchQA-v0``)."""

from typing import Any

from turngym.agents.registry import register_agent
from turngym.core.registry import register

register(
    "turngym/SearchQA-v0",
    "turngym.envs.search.env:SearchQAEnv",
    description="Search-R1 protocol over a seeded synthetic encyclopedia (1-4 hops); gold evidence retrieval as signals",
    max_turns=10,
    family="search",
)


def _naive_rag(arg: str | None, **options: Any) -> Any:
    from turngym.envs.search.baselines import NaiveRAGAgent  # imported when the agent is built

    return NaiveRAGAgent()


register_agent("naive-rag", _naive_rag)  # ``--agent naive-rag``: the retrieve-once baseline
