"""A run directory's commits, and the exact point a resumed run continues from.

A run passes through explicit phases — ``started`` (config saved, nothing else yet),
``warm_started`` (imitation done, its weights saved), ``rl`` at step *k* (the warm start
evaluated and *k* RL steps done, weights and optimizer saved), ``finished`` (final evaluation
logged). Each phase ends with a *commit*: the artifact it produced is saved atomically with a
manifest (:mod:`turngym.trainers.atomic`) that also records the commit and the exact text of
``metrics.jsonl`` at that moment; then ``state.json`` is replaced to point at it.

Resume continues from the newest commit whose artifact verifies, so whatever the kill
interrupted is redone from the same inputs — never skipped (a half-saved warm start), never
done twice (a warm start applied to warm-started weights, a second final evaluation).
``metrics.jsonl`` is reset to the rows of that commit (a torn last line and rows logged after
it are dropped; rows lost or edited are restored from the artifact's copy), so a resumed run
logs exactly the rows an uninterrupted one would. A damaged or missing file is named, and the
run falls back to the newest older commit that verifies, saying so; only when nothing valid is
left does resume refuse, with the fix.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from turngym.trainers.atomic import (
    ArtifactError,
    append_line,
    complete_lines,
    save_dir,
    verify_dir,
    write_json,
    write_text,
)

__all__ = ["PHASES", "Commit", "ResumePoint", "RunDir"]

PHASES = ("started", "warm_started", "rl", "finished")
_EMPTY_SHA = hashlib.sha256(b"").hexdigest()


@dataclass(frozen=True)
class Commit:
    """One completed phase of a run, as recorded in ``state.json`` and in the artifact it saved."""

    phase: str
    step: int = 0
    """RL steps done."""
    metrics_lines: int = 0
    """Rows of ``metrics.jsonl`` that belong to the run at this commit."""
    metrics_sha256: str = _EMPTY_SHA
    """SHA-256 of those rows' text (newline-terminated)."""
    success_before: float | None = None
    """Success rate of the warm-started policy (from ``rl`` on)."""
    success_after: float | None = None
    """Success rate after RL (``finished`` only)."""
    checkpoint: str | None = None
    """The checkpoint directory (relative to the run) holding this commit's weights."""

    @property
    def order(self) -> tuple[int, int]:
        return self.step, PHASES.index(self.phase)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, source: Path) -> Commit:
        try:
            commit = cls(**data)
            if commit.phase not in PHASES or not isinstance(commit.step, int) or commit.step < 0 or not isinstance(commit.metrics_lines, int):
                raise ValueError(f"bad record {data!r}")
        except (TypeError, ValueError) as exc:
            raise ArtifactError(f"{source} is damaged (its run record is unreadable: {exc})") from exc
        return commit

    def describe(self, steps: int) -> str:
        return {
            "started": "started, nothing saved yet",
            "warm_started": "warm start saved, not yet evaluated",
            "rl": f"at RL step {self.step}/{steps}",
            "finished": f"finished ({self.step}/{steps} RL steps)",
        }[self.phase]


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run continues: a commit, the directory holding its weights (the warm start
    or a checkpoint; None for ``finished``) and the ``metrics.jsonl`` text that goes with it."""

    commit: Commit
    source: Path | None
    metrics: str


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class RunDir:
    """The files of one training run in ``out`` (see the module docstring for the protocol)."""

    RESULTS = ("metrics.jsonl", "summary.json", "learning_curve.png", "state.json", "warm_start", "checkpoints",
               "warm_start.tmp", "warm_start.trash", "checkpoint", "checkpoint.old", "checkpoint.tmp")
    """What a run writes besides ``config.json`` (and the names older versions wrote)."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self.config = self.out / "config.json"
        self.state = self.out / "state.json"
        self.metrics = self.out / "metrics.jsonl"
        self.warm_start = self.out / "warm_start"
        self.checkpoints = self.out / "checkpoints"

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints / f"step-{step:06d}"

    # ------------------------------------------------------------------ what is there
    def holds_results(self) -> bool:
        """Whether a run has written anything here that a fresh run would destroy."""
        return any((self.out / name).exists() for name in self.RESULTS)

    def describe(self, steps: int) -> str:
        try:
            return self.read_state().describe(steps)
        except ArtifactError as exc:
            return str(exc)

    def clear(self) -> None:
        """Delete a previous run's files (``--overwrite``); other files in ``out`` are kept."""
        for name in (*self.RESULTS, "config.json"):
            path = self.out / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ metrics.jsonl
    def append_metric(self, record: dict[str, Any]) -> None:
        append_line(self.metrics, json.dumps(record))

    def metrics_text(self) -> str:
        return "".join(line + "\n" for line in complete_lines(self.metrics))

    # ------------------------------------------------------------------ commits
    def commit(self, phase: str, step: int = 0, **fields: Any) -> tuple[Commit, str]:
        """A record of ``phase`` covering the current rows of ``metrics.jsonl``, and their text."""
        text = self.metrics_text()
        return Commit(phase, step, text.count("\n"), _sha(text), **fields), text

    def write_state(self, commit: Commit) -> None:
        write_json(self.state, commit.to_dict())

    def read_state(self) -> Commit:
        if not self.state.exists():
            raise ArtifactError(f"{self.state} is missing")
        try:
            data = json.loads(self.state.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ArtifactError(f"{self.state} is damaged ({exc})") from exc
        return Commit.from_dict(data, self.state)

    def save_artifact(self, path: Path, write: Callable[[Path], None], commit: Commit, metrics: str,
                      hook: Callable[[str], None] | None = None) -> None:
        """Save ``path`` atomically with ``commit`` and the metrics text it covers in its manifest."""
        save_dir(path, write, {"record": commit.to_dict(), "metrics": metrics}, hook=hook)

    def load_artifact(self, path: Path, what: str) -> ResumePoint:
        manifest = verify_dir(path, what=what)
        commit = Commit.from_dict(manifest.get("record"), path)
        metrics = manifest.get("metrics")
        if not isinstance(metrics, str) or _sha(metrics) != commit.metrics_sha256:
            raise ArtifactError(f"{what} {path} is damaged (its copy of metrics.jsonl does not match its record)")
        return ResumePoint(commit, path, metrics)

    def prune(self, keep: int) -> None:
        """Keep the ``keep`` newest checkpoints (older ones are the fallback of a damaged newer one)."""
        for path in self._checkpoint_dirs()[keep:]:
            shutil.rmtree(path, ignore_errors=True)

    def _checkpoint_dirs(self) -> list[Path]:
        """Checkpoint directories, newest first (temporary ones of an interrupted save excluded)."""
        if not self.checkpoints.is_dir():
            return []
        dirs = [p for p in self.checkpoints.iterdir() if p.is_dir() and p.name.startswith("step-") and p.name[5:].isdigit()]
        return sorted(dirs, key=lambda p: int(p.name[5:]), reverse=True)

    def _remove_leftovers(self) -> None:
        """Temporaries of a save that a kill interrupted (directories ``*.tmp``/``*.trash``, files
        ``.NAME.tmp-PID``): never valid, never needed."""
        for parent in (self.out, self.checkpoints):
            if parent.is_dir():
                for path in parent.iterdir():
                    if path.is_dir() and path.name.endswith((".tmp", ".trash")):
                        shutil.rmtree(path, ignore_errors=True)
                    elif path.is_file() and path.name.startswith(".") and ".tmp-" in path.name:
                        path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ resume
    def resume_point(self, steps: int) -> tuple[ResumePoint | None, list[str]]:
        """The newest commit whose files verify (None: start from the beginning — only when
        nothing was ever committed), with notes on every damaged file that was skipped.

        Raises :class:`ArtifactError` when results exist but nothing valid is left to continue.
        """
        notes: list[str] = []
        problems: list[str] = []
        self._remove_leftovers()
        state: Commit | None = None
        try:
            state = self.read_state()
        except ArtifactError as exc:
            problems.append(str(exc))

        if state is not None and state.phase == "finished":
            rows = complete_lines(self.metrics)[: state.metrics_lines]
            text = "".join(line + "\n" for line in rows)
            if _sha(text) == state.metrics_sha256:
                return ResumePoint(state, None, text), notes
            problems.append(f"{self.metrics} no longer holds the rows of the finished run recorded in {self.state}")

        warm: ResumePoint | None = None
        try:
            warm = self.load_artifact(self.warm_start, "warm start")
        except ArtifactError as exc:
            if self.warm_start.exists() or (state is not None and state.phase != "started"):
                problems.append(str(exc))
        checkpoints: list[ResumePoint] = []
        for path in self._checkpoint_dirs():
            try:
                checkpoints.append(self.load_artifact(path, "checkpoint"))
            except ArtifactError as exc:
                problems.append(f"{exc} — removed it")
                shutil.rmtree(path, ignore_errors=True)

        if warm is None and checkpoints:
            raise ArtifactError(f"cannot resume {self.out}: {'; '.join(problems)}. Every checkpoint continues from the warm start's "
                                f"weights, so the run cannot go on: start over with `turngym train --out {self.out} --overwrite`")
        candidates = [c for c in [warm, *checkpoints] if c is not None]
        if candidates:
            best = max(candidates, key=lambda c: c.commit.order)
            if problems:
                notes.append("; ".join(problems) + f". Continuing from the newest valid save, {best.source} ({best.commit.describe(steps)})")
            elif state is not None and state.order > best.commit.order:
                notes.append(f"{self.state} records {state.describe(steps)}, but that save is gone; continuing from {best.source}")
            return best, notes
        if (state is not None and state.phase == "started") or (state is None and not self._anything_saved()):
            if problems:  # nothing was ever committed: the beginning is the exact resume point
                notes.append("; ".join(problems) + ". Nothing was committed yet: starting from the beginning")
            return None, notes
        raise ArtifactError(f"cannot resume {self.out}: {'; '.join(problems) or 'no valid save'}. Nothing valid is left to continue "
                            f"from: start over with `turngym train --out {self.out} --overwrite` (discards the run's files), "
                            "or restore them from a backup")

    def _anything_saved(self) -> bool:
        return bool(complete_lines(self.metrics)) or self.warm_start.exists() or bool(self._checkpoint_dirs()) or (self.out / "summary.json").exists()

    def restore_metrics(self, text: str, where: str) -> str | None:
        """Make ``metrics.jsonl`` exactly ``text`` (the rows of the resume point); a note when rows
        had been lost or changed rather than only logged after that point."""
        try:
            current = self.metrics.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            current = None
        if current == text:
            return None
        write_text(self.metrics, text)
        if current is None and text:
            return f"{self.metrics} was missing: restored its {text.count(chr(10))} rows from {where}"
        if current is not None and not current.startswith(text):
            return f"{self.metrics} did not hold the rows saved with {where} (damaged or edited): restored them"
        return None
