"""Household: ALFWorld-style tasks in a generated text world (``turngym/Household-v0``)."""

from turngym.core.registry import register

__all__ = ["MAX_TURNS"]

#: The family's default turn budget: its registrations and ``HouseholdEnv.default_max_turns`` both read
#: this one number (it lives here, not on the class, because registering must not import the env module).
MAX_TURNS = 50

register(
    "turngym/Household-v0",
    "turngym.envs.household.env:HouseholdEnv",
    description="ALFWorld-style household tasks (6 types) in generated rooms; goal-condition signals; seen split",
    max_turns=MAX_TURNS,
    family="household",
    kwargs={"split": "seen"},
)
register(
    "turngym/Household-Unseen-v0",
    "turngym.envs.household.env:HouseholdEnv",
    description="ALFWorld-style household tasks, held-out goals in held-out layouts (out-of-distribution split)",
    max_turns=MAX_TURNS,
    family="household",
    kwargs={"split": "unseen"},
)
