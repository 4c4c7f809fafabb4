"""Advantage estimators: loop equivalence, worked examples, properties and known traps."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turngym.core.errors import ConfigError
from turngym.trainers.advantages import ESTIMATORS, TurnTable, TurnTableError, compute_advantages
from turngym.trainers.advantages import reference as ref

sys.path.insert(0, str(Path(__file__).parent))
from advantage_tables import expand_tree, random_table  # noqa: E402

TREE = {"tree", "turn_grpo"}
NAMES = sorted(ESTIMATORS)
PARAMS = {
    "grpo": [{}, {"scale": False}],
    "rloo": [{}],
    "rebn": [{}, {"gamma": 0.9}],
    "gigpo": [{}, {"gamma": 0.5, "omega": 0.3, "normalize": "mean"}],
    "turn_grpo": [{}, {"scale": False}],
    "tree": [{}, {"local_weight": 0.0}, {"scale": False}],
    "igpo": [{}, {"gamma": 0.8}],
    "igpo_turn_group": [{}, {"gamma": 0.8}],
    "gae_grouped": [{}, {"gamma": 1.0, "lam": 0.5, "normalize": False}],
    "gae": [{}, {"gamma": 0.9, "lam": 1.0}],
    "papo": [{}, {"process_weight": 0.5}],
}


def _table(name: str, seed: int, **kw) -> dict:
    return random_table(seed, tree=name in TREE, **kw)


def test_every_estimator_is_tested() -> None:
    assert set(PARAMS) == set(ESTIMATORS) == set(ref.REFERENCE)


# ------------------------------------------------------------------------ loop equivalence
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", range(12))
def test_matches_plain_loop(name: str, seed: int) -> None:
    turns = _table(name, seed)
    for params in PARAMS[name]:
        fast = compute_advantages(name, turns, **params)
        slow = np.array(ref.REFERENCE[name](turns, **params))
        np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-9, err_msg=f"{name} {params}")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(NAMES), n_groups=st.integers(1, 4), max_turns=st.integers(1, 6))
def test_matches_plain_loop_property(seed: int, name: str, n_groups: int, max_turns: int) -> None:
    turns = _table(name, seed, n_groups=n_groups, max_turns=max_turns)
    np.testing.assert_allclose(compute_advantages(name, turns), ref.REFERENCE[name](turns), rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------------ worked examples
def test_worked_examples_by_hand() -> None:
    two = {"episode": [0, 0, 1], "group": [7, 7, 7], "turn": [0, 1, 0], "reward": [0.0, 1.0, 0.0]}
    np.testing.assert_allclose(compute_advantages("grpo", two), [0.70710, 0.70710, -0.70710], atol=1e-4)
    np.testing.assert_allclose(compute_advantages("grpo", two, scale=False), [0.5, 0.5, -0.5])
    three = {"episode": [0, 1, 2], "group": [0, 0, 0], "turn": [0, 0, 0], "reward": [3.0, 1.0, 2.0]}
    np.testing.assert_allclose(compute_advantages("rloo", three), [1.5, -1.5, 0.0])
    gig = dict(two, group=[0, 0, 0], state_before=["s", "s", "s"])
    np.testing.assert_allclose(compute_advantages("gigpo", gig, gamma=0.5, normalize="mean"), [0.5, 1.0, -1.0])
    value = {"episode": [0, 0], "group": [0, 0], "turn": [0, 1], "reward": [0.0, 1.0], "value": [0.5, 0.8]}
    np.testing.assert_allclose(compute_advantages("gae", value, gamma=1.0, lam=0.5), [0.4, 0.2])
    tr = {"episode": [0, 0, 1, 2], "group": [0] * 4, "turn": [0, 1, 1, 0], "reward": [0.0, 1.0, 0.0, 0.0], "node": "abcd", "parent": [None, "a", "a", None]}
    # V(b)=1, V(c)=0, V(a)=.5, V(d)=0, root 1/3, σ=1/√3: A = V−V(parent) + (V − 1/3)·√3
    s3 = np.sqrt(3)
    np.testing.assert_allclose(
        compute_advantages("tree", dict(tr, node=list("abcd"))),
        [0.5 - 1 / 3 + (0.5 - 1 / 3) * s3, 0.5 + (2 / 3) * s3, -0.5 - (1 / 3) * s3, -1 / 3 - (1 / 3) * s3],
        atol=1e-5,
    )


# ------------------------------------------------------------------------ properties
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", range(5))
def test_row_order_does_not_matter(name: str, seed: int) -> None:
    turns = _table(name, seed, shuffle=False)
    perm = np.random.default_rng(seed).permutation(len(turns["episode"]))
    shuffled = {k: [v[i] for i in perm] for k, v in turns.items()}
    np.testing.assert_allclose(compute_advantages(name, shuffled), compute_advantages(name, turns)[perm], atol=1e-12)


def _identical_episodes(tree: bool) -> dict:
    """Two groups, each of three identical episodes (same per-turn rewards, states, signals)."""
    cols: dict = {k: [] for k in ("episode", "group", "turn", "reward", "state_before", "info_gain", "value", "process", "correct")}
    if tree:
        cols["node"], cols["parent"] = [], []
    for g, rewards in enumerate([(0.0, 0.3, 1.0), (0.5, 0.5)]):
        for e in range(3):
            for t, r in enumerate(rewards):
                cols["episode"].append(f"{g}-{e}")
                cols["group"].append(g)
                cols["turn"].append(t)
                cols["reward"].append(r)
                cols["state_before"].append(f"s{t}")
                cols["info_gain"].append(0.1 * t)
                cols["value"].append(0.0)
                cols["process"].append(0.4)
                cols["correct"].append(True)
                if tree:
                    cols["node"].append(f"{g}-{e}-{t}")
                    cols["parent"].append(None if t == 0 else f"{g}-{e}-{t - 1}")
    return cols


@pytest.mark.parametrize("name", sorted(set(NAMES) - {"gae", "rebn", "igpo"}))
def test_identical_episodes_in_a_group_give_zero(name: str) -> None:
    # rebn has no group baseline (it normalizes over the batch) and gae uses a critic.
    adv = compute_advantages(name, _identical_episodes(name in TREE))
    assert np.all(adv == 0.0), adv


def test_igpo_pools_turns_so_identical_episodes_share_nonzero_advantages() -> None:
    """IGPO z-scores all turns of a group together (documented): identical episodes get
    identical, non-zero advantages; its turn-group variant gives exactly 0."""
    turns = _identical_episodes(False)
    t = TurnTable(turns)
    adv = compute_advantages("igpo", turns)
    per_turn = {(g, k): set(np.round(adv[(t.group == g) & (t.turn == k)], 12)) for g in range(2) for k in range(3) if ((t.group == g) & (t.turn == k)).any()}
    assert all(len(v) == 1 for v in per_turn.values())
    assert np.abs(adv).max() > 0.5
    assert np.all(compute_advantages("igpo_turn_group", turns) == 0.0)


@pytest.mark.parametrize("name", ["grpo", "rloo", "tree", "papo"])
@pytest.mark.parametrize("seed", range(5))
def test_equal_returns_give_zero_whatever_the_turn_rewards(name: str, seed: int) -> None:
    turns = _table(name, seed)
    t = TurnTable(turns)
    # Rescale the last turn of every episode so every episode returns exactly 1.0.
    rewards = np.array(turns["reward"])
    last = t.is_last
    rewards[last] += 1.0 - t.episode_returns[t.episode[last]]
    turns["reward"] = rewards.tolist()
    turns["process"] = [0.5] * len(rewards)
    if name == "tree":  # tree leaves: every root-to-leaf path must return 1; use a chain table
        turns = random_table(seed, tree=False)
        rewards = np.zeros(len(turns["episode"]))
        t = TurnTable(turns)
        rewards[t.is_last] = 1.0
        turns["reward"] = rewards.tolist()
        turns["node"] = list(range(len(rewards)))
        order = t.order
        parent = np.full(len(rewards), -1)
        same = t.episode[order][1:] == t.episode[order][:-1]
        parent[order[1:][same]] = order[:-1][same]
        turns["parent"] = parent.tolist()
    assert np.all(compute_advantages(name, turns) == 0.0)


def _comparable_rows(name: str, table: TurnTable) -> np.ndarray:
    """Rows that have something to be compared with under ``name``'s normalization.

    A lone member of a normalization bucket gets 0 whatever its reward (there is no
    baseline to compare it to); so does a tree node every leaf of its group passes through.
    """
    from turngym.trainers.advantages._segments import combine_codes
    from turngym.trainers.advantages._tree import tree_stats

    def multi(codes: np.ndarray) -> np.ndarray:
        return np.bincount(codes)[codes] >= 2

    episodes_in_group = np.bincount(table.episode_group)[table.group]
    if name in ("grpo", "rloo", "papo", "gigpo"):
        return episodes_in_group >= 2
    if name == "igpo":  # a lone episode's z-scores sum to 0, so its first turn is always 0
        return episodes_in_group >= 2
    if name == "igpo_turn_group":
        depth = np.where(table.is_last, table.turn.max() + 1, table.turn)
        return multi(combine_codes(table.group, depth))
    if name in ("tree", "turn_grpo"):
        st = tree_stats(table)
        if name == "turn_grpo":
            return multi(combine_codes(table.group, st.parent + 1))
        leaves_in_group = np.bincount(table.group, weights=st.is_leaf)[table.group]
        return st.n_leaves < leaves_in_group
    return np.ones(table.n_rows, bool)  # rebn, gae, gae_grouped: every reward enters a TD/return


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", range(6))
def test_changing_one_turns_reward_changes_that_turns_advantage(name: str, seed: int) -> None:
    """Per-step rewards must reach the loss (SkyRL #201, AReaL #1674: dropped/overwritten)."""
    turns = _table(name, seed, n_groups=3, max_episodes=5)
    table = TurnTable(turns)
    base = compute_advantages(name, turns)
    rows = np.flatnonzero(_comparable_rows(name, table))
    for i in rows:
        bumped = dict(turns, reward=list(turns["reward"]))
        bumped["reward"][i] += 3.7
        assert compute_advantages(name, bumped)[i] != pytest.approx(base[i], abs=1e-9), (name, i)
    assert rows.size > 0


@pytest.mark.parametrize("name", sorted(TREE))
@pytest.mark.parametrize("seed", range(8))
def test_tree_rows_once_per_node_or_once_per_episode_agree(name: str, seed: int) -> None:
    compact = random_table(seed, tree=True)
    expanded = expand_tree(compact)
    expanded["correct"] = [False] * len(expanded["episode"])
    by_node = dict(zip(compact["node"], compute_advantages(name, compact)))
    adv = compute_advantages(name, expanded)
    np.testing.assert_allclose(adv, [by_node[n] for n in expanded["node"]], atol=1e-9)
    np.testing.assert_allclose(adv, ref.REFERENCE[name](expanded), atol=1e-9)


def test_dr_grpo_and_rloo_relations() -> None:
    turns = random_table(3, max_episodes=6)
    t = TurnTable(turns)
    dr = compute_advantages("grpo", turns, scale=False)
    n = np.bincount(t.episode_group)[t.episode_group[t.episode]]
    rloo = compute_advantages("rloo", turns)
    np.testing.assert_allclose(rloo, np.where(n > 1, dr * n / np.maximum(n - 1, 1), 0.0), atol=1e-12)
    ret = t.episode_returns
    grp_mean = np.bincount(t.episode_group, weights=ret) / np.bincount(t.episode_group)
    expected = np.where(n > 1, ret[t.episode] - grp_mean[t.episode_group[t.episode]], 0.0)
    np.testing.assert_allclose(dr, np.where(np.isclose(dr, 0, atol=1e-12), 0.0, expected), atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_gae_lambda_limits(seed: int) -> None:
    turns = random_table(seed)
    t = TurnTable(turns)
    from turngym.trainers.advantages._segments import discounted_returns

    g = discounted_returns(t, 0.9)
    np.testing.assert_allclose(compute_advantages("gae", turns, gamma=0.9, lam=1.0), g - t.value, atol=1e-12)
    from turngym.trainers.advantages.gae_grouped import grouped_value_proxy, next_in_episode

    td = t.reward + 0.9 * next_in_episode(t.value, t) - t.value
    np.testing.assert_allclose(compute_advantages("gae", turns, gamma=0.9, lam=0.0), td, atol=1e-12)
    v = grouped_value_proxy(t, g)
    np.testing.assert_allclose(compute_advantages("gae_grouped", turns, gamma=0.9, lam=1.0, normalize=False), g - v, atol=1e-12)


def test_scale_invariance_of_normalized_estimators() -> None:
    turns = random_table(11)
    scaled = dict(turns, reward=[5 * r for r in turns["reward"]])
    for name in ("grpo", "rebn"):
        np.testing.assert_allclose(compute_advantages(name, scaled), compute_advantages(name, turns), atol=1e-5)


def test_papo_keeps_signal_when_every_episode_is_correct() -> None:
    turns = {"episode": [0, 1, 2], "group": [0, 0, 0], "turn": [0, 0, 0], "reward": [1.0, 1.0, 1.0], "process": [0.9, 0.5, 0.7]}
    assert np.all(compute_advantages("grpo", turns) == 0.0)
    adv = compute_advantages("papo", turns)
    assert adv[0] > adv[2] > adv[1]


def test_papo_process_cannot_lift_a_wrong_episode() -> None:
    turns = {"episode": [0, 1], "group": [0, 0], "turn": [0, 0], "reward": [1.0, 0.0], "process": [0.0, 1.0]}
    adv = compute_advantages("papo", turns)
    assert adv[0] > 0 > adv[1]


def test_tree_local_term_separates_siblings_that_grpo_cannot() -> None:
    # One shared prefix, two branches: the group term of the shared node is the mean.
    tr = {"episode": [0, 0, 1], "group": [0, 0, 0], "turn": [0, 1, 1], "reward": [0.0, 1.0, 0.0], "node": [1, 2, 3], "parent": [-1, 1, 1]}
    adv = compute_advantages("tree", tr)
    assert adv[1] > 0 > adv[2]
    assert adv[0] == pytest.approx(0.0, abs=1e-12)  # the only first turn: V(a) = V(root)


# ------------------------------------------------------------------------ the turn-index trap
def _stop_choice_group(ig_per_turn: float, outcome: float) -> dict:
    """One group, equal outcomes; the agent chooses when to stop.

    Every episode goes ``start`` → ``ready`` with one useful turn; in ``ready`` it either
    answers (ends with ``outcome``) or stalls (stays in ``ready``). Episode lengths 2, 4, 2, 3:
    episodes 1 and 3 stall 2 and 1 times. Every non-final turn gains ``ig_per_turn``.
    """
    cols: dict = {k: [] for k in ("episode", "group", "turn", "reward", "info_gain", "state_before")}
    for e, n in enumerate([2, 4, 2, 3]):
        for t in range(n):
            last = t == n - 1
            cols["episode"].append(e)
            cols["group"].append(0)
            cols["turn"].append(t)
            cols["reward"].append(outcome if last else 0.0)
            cols["info_gain"].append(0.0 if last else ig_per_turn)
            cols["state_before"].append("start" if t == 0 else "ready")
    return cols


def _naive_turn_index_igpo(turns: dict) -> np.ndarray:
    """The trap: outcomes and information gains z-scored together per turn index."""
    from turngym.trainers.advantages._segments import combine_codes, normalize_in_segments, reverse_discounted_sum
    from turngym.trainers.advantages.igpo import igpo_turn_rewards

    t = TurnTable(turns)
    z = normalize_in_segments(igpo_turn_rewards(t), combine_codes(t.group, t.turn))
    return reverse_discounted_sum(z, t, 1.0) / np.sqrt(t.steps_to_end + 1.0)


@pytest.mark.parametrize("outcome", [0.0, 1.0])
@pytest.mark.parametrize("name", ["igpo_turn_group", "gae_grouped", "gigpo"])
def test_turn_index_normalization_does_not_reward_extra_turns(name: str, outcome: float) -> None:
    turns = _stop_choice_group(ig_per_turn=0.2, outcome=outcome)
    t = TurnTable(turns)
    adv = compute_advantages(name, turns)
    first = {e: adv[(t.episode == e) & (t.turn == 0)][0] for e in range(4)}
    # Shorter never looks worse than longer for the same outcome (ep 0/2: 2 turns, 3: 3, 1: 4).
    assert first[0] >= first[3] - 1e-12 and first[3] >= first[1] - 1e-12, first
    ready = t.turn >= 1
    stalls = adv[ready & ~t.is_last]
    answers = adv[ready & t.is_last]
    assert stalls.max() <= answers.min() + 1e-12, (stalls, answers)
    assert stalls.max() <= 1e-12, stalls  # stalling is never reinforced


def test_the_turn_index_trap_is_real() -> None:
    """Without separating outcomes from gains, failing episodes are paid for not stopping."""
    turns = _stop_choice_group(ig_per_turn=0.2, outcome=0.0)
    t = TurnTable(turns)
    naive = _naive_turn_index_igpo(turns)
    first = {e: naive[(t.episode == e) & (t.turn == 0)][0] for e in range(4)}
    assert first[1] > first[0]
    assert np.all(compute_advantages("igpo_turn_group", turns) == 0.0)


# ------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("columns", "match"),
    [
        ({"episode": [0], "group": [0], "turn": [0]}, "missing required column"),
        ({"episode": [0], "group": [0], "turn": [0], "reward": [0], "rewards": [1]}, "Did you mean 'reward'"),
        ({"episode": [0, 1], "group": [0], "turn": [0], "reward": [0]}, "different lengths"),
        ({"episode": [0, 0], "group": [0, 0], "turn": [1, 1], "reward": [0, 0]}, "appears twice"),
        ({"episode": [0, 0], "group": [0, 1], "turn": [0, 1], "reward": [0, 0]}, "two groups"),
        ({"episode": [0], "group": [0], "turn": [0], "reward": [float("nan")]}, "non-finite"),
        ({"episode": [0], "group": [0], "turn": [-1], "reward": [0]}, "non-negative"),
        ({"episode": [0], "group": [0], "turn": [0], "reward": [0], "node": [1]}, "both 'node' and 'parent'"),
        ({"episode": [0], "group": [0], "turn": [1], "reward": [0], "node": [1], "parent": [5]}, "not a node"),
        ({"episode": [0, 0], "group": [0, 0], "turn": [0, 2], "reward": [0, 0], "node": [1, 2], "parent": [-1, 1]}, "previous turn"),
        ({"episode": [0, 1], "group": [0, 0], "turn": [0, 0], "reward": [0, 1], "node": [1, 1], "parent": [-1, -1]}, "differ in reward"),
        ({"episode": [0, 0], "group": [0, 0], "turn": [0, 1], "reward": [0, 0], "correct": [True, False]}, "constant within an episode"),
    ],
)
def test_malformed_tables_raise_clear_errors(columns: dict, match: str) -> None:
    with pytest.raises(TurnTableError, match=match):
        _ = TurnTable(columns).parent_row  # tree links are validated on first use


def test_unknown_estimator_param_and_missing_column() -> None:
    turns = {"episode": [0, 1], "group": [0, 0], "turn": [0, 0], "reward": [1.0, 0.0]}
    with pytest.raises(ConfigError, match="Did you mean 'gigpo'"):
        compute_advantages("gigp", turns)
    with pytest.raises(ConfigError, match="unknown parameter"):
        compute_advantages("gigpo", dict(turns, state_before=["a", "a"]), omgea=0.5)
    with pytest.raises(TurnTableError, match="needs column"):
        compute_advantages("gigpo", turns)
    with pytest.raises(ConfigError, match="gamma"):
        compute_advantages("rebn", turns, gamma=1.5)


def test_empty_table() -> None:
    empty = {"episode": [], "group": [], "turn": [], "reward": []}
    for name in ("grpo", "rloo", "rebn"):
        assert compute_advantages(name, empty).shape == (0,)


def test_from_episodes_uses_the_state_the_action_was_taken_in() -> None:
    import turngym
    from turngym.agents import OracleAgent, RandomAgent
    from turngym.rollout import run_episodes

    eps = run_episodes(lambda: turngym.make("turngym/Math-v0", max_steps=2), OracleAgent(), [0, 1], env_id="m")
    eps += run_episodes(lambda: turngym.make("turngym/Math-v0", max_steps=2), RandomAgent(seed=0), [0, 1], env_id="r")
    for ep in eps:
        ep.group = str(ep.seed)
    t = TurnTable.from_episodes(eps)
    assert t.n_episodes == 4 and t.n_groups == 2
    assert t.n_rows == sum(len(e.turns) for e in eps)
    # The anchor is the state each action was taken in: the first turns of a group (oracle and
    # random agent alike) acted in the group's one initial state; the states after them differ.
    first = np.flatnonzero(t.turn == 0)
    assert len({(int(t.group[i]), int(t.state_before[i])) for i in first}) == 2
    prev = [x.prev_state_key for e in eps for x in e.turns]
    assert len(set(zip(t.state_before.tolist(), prev))) == len(set(prev)) == len(set(t.state_before.tolist()))
    adv = compute_advantages("gigpo", t)
    # In each group the oracle succeeded and the random agent (almost surely) did not.
    oracle_rows = np.concatenate([[e.success] * len(e.turns) for e in eps])
    assert adv[oracle_rows].min() > adv[~oracle_rows].max() - 1e-9 or not oracle_rows.any()


def test_rollout_table_columns_ride_along_and_state_after_is_not_the_anchor() -> None:
    turns = random_table(5)
    rollout_style = dict(turns, state_after=["after"] * len(turns["state_before"]))
    rollout_style["signal/progress"] = [0.0] * len(turns["episode"])
    rollout_style["terminated"] = [False] * len(turns["episode"])
    np.testing.assert_array_equal(compute_advantages("gigpo", rollout_style), compute_advantages("gigpo", turns))
    # the anchor is state_before: the same table anchored on another state gives other advantages
    moved = dict(turns, state_before=[f"{s}-{t}" for s, t in zip(turns["state_before"], turns["turn"])])
    assert not np.allclose(compute_advantages("gigpo", moved), compute_advantages("gigpo", turns))


@pytest.mark.parametrize("name", ["state_key", "prev_state_key"])
def test_an_ambiguous_state_column_is_refused_with_the_right_name(name: str) -> None:
    """A table built by hand from ``info["state_key"]`` (the state *after* each step) must not
    silently become GiGPO's anchor: the error names ``state_before`` and ``state_after``."""
    turns = random_table(2)
    hand_built = {k: v for k, v in turns.items() if k != "state_before"} | {name: turns["state_before"]}
    with pytest.raises(TurnTableError, match="'state_before'.*'state_after'"):
        compute_advantages("gigpo", hand_built)
    with pytest.raises(TurnTableError, match="state_before"):
        TurnTable(hand_built)


def test_rollout_turn_tables_feed_every_estimator() -> None:
    """turngym.rollout.to_turn_table output (groups and trees) goes straight in."""
    import turngym
    from turngym.agents import RandomAgent
    from turngym.rollout import run_episodes, run_tree, to_turn_table

    make = lambda: turngym.make("turngym/Math-v0", max_steps=2, max_turns=4)  # noqa: E731
    chains = to_turn_table(run_episodes(make, RandomAgent(seed=0), [0, 1], group_size=3))
    tree = to_turn_table(run_tree(make, RandomAgent(seed=1), [0, 1], branching=(2, 2)).episodes)
    for name in ("grpo", "rloo", "rebn", "gigpo", "gae_grouped", "tree", "turn_grpo"):
        for table in (chains, tree):
            adv = compute_advantages(name, table)
            assert adv.shape == (len(table["episode"]),) and np.isfinite(adv).all()
            ref_cols = {k: table[k].tolist() for k in ("episode", "group", "turn", "reward", "node", "parent")}
            ref_cols["state_before"] = table["state_before"].tolist()
            np.testing.assert_allclose(adv, ref.REFERENCE[name](ref_cols), atol=1e-9)


def test_string_ids_factorize_in_first_appearance_order_and_survive_hash_collisions():
    from turngym.trainers.advantages._ids import factorize as _factorize

    ids = np.array(["ep-b", "ep-a", "ep-b", "ep-c", "ep-a"], dtype=object)
    assert _factorize(ids, "episode").tolist() == [0, 1, 0, 2, 1]
    assert _factorize(np.array(["x", "y", "x"]), "episode").tolist() == [0, 1, 0]  # numpy str dtype too

    class Colliding(str):  # every id hashes alike: codes must still separate them
        def __hash__(self) -> int:
            return 7

    collide = np.array([Colliding("a"), Colliding("b"), Colliding("a")], dtype=object)
    assert _factorize(collide, "group").tolist() == [0, 1, 0]


@pytest.mark.parametrize("spread", [4, 32])
def test_dense_int_codes_rank_values_on_dense_and_sparse_tables(spread: int) -> None:
    """Every way of ranking ints (a running sum over a dense table, packed popcounts over a
    sparse one as for scattered object addresses, radix passes over 16-bit digits for wide
    ranges, a comparison sort past 2**48) equals a sort's, for values on every bit of a byte."""
    from turngym.trainers.advantages._ids import _dense_ints

    rng = np.random.default_rng(spread)
    for size, n in ((10**6, 3000), (2**40, 3000), (2**61, 3000), (20_000, 3000), (5000, 5000), (1, 1)):
        values = rng.integers(-(size // 2), size - size // 2, n) * 3 + 7
        values[: min(n, 16)] = values[0] + np.arange(min(n, 16))  # runs of neighbours: every bit position of a byte
        want = np.unique(values, return_inverse=True)[1].reshape(-1)
        np.testing.assert_array_equal(_dense_ints(values, spread=spread), want)


def test_gigpo_with_string_ids_equals_gigpo_with_int_ids():
    rng = np.random.default_rng(3)
    n = 400
    episode = rng.integers(0, 40, n)
    cols = {
        "episode": np.sort(episode),
        "group": np.sort(episode) // 8,
        "turn": np.zeros(n, np.int64),
        "reward": rng.random(n),
        "state_before": rng.integers(0, 30, n),
    }
    cols["turn"] = np.concatenate([np.arange(c) for c in np.bincount(cols["episode"]) if c])
    as_str = {k: (np.array([f"id-{v}" for v in cols[k].tolist()], dtype=object) if k in ("episode", "group", "state_before") else v)
              for k, v in cols.items()}
    np.testing.assert_allclose(compute_advantages("gigpo", as_str), compute_advantages("gigpo", cols))


def test_a_registered_estimator_declares_a_new_input_column() -> None:
    """``requires`` makes tables accept the new column and refuses tables that lack it."""
    from turngym.trainers.advantages import ESTIMATORS, estimator_inputs, register_estimator
    from turngym.trainers.advantages.table import _DECLARED

    def difficulty_weighted(turns, *, scale: float = 1.0):  # noqa: ANN001, ANN202
        table = turns if isinstance(turns, TurnTable) else TurnTable(turns)
        return scale * table.column("difficulty") * table.reward

    turns = {"episode": [0, 1], "group": [0, 0], "turn": [0, 0], "reward": [1.0, 2.0]}
    with pytest.raises(TurnTableError, match="unknown column 'difficulty'"):
        TurnTable(dict(turns, difficulty=[0.5, 2.0]))
    register_estimator("difficulty_weighted", difficulty_weighted, requires=("difficulty",))
    try:
        assert estimator_inputs("difficulty_weighted") == ("difficulty",)
        assert compute_advantages("difficulty_weighted", dict(turns, difficulty=[0.5, 2.0]), scale=2.0).tolist() == [1.0, 8.0]
        with pytest.raises(TurnTableError, match=r"needs column\(s\) \['difficulty'\]"):
            compute_advantages("difficulty_weighted", turns)
        with pytest.raises(ConfigError, match="ambiguous"):
            register_estimator("bad", difficulty_weighted, requires=("state_key",))
    finally:
        ESTIMATORS.pop("difficulty_weighted")
        _DECLARED.discard("difficulty")
    assert estimator_inputs("gigpo") == ("state_before",) and estimator_inputs("papo") == ("process",)
    assert estimator_inputs("igpo") == ("info_gain",) and estimator_inputs("gae") == ("value",) and estimator_inputs("grpo") == ()


@pytest.mark.parametrize("seed", range(6))
def test_object_ids_group_like_a_dict_whether_rows_share_objects_or_not(seed: int) -> None:
    """Rows holding the same str object, equal strings in fresh objects, other hashables and
    colliding hashes: codes group exactly as a dict would, ordered or not."""
    from turngym.trainers.advantages._ids import factorize

    class Colliding(str):
        def __hash__(self) -> int:
            return 11

    rng = np.random.default_rng(seed)
    pool = [f"id-{i}" for i in range(int(rng.integers(1, 40)))]
    values = []
    for _ in range(int(rng.integers(1, 400))):
        v = pool[int(rng.integers(len(pool)))]
        kind = rng.random()
        values.append(v if kind < 0.5 else "".join(list(v)) if kind < 0.8 else (v, 1) if kind < 0.9 else Colliding(v[-1]))
    arr = np.empty(len(values), object)
    arr[:] = values
    seen: dict = {}
    want = [seen.setdefault(v, len(seen)) for v in values]
    assert factorize(arr, "x").tolist() == want
    loose = factorize(arr, "x", ordered=False)
    assert len({(a, b) for a, b in zip(loose.tolist(), want)}) == len(set(want)) == len(set(loose.tolist()))
