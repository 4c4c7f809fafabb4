"""``turngym eval --agent openai:URL`` pointed at ``turngym proxy``: the eval runs, and every
episode is captured with the outcome the eval measured (an eval through the proxy is a capture)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turngym.agents.openai_http import EPISODE_HEADER as AGENT_HEADER
from turngym.agents.render import render_episode
from turngym.cli import main
from turngym.proxy.serve import ProxyThread, build_proxy
from turngym.proxy.service import EPISODE_HEADER


def test_eval_through_the_proxy_captures_each_episode_with_its_outcome(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert AGENT_HEADER == EPISODE_HEADER
    proxy = build_proxy("tiny", out=tmp_path / "captured", max_tokens=64, seed=0, device="cpu")
    with ProxyThread(proxy) as server:
        for _ in range(2):  # a second eval of the same seeds opens new episodes (fresh ids), never a 409
            assert main(["eval", "turngym/Math-v0", "--agent", f"openai:{server.base_url}", "--model", "tiny", "--episodes", "1",
                         "--group", "2", "--max-new-tokens", "8", "--env-arg", "max_turns=2", "--out", str(tmp_path / "eval"),
                         "--quiet", "--json"]) == 0
    capsys.readouterr()
    evaluated = [json.loads(line) for line in (tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()]
    captured = [json.loads(line) for line in (tmp_path / "captured" / "episodes.jsonl").read_text().splitlines()]
    stats = proxy.stats()
    assert len(evaluated) == 2 and len(captured) == 4 and stats["episodes_finished"] == 4 and not stats["errors"]
    assert not stats["branches"] and stats["episodes_open"] == 0  # the agent's appended stop strings are tidying
    assert len({ep["episode_id"] for ep in captured}) == 4 and all(len(ep["turns"]) == 2 for ep in captured)
    last_run = captured[2:]
    by_task = {}
    for ep in last_run:
        assert ep["episode_id"].split("@")[0] in {e["episode_id"] for e in evaluated}
        by_task[ep["episode_id"].split("@")[0]] = ep
    for ev in evaluated:  # what the proxy recorded is what the eval measured, turn by turn
        cap = by_task[ev["episode_id"]]
        assert (cap["env_id"], cap["group"], cap["seed"]) == (ev["env_id"], ev["group"], ev["seed"])
        assert len(cap["turns"]) == len(ev["turns"])
        assert cap["outcome"]["success"] == ev["outcome"].get("success", False)
        for ct, et in zip(cap["turns"], ev["turns"], strict=True):
            assert et["action"].startswith(ct["action"])  # the agent put the stop string back
            assert ct["reward"] == pytest.approx(et["reward"]) and ct["signals"] == et["signals"]
            assert ct["state_key"] == et["state_key"] and ct["action_valid"] == et["action_valid"]
    for ep in proxy.finished:  # and each is one exact token sequence, trainable
        sample = render_episode(ep, None)
        for turn in ep.turns:
            start, end = sample.turn_spans[turn.index]
            assert sample.input_ids[:start] == turn.prompt_ids and sample.input_ids[start:end] == turn.token_ids


@pytest.mark.parametrize(("run_id", "name"), [("turngym/Math-v0/0#3", "turngym/Math-v0/0-3"), ("my task/0", "my-task/0"),
                                              ("_lead", "e_lead"), ("x" * 250, "x" * 180), ("", "episode")])
def test_any_run_episode_id_names_a_proxy_episode(run_id: str, name: str) -> None:
    """A tree rollout's ids are ``GROUP#NODE``: the proxy refused them (``#`` is its segment separator)
    with a 400 that the agent raised as a ConfigError, stopping the rollout."""
    from turngym.agents.base import AgentInput
    from turngym.agents.openai_http import OpenAIPolicy
    from turngym.rollout.types import Episode, Turn

    proxy = build_proxy("tiny", max_tokens=4, seed=0, device="cpu")
    with ProxyThread(proxy) as server:
        agent = OpenAIPolicy(server.base_url, model="tiny", max_new_tokens=4, max_retries=0)
        [action] = agent.act([AgentInput([{"role": "user", "content": "hi"}], episode_id=run_id)])
        assert "infra_error" not in action.meta
        turn = Turn(index=0, action=action.text, observation="", reward=1.0, terminated=True, truncated=False, signals={},
                    state_key="s1", prev_state_key="s0")
        agent.end_episode(Episode(episode_id=run_id, env_id="e", task_id="t", seed=0, initial_observation="hi", turns=[turn]))
    assert agent.outcomes_reported == 1 and not agent.outcome_errors
    [ep] = proxy.finished
    assert ep.episode_id.rpartition("@")[0] == name
