"""Long episodes in bounded memory, and an update that never writes non-finite weights.

* :func:`~turngym.trainers.batch.token_logprobs` over chunks of policy tokens gives the log-probs
  and the gradients of the whole-batch path (and of the full-vocabulary path), for the embedded
  HF model and for the same model with peft LoRA adapters;
* micro-batches are bounded by padded tokens;
* decoder gradient checkpointing changes no gradient;
* a poisoned batch (a NaN log-prob that got past the record checks) skips its update, counted,
  leaving the weights and the optimizer untouched, and weights that are not finite are never saved.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from turngym.trainers.batch import collate, token_logprobs
from turngym.trainers.learner import by_length

VOCAB_LIMIT = 200  # ids drawn below this (the tiny model's vocabulary is larger)


@pytest.fixture(scope="module")
def tiny_path() -> Path:
    from turngym.agents.tiny import TinyModelConfig, build_tiny_model

    return build_tiny_model(config=TinyModelConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2))


def _model(path: Path, lora: bool = False):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0,
                                                 task_type="CAUSAL_LM"))
        for name, p in model.named_parameters():  # B starts at 0: give the adapters a value, so they change the logits
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.05)
    return model.train()


def _samples(n: int, seed: int, *, constrained: bool = False) -> list[SimpleNamespace]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(12, 40))
        mask = (rng.random(length) < 0.5).astype(int).tolist()
        mask[0] = 0
        allowed = {}
        if constrained:
            pos = [p for p in range(1, length) if mask[p]][:2]
            ids = rng.integers(0, VOCAB_LIMIT, length).tolist()
            allowed = {p: sorted({ids[p], *rng.integers(0, VOCAB_LIMIT, 3).tolist()}) for p in pos}
            out.append(SimpleNamespace(input_ids=ids, loss_mask=mask, logprobs=[0.0] * length, allowed=allowed))
            continue
        out.append(SimpleNamespace(input_ids=rng.integers(0, VOCAB_LIMIT, length).tolist(), loss_mask=mask,
                                   logprobs=[0.0] * length, allowed=allowed))
    return out


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal to float32 summation order: within 1e-4 of the gradient's own scale."""
    assert float((got - want).abs().max()) <= 1e-4 * float(want.abs().max()) + 1e-8


def _logp_and_grads(model, batch, **kw) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    logp = token_logprobs(model, batch, **kw)
    weights = torch.linspace(0.5, 1.5, logp.numel()).view_as(logp)  # every position's gradient counts, differently
    (logp * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    return logp.detach(), grads


@pytest.mark.parametrize("lora", [False, True], ids=["hf", "peft-lora"])
@pytest.mark.parametrize("constrained", [False, True], ids=["free", "constrained"])
def test_chunked_logprobs_equal_the_whole_batch(tiny_path: Path, lora: bool, constrained: bool) -> None:
    model = _model(tiny_path, lora=lora)
    batch = collate(_samples(5, seed=1, constrained=constrained), None, pad_id=0)
    assert batch.n_tokens > 20
    whole, g_whole = _logp_and_grads(model, batch, chunk_tokens=0)
    full, g_full = _logp_and_grads(model, batch, only_masked=False)  # every position through model(...).logits
    where = batch.mask_next > 0
    torch.testing.assert_close(whole[where], full[where], rtol=0, atol=1e-5)
    for chunk in (1, 7, 10_000):  # single rows, a chunk that does not divide the tokens, one chunk
        chunked, g_chunked = _logp_and_grads(model, batch, chunk_tokens=chunk)
        torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-5)
        assert g_chunked.keys() == g_whole.keys() and g_whole
        for name in g_whole:
            _close(g_chunked[name], g_whole[name])
    assert all(torch.any(g != 0) for g in g_whole.values() if g.dim() == 2)  # the test compares real gradients
    if lora:
        assert any("lora_" in n for n in g_whole) and not any("lora_" not in n for n in g_whole)
    with torch.no_grad():  # no autograd: no checkpoint, same values
        torch.testing.assert_close(token_logprobs(model, batch, chunk_tokens=3), whole, rtol=0, atol=1e-5)


