"""Math: multi-step word problems with a calculator tool (``turngym/Math-v0``)."""

from turngym.core.registry import register

register(
    "turngym/Math-v0",
    "turngym.envs.math.env:MathEnv",
    description="Multi-step word problems (1-6 steps) with a safe calculator tool; gold intermediate values as signals",
    max_turns=10,
    family="math",
)
