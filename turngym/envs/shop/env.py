"""``turngym/Shop-v0``: WebShop's pages, actions and reward over an offline catalog."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from turngym.core.env import Transition, TurngymEnv
from turngym.core.errors import ConfigError, TaskError
from turngym.core.hashing import state_hash
from turngym.core.spec import RewardSpec, Signal
from turngym.envs.shop import MAX_TURNS, oracle, pages
from turngym.envs.shop.catalog import Catalog, Product, get_catalog
from turngym.envs.shop.parsing import parse_action
from turngym.envs.shop.tasks import ShopTask, generate_task, task_from_generated_id
from turngym.envs.shop.verifier import fuzzy_match, goal_terms, normalize_color, query_coverage, webshop_reward

__all__ = ["ShopEnv", "ShopState", "DIFFICULTIES"]

#: Presets: (n_products, distractor_density, paraphrase level).
DIFFICULTIES: dict[str, tuple[int, float, int]] = {
    "easy": (1_000, 0.2, 0),
    "medium": (10_000, 0.5, 1),
    "hard": (100_000, 0.8, 2),
}

SYSTEM_PROMPT = """\
You are shopping on WebShop. Find and buy the product that best matches the instruction.
Write exactly one action per message, nothing else: search[QUERY] on the search page, or
click[BUTTON] where BUTTON is one of the "Available actions" listed under the page (a product id,
an option value such as a color or size, next >, < prev, back to search, description, buy now).
Choose the options the instruction asks for before you click[buy now].
Example:
Instruction: find me a red cotton t-shirt, size large, price lower than 30.00 dollars
You: search[red cotton t-shirt]
Reply: ... [B0TS1RT0A1] Red Cotton T-Shirt $19.99 ... Available actions: click[b0ts1rt0a1], ...
You: click[b0ts1rt0a1]
Reply: ... size: [small] [large] ... Available actions: click[small], click[large], click[buy now], ...
You: click[large]
Reply: ... Selected: size: large ...
You: click[buy now]
Write only one action, e.g. search[red cotton t-shirt] or click[buy now]: never a sentence."""


@dataclass(frozen=True, slots=True)
class ShopState:
    """Where the shopper is. Frozen: a snapshot is a reference, not a copy.

    ``query``..``chosen`` define the page (and the state key); ``queries`` and ``visited`` are
    history, kept only for the repeat flags.
    """

    page: str = "search"  # "search" | "results" | "item" | one of pages.SUBPAGES
    query: tuple[int, ...] = ()  # sorted token ids of the last search: equal bags, equal results
    results: tuple[int, ...] = ()  # catalog indices of the last search, best first
    page_num: int = 1
    item: int = -1
    chosen: tuple[tuple[str, str], ...] = ()  # (dimension, value) in the product's order
    potential: float = 0.0
    queries: frozenset[tuple[int, ...]] = frozenset()
    visited: frozenset[int] = frozenset()


class ShopEnv(TurngymEnv[ShopTask, ShopState]):
    """WebShop, offline and fast: search a catalog, pick options, buy.

    ## Description
    A faithful re-implementation of WebShop (Yao et al., 2022): the same page graph, the same
    ``search[...]`` / ``click[...]`` grammar and the same reward formula, over a seeded,
    generated catalog (1k–100k products in WebShop's five categories, with near-miss
    distractors) searched with BM25 (``bm25s``; no JVM, no spaCy, no downloads). Real WebShop
    data can be plugged in with :func:`~turngym.envs.shop.tasks.load_webshop`.

    Where it differs from WebShop, and why: BM25 comes from ``bm25s`` with a light plural
    stemmer instead of Lucene/Porter (ties go to the lower catalog index, and only products
    sharing a term with the query are listed, as Lucene does); the type factor's nouns are the
    product type's head nouns instead of a spaCy parse (content words of the title for loaded
    products); colors are normalized on whole words; options follow WebShop's goal-centred
    rule, so the reward never exceeds 1; an invalid action is a no-op as in WebShop, but it
    costs the declared penalty (``invalid_action_penalty``, -0.1 by default; pass
    ``invalid_action_policy="continue"`` for WebShop's reward-0 no-op).

    ## Task Distribution
    A goal drawn from the catalog: a target product, 1–3 of its attributes, each of its option
    dimensions with probability 0.75, and a price cap by WebShop's rule; the instruction is
    rendered at paraphrase level 0 (WebShop's synthetic style), 1 (varied) or 2 (varied, with
    attribute synonyms). ``difficulty`` presets: easy = 1k products, few distractors, level 0;
    medium = 10k, level 1; hard = 100k, dense distractors, level 2.

    ## Action Space
    ``search[QUERY]`` (search page only) and ``click[BUTTON]`` with a button listed under
    "Available actions" (case-insensitive). The first such action in the text counts.
    Valid: ``search[vegan lip balm]``, ``click[b0k3x9a1q2]``, ``click[buy now]``.
    Invalid: no action, ``search[...]`` off the search page, ``click[x]`` for an unlisted x.
    An invalid action leaves the state unchanged (WebShop makes it a no-op).

    ## Observation
    WebShop's text pages with the instruction on top and the clickable actions listed at the
    bottom: search page; results (``page_size`` per page, 10 as in WebShop; up to 50: ASIN, title, price); item page
    (options, selected options, title, price, rating, sub-page buttons, Buy Now); the
    Description / Features / Reviews / Attributes sub-pages.

    ## Rewards
    Outcome on Buy Now: ``r_type * (attributes matched + options matched + [price <= cap]) /
    (|attributes| + |options| + 1)`` (see :mod:`~turngym.envs.shop.verifier`). Success = 1.0.

    | signal | range | emitted when | meaning |
    |---|---|---|---|
    | potential | 0–1 | every turn | Φ: the reward if Buy Now were clicked now (0 off item pages, 0 once bought) |
    | delta_potential | −1–1 | every turn | Φ(s') − Φ(s) |
    | goal_rank_rr | 0–1 | every turn | 1/rank of the target product in the current results (0 if absent) |
    | goal_on_page | 0–1 | every turn | the target product is listed on the results page shown |
    | option_match | −1–1 | option clicks | +1 the click set a goal option, −1 it replaced one with a wrong value |
    | query_coverage | 0–1 | searches | fraction of the goal's terms (type, attributes, options) in the query |
    | repeat_query | 0–1 | searches | the same query (as a bag of terms) was already searched |
    | revisit | 0–1 | product clicks | this product page was already opened in the episode |

    ## Starting State
    The search page for a task drawn by the env's RNG, or ``options={"task": ShopTask | id}``.

    ## Episode End
    Terminated by ``click[buy now]``; truncated after ``max_turns`` (default 15, as GEM).
    ``state_key`` = task + page + product + chosen options (for results pages: the query's
    terms and the page number), without history.

    ## Arguments
    >>> import turngym
    >>> env = turngym.make("turngym/Shop-v0", difficulty="easy")
    >>> obs, info = env.reset(seed=0)
    >>> obs.startswith("WebShop")
    True
    >>> rewards = []
    >>> while True:
    ...     obs, r, terminated, truncated, info = env.step(env.oracle_action())
    ...     rewards.append(r)
    ...     if terminated or truncated:
    ...         break
    >>> info["outcome"]["reward"], info["signals"]["delta_potential"] == -1.0
    (1.0, True)

    Other arguments: ``n_products``, ``distractor_density``, ``paraphrase`` (override the
    preset), ``catalog_seed``, ``catalog`` + ``tasks`` (e.g. from ``load_webshop``).

    ## Oracle
    Searches the goal's terms, walks the results to the first product that can earn 1.0
    (falling back to searching the target's title), picks the matching options and buys.

    ## Version History
    * v0: initial release.
    """

    reward_spec = RewardSpec(
        signals=(
            Signal("potential", 0, 1, "verifiable", "reward if Buy Now were clicked now (0 off item pages and after buying)", weight=0.5, potential=True),
            Signal("delta_potential", -1, 1, "verifiable", "change of the potential this turn, Φ(s') − Φ(s)"),
            Signal("goal_rank_rr", 0, 1, "verifiable", "reciprocal rank of the target product in the current search results (0 if absent)"),
            Signal("goal_on_page", 0, 1, "verifiable", "the target product is listed on the results page shown"),
            Signal("option_match", -1, 1, "verifiable", "+1 an option click set a goal option, -1 it replaced a goal option with a wrong value", weight=0.1),
            Signal("query_coverage", 0, 1, "heuristic", "fraction of the goal's terms (type, attributes, options) the search query contains", weight=0.05),
            Signal("repeat_query", 0, 1, "verifiable", "this search repeats an earlier query of the episode (same bag of terms)", weight=-0.05),
            Signal("revisit", 0, 1, "verifiable", "this click opened a product page already opened in the episode", weight=-0.02),
        ),
        outcome="WebShop reward: r_type * (attributes + options + price matched) / (|attributes| + |options| + 1) on Buy Now",
        outcome_range=(0.0, 1.0),
        success_threshold=1.0,
    )
    default_max_turns = MAX_TURNS
    task_type = ShopTask
    immutable_state = True
    system_prompt = SYSTEM_PROMPT
    #: generation stops after one complete search[...] / click[...] action
    stop_strings = ("]",)
    max_new_tokens = 32  # search[a few words] or click[a button]

    def __init__(
        self,
        *,
        difficulty: str = "medium",
        n_products: int | None = None,
        distractor_density: float | None = None,
        paraphrase: int | None = None,
        catalog_seed: int = 0,
        catalog: Catalog | None = None,
        tasks: Sequence[ShopTask] | None = None,
        page_size: int = pages.PRODUCTS_PER_PAGE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if int(page_size) < 1:
            raise ConfigError(f"page_size (products per results page) must be >= 1, got {page_size!r}")
        self.page_size = int(page_size)
        if difficulty not in DIFFICULTIES:
            raise ConfigError(f"difficulty must be one of {sorted(DIFFICULTIES)}, got {difficulty!r}")
        size, density, level = DIFFICULTIES[difficulty]
        self.difficulty = difficulty
        self.paraphrase = level if paraphrase is None else paraphrase
        if self.paraphrase not in (0, 1, 2):
            raise ConfigError(f"paraphrase must be 0, 1 or 2, got {paraphrase!r}")
        if catalog is None:
            catalog = get_catalog(
                int(catalog_seed),
                int(n_products if n_products is not None else size),
                float(distractor_density if distractor_density is not None else density),
            )
        self.catalog = catalog
        self._set_task_pool(tasks)
        stray = [t.id for t in self.tasks or () if t.catalog not in ("", catalog.key) or catalog.index_of(t.asin) is None][:3]
        if stray:
            raise ConfigError(f"tasks from another catalog or naming products missing from the catalog {catalog.key!r}: {stray}")
        self.state = ShopState()
        self._goal_index = -1
        self._goal_terms: frozenset[str] = frozenset()
        self._potential_cache: dict[tuple[int, tuple[tuple[str, str], ...]], float] = {}

    # -- tasks -------------------------------------------------------------------------
    def _generate_task(self, rng: np.random.Generator) -> ShopTask:
        return generate_task(self.catalog, int(rng.integers(1 << 31)), self.paraphrase)

    def _regenerate_task(self, task_id: str) -> ShopTask:
        return task_from_generated_id(self.catalog, task_id)

    # -- episode -----------------------------------------------------------------------
    def _reset(self, task: ShopTask, options: Mapping[str, Any]) -> str:
        if task.catalog not in ("", self.catalog.key):
            raise TaskError(
                f"task {task.id!r} was drawn from catalog {task.catalog!r} but this env uses {self.catalog.key!r}; "
                "make the env with the matching catalog_seed / n_products / distractor_density"
            )
        goal = self.catalog.index_of(task.asin)
        if goal is None:
            raise TaskError(f"task {task.id!r}: product {task.asin} is not in catalog {self.catalog.key!r}")
        self._goal_index = goal
        self._goal_terms = goal_terms(task)
        self._potential_cache.clear()
        self.state = ShopState()
        return pages.render_search(task.prompt)

    @property
    def goal(self) -> ShopTask:
        """The task of the episode: what to buy."""
        return self.current_task

    def product(self, i: int) -> Product:
        """The catalog product at index ``i``."""
        return self.catalog.product(i)

    def clickables(self) -> list[str]:
        """The buttons clickable on the current page (lowercase), in display order."""
        s = self.state
        if s.page == "search":
            return []
        if s.page == "results":
            return pages.results_clickables(s.results, s.page_num, [self.product(i).asin for i in self._on_page()], self.page_size)
        if s.page == "item":
            return pages.item_clickables(self.product(s.item))
        return pages.subpage_clickables()

    def _on_page(self, state: ShopState | None = None) -> Sequence[int]:
        s = state or self.state
        start = (s.page_num - 1) * self.page_size
        return s.results[start : start + self.page_size]

    def _render(self) -> str:
        s, prompt = self.state, self.goal.prompt
        if s.page == "search":
            return pages.render_search(prompt)
        if s.page == "results":
            return pages.render_results(prompt, s.results, s.page_num, [self.product(i) for i in self._on_page()], self.page_size)
        if s.page == "item":
            return pages.render_item(prompt, self.product(s.item), dict(s.chosen))
        return pages.render_subpage(prompt, self.product(s.item), s.page)

    def potential_of(self, item: int, chosen: tuple[tuple[str, str], ...]) -> float:
        """Φ: the reward for buying catalog product ``item`` with ``chosen`` options now."""
        key = (item, chosen)
        value = self._potential_cache.get(key)
        if value is None:
            value = webshop_reward(self.product(item), self.goal, dict(chosen)).reward
            if len(self._potential_cache) < 4096:
                self._potential_cache[key] = value
        return value

    def _state_signals(self) -> dict[str, float]:
        s = self.state
        rr = 0.0
        if s.results and self._goal_index in s.results:
            rr = 1.0 / (s.results.index(self._goal_index) + 1)
        on_page = 1.0 if s.page == "results" and self._goal_index in self._on_page() else 0.0
        return {"potential": s.potential, "goal_rank_rr": rr, "goal_on_page": on_page}

    def _signals(self, prev: ShopState, **events: float) -> dict[str, float]:
        """This turn's events and the change of the potential since ``prev``."""
        return {"delta_potential": self.state.potential - prev.potential, **events}

    def _invalid(self, reason: str) -> Transition:
        return Transition(obs=f"Invalid action: {reason}\n\n{self._render()}", valid=False, invalid_reason=reason)

    def _step(self, action: str) -> Transition:
        parsed = parse_action(action)
        if not parsed.ok:
            return self._invalid(parsed.error or "unparseable action")
        act = parsed.value
        assert act is not None
        prev = self.state
        if act.kind == "search":
            if prev.page != "search":
                return self._invalid("search[...] works only on the search page; click[back to search] first")
            return self._search(act.arg)
        # The parser lowercases and collapses spaces; compare listed buttons the same way.
        target = next((c for c in self.clickables() if " ".join(c.split()) == act.arg), None)
        if target is None:
            where = "the search page has no buttons; use search[QUERY]" if prev.page == "search" else "see Available actions"
            shown = act.arg if len(act.arg) <= 80 else act.arg[:77] + "..."
            return self._invalid(f"{shown!r} is not clickable here ({where})")
        return self._click(target)

    def _search(self, query: str) -> Transition:
        prev = self.state
        ids = self.catalog.index.query_ids(query)
        bag = tuple(sorted(ids))
        results = tuple(self.catalog.index.search_ids(ids))
        self.state = replace(
            prev, page="results", query=bag, results=results, page_num=1, item=-1, chosen=(),
            potential=0.0, queries=prev.queries | {bag},
        )
        events = {
            "query_coverage": query_coverage(query, self._goal_terms),
            "repeat_query": 1.0 if bag in prev.queries else 0.0,
        }
        return Transition(obs=self._render(), signals=self._signals(prev, **events))

    def _click(self, target: str) -> Transition:
        prev = self.state
        events: dict[str, float] = {}
        if target == pages.BACK:
            self.state = replace(prev, page="search", query=(), results=(), page_num=1, item=-1, chosen=(), potential=0.0)
        elif prev.page == "results":
            if target == pages.NEXT:
                self.state = replace(prev, page_num=prev.page_num + 1)
            elif target == pages.PREV:
                self.state = replace(prev, page_num=prev.page_num - 1)
            else:
                item = next(i for i in self._on_page() if self.product(i).asin.lower() == target)
                events["revisit"] = 1.0 if item in prev.visited else 0.0
                self.state = replace(prev, page="item", item=item, chosen=(), visited=prev.visited | {item},
                                     potential=self.potential_of(item, ()))
        elif prev.page == "item":
            if target == pages.PREV:
                self.state = replace(prev, page="results", item=-1, chosen=(), potential=0.0)
            elif target == pages.BUY:
                return self._buy(prev)
            elif target in pages.SUBPAGES and self.product(prev.item).option_dimension(target) is None:
                self.state = replace(prev, page=target)
            else:
                return self._choose(prev, target)
        else:  # a sub-page: only "< prev" is left, back to the item page
            self.state = replace(prev, page="item")
        return Transition(obs=self._render(), signals=self._signals(prev, **events))

    def _choose(self, prev: ShopState, value: str) -> Transition:
        product = self.product(prev.item)
        dim = product.option_dimension(value)
        assert dim is not None  # clickable, and not a fixed button
        chosen = dict(prev.chosen)
        old = chosen.get(dim)
        chosen[dim] = value
        ordered = tuple((d, chosen[d]) for d, _ in product.options if d in chosen)
        self.state = replace(prev, chosen=ordered, potential=self.potential_of(prev.item, ordered))
        goal_values = [normalize_color(v) for _, v in self.goal.options]

        def matches(v: str | None) -> bool:
            return v is not None and any(fuzzy_match(normalize_color(v), g) for g in goal_values)

        change = 0.0
        if old != value:
            change = float(matches(value)) - float(matches(old))
        return Transition(obs=self._render(), signals=self._signals(prev, option_match=change))

    def _buy(self, prev: ShopState) -> Transition:
        product = self.product(prev.item)
        chosen = dict(prev.chosen)
        verdict = webshop_reward(product, self.goal, chosen)
        self.state = replace(prev, page="done", potential=0.0)
        outcome = {
            "reward": verdict.reward,
            "success": verdict.reward >= 1.0,
            "asin": product.asin,
            "bought_target": product.asin == self.goal.asin,
            "options": chosen,
            "price": product.price,
            **verdict.as_dict(),
        }
        obs = f"Thank you for shopping with us!\nYour score (min 0.0, max 1.0): {verdict.reward:.4f}"
        return Transition(obs=obs, terminated=True,
                          signals=self._signals(prev), outcome=outcome)

    def _state_key(self) -> str:
        s, task_id = self.state, (self.task.id if self.task else "")
        if s.page == "search":
            return state_hash((task_id, "search"))
        if s.page == "results":
            return state_hash((task_id, "results", s.query, s.page_num))
        asin = self.product(s.item).asin if s.item >= 0 else ""
        return state_hash((task_id, s.page, asin, s.chosen))

    def _set_state(self, payload: ShopState) -> None:
        self.state = payload
        if self.task is not None:  # the snapshot may come from another task's episode
            goal = self.catalog.index_of(self.goal.asin)
            self._goal_index = -1 if goal is None else goal
            self._goal_terms = goal_terms(self.goal)
            self._potential_cache.clear()

    # -- policies ----------------------------------------------------------------------
    def _oracle_action(self) -> str:
        return oracle.oracle_action(self)

    def sample_action(self, rng: np.random.Generator) -> str:
        """A uniformly random listed action; on the search page, a few words of the instruction."""
        return oracle.random_action(self, rng)
