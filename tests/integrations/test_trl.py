"""TRL's GRPOTrainer trains the embedded tiny model on a turngym env, multi-turn, with turngym credit.

Runs on CPU with the real TRL (skipped when it is not installed).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("trl", reason="TRL is an optional extra: pip install 'turngym[trl]'")
pytest.importorskip("datasets")

from turngym.core.errors import ConfigError  # noqa: E402
from turngym.integrations.episodes import sequence_advantages, turn_advantages  # noqa: E402
from turngym.integrations.trl import (  # noqa: E402
    TurngymRollout,
    episode_return,
    episode_success,
    parse_task_prompt,
    task_prompt,
    trl_dataset,
)


def _trainer(tmp_path, algo: str = "gigpo", steps: int = 1):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from turngym.agents.tiny import build_tiny_model
    from turngym.integrations.trl import TurnCreditGRPOTrainer

    torch.manual_seed(0)
    path = build_tiny_model()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_steps=steps,
        learning_rate=5e-3,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=0,
        # the rollout_func returns whole episodes (TRL does not cut them); this only scales the loss
        max_completion_length=256,
        dataloader_num_workers=0,
    )
    # one step of 2 groups x 2 episodes, 2 turns of <= 8 tokens: enough to move parameters and be multi-turn
    rollout = TurngymRollout(max_new_tokens=8, env_kwargs={"max_turns": 2})
    trainer = TurnCreditGRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=[episode_return, episode_success],
        args=args,
        train_dataset=trl_dataset("turngym/Math-v0", range(4)),
        rollout_func=rollout,
        turngym_algo=algo,
    )
    return trainer, rollout, model


def test_task_prompts_round_trip_and_bad_prompts_say_the_fix():
    assert parse_task_prompt(task_prompt("turngym/Shop-v0", 12)) == ("turngym/Shop-v0", 12)
    with pytest.raises(ConfigError, match="trl_dataset"):
        parse_task_prompt([{"role": "user", "content": "hi"}])


def test_grpo_trainer_trains_the_tiny_model_multi_turn_with_turn_credit(tmp_path):
    trainer, rollout, model = _trainer(tmp_path)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    seen: list = []
    original = rollout.__call__

    def spy(prompts, tr):
        out = original(prompts, tr)
        # the pitfall: a policy that switched to eval mode must hand the model back in train mode
        assert tr.model.training, "the rollout left the model in eval mode"
        seen.append((out, list(rollout.last_episodes)))
        return out

    trainer.rollout_func = spy
    trainer.train()

    moved = sum(float((p.detach() - before[k]).abs().sum()) for k, p in model.named_parameters())
    assert moved > 0, "no parameter moved"
    assert seen, "the rollout function was never called"
    eps = [ep for _, batch in seen for ep in batch]
    assert max(len(ep.turns) for ep in eps) >= 2, "episodes were single-turn"
    out, batch = seen[-1]
    for ep, ids, mask, lps in zip(batch, out["completion_ids"], out["env_mask"], out["logprobs"]):
        # token-faithful: each action's generated ids sit verbatim under mask 1, in order
        gen = [i for t in ep.turns for i in t.token_ids]
        assert [i for i, m in zip(ids, mask) if m] == gen
        assert [lp for lp, m in zip(lps, mask) if m] == pytest.approx([x for t in ep.turns for x in t.logprobs])
        assert 0 in mask, "observations must be in the completion under env_mask 0"
    # the (B, T) advantages on the last batch are turngym's per-turn advantages on each turn's tokens
    ref = turn_advantages("gigpo", batch)
    for a, b in zip(trainer.last_turn_advantages, ref):
        np.testing.assert_allclose(a, b)


def test_reward_functions_score_infra_failures_none():
    from turngym.integrations.episodes import episode_to_json
    from turngym.rollout.types import Episode, Turn

    ok = Episode("g/0", "e", "t", 0, "obs", group="g")
    ok.turns = [Turn(0, "a", "o", 0.5, False, False, {}, "k1", "k0"), Turn(1, "b", "o", 1.0, True, False, {}, "k2", "k1")]
    ok.outcome = {"success": True}
    bad = Episode("g/1", "e", "t", 0, "obs", group="g")
    bad.turns = [Turn(0, "a", "", 0.0, True, False, {}, "k0", "k0", infra_error="sandbox died")]
    eps = [episode_to_json(ok), episode_to_json(bad)]
    assert episode_return([None, None], eps) == [1.5, None]
    assert episode_success([None, None], eps) == [1.0, None]


def test_sequence_advantages_put_each_turn_on_its_own_span():
    adv = sequence_advantages([0.5, -1.0], [(1, 3), (5, 6)], 8)
    assert adv.tolist() == [0, 0.5, 0.5, 0, 0, -1.0, 0, 0]
