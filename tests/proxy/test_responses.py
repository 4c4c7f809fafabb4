"""``/v1/responses``: the translation to and from the chat path, the real ``openai`` client and
openai-agents' default model (``OpenAIResponsesModel``) through the proxy, and OpenAI-shaped
errors for everything the proxy does not serve."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from turngym.proxy import ProxyError, episode_headers, report_outcome
from turngym.proxy.responses import LOGPROBS_INCLUDE, from_chat, stream_events, to_chat
from turngym.proxy.serve import ProxyThread, build_proxy

LOGPROBS = [LOGPROBS_INCLUDE]
STOP = {"stop": [" "]}  # the tiny model rambles: a reply cut at max_output_tokens is "incomplete", which openai-agents raises on


@pytest.fixture(scope="module")
def served():
    proxy = build_proxy("tiny", max_tokens=64, seed=0, device="cpu")
    with ProxyThread(proxy) as server:
        yield server, openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)


def _captured(server, episode_id: str) -> list:
    return [ep for ep in server.proxy.finished if ep.meta["session"] == episode_id]


@pytest.fixture(scope="module")
def chat_serves_tools(served) -> bool:
    """Whether the chat path accepts ``tools`` (native tool calls land on another branch): probed once."""
    server, client = served
    try:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                       extra_headers=episode_headers("probe/tools"),
                                       tools=[{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}])
    except openai.BadRequestError as exc:
        if "tool" in str(exc):
            return False
        raise
    report_outcome(server.url, "probe/tools", reward=0.0)
    return True


# ---------------------------------------------------------------------------------- translation
def test_a_responses_request_becomes_the_chat_body_it_means() -> None:
    body = {
        "model": "tiny", "instructions": "Be brief.", "max_output_tokens": 9, "include": LOGPROBS, "user": "ep/1",
        "input": [
            {"role": "user", "content": "What is 6*7?"},  # EasyInputMessage: no type
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "Let me compute.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "calc", "arguments": '{"x": "6*7"}'},
            {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "calc", "arguments": '{"x": "7*6"}'},
            {"type": "function_call_output", "call_id": "call_a", "output": "42"},
            {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "42"}]},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Answer now."}]},
        ],
        "tools": [{"type": "function", "name": "calc", "description": "arithmetic", "strict": True,
                   "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}],
        "tool_choice": {"type": "function", "name": "calc"}, "parallel_tool_calls": False,
        "store": True, "metadata": {"k": "v"}, "truncation": "disabled",
    }
    chat = to_chat(body)
    calls = [{"id": "call_a", "type": "function", "function": {"name": "calc", "arguments": '{"x": "6*7"}'}},
             {"id": "call_b", "type": "function", "function": {"name": "calc", "arguments": '{"x": "7*6"}'}}]
    assert chat == {
        "model": "tiny", "max_tokens": 9, "user": "ep/1", "logprobs": True, "parallel_tool_calls": False,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 6*7?"},
            {"role": "assistant", "content": "Let me compute.", "tool_calls": calls},  # one reply: text and its calls
            {"role": "tool", "tool_call_id": "call_a", "content": "42"},
            {"role": "tool", "tool_call_id": "call_b", "content": "42"},
            {"role": "system", "content": "Answer now."},
        ],
        "tools": [{"type": "function", "function": {"name": "calc", "description": "arithmetic", "strict": True,
                                                    "parameters": body["tools"][0]["parameters"]}}],
        "tool_choice": {"type": "function", "function": {"name": "calc"}},
    }
    assert to_chat({"model": "tiny", "input": "hi"})["messages"] == [{"role": "user", "content": "hi"}]
    only_calls = to_chat({"model": "tiny", "input": [body["input"][2]]})["messages"]
    assert only_calls == [{"role": "assistant", "content": None, "tool_calls": calls[:1]}]
    tools = body["tools"]
    for choice in ("auto", "none", "required"):
        assert to_chat({"model": "tiny", "input": "x", "tools": tools, "tool_choice": choice})["tool_choice"] == choice
    assert "tool_choice" not in to_chat({"model": "tiny", "input": "x", "tool_choice": "auto", "tools": []})  # means nothing
    assert to_chat({"model": "tiny", "input": "x", "tool_choice": "required"})["tool_choice"] == "required"  # chat refuses it


@pytest.mark.parametrize(("body", "match"), [
    ({"previous_response_id": "resp_1"}, "no stored responses"),
    ({"conversation": "conv_1"}, "no stored responses"),
    ({"tools": [{"type": "web_search"}]}, "only function tools"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "'reasoning' are not supported"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "only text parts"),
    ({"input": [{"role": "critic", "content": "x"}]}, "role must be one of"),
    ({"input": []}, "non-empty list"),
    ({"tool_choice": {"type": "allowed_tools"}}, "tool_choice must be"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "string call_id, name and arguments"),
])
def test_what_the_proxy_cannot_serve_is_refused_with_the_reason(body, match) -> None:
    with pytest.raises(ProxyError, match=match) as err:
        to_chat({"model": "tiny", "input": "x", **body})
    assert err.value.status == 400 and err.value.body()["error"]["type"] == "invalid_request_error"


def _chat_reply(content, tool_calls=None, finish="stop") -> dict:
    message = {"role": "assistant", "content": content} | ({"tool_calls": tool_calls} if tool_calls else {})
    lps = {"content": [{"token": "4", "logprob": -0.5, "bytes": [52], "top_logprobs": []}]}
    return {"id": "chatcmpl-abc", "object": "chat.completion", "created": 7, "model": "tiny",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": lps}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}, "turngym": {"episode_id": "e"}}


def test_a_chat_answer_becomes_responses_output_and_events() -> None:
    call = {"id": "call_x", "type": "function", "function": {"name": "calc", "arguments": '{"x": "1"}'}}
    out = from_chat(_chat_reply("4", [call]), {"model": "tiny", "input": "x"})
    msg, fc = out["output"]
    assert msg["content"][0] == {"type": "output_text", "text": "4", "annotations": [],
                                 "logprobs": [{"token": "4", "logprob": -0.5, "bytes": [52], "top_logprobs": []}]}
    assert (fc["type"], fc["call_id"], fc["name"], fc["arguments"]) == ("function_call", "call_x", "calc", '{"x": "1"}')
    assert out["status"] == "completed" and out["usage"]["input_tokens"] == 5 and out["usage"]["output_tokens"] == 1
    assert out["turngym"] == {"episode_id": "e"}
    calls_only = from_chat(_chat_reply(None, [call]), {"model": "tiny"})["output"]
    assert [i["type"] for i in calls_only] == ["function_call"]  # no empty message beside a call
    cut = from_chat(_chat_reply("4", finish="length"), {"model": "tiny"})
    assert cut["status"] == "incomplete" and cut["incomplete_details"] == {"reason": "max_output_tokens"}

    events = stream_events(out)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed",
    ]
    assert events[4]["delta"] == "4" and events[9]["delta"] == '{"x": "1"}' and events[-1]["response"] == out
    assert stream_events(cut)[-1]["type"] == "response.incomplete"


# ---------------------------------------------------------------------------------- the real clients
def test_the_openai_client_threads_responses_into_one_episode(served) -> None:
    server, client = served
    h = episode_headers("resp/0")
    first = client.responses.create(model="tiny", instructions="You add numbers.", input="2 + 2 =", max_output_tokens=6,
                                    include=LOGPROBS, extra_headers=h, extra_body={"return_token_ids": True})
    # the next request carries the previous output items back, as the Responses API is used
    items = [{"role": "user", "content": "2 + 2 ="}, *[i.model_dump(exclude_none=True) for i in first.output],
             {"role": "user", "content": "and 3 + 3 ="}]
    raw = client.responses.with_raw_response.create(model="tiny", instructions="You add numbers.", input=items,
                                                    max_output_tokens=6, include=LOGPROBS, extra_headers=h,
                                                    extra_body={"return_token_ids": True})
    assert "X-Turngym-Branched" not in raw.headers and raw.headers["X-Turngym-Turn"] == "1"
    second = raw.parse()
    report_outcome(server.url, "resp/0", reward=1.0)
    [ep] = _captured(server, "resp/0")
    assert len(ep.turns) == 2
    for turn, reply in zip(ep.turns, (first, second), strict=True):
        [msg] = reply.output
        assert turn.action == msg.content[0].text == reply.output_text
        assert turn.logprobs == [lp.logprob for lp in msg.content[0].logprobs]
        assert turn.token_ids == msg.model_extra["token_ids"] and turn.prompt_ids == reply.model_extra["prompt_token_ids"]
        assert reply.usage.output_tokens == len(turn.token_ids)

    events = list(client.responses.create(model="tiny", input="1 + 1 =", max_output_tokens=4, stream=True,
                                          extra_headers=episode_headers("resp/1")))
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-1].response.output_text == server.proxy.store.get("resp/1").last.text
    assert server.proxy.stats()["responses_requests"] >= 3


def _agent(server, episode_id: str, **settings):
    from agents import Agent, ModelSettings, OpenAIResponsesModel

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0,
                                default_headers=episode_headers(episode_id))
    return Agent(name="adder", instructions="You add numbers.", model=OpenAIResponsesModel("tiny", client),
                 model_settings=ModelSettings(max_tokens=48, response_include=LOGPROBS, extra_body=STOP, **settings))


def test_openai_agents_default_responses_model_is_captured_one_episode_per_run(served) -> None:
    """openai-agents 0.24's Agent with its default model (the Responses API), plain and streamed."""
    from agents import Runner, RunResultStreaming, set_tracing_disabled

    set_tracing_disabled(True)
    server, _ = served
    plain = asyncio.run(Runner.run(_agent(server, "agents/0"), "What is 2 + 2?"))

    async def streamed() -> tuple[RunResultStreaming, list]:
        run = Runner.run_streamed(_agent(server, "agents/1"), "What is 3 + 3?")
        events = [e async for e in run.stream_events()]
        return run, events

    live, events = asyncio.run(streamed())
    assert any(getattr(e, "data", None) is not None and e.data.type == "response.output_text.delta" for e in events)
    for eid, run in (("agents/0", plain), ("agents/1", live)):
        report_outcome(server.url, eid, reward=1.0, env_id="agents")
        [ep] = _captured(server, eid)
        [response] = run.raw_responses
        [msg] = response.output
        [turn] = ep.turns
        assert turn.action == run.final_output == msg.content[0].text
        assert turn.logprobs == [lp.logprob for lp in msg.content[0].logprobs]  # what the client received
        assert response.usage.output_tokens == len(turn.token_ids)
        assert ep.system_prompt == "You add numbers."


