"""Household: ALFWorld-style tasks in a generated text world (``turngym/Household-v0``)."""

from turngym.core.registry import register

register(
    "turngym/Household-v0",
    "turngym.envs.household.env:HouseholdEnv",
    description="ALFWorld-style household tasks (6 types) in generated rooms; goal-condition signals; seen split",
    max_turns=50,
    family="household",
    kwargs={"split": "seen"},
)
register(
    "turngym/Household-Unseen-v0",
    "turngym.envs.household.env:HouseholdEnv",
    description="ALFWorld-style household tasks, held-out goals in held-out layouts (out-of-distribution split)",
    max_turns=50,
    family="household",
    kwargs={"split": "unseen"},
)
