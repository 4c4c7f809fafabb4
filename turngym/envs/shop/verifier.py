"""WebShop's reward, and the per-turn process signals derived from it. Pure functions.

The outcome reward is WebShop's ``get_reward`` (``web_agent_site/engine/goal.py``)::

    R = r_type * (n_attributes_matched + n_options_matched + 1[price <= cap])
               / (|goal attributes| + |goal options| + 1)

* an attribute matches if ``token_set_ratio(product attribute, goal attribute) > 85`` for some
  product attribute, or else if the goal attribute is a substring of the title, the bullet
  points or the description;
* an option matches if, after color normalization, ``token_set_ratio(chosen, goal) > 85`` for
  some chosen option value;
* ``r_type`` ∈ {1, 0.5, 0.1, 0}: 1 if the query, the category path (≥ 2 shared levels) or
  the title nouns (overlap > 0.2) match; 0.5 if none does; 0.1 if the noun overlap is below
  0.1; 0 if it is zero. WebShop parses nouns with spaCy; here nouns are structured (the
  product type's head nouns), or content words of the title for loaded products.

WebShop's history has two option rules; we follow the goal-centred one (each goal option is
matched at most once, so R <= 1). The other counts each *purchased* option, with exact
matching for "size" and a substring fallback into the product text, and can exceed 1.

Fuzzy matching uses :mod:`rapidfuzz` with thefuzz's default preprocessing (lowercase,
non-alphanumerics to spaces), which is what WebShop's ``thefuzz`` calls do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rapidfuzz import fuzz, utils

from turngym.envs.shop.catalog import Product
from turngym.envs.shop.search import tokenize
from turngym.envs.shop.vocab import COLORS

__all__ = [
    "FUZZY_THRESHOLD",
    "Goal",
    "RewardBreakdown",
    "fuzzy_match",
    "normalize_color",
    "title_score",
    "type_reward",
    "attribute_matches",
    "option_matches",
    "webshop_reward",
    "best_options",
    "goal_terms",
    "query_coverage",
]

#: WebShop counts a fuzzy match when the token-set ratio is strictly above this.
FUZZY_THRESHOLD = 85.0

# Longest names first, whole words only: "navy blue" is not "blue", "bored" is not "red".
_COLOR_NAMES = sorted(set(COLORS) | {"navy blue", "light blue", "dark blue", "light gray", "dark gray",
                                      "rose gold", "gold", "grey", "light pink", "hot pink", "dark green"},
                      key=lambda c: (-len(c), c))
_COLOR_RE = re.compile(r"\b(" + "|".join(re.escape(c) for c in _COLOR_NAMES) + r")\b")


class Goal(Protocol):
    """What the reward reads from a task (a :class:`~turngym.envs.shop.tasks.ShopTask`)."""

    query: str
    product_category: str
    nouns: tuple[str, ...]
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]
    price_upper: float


@dataclass(frozen=True, slots=True)
class RewardBreakdown:
    """The reward and its parts (WebShop's ``verbose=True`` output)."""

    reward: float
    r_type: float
    r_att: float | None
    r_option: float | None
    r_price: bool
    n_attributes_matched: int
    n_options_matched: int
    query_match: bool
    category_match: bool
    title_score: float

    def as_dict(self) -> dict[str, float | bool | int | None]:
        return {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]


def fuzzy_match(a: str, b: str) -> bool:
    """WebShop's matcher: token-set ratio strictly above 85.

    >>> fuzzy_match("sulfate free", "sulfate free shampoo"), fuzzy_match("pack of 2", "pack of 6")
    (True, True)
    >>> fuzzy_match("2 pack", "6 pack"), fuzzy_match("long sleeve", "short sleeve")
    (False, False)
    """
    return fuzz.token_set_ratio(a, b, processor=utils.default_process) > FUZZY_THRESHOLD


def normalize_color(value: str) -> str:
    """Map a value naming a known color to that color ("Navy Blue | Large" → "navy blue").

    >>> normalize_color("Dark Blue"), normalize_color("bored"), normalize_color("8 oz")
    ('dark blue', 'bored', '8 oz')
    """
    m = _COLOR_RE.search(value.lower())
    return m.group(1) if m else value


def title_score(bought_nouns: Iterable[str], goal_nouns: Sequence[str]) -> float:
    """Fraction of the goal's nouns present in the bought product's nouns (0.2 if none)."""
    goal = set(goal_nouns)
    if not goal:
        return 0.2
    return len(goal & set(bought_nouns)) / len(goal)


def _levels(path: str) -> set[str]:
    return {x.strip() for x in path.split("›") if x.strip()}


def type_reward(product: Product, goal: Goal) -> tuple[float, bool, bool, float]:
    """``(r_type, query_match, category_match, title_score)`` as WebShop computes them."""
    query_match = product.query == goal.query
    category_match = len(_levels(product.product_category) & _levels(goal.product_category)) >= 2
    score = title_score(product.nouns, goal.nouns)
    r_type = 1.0 if (query_match or category_match or score > 0.2) else 0.5
    if score < 0.1:
        r_type = 0.1
    if score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, score


def attribute_matches(product: Product, goal_attributes: Sequence[str]) -> int:
    """How many goal attributes the product has (fuzzy on Attributes, else substring in text)."""
    text = None
    n = 0
    for g in goal_attributes:
        if any(fuzzy_match(p, g) for p in product.attributes):
            n += 1
            continue
        if text is None:
            text = (product.title + "\n" + " ".join(product.bullets) + "\n" + product.description).lower()
        if g.lower() in text:
            n += 1
    return n


def option_matches(chosen_values: Iterable[str], goal_values: Iterable[str]) -> int:
    """How many goal option values are matched by some chosen value (after color normalization)."""
    chosen = [normalize_color(v) for v in chosen_values]
    return sum(1 for g in goal_values if any(fuzzy_match(c, normalize_color(g)) for c in chosen))


def webshop_reward(product: Product, goal: Goal, chosen: Mapping[str, str]) -> RewardBreakdown:
    """WebShop's reward for buying ``product`` with ``chosen`` options (dimension → value).

    >>> from turngym.envs.shop.catalog import Product
    >>> from types import SimpleNamespace as G
    >>> p = Product("B000000001", "Acme Sulfate Free Shampoo", "shampoo", "beauty",
    ...             "Beauty › Hair Care › Shampoo", "", (), ("sulfate free", "vegan formula"),
    ...             (("size", ("8 oz", "12 oz")),), 9.99, nouns=("shampoo",))
    >>> g = G(query="shampoo", product_category="Beauty › Hair Care › Shampoo", nouns=("shampoo",),
    ...       attributes=("sulfate free", "paraben free"), options=(("size", "12 oz"),), price_upper=10.0)
    >>> webshop_reward(p, g, {"size": "12 oz"}).reward  # (1 attr + 1 option + price) / (2 + 1 + 1)
    0.75
    """
    r_type, query_match, category_match, score = type_reward(product, goal)
    n_att = attribute_matches(product, goal.attributes)
    goal_values = [v for _, v in goal.options]
    n_opt = option_matches(chosen.values(), goal_values)
    price_ok = product.price <= goal.price_upper
    total = (n_att + n_opt + int(price_ok)) / (len(goal.attributes) + len(goal_values) + 1)
    return RewardBreakdown(
        reward=total * r_type,
        r_type=r_type,
        r_att=n_att / len(goal.attributes) if goal.attributes else None,
        r_option=n_opt / len(goal_values) if goal_values else None,
        r_price=price_ok,
        n_attributes_matched=n_att,
        n_options_matched=n_opt,
        query_match=query_match,
        category_match=category_match,
        title_score=score,
    )


def best_options(product: Product, goal: Goal) -> dict[str, str]:
    """The option choice that matches the most goal options (greedy, one value per dimension)."""
    chosen: dict[str, str] = {}
    for _, g in goal.options:
        target = normalize_color(g)
        for dim, values in product.options:
            if dim in chosen:
                continue
            hit = next((v for v in values if fuzzy_match(normalize_color(v), target)), None)
            if hit is not None:
                chosen[dim] = hit
                break
    return chosen


def goal_terms(goal: Goal) -> frozenset[str]:
    """The search tokens of what the goal asks for: its query, attributes and option values."""
    text = " ".join([goal.query, *goal.attributes, *(v for _, v in goal.options)])
    return frozenset(tokenize(text))


def query_coverage(query: str, terms: frozenset[str]) -> float:
    """Fraction of the goal's terms that the query contains (0 when the goal has none).

    >>> query_coverage("sulfate free shampoos", frozenset({"sulfate", "free", "shampoo", "8", "oz"}))
    0.6
    """
    if not terms:
        return 0.0
    return len(terms & set(tokenize(query))) / len(terms)
