"""turngym/Shop-v0: contract, oracle, baselines, pages, signals, state keys, branching."""

import gymnasium as gym
import numpy as np
import pytest

import turngym
from turngym.core.errors import ConfigError, TaskError
from turngym.envs.shop.catalog import GeneratedCatalog, get_catalog, product_document
from turngym.envs.shop.env import ShopEnv
from turngym.envs.shop.oracle import first_result_action
from turngym.envs.shop.tasks import ShopTask, generate_task

ENV_ID = "turngym/Shop-v0"


def make(**kw):
    return turngym.make(ENV_ID, **kw)


def play(env, policy, seed, rng=None):
    env.reset(seed=seed)
    info = {}
    for _ in range(env.max_turns):
        *_, term, trunc, info = env.step(policy(env, rng))
        if term or trunc:
            break
    return info["outcome"]


def oracle(env, rng):
    return env.oracle_action()


def first(env, rng):
    return first_result_action(env)


def rand(env, rng):
    return env.sample_action(rng)


def scores(env, policy, seeds):
    rewards = np.array([play(env, policy, s, np.random.default_rng(s))["reward"] for s in seeds])
    return rewards.mean(), (rewards >= 1.0).mean()


# -- contract ------------------------------------------------------------------------------
@pytest.mark.parametrize("difficulty", ["easy", "medium"])
def test_check_env(difficulty):
    turngym.check_env(make(difficulty=difficulty), n_garbage=150, oracle_episodes=5)


@pytest.mark.slow
def test_check_env_hard():
    turngym.check_env(make(difficulty="hard"), n_garbage=100)


def test_gymnasium_make_and_spec():
    env = gym.make(ENV_ID, difficulty="easy")
    obs, info = env.reset(seed=3)
    assert obs.startswith("WebShop") and info["task_id"].startswith("shop/gen-0-1000-0.2/p0/")
    assert turngym.env_info(ENV_ID).max_turns == 15


def test_bad_arguments_raise_config_errors():
    with pytest.raises(ConfigError, match="difficulty"):
        ShopEnv(difficulty="nightmare")
    with pytest.raises(ConfigError, match="paraphrase"):
        ShopEnv(difficulty="easy", paraphrase=3)
    with pytest.raises(ConfigError, match="n_products"):
        GeneratedCatalog(n_products=5)
    with pytest.raises(ConfigError, match="page_size"):
        ShopEnv(difficulty="easy", page_size=0)


# -- oracle and baselines ------------------------------------------------------------------
@pytest.mark.parametrize("difficulty", ["easy", "medium"])
def test_oracle_full_reward(difficulty):
    env = make(difficulty=difficulty)
    for seed in range(60):
        outcome = play(env, oracle, seed)
        assert outcome["reward"] == 1.0 and outcome["success"], (seed, env.task.id, outcome)


@pytest.mark.slow
@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_oracle_full_reward_500(difficulty):
    env = make(difficulty=difficulty)
    failures = [s for s in range(500) if play(env, oracle, s)["reward"] < 1.0]
    assert not failures, failures[:10]


def test_baselines_rank_below_oracle():
    env = make(difficulty="medium")
    seeds = range(120)
    first_mean, first_success = scores(env, first, seeds)
    rand_mean, rand_success = scores(env, rand, seeds)
    assert scores(env, oracle, seeds) == (1.0, 1.0)
    assert rand_mean < first_mean < 1.0
    assert rand_success < 0.05 and first_success < 0.3


def test_same_seed_same_episode_and_shared_catalog():
    a, b = make(difficulty="easy"), make(difficulty="easy")
    assert a.catalog is b.catalog  # built once per process
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    obs_a, _ = a.reset(seed=9)
    obs_b, _ = b.reset(seed=9)
    assert obs_a == obs_b
    for _ in range(8):
        ra, rb = a.step(a.sample_action(rng_a)), b.step(b.sample_action(rng_b))
        assert ra == rb
        if ra[2] or ra[3]:
            break


# -- pages and actions ---------------------------------------------------------------------
def search(env, seed=0):
    env.reset(seed=seed)
    return env.step(env.oracle_action())


