"""What ``turngym view PATH`` shows: the episode files and training runs found under PATH.

PATH may be one episodes JSONL, an ``eval --out`` directory, a ``train`` run directory or a
directory of runs (``study``): every ``*episodes*.jsonl`` becomes a source in the episodes table
and every ``metrics.jsonl`` a run in the learning curves. Advantages are computed live with the
library's own :func:`~turngym.trainers.advantages.compute_advantages`, on the group's episodes,
with the trainer's convention for the step-group anchor (the state the action was taken in).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError
from turngym.rollout.types import Episode
from turngym.viewer.index import EpisodeIndex

__all__ = ["GroupCredit", "Run", "SignalRange", "ViewerData"]

_MAX_DEPTH = 4


@dataclass(frozen=True)
class SignalRange:
    """A signal's declared range (from the env's reward spec) or, failing that, the observed one."""

    low: float
    high: float
    kind: str = ""
    description: str = ""
    declared: bool = True


@dataclass
class Run:
    """One training run: its label and the rows of its ``metrics.jsonl``."""

    label: str
    path: Path
    rows: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class GroupCredit:
    """A group's episodes, their turn table and per-episode advantages of one estimator."""

    rows: list[int]
    episodes: list[Episode]
    advantages: list[np.ndarray] | None
    error: str | None
    shared: list[list[int]]
    """Per episode, per turn: how many *other* episodes of the group act from the same state."""


def _walk(root: Path, name_ok: Any, depth: int = 0) -> list[Path]:
    out: list[Path] = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return out
    for p in entries:
        if p.is_file() and name_ok(p.name):
            out.append(p)
        elif p.is_dir() and depth < _MAX_DEPTH and not p.name.startswith(".") and p.name not in ("checkpoints", "warm_start"):
            out.extend(_walk(p, name_ok, depth + 1))
    return out


