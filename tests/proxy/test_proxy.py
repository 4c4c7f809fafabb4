"""The capture proxy, driven by the real ``openai`` client and a hand-written agent loop.

The agent below is not turngym's runner: it is the kind of while-loop a user already has — an
OpenAI client, a message list, a tool (Math-v0's calculator, reached through ``env.step``) — with
two additions: a header naming the episode, and a call reporting the outcome. The tests check
that what the proxy captured is token-identical to what the model sampled, that training on the
capture moves the policy, and that bad input is refused or dropped, counted, never recorded
wrongly.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from pathlib import Path

import openai
import pytest
import torch

import turngym
from turngym.agents.render import render_episode
from turngym.core.errors import ConfigError
from turngym.proxy import CaptureProxy, ProxyConfig, ProxyError, episode_headers, episode_ref, report_outcome
from turngym.proxy.serve import ProxyThread, build_proxy

MAX_TOKENS = 10


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("captured")
    proxy = build_proxy("tiny", out=out, max_tokens=64, seed=0, device="cpu")  # float32: re-scoring matches to 1e-4
    with ProxyThread(proxy) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        yield server, client, out


def agent_episode(client: openai.OpenAI, url: str, episode_id: str, seed: int, max_turns: int = 3) -> list:
    """A user's own tool-using agent loop against turngym/Math-v0, through the proxy."""
    env = turngym.make("turngym/Math-v0", min_steps=1, max_steps=2)
    obs, _ = env.reset(seed=seed)
    messages = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": obs}]
    replies, report, env_return, chars = [], [], 0.0, 0
    terminated = False
    for _ in range(max_turns):
        reply = client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=MAX_TOKENS, logprobs=True,
            extra_headers=episode_headers(episode_id), extra_body={"return_token_ids": True},
        )
        text = reply.choices[0].message.content
        replies.append(reply)
        messages.append({"role": "assistant", "content": text})
        obs, reward, terminated, truncated, info = env.step(text)  # the calculator tool (or the answer)
        env_return += reward
        chars += len(text)
        report.append({"signals": info["signals"], "state_key": info["state_key"], "action_valid": info["action_valid"]})
        if terminated or truncated:
            break
        messages.append({"role": "user", "content": obs})
    # the user's reward: the env's return less a small cost per generated character
    report_outcome(url, episode_id, reward=env_return - 0.01 * chars, success=bool(terminated and env_return > 0),
                   env_id="turngym/Math-v0", group=f"math/{seed}", seed=seed, truncated=not terminated, turns=report)
    return replies


def _captured(proxy: CaptureProxy, episode_id: str) -> list:
    return [ep for ep in proxy.finished if ep.meta["session"] == episode_id]