def test_results_page_lists_products_and_paging():
    env = make(difficulty="easy")
    obs, *_ = search(env)
    s = env.state
    assert len(s.results) == 50 and "Page 1 (Total results: 50)" in obs
    assert "click[next >]" in obs and "click[< prev]" not in obs
    first_asin = env.product(s.results[0]).asin
    assert f"[{first_asin}]" in obs and f"click[{first_asin.lower()}]" in obs
    for _ in range(4):
        obs, *_ = env.step("click[Next >]")
    assert "Page 5" in obs and "click[next >]" not in obs and "click[< prev]" in obs
    assert env.product(s.results[40]).asin in obs
    obs, *_ = env.step("click[< prev]")
    assert "Page 4" in obs


def test_page_size_sets_products_per_results_page_and_the_oracle_pages_through():
    env = make(difficulty="easy", page_size=3, max_turns=30)
    obs, *_ = search(env)
    s = env.state
    shown = [env.product(i).asin for i in s.results[:4]]
    assert all(f"[{a}]" in obs for a in shown[:3]) and f"[{shown[3]}]" not in obs
    for _ in range(16):
        obs, *_ = env.step("click[next >]")
    assert "Page 17" in obs and "click[next >]" not in obs  # 50 results / 3 per page = 17 pages
    rewards = [play(make(difficulty="easy", page_size=3), oracle, seed)["reward"] for seed in range(20)]
    assert rewards == [1.0] * 20


def test_item_page_options_subpages_and_back():
    env = make(difficulty="easy")
    search(env)
    asin = env.product(env.state.results[0]).asin
    obs, *_ = env.step(f"I'll open it: click[{asin}]")
    product = env.product(env.state.results[0])
    assert product.title in obs and "click[buy now]" in obs and "click[description]" in obs
    dim, values = product.options[0]
    obs, *_, info = env.step(f"click[{values[1]}]")
    assert info["action_valid"] and f"Selected: {dim}: {values[1]}" in obs
    obs, *_ = env.step("click[Description]")
    assert product.description in obs and "click[buy now]" not in obs
    obs, *_ = env.step("click[< Prev]")
    assert f"Selected: {dim}: {values[1]}" in obs  # options survive a sub-page visit
    obs, *_ = env.step("click[features]")
    assert all(b in obs for b in product.bullets)
    env.step("click[< prev]")
    obs, *_ = env.step("click[< prev]")  # item -> results
    assert "Total results" in obs and env.state.chosen == ()
    obs, *_ = env.step("click[back to search]")
    assert obs.startswith("WebShop") and env.state.results == ()


def test_search_without_matches_gives_empty_results():
    env = make(difficulty="easy")
    env.reset(seed=0)
    obs, *_, info = env.step("search[zzzqqq xyzzy]")
    assert info["action_valid"] and "Total results: 0" in obs and "No products match" in obs
    assert "click[next >]" not in obs


@pytest.mark.parametrize(
    "action, reason",
    [
        ("buy the shampoo", "no action found"),
        ("search[]", "empty"),
        ("click[b0zzzzzzzz]", "not clickable"),
    ],
)
def test_invalid_actions_are_part_of_the_episode(action, reason):
    env = make(difficulty="easy")
    search(env)
    key = env.state_key()
    obs, reward, term, trunc, info = env.step(action)
    assert info["action_valid"] is False and reason in info["invalid_reason"]
    assert reward == pytest.approx(-0.1) and not term
    assert info["state_key"] == key and obs.startswith("Invalid action")


def test_search_off_the_search_page_is_invalid_and_continue_policy_has_no_penalty():
    env = make(difficulty="easy", invalid_action_policy="continue")
    search(env)
    *_, reward, _, _, info = env.step("search[shampoo]")
    assert not info["action_valid"] and "back to search" in info["invalid_reason"] and reward == 0.0
    env.reset(seed=0)
    *_, info = env.step("click[buy now]")  # no buttons on the search page
    assert not info["action_valid"]


# -- signals -------------------------------------------------------------------------------
def test_potential_is_the_purchase_reward_and_telescopes():
    env = make(difficulty="medium")
    rng = np.random.default_rng(0)
    for seed in range(20):
        env.reset(seed=seed)
        total_delta, potential = 0.0, 0.0
        for _ in range(env.max_turns):
            action = env.oracle_action() if rng.random() < 0.5 else env.sample_action(rng)
            if env.state.page == "item" and rng.random() < 0.3:
                action = "click[buy now]"
            *_, reward, term, trunc, info = env.step(action)
            sig = info["signals"]
            assert sig["delta_potential"] == pytest.approx(sig["potential"] - potential)
            total_delta += sig["delta_potential"]
            if term:
                # the potential one turn before buying was exactly the reward paid
                assert info["outcome"]["reward"] == pytest.approx(potential)
                assert sig["potential"] == 0.0
            potential = sig["potential"]
            if term or trunc:
                break
        assert total_delta == pytest.approx(potential)


