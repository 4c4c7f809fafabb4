"""The training loop with the embedded tiny model: smoke, parameters change, exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_run import metric_rows, tiny_config  # noqa: E402

from turngym.core.errors import ConfigError  # noqa: E402
from turngym.trainers import TrainConfig, Trainer  # noqa: E402
from turngym.trainers.batch import collate, token_advantages  # noqa: E402
from turngym.trainers.losses import clipped_pg_loss, kl_penalty  # noqa: E402


def _tiny(**kw) -> TrainConfig:
    return tiny_config(**{"steps": 3, "micro_batch_size": 3, **kw})


def _weights(out: Path) -> dict:
    """The trainable weights of the run's last committed checkpoint."""
    state = json.loads((out / "state.json").read_text())
    return torch.load(out / state["checkpoint"] / "trainable.pt")


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="Did you mean"):
        TrainConfig(algo="gipgo")
    with pytest.raises(ConfigError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ConfigError, match="critic"):
        TrainConfig(algo="gae", critic="none")  # PPO with GAE needs the learned critic
    with pytest.raises(ConfigError, match="unknown config field"):
        TrainConfig.from_dict({"stpes": 3})


def test_losses() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.25]]))
    adv = torch.tensor([[1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0]])
    loss, diag = clipped_pg_loss(logp, logp.detach(), adv, mask)
    assert loss.item() == pytest.approx(0.0) and diag["ratio"] == pytest.approx(1.0)
    # The ratio is clipped: a big positive ratio with a positive advantage stops at 1 + ε.
    loss, diag = clipped_pg_loss(logp + 1.0, logp, torch.ones_like(adv), mask, clip_high=0.28)
    assert loss.item() == pytest.approx(-1.28) and diag["clip_frac"] == 1.0
    assert kl_penalty(logp, logp, mask).item() == pytest.approx(0.0)
    assert kl_penalty(logp, logp - 0.5, mask).item() > 0
    # k3 by hand: π_θ = 1/2, π_ref = 1/4 -> r = log(1/2), k3 = e^r - r - 1 = 1/2 + log 2 - 1
    half, quarter = torch.full((1, 2), 0.5).log(), torch.full((1, 2), 0.25).log()
    ones = torch.ones(1, 2)
    assert kl_penalty(half, quarter, ones).item() == pytest.approx(0.5 + np.log(2) - 1.0, rel=1e-6)


def test_each_turns_advantage_lands_on_its_own_tokens() -> None:
    from turngym.agents.render import TokenSample

    s = TokenSample(input_ids=list(range(10)), loss_mask=[0, 0, 1, 1, 0, 0, 1, 1, 1, 0], logprobs=[0.0] * 10, turn_spans={0: (2, 4), 1: (6, 9)})
    adv = token_advantages(s, [0.5, -2.0])
    assert adv == [0, 0, 0.5, 0.5, 0, 0, -2.0, -2.0, -2.0, 0]
    batch = collate([s], [adv], pad_id=0)
    np.testing.assert_allclose(batch.adv_next.numpy()[0], adv[1:])
    np.testing.assert_allclose(batch.mask_next.numpy()[0], s.loss_mask[1:])
    assert batch.right_padded  # collate pads on the right, so the model may skip the padding mask


def test_training_changes_parameters_and_writes_artifacts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = Trainer(_tiny(steps=2), out, progress=False, log=None).run()
    warm = _weights(out)
    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(out / "warm_start").state_dict()
    changed = [k for k in start if not torch.equal(start[k], warm[k])]
    assert changed, "no parameter moved during RL"
    lines = metric_rows(out)
    rl = [r for r in lines if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2]
    assert all(np.isfinite(r["loss"]) for r in rl)
    assert [r["phase"] for r in lines].count("eval") == 2
    assert (out / "learning_curve.png").stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["success_before"] == result.success_before


class _Killed(Exception):
    pass


class _DiesAtStep(Trainer):
    """Test double: the process is "killed" when RL step ``die_at`` starts."""

    die_at = 2


    def _rl_step(self, step):  # noqa: ANN001, ANN202
        if step == self.die_at:
            raise _Killed
        return super()._rl_step(step)


def test_resume_continues_exactly(tmp_path: Path) -> None:
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    Trainer(_tiny(), straight, progress=False, log=None).run()
    with pytest.raises(_Killed):
        _DiesAtStep(_tiny(), killed, progress=False, log=None).run()
    assert json.loads((killed / "state.json").read_text())["step"] == 2
    Trainer(TrainConfig(), killed, resume=True, progress=False, log=None).run()  # config comes from the run dir
    a, b = _weights(straight), _weights(killed)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert metric_rows(straight) == metric_rows(killed)  # no lost or repeated iterations


