"""Tools: multi-turn tool calling on stateful APIs, state-checked after every user turn.

``turngym/Tools-v0`` mixes both sources; ``Tools-Store-v0`` is our generated online store (no
extra dependency); the ``Tools-BFCL-*`` ids are BFCL v4 multi-turn and need
``pip install --no-deps "bfcl-eval==2026.3.23" mpmath``.
"""

from turngym.core.registry import register

__all__ = ["MAX_TURNS"]

#: The family's default turn budget: its registrations and ``ToolsEnv.default_max_turns`` both read
#: this one number (it lives here, not on the class, because registering must not import the env module).
MAX_TURNS = 40

_ENTRY = "turngym.envs.tools.env:ToolsEnv"

register(
    "turngym/Tools-v0",
    _ENTRY,
    description="Tool calling on stateful APIs: BFCL v4 multi-turn (800 tasks) + generated online store; per-turn state check",
    max_turns=MAX_TURNS,
    family="tools",
    kwargs={"sources": ("store", "bfcl")},
)
register(
    "turngym/Tools-Store-v0",
    _ENTRY,
    description="Generated online store (customers, orders, inventory, returns) with policy-enforcing JSON tools",
    max_turns=20,  # this id's own budget: the store tasks alone are shorter than the family default
    family="tools",
    kwargs={"sources": ("store",)},
)
register(
    "turngym/Tools-BFCL-v0",
    _ENTRY,
    description="BFCL v4 multi-turn, all 800 tasks, on BFCL's own backends (needs bfcl-eval)",
    max_turns=MAX_TURNS,
    family="tools",
    kwargs={"sources": ("bfcl",)},
)
for _name, _category in (
    ("Base", "base"),
    ("LongContext", "long_context"),
    ("MissFunc", "miss_func"),
    ("MissParam", "miss_param"),
):
    register(
        f"turngym/Tools-BFCL-{_name}-v0",
        _ENTRY,
        description=f"BFCL v4 multi-turn, {_category} subset (200 tasks; needs bfcl-eval)",
        max_turns=MAX_TURNS,
        family="tools",
        kwargs={"sources": ("bfcl",), "categories": (_category,)},
    )
