"""Finished episodes: written to ``episodes.jsonl`` before the outcome is acknowledged, and the latest
kept in memory, within a byte budget, for ``GET /turngym/episodes``.

Why it is its own module: the attack round found three ways to lose or leak here. An episode was
closed *before* its record was serialized, so a record that failed to serialize (a lone surrogate
in ``info``) was never written and could not be re-reported; the in-memory listing serialized every
kept episode on each request, so that one bad record made ``GET /turngym/episodes`` answer 500 for
everyone; and up to 10,000 finished episodes were kept as Python objects whatever their size (six
outcomes with an 8 MB ``info`` grew the process by ~70 MB). Here a record is serialized once, to
text that is known to encode, appended to the file (a failed write is rolled back and raised, so
the caller leaves the episode open for a retry), and only then kept — as that text, evicting the
oldest past ``max_bytes`` or ``max_count``.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

from turngym.rollout.types import Episode

__all__ = ["FinishedLog", "episode_line"]


def episode_line(episode: Episode) -> str:
    """One episode as a JSON line that surely encodes as UTF-8 (non-ASCII kept readable; should a
    string of the proxy's own hold a lone surrogate, the line falls back to ``\\u`` escapes)."""
    data = episode.to_dict()
    line = json.dumps(data, ensure_ascii=False) + "\n"
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(data) + "\n"
    return line


class FinishedLog:
    """The finished-episode log: a file (optional) and a byte-bounded window of the latest records.

    Iterating yields :class:`Episode` objects (parsed back from the kept text), so code that read the
    old ``deque[Episode]`` keeps working; :meth:`text` is the listing, already serialized.
    """

    def __init__(self, path: Path | None, *, max_count: int, max_bytes: int) -> None:
        self.path = path
        self.max_count, self.max_bytes = int(max_count), int(max_bytes)
        self._lines: deque[str] = deque()
        self._bytes = 0
        self.evicted = 0
        """Records dropped from memory by the budget (they stay in the file)."""

    def commit(self, episodes: Iterable[Episode]) -> list[str]:
        """Write ``episodes`` to the file, then keep them; returns their lines. Raises ``OSError``
        when the file cannot take them, with the file as it was (nothing kept)."""
        lines = [episode_line(ep) for ep in episodes]
        if self.path is not None:
            data = "".join(lines).encode("utf-8")
            with open(self.path, "ab") as fh:
                start = fh.tell()
                try:
                    fh.write(data)
                    fh.flush()
                except OSError:
                    fh.truncate(start)  # no half record for a reader to choke on
                    raise
        for line in lines:
            self._lines.append(line)
            self._bytes += len(line)
        while self._lines and (self._bytes > self.max_bytes or len(self._lines) > self.max_count):
            self._bytes -= len(self._lines.popleft())
            self.evicted += 1
        return lines

    def text(self) -> str:
        """The kept records, one JSON per line (oldest first)."""
        return "".join(self._lines)

    @property
    def bytes(self) -> int:
        """Characters of JSON kept in memory (about its bytes: captured text is mostly ASCII)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._lines)

    def __iter__(self) -> Iterator[Episode]:
        for line in list(self._lines):
            yield Episode.from_dict(json.loads(line))
