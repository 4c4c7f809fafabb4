"""Real agent frameworks act in a turngym env through the proxy's native tool calls.

smolagents 1.26 ``ToolCallingAgent`` (``OpenAIServerModel``, which sends ``tools`` and
``tool_choice: "required"``, streamed and not) and openai-agents 0.24 (``@function_tool`` with
``OpenAIChatCompletionsModel``) each play Tools-v0's store task: every tool the agent calls runs
in the env (its JSON action grammar). Each agent run must be captured as ONE episode whose turns
carry exactly the ids and log-probs the framework's client received, and the captures must train.

The tiny model writes no parseable call by itself, so its replies follow a script fed through the
model (:class:`~tests.proxy.tool_doubles.ScriptedCallsPolicy`: the model's log-probs, the
script's ids). A run on the bare tiny model checks that its unparseable output is text, counted,
never an error.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import agents as agents_sdk
import httpx
import openai
import pytest
import smolagents

import turngym
from tests.proxy.tool_doubles import ScriptedCallsPolicy, assistant_turns, env_call, store_env, store_facts
from turngym.proxy import CaptureProxy, ProxyConfig, episode_headers, report_outcome
from turngym.proxy.serve import ProxyThread, build_proxy


def _smol_script(facts: dict[str, str]) -> Any:
    steps = [
        f'<tool_call>\n{{"name": "identify_customer", "arguments": {{"email": "{facts["email"]}"}}}}\n</tool_call>',
        f'<tool_call>\n{{"name": "update_order_address", "arguments": {{"order_id": "{facts["order_id"]}", '
        f'"address": "{facts["address"]}"}}}}\n</tool_call>',
        f'<tool_call>\n{{"name": "final_answer", "arguments": {{"answer": "Order {facts["order_id"]} now ships to '
        f'{facts["address"]}."}}}}\n</tool_call>',
    ]
    return lambda prompt: steps[min(assistant_turns(prompt), len(steps) - 1)]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory):
    _, request, _ = store_env()
    base = build_proxy("tiny", max_tokens=96, seed=0, device="cpu")
    proxy = CaptureProxy(ScriptedCallsPolicy(base.policy, _smol_script(store_facts(request))),
                         ProxyConfig(model_name="tiny", max_tokens=96, out=tmp_path_factory.mktemp("captured")))
    with ProxyThread(proxy) as server:
        yield server


class _Recorder(httpx.Client):
    """An httpx client that keeps every chat-completions answer the framework received (the raw JSON or SSE text)."""

    def __init__(self) -> None:
        super().__init__(event_hooks={"response": [self._keep]})
        self.answers: list[str] = []

    def _keep(self, response: httpx.Response) -> None:
        if response.request.url.path.endswith("/chat/completions"):
            response.read()
            self.answers.append(response.text)


def _replies(answers: list[str]) -> list[dict[str, Any]]:
    """Each answer's ``turngym`` block, token ids and log-probs (streamed answers: from their chunks)."""
    out = []
    for text in answers:
        if text.startswith("data:"):
            chunks = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and "[DONE]" not in line]
            lps = next(c["choices"][0]["logprobs"] for c in chunks if c.get("choices"))
            calls = [d for c in chunks if c.get("choices") for d in c["choices"][0]["delta"].get("tool_calls") or []]
            out.append({"logprobs": [x["logprob"] for x in lps["content"]], "calls": calls})
        else:
            body = json.loads(text)
            choice = body["choices"][0]
            out.append({"logprobs": [x["logprob"] for x in choice["logprobs"]["content"]], "ids": choice["token_ids"],
                        "prompt": body["prompt_token_ids"], "calls": choice["message"].get("tool_calls") or []})
    return out


def _smolagents_tools(env: Any, schemas: list[dict[str, Any]]) -> list[Any]:
    """The env's tools as smolagents ``Tool``s: each call is one env step in the env's JSON action grammar."""
    kinds = {"string", "integer", "number", "boolean", "array", "object"}
    tools = []
    for schema in schemas:
        fn = schema["function"]
        props, required = fn["parameters"].get("properties", {}), set(fn["parameters"].get("required", []))

        class EnvTool(smolagents.Tool):
            skip_forward_signature_validation = True
            name = fn["name"]
            description = fn["description"] or fn["name"]
            inputs = {k: {"type": v.get("type") if v.get("type") in kinds else "any",
                          "description": v.get("description", k), **({} if k in required else {"nullable": True})}
                      for k, v in props.items()}
            output_type = "string"

            def forward(self, **kwargs: Any) -> str:
                return env_call(env, self.name, {k: v for k, v in kwargs.items() if v is not None})

        tools.append(EnvTool())
    return tools


