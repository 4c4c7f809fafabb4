"""Groups, history windows, the flat turn table and lossless JSONL round trips."""

from __future__ import annotations

import numpy as np
import pytest

import turngym
from turngym.agents import Action, OracleAgent, RandomAgent, render_episode, render_turns
from turngym.agents.hf import HFPolicy
from turngym.core.errors import ConfigError
from turngym.rollout import load_episodes, run_episodes, run_tree, save_episodes, summarize, to_turn_table


def make_env():
    return turngym.make("turngym/Math-v0", max_turns=6)


@pytest.fixture(scope="module")
def tiny() -> HFPolicy:
    return HFPolicy.from_pretrained("tiny", max_new_tokens=6, seed=0)


def test_groups_share_the_task_and_initial_state() -> None:
    eps = run_episodes(make_env, RandomAgent(seed=0), [10, 11, 12], group_size=4, batch_size=5)
    assert len(eps) == 12
    for g in range(3):
        members = eps[4 * g : 4 * g + 4]
        assert len({(e.group, e.task_id, e.initial_observation, e.turns[0].prev_state_key) for e in members}) == 1
        assert len({tuple(t.action for t in e.turns) for e in members}) > 1  # they differ by the policy only
    assert len({e.group for e in eps}) == 3 and len({e.episode_id for e in eps}) == 12


def test_same_seeds_same_episodes(tiny: HFPolicy) -> None:
    def short():
        return turngym.make("turngym/Math-v0", max_turns=3)

    a = run_episodes(short, HFPolicy(tiny.model, tiny.tokenizer, max_new_tokens=6, seed=5), [1], group_size=2)
    b = run_episodes(short, HFPolicy(tiny.model, tiny.tokenizer, max_new_tokens=6, seed=5), [1], group_size=2)
    assert [e.to_dict() for e in a] == [e.to_dict() for e in b]


def test_history_window_limits_the_prompt() -> None:
    seen = []

    class Recorder:  # test double: records what the policy is shown, answers wrongly
        name = "recorder"

        def act(self, batch):
            seen.extend(batch)
            return [Action("<calc>1 + 1</calc>") for _ in batch]

    run_episodes(make_env, Recorder(), [0], history=2)
    assert [sum(m["role"] == "assistant" for m in inp.messages) for inp in seen] == [0, 1, 2, 2, 2, 2]
    assert all(inp.messages[1]["content"] == seen[0].messages[1]["content"] for inp in seen)  # task kept
    assert seen[0].stop == ("</calc>", "</answer>")
    with pytest.raises(ConfigError, match="history"):
        run_episodes(make_env, Recorder(), [0], history=0)


def test_turn_table_columns(tiny: HFPolicy) -> None:
    eps = run_episodes(lambda: turngym.make("turngym/Math-v0", max_turns=3), tiny, [0, 1], group_size=2)
    table = to_turn_table(eps)
    n = sum(len(e.turns) for e in eps)
    assert {len(v) for v in table.values()} == {n}
    assert table["group"].tolist() == [i // 2 for i, e in enumerate(eps) for _ in e.turns]
    assert table["turn"].tolist() == [t.index for e in eps for t in e.turns]
    assert table["reward"].tolist() == [t.reward for e in eps for t in e.turns]
    assert table["num_tokens"].tolist() == [len(t.token_ids) for e in eps for t in e.turns]
    for e_idx, ep in enumerate(eps):
        rows = np.flatnonzero(table["episode"] == e_idx)
        assert table["parent"][rows[0]] == -1 and (table["parent"][rows[1:]] == table["node"][rows[:-1]]).all()
        assert table["last"][rows].tolist() == [False] * (len(rows) - 1) + [True]
        np.testing.assert_allclose(table["episode_return"][rows], ep.total_reward)
    assert len(set(table["node"].tolist())) == n  # linear episodes never share nodes
    assert "signal/progress" in table and "state_key" not in table and "prev_state_key" not in table
    # states are named by when they hold: before the turn's action, and after it
    assert table["state_before"].tolist() == [t.prev_state_key for e in eps for t in e.turns]
    assert table["state_after"].tolist() == [t.state_key for e in eps for t in e.turns]
    not_last = ~table["last"]
    assert (table["state_before"][1:][not_last[:-1]] == table["state_after"][:-1][not_last[:-1]]).all()
    shaped = [[0.5 * (t.index + 1) for t in e.turns] for e in eps]  # rewards override: e.g. shaped rewards
    assert to_turn_table(eps, rewards=shaped)["reward"].tolist() == [r for rs in shaped for r in rs]
    with pytest.raises(ConfigError, match="rewards for"):
        to_turn_table(eps, rewards=[[0.0]] * len(eps))

    samples = [render_episode(ep, tiny.tokenizer) for ep in eps]
    spans = to_turn_table(eps, samples=samples)
    for row in range(n):
        s, a, b = spans["sample"][row], spans["token_start"][row], spans["token_end"][row]
        assert b - a == table["num_tokens"][row] and all(samples[s].loss_mask[a:b])
    flat = [s for ep in eps for s in render_turns(ep, tiny.tokenizer)]
    per_turn = to_turn_table(eps, samples=flat)
    assert per_turn["sample"].tolist() == list(range(n))


def test_tree_table_shares_nodes() -> None:
    tree = run_tree(make_env, RandomAgent(seed=0), [0], branching=(3,))
    table = to_turn_table(tree.episodes)
    first = table["node"][table["turn"] == 0]
    assert len(set(first.tolist())) == 3 and (table["parent"][table["turn"] == 0] == -1).all()
    deep = run_tree(make_env, RandomAgent(seed=0), [0], branching=(1, 2))
    t2 = to_turn_table(deep.episodes)
    if len(deep.episodes) == 2:
        assert len(set(t2["node"][t2["turn"] == 0].tolist())) == 1  # the shared first turn


def test_infra_episodes_can_be_dropped() -> None:
    class Flaky:  # test double: the "server" fails for the second env of each batch
        name = "flaky"

        def act(self, batch):
            return [
                Action("", meta={"infra_error": "down"}) if i == 1 else Action("<answer>0</answer>")
                for i in range(len(batch))
            ]

    eps = run_episodes(make_env, Flaky(), [0, 1])
    assert [e.infra_error for e in eps] == [None, "policy: down"]
    assert to_turn_table(eps)["infra_error"].tolist() == [False, True]
    assert len(to_turn_table(eps, drop_infra=True)["episode"]) == 1
    assert summarize(eps).infra_errors == 1


def test_jsonl_round_trip_is_lossless(tmp_path, tiny: HFPolicy) -> None:
    eps = run_episodes(make_env, tiny, [3], group_size=2) + run_episodes(make_env, OracleAgent(), [4])
    eps += run_tree(make_env, RandomAgent(seed=1), [5], branching=(2,)).episodes
    path = tmp_path / "eps.jsonl"
    assert save_episodes(eps, path) == len(eps)
    back = list(load_episodes(path))
    assert [e.to_dict() for e in back] == [e.to_dict() for e in eps]
    assert back[0].turns[0].logprobs == eps[0].turns[0].logprobs  # floats bit-exact
    for name in ("input_ids", "loss_mask", "logprobs"):
        assert getattr(render_episode(back[0], tiny.tokenizer), name) == getattr(
            render_episode(eps[0], tiny.tokenizer), name
        )
