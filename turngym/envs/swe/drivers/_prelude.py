"""What every hidden-case driver shares. In the grader it travels as text ahead of the driver's
own (in place of the driver's import line, :data:`IMPORT_LINE`): drivers run there without turngym.
"""


class Raised(list):
    """What an operation raised (a list, so it travels as JSON; told apart from results by its type)."""


def _try(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the package's exception is part of what it does
        return Raised(["!", type(exc).__name__, str(exc)[:200]])
