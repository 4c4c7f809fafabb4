"""``turngym eval`` defaults a user wants: hf agents force the env's action prefix, and a model
agent whose actions mostly do not parse gets a loud warning naming the flags that help."""

from __future__ import annotations

import json

import pytest

from turngym.agents import Action, make_agent
from turngym.cli import INVALID_WARN_RATE, build_parser, main


@pytest.mark.parametrize(("flags", "expected"), [([], None), (["--force-action-prefix"], True),
                                                 (["--no-force-action-prefix"], False)])
def test_eval_parses_force_action_prefix(flags, expected):
    assert build_parser().parse_args(["eval", "turngym/Math-v0", *flags]).force_action_prefix is expected


class ProsePolicy:
    """Test double for a pretrained chat model that answers in prose (what SmolLM2 does unforced)."""

    name = "prose"

    def act(self, batch):
        return [Action("Sure! Let me think about this step by step.") for _ in batch]


@pytest.fixture
def built(monkeypatch):
    """Record the keyword arguments ``hf:`` specs pass to HFPolicy.from_pretrained (no model is loaded)."""
    from turngym.agents import hf

    calls: list[dict] = []

    def from_pretrained(cls, arg, **kw):
        calls.append(kw)
        return ProsePolicy()

    monkeypatch.setattr(hf.HFPolicy, "from_pretrained", classmethod(from_pretrained))
    return calls


def test_hf_agents_force_the_action_prefix_by_default(built, capsys):
    assert main(["eval", "turngym/Math-v0", "--agent", "hf:smollm2", "--episodes", "1", "--quiet"]) == 0
    assert main(["eval", "turngym/Math-v0", "--agent", "hf:smollm2", "--episodes", "1", "--quiet",
                 "--no-force-action-prefix"]) == 0
    assert [kw["force_action_prefix"] for kw in built] == [True, False]


def test_a_mostly_invalid_model_agent_is_warned_with_the_flags_that_help(built, capsys, tmp_path):
    assert main(["eval", "turngym/Math-v0", "--agent", "hf:smollm2", "--episodes", "2", "--quiet",
                 "--no-force-action-prefix", "--sample"]) == 0
    out = capsys.readouterr().out
    assert "> **warning:** 100% of this agent's actions were invalid" in out
    assert "drop --no-force-action-prefix (every action then starts with '<')" in out and "--temperature 0" in out
    assert "--constrain-choices" not in out  # Math lists no choices: only the flags that apply are named

    assert main(["eval", "turngym/Household-v0", "--agent", "hf:smollm2", "--episodes", "1", "--quiet",
                 "--temperature", "0", "--json", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)  # stdout stays JSON; the warning is in it and on stderr
    assert "--constrain-choices (this env lists its valid actions" in summary["extra"]["warning"]
    assert "--temperature 0" not in summary["extra"]["warning"]
    assert "warning:" in captured.err and "**warning:**" in (tmp_path / "report.md").read_text()


def test_scripted_agents_and_valid_model_output_get_no_warning(built, capsys):
    assert main(["eval", "turngym/Math-v0", "--agent", "random", "--episodes", "20", "--json", "--quiet"]) == 0
    assert "warning" not in json.loads(capsys.readouterr().out)["extra"]
    assert INVALID_WARN_RATE <= 0.25


def test_only_hf_agents_accept_an_explicit_force_action_prefix(capsys):
    assert main(["eval", "turngym/Math-v0", "--agent", "openai:http://127.0.0.1:9/v1", "--model", "m",
                 "--episodes", "1", "--force-action-prefix"]) == 2
    assert "only hf agents support" in capsys.readouterr().err


def test_the_real_hf_policy_gets_the_prefix_forced_unless_told_not_to():
    assert make_agent("hf:tiny").force_action_prefix is True
    assert make_agent("hf:tiny", force_action_prefix=None).force_action_prefix is True  # None: the CLI's "default"
    assert make_agent("hf:tiny", force_action_prefix=False).force_action_prefix is False


def test_model_agents_evaluate_greedily_by_default_and_the_report_says_so(built, capsys):
    """Issue 38: benchmark harnesses decode greedily unless told otherwise; ``turngym eval`` too.
    Sampling is one flag away, pass@G (G > 1) samples, and the report names the decoding used."""
    runs = [([], 0.0, "greedy (temperature 0, the default"), (["--sample"], 1.0, "sampling at temperature 1 (--sample)"),
            (["--temperature", "0.7"], 0.7, "sampling at temperature 0.7 (--temperature 0.7)"),
            (["--group", "2"], 1.0, "pass@2 needs different tries")]
    for flags, temperature, named in runs:
        assert main(["eval", "turngym/Math-v0", "--agent", "hf:smollm2", "--episodes", "1", "--quiet", "--json", *flags]) == 0
        assert built[-1]["temperature"] == temperature
        assert named in json.loads(capsys.readouterr().out)["extra"]["decoding"]
    assert main(["eval", "turngym/Math-v0", "--agent", "hf:smollm2", "--episodes", "1", "--quiet"]) == 0
    assert "| decoding | greedy" in capsys.readouterr().out  # the markdown report too
    assert main(["eval", "turngym/Math-v0", "--agent", "random", "--episodes", "1", "--quiet", "--json"]) == 0
    assert "decoding" not in json.loads(capsys.readouterr().out)["extra"]  # a scripted agent has no decoding