def test_gradient_checkpointing_changes_no_gradient(tiny_path: Path) -> None:
    batch = collate(_samples(4, seed=2), None, pad_id=0)
    plain = _model(tiny_path, lora=True)
    logp, grads = _logp_and_grads(plain, batch)
    checkpointed = _model(tiny_path, lora=True)
    checkpointed.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    logp_c, grads_c = _logp_and_grads(checkpointed, batch)
    torch.testing.assert_close(logp_c, logp, rtol=0, atol=1e-6)
    assert grads_c.keys() == grads.keys()
    for name in grads:
        _close(grads_c[name], grads[name])


def test_micro_batches_are_bounded_by_padded_tokens() -> None:
    lengths = [2600, 2500, 40, 2673, 60, 2550, 2610, 30, 2590, 2640]
    samples = [SimpleNamespace(input_ids=[0] * n) for n in lengths]
    idx = np.arange(len(samples))
    parts = by_length(idx, samples, 32, max_tokens=8192)
    assert sorted(np.concatenate(parts).tolist()) == idx.tolist()  # every episode once
    for part in parts:
        assert len(part) * max(lengths[i] for i in part) <= 8192
    # sorted by length, then closed before the row that would overflow: four micro-batches instead of one of 10 × 2673
    assert [[lengths[i] for i in p] for p in parts] == [[30, 40, 60], [2500, 2550, 2590], [2600, 2610, 2640], [2673]]
    assert [p.tolist() for p in by_length(idx, samples, 3, max_tokens=0)] == [p.tolist() for p in by_length(idx, samples, 3)]
    alone = by_length(np.arange(2), [SimpleNamespace(input_ids=[0] * 9000)] * 2, 32, max_tokens=8192)
    assert [len(p) for p in alone] == [1, 1]  # a row longer than the bound goes alone
    short = [SimpleNamespace(input_ids=[0] * n) for n in (10, 20, 30, 40)]
    same = by_length(np.arange(4), short, 3, max_tokens=8192)  # the bound does not bind: the split by rows, unchanged
    assert [p.tolist() for p in same] == [p.tolist() for p in by_length(np.arange(4), short, 3)]


# ---------------------------------------------------------------------- the update guard


def _saved_episodes(n: int = 4) -> list:
    from turngym.agents.render import RECORDED
    from turngym.rollout.types import Episode, Turn

    rng = np.random.default_rng(0)
    out = []
    for e in range(n):
        prompt = rng.integers(3, VOCAB_LIMIT, 8).tolist()
        turns = []
        for t in range(2):
            sampled = rng.integers(3, VOCAB_LIMIT, 4).tolist()
            last = t == 1
            turns.append(Turn(t, "", "", float(e % 2) if last else 0.0, last, False, {}, f"s{t + 1}", f"s{t}",
                              token_ids=sampled, logprobs=[-2.0] * 4, prompt_ids=list(prompt), node=t, parent=t - 1))
            prompt = prompt + sampled + rng.integers(3, VOCAB_LIMIT, 3).tolist()
        out.append(Episode(f"g/{e}", "proxy", "0", 0, "", group="g", turns=turns, outcome={"reward": float(e % 2)},
                           meta={"rendering": RECORDED}))
    return out


@pytest.fixture()
def learner(tmp_path: Path, tiny_path: Path):
    from turngym.rollout.types import save_episodes
    from turngym.trainers import TrainConfig
    from turngym.trainers.learner import Learner

    save_episodes(_saved_episodes(), tmp_path / "episodes.jsonl")
    config = TrainConfig(episodes=str(tmp_path / "episodes.jsonl"), warmup_steps=0, eval_episodes=0, algo="grpo", lora=True,
                         lr=1e-2, groups_per_step=1, group_size=4)
    logs: list[str] = []
    learner = Learner(config, metric=lambda row: None, log=logs.append, bar=lambda *a, **k: None)
    learner.setup(tiny_path, make_env=None)
    learner.logs = logs
    return learner


