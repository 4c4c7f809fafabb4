"""A least-recently-used cache with statistics, optional TTL, and a memoizing decorator.

Entries live in an ``OrderedDict`` ordered from least to most recently used; ``get`` and
``put`` move an entry to the end, eviction pops from the front.
"""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

__all__ = ["LRUCache", "CacheStats", "memoize", "MISSING"]

MISSING = object()


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class LRUCache:
    """A bounded mapping that evicts the least recently used entry when full."""

    def __init__(self, capacity: int, ttl: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        if ttl is not None and ttl <= 0:
            raise ValueError("ttl must be positive")
        self.capacity = capacity
        self.ttl = ttl
        self._clock = clock
        self._data: OrderedDict[Hashable, tuple[Any, float]] = OrderedDict()
        self.stats = CacheStats()

    def __len__(self) -> int:
        self._purge_expired()
        return len(self._data)

    def __contains__(self, key: Hashable) -> bool:
        return self._live(key)

    def _expired(self, stamp: float) -> bool:
        return self.ttl is not None and self._clock() - stamp >= self.ttl

    def _live(self, key: Hashable) -> bool:
        item = self._data.get(key)
        if item is None:
            return False
        if self._expired(item[1]):
            del self._data[key]
            return False
        return True

    def _purge_expired(self) -> None:
        for key in [k for k, (_, stamp) in self._data.items() if self._expired(stamp)]:
            del self._data[key]

    def get(self, key: Hashable, default: Any = None) -> Any:
        if not self._live(key):
            self.stats.misses += 1
            return default
        self.stats.hits += 1
        self._data.move_to_end(key)
        return self._data[key][0]

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """Like ``get`` but without touching recency or statistics."""
        if not self._live(key):
            return default
        return self._data[key][0]

    def put(self, key: Hashable, value: Any) -> None:
        if key in self._data:
            self._data.move_to_end(key)
        self._data[key] = (value, self._clock() if self.ttl is not None else 0.0)
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)
            self.stats.evictions += 1

    def delete(self, key: Hashable) -> bool:
        return self._data.pop(key, MISSING) is not MISSING

    def keys(self) -> list[Hashable]:
        """Keys from least to most recently used."""
        self._purge_expired()
        return list(self._data)

    def resize(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)
            self.stats.evictions += 1

    def clear(self) -> None:
        self._data.clear()


def memoize(maxsize: int = 128) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Cache a function's results by its positional and keyword arguments."""

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        cache = LRUCache(maxsize)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = (args, tuple(sorted(kwargs.items())))
            value = cache.get(key, MISSING)
            if value is MISSING:
                value = fn(*args, **kwargs)
                cache.put(key, value)
            return value

        wrapper.cache = cache  # type: ignore[attr-defined]
        return wrapper

    return decorator
