"""Dense integer codes for id columns (episode, group, state, node ids of any hashable type).

Trainers key episodes, groups and states by strings (uuids, state hashes). Turning a million
of them into codes with a Python dict loop costs about as much as every estimator together,
so the work is done in as few per-object passes as possible:

1. **Same object ⇒ same id.** Rows usually repeat the *same* Python object (an episode's uuid
   is appended once per turn). An object array is an array of pointers; those are read as
   integers (no per-row Python call) and deduplicated numerically, leaving one representative
   per distinct object.
2. **Equal values ⇒ same id.** The representatives, in address order, go through one dict:
   ``map(seen.setdefault, objects, count())`` is a loop in C (no Python frame per row) that
   hashes each object, compares it with the ids already seen and returns the row where its
   value first appeared. Equality is the dict's own, so a hash collision can never merge two
   different ids and an id unequal to itself (a NaN) behaves as it would as a dict key.

With ``ordered=True`` (the default) the codes are then renumbered in order of first appearance,
so they do not depend on memory layout; grouping alone can skip that pass.
"""

from __future__ import annotations

import ctypes
from itertools import count
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError

__all__ = ["IdError", "factorize"]


_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], np.uint8)


class IdError(ConfigError):
    """An id column cannot be turned into codes (not 1-D, unhashable values)."""


def factorize(values: Any, column: str, *, ordered: bool = True) -> np.ndarray:
    """Dense int64 codes for arbitrary hashable ids: equal ids ⇔ equal codes.

    Ints of moderate range take a lookup table (O(n)), other ints a radix sort, strings and other
    objects the two steps of the module docstring. ``ordered``: number string and object ids
    in order of first appearance (ints: in increasing order); without it the numbering of
    object ids follows where they lie in memory (the partition into equal ids is the same),
    which grouping alone does not mind and which saves a pass.
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
    """Codes in increasing order of value: a lookup table when the range is at most about
    ``spread`` times the number of values (O(n), no sort), else a radix sort.

    A code is the number of distinct values below it: a running sum over the table when it is
    dense, and over its packed bytes (popcounts) when it is sparse, so a wide table costs one
    pass over ``range / 8`` bytes rather than a sum over every entry.
    """
    lo, hi = int(arr.min()), int(arr.max())
    size = hi - lo + 1
    if size > spread * arr.size + 1024:
        if size <= 2**48:
            return _radix_ranks(arr - lo, size)
        return np.unique(arr, return_inverse=True)[1].reshape(-1).astype(np.int64, copy=False)
    off = arr - lo
    present = np.zeros(size, np.bool_)
    present[off] = True
    if size <= 8 * arr.size + 1024:
        dense = np.cumsum(present, dtype=np.int32 if size < 2**31 else np.int64)
        return dense[off].astype(np.int64) - 1
    bits = np.packbits(present, bitorder="little")
    upto = np.cumsum(_POPCOUNT[bits], dtype=np.int64)  # distinct values up to the end of each byte
    byte = off >> 3
    return upto[byte] - _POPCOUNT[bits[byte] >> (off & 7).astype(np.uint8)]  # less those from this one on


def _radix_ranks(off: np.ndarray, size: int) -> np.ndarray:
    """Dense ranks of non-negative ints below ``size`` by an LSD radix sort on 16-bit digits.

    NumPy sorts 16-bit keys stably by counting (O(n)), so a few passes over the digits beat
    its comparison sort of 64-bit keys several times over on a million rows.
    """
    order = np.argsort(off.astype(np.uint16), kind="stable")  # astype keeps the low 16 bits
    for shift in range(16, (size - 1).bit_length(), 16):
        order = order[np.argsort((off[order] >> shift).astype(np.uint16), kind="stable")]
    ranked = off[order]
    new = np.empty(off.size, np.bool_)
    new[0] = True
    np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
    codes = np.empty(off.size, np.int64)
    codes[order] = np.cumsum(new) - 1
    return codes


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
    memory order, so the dict pass streams through memory instead of jumping to a random
    object on every row (the cache misses, not the hashing, dominate a permuted column).
    """
    n = arr.size
    ptr = np.ctypeslib.as_array((ctypes.c_uint64 * n).from_address(arr.ctypes.data)).view(np.int64)
    off = ptr - ptr.min()  # user-space addresses are below 2**63
    common = int(np.bitwise_or.reduce(off))
    off >>= min((common & -common).bit_length() - 1, 6) if common else 0  # the addresses' shared alignment
    rank = _dense_ints(off, spread=32)  # addresses: a few bits of table per object beat a sort
    row = np.empty(int(rank.max()) + 1, np.int64)
    row[rank] = np.arange(n)  # any row holding the object will do
    return row, rank


def _factorize_objects(arr: np.ndarray) -> np.ndarray:
    """Dense codes (in address order of each id's first object) for an object array."""
    objects, rank = _by_address(arr)
    items = arr[objects].tolist()
    seen: dict[Any, int] = {}
    first = np.fromiter(map(seen.setdefault, items, count()), np.int64, len(items))
    return _dense_ints(first)[rank]
