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
The learned critic (:mod:`turngym.trainers.critic`, a separate tiny trunk with a value head)
is fitted first, on ``critic_repeats`` further group rollouts per task of the same policy (its
targets: their Monte Carlo returns-to-go), then scores the same rows with GAE over its values:
``critic_mc`` (λ = 1: ``G_t − V(s_t)``, unbiased whatever the critic) and ``critic_td`` (λ = 0:
``r_t + V(s_{t+1}) − V(s_t)``, low variance, as good as the critic). ``critic_value`` in each
shape's results says how well the critic's ``V(s)`` matches the Monte Carlo ``V(s)``.

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

from turngym.study.presets import study_model

__all__ = ["CRITIC_ESTIMATORS", "VarianceConfig", "VARIANCE_ESTIMATORS", "run_variance_study"]

VARIANCE_ESTIMATORS = ("grpo", "gigpo", "turn_grpo", "tree", "gae_grouped")
#: GAE over the learned critic's values: λ = 1 (Monte Carlo return − V) and λ = 0 (one-step TD).
CRITIC_ESTIMATORS = {"critic_mc": 1.0, "critic_td": 0.0}
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
    critic_steps: int = 150
    """Minibatches the learned critic is fitted for (0 = no critic estimators)."""
    critic_repeats: int = 4
    """Group rollouts per task the critic is fitted on (fresh ones, not the scored rows)."""
    critic_batch: int = 16
    critic_lr: float = 1e-3

    @classmethod
    def quick(cls) -> VarianceConfig:
        return cls(tasks=6, repeats=4, mc=16, critic_steps=8, critic_repeats=1)


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
    """Paths (root to leaf) of a branching rollout; each turn: node, parent, key, action, reward,
    the observation after it, and (first turn) ``obs0``, the task's first observation."""
    obs0, _ = env.reset(seed=task_seed)
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
                key = (task_seed, env.state_key(), env.turn)
                action = policy(env)
                obs, r, term, trunc, _ = env.step(action)
                turn = {"node": next(counter), "parent": parent, "key": key, "snap": snap, "action": action, "reward": float(r), "obs": str(obs)}
                if not turns:
                    turn["obs0"] = str(obs0)
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
    critic = _fit_critic(cfg, results) if cfg.critic_steps else None
    for shape, branching in shapes.items():
        # rows of every (task, repeat) rollout; estimators run per rollout (one group each)
        adv: dict[str, list[float]] = defaultdict(list)
        gt: list[float] = []
        sa: list[Any] = []
        v_true: list[float] = []
        rollouts: list[tuple[dict[str, list[Any]], list[list[dict[str, Any]]]]] = []
        turns_per_episode: list[int] = []
        for task in range(cfg.tasks):
            truth.env.reset(seed=task)
            for _ in range(cfg.repeats):
                paths = _rollout(env, policy, task, branching)
                rollouts.append(({}, paths))
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
                        v_true.append(truth.value(turn["key"], turn["snap"]))
                        gt.append(q - v_true[-1])
                        sa.append((turn["key"], turn["action"]))
                rollouts[-1][0].update(cols)
                for name in VARIANCE_ESTIMATORS:
                    adv[name].extend(compute_advantages(name, cols, **_PARAMS.get(name, {})).tolist())
        extra: dict[str, Any] = {}
        if critic is not None:
            values = _critic_values(critic, [path for _, paths in rollouts for path in paths])
            at = 0
            for cols, _ in rollouts:
                v = values[at : at + len(cols["reward"])]
                at += len(cols["reward"])
                for name, lam in CRITIC_ESTIMATORS.items():
                    adv[name].extend(compute_advantages("gae", {**cols, "value": v}, gamma=1.0, lam=lam).tolist())
            from turngym.trainers.critic import explained_variance

            extra["critic_value"] = {"ev_vs_mc_value": explained_variance(values, np.asarray(v_true)),
                                     "mae_vs_mc_value": float(np.mean(np.abs(values - np.asarray(v_true))))}
        results["shapes"][shape] = _score(adv, np.asarray(gt), sa) | {
            "rows": len(gt),
            "mean_turns": float(np.mean(turns_per_episode)),
            "branching": list(branching),
        } | extra
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


