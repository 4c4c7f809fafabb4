"""Engine-side training math that needs no vLLM: merged LoRA weights, mismatch stats, TIS loss."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from turngym.core.errors import ConfigError  # noqa: E402
from turngym.trainers.engine import engine_weights, logprob_mismatch, tis_pg_loss, tis_weights  # noqa: E402
from turngym.trainers.losses import clipped_pg_loss  # noqa: E402


def _batch(seed: int = 0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(3, 7, generator=g) * 3
    old = logp + 0.05 * torch.randn(3, 7, generator=g)
    adv = torch.randn(3, 7, generator=g)
    mask = (torch.rand(3, 7, generator=g) > 0.3).float()
    return logp.requires_grad_(), old, adv, mask


def test_tis_loss_is_the_ppo_loss_when_engine_and_trainer_agree() -> None:
    logp, old, adv, mask = _batch()
    ours, diag = tis_pg_loss(logp, old, old, adv, mask, cap=2.0)
    ref, ref_diag = clipped_pg_loss(logp, old, adv, mask)
    assert torch.allclose(ours, ref) and diag["tis_weight"] == pytest.approx(1.0)
    assert diag["clip_frac"] == ref_diag["clip_frac"]


def test_tis_weights_each_token_by_the_truncated_ratio() -> None:
    logp, old, adv, mask = _batch(1)
    engine = old.clone()
    engine[0] -= 0.5  # trainer likes row 0 more than the engine did: ratio e^0.5 ≈ 1.65 (< cap)
    engine[1] -= 3.0  # ratio e^3 ≈ 20: truncated to the cap
    w = tis_weights(old, engine, mask, cap=2.0)
    assert torch.allclose(w[0], math.exp(0.5) * mask[0]) and torch.allclose(w[1], 2.0 * mask[1])
    assert torch.allclose(w[2], mask[2])
    loss, _ = tis_pg_loss(logp, old, engine, adv, mask, cap=2.0)
    loss.backward()
    grad_tis = logp.grad.clone()
    logp.grad = None
    plain, _ = clipped_pg_loss(logp, old, adv, mask)
    plain.backward()
    assert torch.allclose(grad_tis, logp.grad * w)  # the weight scales each token's gradient, nothing else
    with pytest.raises(ConfigError, match="cap"):
        tis_weights(old, engine, mask, cap=0)


def test_mismatch_stats_are_over_the_masked_tokens_only() -> None:
    trainer = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5]])
    engine = torch.tensor([[-1.1, -2.0, 0.0], [-0.5, -0.2, -0.5]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # the -9 vs 0 token is off the mask
    s = logprob_mismatch(trainer, engine, mask, cap=1.05)
    assert s["mismatch_abs_mean"] == pytest.approx((0.1 + 0.3) / 5)
    assert s["mismatch_abs_max"] == pytest.approx(0.3)
    assert s["is_ratio_max"] == pytest.approx(math.exp(0.1)) and s["is_ratio_min"] == pytest.approx(math.exp(-0.3))
    assert s["tis_clip_frac"] == pytest.approx(1 / 5)
    assert s["mismatch_kl"] > 0
    assert logprob_mismatch(trainer, engine, torch.zeros_like(mask)) == {}


def test_lora_weights_are_pushed_merged_under_the_base_names() -> None:
    peft = pytest.importorskip("peft")
    from transformers import AutoModelForCausalLM

    from turngym.agents.tiny import build_tiny_model

    path = build_tiny_model()
    original = AutoModelForCausalLM.from_pretrained(path).state_dict()
    model = AutoModelForCausalLM.from_pretrained(path)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, lora)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)  # B starts at 0: make the adapters matter
    before = {n: p.clone() for n, p in model.named_parameters()}
    pushed = dict(engine_weights(model, torch.bfloat16))
    assert {n: p for n, p in model.named_parameters() if not torch.equal(p, before[n])} == {}  # untouched
    assert set(pushed) == set(original) and all(t.dtype == torch.bfloat16 for t in pushed.values())
    merged = model.merge_and_unload().state_dict()
    changed = 0
    for name, t in pushed.items():
        assert torch.allclose(t.float(), merged[name].float(), atol=1e-2), name
        changed += not torch.equal(merged[name], original[name])
    assert changed > 0  # the merge changed some weights: the adapters reached the pushed tensors


def test_gpu_check_refuses_a_machine_without_cuda_by_saying_so(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util
    import json
    from pathlib import Path

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: scripts/gpu_check.py would run the real check")
    path = Path(__file__).parents[2] / "scripts" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--json"]) == 2
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["ok"] is False and "no CUDA GPU" in report["error"] and "scripts/ci_vllm.sh" in report["error"]
    assert "no CUDA GPU" in err


def test_engine_config_fields_are_validated() -> None:
    from turngym.trainers import TrainConfig

    with pytest.raises(ConfigError, match="engine must be 'hf' or 'vllm'"):
        TrainConfig(engine="sglang")
    with pytest.raises(ConfigError, match="tis_cap"):
        TrainConfig(engine="vllm", tis_cap=0)
