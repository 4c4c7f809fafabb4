"""Clients that tidy replies (strip whitespace, append the stop string back) keep their episode;
any other edit still branches."""

from __future__ import annotations

import asyncio

import pytest

from turngym.agents.render import render_episode
from turngym.proxy import CaptureProxy, ProxyConfig
from turngym.proxy.capture import tidied
from turngym.proxy.serve import build_proxy


@pytest.fixture(scope="module")
def policy():
    return build_proxy("tiny", max_tokens=32, seed=0, device="cpu").policy


@pytest.mark.parametrize(("sent", "text", "stops", "kind"), [
    ("a b", "a b", ["</code>"], None),  # verbatim: not a tidying
    ("a b", " a b\n", [], "whitespace"),
    (" a b", " a b\n", [], "whitespace"),
    ("a b</code>", "a b", ["</code>"], "stop_appended"),
    ("a b\n</code>", "\na b\n", ["</code>"], "stop_appended+whitespace"),  # (text + "</code>").strip(): smolagents
    ("a b</code>", "  a b ", ["</code>"], "stop_appended+whitespace"),  # text.strip() + "</code>"
    ("a b\nObservation:", "a b", ["\nObservation:"], "stop_appended"),
    ("a b</code>", "a b", [], None),  # a stop the request did not ask for is an edit
    ("a c", "a b", ["</code>"], None),
    ("a  b", "a b", [], None),  # whitespace inside the reply is content
    ("a b\n\n", "a b\n", [], None),  # whitespace added, not stripped
    ("", "  ", [], "whitespace"),
])
def test_tidied_recognizes_only_stripping_and_a_stop_put_back(sent, text, stops, kind) -> None:
    assert tidied(sent, text, stops) == kind


def test_a_tidied_reply_continues_the_episode_and_another_edit_branches(policy) -> None:
    proxy = CaptureProxy(policy, ProxyConfig(max_tokens=32))

    eid = "tidy/0~tidy-test-key-000001"  # NAME~KEY: a proxy that guards episodes knows whose it is

    async def ask(msgs):
        return await proxy.chat({"model": "tiny", "messages": msgs, "max_tokens": 8, "stop": ["</code>"],
                                 "return_token_ids": True}, eid)

    async def go() -> list:
        msgs = [{"role": "user", "content": "Write code."}]
        replies = []
        for k in range(3):
            reply, headers = await ask(msgs)
            replies.append((reply, headers))
            text = reply["choices"][0]["message"]["content"]
            kept = (" \n" + text + "</code>").strip() if k < 2 else text + " (edited)"  # CodeAgent's way, then an edit
            msgs += [{"role": "assistant", "content": kept}, {"role": "user", "content": f"Observation: {k}"}]
        reply, headers = await ask(msgs)
        replies.append((reply, headers))
        await proxy.outcome(eid, {"reward": 1.0})
        return replies

    replies = asyncio.run(go())
    heads = [h for _, h in replies]
    assert [h.get("X-Turngym-Branched") for h in heads] == [None, None, None, "history_edited"]
    assert heads[0].get("X-Turngym-Tidied") is None and all(h["X-Turngym-Tidied"].startswith("stop_appended") for h in heads[1:3])
    assert "X-Turngym-Tidied" not in heads[3]
    first, second = proxy.finished
    assert [len(first.turns), len(second.turns)] == [3, 1]
    assert set(first.meta["tidied"]) == {"0", "1"} and "tidied" not in second.meta
    stats = proxy.stats()
    assert sum(stats["normalizations"].values()) == 2 and stats["branches"] == {"history_edited": 1}
    # the tidied replies were rendered from their sampled ids: the segment is one exact sequence
    sample = render_episode(first, None)
    for turn, (reply, _) in zip(first.turns, replies, strict=False):
        assert turn.prompt_ids == reply["prompt_token_ids"] and turn.token_ids == reply["choices"][0]["token_ids"]
        start, end = sample.turn_spans[turn.index]
        assert sample.input_ids[:start] == turn.prompt_ids and sample.input_ids[start:end] == turn.token_ids


