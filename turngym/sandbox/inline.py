"""Ship stdlib-only modules into a program run as ``python -I -S -B -c <source>``.

Trusted programs inside a sandbox cannot import turngym (and must not: the sandbox's paths are
not the host's), so the modules they share travel as text, registered in ``sys.modules`` under a
private name before the program's own source runs. The shared ones are the toolkit of
:mod:`turngym.sandbox.inside`; :func:`inside_prelude` ships any of them.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

__all__ = ["INSIDE_MODULES", "inline_module", "inside_name", "inside_prelude"]

#: The toolkit's modules, each with the toolkit modules it imports (shipped before it).
INSIDE_MODULES: dict[str, tuple[str, ...]] = {"codec": (), "framing": (), "hardening": (), "pipes": ()}


def inline_module(name: str, source: str, filename: str, *, keep_loaded: bool = False) -> str:
    """Python source that makes ``source`` importable as the module ``name`` (its type is
    ``type(sys)``: importing ``types`` would cost a fresh interpreter's start ~0.3 ms).

    The code is compiled as ``<filename>``: a traceback through it never reads a file of that
    name, and the working dir, where such a name would be looked up, is the code under test's
    (a planted ``codec.py`` would show its own lines; a FIFO there would hang the grader).

    ``keep_loaded``: a module of that name already in ``sys.modules`` stays (no second compile).
    Only for modules whose every copy is the same trusted source, such as the toolkit's in a
    grader forked from the warm worker, which loaded them."""
    body = (f"_m = type(_s)({name!r})\n"
            f"exec(compile({source!r}, {'<' + filename + '>'!r}, 'exec'), _m.__dict__)\n"
            f"_s.modules[{name!r}] = _m\n"
            "del _m\n")
    if keep_loaded:
        body = f"if {name!r} not in _s.modules:\n" + "".join(f"    {line}\n" for line in body.splitlines())
    return "import sys as _s\n" + body + "del _s\n"


def inside_name(module: str) -> str:
    """The name a toolkit module has inside a sandbox: ``codec`` -> ``_turngym_inside_codec``."""
    return f"_turngym_inside_{module}"


def _ordered(modules: tuple[str, ...]) -> list[str]:
    """``modules`` and what they import, each after its dependencies, each once."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name not in INSIDE_MODULES:
            raise ValueError(f"no toolkit module {name!r} (there are {sorted(INSIDE_MODULES)})")
        if name not in order:
            for dep in INSIDE_MODULES[name]:
                visit(dep)
            order.append(name)

    for name in modules:
        visit(name)
    return order


@lru_cache(maxsize=32)
def inside_prelude(*modules: str) -> str:
    """Source that defines the named toolkit modules (and their dependencies), in dependency
    order, as ``_turngym_inside_<name>``: put it ahead of a program's source. A module the
    process already has (forked from the warm worker, which loads the toolkit) is kept."""
    pkg = resources.files("turngym.sandbox.inside")
    return "".join(inline_module(inside_name(m), pkg.joinpath(f"{m}.py").read_text(encoding="utf-8"), f"{m}.py",
                                 keep_loaded=True)
                   for m in _ordered(modules))
