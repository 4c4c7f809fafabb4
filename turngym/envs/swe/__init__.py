"""SWE: fix injected bugs in small real repositories with tools (``turngym/SWE-v0``)."""

from turngym.core.registry import register

__all__ = ["MAX_TURNS"]

#: The family's default turn budget: its registrations and ``SWEEnv.default_max_turns`` both read
#: this one number (it lives here, not on the class, because registering must not import the env module).
MAX_TURNS = 30

register(
    "turngym/SWE-v0",
    "turngym.envs.swe.env:SWEEnv",
    description="Fix an injected bug in a small real Python repo with JSON tools; FAIL_TO_PASS progress every turn",
    max_turns=MAX_TURNS,
    family="swe",
)