@pytest.mark.parametrize("stream", [False, True])
def test_smolagents_tool_calling_agent_is_one_captured_episode_that_trains(scripted, stream: bool, tmp_path: Path) -> None:
    server = scripted
    proxy = server.proxy
    env, request, schemas = store_env()
    eid = f"smol/{int(stream)}"
    http = _Recorder()
    model = smolagents.OpenAIServerModel(
        model_id="tiny", api_base=server.base_url, api_key="unused",
        client_kwargs={"default_headers": episode_headers(eid), "max_retries": 0, "http_client": http},
        logprobs=True, extra_body={"return_token_ids": True},
    )
    agent = smolagents.ToolCallingAgent(tools=_smolagents_tools(env, schemas[:4] + schemas[6:7]), model=model, max_steps=4,
                                        verbosity_level=0, stream_outputs=stream)
    answer = agent.run(request)
    obs, reward, terminated, truncated, info = env.step(str(answer))  # the final answer is the reply to the user
    report_outcome(server.url, eid, reward=float(reward), success=bool(info.get("success", reward > 0)),
                   env_id="turngym/Tools-v0", task_id=env.unwrapped.task.id)
    assert "now ships to" in str(answer) and terminated
    [ep] = [e for e in proxy.finished if e.meta["session"] == eid]  # three model calls, one episode, no branch
    replies = _replies(http.answers)
    assert len(ep.turns) == len(replies) == 3 and ep.meta["segments"] == 1
    assert [c["function"]["name"] for r in replies for c in r["calls"]] == ["identify_customer", "update_order_address",
                                                                            "final_answer"]
    for turn, reply in zip(ep.turns, replies, strict=True):
        assert turn.logprobs == reply["logprobs"]
        if not stream:
            assert turn.token_ids == reply["ids"] and turn.prompt_ids == reply["prompt"]
    for prev, turn in zip(ep.turns, ep.turns[1:], strict=False):  # each prompt extends the one before with its sampled ids
        assert turn.prompt_ids[: len(prev.prompt_ids) + len(prev.token_ids)] == prev.prompt_ids + prev.token_ids
    assert proxy.stats()["tool_history_recognized"] >= 2

    data = tmp_path / "episodes.jsonl"
    data.write_text(json.dumps(ep.to_dict()) + "\n")
    _train_one_step(data, tmp_path / "run")


def _train_one_step(data: Path, run: Path) -> None:
    from turngym.cli import main

    assert main(["train", "--episodes", str(data), "--steps", "1", "--out", str(run), "--algo", "grpo", "--quiet",
                 "--set", "micro_batch_size=1"]) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r.get("phase") == "rl"]
    assert len(rl) == 1 and math.isfinite(rl[0]["loss"]) and rl[0]["episodes"] >= 1


def _agents_script(facts: dict[str, str]) -> Any:
    call = f'<tool_call>\n{{"name": "get_order", "arguments": {{"order_id": "{facts["order_id"]}"}}}}\n</tool_call>'
    return lambda prompt: call if assistant_turns(prompt) == 0 else f"Order {facts['order_id']} is on its way."


def test_openai_agents_function_tool_is_one_captured_episode_that_trains(tmp_path: Path) -> None:
    env, request, _ = store_env()
    facts = store_facts(request)
    base = build_proxy("tiny", max_tokens=64, seed=0, device="cpu")
    proxy = CaptureProxy(ScriptedCallsPolicy(base.policy, _agents_script(facts)), ProxyConfig(model_name="tiny", max_tokens=64))
    calls: list[str] = []

    @agents_sdk.function_tool
    def get_order(order_id: str) -> str:
        """Look up an order by its id (such as 'O1003')."""
        calls.append(order_id)
        return env_call(env, "get_order", {"order_id": order_id})

    agents_sdk.set_tracing_disabled(True)
    eid = "oa/0"
    with ProxyThread(proxy) as server:
        http = _Recorder()
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0,
                                    http_client=httpx.AsyncClient(event_hooks={"response": [_async_keep(http.answers)]}))
        model = agents_sdk.OpenAIChatCompletionsModel(model="tiny", openai_client=client)
        agent = agents_sdk.Agent(name="store", instructions="You help store customers.", tools=[get_order], model=model,
                                 model_settings=agents_sdk.ModelSettings(
                                     tool_choice="required", extra_headers=episode_headers(eid),
                                     extra_body={"return_token_ids": True, "logprobs": True}, include_usage=True))
        result = asyncio.run(agents_sdk.Runner.run(agent, request, max_turns=4))
        obs, reward, terminated, _, info = env.step(result.final_output)
        report_outcome(server.url, eid, reward=float(reward), env_id="turngym/Tools-v0", task_id=env.unwrapped.task.id)
    assert calls == [facts["order_id"]] and "on its way" in result.final_output
    [ep] = [e for e in proxy.finished if e.meta["session"] == eid]
    replies = _replies(http.answers)
    assert len(ep.turns) == len(replies) == 2 and ep.meta["segments"] == 1
    assert [c["function"]["name"] for c in replies[0]["calls"]] == ["get_order"] and not replies[1]["calls"]
    for turn, reply in zip(ep.turns, replies, strict=True):
        assert turn.token_ids == reply["ids"] and turn.prompt_ids == reply["prompt"] and turn.logprobs == reply["logprobs"]
    data = tmp_path / "episodes.jsonl"
    data.write_text(json.dumps(ep.to_dict()) + "\n")
    _train_one_step(data, tmp_path / "run")


