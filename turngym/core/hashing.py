"""Canonical state keys.

GiGPO groups turns whose environment *states* are equal (anchor states); two turns may only
share a key if their states are truly equal. Keys are a short BLAKE2b digest of a canonical
representation the env builds from its state (never from the history).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["state_hash"]


def state_hash(state: Any) -> str:
    """Hash a canonical state description to a 16-hex-digit key.

    ``state`` should be built from sorted, primitive values (tuples, strs, ints, bools).
    Strings are hashed as-is; other values through ``repr`` (tuples, ints, bools and strs have
    stable reprs across runs, unlike ``hash()``), dicts through sorted JSON.

    >>> state_hash(("page", 3)) == state_hash(("page", 3))
    True
    >>> state_hash(("page", 3)) == state_hash(("page", 4))
    False
    """
    if isinstance(state, str):
        data = state
    elif isinstance(state, dict):
        data = json.dumps(state, sort_keys=True, default=repr)
    else:
        data = repr(state)
    return hashlib.blake2b(data.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
