"""Pick a backend by name, or the best one this machine supports."""

from __future__ import annotations

from typing import Any

from turngym.core.errors import ConfigError
from turngym.sandbox.base import Sandbox
from turngym.sandbox.errors import SandboxUnavailable
from turngym.sandbox.limits import Limits

__all__ = ["make_sandbox", "available_backends", "BACKENDS"]

#: Backend names in the order ``"auto"`` tries them.
BACKENDS = ("bubblewrap", "docker", "rlimit")


def _construct(name: str, limits: Limits | None, kwargs: dict[str, Any]) -> Sandbox:
    if name == "bubblewrap":
        from turngym.sandbox.local import BubblewrapSandbox

        return BubblewrapSandbox(limits, **kwargs)
    if name == "docker":
        from turngym.sandbox.docker import DockerSandbox

        return DockerSandbox(limits, **kwargs)
    if name == "rlimit":
        from turngym.sandbox.local import RlimitSandbox

        return RlimitSandbox(limits, **kwargs)
    raise ConfigError(f"unknown sandbox backend {name!r}; choose one of {('auto', *BACKENDS)} or pass a Sandbox")


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
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _construct(name, None, {}).close()
            out[name] = None
        except SandboxUnavailable as exc:
            out[name] = str(exc)
    return out