@pytest.fixture(scope="module")
def agents(served) -> dict[str, list]:
    """Four episodes of the hand-written agent, in two GRPO groups of two, played concurrently."""
    server, client, _ = served
    runs = {f"agent/{seed}/{i}": seed for seed in (0, 1) for i in range(2)}
    replies: dict[str, list] = {}

    def play(eid: str) -> None:
        replies[eid] = agent_episode(client, server.url, eid, runs[eid])

    threads = [threading.Thread(target=play, args=(eid,)) for eid in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(replies) == set(runs)
    return replies


def test_agent_loop_is_captured_token_for_token(served, agents) -> None:
    server, _, _ = served
    proxy = server.proxy
    drift = 0
    for eid, rs in agents.items():
        [ep] = _captured(proxy, eid)  # the loop never edits its history: one episode, no branch
        assert ep.group == f"math/{eid.split('/')[1]}" and ep.env_id == "turngym/Math-v0" and len(ep.turns) == len(rs)
        for turn, reply in zip(ep.turns, rs, strict=True):
            choice = reply.choices[0]
            # what the client got is what was recorded: text, sampled ids, prompt ids, log-probs
            assert turn.action == choice.message.content
            assert turn.token_ids == choice.model_extra["token_ids"]
            assert turn.prompt_ids == reply.model_extra["prompt_token_ids"]
            assert turn.logprobs == [c.logprob for c in choice.logprobs.content]
            drift += proxy.renderer.encode(turn.action) != turn.token_ids
        sample = render_episode(ep, proxy.renderer)
        for turn in ep.turns:  # every prompt the model saw sits verbatim in the training sequence
            start, end = sample.turn_spans[turn.index]
            assert sample.input_ids[:start] == turn.prompt_ids and sample.input_ids[start:end] == turn.token_ids
        # re-scoring the training sequence reproduces the sampling log-probs (temperature 1)
        [scored] = proxy.policy.score([sample.input_ids], [sample.loss_mask])
        recorded = [lp for lp, m in zip(sample.logprobs, sample.loss_mask, strict=True) if m]
        assert len(scored) == len(recorded) and max(abs(a - b) for a, b in zip(scored, recorded, strict=True)) < 1e-4
    # re-tokenizing the replies' text would have changed the ids of some turns: splicing mattered
    assert drift > 0


def test_training_on_captured_episodes_moves_the_policy(served, agents, tmp_path: Path, capsys) -> None:
    """``turngym train --episodes``: two GRPO steps on the captured episodes."""
    from transformers import AutoModelForCausalLM

    from turngym.agents.hf import resolve_model_path
    from turngym.cli import main
    from turngym.trainers import TrainConfig, Trainer

    server, _, _ = served
    data = tmp_path / "episodes.jsonl"
    data.write_text("".join(json.dumps(ep.to_dict()) + "\n" for eid in agents for ep in _captured(server.proxy, eid)))
    run = tmp_path / "run"
    with pytest.raises(ConfigError, match="another architecture"):  # the trainer's small tiny variant did not sample them
        Trainer(TrainConfig(episodes=str(data), warmup_steps=0, eval_episodes=0), tmp_path / "wrong", progress=False, log=None).run()
    assert main(["train", "--episodes", str(data), "--steps", "2", "--out", str(run), "--algo", "grpo", "--quiet",
                 "--set", "lr=1e-3", "--set", "micro_batch_size=4"]) == 0
    printed = capsys.readouterr()
    assert "nan" not in printed.out + printed.err  # no success rate of an evaluation that did not run (issue 39)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r.get("phase") == "rl"]
    assert len(rl) == 2 and all(math.isfinite(r["loss"]) for r in rl) and rl[0]["episodes"] == 4
    assert rl[0]["adv_abs_mean"] > 0
    trained = torch.load(run / "checkpoints" / "step-000002" / "trainable.pt")
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path("tiny")).state_dict()
    assert all(torch.isfinite(v).all() for v in trained.values())
    assert any(not torch.equal(trained[k], base[k]) for k in base)


def test_edited_history_starts_a_new_episode_never_a_wrong_splice(served) -> None:
    server, client, _ = served
    h = episode_headers("edit/0")
    messages = [{"role": "user", "content": "What is 6 * 7?"}]
    first = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, extra_headers=h)
    messages += [{"role": "assistant", "content": first.choices[0].message.content + " (edited)"},
                 {"role": "user", "content": "<result>42</result>"}]
    raw = client.chat.completions.with_raw_response.create(model="tiny", messages=messages, max_tokens=6, extra_headers=h)
    assert raw.headers["X-Turngym-Branched"] == "history_edited" and raw.headers["X-Turngym-Segment"] == "1"
    messages += [{"role": "assistant", "content": raw.parse().choices[0].message.content}, {"role": "user", "content": "go on"}]
    raw = client.chat.completions.with_raw_response.create(model="tiny", messages=messages, max_tokens=6, extra_headers=h)
    assert "X-Turngym-Branched" not in raw.headers and raw.headers["X-Turngym-Segment"] == "1"  # the new branch continues
    assert report_outcome(server.url, "edit/0", reward=1.0)["episodes"] == ["edit/0", "edit/0#1"]
    eps = _captured(server.proxy, "edit/0")
    assert [len(ep.turns) for ep in eps] == [1, 2] and eps[1].meta["segment_reason"] == "history_edited"
    for ep in eps:  # each segment is one exact sequence, re-scored to its sampling log-probs
        sample = render_episode(ep, None)
        [scored] = server.proxy.policy.score([sample.input_ids], [sample.loss_mask])
        assert max(abs(a - b) for a, b in zip(scored, [lp for lp, m in zip(sample.logprobs, sample.loss_mask) if m])) < 1e-4
    assert server.proxy.stats()["branches"]["history_edited"] >= 1


