"""Canonical, flat views of a tool backend's state: for state keys and DB-diff potentials.

A backend's state is a tree of Python objects (BFCL's ``GorillaFileSystem`` holds
``Directory`` objects holding ``File`` objects; the store holds nested dicts). :func:`flatten`
walks it once and returns two ``{path: leaf}`` dicts:

* ``public`` — what BFCL's state checker compares: attributes not starting with ``_``. The
  DB-diff potential counts differing paths here.
* ``private`` — the rest (the file system's current directory, a backend's RNG state, the
  store's authenticated session). Equal *worlds* may differ here, but the agent's future
  does, so the state key includes it.

Rules that keep the view canonical: dict keys are sorted; sets become sorted tuples; an
attribute named ``parent`` is skipped (the file system's back-reference, a cycle that BFCL's
``Directory.__eq__`` ignores too); an object reached twice is written as ``@first/path``;
wall-clock values (``datetime``) and ``_api_description`` strings are skipped (the former
differ between two replays of the same calls, the latter never change).
"""

from __future__ import annotations

import datetime
import random
from collections.abc import Mapping
from typing import Any

from turngym.core.hashing import state_hash

__all__ = ["FlatState", "flatten", "diff_count", "flat_key"]

FlatState = dict[str, Any]

_SCALARS = (str, int, float, bool, type(None))
_SKIP_ATTRS = frozenset({"parent", "_api_description"})


def flatten(roots: Mapping[str, Any]) -> tuple[FlatState, FlatState]:
    """Flatten named state roots into ``(public, private)`` path → leaf dicts.

    >>> pub, priv = flatten({"db": {"b": [1, 2], "a": {"x": None}}, "_session": "alice"})
    >>> pub
    {'db/a/x': None, 'db/b[0]': 1, 'db/b[1]': 2}
    >>> priv
    {'_session': 'alice'}
    """
    public: FlatState = {}
    private: FlatState = {}
    seen: dict[int, str] = {}
    for name in sorted(roots):
        target = private if name.startswith("_") else public
        _walk(roots[name], name, target, private, seen)
    return public, private


def _walk(obj: Any, path: str, out: FlatState, private: FlatState, seen: dict[int, str]) -> None:
    if isinstance(obj, _SCALARS):
        out[path] = obj
        return
    if isinstance(obj, (datetime.datetime, datetime.date, datetime.time)):
        return
    if isinstance(obj, random.Random):
        out[path] = state_hash(obj.getstate())
        return
    if isinstance(obj, (dict, list, tuple, set, frozenset)) or hasattr(obj, "__dict__"):
        first = seen.get(id(obj))
        if first is not None:
            out[path] = "@" + first
            return
        seen[id(obj)] = path
    if isinstance(obj, dict):
        if not obj:
            out[path] = "{}"
            return
        for key in sorted(obj, key=repr):
            _walk(obj[key], f"{path}/{key}", out, private, seen)
    elif isinstance(obj, (list, tuple)):
        if not obj:
            out[path] = "[]"
            return
        for i, item in enumerate(obj):
            _walk(item, f"{path}[{i}]", out, private, seen)
    elif isinstance(obj, (set, frozenset)):
        out[path] = tuple(sorted(repr(x) for x in obj))
    elif hasattr(obj, "__dict__"):
        for attr, value in vars(obj).items():
            if attr in _SKIP_ATTRS:
                continue
            target = private if attr.startswith("_") else out
            _walk(value, f"{path}.{attr}", target, private, seen)
    else:  # an opaque value: its repr is the best canonical form available
        out[path] = repr(obj)


def diff_count(a: FlatState, b: FlatState) -> int:
    """How many paths differ between two flat states (present in one only, or unequal).

    >>> diff_count({"x": 1, "y": 2}, {"x": 1, "y": 3, "z": 0})
    2
    """
    if len(a) > len(b):
        a, b = b, a
    n = sum(1 for k, v in a.items() if k not in b or b[k] != v)
    return n + sum(1 for k in b if k not in a)


def flat_key(*parts: Any) -> str:
    """A state key from flat states and scalars (dicts hashed in their canonical order)."""
    return state_hash(repr(tuple(tuple(sorted(p.items(), key=_first)) if isinstance(p, dict) else p for p in parts)))


def _first(item: tuple[str, Any]) -> str:
    return item[0]
