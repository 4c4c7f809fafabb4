"""Tree rollouts and per-turn branching: shared prefixes, node/parent ids, snapshot continuations."""

from __future__ import annotations

from collections import defaultdict

import pytest

import turngym
from turngym.agents import RandomAgent
from turngym.agents.hf import HFPolicy
from turngym.core.errors import ConfigError
from turngym.rollout import Episode, run_tree


def make_env():
    return turngym.make("turngym/Math-v0", min_steps=3, max_steps=4, max_turns=5)


def turn_fact(t):
    return (t.action, t.observation, t.reward, t.terminated, t.truncated, t.state_key, tuple(sorted(t.signals.items())))


def check_tree(episodes: list[Episode]) -> None:
    """Every node's prefix equals its parent's path; node ids are consistent across leaves."""
    paths: dict[tuple[str, int], list] = {}
    children: dict[tuple[str, int], set[int]] = defaultdict(set)
    for ep in episodes:
        for i, t in enumerate(ep.turns):
            assert t.index == i
            assert t.parent == (ep.turns[i - 1].node if i else -1)
            path = [turn_fact(x) for x in ep.turns[: i + 1]]
            key = (ep.group, t.node)
            assert paths.setdefault(key, path) == path  # same node ⇒ same history, in every leaf
            if i:
                assert paths[(ep.group, t.parent)] == path[:-1]  # prefix = the parent's path
            children[(ep.group, t.parent)].add(t.node)
    return children


def test_full_tree_shape_and_prefixes() -> None:
    tree = run_tree(make_env, RandomAgent(seed=1), [0, 1, 2], branching=(2, 3))
    children = check_tree(tree.episodes)
    for group in {ep.group for ep in tree.episodes}:
        roots = children[(group, -1)]
        assert len(roots) == 2
        for r in roots:  # a depth-1 node that did not end the episode has 3 children
            ended = any(ep.turns[0].node == r and len(ep.turns) == 1 for ep in tree.episodes if ep.group == group)
            assert len(children[(group, r)]) == (0 if ended else 3)
    assert all(ep.finished for ep in tree.episodes)
    assert len({ep.episode_id for ep in tree.episodes}) == len(tree.episodes)


def test_restoring_a_snapshot_gives_the_same_continuation() -> None:
    tree = run_tree(make_env, RandomAgent(seed=2), [4], branching=(2, 2), keep_snapshots=True)
    fresh = make_env()
    fresh.reset(seed=123)  # unrelated state, overwritten by restore
    checked = 0
    for ep in tree.episodes:
        for t in ep.turns:
            fresh.restore(tree.snapshots[(ep.group, t.parent)])
            obs, reward, term, trunc, info = fresh.step(t.action)
            assert (obs, reward, term, trunc, info["state_key"], info["signals"]) == (
                t.observation,
                t.reward,
                t.terminated,
                t.truncated,
                t.state_key,
                t.signals,
            )
            checked += 1
    assert checked >= 4


def test_per_turn_branching_shares_the_trunk() -> None:
    tree = run_tree(make_env, RandomAgent(seed=3), [7], branching=(1, 4))
    if len(tree.episodes) == 1:  # the trunk ended before turn 2: nothing to branch
        pytest.skip("seed ended at turn 1")
    assert len(tree.episodes) == 4
    trunk = {ep.turns[0].node for ep in tree.episodes}
    assert len(trunk) == 1
    assert len({ep.turns[1].node for ep in tree.episodes}) == 4
    assert {ep.turns[1].parent for ep in tree.episodes} == trunk


def test_model_tree_children_extend_the_parent_prompt() -> None:
    policy = HFPolicy.from_pretrained("tiny", max_new_tokens=6, seed=0)
    tree = run_tree(lambda: turngym.make("turngym/Math-v0", max_turns=3), policy, [0], branching=(2, 2))
    check_tree(tree.episodes)
    assert len(tree.episodes) == 4
    for ep in tree.episodes:
        for prev, t in zip(ep.turns, ep.turns[1:], strict=False):
            assert t.prompt_ids[: len(prev.prompt_ids) + len(prev.token_ids)] == prev.prompt_ids + prev.token_ids
    siblings = defaultdict(set)
    for ep in tree.episodes:
        siblings[ep.turns[0].parent].add(tuple(ep.turns[0].token_ids))
    assert len(siblings[-1]) == 2  # two different samples from the same prompt


def test_branching_is_validated() -> None:
    with pytest.raises(ConfigError, match="branching"):
        run_tree(make_env, RandomAgent(), [0], branching=(2, 0))
    with pytest.raises(ConfigError, match="max_leaves"):
        run_tree(make_env, RandomAgent(), [0], branching=(64, 64, 64))
