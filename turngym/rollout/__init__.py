"""Rollouts: run envs in lockstep with a policy, record turns, summarize episodes."""

from turngym.rollout.metrics import EvalSummary, summarize, wilson_interval
from turngym.rollout.runner import run_episodes
from turngym.rollout.types import Episode, Turn, load_episodes, save_episodes

__all__ = [
    "Episode",
    "EvalSummary",
    "Turn",
    "load_episodes",
    "run_episodes",
    "save_episodes",
    "summarize",
    "wilson_interval",
]