class _Critic:
    """A fitted learned critic with what it needs to read a path: model, renderer, pad id."""

    def __init__(self, critic: Any, model: Any, renderer: Any, pad_id: int) -> None:
        self.critic, self.model, self.renderer, self.pad_id = critic, model, renderer, pad_id


def _render_path(path: list[dict[str, Any]], renderer: Any) -> Any:
    """A path as the chat the policy would have seen (first observation, then action /
    observation pairs; no system prompt, like the study's tiny model), as a training sample."""
    from turngym.agents.render import TokenSample

    msgs = [{"role": "user", "content": path[0]["obs0"]}]
    for turn in path:
        msgs += [{"role": "assistant", "content": turn["action"]}, {"role": "user", "content": turn["obs"]}]
    out = renderer.render(msgs[:-1], [None] * len(path), train_text_actions=True)  # the last observation is after the last state
    return TokenSample(out.ids, out.mask, [0.0] * len(out.ids), dict(enumerate(out.spans)))


def _fit_critic(cfg: VarianceConfig, results: dict[str, Any]) -> _Critic:
    """Fit a separate tiny critic to Monte Carlo returns of fresh group rollouts of the policy
    (its own rollout RNG: the scored rollouts are the same with or without it)."""
    import torch
    from transformers import AutoTokenizer

    t0 = time.perf_counter()
    path = study_model()
    tok = AutoTokenizer.from_pretrained(path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model's matrices are too small for threads; on a busy machine they spin
    try:
        return _fit(cfg, results, path, tok, t0)
    finally:
        torch.set_num_threads(threads)


def _fit(cfg: VarianceConfig, results: dict[str, Any], path: Any, tok: Any, t0: float) -> _Critic:
    import torch
    from transformers import AutoModelForCausalLM

    import turngym
    from turngym.agents.render import ChatRenderer
    from turngym.trainers.critic import TurnCritic, fit_critic

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = AutoModelForCausalLM.from_pretrained(path)
        renderer = ChatRenderer(tok)
        env = turngym.make(cfg.env_id, **cfg.env_kwargs).unwrapped
        policy = _Policy(cfg.noise, np.random.default_rng([cfg.seed, 2]))
        paths = [p for task in range(cfg.tasks) for _ in range(cfg.critic_repeats) for p in _rollout(env, policy, task, (cfg.group_size,))]
        samples = [_render_path(p, renderer) for p in paths]
        returns = [np.cumsum([t["reward"] for t in p][::-1])[::-1] for p in paths]  # γ = 1 returns-to-go
        critic = TurnCritic(model, kind="separate", lr=cfg.critic_lr, seed=cfg.seed)
        losses = fit_critic(critic, model, samples, returns, steps=cfg.critic_steps, batch_size=cfg.critic_batch,
                            pad_id=tok.pad_token_id, seed=cfg.seed)
    results["critic_fit"] = {"episodes": len(paths), "steps": cfg.critic_steps, "loss_first": losses[0], "loss_last": float(np.mean(losses[-10:])),
                             "seconds": round(time.perf_counter() - t0, 1)}
    return _Critic(critic, model, renderer, tok.pad_token_id)


def _critic_values(c: _Critic, paths: list[list[dict[str, Any]]]) -> np.ndarray:
    """The critic's value of every turn's state, path by path, turns in order."""
    import torch

    samples = [_render_path(p, c.renderer) for p in paths]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        values = c.critic.values(c.model, samples, pad_id=c.pad_id, device="cpu", micro_batch_size=64)
    finally:
        torch.set_num_threads(threads)
    return np.concatenate(values) if values else np.zeros(0)