@pytest.mark.parametrize("stream", [False, True])
def test_openai_agents_function_tool_through_responses(served, chat_serves_tools, stream: bool) -> None:
    """A ``@function_tool`` run on the Responses model: the call goes out as a function_call item,
    its result comes back as function_call_output, and the run is one episode whose ids and
    log-probs are what the client received. The untrained tiny model writes no parseable call, so
    (as in the chat tool tests) a test double scripts its replies, fed through the real model."""
    if not chat_serves_tools:
        pytest.skip("the chat path refuses tools until native tool calls (branch toolcalls) are merged")
    doubles = pytest.importorskip("tests.proxy.tool_doubles", reason="the tool-call test doubles come with native tool calls")
    from agents import Runner, function_tool, set_tracing_disabled

    from turngym.proxy import CaptureProxy, ProxyConfig

    set_tracing_disabled(True)
    base, _ = served
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    script = doubles.ScriptedCallsPolicy(base.proxy.policy,
                                         lambda prompt: call if doubles.assistant_turns(prompt) == 0 else "It is 5.")
    proxy = CaptureProxy(script, ProxyConfig(model_name="tiny", max_tokens=64))
    added: list[tuple[int, int]] = []

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        added.append((a, b))
        return a + b

    with ProxyThread(proxy) as server:
        agent = _agent(server, "agents/tools", tool_choice="required").clone(tools=[add], reset_tool_choice=True)
        agent.model_settings.extra_body = {"return_token_ids": True}

        async def play():
            if not stream:
                return await Runner.run(agent, "What is 2 + 3? Use the tool.", max_turns=4)
            run = Runner.run_streamed(agent, "What is 2 + 3? Use the tool.", max_turns=4)
            async for _ in run.stream_events():
                pass
            return run

        run = asyncio.run(play())
        report_outcome(server.url, "agents/tools", reward=1.0)
    assert added == [(2, 3)] and run.final_output == "It is 5."
    [ep] = proxy.finished  # the function_call_output threaded the call back: one episode, no branch
    first, second = run.raw_responses
    [fc] = first.output
    assert (fc.type, fc.name, json.loads(fc.arguments)) == ("function_call", "add", {"a": 2, "b": 3})
    assert len(ep.turns) == 2 and ep.meta["segments"] == 1
    [msg] = second.output
    assert ep.turns[1].action == msg.content[0].text and ep.turns[1].token_ids == msg.model_extra["token_ids"]
    assert ep.turns[1].logprobs == [lp.logprob for lp in msg.content[0].logprobs]


