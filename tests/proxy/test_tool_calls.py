"""Native tool calls on the proxy: parsers, rendering, tool_choice, streaming deltas, history continuation."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import openai
import pytest

from tests.proxy.tool_doubles import ScriptedCallsPolicy
from turngym.core.errors import ConfigError
from turngym.proxy import CaptureProxy, ProxyConfig, episode_headers, episode_ref, report_outcome
from turngym.proxy.serve import ProxyThread, build_proxy
from turngym.proxy.tool_parsers import TOOL_PARSERS, HermesParser, Llama3JsonParser, detect_parser
from turngym.proxy.tools import ToolTemplate, parse_tool_request, recognize_calls, tools_system_prompt

ADD = {"type": "function", "function": {"name": "add", "description": "Add two numbers.",
                                        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}
MUL = {"type": "function", "function": {"name": "mul", "description": "Multiply.", "parameters": {"type": "object", "properties": {}}}}
USER = [{"role": "user", "content": "What is 2 + 3?"}]
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'

QWEN_LIKE = (  # a template that renders tools itself (Qwen 2.5's shape, shortened)
    "{% if tools %}<|im_start|>system\n{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "# Tools\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools><|im_end|>\n"
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m['role'] == 'system' %}{% elif m['role'] == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "\n<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tiny() -> Any:
    return build_proxy("tiny", max_tokens=48, seed=0, device="cpu").policy


def _proxy(policy: Any, script: Any = None, **config: Any) -> CaptureProxy:
    return CaptureProxy(ScriptedCallsPolicy(policy, script or (lambda _: None)), ProxyConfig(model_name="tiny", max_tokens=48, **config))


def _chat(proxy: CaptureProxy, eid: str, messages: list, **body: Any) -> dict[str, Any]:
    body = {"model": "tiny", "messages": messages, "return_token_ids": True, "logprobs": True, **body}
    return asyncio.run(proxy.chat(body, episode_ref(eid)))[0]


# ---------------------------------------------------------------------------------------------- parsers
def test_hermes_parser_reads_blocks_and_keeps_malformed_output_as_text() -> None:
    p = HermesParser()
    r = p.parse(f"Let me add.\n{CALL}\n{CALL.replace('add', 'mul')}")
    assert r.content == "Let me add." and [c.name for c in r.calls] == ["add", "mul"] and r.attempted
    assert json.loads(r.calls[0].arguments) == {"a": 2, "b": 3} and r.calls[0].id != r.calls[1].id
    assert p.parse('<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 1}"}').calls[0].arguments == '{"a": 1}'  # unterminated, string args
    for bad in ['<tool_call>\n{"name": "add", "arguments": {"a": 2</tool_call>', '<tool_call>{"arguments": {}}</tool_call>',
                '<tool_call>{"name": "add", "arguments": [1]}</tool_call>', '<tool_call>{"name": "add", "x": 1}</tool_call>',
                CALL + '<tool_call>nope</tool_call>', "<tool_call>" + "[" * 100_000]:
        r = p.parse(bad)
        assert not r.calls and r.attempted and r.content == bad
    assert p.parse("just text") == type(r)("just text") and p.parse("").content is None
    assert p.forced_prefix(None) == '<tool_call>\n{"name": "' and p.forced_prefix("add").endswith('"add", "arguments": ')
    assert p.parse(p.render_calls([("add", {"a": 1})])).calls[0].name == "add"


def test_llama3_json_parser_reads_bare_json_calls() -> None:
    p = Llama3JsonParser()
    r = p.parse('<|python_tag|>{"name": "add", "parameters": {"a": 1}}; {"name": "mul", "parameters": {}}')
    assert [c.name for c in r.calls] == ["add", "mul"] and r.content is None
    assert [c.name for c in p.parse('[{"name": "add", "arguments": {}}]').calls] == ["add"]
    assert p.parse("The answer is 5.").content == "The answer is 5." and not p.parse("The answer is 5.").attempted
    broken = p.parse('{"name": "add", "parameters": {')
    assert not broken.calls and broken.attempted and broken.content == '{"name": "add", "parameters": {'
    assert p.parse(p.forced_prefix("add") + '{"a": 1}}').calls[0].arguments == '{"a": 1}'
    assert p.parse(p.render_calls([("add", {"a": 1}), ("mul", {})])).calls[1].name == "mul"


def test_parser_is_chosen_from_the_template_and_unknown_names_are_refused(tiny) -> None:
    assert set(TOOL_PARSERS) == {"hermes", "llama3_json"}
    assert detect_parser(QWEN_LIKE) == "hermes" and detect_parser("{{ '<|python_tag|>' }}") == "llama3_json"
    assert detect_parser(tiny.tokenizer.chat_template) == "hermes" and detect_parser(None) == "hermes"
    assert _proxy(tiny, tool_call_parser="llama3_json").tool_parser.name == "llama3_json"
    with pytest.raises(ConfigError, match="unknown tool call parser"):
        ProxyConfig(tool_call_parser="mistral")


def test_tool_requests_are_validated() -> None:
    assert parse_tool_request({}) is None and parse_tool_request({"tools": [], "tool_choice": "auto"}) is None
    req = parse_tool_request({"tools": [ADD, MUL], "tool_choice": {"type": "function", "function": {"name": "mul"}},
                              "parallel_tool_calls": False})
    assert req is not None and req.choice == "named" and req.name == "mul" and not req.parallel and req.forced
    assert not parse_tool_request({"tools": [ADD], "tool_choice": "none"}).active
    for body, why in [({"tool_choice": "required"}, "non-empty tools"), ({"tools": [{"type": "function"}]}, "tools\\[0\\]"),
                      ({"tools": [ADD, ADD]}, "distinct"), ({"tools": [ADD], "tool_choice": "always"}, "tool_choice"),
                      ({"tools": [ADD], "tool_choice": {"type": "function", "function": {"name": "mul"}}}, "among the tools"),
                      ({"tools": [ADD], "parallel_tool_calls": "yes"}, "true or false"), ({"tools": [ADD] * 200}, "limit")]:
        with pytest.raises(ValueError, match=why):
            parse_tool_request(body)


# ---------------------------------------------------------------------------------------------- rendering
def test_a_template_that_ignores_tools_gets_them_as_a_system_prompt(tiny) -> None:
    proxy = _proxy(tiny)
    assert not proxy.tool_template.native
    msgs, schemas = proxy.tool_template.prepare([{"role": "system", "content": "Be brief."}, *USER], parse_tool_request({"tools": [ADD]}))
    assert schemas is None and msgs[0]["content"].startswith("Be brief.\n\n# Tools") and '"name": "add"' in msgs[0]["content"]
    assert msgs[0]["content"].endswith(HermesParser.instructions) and msgs[1:] == USER
    r = _chat(proxy, "render/0", USER, tools=[ADD])
    assert tools_system_prompt([ADD], proxy.tool_parser) in proxy.tokenizer.decode(r["prompt_token_ids"])
    r = _chat(proxy, "render/1", USER, tools=[ADD], tool_choice="none")  # none: not rendered, not parsed
    assert "# Tools" not in proxy.tokenizer.decode(r["prompt_token_ids"])


def test_a_template_that_renders_tools_gets_them_natively(tiny) -> None:
    tok = copy.deepcopy(tiny.tokenizer)
    tok.chat_template = QWEN_LIKE
    t = ToolTemplate(tok, HermesParser())
    assert t.native
    msgs, schemas = t.prepare(USER, parse_tool_request({"tools": [ADD]}))
    assert msgs == USER and schemas == [ADD]
    text = tok.apply_chat_template(msgs, tools=schemas, tokenize=False)
    assert '<tools>{"type": "function", "function": {"name": "add"' in text and "What is 2 + 3?" in text


# ---------------------------------------------------------------------------------------------- tool_choice
def test_required_and_named_force_the_call_opening_and_bad_output_is_counted_text(tiny) -> None:
    proxy = _proxy(tiny)  # the bare tiny model: it writes garbage after the forced opening
    r = _chat(proxy, "force/0", USER, tools=[ADD, MUL], tool_choice="required")
    msg = r["choices"][0]["message"]
    assert msg["content"].startswith('<tool_call>\n{"name": "') and "tool_calls" not in msg
    forced = proxy.renderer.encode('<tool_call>\n{"name": "')
    assert r["choices"][0]["token_ids"][: len(forced)] == forced
    r = _chat(proxy, "force/1", USER, tools=[ADD, MUL], tool_choice={"type": "function", "function": {"name": "mul"}})
    assert r["choices"][0]["message"]["content"].startswith('<tool_call>\n{"name": "mul", "arguments": ')
    assert proxy.stats()["tool_parse_failures"] == 2 and proxy.stats().get("tool_calls", 0) == 0
    assert r["choices"][0]["finish_reason"] in ("stop", "length")


def test_calls_are_parsed_named_choice_and_unknown_functions_enforced(tiny) -> None:
    two = CALL + "\n" + CALL.replace('"add"', '"mul"').replace('{"a": 2, "b": 3}', "{}")
    proxy = _proxy(tiny, lambda _: two)
    r = _chat(proxy, "calls/0", USER, tools=[ADD, MUL])
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in choice["message"]["tool_calls"]] == [
        ("add", {"a": 2, "b": 3}), ("mul", {})]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in choice["message"]["tool_calls"])
    r = _chat(proxy, "calls/1", USER, tools=[ADD, MUL], parallel_tool_calls=False)  # one call, then the parser's stop
    assert [c["function"]["name"] for c in r["choices"][0]["message"]["tool_calls"]] == ["add"]
    assert proxy.tokenizer.decode(r["choices"][0]["token_ids"]).rstrip().endswith("</tool_call>")
    r = _chat(proxy, "calls/2", USER, tools=[MUL])  # "add" is not offered: text, counted
    assert r["choices"][0]["message"]["content"] == two and proxy.stats()["tool_parse_failures"] == 1
    r = _chat(proxy, "calls/3", USER, tools=[ADD, MUL], tool_choice="none")  # none: text is text
    assert r["choices"][0]["message"]["content"] == two and r["choices"][0]["finish_reason"] == "stop"


# ---------------------------------------------------------------------------------------------- history
def _tool_history_episode(proxy: CaptureProxy, eid: str) -> tuple[list[dict], list[dict]]:
    msgs = list(USER)
    replies = []
    for _ in range(2):
        r = _chat(proxy, eid, msgs, tools=[ADD])
        replies.append(r)
        m = r["choices"][0]["message"]
        msgs.append(m)
        for c in m.get("tool_calls") or []:
            msgs.append({"role": "tool", "tool_call_id": c["id"], "content": "5"})
    return msgs, replies


def test_a_history_with_tool_calls_and_tool_messages_continues_one_episode(tiny) -> None:
    script = lambda prompt: CALL if prompt.count("<|im_start|>assistant") == 1 else "It is 5."  # noqa: E731
    for template in (None, QWEN_LIKE):
        policy = tiny
        if template is not None:
            policy = copy.copy(tiny)
            policy.tokenizer = copy.deepcopy(tiny.tokenizer)
            policy.tokenizer.chat_template = template
            policy.renderer = type(tiny.renderer)(policy.tokenizer)
        proxy = _proxy(policy, script)
        assert proxy.tool_template.native == (template is not None)
        msgs, replies = _tool_history_episode(proxy, "hist/0")
        assert replies[0]["choices"][0]["finish_reason"] == "tool_calls" and replies[1]["choices"][0]["message"]["content"] == "It is 5."
        assert proxy.stats()["tool_history_recognized"] == 1 and not proxy.stats()["branches"]
        asyncio.run(proxy.outcome(episode_ref("hist/0"), {"reward": 1.0}))
        [ep] = proxy.finished
        for turn, r in zip(ep.turns, replies, strict=True):  # one episode, exactly what the client received
            assert turn.token_ids == r["choices"][0]["token_ids"] and turn.prompt_ids == r["prompt_token_ids"]
            assert turn.logprobs == [x["logprob"] for x in r["choices"][0]["logprobs"]["content"]]
        first, second = ep.turns
        assert second.prompt_ids[: len(first.prompt_ids) + len(first.token_ids)] == first.prompt_ids + first.token_ids
        tail = proxy.tokenizer.decode(second.prompt_ids[len(first.prompt_ids) + len(first.token_ids):])
        assert ("<tool_response>\n5\n</tool_response>" if template else "<|im_start|>tool\n5<|im_end|>") in tail


def test_a_call_the_proxy_did_not_issue_is_rendered_as_text_and_branches(tiny) -> None:
    proxy = _proxy(tiny, lambda _: CALL)
    r = _chat(proxy, "forge/0", USER, tools=[ADD])
    m = copy.deepcopy(r["choices"][0]["message"])
    m["tool_calls"][0]["id"] = "call_" + "0" * 24  # not the id the proxy issued
    m["tool_calls"][0]["function"]["arguments"] = '{"a": 20, "b": 3}'
    r2 = _chat(proxy, "forge/0", [*USER, m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": "23"}], tools=[ADD])
    assert r2["turngym"]["branched"] == "history_edited"
    assert '"a": 20' in proxy.tokenizer.decode(r2["prompt_token_ids"])  # the forged call, written as the model writes calls
    issued = {"call_" + "1" * 24: ("T", frozenset({"call_" + "1" * 24, "call_" + "2" * 24}))}
    partial = [{"role": "assistant", "content": "", "tool_calls": [{"id": "call_" + "1" * 24, "function": {"name": "a", "arguments": "{}"}}]}]
    assert recognize_calls(partial, issued) == (partial, 0)  # half of a turn's calls is an edit, not that turn
    text = [{"role": "assistant", "content": "Calling tools: call_" + "1" * 24 + ", call_" + "2" * 24}]
    assert recognize_calls(text, issued) == ([{"role": "assistant", "content": "T"}], 1)  # smolagents' re-serialization


# ---------------------------------------------------------------------------------------------- streaming
def test_streamed_tool_calls_arrive_as_deltas(tiny) -> None:
    proxy = _proxy(tiny, lambda _: "Sure.\n" + CALL)
    with ProxyThread(proxy) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        chunks = list(client.chat.completions.create(model="tiny", messages=USER, tools=[ADD], stream=True,
                                                     extra_headers=episode_headers("sse/0")))
        report_outcome(server.url, "sse/0", reward=0.0)
    deltas = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    assert [(d.index, d.type, d.function.name, json.loads(d.function.arguments)) for d in deltas] == [(0, "function", "add", {"a": 2, "b": 3})]
    assert deltas[0].id.startswith("call_") and chunks[0].choices[0].delta.content == "Sure."
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


class _SpelledCallPolicy:
    """Test double: a 'model' that always answers with one Hermes call spelled character by character
    (as a sampler may spell it, and as re-tokenizing its text never would)."""

    def __init__(self, tokenizer: Any) -> None:
        from turngym.agents.render import ChatRenderer

        self.tokenizer, self.renderer = tokenizer, ChatRenderer(tokenizer)
        self.temperature, self.top_p, self.max_positions = 1.0, 1.0, 8192
        self.reply = [i for ch in CALL for i in tokenizer.encode(ch, add_special_tokens=False)] + [tokenizer.eos_token_id]

    def generate(self, prompts: Any, stops: Any, reusable: Any, limits: Any) -> Any:
        from turngym.agents.hf import Generation

        text = self.tokenizer.decode(self.reply, skip_special_tokens=True)
        return [Generation(list(self.reply), [-1.0] * len(self.reply), text, "eos", prompt_ids=list(p)) for p in prompts]


def test_smollm2s_real_template_gets_injected_tools_and_splices_the_sampled_calls() -> None:
    """SmolLM2-Instruct's template (read from its GGUF by turngym's loader) is plain ChatML with no tool
    support: the tools arrive as the injected system prompt, replies parse as Hermes calls, and a
    history of calls and tool results continues one episode with the sampled ids spliced in."""
    from turngym.agents.hf import smollm2_tokenizer
    from turngym.agents.render import render_episode

    policy = _SpelledCallPolicy(smollm2_tokenizer())
    proxy = CaptureProxy(policy, ProxyConfig(model_name="smollm2"))
    assert proxy.tool_parser.name == "hermes" and not proxy.tool_template.native
    assert policy.renderer.encode(CALL) + [policy.tokenizer.eos_token_id] != policy.reply  # a re-tokenizing proxy would drift

    async def go() -> list[int]:
        msgs: list[dict[str, Any]] = list(USER)
        seq: list[int] = []
        for _ in range(3):
            reply, headers = await proxy.chat({"model": "smollm2", "messages": msgs, "tools": [ADD], "return_token_ids": True}, episode_ref("smol/t"))
            prompt, m = reply["prompt_token_ids"], reply["choices"][0]["message"]
            assert "X-Turngym-Branched" not in headers and prompt[: len(seq)] == seq and m["tool_calls"][0]["function"]["name"] == "add"
            seq = prompt + reply["choices"][0]["token_ids"]
            msgs += [m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": "5"}]
        assert "# Tools" in proxy.tokenizer.decode(seq) and "You are a helpful AI assistant named SmolLM" not in proxy.tokenizer.decode(seq)
        await proxy.outcome(episode_ref("smol/t"), {"reward": 1.0})
        return seq

    seq = asyncio.run(go())
    [ep] = proxy.finished
    assert render_episode(ep, None).input_ids == seq and all(t.token_ids == policy.reply for t in ep.turns)


def test_hostile_tool_shapes_are_400s_never_500s(tiny) -> None:
    from turngym.proxy import ProxyError

    proxy = _proxy(tiny)
    asst = {"role": "assistant", "content": None}
    bad_bodies = [
        {"tools": "add"}, {"tools": [ADD], "tool_choice": 7}, {"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
        {"tools": [{"type": "function", "function": {"name": "f", "description": 3}}]}, {"functions": [ADD["function"]]},
        {"messages": [*USER, {**asst, "tool_calls": "x"}]}, {"messages": [*USER, {**asst, "tool_calls": [5]}]},
        {"messages": [*USER, {**asst, "tool_calls": [{"id": 1, "function": {"name": "f"}}]}]},
        {"messages": [*USER, {**asst, "tool_calls": [{"id": "c", "function": {"name": "f"}}] * 200}]},
        {"messages": [*USER, {**asst, "function_call": {"name": "f", "arguments": "{}"}}]},
    ]
    for extra in bad_bodies:
        body = {"model": "tiny", "messages": USER, **extra}
        with pytest.raises(ProxyError) as err:
            asyncio.run(proxy.chat(body, episode_ref("hostile/0")))
        assert err.value.status == 400, extra
    assert proxy.store.get("hostile/0") is None  # nothing refused was kept
    # a call with non-object arguments in the history renders (as text), it is not an error
    odd = {**asst, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "add", "arguments": "[1, 2"}}]}
    r = _chat(proxy, "hostile/1", [*USER, odd, {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "3"}]}],
              tools=[ADD])
    assert '"arguments": "[1, 2"' in proxy.tokenizer.decode(r["prompt_token_ids"])


def test_llama3_json_parser_serves_forced_calls_end_to_end(tiny) -> None:
    call = '{"name": "mul", "parameters": {"x": 4}}'
    proxy = _proxy(tiny, lambda _: call, tool_call_parser="llama3_json")
    assert "bare JSON" not in tools_system_prompt([ADD], proxy.tool_parser) and '"parameters"' in proxy.tool_parser.instructions
    r = _chat(proxy, "llama/0", USER, tools=[ADD, MUL], tool_choice={"type": "function", "function": {"name": "mul"}})
    forced = proxy.renderer.encode('{"name": "mul", "parameters": ')
    assert r["choices"][0]["token_ids"][: len(forced)] == forced
    [c] = r["choices"][0]["message"]["tool_calls"]
    assert (c["function"]["name"], json.loads(c["function"]["arguments"])) == ("mul", {"x": 4})
    r = _chat(proxy, "llama/1", USER, tools=[ADD])  # mul is not offered: text, counted
    assert r["choices"][0]["message"]["content"] == call and proxy.stats()["tool_parse_failures"] == 1
