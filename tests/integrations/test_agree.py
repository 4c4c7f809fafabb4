"""Same numbers everywhere: on the same episodes, the verl path, the TRL path and turngym's own
trainer put the same advantage on every action token.

The episodes are real tiny-model rollouts on Math (groups of 3, multi-turn). turngym's trainer
rule is written out from its public pieces, in the trainer's order: rewards shaped by the env's
reward spec under ``TrainConfig``'s defaults -> rollout turn table -> declared columns filled by
the providers -> compute_advantages -> each turn's value on its span of the rendered episode
(``trainer.batch.token_advantages``). The verl path runs the registered estimator (needs verl:
its own venv), the TRL path runs ``TurnCreditGRPOTrainer``'s replacement of
``out["advantages"]`` (needs TRL).
"""

from __future__ import annotations

import importlib.util
import json
from types import SimpleNamespace

import numpy as np
import pytest

from turngym.agents.render import render_episode
from turngym.core.errors import ConfigError
from turngym.integrations.episodes import CreditSettings, episode_sequence, episode_to_json, turn_advantages
from turngym.rewards import RewardShaper
from turngym.rollout.table import to_turn_table
from turngym.trainers.advantages import compute_advantages
from turngym.trainers.batch import token_advantages
from turngym.trainers.config import TrainConfig
from turngym.trainers.providers import fill_inputs

ALGOS = ("gigpo", "turn_grpo", "grpo", "tree", "papo")
HAVE_VERL = importlib.util.find_spec("verl") is not None and importlib.util.find_spec("cachetools") is not None


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
    # a process signal fires (as a real solver's intermediate step would), so shaping matters
    eps[1].turns[0].signals["new_intermediate"] = 1.0
    return eps, policy


def _trainer_table(name, eps, model=None, tokenizer=None):
    """turngym's trainer up to the advantages: shaped rewards, then the declared inputs from the providers."""
    import turngym

    cfg = TrainConfig()
    spec = turngym.make("turngym/Math-v0").reward_spec
    shaper = RewardShaper(spec, gamma=1.0, weights=cfg.reward_weights, cap=cfg.shaping_cap)
    process = RewardShaper(spec, gamma=1.0, weights=cfg.process_weights or {}, cap=cfg.shaping_cap)
    table = to_turn_table(eps, rewards=[shaper.shape_episode(ep).total for ep in eps])
    fill_inputs(name, eps, table, SimpleNamespace(process_shaper=process, model=model, tokenizer=tokenizer))
    return table


def _trainer_rule(name, eps, renderer):
    """turngym's trainer: per-turn advantages, each on its turn's tokens of the rendered episode."""
    adv = compute_advantages(name, _trainer_table(name, eps))
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
    eps, policy = episodes
    renderer = policy.renderer
    seqs = [episode_sequence(ep, renderer) for ep in eps]
    width = max(len(s.response_ids) for s in seqs) + 5
    expected = _pad(_trainer_rule(name, eps, renderer), width)
    assert np.abs(expected).sum() > 0
    checked = 0
    if HAVE_VERL:
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
        from turngym.integrations.episodes import sequence_advantages

        # what TurnCreditGRPOTrainer._generate_and_score_completions puts in out["advantages"]
        per_turn = turn_advantages(name, [type(e).from_dict(json.loads(episode_to_json(e))) for e in eps])
        got = np.stack([sequence_advantages(a, s.turn_spans, width) for a, s in zip(per_turn, seqs)])
        np.testing.assert_allclose(got, expected, atol=1e-9)
        checked += 1
    if checked == 0:
        pytest.skip("neither verl nor TRL is installed")


def test_the_shared_credit_defaults_are_turngym_trains():
    cfg, credit = TrainConfig(), CreditSettings()
    assert (dict(credit.reward_weights), credit.shaping_cap, credit.process_weights) == (
        cfg.reward_weights,
        cfg.shaping_cap,
        cfg.process_weights,
    )


def test_shaping_is_part_of_the_agreement(episodes):
    """Unshaped env rewards give other advantages on these episodes: the check above is not vacuous."""
    eps, _ = episodes
    raw = compute_advantages("gigpo", to_turn_table(eps))
    shaped = np.concatenate(turn_advantages("gigpo", eps))
    assert not np.allclose(raw, shaped)


def test_igpo_scores_with_the_policy_where_the_engine_has_it_and_is_refused_on_verl(episodes):
    """IGPO's info_gain is filled by turngym's provider with the engine's model (TRL hands it over);
    verl computes advantages on its driver, without the policy, so it is refused with the reason."""
    eps, policy = episodes
    model = policy.model.train()  # an engine trains; the provider scores in eval mode and must hand it back
    try:
        got = turn_advantages("igpo", eps, credit=CreditSettings(model=model, tokenizer=policy.tokenizer))
        assert model.training, "the provider's eval mode must not leak into the engine"
    finally:
        model.eval()
    host_adv = compute_advantages("igpo", _trainer_table("igpo", eps, model, policy.tokenizer))
    np.testing.assert_allclose(np.concatenate(got), host_adv, atol=1e-9)
    with pytest.raises(ConfigError, match="'model'.*this engine"):
        turn_advantages("igpo", eps)
    if HAVE_VERL:
        from turngym.integrations.verl import batch_advantages

        seqs = [episode_sequence(ep, policy.renderer) for ep in eps]
        with pytest.raises(ConfigError, match="verl"):
            batch_advantages("igpo", [episode_to_json(e) for e in eps], [json.dumps(s.turn_spans) for s in seqs], 64)


def test_gae_without_turngyms_critic_is_refused_naming_it(episodes):
    eps, _ = episodes
    with pytest.raises(ConfigError, match="'critic'"):
        turn_advantages("gae", eps, engine="TRL")


@pytest.mark.skipif(not HAVE_VERL, reason="verl is an optional extra in its own venv: scripts/ci_verl.sh")
def test_verl_estimators_take_the_shaping_settings_from_the_environment(episodes, monkeypatch):
    import torch
    from verl.trainer.ppo import core_algos

    from turngym.integrations.episodes import sequence_advantages
    from turngym.integrations.verl import CREDIT_ENV

    eps, policy = episodes
    seqs = [episode_sequence(ep, policy.renderer) for ep in eps]
    width = max(len(s.response_ids) for s in seqs)
    batch = {"turngym_episode": [episode_to_json(e) for e in eps], "turngym_spans": [json.dumps(s.turn_spans) for s in seqs]}
    fn = core_algos.get_adv_estimator_fn("turngym_gigpo")
    credit = CreditSettings(reward_weights={"new_intermediate": 2.0}, shaping_cap=5.0)
    monkeypatch.setenv(CREDIT_ENV, json.dumps({"reward_weights": {"new_intermediate": 2.0}, "shaping_cap": 5.0}))
    ones = torch.ones(len(eps), width)
    got, _ = fn(token_level_rewards=ones, response_mask=ones, index=np.array([e.group for e in eps]), non_tensor_batch=batch)
    per_turn = turn_advantages("gigpo", eps, credit=credit)
    expected = np.stack([sequence_advantages(a, s.turn_spans, width) for a, s in zip(per_turn, seqs)])
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-6)
    assert not np.allclose(per_turn[1], turn_advantages("gigpo", eps)[1]), "the settings must change the advantages"
    monkeypatch.setenv(CREDIT_ENV, '{"model": "x"}')
    with pytest.raises(ConfigError, match=CREDIT_ENV):
        fn(token_level_rewards=ones, response_mask=ones, index=None, non_tensor_batch=batch)
