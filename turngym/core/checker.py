"""``check_env``: does an env keep the turngym contract?

gymnasium's checker validates the API shape. This one validates what credit assignment
relies on: same seed + same actions ⇒ same episode (observations, rewards, signals, state
keys); ``snapshot`` → ``restore`` ⇒ the same continuation; every declared signal present and in
range on every turn; ``terminated`` and ``truncated`` never both true; ``outcome`` on the final
turn; the oracle reaches success; and no garbage action ever raises.
"""

from __future__ import annotations

import math
import string
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from turngym.core.env import INFO_KEYS, TurngymEnv
from turngym.core.errors import EnvCheckError

__all__ = ["check_env", "garbage_actions", "step_problems"]


def step_problems(env: Any, result: tuple[Any, ...]) -> list[str]:
    """What one ``step`` result breaks of the contract, whatever the action was (empty if nothing).

    The obs is text, the reward a finite float, an agent's action never an ``infra_error``, an
    invalid action says why, every declared signal is present and in range. Fuzzers call it on
    every step.
    """
    obs, reward, _terminated, _truncated, info = result
    problems = []
    if not isinstance(obs, str):
        problems.append(f"obs is {type(obs).__name__}")
    if not isinstance(reward, float) or not math.isfinite(reward):
        problems.append(f"reward {reward!r}")
    if info.get("infra_error"):
        problems.append(f"an agent's action caused an infra_error: {info['infra_error']}")
    if not info.get("action_valid", True) and not info.get("invalid_reason"):
        problems.append("invalid action without a reason")
    problems += [f"signal {v}" for v in env.reward_spec.violations(info.get("signals", {}))]
    return problems


def garbage_actions(rng: np.random.Generator, n: int) -> list[str]:
    """Adversarial actions: empty, huge, unicode, unbalanced tags, broken JSON, control chars."""
    fixed = [
        "",
        " ",
        "\x00\x01\x02",
        "<answer></answer>",
        "<answer>",
        "</answer>",
        "<<<>>>",
        "{",
        '{"name": 3}',
        '[{"name": "x", "arguments": "{bad"}]',
        "```python\n```",
        "```python\nwhile True: pass\n",
        "search[]",
        "click[]",
        "click[" + "x" * 500 + "]",
        "é漢字🙂" * 50,
        "A" * 20_000,
        "<calc>" + "9**" * 200 + "9</calc>",
        "<search>" + "q " * 1000 + "</search>",
        "go to nowhere 99",
        "\n\n\n",
    ]
    alphabet = list(string.printable + "<>[]{}\"'/")
    out = list(fixed)
    while len(out) < n:
        k = int(rng.integers(0, 80))
        out.append("".join(rng.choice(alphabet, size=k)))
    return out[:n]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