def test_smolagents_code_agent_run_is_one_episode(policy) -> None:
    """smolagents 1.26 ``CodeAgent`` keeps each reply as ``(reply + "</code>").strip()``: its steps
    used to be one episode per model call; they are one episode now. (When it runs out of steps
    it asks for a final answer under another system prompt: that request rewrites the history,
    so it is a segment of its own.)"""
    from smolagents import CodeAgent, OpenAIServerModel
    from smolagents.memory import ActionStep

    from turngym.proxy import episode_headers, report_outcome
    from turngym.proxy.serve import ProxyThread

    proxy = CaptureProxy(policy, ProxyConfig(max_tokens=32))
    with ProxyThread(proxy) as server:
        model = OpenAIServerModel(model_id="tiny", api_base=server.base_url, api_key="unused", max_tokens=12,
                                  client_kwargs={"default_headers": episode_headers("code/0"), "max_retries": 0})
        agent = CodeAgent(tools=[], model=model, max_steps=3, verbosity_level=0)
        agent.run("What is 6 * 7?")
        report_outcome(server.url, "code/0", reward=0.0)
    steps = [s for s in agent.memory.steps if isinstance(s, ActionStep) and s.model_output is not None]
    episode, *final = proxy.finished
    assert len(episode.turns) == len(steps) == 3 and [ep.meta["segment_reason"] for ep in final] == ["history_edited"]
    assert set(episode.meta["tidied"]) == {"0", "1"} and sum(proxy.stats()["normalizations"].values()) == 2
    for turn, step in zip(episode.turns, steps, strict=True):  # what the agent kept is the reply, tidied
        assert step.model_output.strip() in (turn.action, (turn.action + "</code>").strip())
    sample = render_episode(episode, None)
    for turn in episode.turns:
        start, end = sample.turn_spans[turn.index]
        assert sample.input_ids[:start] == turn.prompt_ids and sample.input_ids[start:end] == turn.token_ids


def test_smolagents_code_agent_whose_code_runs_is_one_episode_with_its_role_conversions(policy) -> None:
    """When its code runs, CodeAgent merges a ``Calling tools:`` note into the kept reply (an edit:
    a branch); with the tool messages sent as user turns (the documented
    ``custom_role_conversions``) the reply comes back only tidied and the run is one episode.
    The untrained tiny model writes no valid code: a test double scripts it, fed through the model."""
    doubles = pytest.importorskip("tests.proxy.tool_doubles", reason="the scripted-reply test double comes with native tool calls")
    from smolagents import CodeAgent, OpenAIServerModel

    from turngym.proxy import episode_headers
    from turngym.proxy.serve import ProxyThread

    steps = ["Thought: compute it.\n<code>\nprint(6 * 7)\n</code>", "Thought: done.\n<code>\nfinal_answer(42)\n</code>"]
    script = doubles.ScriptedCallsPolicy(policy, lambda prompt: steps[min(doubles.assistant_turns(prompt), 1)])
    proxy = CaptureProxy(script, ProxyConfig(max_tokens=64))
    with ProxyThread(proxy) as server:
        for eid, conversions in (("plain", None), ("converted", {"tool-call": "user", "tool-response": "user"})):
            model = OpenAIServerModel(model_id="tiny", api_base=server.base_url, api_key="unused", max_tokens=48,
                                      custom_role_conversions=conversions,
                                      client_kwargs={"default_headers": episode_headers(eid), "max_retries": 0})
            assert CodeAgent(tools=[], model=model, max_steps=4, verbosity_level=0).run("What is 6 * 7?") == 42
    plain, converted = proxy.store.get("plain"), proxy.store.get("converted")
    assert [len(s.turns) for s in plain.segments] == [1, 1]  # "Calling tools: ..." merged into the reply
    assert [len(s.turns) for s in converted.segments] == [2] and converted.segments[0].turns[1].tidied == "stop_appended"