def test_every_error_body_is_openai_shaped(served, monkeypatch: pytest.MonkeyPatch) -> None:
    server, client = served

    def broken() -> dict:
        raise RuntimeError("a bug")

    monkeypatch.setattr(server.proxy, "stats", broken)  # an unexpected failure inside a route
    r = httpx.get(server.url + "/turngym/stats")
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error" and "RuntimeError" in r.json()["error"]["message"]
    monkeypatch.undo()
    for method, path, status in (("GET", "/v1/nope", 404), ("GET", "/v1/responses", 405), ("DELETE", "/v1/chat/completions", 405),
                                 ("GET", "/v1/responses/resp_1", 404), ("POST", "/v1/embeddings", 404)):
        r = httpx.request(method, server.url + path)
        err = r.json()["error"]
        assert r.status_code == status and set(err) == {"message", "type", "param", "code"} and err["message"]
    with pytest.raises(openai.NotFoundError, match="/v1/responses"):  # names what is served
        client.embeddings.create(model="tiny", input="x")
    with pytest.raises(openai.BadRequestError, match="no stored responses"):
        client.responses.create(model="tiny", input="x", previous_response_id="resp_1", extra_headers=episode_headers("prev/0"))
    with pytest.raises(openai.BadRequestError, match="X-Turngym-Episode"):
        client.responses.create(model="tiny", input="x")
    r = httpx.post(server.base_url + "/responses", content=b"{not json", headers=episode_headers("bad/json"))
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert server.proxy.store.get("prev/0") is None and json.loads(httpx.get(server.url + "/turngym/stats").text)["errors"]