def test_estimators_change_the_update_and_the_same_estimator_repeats_it(tmp_path: Path) -> None:
    # Same seed, same warm start, same rollouts: only the advantages differ. GiGPO's step groups
    # (every group member shares the first state) must move the weights differently from GRPO,
    # and a second GRPO run must repeat the first exactly -- an estimator the trainer ignored
    # (or a nondeterministic update) would fail one of the two.
    weights = {}
    for name, algo in (("grpo", "grpo"), ("grpo_again", "grpo"), ("gigpo", "gigpo")):
        Trainer(_tiny(steps=1, algo=algo), tmp_path / name, progress=False, log=None).run()
        rl = [r for r in metric_rows(tmp_path / name) if r["phase"] == "rl"]
        assert len(rl) == 1 and np.isfinite(rl[0]["loss"])
        weights[name] = _weights(tmp_path / name)
    same = lambda a, b: all(torch.equal(a[k], b[k]) for k in a)  # noqa: E731
    assert same(weights["grpo"], weights["grpo_again"])
    assert not same(weights["grpo"], weights["gigpo"])


def test_other_estimators_train_a_step(tmp_path: Path) -> None:
    for algo in ("tree", "igpo_turn_group", "papo"):
        Trainer(_tiny(steps=1, algo=algo, warmup_steps=0, eval_episodes=1), tmp_path / algo, progress=False, log=None).run()
        rl = [r for r in metric_rows(tmp_path / algo) if r["phase"] == "rl"]
        assert len(rl) == 1 and np.isfinite(rl[0]["loss"])


def test_lora_and_kl_run_and_resume(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    cfg = _tiny(steps=2, lora=True, lora_rank=4, kl_coef=0.05)
    out = tmp_path / "lora"
    killer = type("_DiesAtOne", (_DiesAtStep,), {"die_at": 1})
    with pytest.raises(_Killed):
        killer(cfg, out, progress=False, log=None).run()
    state = _weights(out)
    assert state and all("lora" in k for k in state)  # only the adapters are checkpointed
    Trainer(TrainConfig(), out, resume=True, progress=False, log=None).run()
    rl = [r for r in metric_rows(out) if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2]
    # The first step samples from the reference itself (LoRA starts as a no-op): KL is exactly 0.
    # After an update the policy has moved, so a KL term that compared the reference with itself
    # (or the policy with itself) would stay 0 here.
    assert rl[0]["kl"] == pytest.approx(0.0, abs=1e-7)
    assert rl[1]["kl"] > 1e-6


def _masked_batch(vocab: int):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (3, 17), generator=g)
    attn = torch.ones_like(ids)
    attn[1, 12:] = 0  # a right-padded row
    mask = (torch.rand(3, 16, generator=g) < 0.4).float() * attn[:, 1:]
    from turngym.trainers.batch import TokenBatch

    return TokenBatch(ids, attn, mask, torch.zeros_like(mask), torch.zeros_like(mask), right_padded=True)


@pytest.mark.parametrize("lora", [False, True])
def test_masked_logprobs_equal_the_full_softmax_with_gradients(lora: bool) -> None:
    """The fast path (vocabulary projection only at policy tokens) gives the same values and
    the same gradients as the full softmax at every masked position, and 0 elsewhere."""
    from transformers import AutoModelForCausalLM

    from turngym.agents.tiny import build_tiny_model
    from turngym.trainers.batch import _plain_head, token_logprobs

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model())
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    assert _plain_head(model)
    batch = _masked_batch(model.config.vocab_size)
    where = batch.mask_next > 0
    grads = []
    for only in (True, False):
        model.zero_grad()
        lp = token_logprobs(model, batch, only_masked=only)
        (lp * batch.mask_next).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.requires_grad and p.grad is not None])
        if only:
            fast = lp.detach()
            assert torch.all(fast[~where] == 0)
        else:
            full = lp.detach()
    assert torch.allclose(fast[where], full[where], atol=1e-5)
    with torch.no_grad():  # the padding-mask-free causal path equals the model with its padding mask
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
        ref = torch.log_softmax(logits, -1).gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(fast[where], ref[where], atol=1e-5)
    assert len(grads[0]) == len(grads[1]) > 0
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*grads))


def test_soft_capped_heads_take_the_full_path() -> None:
    from types import SimpleNamespace

    from turngym.trainers.batch import _plain_head

    capped = SimpleNamespace(config=SimpleNamespace(final_logit_softcapping=30.0), get_decoder=lambda: 1, get_output_embeddings=lambda: 1)
    assert not _plain_head(capped)
    assert not _plain_head(SimpleNamespace(config=None))


