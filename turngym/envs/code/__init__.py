"""Code: function synthesis with hidden unit tests in a sandbox (``turngym/Code-v0``)."""

from turngym.core.registry import register

register(
    "turngym/Code-v0",
    "turngym.envs.code.env:CodeEnv",
    description="Write a Python function; hidden-test feedback each turn (pass rate, fixes, regressions); sandboxed",
    max_turns=8,
    family="code",
)
