"""Claim 2 — do turn-level and tree baselines reduce advantage variance? (no training)

A fixed stochastic policy (the env's oracle, replaced by a random action with probability
``noise``) is rolled out on ``turngym/Math-v0`` in two shapes over the same tasks:

* ``group`` — G independent episodes sharing the initial state (what GRPO is built for);
* ``tree`` — a full tree of branch factor B and depth D from the initial state (every path is
  one episode; siblings share their whole prefix, the structure turn-GRPO and tree baselines
  are built for).

Every estimator (``grpo``, ``gigpo``, ``turn_grpo``, ``tree``, ``gae_grouped``) scores the
same turn rows. The ground truth of a row is the Monte Carlo advantage of its (state, action)
under the same policy, ``A*(s,a) = Q(s,a) − V(s)``, each estimated from ``mc`` fresh rollouts
from an env :meth:`~turngym.TurngymEnv.snapshot` (cached per state and per action). The
estimators differ in scale (most z-score), so each is first fitted to the truth by one
least-squares scale ``c`` (``c·Â ≈ A*``); then, over the rows of the same (task, state,
action) across ``repeats`` independent rollouts:

* ``variance`` — the within-(s,a) variance of ``c·Â`` (unbiased, pooled over the (s,a) pairs
  sampled at least twice): the noise of the estimator on the same state and action,
* ``mse`` — the mean of ``(c·Â − A*)²`` over all rows (``rel_mse``: divided by ``Var(A*)``;
  1 − ``corr``² for an estimator that is right up to scale), and ``corr``, the Pearson
  correlation of ``Â`` with ``A*`` over all rows.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["VarianceConfig", "VARIANCE_ESTIMATORS", "run_variance_study"]

VARIANCE_ESTIMATORS = ("grpo", "gigpo", "turn_grpo", "tree", "gae_grouped")
_PARAMS: dict[str, dict[str, Any]] = {"gigpo": {"gamma": 1.0}, "gae_grouped": {"gamma": 1.0, "lam": 1.0}}


@dataclass
class VarianceConfig:
    """One variance study; the defaults are the full run, :meth:`quick` the CI smoke test."""

    env_id: str = "turngym/Math-v0"
    env_kwargs: dict[str, Any] = field(default_factory=lambda: {"min_steps": 2, "max_steps": 3})
    noise: float = 0.35
    """Probability that a turn of the fixed policy is a random action instead of the oracle's."""
    tasks: int = 24
    repeats: int = 12
    """Independent rollouts (group or tree) per task: the samples of each (s,a)'s advantage."""
    group_size: int = 8
    branching: tuple[int, ...] = (2, 2, 2)
    """Tree shape; ``prod(branching)`` leaves = ``group_size`` keeps the budgets equal."""
    mc: int = 200
    """Monte Carlo rollouts per value estimate of the ground truth."""
    seed: int = 0

    @classmethod
    def quick(cls) -> VarianceConfig:
        return cls(tasks=6, repeats=4, mc=16)


class _Policy:
    """The fixed policy: oracle action, or with probability ``noise`` a random one."""

    def __init__(self, noise: float, rng: np.random.Generator) -> None:
        self.noise, self.rng = noise, rng

    def __call__(self, env: Any) -> str:
        return env.sample_action(self.rng) if self.rng.random() < self.noise else env.oracle_action()


class _Truth:
    """Monte Carlo V(s) and Q(s,a) of the fixed policy, from env snapshots, cached."""

    def __init__(self, env: Any, policy: _Policy, n: int) -> None:
        self.env, self.policy, self.n = env, policy, n
        self.v: dict[Any, float] = {}
        self.q: dict[Any, float] = {}

    def _play_out(self) -> float:
        total, done = 0.0, self.env.done
        while not done:
            _, r, term, trunc, _ = self.env.step(self.policy(self.env))
            total += float(r)
            done = term or trunc
        return total

    def value(self, key: Any, snap: Any) -> float:
        if key not in self.v:
            rets = []
            for _ in range(self.n):
                self.env.restore(snap)
                rets.append(self._play_out())
            self.v[key] = float(np.mean(rets))
        return self.v[key]

    def action_value(self, key: Any, snap: Any, action: str) -> float:
        if (key, action) not in self.q:
            rets = []
            for _ in range(self.n):
                self.env.restore(snap)
                _, r, term, trunc, _ = self.env.step(action)
                rets.append(float(r) + (0.0 if (term or trunc) else self._play_out()))
            self.q[key, action] = float(np.mean(rets))
        return self.q[key, action]


