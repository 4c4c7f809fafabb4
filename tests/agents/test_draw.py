"""The CPU sampler: inverse-CDF draws must follow the row's distribution exactly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from turngym.agents.hf import draw  # noqa: E402


def test_draws_follow_each_rows_distribution_and_never_pick_a_zero() -> None:
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0, 4.0], [1.0, 1.0, 0.0, 2.0]])  # unnormalized rows too
    g = torch.Generator().manual_seed(0)
    n = 40_000
    draws = torch.stack([draw(probs, g) for _ in range(n)])  # (n, rows)
    for row in range(probs.shape[0]):
        freq = torch.bincount(draws[:, row], minlength=4).double() / n
        expected = probs[row].double() / probs[row].sum()
        assert torch.all(freq[expected == 0] == 0)
        assert torch.allclose(freq, expected, atol=0.01), (row, freq, expected)


def test_a_seeded_generator_repeats_the_draws() -> None:
    probs = torch.softmax(torch.randn(8, 50, generator=torch.Generator().manual_seed(1)), dim=-1)
    a = [draw(probs, torch.Generator().manual_seed(7)) for _ in range(1)][0]
    b = draw(probs, torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and a.dtype == torch.int64 and a.shape == (8,)
