"""Code: function synthesis with hidden unit tests in a sandbox (``turngym/Code-v0``)."""

from turngym.core.registry import register

__all__ = ["MAX_TURNS"]

#: The family's default turn budget: its registrations and ``CodeEnv.default_max_turns`` both read
#: this one number (it lives here, not on the class, because registering must not import the env module).
MAX_TURNS = 8

register(
    "turngym/Code-v0",
    "turngym.envs.code.env:CodeEnv",
    description="Write a Python function; hidden-test feedback each turn (pass rate, fixes, regressions); sandboxed",
    max_turns=MAX_TURNS,
    family="code",
)
