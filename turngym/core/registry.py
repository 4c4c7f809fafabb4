"""Env ids: registration, ``make`` with "did you mean", and listing.

Ids follow gymnasium's ``namespace/Name-vN`` form and are registered with gymnasium too, so
``gymnasium.make("turngym/Math-v0")`` and ``turngym.make("turngym/Math-v0")`` both work.
Entry points are ``"module:Class"`` strings: registering an env imports nothing, which keeps
``import turngym`` fast and free of heavy dependencies (no torch, no bm25s).

Envs from other packages. A package registers its envs through the entry-point group
``turngym.envs`` (the convention gymnasium 0.26 used for ``gymnasium.envs``): each entry
point names a module (imported) or a ``module:function`` (called) that calls :func:`register`;
``turngym new-env NAME`` scaffolds such a package. They are loaded with the built-in envs, the
first time an id is looked up or listed, in every process (env servers, rollout workers) alike,
and :class:`EnvInfo` records the distribution that registered each id. Code that is not
installed as a package is named by ``$TURNGYM_IMPORT`` (comma-separated modules, imported the
same way; ``turngym --import MODULE`` sets it, so child processes see the same envs).

The difference between the two ``make``s: gymnasium wraps the env (order enforcing, passive
checker); :func:`make` returns the turngym env itself, so ``snapshot()``/``restore()`` and
``oracle_action()`` are directly reachable.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from turngym.core.errors import ConfigError, RegistrationError, UnknownEnvError
from turngym.core.truncation import WRAPPER_SPEC

__all__ = [
    "ENTRY_POINT_GROUP", "IMPORT_ENV_VAR", "EnvInfo", "env_info", "list_envs", "load_entry_point", "make", "register",
    "set_remote_factory", "unregister",
]

ENTRY_POINT_GROUP = "turngym.envs"
"""The entry-point group through which installed packages register envs."""
IMPORT_ENV_VAR = "TURNGYM_IMPORT"
"""Comma-separated modules imported before the first lookup (``turngym --import MODULE``)."""

_ID_RE = re.compile(r"^[a-z][a-z0-9_]*/[A-Z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*-v\d+$")
_ENTRY_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class EnvInfo:
    """What the registry knows about one env id."""

    id: str
    entry_point: str
    description: str
    max_turns: int
    family: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    package: str = "turngym"
    """Who registered the id: the distribution of an entry point, else the entry point's top-level
    package (``turngym`` for the built-in envs)."""


_REGISTRY: dict[str, EnvInfo] = {}
_registering_package: str | None = None  # set while an entry point of another package registers
_plugins_loaded = False
_imported: set[str] = set()  # modules of $TURNGYM_IMPORT already imported

#: ``make(id, remote=url)`` seam: the core knows only a factory ``(url, env_id, **kwargs) -> env``.
#: The env server's client installs it (:func:`set_remote_factory`, on import of its module,
#: named here so that ``make(remote=...)`` works without importing it first); the core never
#: imports server code otherwise, and another transport can install its own factory.
_REMOTE_PROVIDER = "turngym.server.client"
_remote_factory: Callable[..., Any] | None = None


def set_remote_factory(factory: Callable[..., Any]) -> None:
    """Install what ``make(env_id, remote=url, **kwargs)`` calls as ``factory(url, env_id, **kwargs)``."""
    global _remote_factory
    _remote_factory = factory


def register(
    id: str,
    entry_point: str,
    *,
    description: str,
    max_turns: int,
    family: str,
    kwargs: dict[str, Any] | None = None,
) -> None:
    """Register an env id (idempotent for an identical registration).

    Args:
        id: ``namespace/Name-vN`` (``turngym/`` for the built-in envs; a package uses its own).
        entry_point: ``"package.module:ClassName"``, imported lazily on ``make``.
        description: one line shown by ``turngym envs``.
        max_turns: the default turn budget (passed to the env as ``max_turns``).
        family: the env family (``math``, ``shop``…), used to pick agents and reports.
        kwargs: default constructor arguments; ``make(id, **overrides)`` overrides them.
    """
    if not _ID_RE.match(id):
        raise RegistrationError(f"env id {id!r} must look like 'turngym/Name-v0' (namespace/Name-vN)")
    if not _ENTRY_RE.match(entry_point):
        raise RegistrationError(f"entry point {entry_point!r} must look like 'package.module:ClassName'")
    info = EnvInfo(id, entry_point, description, max_turns, family, dict(kwargs or {}),
                   _registering_package or entry_point.split(".")[0].split(":")[0])
    old = _REGISTRY.get(id)
    if old is not None:
        if old == info:
            return
        raise RegistrationError(f"{id} is already registered with a different spec ({old.entry_point})")
    _REGISTRY[id] = info
    # outside gymnasium's TimeLimit (``gymnasium.make(id, max_episode_steps=N)``): the outcome arrives on its truncation too
    gym.register(id=id, entry_point=entry_point, kwargs={"max_turns": max_turns, **info.kwargs}, additional_wrappers=(WRAPPER_SPEC,))


def unregister(id: str) -> None:
    """Remove ``id`` from turngym's registry and gymnasium's (no-op if absent): for env ids that
    exist only for a while, such as a test double that suites iterating over every env must not meet."""
    _REGISTRY.pop(id, None)
    gym.registry.pop(id, None)


def _unknown(env_id: str) -> UnknownEnvError:
    close = difflib.get_close_matches(env_id, list(_REGISTRY), n=3, cutoff=0.5)
    if not close:  # also try the bare names, so "math" finds "turngym/Math-v0"
        lowered = {i.split("/")[-1].lower(): i for i in _REGISTRY}
        hits = difflib.get_close_matches(env_id.split("/")[-1].lower(), list(lowered), n=3, cutoff=0.4)
        close = [lowered[h] for h in hits]
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return UnknownEnvError(
        f"no env registered as {env_id!r}.{hint} Run `turngym envs` to list them; an env of your own registers "
        f"when its package is installed (entry point group {ENTRY_POINT_GROUP!r}) or its module is imported "
        f"(`turngym --import MODULE ...` or ${IMPORT_ENV_VAR}=MODULE)."
    )


def env_info(env_id: str) -> EnvInfo:
    """The registry entry for ``env_id`` (raises UnknownEnvError with suggestions)."""
    _ensure_builtin_envs()
    try:
        return _REGISTRY[env_id]
    except KeyError:
        raise _unknown(env_id) from None


def load_entry_point(entry_point: str) -> type:
    module, _, name = entry_point.partition(":")
    return getattr(importlib.import_module(module), name)


def make(env_id: str, *, remote: str | None = None, max_episode_steps: int | None = None, **kwargs: Any) -> Any:
    """Create the env registered as ``env_id``, unwrapped (snapshot/oracle reachable).

    Args:
        env_id: a registered id, e.g. ``"turngym/Math-v0"``.
        remote: URL of a turngym env server (``ws://host:port``) to run the env there instead.
        max_episode_steps: truncate every episode after this many steps, with the outcome, as
            ``gymnasium.make(id, max_episode_steps=N)`` does (the agent's ``max_turns`` is unchanged).
        **kwargs: constructor overrides (``max_turns=...``, family options).
    """
    info = env_info(env_id)
    if max_episode_steps is not None and (not isinstance(max_episode_steps, int) or max_episode_steps < 1):
        raise ConfigError(f"max_episode_steps must be a positive int, got {max_episode_steps!r}")
    if remote is not None:
        if max_episode_steps is not None:
            raise ConfigError("max_episode_steps applies to a local env; a remote env takes max_turns=N")
        if _remote_factory is None:
            importlib.import_module(_REMOTE_PROVIDER)  # installs the factory (see set_remote_factory)
        assert _remote_factory is not None, f"{_REMOTE_PROVIDER} did not call set_remote_factory"
        return _remote_factory(remote, env_id, **kwargs)
    cls = load_entry_point(info.entry_point)
    env = cls(**{"max_turns": info.max_turns, **info.kwargs, **kwargs})
    # gymnasium's convention: the spec records how this env was built, so that
    # ``env.spec.make()`` (and gymnasium's own tools) rebuild the same env, overrides included.
    spec = gym.spec(env_id)
    env.spec = dataclasses.replace(spec, kwargs={**spec.kwargs, **kwargs},
                                   max_episode_steps=max_episode_steps if max_episode_steps is not None else spec.max_episode_steps)
    env.max_episode_steps = max_episode_steps
    return env


def list_envs() -> dict[str, str]:
    """Every registered id mapped to its one-line description, sorted by id."""
    _ensure_builtin_envs()
    return {i: _REGISTRY[i].description for i in sorted(_REGISTRY)}


def _ensure_builtin_envs() -> None:
    importlib.import_module("turngym.envs")  # registers every built-in family on first import
    if not _plugins_loaded:
        load_plugins()
    _import_modules()


def load_plugins() -> list[str]:
    """Load every ``turngym.envs`` entry point (once per process), then ``$TURNGYM_IMPORT``'s modules.

    A plugin that fails to load raises :class:`RegistrationError` naming the package and the
    fix: a broken third-party package must not look like a missing env.

    Returns:
        The entry points loaded (``distribution:value``).
    """
    global _plugins_loaded, _registering_package
    _plugins_loaded = True  # first: a plugin that looks an id up while it loads must not load them all again
    loaded: list[str] = []
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = ep.dist.name if ep.dist is not None else ep.name
        _registering_package = dist
        try:
            target = ep.load()
            if callable(target) and ":" in ep.value:
                target()
        except Exception as exc:
            _plugins_loaded = False  # the next lookup says so again, instead of missing this package's envs
            raise RegistrationError(
                f"the env package {dist!r} failed to register its envs (entry point {ep.name} = {ep.value!r} "
                f"in group {ENTRY_POINT_GROUP!r}): {type(exc).__name__}: {exc}. Fix or uninstall it (pip uninstall {dist})."
            ) from exc
        finally:
            _registering_package = None
        loaded.append(f"{dist}:{ep.value}")
    _import_modules()
    return loaded


def _import_modules() -> None:
    """Import the modules ``$TURNGYM_IMPORT`` names that this process has not imported yet."""
    global _registering_package
    for module in filter(None, (m.strip() for m in os.environ.get(IMPORT_ENV_VAR, "").split(","))):
        if module in _imported:
            continue
        _imported.add(module)
        _registering_package = module
        try:
            importlib.import_module(module)
        except ImportError as exc:
            _imported.discard(module)  # the next lookup says so again, instead of missing its envs
            raise RegistrationError(
                f"cannot import {module!r} named by ${IMPORT_ENV_VAR} (or --import): {exc}. Put the module on "
                "PYTHONPATH (run from its folder) or install its package."
            ) from exc
        finally:
            _registering_package = None
