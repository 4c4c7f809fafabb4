"""A byte-offset index over an episodes JSONL file: the table without keeping episodes in memory.

One pass reads each line once and keeps only the columns the episodes table shows plus the
line's byte offset, so a page of 50 rows out of 100k episodes is a numpy filter/sort and 50
seeks — the browser never receives more than one page, and the server never holds more than
the summary columns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from turngym.rollout.types import Episode

__all__ = ["EpisodeIndex", "Page", "SORT_KEYS"]

SORT_KEYS = ("row", "env", "task", "group", "success", "return", "turns", "invalid", "infra")
"""Columns the table can be sorted by (``row`` is the order in the file)."""


@dataclass
class Page:
    """One page of the (filtered, sorted) table: row numbers into the index and the match count."""

    rows: list[int]
    total: int
    page: int
    pages: int


class EpisodeIndex:
    """Summary columns and byte offsets of every episode in one JSONL file.

    Lines that are not a JSON episode (a half-written last line, a stray blank) are skipped and
    counted in :attr:`skipped`, so a run still being written can be viewed.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        offsets: list[int] = []
        env: list[str] = []
        task: list[str] = []
        group: list[str] = []
        eid: list[str] = []
        success: list[bool] = []
        ret: list[float] = []
        turns: list[int] = []
        invalid: list[int] = []
        infra: list[bool] = []
        self.skipped = 0
        with open(self.path, "rb") as fh:
            pos = 0
            for line in fh:
                start, pos = pos, pos + len(line)
                if not line.strip():
                    continue
                try:
                    d = json.loads(line)
                    ts = d.get("turns") or []
                    row = (
                        str(d.get("env_id", "")), str(d.get("task_id", "")), str(d.get("episode_id", "")),
                        bool((d.get("outcome") or {}).get("success", False)), float(sum(t["reward"] for t in ts)),
                        len(ts), sum(1 for t in ts if not t.get("action_valid", True)),
                        any(t.get("infra_error") for t in ts) or bool((d.get("meta") or {}).get("infra_error")),
                    )
                    grp = str(d.get("group") or row[2])
                except (ValueError, TypeError, KeyError, AttributeError):
                    self.skipped += 1
                    continue
                offsets.append(start)
                env.append(row[0])
                task.append(row[1])
                eid.append(row[2])
                group.append(grp)
                success.append(row[3])
                ret.append(row[4])
                turns.append(row[5])
                invalid.append(row[6])
                infra.append(row[7])
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.env = np.asarray(env, dtype=object)
        self.task = np.asarray(task, dtype=object)
        self.group = np.asarray(group, dtype=object)
        self.episode_id = np.asarray(eid, dtype=object)
        self.success = np.asarray(success, dtype=bool)
        self.ret = np.asarray(ret, dtype=np.float64)
        self.turns = np.asarray(turns, dtype=np.int64)
        self.invalid = np.asarray(invalid, dtype=np.int64)
        self.infra = np.asarray(infra, dtype=bool)
        self.groups: dict[str, list[int]] = {}
        for i, g in enumerate(group):
            self.groups.setdefault(g, []).append(i)
        self.envs = sorted(set(env))

    def __len__(self) -> int:
        return len(self.offsets)

    def load(self, row: int) -> Episode:
        """The full episode of index row ``row`` (one seek, one line)."""
        if not 0 <= row < len(self):
            raise IndexError(f"episode row {row} out of range (0..{len(self) - 1})")
        with open(self.path, "rb") as fh:
            fh.seek(int(self.offsets[row]))
            return Episode.from_dict(json.loads(fh.readline()))

    def load_many(self, rows: Sequence[int]) -> list[Episode]:
        with open(self.path, "rb") as fh:
            out = []
            for r in rows:
                fh.seek(int(self.offsets[r]))
                out.append(Episode.from_dict(json.loads(fh.readline())))
            return out

    def column(self, key: str) -> np.ndarray:
        return {
            "row": np.arange(len(self)), "env": self.env, "task": self.task, "group": self.group,
            "success": self.success, "return": self.ret, "turns": self.turns, "invalid": self.invalid, "infra": self.infra,
        }[key]

    def query(self, *, q: str = "", env: str = "", success: str = "", infra: str = "", sort: str = "row",
              desc: bool = False, page: int = 0, per_page: int = 50) -> Page:
        """Filter (substring of task/episode/group id, env, success ``1``/``0``, infra ``1``/``0``),
        sort (a :data:`SORT_KEYS` column; stable, ties in file order) and cut one page."""
        mask = np.ones(len(self), dtype=bool)
        if env:
            mask &= self.env == env
        if success in ("0", "1"):
            mask &= self.success == (success == "1")
        if infra in ("0", "1"):
            mask &= self.infra == (infra == "1")
        if q:
            needle = q.lower()
            hit = [needle in t.lower() or needle in e.lower() or needle in g.lower()
                   for t, e, g in zip(self.task[mask], self.episode_id[mask], self.group[mask])]
            idx = np.flatnonzero(mask)[np.asarray(hit, dtype=bool)] if len(hit) else np.zeros(0, dtype=np.int64)
        else:
            idx = np.flatnonzero(mask)
        if sort not in SORT_KEYS:
            sort = "row"
        if sort != "row" or desc:
            col = self.column(sort)[idx]
            col = col.astype(str) if col.dtype == object else col
            if desc:  # a stable sort of the reversed rows, reversed: descending keys, ties in file order
                order = np.argsort(col[::-1], kind="stable")[::-1]
                idx = idx[::-1][order]
            else:
                idx = idx[np.argsort(col, kind="stable")]
        total = len(idx)
        pages = max(1, -(-total // per_page))
        page = min(max(page, 0), pages - 1)
        return Page(rows=[int(i) for i in idx[page * per_page : (page + 1) * per_page]], total=total, page=page, pages=pages)