def test_bad_requests_are_refused_clearly_and_counted(served) -> None:
    server, client, _ = served
    msgs = [{"role": "user", "content": "hi"}]
    h = episode_headers("bad/0")
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-4o", messages=msgs, extra_headers=h)
    with pytest.raises(openai.BadRequestError, match="X-Turngym-Episode"):
        client.chat.completions.create(model="tiny", messages=msgs)
    with pytest.raises(openai.BadRequestError, match="exceeds the proxy's cap"):
        client.chat.completions.create(model="tiny", messages=msgs, max_tokens=10_000, extra_headers=h)
    with pytest.raises(openai.BadRequestError, match="positions"):  # a prompt beyond the model's context
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "7 + " * 3000}], extra_headers=h)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model="tiny", messages=msgs, temperature=0.2, extra_headers=h)
    with pytest.raises(openai.BadRequestError, match="tool_choice"):  # a named function that is not offered
        client.chat.completions.create(model="tiny", messages=msgs, extra_headers=h, tool_choice={"type": "function", "function": {"name": "x"}},
                                       tools=[{"type": "function", "function": {"name": "calc", "parameters": {}}}])
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        client.chat.completions.create(model="tiny", messages=msgs, n=2, extra_headers=h)
    errors = server.proxy.stats()["errors"]
    assert errors["model_not_found"] >= 1 and errors["missing_episode"] >= 1 and errors["context_length_exceeded"] >= 1
    assert errors["max_tokens_exceeded"] >= 1 and errors["unsupported_sampling"] >= 1 and errors["unsupported_parameter"] >= 1
    assert errors["invalid_tools"] >= 1
    assert server.proxy.store.get("bad/0") is None and "bad/0" not in server.proxy._locks  # nothing refused was kept
    with pytest.raises(ConfigError, match="404"):
        report_outcome(server.url, "bad/0", reward=0.0)

    # streaming is served (as one content chunk) and recorded like any other turn
    chunks = list(client.chat.completions.create(model="tiny", messages=msgs, max_tokens=5, stream=True,
                                                 stream_options={"include_usage": True}, extra_headers=episode_headers("stream/0")))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == len(server.proxy.store.get("stream/0").last.token_ids)
    with pytest.raises(ConfigError, match="one entry per recorded turn"):  # a malformed report leaves the episode open
        report_outcome(server.url, "stream/0", reward=1.0, turns=[{}, {}])
    report_outcome(server.url, "stream/0", reward=1.0, turns=[{"reward": 0.25, "signals": {"format_ok": 1.0}, "action_valid": False}])
    [turn] = _captured(server.proxy, "stream/0")[0].turns
    assert turn.action == text and turn.reward == 1.25 and turn.signals == {"format_ok": 1.0} and not turn.action_valid
    with pytest.raises(openai.ConflictError, match="finished"):  # a finished episode takes no more turns
        client.chat.completions.create(model="tiny", messages=msgs, max_tokens=5, extra_headers=episode_headers("stream/0"))
    with pytest.raises(ConfigError, match="409"):
        report_outcome(server.url, "stream/0", reward=1.0)


def test_completions_thread_by_text_and_token_ids(served) -> None:
    server, client, _ = served
    h = episode_headers("text/0")
    first = client.completions.create(model="tiny", prompt="Q: 2 + 3 =", max_tokens=5, extra_headers=h,
                                      extra_body={"return_token_ids": True})
    ids = first.model_extra["prompt_token_ids"] + first.choices[0].model_extra["token_ids"]
    second = client.completions.create(model="tiny", prompt=ids + server.proxy.renderer.encode(" ok"), max_tokens=5,
                                       extra_headers=h, extra_body={"return_token_ids": True})
    assert second.model_extra["prompt_token_ids"][: len(ids)] == ids  # continued from the sampled ids
    with pytest.raises(openai.BadRequestError, match="stream"):  # refused before sampling: nothing recorded
        client.completions.create(model="tiny", prompt="Q:", max_tokens=3, stream=True, extra_headers=h)
    assert server.proxy.store.get("text/0").turns == 2
    report_outcome(server.url, "text/0", reward=0.5)
    [ep] = _captured(server.proxy, "text/0")
    sample = render_episode(ep, None)
    assert sample.input_ids == second.model_extra["prompt_token_ids"] + second.choices[0].model_extra["token_ids"]


def test_unreported_episode_is_dropped_and_counted(served) -> None:
    server, _, _ = served
    proxy = CaptureProxy(server.proxy.policy, ProxyConfig(outcome_timeout_s=0.05))  # the served model, a short timeout

    async def go() -> None:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        await proxy.chat(body, "silent/0")
        await asyncio.sleep(0.1)
        assert proxy.reap() == 1
        with pytest.raises(ProxyError, match="dropped: no outcome reported"):
            await proxy.outcome("silent/0", {"reward": 1.0})

    asyncio.run(go())
    assert proxy.stats()["dropped"] == {"no_outcome": 1} and not proxy.finished


