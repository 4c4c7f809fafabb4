"""Experiment tracking: mirror ``metrics.jsonl`` to TensorBoard and/or Weights & Biases.

``metrics.jsonl`` stays the run's record (resume restores it, the study reads it); a tracker only
*mirrors* each row as the trainer appends it, so a tracking backend can never change what a run
computes or how it resumes. Every numeric field of a row is logged under ``<phase>/<field>``
(``rl/success``, ``eval/success``, ``warmup/nll``): the phase prefix keeps the RL batch success
and the evaluation success apart, and the row's ``step`` is the x-axis. Sample episodes (the turns
of a few RL rollouts with their advantages) are logged as text tables, because the per-turn
credit is what a user wants to look at and a scalar curve cannot show it.

Both backends are optional extras (``pip install 'turngym[track]'``); asking for one that is not
installed fails before the run starts, naming the pip command. W&B respects its own environment
variables: ``WANDB_MODE=offline`` writes the run under ``OUT/wandb`` with no network or account,
to upload later with ``wandb sync``.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from turngym.core.errors import ConfigError

__all__ = [
    "BACKENDS",
    "MultiTracker",
    "NullTracker",
    "TensorBoardTracker",
    "Tracker",
    "WandbTracker",
    "episode_rows",
    "metric_scalars",
    "open_tracker",
    "parse_backends",
    "require_backends",
]

BACKENDS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "pip install 'turngym[track]'  (or: pip install tensorboard)"),
    "wandb": ("wandb", "pip install 'turngym[track]'  (or: pip install wandb)"),
}
"""Backend name → (module it needs, the command that installs it)."""

EPISODE_COLUMNS = ("episode", "group", "task_id", "success", "turn", "observation", "action", "valid", "reward", "advantage", "signals")
"""Columns of a sample-episode table: one row per turn."""

_TEXT_LIMIT = 400
"""Characters of an observation or action kept in a table cell (a whole prompt would drown the table)."""


@runtime_checkable
class Tracker(Protocol):
    """Where the rows of ``metrics.jsonl`` are mirrored to."""

    def log_metrics(self, record: Mapping[str, Any]) -> None:
        """Log one ``metrics.jsonl`` row (``phase``, ``step`` and metric fields)."""

    def log_episodes(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """Log a table of sample turns (:func:`episode_rows`) at RL ``step``."""

    def close(self) -> None:
        """Flush and release the backend (idempotent)."""


def metric_scalars(record: Mapping[str, Any]) -> tuple[str, int, dict[str, float]]:
    """``(phase, step, {"<phase>/<field>": value})`` of a row: its finite numeric fields only.

    Strings (an evaluation's ``label``) are not scalars; NaN/inf are skipped because a tracker
    would draw them as a gap anyway and some backends reject them.
    """
    phase = str(record.get("phase", "train"))
    step = int(record.get("step", 0))
    scalars: dict[str, float] = {}
    for key, value in record.items():
        if key in ("phase", "step") or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            scalars[f"{phase}/{key}"] = float(value)
    return phase, step, scalars


def _clip(text: str) -> str:
    text = str(text)
    return text if len(text) <= _TEXT_LIMIT else text[: _TEXT_LIMIT - 1] + "…"


def episode_rows(episodes: Sequence[Any], advantages: Sequence[Sequence[float]], limit: int = 4) -> list[dict[str, Any]]:
    """One row per turn of up to ``limit`` episodes, each from a different group when possible.

    Taking the first episode of distinct groups shows several tasks rather than ``limit`` copies
    of one task's rollouts.
    """
    chosen: list[int] = []
    seen: set[str] = set()
    for i, ep in enumerate(episodes):
        if ep.group not in seen:
            seen.add(ep.group)
            chosen.append(i)
    chosen += [i for i in range(len(episodes)) if i not in chosen]
    rows: list[dict[str, Any]] = []
    for i in chosen[:limit]:
        ep, adv = episodes[i], advantages[i]
        for t, turn in enumerate(ep.turns):
            fired = {k: round(float(v), 4) for k, v in turn.signals.items() if v}
            rows.append({
                "episode": ep.episode_id, "group": ep.group, "task_id": ep.task_id, "success": bool(ep.success),
                "turn": turn.index, "observation": _clip(turn.observation), "action": _clip(turn.action),
                "valid": "yes" if turn.action_valid else f"no: {turn.invalid_reason}",
                "reward": round(float(turn.reward), 4), "advantage": round(float(adv[t]), 4) if t < len(adv) else None,
                "signals": ", ".join(f"{k}={v:g}" for k, v in fired.items()),
            })
    return rows


def _markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """TensorBoard's text plugin renders Markdown: a table, with pipes and newlines escaped."""

    def cell(value: Any) -> str:
        return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ⏎ ")

    lines = ["| " + " | ".join(EPISODE_COLUMNS) + " |", "|" + "---|" * len(EPISODE_COLUMNS)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in EPISODE_COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


class NullTracker:
    """Tracks nothing (no ``--report-to``)."""

    def log_metrics(self, record: Mapping[str, Any]) -> None:
        pass

    def log_episodes(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardTracker:
    """Event files under ``log_dir`` (``tensorboard --logdir OUT/tensorboard``).

    A fresh run empties ``log_dir`` first: TensorBoard merges every event file in a directory
    into one run, so a discarded run's curves would otherwise be drawn into the new one.
    """

    def __init__(self, log_dir: Path, *, fresh: bool, config: Mapping[str, Any] | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        if fresh and log_dir.exists():
            shutil.rmtree(log_dir)
        self.log_dir = log_dir
        self._writer: Any = SummaryWriter(log_dir=str(log_dir))
        if config is not None and fresh:
            import json

            self._writer.add_text("config", "```\n" + json.dumps(dict(config), indent=2, default=str) + "\n```", 0)

    def log_metrics(self, record: Mapping[str, Any]) -> None:
        _, step, scalars = metric_scalars(record)
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, value, step)
        self._writer.flush()

    def log_episodes(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._writer.add_text("rl/sample_episodes", _markdown_table(rows), step)
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class WandbTracker:
    """A W&B run in ``OUT/wandb`` (online, or offline with ``WANDB_MODE=offline``).

    W&B's own step must only grow, but warm-up, evaluation and RL rows each count from their
    own start; so every phase gets its own step metric (``rl/step``, ...) declared as the x-axis
    of its fields, and W&B's internal step is left to count rows.
    """

    def __init__(self, out: Path, *, config: Mapping[str, Any] | None = None, name: str | None = None) -> None:
        import os

        import wandb

        self._wandb = wandb
        self._phases: set[str] = set()
        self._run: Any = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "turngym"), dir=str(out), name=name or out.name,
            config=dict(config or {}), reinit="create_new",
        )
        self.dir = Path(self._run.dir).parent

    def _phase(self, phase: str) -> None:
        if phase not in self._phases:
            self._phases.add(phase)
            self._run.define_metric(f"{phase}/step")
            self._run.define_metric(f"{phase}/*", step_metric=f"{phase}/step")

    def log_metrics(self, record: Mapping[str, Any]) -> None:
        phase, step, scalars = metric_scalars(record)
        self._phase(phase)
        self._run.log({f"{phase}/step": step, **scalars})

    def log_episodes(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._phase("rl")
            table = self._wandb.Table(columns=list(EPISODE_COLUMNS), data=[[r.get(c) for c in EPISODE_COLUMNS] for r in rows])
            self._run.log({"rl/step": step, "rl/sample_episodes": table})

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None


class MultiTracker:
    """Several trackers fed the same rows."""

    def __init__(self, trackers: Sequence[Tracker]) -> None:
        self.trackers = list(trackers)

    def log_metrics(self, record: Mapping[str, Any]) -> None:
        for t in self.trackers:
            t.log_metrics(record)

    def log_episodes(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        for t in self.trackers:
            t.log_episodes(step, rows)

    def close(self) -> None:
        for t in self.trackers:
            t.close()


def parse_backends(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"tensorboard,wandb"`` or a list of names → a validated tuple (duplicates dropped)."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    names: list[str] = []
    for item in (s.strip().lower() for s in items):
        if not item or item == "none":
            continue
        if item not in BACKENDS:
            raise ConfigError(f"unknown report_to backend {item!r}: choose from {', '.join(BACKENDS)} (comma-separated)")
        if item not in names:
            names.append(item)
    return tuple(names)


def _wandb_can_log() -> bool:
    """Whether ``wandb.init`` will run without asking for a login: offline/disabled mode, an API
    key in the environment, or a ``wandb login`` entry in ``~/.netrc`` for the W&B host."""
    import netrc
    import os
    from urllib.parse import urlparse

    if os.environ.get("WANDB_MODE", "").lower() in ("offline", "dryrun", "disabled") or os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def require_backends(names: Sequence[str]) -> None:
    """Fail before a run starts when a requested backend cannot log: its package is missing
    (naming the install command), or W&B has no login (it would stop the run at a prompt or
    fail minutes in, after the run directory was already written)."""
    import importlib.util

    for name in names:
        module, command = BACKENDS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"--report-to {name} needs the {module!r} package, which is not installed: {command}")
        if name == "wandb" and not _wandb_can_log():
            raise ConfigError("--report-to wandb needs a W&B login (`wandb login` or WANDB_API_KEY), "
                              "or WANDB_MODE=offline to write the run under OUT/wandb and `wandb sync` it later")


def open_tracker(names: Sequence[str], out: Path, *, fresh: bool, config: Mapping[str, Any] | None = None) -> Tracker:
    """The tracker for ``names`` writing under ``out`` (``fresh``: a new run, not a resumed one)."""
    names = parse_backends(names)
    if not names:
        return NullTracker()
    require_backends(names)
    trackers: list[Tracker] = []
    try:
        for name in names:
            if name == "tensorboard":
                trackers.append(TensorBoardTracker(out / "tensorboard", fresh=fresh, config=config))
            elif name == "wandb":
                trackers.append(WandbTracker(out, config=config))
    except BaseException:
        for t in trackers:
            t.close()
        raise
    return trackers[0] if len(trackers) == 1 else MultiTracker(trackers)
