"""Which turn-level estimators stay exact when one batch mixes policy versions (asynchronous training)?

Asynchronous training (:mod:`turngym.trainers.asynchronous`) hands the learner, at version
``new``, batches whose early turns were sampled by an older version ``old``: partial rollouts
move every in-flight episode to the new weights at a fixed decode call (``swap_turn``), so in
the lockstep rollout turns ``t < swap_turn`` are ``old``'s and the rest ``new``'s. The question
is whether the *expected policy gradient* the learner computes from such a batch is the one it
would compute from a batch of its own (on-policy) — for each estimator, and for each way of
treating versions:

* ``ignore`` — versions ignored: no importance weights, groups as they are.
* ``tis`` — each turn's tokens weighted by ``π_new(a|s) / π_old(a|s)`` (per-turn importance
  correction with the behaviour log-probs, as the trainer does), groups as they are.
* ``tis_turn_groups`` — as ``tis``, and step groups (GiGPO's anchor states) restricted to rows
  whose *own* turn has the same version (episode groups cannot be split: an episode is one row
  of them; in a lockstep rollout siblings — first turns — always share a version).
* ``tis_episode_groups`` — as ``tis``, and groups restricted to episodes with the same version
  *signature* (which versions played them): the tempting "compare only compatible rollouts".

The environment is a chain in which the agent decides when to stop (the case of verl RFC #7244
and tinker-cookbook PR #822: episode length depends on the policy): in state ``p`` the action
``go`` moves to ``p + 1`` (reward 1 at the end of the chain), ``stop`` ends the episode with a
reward that grows with ``p``. ``length_depends_on_policy=False`` is the control: both actions
move on and every episode lasts ``horizon`` turns. The policy is tabular (one logit per state),
so ``∇ log π`` is exact and cheap.

For every batch the study computes the learner's gradient estimate ``ĝ = (1/E) Σ_rows w·Â·∇log
π_new(a|s)`` (``E`` episodes; ``w`` the mode's weight), averages it over ``batches`` batches and
compares it with the on-policy average: ``rel_bias`` is ``‖c·E[ĝ_mixed] − E[ĝ_on]‖ / ‖E[ĝ_on]‖``
after the best scale ``c`` (estimators that divide by a group std change the gradient's scale
with the data; a scale is a step size, a direction error is bias), and ``z`` the largest
component of that residual in standard errors (``z < 4``: no bias this many samples can see).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ASYNC_ESTIMATORS", "MODES", "AsyncBiasConfig", "run_async_bias_study"]

ASYNC_ESTIMATORS = ("gigpo", "turn_grpo", "tree", "gae")
MODES = ("ignore", "tis", "tis_turn_groups", "tis_episode_groups", "prefix_is")


@dataclass
class AsyncBiasConfig:
    """One study; the defaults take a few seconds."""

    horizon: int = 4
    """Chain length: the most turns an episode has."""
    length_depends_on_policy: bool = True
    """``stop`` ends the episode (True), or every episode lasts ``horizon`` turns (the control)."""
    old_logits: tuple[float, ...] = (0.3, 0.0, 0.5, -0.2)
    """Logit of ``go`` in each state under the older version."""
    update: float = 0.8
    """How far the newer version's logits moved (added to every state's logit): exaggerated
    against one real update so the bias it causes stands out of Monte Carlo noise."""
    swap_turn: int = 1
    """Turns before this index were sampled by the older version (partial rollouts)."""
    groups: int = 64
    group_size: int = 8
    batches: int = 120
    params: dict[str, dict[str, Any]] = field(default_factory=lambda: {"gae": {"gamma": 1.0, "lam": 0.95}})
    """Estimator parameters (their defaults otherwise); ``gae`` reads the exact value of the newer version."""
    seed: int = 0


def _stop_reward(p: np.ndarray, horizon: int) -> np.ndarray:
    return 0.2 + 0.6 * p / max(1, horizon - 1)


def _sample(cfg: AsyncBiasConfig, rng: np.random.Generator, logits: list[np.ndarray], versions_at: np.ndarray) -> dict[str, np.ndarray]:
    """Play ``groups × group_size`` episodes; turn ``t`` samples with ``logits[versions_at[t]]``."""
    n, h = cfg.groups * cfg.group_size, cfg.horizon
    rows: dict[str, list[Any]] = {k: [] for k in ("episode", "group", "turn", "reward", "p", "go", "version")}
    alive = np.ones(n, bool)
    for t in range(h):
        idx = np.flatnonzero(alive)
        if idx.size == 0:
            break
        theta = logits[versions_at[t]][t]
        go = rng.random(idx.size) < 1.0 / (1.0 + np.exp(-theta))
        if cfg.length_depends_on_policy:
            reward = np.where(go, 1.0 if t == h - 1 else 0.0, _stop_reward(np.full(idx.size, t), h))
            alive[idx[~go]] = False
        else:
            reward = np.where(go, 0.25, 0.1 * t)
        for k, v in (("episode", idx), ("group", idx // cfg.group_size), ("turn", np.full(idx.size, t)), ("reward", reward),
                     ("p", np.full(idx.size, t)), ("go", go), ("version", np.full(idx.size, versions_at[t]))):
            rows[k].append(v)
    cols = {k: np.concatenate(v) for k, v in rows.items()}
    order = np.lexsort((cols["turn"], cols["episode"]))  # episode by episode, turns in order
    return {k: v[order] for k, v in cols.items()}


def _values(cfg: AsyncBiasConfig, theta: np.ndarray, gamma: float) -> np.ndarray:
    """Exact ``V(p)`` of the chain under ``theta`` (backward recursion)."""
    h = cfg.horizon
    v = np.zeros(h + 1)
    for p in range(h - 1, -1, -1):
        q_go = (1.0 if p == h - 1 else 0.0) + gamma * v[p + 1] if cfg.length_depends_on_policy else 0.25 + gamma * v[p + 1]
        q_stop = _stop_reward(np.array(p), h) if cfg.length_depends_on_policy else 0.1 * p + gamma * v[p + 1]
        pi = 1.0 / (1.0 + np.exp(-theta[p]))
        v[p] = pi * q_go + (1 - pi) * float(q_stop)
    return v[:h]


def _table(cols: dict[str, np.ndarray], mode: str, values: np.ndarray) -> dict[str, np.ndarray]:
    n = cols["episode"].size
    first = np.r_[True, cols["episode"][1:] != cols["episode"][:-1]]
    node = np.arange(n)
    parent = np.where(first, -1, node - 1)
    group = cols["group"].copy()
    state = np.array([f"p{p}" for p in cols["p"]], dtype=object)
    if mode == "tis_turn_groups":  # step groups (anchor state x the turn's own version); an episode keeps its group
        state = np.array([f"{s}@v{v}" for s, v in zip(state, cols["version"])], dtype=object)
    elif mode == "tis_episode_groups":
        starts = np.flatnonzero(first)
        lengths = np.diff(np.r_[starts, n])
        present = np.bitwise_or.reduceat(1 << cols["version"], starts)  # which versions played the episode
        group = group * 1000 + np.repeat(present, lengths)
    return {"episode": cols["episode"], "group": group, "turn": cols["turn"], "reward": cols["reward"],
            "state_before": state, "node": node, "parent": parent,
            "value": values[cols["p"]]}


def _gradient(cfg: AsyncBiasConfig, cols: dict[str, np.ndarray], adv: np.ndarray, weights: np.ndarray, theta: np.ndarray) -> np.ndarray:
    pi = 1.0 / (1.0 + np.exp(-theta[cols["p"]]))
    dlogp = np.where(cols["go"], 1.0 - pi, -pi)  # d log π(a|p) / d θ_p
    return np.bincount(cols["p"], weights=weights * adv * dlogp, minlength=cfg.horizon) / (cfg.groups * cfg.group_size)


def _prefix_products(episode: np.ndarray, ratio: np.ndarray) -> np.ndarray:
    """Per row, the product of the ratios of its episode's turns up to and including it."""
    logs = np.log(ratio)
    cum = np.cumsum(logs)
    starts = np.r_[True, episode[1:] != episode[:-1]]
    offset = np.maximum.accumulate(np.where(starts, np.arange(len(ratio)), 0))
    before = np.where(offset > 0, cum[offset - 1], 0.0)
    return np.exp(cum - before)