def _async_keep(answers: list[str]) -> Any:
    async def keep(response: httpx.Response) -> None:
        if response.request.url.path.endswith("/chat/completions"):
            await response.aread()
            answers.append(response.text)

    return keep



def test_turngyms_openai_agent_acts_through_native_tool_calls() -> None:
    """The benchmark side: ``openai:`` with ``native_tools`` sends Tools-v0's tool schemas and turns the
    served model's ``tool_calls`` into the env's JSON actions. The server is a test double answering
    as a tool-calling model would (a Tools-v0 prompt does not fit the tiny model's 4096 positions)."""
    from turngym.agents.openai_http import OpenAIPolicy
    from turngym.rollout import run_episodes

    env, request, schemas = store_env()
    facts = store_facts(request)
    plan = [("identify_customer", {"email": facts["email"]}),
            ("update_order_address", {"order_id": facts["order_id"], "address": facts["address"]}), None]
    seen: list[dict[str, Any]] = []

    def tool_calling_server_double(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        seen.append(body)
        step = plan[len(seen) - 1]
        message: dict[str, Any] = {"role": "assistant", "content": "Done: it ships to the new address."}
        if step is not None:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{len(seen)}", "type": "function", "function": {"name": step[0], "arguments": json.dumps(step[1])}}]}
        return httpx.Response(200, json={"choices": [{"index": 0, "message": message,
                                                      "finish_reason": "tool_calls" if step else "stop"}]})

    with OpenAIPolicy("http://double/v1", model="m", max_retries=0, native_tools=True,
                      transport=httpx.MockTransport(tool_calling_server_double)) as policy:
        [ep] = run_episodes(lambda: turngym.make("turngym/Tools-v0", sources=["store"]), policy, [0], env_id="turngym/Tools-v0")
    assert seen[0]["tools"] == schemas and "stop" not in seen[0]  # the env's tools, natively; no stop cutting a call
    assert [json.loads(t.action) for t in ep.turns[:2]] == [[{"name": n, "arguments": a}] for n, a in plan[:2]]
    assert ep.turns[2].action == "Done: it ships to the new address." and len(ep.turns) == 3
    assert all(t.action_valid for t in ep.turns) and ep.outcome["success"]
    with OpenAIPolicy("http://double/v1", model="m", max_retries=0, native_tools=True,
                      transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"choices": [{"message": {
                          "role": "assistant", "content": None, "tool_calls": [
                              {"id": "c", "type": "function", "function": {"name": "get_order", "arguments": "{oops"}}]}}]}))) as policy:
        [bad] = run_episodes(lambda: turngym.make("turngym/Tools-v0", sources=["store"], max_turns=1), policy, [0])
    assert not bad.turns[0].action_valid and bad.infra_error is None  # a broken call is the agent's invalid action


def test_the_bare_tiny_models_output_reaches_smolagents_as_counted_text_never_an_error() -> None:
    """No script: the tiny model writes garbage after the forced call opening. Every request is answered
    (text, counted as a parse failure), smolagents handles it as the model's error, and the run is captured."""
    proxy = build_proxy("tiny", max_tokens=24, seed=0, device="cpu")
    env, request, schemas = store_env()
    with ProxyThread(proxy) as server:
        model = smolagents.OpenAIServerModel(model_id="tiny", api_base=server.base_url, api_key="unused",
                                             client_kwargs={"default_headers": episode_headers("bare/0"), "max_retries": 0})
        agent = smolagents.ToolCallingAgent(tools=_smolagents_tools(env, schemas[:2]), model=model, max_steps=2, verbosity_level=0)
        agent.run(request)
        report_outcome(server.url, "bare/0", reward=0.0)
    stats = proxy.stats()
    assert stats["errors"] == {} and stats["completions"] >= 2
    assert stats["tool_parse_failures"] + stats.get("tool_calls", 0) >= 2
    assert sum(len(ep.turns) for ep in proxy.finished) == stats["completions"]  # every answered request was recorded


def test_turngyms_openai_agent_acts_natively_in_the_mcp_env() -> None:
    """MCP-SQLite's tools come from the real MCP server: the same native path sends them and runs the call."""
    from turngym.agents.openai_http import OpenAIPolicy
    from turngym.rollout import run_episodes

    seen: list[dict[str, Any]] = []

    def tool_calling_server_double(req: httpx.Request) -> httpx.Response:
        seen.append(json.loads(req.content))
        message: dict[str, Any] = {"role": "assistant", "content": "There are several tables."}
        if len(seen) == 1:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "list_tables", "arguments": "{}"}}]}
        return httpx.Response(200, json={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

    with OpenAIPolicy("http://double/v1", model="m", max_retries=0, native_tools=True,
                      transport=httpx.MockTransport(tool_calling_server_double)) as policy:
        [ep] = run_episodes(lambda: turngym.make("turngym/MCP-SQLite-v0", max_turns=2), policy, [0], env_id="turngym/MCP-SQLite-v0")
    assert "list_tables" in {t["function"]["name"] for t in seen[0]["tools"]} and "stop" not in seen[0]
    assert json.loads(ep.turns[0].action) == [{"name": "list_tables", "arguments": {}}] and ep.turns[0].action_valid
    assert ep.infra_error is None
