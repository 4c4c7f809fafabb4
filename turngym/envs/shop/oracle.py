"""Scripted shoppers: the oracle (reaches 1.0), a "buy the first result" baseline, random.

All three read the env (they are privileged, like every scripted agent). The oracle is a pure
function of the env state, so it can take over at any turn of any episode:

1. on the search page, search the goal's terms (type, attributes, option values); if that
   query was already tried and failed, search the target product's title and option values;
2. on a results page, go to the first result that can earn reward 1.0 with some option
   choice (paging with ``next >`` / ``< prev``), or back to search if there is none;
3. on an item page that can earn 1.0, click each missing goal option, then ``buy now``;
   anywhere else, ``< prev``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from turngym.agents.base import Action, AgentInput
from turngym.envs.shop import pages
from turngym.envs.shop.search import tokenize
from turngym.envs.shop.verifier import best_options, webshop_reward

if TYPE_CHECKING:
    from turngym.envs.shop.env import ShopEnv

__all__ = ["oracle_action", "first_result_action", "random_action", "FirstResultAgent", "primary_query", "fallback_query"]


def primary_query(env: ShopEnv) -> str:
    g = env.goal
    return " ".join([g.query, *g.attributes, *(v for _, v in g.options)])


def fallback_query(env: ShopEnv) -> str:
    g = env.goal
    return " ".join([g.name, *(v for _, v in g.options)])


def _solves(env: ShopEnv, item: int) -> dict[str, str] | None:
    """The options that earn 1.0 on product ``item``, or None if no choice does."""
    product = env.product(item)
    chosen = best_options(product, env.goal)
    return chosen if webshop_reward(product, env.goal, chosen).reward >= 1.0 else None


def _bag(env: ShopEnv, query: str) -> tuple[int, ...]:
    return tuple(sorted(env.catalog.index.query_ids(query)))


def oracle_action(env: ShopEnv) -> str:
    s = env.state
    if s.page == "search":
        primary = primary_query(env)
        return f"search[{fallback_query(env) if _bag(env, primary) in s.queries else primary}]"
    if s.page == "results":
        for rank, item in enumerate(s.results):
            if _solves(env, item) is None:
                continue
            target_page = rank // env.page_size + 1
            if target_page > s.page_num:
                return f"click[{pages.NEXT}]"
            if target_page < s.page_num:
                return f"click[{pages.PREV}]"
            return f"click[{env.product(item).asin.lower()}]"
        return f"click[{pages.BACK}]"
    if s.page == "item":
        wanted = _solves(env, s.item)
        if wanted is None:
            return f"click[{pages.PREV}]"
        have = dict(s.chosen)
        for dim, value in wanted.items():
            if have.get(dim) != value:
                return f"click[{value}]"
        return f"click[{pages.BUY}]"
    return f"click[{pages.PREV}]"


def first_result_action(env: ShopEnv) -> str:
    """Search the instruction verbatim, open the first result, buy it with no options chosen."""
    s = env.state
    if s.page == "search":
        return f"search[{env.goal.prompt}]"
    if s.page == "results":
        if not s.results:
            return f"click[{pages.BACK}]"
        return f"click[{env.product(s.results[0]).asin.lower()}]"
    if s.page == "item":
        return f"click[{pages.BUY}]"
    return f"click[{pages.PREV}]"


def random_action(env: ShopEnv, rng: np.random.Generator) -> str:
    """A uniformly random listed action; on the search page, 1-5 words of the instruction."""
    if env.state.page == "search":
        words = tokenize(env.goal.prompt) or ["item"]
        k = int(rng.integers(1, min(5, len(words)) + 1))
        picks = rng.choice(len(words), size=k, replace=False)
        return "search[" + " ".join(words[int(i)] for i in sorted(picks)) + "]"
    clickables = env.clickables()
    return f"click[{clickables[int(rng.integers(len(clickables)))]}]"


class FirstResultAgent:
    """The "buy the first result" baseline as a :class:`~turngym.agents.base.Policy`."""

    name = "shop-first-result"

    def act(self, batch: Sequence[AgentInput]) -> list[Action]:
        return [Action(first_result_action(getattr(inp.env, "unwrapped", inp.env))) for inp in batch]