class _Checker:
    def __init__(self, env: TurngymEnv, seed: int, name: str) -> None:
        self.env = env
        self.seed = seed
        self.name = name
        self.failures: list[str] = []

    def fail(self, msg: str) -> None:
        if msg not in self.failures:
            self.failures.append(msg)

    # -- one rollout, recorded -----------------------------------------------------------
    def rollout(self, seed: int, policy: Callable[[int], str], max_steps: int) -> list[tuple[Any, ...]]:
        env = self.env
        obs, info = env.reset(seed=seed)
        trace: list[tuple[Any, ...]] = [("reset", obs, info.get("state_key"), info.get("task_id"))]
        for i in range(max_steps):
            action = policy(i)
            obs, reward, term, trunc, info = env.step(action)
            self.check_step(obs, reward, term, trunc, info)
            trace.append((action, obs, reward, term, trunc, dict(info["signals"]), info["state_key"]))
            if term or trunc:
                break
        return trace

    def check_step(self, obs: Any, reward: Any, term: Any, trunc: Any, info: dict[str, Any]) -> None:
        env = self.env
        if not isinstance(obs, str):
            self.fail(f"observation must be str, got {type(obs).__name__}")
        if not isinstance(reward, float) or not math.isfinite(reward):
            self.fail(f"reward must be a finite float, got {reward!r}")
        if not isinstance(term, bool) or not isinstance(trunc, bool):
            self.fail("terminated and truncated must be bools")
        if term and trunc:
            self.fail("terminated and truncated were both True on one turn")
        missing = [k for k in INFO_KEYS if k not in info]
        if missing:
            self.fail(f"info lacks {missing}")
            return
        for problem in env.reward_spec.violations(info["signals"]):
            self.fail(problem)
        if not isinstance(info["state_key"], str) or not info["state_key"]:
            self.fail(f"state_key must be a non-empty str, got {info['state_key']!r}")
        if info["action_valid"] is False and not info["invalid_reason"]:
            self.fail("action_valid=False without an invalid_reason")
        if (term or trunc) and "outcome" not in info:
            self.fail("the final turn's info lacks 'outcome'")
        if "outcome" in info and not (term or trunc):
            self.fail("info has 'outcome' on a non-final turn")
        if "outcome" in info:
            oc = info["outcome"]
            if not isinstance(oc, dict) or "reward" not in oc or "success" not in oc:
                self.fail(f"outcome must be a dict with 'reward' and 'success', got {oc!r}")
            else:
                self.check_outcome_reward(reward, oc, info)
        if info["turn"] > env.max_turns:
            self.fail(f"episode ran past max_turns={env.max_turns}")

    def check_outcome_reward(self, reward: Any, oc: dict[str, Any], info: dict[str, Any]) -> None:
        """The final turn's reward is the outcome's (plus the invalid-action penalty), counted once."""
        env = self.env
        lo, hi = env.reward_spec.outcome_range
        if not isinstance(oc["reward"], (int, float)) or not lo <= oc["reward"] <= hi:
            self.fail(f"outcome reward {oc['reward']!r} outside the declared outcome_range [{lo}, {hi}]")
            return
        penalty = getattr(env, "invalid_action_penalty", None)
        policy = getattr(env, "invalid_action_policy", None)
        if penalty is None or policy is None or not isinstance(reward, float):
            return  # a duck-typed env that does not say how it penalizes
        expected = float(oc["reward"])
        if info["action_valid"] is False and str(getattr(policy, "value", policy)) != "continue":
            expected += penalty
        if not math.isclose(reward, expected, rel_tol=1e-9, abs_tol=1e-9):
            self.fail(f"the final turn's reward {reward!r} is not the outcome's reward {oc['reward']!r} (+ penalty)")

    # -- the checks ------------------------------------------------------------------------
    def mixed_policy(self, rng: np.random.Generator) -> Callable[[int], str]:
        """Oracle most of the time, with random and garbage actions mixed in (deterministic)."""
        garbage = garbage_actions(rng, 32)

        def policy(i: int) -> str:
            u = rng.random()
            if u < 0.6:
                return self.env.oracle_action()
            if u < 0.85:
                return self.env.sample_action(rng)
            return garbage[int(rng.integers(len(garbage)))]

        return policy

    def determinism(self) -> None:
        env = self.env
        traces = []
        for _ in range(2):
            rng = np.random.default_rng(self.seed)
            traces.append(self.rollout(self.seed, self.mixed_policy(rng), env.max_turns))
        if traces[0] != traces[1]:
            where = next((i for i, (a, b) in enumerate(zip(traces[0], traces[1])) if a != b), len(traces[0]))
            self.fail(f"same seed and actions gave different episodes (first difference at turn {where})")
        env.reset(seed=self.seed + 1)
        other_key = env.reset(seed=self.seed + 1)[1]["state_key"]
        first_key = env.reset(seed=self.seed + 1)[1]["state_key"]
        if other_key != first_key:
            self.fail("reset(seed=s) twice gave different initial state keys")

    def snapshot_restore(self) -> None:
        env = self.env
        for branch_at in (0, 1, 2):
            rng = np.random.default_rng(self.seed + 7 + branch_at)
            env.reset(seed=self.seed + branch_at)
            policy = self.mixed_policy(rng)
            ended = False
            for i in range(branch_at):
                *_, term, trunc, _ = env.step(policy(i))
                if term or trunc:
                    ended = True
                    break
            if ended:
                continue
            snap = env.snapshot()
            key_before = env.state_key()
            actions = [policy(branch_at + j) for j in range(env.max_turns)]
            continuations = []
            for _ in range(2):
                env.restore(snap)
                if env.state_key() != key_before:
                    self.fail("restore() did not bring back the snapshot's state_key")
                trace = []
                for a in actions:
                    obs, reward, term, trunc, info = env.step(a)
                    trace.append((obs, reward, term, trunc, dict(info["signals"]), info["state_key"]))
                    if term or trunc:
                        break
                continuations.append(trace)
            if continuations[0] != continuations[1]:
                self.fail(f"snapshot at turn {branch_at} -> restore gave a different continuation")

    def oracle_succeeds(self, episodes: int) -> None:
        env = self.env
        for k in range(episodes):
            env.reset(seed=self.seed + 100 + k)
            info: dict[str, Any] = {}
            for _ in range(env.max_turns):
                *_, term, trunc, info = env.step(env.oracle_action())
                if term or trunc:
                    break
            oc = info.get("outcome", {})
            if not oc.get("success"):
                self.fail(f"oracle failed on seed {self.seed + 100 + k}: outcome={oc}")
                return

    def garbage(self, n: int) -> None:
        env = self.env
        rng = np.random.default_rng(self.seed + 99)
        actions = garbage_actions(rng, n // 2) + [env.sample_action(rng) for _ in range(n - n // 2)]
        env.reset(seed=self.seed)
        for a in actions:
            try:
                obs, reward, term, trunc, info = env.step(a)
            except Exception as exc:  # the point of the check: report, don't propagate
                self.fail(f"step({a[:40]!r}) raised {type(exc).__name__}: {exc}")
                env.reset(seed=self.seed)
                continue
            self.check_step(obs, reward, term, trunc, info)
            if term or trunc:
                env.reset()


def check_env(
    env: Any,
    *,
    seed: int = 0,
    n_garbage: int = 200,
    oracle_episodes: int = 3,
    gymnasium_checks: bool = True,
) -> None:
    """Verify the turngym contract; raise :class:`EnvCheckError` listing every violation.

    Args:
        env: a turngym env (wrappers are looked through) or a registered id.
        seed: base seed for the episodes the checker plays.
        n_garbage: how many random / adversarial actions to throw at ``step``.
        oracle_episodes: episodes the oracle must win.
        gymnasium_checks: also run ``gymnasium.utils.env_checker.check_env``.
    """
    if isinstance(env, str):
        from turngym.core.registry import make

        env = make(env)
    raw = getattr(env, "unwrapped", env)
    name = raw.spec.id if getattr(raw, "spec", None) is not None else type(raw).__name__
    if not isinstance(raw, TurngymEnv):
        # Remote envs and other duck-typed envs: they must still expose the same surface.
        for attr in ("reward_spec", "snapshot", "restore", "oracle_action", "sample_action", "max_turns"):
            if not hasattr(raw, attr):
                raise EnvCheckError(name, [f"env has no {attr!r}: not a turngym env"])
    checker = _Checker(raw, seed, name)
    checker.determinism()
    checker.snapshot_restore()
    checker.oracle_succeeds(oracle_episodes)
    checker.garbage(n_garbage)
    if gymnasium_checks:
        from gymnasium.utils.env_checker import check_env as gym_check_env

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                gym_check_env(raw, skip_render_check=False)
            except Exception as exc:  # gymnasium raises AssertionError/Error; report all alike
                checker.fail(f"gymnasium check_env: {type(exc).__name__}: {exc}")
    if checker.failures:
        raise EnvCheckError(name, checker.failures)
