"""The learning curve: training success per RL step and the held-out evaluations."""

from __future__ import annotations

import io
import json
from pathlib import Path

from turngym.trainers.atomic import complete_lines, write_bytes

__all__ = ["plot_learning_curve"]


def plot_learning_curve(metrics: Path, out: Path, *, title: str = "") -> Path:
    """Draw ``metrics.jsonl`` into a PNG (needs matplotlib; uses the Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in complete_lines(Path(metrics)) if line.strip()]
    rl = [r for r in records if r.get("phase") == "rl"]
    evals = [r for r in records if r.get("phase") == "eval"]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    if rl:
        ax.plot([r["step"] for r in rl], [r["success"] for r in rl], label="training rollouts (success)", color="#4c72b0", alpha=0.8)
        ax.plot([r["step"] for r in rl], [r["mean_shaped_return"] for r in rl], label="mean shaped return", color="#55a868", alpha=0.6, linestyle="--")
    if evals:
        ax.plot([r["step"] for r in evals], [r["success"] for r in evals], "o-", label="evaluation (success)", color="#c44e52")
    ax.set_xlabel("RL step")
    ax.set_ylabel("success rate / return")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    write_bytes(Path(out), buf.getvalue())  # atomic: a kill never leaves half a PNG
    return Path(out)
