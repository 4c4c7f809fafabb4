"""The search oracle: query each gold hop in order, then answer with the gold answer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from turngym.envs.search.verifier import normalize_query

if TYPE_CHECKING:
    from turngym.envs.search.env import SearchQAEnv

__all__ = ["oracle_action"]


def oracle_action(env: SearchQAEnv) -> str:
    """Search the first gold hop whose passage is still missing; answer once all are found.

    Works from any state (also mid-way through another agent's episode). A hop whose query
    was already issued without finding its passage (possible with real data or the dense
    retriever) is skipped rather than repeated, so the oracle always terminates.
    """
    task, state = env.task, env.state
    if task is None or state is None:
        raise RuntimeError("oracle_action() needs an episode: call env.reset() first")
    for key, query in zip(task.support, task.hop_queries):
        if key not in state.found and normalize_query(query) not in state.queries:
            return f"<search> {query} </search>"
    if not task.support and not state.queries:  # no gold support known: look once, then answer
        return f"<search> {task.hop_queries[0] if task.hop_queries else task.prompt} </search>"
    return f"<answer> {task.gold} </answer>"
