"""``turngym eval --out`` writes a self-contained HTML report holding the summary's numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

from turngym.cli import main
from turngym.rollout import load_episodes, summarize
from turngym.rollout.report_html import breakdowns, render_html_report


def test_eval_out_writes_self_contained_html_report(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    assert main(["eval", "turngym/Household-v0", "--agent", "random", "--episodes", "24", "--out", str(out), "--quiet", "--json"]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    summary = json.loads((out / "summary.json").read_text())
    lo, hi = summary["success_ci95"]
    for number in (f"{summary['success_rate']:.3f}", f"{lo:.3f}–{hi:.3f}", f"{summary['mean_return']:.3f}",
                   f"{summary['mean_turns']:.2f}", f"{summary['invalid_action_rate']:.3f}"):
        assert number in page, number
    for name, mean in summary["signal_means"].items():
        assert f">{name}<" in page and f"{mean:.3f}" in page, name
    # self-contained: nothing is fetched, no script runs
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "http://" not in page and "https://" not in page and "<script" not in page.lower()
    # the breakdowns are plotted: the difficulty part of the household task ids, with its levels
    assert page.count("<svg") >= 4
    assert "Success by task id part 4" in page and "n=" in page


def test_breakdowns_split_by_difficulty_and_meta(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    assert main(["eval", "turngym/Household-v0", "--agent", "oracle", "--episodes", "20", "--out", str(out), "--quiet", "--json"]) == 0
    episodes = list(load_episodes(out / "episodes.jsonl"))
    for i, ep in enumerate(episodes):
        ep.meta["split"] = "a" if i % 2 else "b"
    fields = breakdowns(episodes)
    difficulty = fields["task id part 4 (…/…/…/*)"]
    assert set(difficulty) <= {"1", "2", "3"} and sum(map(len, difficulty.values())) == len(episodes)
    assert {k: len(v) for k, v in fields["meta: split"].items()} == {"a": 10, "b": 10}


def test_episode_text_cannot_inject_markup(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    assert main(["eval", "turngym/Math-v0", "--agent", "random", "--episodes", "6", "--out", str(out), "--quiet", "--json"]) == 0
    episodes = list(load_episodes(out / "episodes.jsonl"))
    for i, ep in enumerate(episodes):
        ep.task_id = f"x/<script>alert(1)</script>{i % 2}/{i}"
        ep.meta["level"] = "<img src=https://evil.example/x.png onerror=alert(1)>" if i % 2 else "plain"
    page = render_html_report(summarize(episodes, env_id="<b>env</b>", agent="a"), episodes)
    assert "<script" not in page and "<img" not in page and "<b>env" not in page
    assert "&lt;script&gt;" in page and "&lt;img" in page