def test_concurrent_requests_are_sampled_in_one_batch(served) -> None:
    server, _, _ = served
    proxy = CaptureProxy(server.proxy.policy, ProxyConfig())

    async def go() -> None:
        bodies = [{"model": "tiny", "messages": [{"role": "user", "content": f"task {i}"}], "max_tokens": 3} for i in range(4)]
        replies = await asyncio.gather(*(proxy.chat(b, f"batch/{i}") for i, b in enumerate(bodies)))
        assert [h["X-Turngym-Episode"] for _, h in replies] == [f"batch/{i}" for i in range(4)]

    asyncio.run(go())
    assert proxy.stats()["generate_calls"] == 1 and proxy.stats()["completions"] == 4


class _FailingPolicy:
    """Test double: the served policy whose ``generate`` fails, as a crashed model would."""

    def __init__(self, policy) -> None:
        self.tokenizer, self.renderer, self.temperature, self.top_p = policy.tokenizer, policy.renderer, 1.0, 1.0
        self.max_positions = policy.max_positions
        self.fail = False
        self._policy = policy

    def generate(self, *args):
        if self.fail:
            raise RuntimeError("CUDA error: device lost")
        return self._policy.generate(*args)


def test_a_model_failure_is_an_infra_error_never_a_score(served) -> None:
    server, _, _ = served
    policy = _FailingPolicy(server.proxy.policy)
    proxy = CaptureProxy(policy, ProxyConfig())

    async def go() -> None:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        first, _ = await proxy.chat(body, episode_ref("crash/0"))
        policy.fail = True
        body["messages"] += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]}, {"role": "user", "content": "more"}]
        with pytest.raises(ProxyError, match="infrastructure error") as err:
            await proxy.chat(body, episode_ref("crash/0"))
        assert err.value.status == 500
        await proxy.outcome(episode_ref("crash/0"), {"reward": 0.0})

    asyncio.run(go())
    [ep] = proxy.finished
    assert ep.infra_error and "device lost" in ep.infra_error


class _HistoryRewritingPolicy(_FailingPolicy):
    """Test double: the served model behind a chat template that rewrites history (it blanks every
    assistant reply but the last, as templates that strip past reasoning do)."""

    def __init__(self, policy) -> None:
        import copy

        from turngym.agents.render import ChatRenderer

        super().__init__(policy)
        self.tokenizer = copy.deepcopy(policy.tokenizer)
        self.tokenizer.chat_template = (
            "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' and not loop.last %}...{% else %}"
            "{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
        )
        self.renderer = ChatRenderer(self.tokenizer)


def test_a_history_rewriting_template_gives_one_exact_episode_per_turn(served) -> None:
    server, _, _ = served
    proxy = CaptureProxy(_HistoryRewritingPolicy(server.proxy.policy), ProxyConfig())
    assert not proxy.template_splices and server.proxy.template_splices  # the start-up probe tells them apart

    async def go() -> None:
        msgs = [{"role": "user", "content": "What is 6 * 7?"}]
        for k in range(3):
            reply, headers = await proxy.chat({"model": "tiny", "messages": msgs, "max_tokens": 4, "return_token_ids": True}, episode_ref("rw/0"))
            assert reply["prompt_token_ids"] == proxy.renderer.encode(
                proxy.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))  # what the template says
            assert headers.get("X-Turngym-Branched") == (None if k == 0 else "template_mismatch")
            msgs += [{"role": "assistant", "content": reply["choices"][0]["message"]["content"]}, {"role": "user", "content": "<result>42</result>"}]
        await proxy.outcome(episode_ref("rw/0"), {"reward": 1.0})

    asyncio.run(go())
    eps = proxy.finished
    assert [len(ep.turns) for ep in eps] == [1, 1, 1] and proxy.stats()["branches"] == {"template_mismatch": 2}
    for ep in eps:
        sample = render_episode(ep, None)
        [scored] = server.proxy.policy.score([sample.input_ids], [sample.loss_mask])
        assert max(abs(a - b) for a, b in zip(scored, ep.turns[0].logprobs)) < 1e-4


