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


def factorize(values: Any, column: str) -> np.ndarray:
    """Dense int64 codes for arbitrary hashable ids: equal ids ⇔ equal codes.

    Non-negative ints of moderate range take a lookup table (O(n)); other ints a sort;
    strings and other objects the two steps of the module docstring.
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
        inverse = np.unique(arr, return_inverse=True)[1].reshape(-1)
        return _first_appearance(inverse.astype(np.int64, copy=False))
    try:
        return _factorize_objects(np.ascontiguousarray(arr))
    except TypeError as exc:
        raise IdError(f"column {column!r} holds unhashable ids ({exc}); use ints or strings") from exc


def _dense_ints(arr: np.ndarray) -> np.ndarray:
    """Codes in increasing order of value; a lookup table when the range is small."""
    lo, hi = int(arr.min()), int(arr.max())
    if hi - lo < 4 * arr.size + 1024:
        present = np.zeros(hi - lo + 1, np.int64)
        present[arr - lo] = 1
        return (np.cumsum(present) - 1)[arr - lo]
    return np.unique(arr, return_inverse=True)[1].reshape(-1).astype(np.int64, copy=False)


def _first_appearance(codes: np.ndarray) -> np.ndarray:
    """Relabel dense codes so that they number ids in order of first appearance."""
    first = np.full(int(codes.max()) + 1, codes.size, np.int64)
    np.minimum.at(first, codes, np.arange(codes.size))
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first)] = np.arange(first.size)
    return rank[codes]


def _pointer_codes(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(representative rows, code per row) grouping rows that hold the *same object*.

    Returns None when the objects are spread too far in memory for a lookup table (then the
    hash step alone is cheaper than a sort of the pointers).
    """
    n = arr.size
    ptr = np.ctypeslib.as_array((ctypes.c_uint64 * n).from_address(arr.ctypes.data)).astype(np.int64)
    lo = int(ptr.min())
    off = ptr - lo
    common = int(np.bitwise_or.reduce(off))
    shift = (common & -common).bit_length() - 1 if common else 0  # shared alignment of the addresses
    off >>= min(shift, 6)
    if int(off.max()) >= 4 * n + 1024:
        return None
    codes = _first_appearance(_dense_ints(off))
    first = np.full(int(codes.max()) + 1, n, np.int64)
    np.minimum.at(first, codes, np.arange(n))
    return first, codes


def _factorize_objects(arr: np.ndarray) -> np.ndarray:
    same = _pointer_codes(arr)
    if same is None:
        return _factorize_by_hash(arr)
    reps, codes = same
    if reps.size == arr.size:
        return _factorize_by_hash(arr)
    return _factorize_by_hash(arr[reps])[codes]


def _factorize_by_hash(obj: np.ndarray) -> np.ndarray:
    """Codes in order of first appearance for an object array of hashable ids."""
    items = obj.tolist()
    n = len(items)
    h = np.fromiter(map(hash, items), np.int64, n)
    order = np.argsort(h)
    new = np.empty(n, bool)
    new[0] = True
    sorted_h = h[order]
    np.not_equal(sorted_h[1:], sorted_h[:-1], out=new[1:])
    first = np.minimum.reduceat(order, np.flatnonzero(new))  # first row of each hash class
    inverse = np.empty(n, np.int64)
    inverse[order] = np.cumsum(new) - 1
    if not bool(np.all(obj == obj[first[inverse]])):  # a collision (or ids unequal to themselves)
        seen: dict[Any, int] = {}
        return np.fromiter((seen.setdefault(v, len(seen)) for v in items), np.int64, n)
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first)] = np.arange(first.size)
    return rank[inverse]
