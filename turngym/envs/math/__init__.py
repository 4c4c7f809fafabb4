"""Math: multi-step word problems with a calculator tool (``turngym/Math-v0``)."""

from turngym.core.registry import register

__all__ = ["MAX_TURNS"]

#: The family's default turn budget: its registrations and ``MathEnv.default_max_turns`` both read
#: this one number (it lives here, not on the class, because registering must not import the env module).
MAX_TURNS = 10

register(
    "turngym/Math-v0",
    "turngym.envs.math.env:MathEnv",
    description="Multi-step word problems (1-6 steps) with a safe calculator tool; gold intermediate values as signals",
    max_turns=MAX_TURNS,
    family="math",
)
