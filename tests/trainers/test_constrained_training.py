"""Training on constrained rollouts: the update renormalizes over the tokens decoding allowed.

A constrained action's recorded log-probs are those of the distribution over the env's valid
actions; a trainer that recomputed free log-probs would see ratios exp(free − constrained) < 1 on
every token and clip or push the wrong way. These tests pin that the recomputation matches the
rollout exactly, end to end (rollout → Turn → rendered sample → batch → log-probs → ratio).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tiny_run import tiny_config

import turngym
from turngym.agents.hf import HFPolicy
from turngym.agents.render import render_episode, render_turns
from turngym.core.errors import ConfigError
from turngym.rollout import run_episodes
from turngym.rollout.types import Episode

HOUSEHOLD = {"max_turns": 4, "difficulties": (1,)}


@pytest.fixture(scope="module")
def episodes() -> tuple[HFPolicy, list[Episode]]:
    policy = HFPolicy.from_pretrained("tiny", temperature=1.0, seed=3, constrain_choices=True)
    eps = run_episodes(_household, policy, [0, 1], batch_size=8)
    return policy, eps


def _household() -> turngym.Env:
    env = turngym.make("turngym/Household-v0", **HOUSEHOLD)
    env.unwrapped.system_prompt = ""  # as the trainer runs the tiny model: it has no use for instructions
    return env


def _batch_logprobs(policy: HFPolicy, samples: list, *, constrained: bool) -> list[np.ndarray]:
    """The trainer's recomputed log-probs of each sample's policy tokens (free ones if not ``constrained``)."""
    import torch

    from turngym.trainers.batch import collate, token_logprobs

    batch = collate(samples, None, policy.pad_id)
    if not constrained:
        batch.allowed = None
    with torch.no_grad():
        logp = token_logprobs(policy.model, batch).numpy()
    mask = batch.mask_next.numpy() > 0
    return [logp[i][mask[i]] for i in range(len(samples))]


def test_constrained_rollouts_record_the_allowed_sets_and_stay_valid(episodes) -> None:
    _, eps = episodes
    turns = [t for ep in eps for t in ep.turns]
    assert turns and all(t.action_valid for t in turns)
    for t in turns:
        assert t.allowed_token_ids is not None and len(t.allowed_token_ids) == len(t.token_ids)
        assert all(tok in allowed for tok, allowed in zip(t.token_ids, t.allowed_token_ids, strict=True))
    assert any(len(a) > 1 for t in turns for a in t.allowed_token_ids)  # real choices, not one forced path
    again = Episode.from_dict(json.loads(json.dumps(eps[0].to_dict())))  # saved episodes keep the sets
    assert [t.allowed_token_ids for t in again.turns] == [t.allowed_token_ids for t in eps[0].turns]


@pytest.mark.parametrize("per_turn", [False, True])
def test_recomputed_logprobs_equal_the_rollouts_only_when_renormalized(episodes, per_turn: bool) -> None:
    policy, eps = episodes
    samples = [s for ep in eps for s in render_turns(ep, policy.renderer)] if per_turn else [render_episode(ep, policy.renderer) for ep in eps]
    recorded = [np.asarray(s.logprobs)[np.asarray(s.loss_mask) > 0] for s in samples]
    constrained = _batch_logprobs(policy, samples, constrained=True)
    free = _batch_logprobs(policy, samples, constrained=False)
    for rec, con, fr in zip(recorded, constrained, free, strict=True):
        np.testing.assert_allclose(con, rec, atol=2e-4)
        assert np.all(fr <= con + 1e-5)  # a subset's renormalization never lowers a token's log-prob
    assert np.mean(np.concatenate(constrained) - np.concatenate(free)) > 0.1  # and here it matters


def test_the_full_softmax_path_renormalizes_the_same_way(episodes, monkeypatch) -> None:
    from turngym.trainers import batch as batch_mod

    policy, eps = episodes
    samples = [render_episode(ep, policy.renderer) for ep in eps]
    fast = _batch_logprobs(policy, samples, constrained=True)
    monkeypatch.setattr(batch_mod, "_plain_head", lambda model: False)
    full = _batch_logprobs(policy, samples, constrained=True)
    for a, b in zip(fast, full, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_a_constrained_training_step_is_on_policy(tmp_path: Path) -> None:
    from turngym.trainers import Trainer

    cfg = tiny_config(env_id="turngym/Household-v0", env_kwargs=HOUSEHOLD, constrain_choices=True, warmup_steps=0,
                      steps=1, ppo_epochs=1, minibatches=1, eval_episodes=0, algo="gigpo")
    Trainer(cfg, tmp_path, progress=False, log=None).run()
    [row] = [r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()) if r.get("phase") == "rl"]
    assert row["invalid_rate"] == 0.0
    # one minibatch, one epoch: the ratio is taken before the update, so it is 1 iff the
    # update's log-probs are the distribution the rollout sampled from (free ones give < 1)
    assert row["ratio"] == pytest.approx(1.0, abs=1e-3)
    assert row["clip_frac"] == 0.0


def test_constrained_training_needs_the_hf_engine() -> None:
    with pytest.raises(ConfigError, match="hf engine"):
        tiny_config(constrain_choices=True, engine="vllm")