def _rollout(env: Any, policy: _Policy, task_seed: int, branching: tuple[int, ...]) -> list[list[dict[str, Any]]]:
    """Paths (root to leaf) of a branching rollout; each turn: node, parent, key, action, reward."""
    env.reset(seed=task_seed)
    counter = iter(range(10**9))
    frontier = [(env.snapshot(), [], -1)]  # (snapshot, turns so far, parent node)
    paths: list[list[dict[str, Any]]] = []
    depth = 0
    while frontier:
        nxt = []
        width = branching[depth] if depth < len(branching) else 1
        for snap, turns, parent in frontier:
            for _ in range(width):
                env.restore(snap)
                key = (task_seed, env._state_key(), env.turn)
                action = policy(env)
                _, r, term, trunc, _ = env.step(action)
                turn = {"node": next(counter), "parent": parent, "key": key, "snap": snap, "action": action, "reward": float(r)}
                if term or trunc:
                    paths.append([*turns, turn])
                else:
                    nxt.append((env.snapshot(), [*turns, turn], turn["node"]))
        frontier, depth = nxt, depth + 1
    return paths


def run_variance_study(cfg: VarianceConfig) -> dict[str, Any]:
    """Roll out, compute the Monte Carlo truth, score every estimator; returns the metrics."""
    import turngym
    from turngym.trainers.advantages import compute_advantages

    t0 = time.perf_counter()
    env = turngym.make(cfg.env_id, **cfg.env_kwargs).unwrapped
    rng = np.random.default_rng(cfg.seed)
    policy = _Policy(cfg.noise, rng)
    truth = _Truth(turngym.make(cfg.env_id, **cfg.env_kwargs).unwrapped, _Policy(cfg.noise, np.random.default_rng(cfg.seed + 1)), cfg.mc)
    shapes = {"group": (cfg.group_size,), "tree": tuple(cfg.branching)}
    results: dict[str, Any] = {"config": {**cfg.__dict__, "branching": list(cfg.branching)}, "shapes": {}}
    for shape, branching in shapes.items():
        # rows of every (task, repeat) rollout; estimators run per rollout (one group each)
        adv: dict[str, list[float]] = defaultdict(list)
        gt: list[float] = []
        sa: list[Any] = []
        turns_per_episode: list[int] = []
        for task in range(cfg.tasks):
            truth.env.reset(seed=task)
            for _ in range(cfg.repeats):
                paths = _rollout(env, policy, task, branching)
                cols: dict[str, list[Any]] = {k: [] for k in ("episode", "group", "turn", "reward", "state_before", "node", "parent")}
                for e, path in enumerate(paths):
                    turns_per_episode.append(len(path))
                    for t, turn in enumerate(path):
                        cols["episode"].append(e)
                        cols["group"].append(0)
                        cols["turn"].append(t)
                        cols["reward"].append(turn["reward"])
                        cols["state_before"].append(str(turn["key"][1:]))
                        cols["node"].append(turn["node"])
                        cols["parent"].append(turn["parent"] if turn["parent"] >= 0 else None)
                        q = truth.action_value(turn["key"], turn["snap"], turn["action"])
                        gt.append(q - truth.value(turn["key"], turn["snap"]))
                        sa.append((turn["key"], turn["action"]))
                for name in VARIANCE_ESTIMATORS:
                    adv[name].extend(compute_advantages(name, cols, **_PARAMS.get(name, {})).tolist())
        results["shapes"][shape] = _score(adv, np.asarray(gt), sa) | {
            "rows": len(gt),
            "mean_turns": float(np.mean(turns_per_episode)),
            "branching": list(branching),
        }
    results["seconds"] = round(time.perf_counter() - t0, 1)
    results["mc_states"] = len(truth.v)
    return results


def _score(adv: dict[str, list[float]], gt: np.ndarray, sa: list[Any]) -> dict[str, Any]:
    codes = {k: i for i, k in enumerate(dict.fromkeys(sa))}
    ids = np.array([codes[k] for k in sa])
    n_sa = len(codes)
    counts = np.bincount(ids, minlength=n_sa)
    var_gt = float(gt.var())
    out: dict[str, Any] = {"var_truth": var_gt, "estimators": {}}
    for name, values in adv.items():
        a = np.asarray(values)
        c = float(a @ gt / (a @ a)) if a @ a > 0 else 0.0
        x = c * a
        mse = float(np.mean((x - gt) ** 2))
        mean_sa = np.bincount(ids, weights=x, minlength=n_sa) / counts
        multi = counts[ids] >= 2  # (s,a) seen at least twice: within-(s,a) spread is estimable
        resid2 = (x - mean_sa[ids]) ** 2 * (counts[ids] / np.maximum(counts[ids] - 1, 1))
        variance = float(np.mean(resid2[multi])) if multi.any() else float("nan")
        corr = float(np.corrcoef(a, gt)[0, 1]) if a.std() > 0 and gt.std() > 0 else 0.0
        out["estimators"][name] = {
            "scale": c,
            "variance": variance,
            "mse": mse,
            "rel_mse": mse / var_gt if var_gt > 0 else float("nan"),
            "corr": corr,
            "zero_frac": float(np.mean(a == 0.0)),
        }
    return out
