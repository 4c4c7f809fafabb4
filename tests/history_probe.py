"""Plays fixed episodes of every registered env, after no history or after a lot of it.

Run by ``tests/test_history_independence.py`` in two fresh interpreters::

    python tests/history_probe.py clean OUT.json   # the fixed episodes only
    python tests/history_probe.py dirty OUT.json   # noise in every env first, then the same

Determinism means "same seed + same actions => same episode" whatever ran before in the
process. The *noise* is what a training or eval process does between two episodes: random,
garbage and oracle episodes of every env, and the BFCL calls that once leaked (issue 31:
``post_tweet`` without ``mentions`` then ``mention``, which extended Python's default list for
the whole process). After it the fixed episodes are played twice, on a fresh env and on the
env that played the noise, and written out for the test to compare with the clean run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import turngym  # noqa: E402

#: Steps per episode, at most: enough to reach every env's outcome with the oracle.
MAX_STEPS = 40
#: Turns of a random episode: enough to exercise the tools; fewer where each edit runs tests in
#: a sandbox (seconds a step), so the whole probe stays within seconds.
RANDOM_STEPS = 12
_RANDOM_STEPS = {"turngym/SWE-v0": 3, "turngym/Code-v0": 4}
_NOISE_RANDOM_EPISODES = {"turngym/SWE-v0": 1}
#: The BFCL task of each category whose gold posts a tweet without ``mentions``.
_TWEET_TASK = {"base": "multi_turn_base_5", "long_context": "multi_turn_long_context_5",
               "miss_func": "multi_turn_miss_func_5", "miss_param": "multi_turn_miss_param_5"}
_GARBAGE = ("", "\x00\x01", "{", '{"name": 1}', "[[[", "search[" * 50, "<tool_call>{}</tool_call>", "🙂" * 30)


def _bfcl_category(env: Any) -> str | None:
    """The BFCL category this env serves first (None if it has no BFCL tasks)."""
    tasks = getattr(env.unwrapped, "_bfcl_tasks", None)
    return tasks[0].category if tasks else None


def fixed_episodes(env_id: str) -> list[dict[str, Any]]:
    """The episodes compared across processes: seeded oracle and seeded random play, and for
    BFCL the task whose gold posts a tweet without mentions."""
    specs: list[dict[str, Any]] = [
        {"seed": 1234, "policy": "oracle"},
        {"seed": 99, "policy": "random", "agent_seed": 3},
    ]
    category = _bfcl_category(turngym.make(env_id))
    if category is not None:
        specs.append({"seed": 0, "task": f"bfcl/{_TWEET_TASK[category]}", "policy": "oracle"})
    return specs


def play(env: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """One episode as a transcript of everything the env emitted."""
    options = {"task": spec["task"]} if "task" in spec else None
    obs, info = env.reset(seed=spec["seed"], options=options)
    rng = np.random.default_rng(spec.get("agent_seed", 0))
    steps: list[list[Any]] = []
    transcript = {"spec": spec, "obs": obs, "state_key": info.get("state_key"), "steps": steps}
    limit = MAX_STEPS if spec["policy"] == "oracle" else _RANDOM_STEPS.get(env.spec.id, RANDOM_STEPS)
    for _ in range(limit):
        base = env.unwrapped
        action = base.oracle_action() if spec["policy"] == "oracle" else base.sample_action(rng)
        obs, reward, terminated, truncated, info = env.step(action)
        steps.append([action, obs, reward, terminated, truncated, info.get("state_key"), info.get("signals"),
                      info.get("action_valid"), info.get("outcome"), info.get("infra_error")])
        if terminated or truncated:
            break
    return transcript


def _noise(env: Any, env_id: str) -> None:
    """Random, garbage and oracle episodes, then the BFCL calls that leaked (issue 31)."""
    rng = np.random.default_rng(7)
    for seed in range(_NOISE_RANDOM_EPISODES.get(env_id, 3)):
        play(env, {"seed": 500 + seed, "policy": "random", "agent_seed": seed})
    env.reset(seed=600)
    for text in _GARBAGE:
        *_, terminated, truncated, _ = env.step(text)
        if terminated or truncated:
            env.reset(seed=int(rng.integers(1000)))
    for seed in (700, 701):
        play(env, {"seed": seed, "policy": "oracle"})
    category = _bfcl_category(env)
    if category is not None:
        _tweet_noise(env, f"bfcl/{_TWEET_TASK[category]}")


def _tweet_noise(env: Any, task_id: str) -> None:
    """Post a tweet with ``mentions`` omitted, then mention someone in it: before issue 31 this
    extended ``post_tweet``'s default list for every later tweet in the process."""
    env.reset(seed=0, options={"task": task_id})
    login = next(c for turn in env.unwrapped.task.gold for c in turn if c["name"] == "authenticate_twitter")
    obs, *_ = env.step(json.dumps([{"name": "authenticate_twitter", "arguments": login["arguments"]},
                                   {"name": "post_tweet", "arguments": {"content": "noise"}}]))
    response = json.loads(obs.split("<tool_response>")[2].split("</tool_response>")[0])
    tweet = json.loads(response["content"])
    env.step(json.dumps({"name": "mention", "arguments": {"tweet_id": tweet["id"], "mentioned_usernames": ["@noise"]}}))


def main(argv: list[str]) -> int:
    mode, out = argv
    env_ids = sorted(turngym.list_envs())
    result: dict[str, Any] = {}
    if mode == "clean":
        for env_id in env_ids:
            result[env_id] = [play(turngym.make(env_id), s) for s in fixed_episodes(env_id)]
    elif mode == "dirty":
        noisy = {env_id: turngym.make(env_id) for env_id in env_ids}
        for env_id, env in noisy.items():
            _noise(env, env_id)
        for env_id in env_ids:
            specs = fixed_episodes(env_id)
            result[env_id] = [play(turngym.make(env_id), s) for s in specs]
            result[env_id + " (after noise, same env)"] = [play(noisy[env_id], s) for s in specs]
    else:
        raise SystemExit(f"mode must be 'clean' or 'dirty', got {mode!r}")
    Path(out).write_text(json.dumps(result, default=repr, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
