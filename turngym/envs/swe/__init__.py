"""SWE: fix injected bugs in small real repositories with tools (``turngym/SWE-v0``)."""

from turngym.core.registry import register

register(
    "turngym/SWE-v0",
    "turngym.envs.swe.env:SWEEnv",
    description="Fix an injected bug in a small real Python repo with JSON tools; FAIL_TO_PASS progress every turn",
    max_turns=30,
    family="swe",
)