def test_saved_episodes_that_cannot_be_trained_on_are_refused(served, tmp_path: Path) -> None:
    from turngym.trainers import TrainConfig
    from turngym.trainers.saved import load_training_episodes, reward_spec_of

    server, client, _ = served
    with pytest.raises(ConfigError, match="warmup_steps=0"):
        TrainConfig(episodes="captured")  # the default warm start imitates an env there is none of
    client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                   extra_headers=episode_headers("saved/0"))
    report_outcome(server.url, "saved/0", reward=1.0)
    [ep] = _captured(server.proxy, "saved/0")
    assert reward_spec_of([ep]).names == ()  # env "proxy" is not registered: rewards pass through as reported

    def refused(edit, match: str) -> None:
        data = ep.to_dict()
        edit(data)
        (tmp_path / "episodes.jsonl").write_text(json.dumps(data) + "\n")
        with pytest.raises(ConfigError, match=match):
            load_training_episodes(tmp_path, server.proxy.tokenizer)

    refused(lambda d: d["meta"].update(tokenizer="0123456789abcdef"), "another tokenizer")
    refused(lambda d: d["turns"][0].update(logprobs=None), "no sampled token ids or log-probs")
    refused(lambda d: d["meta"].update(infra_error="device lost"), "no episode to train on")
    with pytest.raises(ConfigError, match="no saved episodes"):
        load_training_episodes(tmp_path / "missing.jsonl")
    (tmp_path / "episodes.jsonl").write_text(json.dumps(ep.to_dict()) + "\n")
    assert load_training_episodes(tmp_path, server.proxy.tokenizer)[0].turns[0].token_ids == ep.turns[0].token_ids


def test_recorded_episodes_render_from_their_ids_and_refuse_a_broken_chain() -> None:
    from turngym.agents.render import RenderError, render_turns
    from turngym.rollout.types import Episode, Turn

    def episode(second_prompt: list[int]) -> Episode:
        turns = [Turn(0, "a", "", 0.0, False, False, {}, "s1", "s0", token_ids=[5, 6], logprobs=[-1.0, -2.0], prompt_ids=[1, 2]),
                 Turn(1, "b", "", 1.0, True, False, {}, "s2", "s1", token_ids=[8], logprobs=[-0.5], prompt_ids=second_prompt)]
        return Episode("e", "proxy", "", None, "text never re-tokenized", turns=turns, meta={"rendering": "recorded"})

    sample = render_episode(episode([1, 2, 5, 6, 7]), None)
    assert (sample.input_ids, sample.loss_mask) == ([1, 2, 5, 6, 7, 8], [0, 0, 1, 1, 0, 1])
    assert sample.logprobs == [0.0, 0.0, -1.0, -2.0, 0.0, -0.5] and sample.turn_spans == {0: (2, 4), 1: (5, 6)}
    assert [s.input_ids for s in render_turns(episode([1, 2, 5, 6, 7]), None)] == [[1, 2, 5, 6], [1, 2, 5, 6, 7, 8]]
    with pytest.raises(RenderError, match="does not extend"):  # turn 1's prompt lost a sampled id of turn 0
        render_episode(episode([1, 2, 5, 9, 7]), None)


class _ScriptedPolicy:
    """Test double: a 'model' that always replies with the same ids, spelled character by character
    (as a sampler may spell text, and as re-tokenizing the text never would)."""

    def __init__(self, tokenizer) -> None:
        from turngym.agents.render import ChatRenderer

        self.tokenizer, self.renderer = tokenizer, ChatRenderer(tokenizer)
        self.temperature, self.top_p, self.max_positions = 1.0, 1.0, 8192
        self.reply = [i for ch in "<calc>6*7</calc>" for i in tokenizer.encode(ch, add_special_tokens=False)] + [tokenizer.eos_token_id]

    def generate(self, prompts, stops, reusable, limits):
        from turngym.agents.hf import Generation

        text = self.tokenizer.decode(self.reply, skip_special_tokens=True)
        return [Generation(list(self.reply), [-1.0] * len(self.reply), text, "eos", prompt_ids=list(p)) for p in prompts]


