"""The WebShop file loader, on a tiny hand-written fixture in WebShop's own format."""

import json
from pathlib import Path

import pytest

import turngym
from turngym.core.errors import ConfigError, TaskError
from turngym.envs.shop.env import ShopEnv
from turngym.envs.shop.tasks import NO_PRICE_CAP, load_webshop, load_webshop_products

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "webshop_tiny"
PRODUCTS = FIXTURE / "items_shuffle_tiny.json"
ATTRIBUTES = FIXTURE / "items_ins_v2_tiny.json"
HUMAN = FIXTURE / "items_human_ins_tiny.json"
REVIEWS = FIXTURE / "items_reviews_tiny.json"


def test_products_are_read_as_webshop_does():
    products, _ = load_webshop_products(PRODUCTS, ATTRIBUTES, REVIEWS)
    assert [p.asin for p in products] == ["B09QKP7XQL", "B07ZT4D8L2", "B08L5WHFT9"]  # "nan" and duplicate skipped
    oil, scalp, tee = products
    assert oil.query == "hair treatment oil"  # lowercased, stripped
    assert oil.options == (("size", ("2 fl oz (pack of 1)", "4 fl oz")), ("scent", ("lavender", "unscented")))
    assert tee.options[0] == ("color", ("navy | white", "black"))  # "/" becomes " | "
    assert oil.price == 12.99 and tee.price == 100.0  # missing price -> $100
    assert 8.5 <= scalp.price <= 15.5  # a range: a draw between the two prices
    assert scalp.bullets == ("Paraben free and cruelty free",)  # a string becomes one bullet
    assert oil.attributes == ("sulfate free", "dry hair", "argan oil")
    assert oil.reviews == ((5.0, "My hair is so soft now."), (4.0, "Nice but small bottle.")) and oil.rating == 4.5
    no_attrs, _ = load_webshop_products(PRODUCTS)
    assert no_attrs[0].attributes == ("DUMMY_ATTR",)


def test_synthetic_goals_one_per_option_combination():
    catalog, tasks = load_webshop(PRODUCTS, ATTRIBUTES)
    oil = [t for t in tasks if t.asin == "B09QKP7XQL"]
    assert len(oil) == 4  # 2 scents x 2 sizes; the t-shirt has no instruction
    assert len(tasks) == 5
    assert oil[0].prompt.startswith("i need a sulfate free argan hair oil for dry hair with scent: lavender, and size: ")
    assert oil[0].attributes == ("sulfate free", "dry hair")
    assert {t.price_upper for t in oil} <= {30.0, 40.0} and len({t.price_upper for t in oil}) == 1
    assert oil[0].prompt.endswith(f", and price lower than {oil[0].price_upper:.2f} dollars")


def test_human_goals():
    catalog, tasks = load_webshop(PRODUCTS, ATTRIBUTES, HUMAN, REVIEWS)
    assert [t.asin for t in tasks] == ["B09QKP7XQL", "B08L5WHFT9"]  # the goal without attributes is skipped
    oil = tasks[0]
    assert oil.options == (("", "lavender"), ("", "4 fl oz"))
    assert oil.prompt.startswith("I'm looking for a lavender argan oil for dry hair, 4 fl oz, and price lower than")
    assert tasks[1].price_upper in (130.0, 140.0)
    assert all(t.price_upper < NO_PRICE_CAP for t in tasks)


@pytest.mark.parametrize("human", [False, True])
def test_env_on_loaded_data_oracle_reaches_one(human):
    catalog, tasks = load_webshop(PRODUCTS, ATTRIBUTES, HUMAN if human else None)
    env = ShopEnv(catalog=catalog, tasks=tasks)
    turngym.check_env(env, n_garbage=60, gymnasium_checks=False)
    for task in tasks:
        env.reset(options={"task": task.id})
        for _ in range(env.max_turns):
            *_, term, trunc, info = env.step(env.oracle_action())
            if term or trunc:
                break
        assert info["outcome"]["reward"] == 1.0, (task.id, info["outcome"])


def test_wrong_option_lowers_reward_on_loaded_data():
    catalog, tasks = load_webshop(PRODUCTS, ATTRIBUTES, HUMAN)
    env = ShopEnv(catalog=catalog, tasks=tasks)
    env.reset(options={"task": tasks[0].id})  # lavender, 4 fl oz
    env.step("search[argan hair oil]")
    env.step("click[b09qkp7xql]")
    env.step("click[unscented]")
    env.step("click[4 fl oz]")
    *_, info = env.step("click[buy now]")
    # 2 attributes + 1 of 2 options + price: 4 / 5
    assert info["outcome"]["reward"] == pytest.approx(0.8)


def test_malformed_files_raise_task_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TaskError, match="not valid JSON"):
        load_webshop(bad)
    with pytest.raises(TaskError, match="not found"):
        load_webshop(tmp_path / "missing.json")
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps({"asin": "B0"}))
    with pytest.raises(TaskError, match="JSON list"):
        load_webshop(obj)
    catalog, tasks = load_webshop(PRODUCTS, ATTRIBUTES)
    with pytest.raises(ConfigError, match="missing from the catalog"):
        ShopEnv(catalog=catalog, tasks=[tasks[0].__class__(id="x", prompt="p", asin="B0NOPE0000")])


def test_option_values_click_case_and_space_insensitively():
    catalog, tasks = load_webshop(PRODUCTS, ATTRIBUTES, HUMAN)
    env = ShopEnv(catalog=catalog, tasks=tasks)
    env.reset(options={"task": tasks[1].id})  # the t-shirt: black, large
    env.step("search[men's cotton t-shirt]")
    env.step("click[B08L5WHFT9]")
    *_, info = env.step("click[ Navy  |  WHITE ]")
    assert info["action_valid"] and env.state.chosen == (("color", "navy | white"),)
    assert info["signals"]["option_match"] == 0.0  # navy is not the black asked for
    env.step("click[black]")
    env.step("click[large]")
    *_, info = env.step("click[buy now]")
    assert info["outcome"]["reward"] == 1.0 and info["outcome"]["options"] == {"color": "black", "size": "large"}
