"""Search QA: multi-hop questions over a local corpus, with retrieval-grounded signals (``turngym/SearchQA-v0``)."""

from turngym.core.registry import register

register(
    "turngym/SearchQA-v0",
    "turngym.envs.search.env:SearchQAEnv",
    description="Search-R1 protocol over a seeded synthetic encyclopedia (1-4 hops); gold evidence retrieval as signals",
    max_turns=10,
    family="search",
)