def test_smollm2_chat_template_round_trip_splices_the_sampled_ids() -> None:
    """SmolLM2's own template (it adds a system prompt when there is none): every turn's prompt
    extends the previous prompt + sampled ids, which are spliced verbatim though their text
    re-tokenizes differently."""
    from turngym.agents.hf import smollm2_tokenizer

    policy = _ScriptedPolicy(smollm2_tokenizer())
    proxy = CaptureProxy(policy, ProxyConfig(model_name="smollm2"))
    assert policy.renderer.encode("<calc>6*7</calc>") != policy.reply[:-1]  # a re-tokenizing proxy would drift

    async def go() -> None:
        msgs = [{"role": "user", "content": "What is 6 * 7?"}]
        seq: list[int] = []
        for k in range(3):
            reply, headers = await proxy.chat({"model": "smollm2", "messages": msgs, "return_token_ids": True}, episode_ref("smol/0"))
            prompt = reply["prompt_token_ids"]
            assert "X-Turngym-Branched" not in headers and prompt[: len(seq)] == seq and len(prompt) > len(seq)
            seq = prompt + reply["choices"][0]["token_ids"]
            msgs += [{"role": "assistant", "content": reply["choices"][0]["message"]["content"]},
                     {"role": "tool" if k % 2 else "user", "content": "<result>42</result>"}]
        await proxy.outcome(episode_ref("smol/0"), {"reward": 1.0})
        [ep] = proxy.finished
        assert render_episode(ep, None).input_ids == seq

    asyncio.run(go())


def test_outcome_info_cannot_override_the_checked_reward_and_success() -> None:
    """``info`` is free-form; a key named ``reward``/``success`` in it (a NaN reward, a "no" that
    ``bool()`` reads as a success) must not replace the validated fields in ``episode.outcome``."""
    from turngym.proxy.capture import CapturedTurn, Session, parse_outcome, to_episodes

    session = Session("forge/0", 0.0, 0.0)
    session.record(CapturedTurn(0, [1, 2], [3], [-0.5], "a", "a", "eos"), None)
    body = json.loads('{"reward": 0.0, "success": false, "info": {"reward": NaN, "success": "no", "note": "kept"}}')
    [ep] = to_episodes(session, parse_outcome(body, 1), {})
    assert ep.outcome == {"reward": 0.0, "success": False, "note": "kept"} and not ep.success


def test_hostile_request_shapes_are_refused_before_tokenizing_or_the_model(served) -> None:
    """A prompt of megabytes is refused from its size (tokenizing it on the event loop stalled every
    client ~30 s), and messages the chat template refuses are a 400, not an unhandled 500."""
    server, _, _ = served
    proxy = CaptureProxy(server.proxy.policy, ProxyConfig())

    async def go() -> None:
        huge = "a b " * 500_000  # 2 MB of text
        with pytest.raises(ProxyError, match="bytes of text cannot fit") as err:
            await proxy.chat({"model": "tiny", "messages": [{"role": "user", "content": huge}]}, "huge/0")
        assert err.value.status == 400 and err.value.code == "context_length_exceeded"
        with pytest.raises(ProxyError, match="bytes of text cannot fit"):
            await proxy.completion({"model": "tiny", "prompt": [huge]}, "huge/1")
        two = [{"role": "assistant", "content": "x"}, {"role": "assistant", "content": "y"}]
        with pytest.raises(ProxyError, match="chat template refuses") as err:
            await proxy.chat({"model": "tiny", "messages": two, "max_tokens": 2}, "tmpl/0")
        assert err.value.status == 400
        lone = json.loads('"\\ud800"')  # valid JSON, yet the tokenizer raised a TypeError on it (a 500)
        for ask in (proxy.chat({"model": "tiny", "messages": [{"role": "user", "content": lone}]}, "sur/0"),
                    proxy.completion({"model": "tiny", "prompt": lone}, "sur/1")):
            with pytest.raises(ProxyError, match="surrogate"):
                await ask

    asyncio.run(go())
    errors = proxy.stats()["errors"]
    assert not proxy.store.open and errors == {"context_length_exceeded": 2, "render_error": 1, "invalid_text": 2}


def test_concurrent_first_requests_cannot_exceed_the_open_episode_cap(served) -> None:
    """Every first request used to pass the cap check before any of them had opened its session."""
    server, _, _ = served
    proxy = CaptureProxy(server.proxy.policy, ProxyConfig(max_open_episodes=2))

    async def one(i: int) -> str:
        try:
            await proxy.chat({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, f"race/{i}")
            return "ok"
        except ProxyError as exc:
            return exc.code

    async def go() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(6)))

    assert sorted(asyncio.run(go())) == ["ok", "ok"] + ["too_many_episodes"] * 4
    assert len(proxy.store.open) == 2 and not proxy._opening