def test_goal_rank_and_query_coverage():
    env = make(difficulty="easy")
    *_, info = search(env)
    s, goal = env.state, env._goal_index
    sig = info["signals"]
    expected = 1 / (s.results.index(goal) + 1) if goal in s.results else 0.0
    assert sig["goal_rank_rr"] == pytest.approx(expected)
    assert sig["goal_on_page"] == float(goal in s.results[:10])
    assert sig["query_coverage"] == 1.0  # the oracle's query names every goal term
    env.step("click[back to search]")
    *_, info = env.step("search[the a of]")  # stopwords only
    assert info["signals"]["query_coverage"] == 0.0 and info["signals"]["goal_rank_rr"] == 0.0


def test_repeat_query_and_revisit_flags():
    env = make(difficulty="easy")
    env.reset(seed=4)
    *_, info = env.step("search[sulfate free shampoo]")
    assert info["signals"]["repeat_query"] == 0.0
    asin = env.product(env.state.results[0]).asin
    *_, info = env.step(f"click[{asin}]")
    assert info["signals"]["revisit"] == 0.0
    env.step("click[< prev]")
    *_, info = env.step(f"click[{asin}]")
    assert info["signals"]["revisit"] == 1.0
    env.step("click[back to search]")
    *_, info = env.step("search[Shampoos, sulfate-free]")  # same bag of terms
    assert info["signals"]["repeat_query"] == 1.0


def test_option_match_rewards_setting_and_penalizes_overwriting():
    env = make(difficulty="easy")
    for seed in range(50):
        env.reset(seed=seed)
        while env.state.page != "item" or not env.goal.options:
            if env.done:
                break
            env.step(env.oracle_action())
        if env.state.page == "item" and env.goal.options:
            break
    action = env.oracle_action()
    assert action != "click[buy now]"
    value = action[len("click[") : -1]
    *_, info = env.step(action)
    assert info["signals"]["option_match"] == 1.0
    *_, info = env.step(action)  # clicking it again changes nothing
    assert info["signals"]["option_match"] == 0.0
    dim = env.product(env.state.item).option_dimension(value)
    other = next(v for v in dict(env.product(env.state.item).options)[dim] if v != value)
    *_, info = env.step(f"click[{other}]")
    assert info["signals"]["option_match"] == -1.0 and info["signals"]["delta_potential"] < 0


# -- state keys and branching --------------------------------------------------------------
def test_state_key_ignores_history_but_not_page_product_or_options():
    env = make(difficulty="easy")
    env.reset(seed=2)
    env.step("search[shampoo sulfate free]")
    k_results = env.state_key()
    item = env.state.results[0]
    asin = env.product(item).asin
    env.step(f"click[{asin}]")
    k_item = env.state_key()
    # another route to the same page: detour through a sub-page and another search
    env.step("click[back to search]")
    env.step("search[free sulfate shampoos]")  # same bag of terms: same results page
    assert env.state_key() == k_results
    env.step(f"click[{asin}]")
    env.step("click[reviews]")
    env.step("click[< prev]")
    assert env.state_key() == k_item
    value = env.product(item).options[0][1][0]
    env.step(f"click[{value}]")
    assert env.state_key() != k_item
    env.step("click[< prev]")
    assert env.state_key() == k_results


def test_snapshot_restore_branches_identically():
    env = make(difficulty="medium")
    env.reset(seed=11)
    env.step(env.oracle_action())
    env.step(env.oracle_action())
    snap = env.snapshot()
    rng = np.random.default_rng(0)
    actions = [env.sample_action(rng) for _ in range(1)] + ["click[< prev]", "click[back to search]", "search[red shoes]"]
    runs = []
    for _ in range(2):
        env.restore(snap)
        runs.append([env.step(a) for a in actions])
    assert runs[0] == runs[1]
    env.restore(snap)
    assert env.state is snap.payload  # frozen state: a snapshot is a reference


# -- tasks ---------------------------------------------------------------------------------
def test_task_ids_regenerate_and_serialize():
    env = make(difficulty="easy")
    obs, info = env.reset(seed=5)
    task = env.task
    obs2, info2 = env.reset(options={"task": info["task_id"]})
    assert obs2 == obs and env.task == task
    assert ShopTask.from_dict(task.to_dict()) == task
    other = generate_task(get_catalog(0, 10_000, 0.5), 1, 1)
    with pytest.raises(TaskError, match="belongs to catalog"):
        env.reset(options={"task": other.id})
    with pytest.raises(TaskError, match="drawn from catalog"):
        env.reset(options={"task": other})
    with pytest.raises(ConfigError, match="another catalog"):
        ShopEnv(difficulty="easy", tasks=[other])