def run_async_bias_study(cfg: AsyncBiasConfig, estimators: tuple[str, ...] = ASYNC_ESTIMATORS,
                         modes: tuple[str, ...] = MODES) -> dict[str, Any]:
    """``{estimator: {mode: {"rel_bias", "z", "scale"}}}`` (see the module docstring)."""
    from turngym.trainers.advantages import ESTIMATORS

    old = np.resize(np.asarray(cfg.old_logits, np.float64), cfg.horizon)
    new = old + cfg.update
    logits = [old, new]
    mixed_at = np.where(np.arange(cfg.horizon) < cfg.swap_turn, 0, 1)
    on_at = np.ones(cfg.horizon, np.int64)
    rng = np.random.default_rng(cfg.seed)
    grads: dict[tuple[str, str], list[np.ndarray]] = {}
    for _ in range(cfg.batches):
        on = _sample(cfg, rng, logits, on_at)
        mixed = _sample(cfg, rng, logits, mixed_at)
        p_new = 1.0 / (1.0 + np.exp(-new[mixed["p"]]))
        p_b = 1.0 / (1.0 + np.exp(-np.where(mixed["version"] == 1, new[mixed["p"]], old[mixed["p"]])))
        ratio = np.where(mixed["go"], p_new / p_b, (1 - p_new) / (1 - p_b))
        prefix = _prefix_products(mixed["episode"], ratio)
        for name in estimators:
            params = cfg.params.get(name, {})
            values = _values(cfg, new, float(params.get("gamma", 1.0)))
            adv_on = ESTIMATORS[name](_table(on, "ignore", values), **params)
            grads.setdefault((name, "on"), []).append(_gradient(cfg, on, adv_on, np.ones(adv_on.size), new))
            for mode in modes:
                adv = ESTIMATORS[name](_table(mixed, mode, values), **params)
                w = np.ones(adv.size) if mode == "ignore" else prefix if mode == "prefix_is" else ratio
                grads.setdefault((name, mode), []).append(_gradient(cfg, mixed, adv, w, new))
    out: dict[str, Any] = {}
    for name in estimators:
        ref = np.array(grads[(name, "on")])
        out[name] = {}
        for mode in modes:
            g = np.array(grads[(name, mode)])
            m, r = g.mean(0), ref.mean(0)
            scale = float(m @ r / max(m @ m, 1e-300))
            resid = scale * m - r
            se = np.sqrt(scale**2 * g.var(0, ddof=1) / len(g) + ref.var(0, ddof=1) / len(ref))
            out[name][mode] = {"raw_bias": float(np.linalg.norm(m - r) / np.linalg.norm(r)),
                               "raw_z": float(np.max(np.abs(m - r) / np.maximum(np.sqrt(g.var(0, ddof=1) / len(g) + ref.var(0, ddof=1) / len(ref)), 1e-12))),
                               "rel_bias": float(np.linalg.norm(resid) / np.linalg.norm(r)),
                               "z": float(np.max(np.abs(resid) / np.maximum(se, 1e-12))), "scale": scale}
    return out
