"""Red team: hostile clients of the capture proxy, through the real app on 127.0.0.1.

Every attack here was played against ``turngym proxy`` as it was (issue 36's attack round): a
client adding turns to, or reporting the outcome of, another client's episode (its text became the
victim's segment and took the victim's reward); an episode named ``V#1`` colliding with a segment
id; a lone surrogate in an outcome that closed the episode, was never written, and broke
``GET /turngym/episodes`` for everyone; a non-Latin-1 id that failed after sampling; 100k-deep
JSON; multi-megabyte ``info`` kept in memory; a reward of 1e308. Each test asserts the contained
outcome: a 4xx (or a clear 5xx that loses nothing), the victim's record intact, nothing accepted
lost. Requests are raw HTTP (``httpx``) with the wire names spelled out, so the tests say what a
client of any language sees.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path

import pytest

pytest.importorskip("uvicorn", reason="needs the server extra: pip install 'turngym[server]'")
import httpx

from turngym.proxy import CaptureProxy, ProxyConfig, ProxyError
from turngym.proxy.ledger import FinishedLog
from turngym.proxy.serve import ProxyThread, build_proxy
from turngym.rollout.types import Episode, Turn, load_episodes

EPISODE, KEY = "X-Turngym-Episode", "X-Turngym-Episode-Key"
MSGS = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("captured")
    proxy = build_proxy("tiny", out=out, max_tokens=16, seed=0, device="cpu")
    with ProxyThread(proxy) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        yield server, http, out


def _key() -> str:
    return secrets.token_urlsafe(16)


def _chat(http: httpx.Client, headers: dict[str, str], messages: list | None = None, **body) -> httpx.Response:
    return http.post("/v1/chat/completions", headers=headers,
                     json={"model": "tiny", "messages": messages or MSGS, "max_tokens": 4, **body})


def _outcome(http: httpx.Client, ref: str, body: dict | bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    path = f"/turngym/episodes/{ref}/outcome"
    if isinstance(body, bytes):
        return http.post(path, content=body, headers={"content-type": "application/json", **(headers or {})})
    return http.post(path, json=body, headers=headers or {})


def _listing(http: httpx.Client) -> list[dict]:
    r = http.get("/turngym/episodes")
    assert r.status_code == 200
    return [json.loads(line) for line in r.text.splitlines()]


def _saved(out: Path, name: str) -> list[Episode]:
    return [ep for ep in load_episodes(out / "episodes.jsonl") if ep.meta["session"] == name]


def _code(r: httpx.Response) -> str:
    return r.json()["error"]["code"]


# ------------------------------------------------------------------------ ownership
def test_another_client_cannot_add_turns_to_or_report_a_victims_episode(served) -> None:
    server, http, out = served
    victim = {EPISODE: "own/victim", KEY: _key()}
    first = _chat(http, victim)
    assert first.status_code == 200
    reply = first.json()["choices"][0]["message"]["content"]
    history = [*MSGS, {"role": "assistant", "content": reply}, {"role": "user", "content": "again"}]
    generated = server.proxy.stats().get("completions", 0)
    # the attacker knows the victim's episode name, not its key: no key, a wrong key, the key slot in the id
    for headers, body in (({EPISODE: "own/victim"}, {}), ({EPISODE: "own/victim", KEY: _key()}, {}),
                          ({}, {"user": f"own/victim~{_key()}"}), ({EPISODE: f"own/victim~{_key()}"}, {})):
        r = _chat(http, headers, [{"role": "user", "content": "attacker text"}], **body)
        assert r.status_code == 403 and _code(r) == "not_episode_owner", r.text
        r = _chat(http, headers, history, **body)  # even a request that would continue it exactly
        assert r.status_code == 403
        r = _outcome(http, "own/victim", {"reward": -1.0, "info": {"by": "attacker"}}, headers)
        assert r.status_code == 403 and _code(r) == "not_episode_owner"
        r = _outcome(http, f"own/victim~{_key()}", {"reward": -1.0})
        assert r.status_code == 403
    assert server.proxy.stats()["completions"] == generated  # refused before sampling
    session = server.proxy.store.get("own/victim")
    assert session.turns == 1 and len(session.segments) == 1  # no segment of the attacker's
    # the owner goes on, and its outcome is its own
    assert _chat(http, victim, history).status_code == 200
    r = _outcome(http, "own/victim", {"reward": 1.0, "info": {"by": "victim"}}, {KEY: victim[KEY]})
    assert r.status_code == 200 and r.json()["episodes"] == ["own/victim"]
    [ep] = _saved(out, "own/victim")
    assert len(ep.turns) == 2 and ep.outcome == {"by": "victim", "reward": 1.0, "success": True}
    assert all("attacker" not in (t.action + t.observation) for t in ep.turns)
    assert first.headers[KEY] == victim[KEY] and victim[KEY] not in (out / "episodes.jsonl").read_text()  # never recorded


def test_a_keyless_client_is_given_a_key_and_nobody_else_gets_in(served) -> None:
    _, http, _ = served
    first = _chat(http, {EPISODE: "own/keyless"})
    assert first.status_code == 200
    minted = first.headers[KEY]
    assert len(minted) >= 16 and first.json()["turngym"]["episode_key"] == minted
    r = _chat(http, {EPISODE: "own/keyless"})  # what an old client sent: now refused, naming the fix
    assert r.status_code == 403 and KEY in r.json()["error"]["message"]
    assert _chat(http, {EPISODE: "own/keyless", KEY: minted}).status_code == 200
    assert _outcome(http, f"own/keyless~{minted}", {"reward": 0.5}).status_code == 200  # the key in the id works too


def test_a_framework_that_sets_only_the_user_field_owns_its_episode_by_naming_it(served) -> None:
    _, http, out = served
    ref = f"own/user~{_key()}"
    reply = _chat(http, {}, user=ref).json()["choices"][0]["message"]["content"]
    history = [*MSGS, {"role": "assistant", "content": reply}, {"role": "user", "content": "again"}]
    assert "X-Turngym-Branched" not in _chat(http, {}, history, user=ref).headers
    assert _chat(http, {}, user="own/user").status_code == 403
    assert _outcome(http, ref, {"reward": 1.0}).json()["episodes"] == ["own/user"]  # only the name is recorded
    assert [ep.episode_id for ep in _saved(out, "own/user")] == ["own/user"]


def test_with_an_operator_token_keys_still_decide_ownership(tmp_path: Path) -> None:
    from turngym.proxy import episode_headers, report_outcome

    proxy = build_proxy("tiny", out=tmp_path, max_tokens=8, seed=0, device="cpu")
    with ProxyThread(proxy, token="operator-token-123") as server, httpx.Client(base_url=server.url, timeout=60) as http:
        auth = {"Authorization": "Bearer operator-token-123"}
        assert _chat(http, episode_headers("tok/0")).status_code == 401
        assert _chat(http, auth | episode_headers("tok/0")).status_code == 200
        assert _chat(http, auth | {EPISODE: "tok/0"}).status_code == 403  # the operator token is not the episode's key
        assert report_outcome(server.url, "tok/0", reward=1.0, token="operator-token-123")["episodes"] == ["tok/0"]


# ------------------------------------------------------------------------ ids
@pytest.mark.parametrize("name", ["V#1", "a b", "ä-episode", "x\ny", "", "-lead", "a" * 201, "a~short", "a~" + "k" * 129])
def test_episode_ids_are_checked_at_the_door(served, name: str) -> None:
    server, http, _ = served
    generated = server.proxy.stats().get("completions", 0)
    r = _chat(http, {}, user=name)
    assert r.status_code == 400 and _code(r) in ("invalid_episode_id", "invalid_episode_key", "missing_episode"), r.text
    assert server.proxy.stats().get("completions", 0) == generated  # validated before sampling


def test_a_name_cannot_collide_with_a_segment_id(served) -> None:
    _, http, out = served
    owner = {EPISODE: "seg/V", KEY: _key()}
    first = _chat(http, owner).json()["choices"][0]["message"]["content"]
    edited = [*MSGS, {"role": "assistant", "content": first + " (edited)"}, {"role": "user", "content": "go"}]
    assert _chat(http, owner, edited).headers["X-Turngym-Segment"] == "1"  # the victim's segment seg/V#1
    r = _chat(http, {EPISODE: "seg/V#1", KEY: _key()})
    assert r.status_code == 400 and "reserved for segment" in r.json()["error"]["message"]
    assert _outcome(http, "seg/V%231", {"reward": 5.0}, {KEY: _key()}).status_code == 400
    assert _outcome(http, "seg/V", {"reward": 1.0}, {KEY: owner[KEY]}).json()["episodes"] == ["seg/V", "seg/V#1"]
    assert [ep.outcome["reward"] for ep in _saved(out, "seg/V")] == [1.0, 1.0]


def test_a_non_latin1_id_is_refused_before_sampling(served) -> None:
    server, http, _ = served
    before = server.proxy.stats()
    r = _chat(http, {}, user="épisode/☃")
    assert r.status_code == 400 and _code(r) == "invalid_episode_id"
    after = server.proxy.stats()
    assert after.get("completions", 0) == before.get("completions", 0) and after["generate_calls"] == before["generate_calls"]


# ------------------------------------------------------------------------ bodies
def test_lone_surrogates_in_an_outcome_lose_nothing_and_break_no_listing(served) -> None:
    server, http, out = served
    owner = {EPISODE: "sur/0", KEY: _key()}
    assert _chat(http, owner).status_code == 200
    for raw in (b'{"reward": 1.0, "info": {"note": "\\ud800"}}', b'{"reward": 1.0, "task_id": "\\udfff"}',
                b'{"reward": 1.0, "info": {"\\ud800": 1}}', b'{"reward": 1.0, "env_id": "x\\ud83d"}'):
        r = _outcome(http, "sur/0", raw, {KEY: owner[KEY]})
        assert r.status_code == 400 and _code(r) == "invalid_text", r.text
        assert server.proxy.store.get("sur/0") is not None  # still open: it can be reported again
        assert _listing(http) is not None  # everyone's listing still answers
    r = _outcome(http, "sur/0", {"reward": 1.0, "task_id": "t-ü", "info": {"note": "fine ☃"}}, {KEY: owner[KEY]})
    assert r.status_code == 200
    [ep] = _saved(out, "sur/0")
    assert ep.task_id == "t-ü" and ep.outcome["note"] == "fine ☃"
    assert any(e["episode_id"] == "sur/0" for e in _listing(http))


def test_surrogates_and_non_finite_numbers_in_a_request_are_400(served) -> None:
    server, http, _ = served
    headers = {EPISODE: "sur/1", KEY: _key(), "content-type": "application/json"}
    for raw in (b'{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}]}',
                b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stop": ["\\udc00"]}',
                b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
                b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": Infinity}',
                b'{"model": "tiny", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
                b'{"model": "tiny", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}'):
        r = http.post("/v1/chat/completions", content=raw, headers=headers)
        assert r.status_code == 400 and _code(r) in ("invalid_text", "invalid_json"), (raw, r.text)
    assert server.proxy.store.get("sur/1") is None


@pytest.mark.parametrize("depth", [100_000, 65])
def test_deep_json_is_refused_everywhere(served, depth: int) -> None:
    _, http, _ = served
    deep = b"[" * depth + b"]" * depth
    owner = {EPISODE: f"deep/{depth}", KEY: _key()}
    assert _chat(http, owner).status_code == 200
    r = http.post("/v1/chat/completions", content=b'{"model": "tiny", "messages": ' + deep + b"}",
                  headers={**owner, "content-type": "application/json"})
    assert r.status_code == 400 and _code(r) == "json_too_deep", r.text[:200]
    r = _outcome(http, f"deep/{depth}", b'{"reward": 1.0, "info": {"x": ' + deep + b"}}", {KEY: owner[KEY]})
    assert r.status_code == 400 and _code(r) == "json_too_deep"
    assert _outcome(http, f"deep/{depth}", {"reward": 1.0}, {KEY: owner[KEY]}).status_code == 200


def test_huge_info_and_huge_strings_are_refused_with_the_reason(served) -> None:
    server, http, _ = served
    owner = {EPISODE: "big/0", KEY: _key()}
    assert _chat(http, owner).status_code == 200
    kept = server.proxy.finished.bytes
    for body, code in (({"reward": 1.0, "info": {"blob": "x" * (8 << 20)}}, "info_too_large"),
                       ({"reward": 1.0, "task_id": "x" * (8 << 20)}, "outcome_too_large"),
                       ({"reward": 1.0, "turns": [{"state_key": "x" * (1 << 20)}]}, "outcome_too_large")):
        r = _outcome(http, "big/0", body, {KEY: owner[KEY]})
        assert r.status_code == 400 and _code(r) == code and "bytes" in r.json()["error"]["message"]
    r = _outcome(http, "big/0", b'{"reward": 1.0, "info": {"blob": "' + b"x" * (17 << 20) + b'"}}', {KEY: owner[KEY]})
    assert r.status_code == 413 and _code(r) == "body_too_large"
    assert server.proxy.finished.bytes == kept and server.proxy.store.get("big/0") is not None
    assert _outcome(http, "big/0", {"reward": 1.0, "info": {"blob": "x" * 1000}}, {KEY: owner[KEY]}).status_code == 200


def test_finished_episodes_in_memory_stay_within_their_byte_budget() -> None:
    """The listing keeps the latest records within ``keep_finished_bytes``; the file keeps them all."""
    log = FinishedLog(None, max_count=10_000, max_bytes=1 << 20)
    info = {"blob": "x" * (60 << 10)}  # just under the 64 KiB info cap
    for i in range(200):  # ~12 MB of records offered
        ep = Episode(f"mem/{i}", "proxy", "", None, "", outcome=dict(info),
                     turns=[Turn(index=0, action="a", observation="", reward=1.0, terminated=True, truncated=False, signals={},
                                 state_key="s1", prev_state_key="s0", token_ids=[1], logprobs=[-0.1], prompt_ids=[2])])
        log.commit([ep])
        assert log.bytes <= 1 << 20
    assert 0 < len(log) < 20 and log.evicted == 200 - len(log)
    assert [ep.episode_id for ep in log][-1] == "mem/199"


# ------------------------------------------------------------------------ rewards
@pytest.mark.parametrize("body", [
    b'{"reward": 1e308}', b'{"reward": -1001}', b'{"reward": NaN}', b'{"reward": Infinity}', b'{"reward": 1' + b"0" * 400 + b"}",
    b'{"reward": 0.0, "turns": [{"reward": 1e308}]}', b'{"reward": 0.0, "turns": [{"signals": {"s": 1e308}}]}',
    b'{"reward": 0.0, "info": {"x": NaN}}',
])
def test_rewards_must_be_finite_and_in_range(served, body: bytes) -> None:
    _, http, _ = served
    owner = {EPISODE: f"rw/{secrets.token_hex(4)}", KEY: _key()}
    assert _chat(http, owner).status_code == 200
    r = _outcome(http, owner[EPISODE], body, {KEY: owner[KEY]})
    assert r.status_code == 400, r.text
    assert _outcome(http, owner[EPISODE], {"reward": 1000.0}, {KEY: owner[KEY]}).status_code == 200  # the range's edge


# ------------------------------------------------------------------------ nothing accepted lost
def test_an_outcome_that_cannot_be_written_is_not_acknowledged_and_stays_open(served, tmp_path: Path) -> None:
    server, _, _ = served
    proxy = CaptureProxy(server.proxy.policy, ProxyConfig(out=tmp_path))
    (tmp_path / "episodes.jsonl").mkdir()  # the disk refuses the write (a directory where the file goes)
    ref = f"disk/0~{_key()}"

    async def go() -> dict:
        await proxy.chat({"model": "tiny", "messages": MSGS, "max_tokens": 3}, ref)
        with pytest.raises(ProxyError, match="stays open") as err:
            await proxy.outcome(ref, {"reward": 1.0})
        assert err.value.status == 500 and proxy.store.get("disk/0") is not None and not proxy.finished
        (tmp_path / "episodes.jsonl").rmdir()
        return await proxy.outcome(ref, {"reward": 1.0})  # reported again: written, then acknowledged

    assert asyncio.run(go())["episodes"] == ["disk/0"]
    assert [ep.episode_id for ep in load_episodes(tmp_path / "episodes.jsonl")] == ["disk/0"]
    assert proxy.stats()["errors"]["write_failed"] == 1


def test_a_framework_carries_the_key_in_static_headers_and_an_impostor_is_refused(served) -> None:
    """smolagents sets headers once per model and never reads a response header: the derived key
    (``episode_headers``) or ``NAME~KEY`` in one header (``episode_ref``) is all it needs."""
    smolagents = pytest.importorskip("smolagents")
    import openai
    from smolagents.models import ChatMessage, MessageRole

    from turngym.proxy import episode_headers, episode_ref, report_outcome

    server, _, out = served

    def model(headers: dict[str, str]):
        return smolagents.OpenAIServerModel("tiny", api_base=server.base_url, api_key="unused", max_tokens=4,
                                            client_kwargs={"default_headers": headers, "max_retries": 0})

    def text(t: str) -> list:
        return [{"type": "text", "text": t}]

    for name, headers in (("fw/h", episode_headers("fw/h")), ("fw/u", {EPISODE: episode_ref("fw/u")})):
        agent = model(headers)
        msgs = [ChatMessage(role=MessageRole.USER, content=text("What is 2 + 2?"))]
        reply = agent.generate(msgs).content
        msgs += [ChatMessage(role=MessageRole.ASSISTANT, content=text(reply)), ChatMessage(role=MessageRole.USER, content=text("go"))]
        with pytest.raises(openai.PermissionDeniedError, match="belongs to the client"):
            model({EPISODE: name}).generate(msgs)  # an impostor who knows the name
        agent.generate(msgs)
        assert report_outcome(server.url, name if name == "fw/h" else episode_ref(name), reward=1.0)["episodes"] == [name]
        [ep] = _saved(out, name)
        assert len(ep.turns) == 2


def test_the_reward_range_is_the_operators_to_declare() -> None:
    from turngym.core.errors import ConfigError
    from turngym.proxy.capture import parse_outcome

    assert parse_outcome({"reward": 1.0}, 0, reward_range=(0.0, 1.0)).reward == 1.0
    with pytest.raises(ValueError, match=r"outside the proxy's reward range \[0, 1\]"):
        parse_outcome({"reward": 1.5}, 0, reward_range=(0.0, 1.0))
    for bad in ((1.0, 0.0), (-float("inf"), 1.0), (0.0, float("nan"))):
        with pytest.raises(ConfigError, match="reward_range"):
            ProxyConfig(reward_range=bad)
