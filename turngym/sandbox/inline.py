"""Ship a stdlib-only module into a program run as ``python -I -S -B -c <source>``.

Trusted programs inside a sandbox cannot import turngym (and must not: the sandbox's paths are
not the host's), so the few modules they share travel as text, registered in ``sys.modules``
under a private name before the program's own source runs.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

__all__ = ["inline_module", "privdrop_prelude"]


def inline_module(name: str, source: str, filename: str) -> str:
    """Python source that makes ``source`` importable as the module ``name``."""
    return (
        "import sys as _s, types as _t\n"
        f"_m = _t.ModuleType({name!r})\n"
        f"exec(compile({source!r}, {filename!r}, 'exec'), _m.__dict__)\n"
        f"_s.modules[{name!r}] = _m\n"
        "del _s, _t, _m\n"
    )


@lru_cache(maxsize=1)
def privdrop_prelude() -> str:
    """:mod:`turngym.sandbox.privdrop`, importable as ``_turngym_privdrop``."""
    text = resources.files("turngym.sandbox").joinpath("privdrop.py").read_text(encoding="utf-8")
    return inline_module("_turngym_privdrop", text, "privdrop.py")