def test_papo_process_term_has_its_own_weights(tmp_path: Path) -> None:
    """PAPO's setting: outcome-only reward (every shaping weight 0) with a dense process term
    from the env spec's weights — the two shapers of the trainer must not share weights."""
    import turngym
    from turngym.agents import OracleAgent
    from turngym.rollout import run_episodes

    zero = {name: 0.0 for name in turngym.make("turngym/Math-v0").reward_spec.names}
    trainer = Trainer(_tiny(algo="papo", reward_weights=zero), tmp_path, progress=False, log=None)
    trainer._setup()
    (ep,) = run_episodes(trainer._make_env, OracleAgent(), [0])
    assert not trainer.shaper.shape_episode(ep).shaping.any()
    assert trainer.process_shaper.shape_episode(ep).shaping.any()


def test_a_saved_warm_start_is_where_rl_starts(tmp_path: Path) -> None:
    """``warm_start_only`` + ``model=<dir>, warmup_steps=0`` starts RL from exactly those weights,
    and its first evaluation equals the one a full run makes after the same imitation."""
    from transformers import AutoModelForCausalLM

    warm = Trainer(_tiny(), tmp_path / "w", progress=False, log=None).warm_start_only(tmp_path / "model")
    full = Trainer(_tiny(steps=1), tmp_path / "full", progress=False, log=None).run()
    shared = Trainer(_tiny(steps=1, model=str(warm), lora=False, keep_system_prompt=False, warmup_steps=0), tmp_path / "shared", progress=False, log=None).run()
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "full" / "warm_start").state_dict()
    b = AutoModelForCausalLM.from_pretrained(warm).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert shared.success_before == full.success_before
    assert [json.loads(x)["phase"] for x in (tmp_path / "w" / "metrics.jsonl").read_text().splitlines()] == ["warmup"]


def test_lora_layers_adapt_only_the_top_layers_and_backward_stops_there(tmp_path: Path) -> None:
    """``lora_layers=k``: adapters exist only in the last k decoder layers (every linear there but
    the head), so nothing below them needs a gradient; the run trains and saves adapters only."""
    pytest.importorskip("peft")
    cfg = _tiny(steps=1, lora=True, lora_rank=4, lora_layers=1, warmup_steps=0)
    trainer = Trainer(cfg, tmp_path / "top", progress=False, log=None)
    trainer.run()
    state = _weights(tmp_path / "top")
    n_layers = trainer.model.config.num_hidden_layers
    assert n_layers > 1 and state and all("lora" in k for k in state)
    assert {int(k.split("layers.")[1].split(".")[0]) for k in state} == {n_layers - 1}
    adapted = {k.split(".lora_")[0].rsplit(".", 1)[-1] for k in state}
    assert {"q_proj", "v_proj", "down_proj"} <= adapted  # every linear of the layer, not only attention
    with pytest.raises(ConfigError, match="decoder layers"):
        Trainer(_tiny(lora=True, lora_layers=n_layers + 1), tmp_path / "bad", progress=False, log=None).run()


def test_known_success_before_skips_the_warm_start_evaluation(tmp_path: Path) -> None:
    """A caller that measured the shared warm start passes its success rate: the run evaluates
    only after RL, and reports the number it was given."""
    seen: list[str] = []
    res = Trainer(_tiny(steps=1), tmp_path / "k", progress=False, log=None, hook=seen.append, success_before=0.125).run()
    assert res.success_before == 0.125
    evals = [r for r in metric_rows(tmp_path / "k") if r["phase"] == "eval"]
    assert [r["success"] for r in evals][0] == 0.125 and len(evals) == 2


def test_evaluate_on_another_env_uses_its_held_out_seeds(tmp_path: Path) -> None:
    """``evaluate(env_id=...)`` plays the other env's held-out task seeds (an unseen split) and
    leaves the config as it was."""
    import turngym
    from turngym.trainers.loop import EVAL_SEED

    kwargs = {"difficulties": [1], "max_turns": 2}
    cfg = _tiny(warmup_steps=0, env_id="turngym/Household-v0", env_kwargs=kwargs)
    trainer = Trainer(cfg, tmp_path / "e", progress=False, log=None).load()
    before = trainer.config
    trainer.evaluate(3, env_id="turngym/Household-Unseen-v0")
    eps = trainer.last_eval_episodes
    assert trainer.config is before and len(eps) == 3
    env = turngym.make("turngym/Household-Unseen-v0", **kwargs)
    assert [e.task_id for e in eps] == [env.reset(seed=EVAL_SEED + i)[1]["task_id"] for i in range(3)]
    assert all("/unseen/" in e.task_id for e in eps)
