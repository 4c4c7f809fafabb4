"""WebShop's reward formula on hand-computed cases, the price-cap rule, and the vocabulary."""

import itertools
import random
from types import SimpleNamespace

import pytest

from turngym.envs.shop.catalog import Product
from turngym.envs.shop.tasks import NO_PRICE_CAP, price_cap
from turngym.envs.shop.verifier import (
    attribute_matches,
    fuzzy_match,
    normalize_color,
    option_matches,
    title_score,
    type_reward,
    webshop_reward,
)
from turngym.envs.shop.vocab import CATEGORIES, OPTION_VALUES, PRODUCT_TYPES

PATH = "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos"


def product(**overrides):
    fields = dict(
        asin="B000000001",
        title="Acme Sulfate Free Shampoo",
        query="shampoo",
        category="beauty",
        product_category=PATH,
        description="A gentle shampoo for every day.",
        bullets=("COLD PRESSED: argan oil from Morocco",),
        attributes=("sulfate free", "vegan formula", "argan oil"),
        options=(("scent", ("lavender", "rose")), ("size", ("8 oz", "12 oz"))),
        price=18.99,
        nouns=("shampoo",),
    )
    fields.update(overrides)
    return Product(**fields)


def goal(**overrides):
    fields = dict(
        query="shampoo",
        product_category=PATH,
        nouns=("shampoo",),
        attributes=("sulfate free", "vegan formula"),
        options=(("scent", "lavender"), ("size", "12 oz")),
        price_upper=30.0,
    )
    fields.update(overrides)
    return SimpleNamespace(**fields)


# -- the whole formula ---------------------------------------------------------------------
def test_everything_matched_is_exactly_one():
    r = webshop_reward(product(), goal(), {"scent": "lavender", "size": "12 oz"})
    assert r.reward == 1.0
    assert (r.n_attributes_matched, r.n_options_matched, r.r_price, r.r_type) == (2, 2, True, 1.0)


def test_missing_option_and_price_over_cap():
    # 2 attributes + 1 of 2 options + price over the cap: (2 + 1 + 0) / (2 + 2 + 1) = 0.6
    r = webshop_reward(product(price=31.0), goal(), {"scent": "lavender", "size": "8 oz"})
    assert r.reward == pytest.approx(3 / 5)
    assert r.r_option == 0.5 and r.r_price is False


def test_no_options_chosen_and_price_exactly_at_cap_is_ok():
    # (2 + 0 + 1) / 5; price <= cap is inclusive
    r = webshop_reward(product(price=30.0), goal(), {})
    assert r.reward == pytest.approx(3 / 5)
    assert r.r_price is True


def test_goal_without_options_divides_by_attributes_plus_one():
    # one of two attributes + price: (1 + 0 + 1) / (2 + 0 + 1)
    r = webshop_reward(product(attributes=("sulfate free",)), goal(options=()), {})
    assert r.reward == pytest.approx(2 / 3)
    assert r.r_option is None


def test_type_factor_multiplies_everything():
    # a conditioner bought for a shampoo goal: nouns disjoint -> r_type 0 -> reward 0
    r = webshop_reward(product(nouns=("conditioner",), query="conditioner"), goal(), {"scent": "lavender", "size": "12 oz"})
    assert r.r_type == 0.0 and r.reward == 0.0


# -- type factor ---------------------------------------------------------------------------
def test_type_factor_query_match():
    assert type_reward(product(), goal())[0] == 1.0


def test_type_factor_category_needs_two_shared_levels():
    g = goal(query="other", product_category="Beauty & Personal Care › Skin Care › Face", nouns=("shampoo", "a", "b", "c", "d"))
    # 1 shared level, title score 1/5 = 0.2 (not > 0.2), no query match -> 0.5
    r_type, query_match, category_match, score = type_reward(product(), g)
    assert (query_match, category_match, score, r_type) == (False, False, 0.2, 0.5)
    g2 = goal(query="other", product_category="Beauty & Personal Care › Hair Care › Masks", nouns=g.nouns)
    assert type_reward(product(), g2)[:3] == (1.0, False, True)