def _trainable(learner) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in learner.trainable_state().items()}


def test_a_poisoned_batch_skips_its_update_and_a_clean_one_steps(learner) -> None:
    learner.rl_setup()
    before = _trainable(learner)
    poisoned = _saved_episodes()
    poisoned[1].turns[0].logprobs[2] = math.nan  # what the record checks refuse: here it reaches the update itself
    row = learner.learn(0, poisoned)
    assert row["skipped_updates"] == 1 and any("skipped an update on a non-finite loss" in m for m in learner.logs)
    after = _trainable(learner)
    assert all(torch.equal(before[k], after[k]) for k in before)  # not one weight moved
    assert not learner.optimizer.state  # the optimizer's moments were never touched
    row = learner.learn(1, _saved_episodes())  # the same batch, clean: it steps
    assert row["skipped_updates"] == 0 and math.isfinite(row["loss"])
    moved = _trainable(learner)
    assert any(not torch.equal(before[k], moved[k]) for k in before)
    assert all(torch.isfinite(v).all() for v in moved.values())


def test_an_infinite_gradient_skips_the_update(learner, monkeypatch: pytest.MonkeyPatch) -> None:
    learner.rl_setup()
    before = _trainable(learner)
    real = torch.nn.utils.clip_grad_norm_

    def exploding(params, max_norm):  # test double: the gradient blew up after a finite loss
        params = list(params)
        params[0].grad.fill_(math.inf)
        return real(params, max_norm)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", exploding)
    row = learner.learn(0, _saved_episodes())
    assert row["skipped_updates"] == 1 and any("non-finite gradient" in m for m in learner.logs)
    assert all(torch.equal(before[k], v) for k, v in _trainable(learner).items())


def test_non_finite_weights_are_never_saved(learner, tmp_path: Path) -> None:
    from turngym.trainers.learner import NonFiniteWeights

    learner.rl_setup()
    learner.learn(0, _saved_episodes())
    ok = tmp_path / "ok"
    ok.mkdir()
    learner.save_state(ok)
    assert (ok / "trainable.pt").is_file()
    name, weight = next((n, p) for n, p in learner.model.named_parameters() if p.requires_grad)
    with torch.no_grad():
        weight.view(-1)[0] = math.nan
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(NonFiniteWeights, match="NaN or infinite"):
        learner.save_state(bad)
    assert not any(bad.iterdir())
    with pytest.raises(NonFiniteWeights):
        learner.save_model(tmp_path / "model")
    assert not (tmp_path / "model").exists()


def test_the_config_bounds_are_validated() -> None:
    from turngym.core.errors import ConfigError
    from turngym.trainers import TrainConfig

    config = TrainConfig.from_dict(json.loads(json.dumps(TrainConfig(reward_range=(-5, 5)).to_dict())))  # JSON: a list
    assert config.reward_range == (-5.0, 5.0)
    for bad in ({"reward_range": (1.0, -1.0)}, {"reward_range": (0.0, math.inf)}, {"max_tokens_per_micro_batch": -1},
                {"logit_chunk_tokens": -2}):
        with pytest.raises(ConfigError):
            TrainConfig(**bad)
    smol, tiny = TrainConfig(model="smollm2"), TrainConfig()
    assert smol.use_gradient_checkpointing and not tiny.use_gradient_checkpointing
    assert (smol.micro_batch_tokens, tiny.micro_batch_tokens) == (8192, 0)  # the tiny default run keeps its micro-batches
    assert TrainConfig(max_tokens_per_micro_batch=100).micro_batch_tokens == 100