class ViewerData:
    """The sources (episode files, lazily indexed) and runs under one PATH."""

    def __init__(self, path: str | Path, tokenizer: str | Path | None = None) -> None:
        self.root = Path(path)
        self.tokenizer_path = tokenizer
        self._renderer: tuple[Any | None, str] | None = None
        self._trees: dict[int, list[str]] = {}
        if not self.root.exists():
            raise ConfigError(f"{self.root} does not exist: pass a run directory, an `eval --out` directory or an episodes JSONL")
        if self.root.is_file():
            self.episode_files = [self.root]
            self.run_files = []
        else:
            self.episode_files = _walk(self.root, lambda n: n.endswith(".jsonl") and "episodes" in n)
            self.run_files = _walk(self.root, lambda n: n == "metrics.jsonl")
        if not self.episode_files and not self.run_files:
            raise ConfigError(f"{self.root} holds no episodes JSONL and no metrics.jsonl: pass a run directory "
                              "(turngym train/study), an `eval --out` directory or an episodes JSONL file")
        self._indexes: dict[int, EpisodeIndex] = {}
        self._specs: dict[str, dict[str, SignalRange]] = {}
        self._credit = lru_cache(maxsize=256)(self._group_credit)

    # ------------------------------------------------------------------ sources
    def label(self, path: Path) -> str:
        if path == self.root:
            return path.name
        rel = path.relative_to(self.root)
        return str(rel.parent) if rel.name == "episodes.jsonl" and str(rel.parent) != "." else str(rel)

    def index(self, src: int) -> EpisodeIndex:
        if not 0 <= src < len(self.episode_files):
            raise IndexError(f"no episode source {src}")
        if src not in self._indexes:
            self._indexes[src] = EpisodeIndex(self.episode_files[src])
        return self._indexes[src]

    def estimator(self, src: int, default: str) -> str:
        """The advantage estimator of the run that wrote source ``src`` (its ``config.json``'s
        ``algo``, found in the source's folder or a parent up to PATH), else ``default``: a GRPO
        run's episodes open on GRPO's credit, not another estimator's."""
        if not 0 <= src < len(self.episode_files):
            return default
        folder = self.episode_files[src].parent
        for candidate in (folder, *folder.parents):
            config = candidate / "config.json"
            if config.is_file():
                try:
                    algo = json.loads(config.read_text(encoding="utf-8")).get("algo")
                except (OSError, ValueError, AttributeError):
                    return default
                return algo if isinstance(algo, str) and algo else default
            if candidate == self.root or self.root not in candidate.parents:
                break
        return default

    def runs(self) -> list[Run]:
        """Every run's metrics, re-read on each call (a run in progress grows)."""
        out = []
        for p in self.run_files:
            rows = []
            for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a half-written last line
                if isinstance(row, dict):
                    rows.append(row)
            label = str(p.parent.relative_to(self.root)) if p.parent != self.root else (self.root.name or str(self.root))
            out.append(Run(label if label != "." else self.root.name, p, rows))
        return out

    # ------------------------------------------------------------------ tokens and trees
    def renderer(self) -> tuple[Any | None, str]:
        """The run's chat renderer (tokenizer found under PATH, loaded once) and a note for the page."""
        if self._renderer is None:
            from turngym.viewer.tokens import find_tokenizer_dir

            where = self.tokenizer_path or find_tokenizer_dir(self.root)
            if where is None:
                self._renderer = (None, "no tokenizer under this path (a `turngym train` run directory saves one; or pass --tokenizer): "
                                        "showing token ids of each turn's generated tokens, not the rendered sample")
            else:
                try:
                    from transformers import AutoTokenizer

                    from turngym.agents.render import ChatRenderer

                    self._renderer = (ChatRenderer(AutoTokenizer.from_pretrained(str(where))), f"tokenizer: {where}")
                except Exception as exc:  # a broken or template-less tokenizer: ids, and why
                    self._renderer = (None, f"could not load the tokenizer at {where} ({exc}): showing token ids only")
        return self._renderer

    def tree_groups(self, src: int) -> list[str]:
        """Groups of source ``src`` whose episodes share a turn (tree rollouts), in file order."""
        from turngym.viewer.tree import is_tree

        if src not in self._trees:
            idx = self.index(src)
            self._trees[src] = [g for g, rows in idx.groups.items() if len(rows) > 1 and is_tree(idx.load_many(rows))]
        return self._trees[src]

    # ------------------------------------------------------------------ signals
    def signal_ranges(self, env_id: str, episodes: list[Episode]) -> dict[str, SignalRange]:
        """Declared ranges from ``turngym.make(env_id).reward_spec``; observed ranges for the rest."""
        if env_id not in self._specs:
            spec: dict[str, SignalRange] = {}
            try:
                import turngym

                env = turngym.make(env_id)
                try:
                    for s in env.reward_spec:
                        spec[s.name] = SignalRange(float(s.low), float(s.high), s.kind, s.description)
                finally:
                    env.close()
            except Exception:  # an env not installed here, or one that needs arguments: observed ranges
                pass
            self._specs[env_id] = spec
        ranges = dict(self._specs[env_id])
        for ep in episodes:
            for t in ep.turns:
                for k, v in t.signals.items():
                    if k in ranges and ranges[k].declared:
                        continue
                    old = ranges.get(k, SignalRange(min(0.0, v), max(1.0, v), declared=False))
                    ranges[k] = SignalRange(min(old.low, v), max(old.high, v), declared=False)
        return ranges

    # ------------------------------------------------------------------ credit
    def group_credit(self, src: int, group: str, estimator: str) -> GroupCredit:
        return self._credit(src, group, estimator)

    def _group_credit(self, src: int, group: str, estimator: str) -> GroupCredit:
        from turngym.rollout import to_turn_table
        from turngym.trainers.advantages import compute_advantages

        idx = self.index(src)
        rows = idx.groups.get(group)
        if rows is None:
            raise KeyError(f"no group {group!r}")
        eps = idx.load_many(rows)
        shared = _shared_counts(eps)
        scored = [i for i, ep in enumerate(eps) if ep.turns and not ep.infra_error]
        if not scored:
            return GroupCredit(rows, eps, None, "no scored turns (every episode is empty or an infra error)", shared)
        table = to_turn_table([eps[i] for i in scored])
        try:
            adv = np.asarray(compute_advantages(estimator, table), dtype=np.float64)
        except Exception as exc:  # e.g. an estimator needing a column rollouts do not carry (info_gain)
            return GroupCredit(rows, eps, None, f"{estimator}: {exc}", shared)
        per: list[np.ndarray] = [np.full(len(ep.turns), math.nan) for ep in eps]
        pos = 0
        for i in scored:
            n = len(eps[i].turns)
            per[i] = adv[pos : pos + n]
            pos += n
        return GroupCredit(rows, eps, per, None, shared)


def _shared_counts(eps: list[Episode]) -> list[list[int]]:
    owners: dict[str, set[int]] = {}
    for i, ep in enumerate(eps):
        for t in ep.turns:
            owners.setdefault(t.prev_state_key, set()).add(i)
    return [[len(owners[t.prev_state_key]) - 1 for t in ep.turns] for ep in eps]
