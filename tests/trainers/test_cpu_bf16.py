"""``cpu_bf16``: the update in bfloat16 autocast on a CPU with native bf16, π_old recomputed.

The sampler draws in float32; an update whose forward runs in bf16 sees other log-probs of the
same tokens, so it must treat the episodes as another policy's (recompute π_old, TIS) instead of
reading the sampler's log-probs as its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_run import tiny_config  # noqa: E402

import turngym.trainers.learner as learner_mod  # noqa: E402
from turngym.trainers import Trainer  # noqa: E402
from turngym.trainers.learner import native_bf16_cpu  # noqa: E402
from turngym.trainers.recipe import recipe  # noqa: E402


def _cpuinfo(tmp_path: Path, flags: str) -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 {flags}\n\nprocessor\t: 1\n")
    return str(path)


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path: Path) -> None:
    assert native_bf16_cpu(_cpuinfo(tmp_path, "avx512f avx512_bf16"))
    assert native_bf16_cpu(_cpuinfo(tmp_path, "amx_tile amx_bf16"))
    assert not native_bf16_cpu(_cpuinfo(tmp_path, "avx512f avx512bw"))  # bf16 emulated: slower, not taken
    assert not native_bf16_cpu(str(tmp_path / "missing"))


def _rl_rows(out: Path) -> list[dict]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("phase") == "rl" or "approx_kl" in r]


@pytest.mark.skipif(not native_bf16_cpu(), reason="this CPU has no native bf16")
def test_cpu_bf16_update_recomputes_pi_old_and_weights_by_tis(tmp_path: Path) -> None:
    Trainer(tiny_config(steps=1, minibatches=2, cpu_bf16=True), tmp_path / "bf16", progress=False, log=None).run()
    Trainer(tiny_config(steps=1, minibatches=2), tmp_path / "fp32", progress=False, log=None).run()
    (bf16,), (fp32,) = _rl_rows(tmp_path / "bf16"), _rl_rows(tmp_path / "fp32")
    # the sampler's float32 log-probs against the bf16 update's: measured, small, not zero
    assert 0.0 < bf16["mismatch_abs_mean"] < 0.1, bf16
    assert "mismatch_abs_mean" not in fp32  # float32 both: the sampler's log-probs are π_old


def test_cpu_bf16_without_native_bf16_stays_float32(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(learner_mod, "native_bf16_cpu", lambda: False)
    logs: list[str] = []
    Trainer(tiny_config(steps=1, cpu_bf16=True), tmp_path, progress=False, log=logs.append).run()
    assert any("no native bf16" in m for m in logs), logs
    assert all("mismatch_abs_mean" not in r for r in _rl_rows(tmp_path))


def test_the_small_pretrained_recipe_asks_for_it() -> None:
    assert recipe("small-pretrained")["cpu_bf16"] is True
