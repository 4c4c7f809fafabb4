"""The OpenAI-compatible backend against a loopback server double (real HTTP, real httpx)."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

import turngym
from turngym.agents import AgentInput, make_agent
from turngym.agents.openai_http import OpenAIPolicy
from turngym.cli import main
from turngym.core.errors import ConfigError
from turngym.rollout import run_episodes, summarize


class ChatServerDouble:
    """Test double of an OpenAI-compatible server on 127.0.0.1 (a real HTTP server, scripted replies).

    It plays a crude math agent: first it calls the calculator on the first two numbers of the
    problem, then it answers with the last result. Like the OpenAI API it strips the matched
    stop string from the reply. ``fail_next`` makes the next requests fail with a status;
    ``delay`` slows replies down (to observe concurrency); every request body is recorded.
    """

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.fail_next: list[int] = []
        self.delay = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with double.lock:
                    double.requests.append(body)
                    double.headers.append(dict(self.headers))
                    status = double.fail_next.pop(0) if double.fail_next else 200
                    double.in_flight += 1
                    double.max_in_flight = max(double.max_in_flight, double.in_flight)
                time.sleep(double.delay)
                # The request leaves the in-flight count *before* its reply is written: once the
                # client reads the reply it may send the next request at once, and counting the
                # old one until after the write would see a fourth request that never overlapped.
                with double.lock:
                    double.in_flight -= 1
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": "not found"})
                if status != 200:
                    return self._send(status, {"error": "try again"}, {"Retry-After": "0"})
                return self._send(200, double.reply(body))

            def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def reply(self, body: dict) -> dict:
        msgs = body["messages"]
        last = msgs[-1]["content"]
        result = re.search(r"<result>(.*?)</result>", last)
        if result:
            content, stop = f"The answer is <answer>{result.group(1)}", "</answer>"
        else:
            a, b = re.findall(r"\d+", last)[:2]
            content, stop = f"<calc>{a} + {b}", "</calc>"
        stops = body.get("stop") or []
        finish = "stop" if stop in stops else "length"
        if finish == "length":
            content += stop
        return {
            "id": "cmpl-double",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    def __enter__(self) -> ChatServerDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server():
    with ChatServerDouble() as s:
        yield s


def make_env():
    return turngym.make("turngym/Math-v0")


def test_actions_keep_the_stop_string_and_send_sampling_options(server, monkeypatch) -> None:
    monkeypatch.setenv("TURNGYM_TEST_KEY", "sk-test")
    policy = OpenAIPolicy(
        server.url, model="double", api_key_env="TURNGYM_TEST_KEY", temperature=0.3, max_new_tokens=40, seed=7
    )
    inp = AgentInput([{"role": "user", "content": "Ava has 3 bags with 4 apples."}], stop=("</calc>", "</answer>"))
    [a1, a2] = policy.act([inp, inp])
    assert a1.text == "<calc>3 + 4</calc>" and a1.meta["stop_appended"] == "</calc>"
    body = server.requests[0]
    assert body["model"] == "double" and body["temperature"] == 0.3 and body["max_tokens"] == 40
    assert body["stop"] == ["</calc>", "</answer>"]
    assert sorted(r["seed"] for r in server.requests) == [7, 8]  # group members sample differently
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


def test_full_episodes_through_the_rollout_engine(server) -> None:
    policy = make_agent(f"openai:{server.url}", model="double", concurrency=4)
    episodes = run_episodes(make_env, policy, list(range(6)), batch_size=6)
    assert all(len(ep.turns) == 2 and ep.turns[1].action.startswith("The answer is <answer>") for ep in episodes)
    summary = summarize(episodes)
    assert summary.invalid_action_rate == 0.0 and summary.infra_errors == 0
    assert summary.signal_means["tool_ok"] == pytest.approx(0.5)


def test_each_episode_is_named_by_a_fresh_id_and_no_outcome_goes_to_a_plain_server(server) -> None:
    """The capture proxy's episode header is sent (other servers ignore it): one fresh id per
    episode, the same on every turn of it; a server that is not a proxy gets no outcome report."""
    policy = make_agent(f"openai:{server.url}", model="double", concurrency=4)
    for _ in range(2):
        run_episodes(make_env, policy, [0, 1], batch_size=2)
    ids = [h["X-Turngym-Episode"] for h in server.headers]
    assert len(ids) == 8 and len(set(ids)) == 4 and all(ids.count(i) == 2 for i in ids)
    assert {i.split("@")[0] for i in ids} == {"episode/0/0", "episode/1/0"}  # the run's id, made unique
    keys = [h["X-Turngym-Episode-Key"] for h in server.headers]  # each episode's own secret, on each of its turns
    assert len(set(keys)) == 4 and all(len(k) >= 16 for k in keys) and len(set(zip(ids, keys, strict=True))) == 4
    assert len(server.requests) == 8 and policy.outcomes_reported == 0 and not policy._episodes


def test_transient_failures_are_retried(server) -> None:
    server.fail_next = [503, 429]
    policy = OpenAIPolicy(server.url, model="double", backoff=0.01, max_retries=3)
    [a] = policy.act([AgentInput([{"role": "user", "content": "1 and 2"}], stop=("</calc>",))])
    assert a.text == "<calc>1 + 2</calc>" and a.meta["attempts"] == 3


def test_exhausted_retries_end_the_episode_unscored(server) -> None:
    server.fail_next = [503] * 100
    policy = OpenAIPolicy(server.url, model="double", backoff=0.0, max_retries=1)
    [ep] = run_episodes(make_env, policy, [0])
    assert ep.infra_error is not None and "HTTP 503" in ep.infra_error
    summary = summarize([ep])
    assert summary.infra_errors == 1 and summary.scored_episodes == 0


def test_unreachable_server_is_an_infra_error_not_a_crash() -> None:
    with ChatServerDouble() as s:
        url = s.url
    policy = OpenAIPolicy(url, model="double", backoff=0.0, max_retries=1, timeout=2)
    [a] = policy.act([AgentInput([{"role": "user", "content": "1 2"}])])
    assert a.meta["infra_error"].startswith("gave up after 2 attempts")


def test_wrong_url_is_a_config_error(server) -> None:
    policy = OpenAIPolicy(server.url.replace("/v1", "/v2"), model="double")
    with pytest.raises(ConfigError, match="HTTP 404"):
        policy.act([AgentInput([{"role": "user", "content": "1 2"}])])


def test_concurrency_limit_is_respected(server) -> None:
    server.delay = 0.05
    policy = OpenAIPolicy(server.url, model="double", concurrency=3)
    policy.act([AgentInput([{"role": "user", "content": f"{i} and 1"}]) for i in range(9)])
    assert server.max_in_flight == 3


def test_eval_cli_against_the_server(server, tmp_path, capsys) -> None:
    rc = main(
        [
            "eval",
            "turngym/Math-v0",
            "--agent",
            f"openai:{server.url}",
            "--model",
            "double",
            "--episodes",
            "8",
            "--json",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 8 and summary["mean_turns"] == 2.0 and summary["invalid_action_rate"] == 0.0
    assert (tmp_path / "report.md").read_text().startswith(f"## openai:{server.url} on turngym/Math-v0")
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 8
    assert {r["model"] for r in server.requests} == {"double"}


# ---------------------------------------------------------------- constrain_choices
CHOICES = ("go to drawer 1", "open fridge 2", "take mug 1 from desk 2")


class ChoiceTransportDouble:
    """Test double of a vLLM server's structured outputs, as an ``httpx.MockTransport`` (no socket).

    Records every request body. A body carrying ``structured_outputs.choice`` is answered with one
    of those choices (picked by the request's seed), as vLLM does; with ``ignore=True`` the double
    plays a server that drops the unknown field and answers free text. Bodies without it get free text.
    """

    FREE = "I think I will look around"

    def __init__(self, ignore: bool = False) -> None:
        self.ignore = ignore
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        self.transport = httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        with self.lock:
            self.bodies.append(body)
        choices = (body.get("structured_outputs") or {}).get("choice")
        content = choices[body.get("seed", 0) % len(choices)] if choices and not self.ignore else self.FREE
        message = {"role": "assistant", "content": content}
        return httpx.Response(200, json={"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


def test_choices_are_sent_only_for_rows_that_have_them() -> None:
    double = ChoiceTransportDouble()
    policy = OpenAIPolicy("http://vllm.test/v1", max_new_tokens=4, seed=0, constrain_choices=True, transport=double.transport)
    batch = [
        AgentInput([{"role": "user", "content": f"row {i}"}], stop=("\n", " "), choices=CHOICES if i != 1 else None)
        for i in range(3)
    ] + [AgentInput([{"role": "user", "content": "row 3"}], stop=("\n",), choices=CHOICES + CHOICES[:1])]
    actions = policy.act(batch)
    bodies = {b["messages"][-1]["content"]: b for b in double.bodies}
    for i in (0, 2, 3):
        body = bodies[f"row {i}"]
        assert body["structured_outputs"] == {"choice": list(CHOICES)}  # duplicates dropped, the env's order kept
        assert "stop" not in body  # a stop string (" ") inside a choice would cut it
        assert body["max_tokens"] >= len(b"take mug 1 from desk 2") + 1  # the longest choice always fits
        assert actions[i].text in CHOICES and actions[i].meta["constrained"] is True
        assert "off_choices" not in actions[i].meta and "stop_appended" not in actions[i].meta
    free = bodies["row 1"]
    assert "structured_outputs" not in free and free["stop"] == ["\n", " "] and free["max_tokens"] == 4
    assert actions[1].meta["constrained"] is False and actions[1].text == ChoiceTransportDouble.FREE
    assert policy.off_choice_replies == 0


def test_without_the_option_choices_are_not_sent() -> None:
    double = ChoiceTransportDouble()
    policy = OpenAIPolicy("http://vllm.test/v1", transport=double.transport)
    [a] = policy.act([AgentInput([{"role": "user", "content": "hi"}], choices=CHOICES)])
    assert "structured_outputs" not in double.bodies[0] and a.meta["constrained"] is False


def test_household_episodes_send_each_turns_admissible_commands() -> None:
    double = ChoiceTransportDouble()
    policy = OpenAIPolicy("http://vllm.test/v1", seed=0, constrain_choices=True, transport=double.transport)
    episodes = run_episodes(lambda: turngym.make("turngym/Household-v0", max_turns=4), policy, [0, 1], batch_size=1)
    turns = [t for ep in episodes for t in ep.turns]
    assert len(turns) == len(double.bodies) and turns
    for body, t in zip(double.bodies, turns, strict=True):  # one episode at a time: bodies in turn order
        assert t.action in body["structured_outputs"]["choice"] and t.action_valid


def test_a_server_that_ignores_the_choices_is_not_hidden() -> None:
    double = ChoiceTransportDouble(ignore=True)
    policy = OpenAIPolicy("http://old.test/v1", constrain_choices=True, transport=double.transport)
    [ep] = run_episodes(lambda: turngym.make("turngym/Household-v0", max_turns=2), policy, [0])
    assert ep.infra_error is None  # the reply is the agent's, judged by the env as usual
    assert [t.action for t in ep.turns] == [ChoiceTransportDouble.FREE] * len(ep.turns)
    assert not any(t.action_valid for t in ep.turns)
    assert policy.off_choice_replies == len(ep.turns)
    [a] = policy.act([AgentInput([{"role": "user", "content": "hi"}], choices=CHOICES)])
    assert a.text == ChoiceTransportDouble.FREE and a.meta["off_choices"] is True and a.meta["constrained"] is True


def test_constrain_choices_through_agent_specs(monkeypatch) -> None:
    policy = make_agent("openai:http://vllm.test/v1", model="m", constrain_choices=True)
    assert isinstance(policy, OpenAIPolicy) and policy.constrain_choices
    assert not make_agent("openai:http://vllm.test/v1", model="m").constrain_choices
    from turngym.agents.vllm_backend import VLLMPolicy

    got: dict = {}  # test double of the engine start: records what the vllm spec passes on
    monkeypatch.setattr(VLLMPolicy, "from_pretrained", classmethod(lambda cls, arg, **kw: got.update(arg=arg, **kw) or "engine"))
    assert make_agent("vllm:tiny", constrain_choices=True, seed=3) == "engine"
    assert got == {"arg": "tiny", "constrain_choices": True, "seed": 3}
    for spec in ("oracle", "random"):
        with pytest.raises(ConfigError, match="drop --constrain-choices"):
            make_agent(spec, constrain_choices=True)
    assert make_agent("oracle", constrain_choices=None).name  # None means "default", as the CLI passes it


@pytest.mark.parametrize("body", [
    {"choices": []},
    {"error": "overloaded"},
    ["not", "an", "object"],
    {"choices": [["x"]]},
    {"choices": [{"message": {"content": 123}, "finish_reason": "stop"}]},
    {"choices": [{"message": {"content": ["<calc>1+1</calc>"]}, "finish_reason": "stop"}]},
])
def test_a_malformed_reply_is_the_agents_invalid_action_not_an_infra_error(body) -> None:
    # an infra error drops the episode from every score: a served model must not hide its losses
    # behind malformed answers, nor crash the run with a non-string content
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
    policy = OpenAIPolicy("http://bad.test/v1", max_retries=0, transport=transport)
    [ep] = run_episodes(lambda: turngym.make("turngym/Math-v0", max_turns=2), policy, [0])
    assert ep.infra_error is None and ep.turns and not any(t.action_valid for t in ep.turns)
    assert summarize([ep]).scored_episodes == 1
    [a] = policy.act([AgentInput([{"role": "user", "content": "hi"}], stop=("</calc>",))])
    assert a.text == "" and "malformed_response" in a.meta and "infra_error" not in a.meta
