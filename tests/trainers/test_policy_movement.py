"""How far one RL step moves the policy: ``ratio_std`` and ``approx_kl`` (k3) from the loss's ratios."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_run import metric_rows, tiny_config  # noqa: E402

from turngym.trainers import Trainer  # noqa: E402
from turngym.trainers.engine import tis_pg_loss  # noqa: E402
from turngym.trainers.losses import clipped_pg_loss, policy_movement  # noqa: E402


def test_movement_by_hand() -> None:
    old = torch.log(torch.tensor([[0.5, 0.25, 0.1]]))
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is off the mask: its huge ratio must not count
    assert policy_movement(old, old, mask) == {"ratio": 1.0, "ratio_std": 0.0, "approx_kl": 0.0}
    logp = old + torch.tensor([[math.log(2.0), 0.0, 5.0]])  # ratios 2 and 1 on the mask
    m = policy_movement(logp, old, mask)
    assert m["ratio"] == pytest.approx(1.5) and m["ratio_std"] == pytest.approx(0.5)
    assert m["approx_kl"] == pytest.approx((1.0 - math.log(2.0)) / 2)  # k3 = (ρ − 1) − log ρ, token mean


def test_both_losses_report_the_movement() -> None:
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 6, generator=g) * 3
    logp = old + 0.1 * torch.randn(3, 6, generator=g)
    adv, mask = torch.randn(3, 6, generator=g), torch.ones(3, 6)
    want = policy_movement(logp, old, mask)
    assert want["approx_kl"] > 0 and want["ratio_std"] > 0
    for _, diag in (clipped_pg_loss(logp, old, adv, mask), tis_pg_loss(logp, old, old, adv, mask)):
        assert {k: diag[k] for k in want} == pytest.approx(want)


def _rl_row(tmp_path: Path, minibatches: int) -> dict:
    cfg = tiny_config(steps=1, warmup_steps=0, eval_episodes=0, micro_batch_size=4, lr=0.05, minibatches=minibatches)
    out = tmp_path / f"mb{minibatches}"
    Trainer(cfg, out, progress=False, log=None).run()
    (row,) = [r for r in metric_rows(out) if r["phase"] == "rl"]
    return row


def test_a_later_minibatch_sees_the_earlier_ones_update(tmp_path: Path) -> None:
    # One minibatch: the update is on-policy whatever the lr (ρ ≡ 1 up to float noise).
    # Two: the second is scored after the first's step at a large lr, so the step's movement shows.
    on = _rl_row(tmp_path, 1)
    assert on["approx_kl"] < 1e-6 and on["ratio_std"] < 1e-3
    moved = _rl_row(tmp_path, 2)
    assert moved["approx_kl"] > 1e-4 and moved["ratio_std"] > 1e-2