def test_goals_follow_the_target_product():
    cat = get_catalog(0, 1000, 0.2)
    for seed in range(100):
        t = generate_task(cat, seed, paraphrase=1)
        p = cat.product(cat.index_of(t.asin))
        assert set(t.attributes) <= set(p.attributes) and 1 <= len(t.attributes) <= 3
        assert all(v in dict(p.options)[d] for d, v in t.options)
        assert p.price < t.price_upper <= p.price + 40 or t.price_upper == 1_000_000.0
        assert f"{t.price_upper:.0f}" in t.prompt or t.price_upper == 1_000_000.0


def test_paraphrase_levels():
    cat = get_catalog(0, 1000, 0.2)
    level0 = [generate_task(cat, s, 0) for s in range(50)]
    assert all(t.prompt.startswith(f"i am looking for {t.query} that is") for t in level0)
    assert all(all(a in t.prompt for a in t.attributes) for t in level0)
    level2 = [generate_task(cat, s, 2) for s in range(200)]
    hidden = [t for t in level2 if not all(a in t.prompt for a in t.attributes)]
    assert len(hidden) > 20  # synonyms replace attribute phrases


# -- catalog -------------------------------------------------------------------------------
def test_catalog_is_deterministic_and_asins_round_trip():
    a, b = GeneratedCatalog(7, 500, 0.5), GeneratedCatalog(7, 500, 0.5)
    assert a.specs == b.specs and [a.product(i) for i in range(50)] == [b.product(i) for i in range(50)]
    assert GeneratedCatalog(8, 500, 0.5).specs != a.specs
    asins = [a.asin(i) for i in range(len(a))]
    assert len(set(asins)) == len(a) and all(len(x) == 10 and x.startswith("B0") for x in asins)
    assert all(a.index_of(x.lower()) == i for i, x in enumerate(asins))
    assert a.index_of("B0ZZZZZZZZ") is None and a.index_of("hello") is None


def test_distractors_are_near_misses():
    cat = GeneratedCatalog(3, 2000, 1.0)
    kinds = set(cat.kinds)
    assert kinds == {0, 1, 2, 3, 4}
    base = None
    for i, kind in enumerate(cat.kinds):
        if kind == 0:
            base = cat.specs[i]
            continue
        spec = cat.specs[i]
        assert spec.brand_id == base.brand_id and spec.text_seed == base.text_seed
        changed = [f for f in ("type_id", "attrs", "options", "price") if getattr(spec, f) != getattr(base, f)]
        assert changed and (changed == ["type_id", "options"] or len(changed) == 1), changed
    assert cat.product(1).title.split()[0] == cat.product(0).title.split()[0]  # same brand


def test_search_ranks_by_bm25_with_deterministic_ties():
    cat = get_catalog(0, 1000, 0.2)
    hits = cat.search("sulfate free shampoo")
    assert hits == cat.search("shampoo sulfate free") and len(hits) == 50
    top = cat.product(hits[0])
    assert "shampoo" in top.title.lower()
    assert cat.search("") == [] and cat.search("the of and") == []


def test_search_scores_equal_bm25s_and_ranking_is_by_score():
    index = get_catalog(0, 1000, 0.2).index
    for query in ("sulfate free shampoo lavender 8 oz", "bluetooth headphones black", "gluten free gluten free cookies"):
        ids = index.query_ids(query)
        ours = index.scores(ids)
        np.testing.assert_allclose(ours, index.bm25.get_scores(ids), rtol=1e-6)
        hits = index.search_ids(ids)
        ranked = ours[hits]
        assert np.all(np.diff(ranked) <= 0)  # best first
        assert ranked[-1] >= np.sort(ours)[-len(hits)]  # nothing better was left out
        ties = [(a, b) for a, b in zip(hits, hits[1:]) if ours[a] == ours[b]]
        assert all(a < b for a, b in ties)  # equal scores: lower catalog index first


def test_indexed_text_is_the_rendered_products_text():
    cat = get_catalog(0, 1000, 0.2)
    assert all(cat._document(i) == product_document(cat.product(i)) for i in range(0, 1000, 7))
