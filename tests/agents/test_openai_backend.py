"""The OpenAI-compatible backend against a loopback server double (real HTTP, real httpx)."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
