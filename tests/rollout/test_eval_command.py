"""``turngym eval``: the benchmark harness's numbers, files and faithfulness figure."""

from __future__ import annotations

import json

import pytest

import turngym
from turngym.agents import Action
from turngym.cli import main
from turngym.rollout import Episode, Turn, run_episodes, summarize


def test_oracle_eval_reports_full_success_and_faithfulness(tmp_path, capsys) -> None:
    rc = main(
        [
            "eval",
            "turngym/Math-v0",
            "--agent",
            "oracle",
            "--episodes",
            "12",
            "--group",
            "2",
            "--json",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    s = json.loads(capsys.readouterr().out)
    assert s["episodes"] == 24 and s["success_rate"] == 1.0 and s["success_ci95"][1] == 1.0
    assert s["success_ci95"][0] == pytest.approx(0.8620, abs=1e-3)  # Wilson, n=24
    assert s["faithfulness"] == 1.0 and s["faithfulness_n"] == 24 and s["extra"]["pass@2"] == 1.0
    assert s["signal_means"]["answer_correct"] == pytest.approx(1 / s["mean_turns"])  # one correct answer per episode
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 24
    report = (tmp_path / "report.md").read_text()
    assert "| faithfulness (of 24 successful episodes) | 1.000 |" in report and "95% CI" in report
    assert json.loads((tmp_path / "summary.json").read_text()) == s


def test_random_eval_has_no_faithfulness_figure(capsys) -> None:
    assert main(["eval", "turngym/Math-v0", "--agent", "random", "--episodes", "10", "--quiet"]) == 0  # none solved by chance
    out = capsys.readouterr().out
    assert "| faithfulness | n/a (no successful episodes) |" in out and "| success rate | 0.000" in out


def test_math_faithfulness_separates_tool_use_from_guessing() -> None:
    class Guesser:  # test double: answers with the gold value straight away (no calculator)
        name = "guesser"
        privileged = True

        def act(self, batch):
            return [Action(f"<answer>{inp.env.task.gold}</answer>") for inp in batch]

    env = turngym.make("turngym/Math-v0")
    guessed = run_episodes(lambda: turngym.make("turngym/Math-v0"), Guesser(), range(10))
    s = summarize(guessed, faithfulness=env.faithfulness)
    assert s.success_rate == 1.0 and s.faithfulness == 0.0  # accuracy hides unfaithful tool use
    failed = Episode(
        "e", "", "t", 0, "obs", turns=[Turn(0, "x", "o", 0.0, True, False, {}, "k", "k")], outcome={"success": False}
    )
    assert env.faithfulness(failed) is None


def test_unknown_env_suggests_a_close_id(capsys) -> None:
    assert main(["eval", "turngym/Mathh-v0", "--episodes", "1"]) == 2
    assert "turngym/Math-v0" in capsys.readouterr().err
