"""Half-open numeric intervals ``[start, end)`` and sets of them.

``Interval`` is immutable; ``IntervalSet`` keeps a sorted list of disjoint, non-adjacent
intervals, merging on insert, so membership and total length stay cheap.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

__all__ = ["Interval", "IntervalSet", "merge"]


@dataclass(frozen=True, order=True)
class Interval:
    start: float
    end: float

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"end {self.end} is before start {self.start}")

    @property
    def length(self) -> float:
        return self.end - self.start

    def is_empty(self) -> bool:
        return self.start == self.end

    def contains(self, x: float) -> bool:
        return self.start <= x < self.end

    def overlaps(self, other: Interval) -> bool:
        return self.start < other.end and other.start < self.end

    def touches(self, other: Interval) -> bool:
        """Overlapping or adjacent (sharing an endpoint)."""
        return self.start <= other.end and other.start <= self.end

    def intersection(self, other: Interval) -> Interval | None:
        lo, hi = max(self.start, other.start), min(self.end, other.end)
        if lo >= hi:
            return None
        return Interval(lo, hi)

    def hull(self, other: Interval) -> Interval:
        return Interval(min(self.start, other.start), max(self.end, other.end))

    def shift(self, delta: float) -> Interval:
        return Interval(self.start + delta, self.end + delta)

    def split(self, at: float) -> tuple[Interval, Interval]:
        if not self.start < at < self.end:
            raise ValueError(f"{at} is not strictly inside {self}")
        return Interval(self.start, at), Interval(at, self.end)


def merge(intervals: list[Interval]) -> list[Interval]:
    """Merge overlapping or adjacent intervals; the result is sorted and disjoint."""
    out: list[Interval] = []
    for iv in sorted(i for i in intervals if not i.is_empty()):
        if out and out[-1].touches(iv):
            out[-1] = out[-1].hull(iv)
        else:
            out.append(iv)
    return out


class IntervalSet:
    """A set of reals stored as sorted, disjoint intervals."""

    def __init__(self, intervals: list[Interval] | None = None) -> None:
        self._ivs = merge(list(intervals or []))

    def __iter__(self):
        return iter(self._ivs)

    def __len__(self) -> int:
        return len(self._ivs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IntervalSet) and self._ivs == other._ivs

    def __repr__(self) -> str:
        return f"IntervalSet({self._ivs!r})"

    @property
    def total_length(self) -> float:
        return sum(iv.length for iv in self._ivs)

    def add(self, iv: Interval) -> None:
        self._ivs = merge(self._ivs + [iv])

    def contains(self, x: float) -> bool:
        idx = bisect_right([iv.start for iv in self._ivs], x) - 1
        return idx >= 0 and self._ivs[idx].contains(x)

    def remove(self, cut: Interval) -> None:
        """Subtract ``cut`` from the set."""
        out: list[Interval] = []
        for iv in self._ivs:
            if not iv.overlaps(cut):
                out.append(iv)
                continue
            if iv.start < cut.start:
                out.append(Interval(iv.start, cut.start))
            if cut.end < iv.end:
                out.append(Interval(cut.end, iv.end))
        self._ivs = out

    def union(self, other: IntervalSet) -> IntervalSet:
        return IntervalSet(self._ivs + other._ivs)

    def intersection(self, other: IntervalSet) -> IntervalSet:
        out: list[Interval] = []
        i = j = 0
        a, b = self._ivs, other._ivs
        while i < len(a) and j < len(b):
            hit = a[i].intersection(b[j])
            if hit is not None:
                out.append(hit)
            if a[i].end < b[j].end:
                i += 1
            else:
                j += 1
        return IntervalSet(out)

    def gaps(self, within: Interval) -> list[Interval]:
        """The parts of ``within`` not covered by the set."""
        out: list[Interval] = []
        cursor = within.start
        for iv in self._ivs:
            if iv.end <= cursor:
                continue
            if iv.start >= within.end:
                break
            if iv.start > cursor:
                out.append(Interval(cursor, iv.start))
            cursor = max(cursor, iv.end)
        if cursor < within.end:
            out.append(Interval(cursor, within.end))
        return out
