"""Shared data for the viewer tests: real rollouts of a random agent, written like `turngym eval --out`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import turngym
from turngym.agents import RandomAgent
from turngym.rollout import run_episodes, save_episodes


@pytest.fixture(scope="session")
def eval_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("view_eval")
    eps = run_episodes(lambda: turngym.make("turngym/Math-v0"), RandomAgent(seed=0), list(range(6)), group_size=4, env_id="turngym/Math-v0")
    save_episodes(eps, out / "episodes.jsonl")
    rows = [{"phase": "eval", "step": 0, "success": 0.25}] + [
        {"phase": "rl", "step": s, "success": 0.1 * s, "mean_return": 0.2 * s, "invalid_rate": 0.5 - 0.05 * s} for s in range(1, 6)]
    (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out
