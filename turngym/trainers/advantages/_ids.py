"""Dense integer codes for id columns (episode, group, state, node ids of any hashable type).

Trainers key episodes, groups and states by strings (uuids, state hashes). Turning a million
of them into codes with a Python dict loop costs about as much as every estimator together,
so the work is done in as few per-object passes as possible:

1. **Same object ⇒ same id.** Rows usually repeat the *same* Python object (an episode's uuid
   is appended once per turn). An object array is an array of pointers; those are read as
   integers (no per-row Python call) and deduplicated numerically, leaving one representative
   per distinct object.
2. **Equal hash and equal value ⇒ same id.** The representatives are grouped by Python's own
   hash (C, cached on ``str``) with a NumPy sort, and every one is compared with the first of
   its hash class, so a hash collision can never merge two different ids (it falls back to a
   dict).

Codes come out in order of first appearance, so they do not depend on memory layout.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError

__all__ = ["IdError", "factorize"]


class IdError(ConfigError):
    """An id column cannot be turned into codes (not 1-D, unhashable values)."""


def factorize(values: Any, column: str, *, ordered: bool = True) -> np.ndarray:
    """Dense int64 codes for arbitrary hashable ids: equal ids ⇔ equal codes.

    Ints of moderate range take a lookup table (O(n)), other ints a sort, strings and other
    objects the two steps of the module docstring. ``ordered``: number string and object ids
    in order of first appearance (ints: in increasing order); without it the numbering is
    arbitrary (but deterministic), which grouping alone does not mind and which saves a pass.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise IdError(f"column {column!r} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, np.int64)
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    if arr.dtype.kind in "iu":
        return _dense_ints(arr.astype(np.int64, copy=False))
    if arr.dtype.kind != "O":  # fixed-width numpy strings, floats...: a sort, then first-appearance order
        inverse = np.unique(arr, return_inverse=True)[1].reshape(-1).astype(np.int64, copy=False)
        return _first_appearance(inverse) if ordered else inverse
    try:
        codes = _factorize_objects(np.ascontiguousarray(arr))
        return _first_appearance(codes) if ordered else codes
    except TypeError as exc:
        raise IdError(f"column {column!r} holds unhashable ids ({exc}); use ints or strings") from exc


def _dense_ints(arr: np.ndarray, spread: int = 4) -> np.ndarray:
    """Codes in increasing order of value; a lookup table when the range is at most about
    ``spread`` times the number of values (O(n), no sort)."""
    lo, hi = int(arr.min()), int(arr.max())
    if hi - lo < spread * arr.size + 1024:
        present = np.zeros(hi - lo + 1, np.bool_)
        present[arr - lo] = True
        dense = np.cumsum(present, dtype=np.int32 if hi - lo < 2**31 else np.int64)
        return dense[arr - lo].astype(np.int64) - 1
    return np.unique(arr, return_inverse=True)[1].reshape(-1).astype(np.int64, copy=False)


def _first_appearance(codes: np.ndarray) -> np.ndarray:
    """Relabel dense codes so that they number ids in order of first appearance."""
    first = np.full(int(codes.max()) + 1, codes.size, np.int64)
    np.minimum.at(first, codes, np.arange(codes.size))
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first)] = np.arange(first.size)
    return rank[codes]


def _by_address(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(one row per distinct object in increasing address order, that object's index per row).

    Rows holding the same object collapse to one, and the objects that remain are visited in
    memory order, so the hash pass streams through memory instead of jumping to a random
    object on every row (the cache misses, not the hashing, dominate a permuted column).
    """
    n = arr.size
    ptr = np.ctypeslib.as_array((ctypes.c_uint64 * n).from_address(arr.ctypes.data)).astype(np.int64)
    off = ptr - int(ptr.min())
    common = int(np.bitwise_or.reduce(off))
    off >>= min((common & -common).bit_length() - 1, 6) if common else 0  # the addresses' shared alignment
    rank = _dense_ints(off, spread=32)  # addresses: a few bytes of table per object beat a sort
    row = np.empty(int(rank.max()) + 1, np.int64)
    row[rank] = np.arange(n)  # any row holding the object will do
    return row, rank


def _factorize_objects(arr: np.ndarray) -> np.ndarray:
    objects, rank = _by_address(arr)
    return _factorize_by_hash(arr[objects])[rank]


def _hash_classes(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(representative row per class, class per row) for equal int64 hashes.

    An open-addressing hash table in NumPy (linear probing, at most half full): each pass
    claims the free slots, settles every row whose slot holds its hash and moves the rest one
    slot on. O(n) per pass and few passes, about twice as fast as sorting the hashes.
    """
    n = h.size
    bits = max(10, (2 * n - 1).bit_length())
    mask = (1 << bits) - 1
    owner = np.full(mask + 1, -1, np.int64)
    slot_of = np.empty(n, np.int64)
    pending = np.arange(n)
    slot = (h ^ (h >> bits)) & mask
    while pending.size:
        free = owner[slot] < 0
        owner[slot[free]] = pending[free]  # any one of the rows claiming a slot wins it
        settled = h[owner[slot]] == h[pending]
        slot_of[pending[settled]] = slot[settled]
        pending, slot = pending[~settled], (slot[~settled] + 1) & mask
    used = np.flatnonzero(owner >= 0)
    code = np.empty(mask + 1, np.int64)
    code[used] = np.arange(used.size)
    return owner[used], code[slot_of]


def _factorize_by_hash(obj: np.ndarray) -> np.ndarray:
    """Dense codes (in no particular order) for an object array of hashable ids."""
    items = obj.tolist()
    n = len(items)
    rep, cls = _hash_classes(np.fromiter(map(hash, items), np.int64, n))
    if not bool(np.all(obj == obj[rep[cls]])):  # a hash collision (or ids unequal to themselves)
        seen: dict[Any, int] = {}
        return np.fromiter((seen.setdefault(v, len(seen)) for v in items), np.int64, n)
    return cls
