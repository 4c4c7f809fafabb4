"""Pick a backend by name, or the best one this machine supports."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from turngym.core.errors import ConfigError
from turngym.sandbox.base import Sandbox
from turngym.sandbox.errors import SandboxUnavailable
from turngym.sandbox.limits import Limits

__all__ = ["make_sandbox", "available_backends", "BACKENDS", "BACKEND_CLASSES"]

#: Each backend name mapped to its class as ``"module:Class"``, in the order ``"auto"`` tries them.
#: Dispatch is by this table, never by an ``if/elif`` chain on names; the class is imported when
#: the backend is asked for, so ``import turngym.sandbox`` does not load the Docker backend.
BACKEND_CLASSES: dict[str, str] = {
    "bubblewrap": "turngym.sandbox.local:BubblewrapSandbox",
    "docker": "turngym.sandbox.docker:DockerSandbox",
    "rlimit": "turngym.sandbox.local:RlimitSandbox",
}

#: Backend names in the order ``"auto"`` tries them.
BACKENDS = tuple(BACKEND_CLASSES)


def _construct(name: str, limits: Limits | None, kwargs: dict[str, Any]) -> Sandbox:
    target = BACKEND_CLASSES.get(name)
    if target is None:
        raise ConfigError(f"unknown sandbox backend {name!r}; choose one of {('auto', *BACKENDS)} or pass a Sandbox")
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)(limits, **kwargs)


def make_sandbox(
    backend: str | Sandbox = "auto",
    limits: Limits | None = None,
    *,
    allow_unisolated: bool = True,
    **kwargs: Any,
) -> Sandbox:
    """A sandbox: ``"bubblewrap"``, ``"docker"``, ``"rlimit"``, or ``"auto"``.

    ``"auto"`` takes the first of :data:`BACKENDS` that works here. Falling all the way back to
    ``rlimit`` (not isolated) warns with :class:`~turngym.sandbox.errors.NotIsolatedWarning`;
    with ``allow_unisolated=False`` it raises :class:`SandboxUnavailable` instead.
    A :class:`Sandbox` instance is returned unchanged.
    """
    if isinstance(backend, Sandbox):
        return backend
    if backend != "auto":
        return _construct(backend, limits, kwargs)
    reasons = []
    for name in BACKENDS:
        if name == "rlimit" and not allow_unisolated:
            break
        try:
            return _construct(name, limits, kwargs if name != "docker" else {})
        except SandboxUnavailable as exc:
            reasons.append(f"{name}: {exc}")
    raise SandboxUnavailable("no isolated sandbox backend works here:\n  " + "\n  ".join(reasons))


def available_backends() -> dict[str, str | None]:
    """Each backend mapped to None (works here) or the reason it does not."""
    out: dict[str, str | None] = {}
    for name in BACKENDS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _construct(name, None, {}).close()
            out[name] = None
        except SandboxUnavailable as exc:
            out[name] = str(exc)
    return out
