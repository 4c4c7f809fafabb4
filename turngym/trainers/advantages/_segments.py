"""Vectorized segment operations shared by the estimators.

A *segment* is a set of rows with the same integer code (a group, an episode, a step group).
Everything here is O(n) NumPy (``bincount``, ``ufunc.at``, one pass per turn depth), so the
estimators stay one screen long and run at array speed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from turngym.core.errors import ConfigError
from turngym.trainers.advantages._ids import factorize
from turngym.trainers.advantages.table import TurnTable

__all__ = [
    "EPS",
    "broadcast_episode",
    "check_unit",
    "combine_codes",
    "discounted_returns",
    "normalize_in_segments",
    "reverse_discounted_sum",
    "segment_stats",
    "SegmentStats",
]

EPS = 1e-6


def combine_codes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Dense codes for the pairs ``(a[i], b[i])`` (equal pairs ⇔ equal codes)."""
    if a.size == 0:
        return a.astype(np.int64)
    return factorize(a * (int(b.max()) + 1) + b, "pair")


def normalize_in_segments(
    values: np.ndarray,
    codes: np.ndarray,
    *,
    scale: bool = True,
    eps: float = EPS,
    ddof: int = 1,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """``(x − mean_seg) / (std_seg + eps)`` per row (``x − mean_seg`` when ``scale=False``).

    Segments with fewer than two members, and segments whose values are all equal, give
    exactly 0 (not a 1e-17 rounding residue divided by ``eps``). ``mask`` restricts the
    statistics *and* the output to the selected rows; the others get 0. ``std`` uses
    ``ddof=1`` like TRL and verl.
    """
    out = np.zeros(values.shape, np.float64)
    if mask is not None:
        sel = np.flatnonzero(mask)
        out[sel] = normalize_in_segments(values[sel], codes[sel], scale=scale, eps=eps, ddof=ddof)
        return out
    if values.size == 0:
        return out
    st = segment_stats(values, codes, ddof=ddof)
    dev = values - st.mean[codes]
    if scale:
        dev /= st.std[codes] + eps
    return np.where(st.live[codes], dev, 0.0)


@dataclass(frozen=True)
class SegmentStats:
    """Per-segment count, mean, std and ``live`` (≥ 2 members that are not all equal)."""

    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    live: np.ndarray


def segment_stats(values: np.ndarray, codes: np.ndarray, *, n: int | None = None, ddof: int = 1) -> SegmentStats:
    """Statistics of ``values`` per segment code (``n`` = number of segments)."""
    n = (int(codes.max()) + 1 if codes.size else 0) if n is None else n
    count = np.bincount(codes, minlength=n)
    mean = np.bincount(codes, weights=values, minlength=n) / np.maximum(count, 1)
    dev = values - mean[codes]
    var = np.bincount(codes, weights=dev * dev, minlength=n) / np.maximum(count - ddof, 1)
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    np.minimum.at(lo, codes, values)
    np.maximum.at(hi, codes, values)
    return SegmentStats(count=count, mean=mean, std=np.sqrt(var), live=(count >= 2) & (hi > lo))


def reverse_discounted_sum(values: np.ndarray, table: TurnTable, coef: float) -> np.ndarray:
    """``y_t = x_t + coef · y_{t+1}`` backwards through each episode (turn order), per row.

    One vectorized step per turn depth: rows ``k`` turns before their episode's end are
    updated together from the rows ``k − 1`` turns before it, so the cost is O(rows) plus
    one small NumPy call per turn of the longest episode.
    """
    y = values.astype(np.float64, copy=True)
    if values.size == 0 or coef == 0.0:
        return y
    order = table.order  # rows sorted by (episode, turn): a row's next turn is the next entry
    lengths = table.episode_lengths
    ends = np.cumsum(lengths) - 1  # sorted position of each episode's final turn
    longest_first = np.argsort(-lengths, kind="stable")
    sorted_lengths = lengths[longest_first]
    ys = y[order]
    for k in range(1, int(sorted_lengths[0])):
        live = longest_first[: np.searchsorted(-sorted_lengths, -k, side="left")]  # episodes longer than k
        idx = ends[live] - k
        ys[idx] += coef * ys[idx + 1]
    y[order] = ys
    return y


def discounted_returns(table: TurnTable, gamma: float, rewards: np.ndarray | None = None) -> np.ndarray:
    """Per-turn reward-to-go ``G_t = r_t + γ G_{t+1}`` (``G`` after the last turn is 0)."""
    return reverse_discounted_sum(table.reward if rewards is None else rewards, table, gamma)


def broadcast_episode(values_per_episode: np.ndarray, table: TurnTable) -> np.ndarray:
    """Give every row its episode's value."""
    return values_per_episode[table.episode]


def check_unit(name: str, value: float, *, low: float = 0.0, high: float = 1.0) -> None:
    """Validate a coefficient such as γ or λ (raises a ConfigError subclass)."""
    if not (low <= value <= high):
        raise ConfigError(f"{name} must be in [{low}, {high}], got {value!r}")
