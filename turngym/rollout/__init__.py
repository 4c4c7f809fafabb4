"""Rollouts: run envs in lockstep with a policy (groups, per-turn branching, trees) wherever the envs
live (steppers), record turns with their token ids, summarize episodes, and flatten them into a turn table."""

from turngym.rollout.metrics import EvalSummary, check_infra_error_rate, summarize, wilson_interval
from turngym.rollout.runner import run_episodes
from turngym.rollout.steppers import LocalStepper, RemoteStepper, Stepper
from turngym.rollout.table import to_turn_table
from turngym.rollout.tree import TreeRollout, run_tree
from turngym.rollout.types import Episode, Turn, group_id, load_episodes, save_episodes

__all__ = [
    "Episode",
    "EvalSummary",
    "LocalStepper",
    "RemoteStepper",
    "Stepper",
    "TreeRollout",
    "Turn",
    "check_infra_error_rate",
    "group_id",
    "load_episodes",
    "run_episodes",
    "run_tree",
    "save_episodes",
    "summarize",
    "to_turn_table",
    "wilson_interval",
]
