"""Same numbers everywhere: on the same episodes, the verl path, the TRL path and turngym's own
trainer put the same advantage on every action token.

The episodes are real tiny-model rollouts on Math (groups of 3, multi-turn). turngym's trainer
rule is written out from its public pieces (rollout turn table -> compute_advantages -> each
turn's value on its span of the rendered episode, ``trainer.batch.token_advantages``); the verl
path runs the registered estimator (needs verl: its own venv), the TRL path runs
``TurnCreditGRPOTrainer``'s replacement of ``out["advantages"]`` (needs TRL).
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from turngym.agents.render import render_episode
from turngym.integrations.episodes import episode_sequence, episode_to_json
from turngym.rollout.table import to_turn_table
from turngym.trainers.advantages import compute_advantages
from turngym.trainers.batch import token_advantages

ALGOS = ("gigpo", "turn_grpo", "grpo", "tree")


@pytest.fixture(scope="module")
def episodes():
    import turngym
    from turngym.agents.hf import HFPolicy
    from turngym.rollout import run_episodes

    policy = HFPolicy.from_pretrained("tiny", device="cpu", temperature=1.0, seed=1, max_new_tokens=8)
    eps = run_episodes(lambda: turngym.make("turngym/Math-v0", max_turns=2), policy, [11, 12], group_size=3, env_id="turngym/Math-v0")
    assert max(len(e.turns) for e in eps) >= 2
    # distinct rewards inside a group, so the check cannot pass on all-zero advantages
    eps[0].turns[-1].reward += 1.0
    eps[0].outcome["success"] = True
    return eps, policy.renderer


def _trainer_rule(name, eps, renderer):
    """turngym's trainer: per-turn advantages, each on its turn's tokens of the rendered episode."""
    adv = compute_advantages(name, to_turn_table(eps))
    out, row = [], 0
    for ep in eps:
        sample = render_episode(ep, renderer)
        tok = token_advantages(sample, adv[row : row + len(ep.turns)])
        row += len(ep.turns)
        cut = sample.turn_spans[0][0]
        out.append(np.asarray(tok[cut:]))  # in response coordinates, as the engines hold it
    return out


def _pad(rows, width):
    return np.stack([np.pad(r, (0, width - len(r))) for r in rows])


@pytest.mark.parametrize("name", ALGOS)
def test_verl_trl_and_turngym_trainer_agree(episodes, name):
    eps, renderer = episodes
    seqs = [episode_sequence(ep, renderer) for ep in eps]
    width = max(len(s.response_ids) for s in seqs) + 5
    expected = _pad(_trainer_rule(name, eps, renderer), width)
    assert np.abs(expected).sum() > 0
    checked = 0
    if importlib.util.find_spec("verl") is not None and importlib.util.find_spec("cachetools") is not None:
        from turngym.integrations.verl import batch_advantages

        got = batch_advantages(
            name,
            [episode_to_json(e) for e in eps],
            [json.dumps(s.turn_spans) for s in seqs],
            width,
            np.array([e.group for e in eps], dtype=object),
        )
        np.testing.assert_allclose(got, expected, atol=1e-9)
        checked += 1
    if importlib.util.find_spec("trl") is not None:
        from turngym.integrations.episodes import sequence_advantages, turn_advantages

        # what TurnCreditGRPOTrainer._generate_and_score_completions puts in out["advantages"]
        per_turn = turn_advantages(name, [type(e).from_dict(json.loads(episode_to_json(e))) for e in eps])
        got = np.stack([sequence_advantages(a, s.turn_spans, width) for a, s in zip(per_turn, seqs)])
        np.testing.assert_allclose(got, expected, atol=1e-9)
        checked += 1
    if checked == 0:
        pytest.skip("neither verl nor TRL is installed")