def test_type_factor_title_score_above_point_two():
    g = goal(query="other", product_category="Electronics › Audio › Speakers", nouns=("shampoo", "bar", "soap"))
    r_type, _, category_match, score = type_reward(product(), g)  # 1/3 > 0.2
    assert not category_match and score == pytest.approx(1 / 3) and r_type == 1.0


def test_type_factor_low_title_score_overrides_query_match():
    nouns = ("shampoo",) + tuple(f"w{i}" for i in range(10))  # 1/11 < 0.1
    assert type_reward(product(), goal(nouns=nouns))[0] == 0.1
    assert type_reward(product(nouns=("soap",)), goal())[0] == 0.0  # score 0 -> 0 despite query match


def test_title_score_without_goal_nouns_is_point_two():
    assert title_score(("shampoo",), ()) == 0.2
    assert type_reward(product(), goal(nouns=()))[0] == 1.0  # query match
    assert type_reward(product(), goal(nouns=(), query="x", product_category="A › B"))[0] == 0.5


# -- fuzzy matching --------------------------------------------------------------------------
def test_fuzzy_threshold_is_strictly_above_85():
    # single tokens, no intersection: ratio = 2 * LCS / total length
    assert not fuzzy_match("x" * 20, "x" * 17 + "yyy")  # 2*17/40 = 85.0 exactly
    assert fuzzy_match("x" * 20, "x" * 18 + "yy")  # 2*18/40 = 90.0


def test_fuzzy_token_set_cases():
    assert fuzzy_match("sulfate free", "Sulfate-Free shampoo")  # subset after preprocessing -> 100
    # "2 pack" vs "6 pack": sect "pack"; ratio("pack 2", "pack 6") = 10/12 = 83.3
    assert not fuzzy_match("2 pack", "6 pack")
    # "pack of 2" vs "pack of 6": ratio("of pack 2", "of pack 6") = 16/18 = 88.9
    assert fuzzy_match("pack of 2", "pack of 6")


def test_attribute_falls_back_to_substring_of_text():
    p = product(attributes=("vegan formula",))
    # "cold pressed" is only in a bullet, "gentle shampoo" only in the description
    assert attribute_matches(p, ("cold pressed", "gentle shampoo", "tea tree")) == 2


def test_option_colors_are_normalized():
    assert normalize_color("Navy | White") == "navy"
    assert normalize_color("Dark Blue") == "dark blue"
    assert normalize_color("bored") == "bored"  # whole words only
    assert option_matches(["navy | white"], ["navy"]) == 1
    assert option_matches(["black"], ["navy", "12 oz"]) == 0
    # each goal option counts at most once
    assert option_matches(["lavender", "lavender"], ["lavender"]) == 1


# -- price cap -----------------------------------------------------------------------------
def test_price_cap_rule():
    caps = {price_cap(23.5, random.Random(s)) for s in range(200)}
    # candidates 30, 40, 50, 60; the larger of two distinct draws is never 30
    assert caps == {40.0, 50.0, 60.0}
    assert {price_cap(30.0, random.Random(s)) for s in range(200)} == {50.0, 60.0, 70.0}  # strictly above
    assert price_cap(985.0, random.Random(0)) == NO_PRICE_CAP  # only $990 is left
    assert price_cap(975.0, random.Random(0)) == 990.0  # 980 and 990: the larger


# -- vocabulary: near misses must really miss ------------------------------------------------
def test_no_two_attributes_of_a_category_fuzz_match():
    for cat in CATEGORIES.values():
        clashes = [(a, b) for a, b in itertools.combinations(cat.attributes, 2) if fuzzy_match(a, b)]
        assert not clashes, (cat.key, clashes)


def test_no_two_option_values_of_a_type_fuzz_match():
    for t in PRODUCT_TYPES:
        values = [v for dim in t.options for v in OPTION_VALUES[dim.split(":")[1]]]
        clashes = [
            (a, b) for a, b in itertools.combinations(values, 2)
            if fuzzy_match(normalize_color(a), normalize_color(b))
        ]
        assert not clashes, (t.name, clashes)


def test_product_types_are_well_formed():
    for t in PRODUCT_TYPES:
        assert 3 <= len(t.path) <= 5, t.name
        assert set(t.nouns) <= set(t.name.replace("'", " ").replace("-", " ").split()), t.name
        assert t.price[0] < t.price[1]
