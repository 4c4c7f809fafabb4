"""An env's action choices cross the server: remote ``action_choices()`` equals the local env's."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

import turngym
from turngym.agents import Action, AgentInput
from turngym.envs.household.env import HouseholdEnv
from turngym.rollout import run_episodes
from turngym.rollout.steppers import RemoteStepper
from turngym.server.protocol import (
    MAX_CHOICE_CHARS,
    MAX_CHOICES,
    MAX_CHOICES_TOTAL_CHARS,
    choices_from_wire,
    choices_to_wire,
    dumps,
    loads,
)
from turngym.server.testing import ServerThread

HOUSEHOLD = "turngym/Household-v0"
MATH = "turngym/Math-v0"
HUGE = "test/HugeChoices-v0"


class HugeChoicesTestEnv(HouseholdEnv):
    """Test double: a Household env whose ``action_choices()`` lists more than the wire carries."""

    def action_choices(self) -> tuple[str, ...] | None:
        return tuple(f"go to drawer {i}" for i in range(MAX_CHOICES + 1))


@pytest.fixture(scope="module")
def server():
    # the default executor: envs live in worker processes, so choices are computed there
    with ServerThread([HOUSEHOLD, MATH], factories={HUGE: HugeChoicesTestEnv}, max_sessions=64) as srv:
        yield srv


def _play_both(remote: Any, local: Any, seed: int, turns: int) -> list[tuple[Any, Any]]:
    """Reset and step both envs with the same actions; the (remote, local) choices after each call."""
    remote.reset(seed=seed)
    local.reset(seed=seed)
    seen = [(remote.action_choices(), local.action_choices())]
    rng = np.random.default_rng(seed)
    for _ in range(turns):
        action = local.sample_action(rng)
        _, _, term, trunc, _ = local.step(action)
        remote.step(action)
        seen.append((remote.action_choices(), local.action_choices()))
        if term or trunc:
            break
    return seen


def test_remote_household_choices_equal_the_local_envs(server):
    remote = turngym.make(HOUSEHOLD, remote=server.url)
    local = turngym.make(HOUSEHOLD)
    distinct = set()
    for seed in (0, 1, 2):
        for got, want in _play_both(remote, local, seed, turns=6):
            assert want is not None and len(want) > 1
            assert isinstance(got, tuple) and got == want
            distinct.add(want)
    assert len(distinct) > 3  # the choices change with the state: the client does not keep the first list
    remote.close()


def test_async_client_choices_equal_the_local_envs(server):
    from turngym.server.client import AsyncRemoteEnv

    local = turngym.make(HOUSEHOLD)

    async def play() -> None:
        async with AsyncRemoteEnv(server.url, HOUSEHOLD) as env:
            assert env.action_choices() is None  # before the first reset
            await env.reset(seed=4)
            local.reset(seed=4)
            assert env.action_choices() == local.action_choices()
            for action in local.action_choices()[:1] + ("look",):
                await env.step(action)
                local.step(action)
                assert env.action_choices() == local.action_choices()

    asyncio.run(play())


def test_restore_brings_back_the_restored_states_choices(server):
    remote = turngym.make(HOUSEHOLD, remote=server.url)
    local = turngym.make(HOUSEHOLD)
    remote.reset(seed=7)
    local.reset(seed=7)
    first = local.action_choices()[0]
    remote.step(first)
    local.step(first)
    snap, local_snap = remote.snapshot(), local.snapshot()
    at_snapshot = local.action_choices()
    for action in [c for c in at_snapshot if c.startswith("go to")][-2:]:
        remote.step(action)
        local.step(action)
    assert remote.action_choices() == local.action_choices() != at_snapshot  # the state (and its choices) moved on
    remote.restore(snap)
    local.restore(local_snap)
    assert remote.action_choices() == at_snapshot == local.action_choices()
    remote.close()


def test_env_without_choices_gives_none_and_sends_no_choices_key(server):
    remote = turngym.make(MATH, remote=server.url)
    local = turngym.make(MATH)
    for got, want in _play_both(remote, local, seed=3, turns=3):
        assert want is None and got is None

    async def raw_replies() -> list[dict[str, Any]]:
        from websockets.asyncio.client import connect

        async with connect(server.url + "/v1/session") as ws:
            replies = []
            for frame in ({"op": "make", "env_id": MATH, "kwargs": {}}, {"op": "reset", "seed": 0},
                          {"op": "step", "action": "<calc>1+1</calc>"}):
                await ws.send(dumps(frame))
                replies.append(loads(await ws.recv()))
            return replies

    make, reset, step = asyncio.run(raw_replies())
    assert make["spec"]["protocol"] >= 2
    assert reset["ok"] and step["ok"] and "choices" not in reset and "choices" not in step  # replies stay small


def test_client_cannot_inject_choices(server):
    """The choices in a reply are the env's own, whatever the client's frames carry."""
    local = turngym.make(HOUSEHOLD)
    local.reset(seed=5)

    async def talk() -> list[dict[str, Any]]:
        from websockets.asyncio.client import connect

        evil = ["rm -rf /", "x" * 100]
        async with connect(server.url + "/v1/session") as ws:
            replies = []
            for frame in ({"op": "make", "env_id": HOUSEHOLD, "kwargs": {}, "choices": evil},
                          {"op": "reset", "seed": 5, "choices": evil},
                          {"op": "step", "action": "look", "choices": evil}):
                await ws.send(dumps(frame))
                replies.append(loads(await ws.recv()))
            return replies

    _, reset, step = asyncio.run(talk())
    assert reset["choices"] == list(local.action_choices())
    local.step("look")
    assert step["choices"] == list(local.action_choices())


def test_choices_past_the_caps_arrive_as_none(server):
    from websockets.asyncio.client import connect

    from turngym.server.client import AsyncRemoteEnv

    async def play() -> tuple[Any, ...]:
        async with connect(server.url + "/v1/session", max_size=None) as ws:  # what the server sends
            for frame in ({"op": "make", "env_id": HUGE, "kwargs": {}}, {"op": "reset", "seed": 0}):
                await ws.send(dumps(frame))
                reply = loads(await ws.recv())
        async with AsyncRemoteEnv(server.url, HUGE) as env:  # not in the registry: the async client needs none
            await env.reset(seed=0)
            huge = env.action_choices()
            await env.step("look")
            return reply, huge, env.action_choices()

    reply, after_reset, after_step = asyncio.run(play())
    assert reply["ok"] and "choices" not in reply  # dropped whole by the server, never cut to a partial list
    assert after_reset is None and after_step is None


def test_choice_caps_on_both_sides():
    ok = ["look", "go to desk 1"]
    assert choices_to_wire(ok) == ok and choices_to_wire(tuple(ok)) == ok
    assert choices_to_wire(None) is None
    assert choices_to_wire(["a"] * MAX_CHOICES) is not None
    assert choices_to_wire(["a"] * (MAX_CHOICES + 1)) is None
    assert choices_to_wire(["x" * MAX_CHOICE_CHARS]) is not None
    assert choices_to_wire(["x" * (MAX_CHOICE_CHARS + 1)]) is None
    n = MAX_CHOICES_TOTAL_CHARS // MAX_CHOICE_CHARS
    assert choices_to_wire(["x" * MAX_CHOICE_CHARS] * n) is not None
    assert choices_to_wire(["x" * MAX_CHOICE_CHARS] * n + ["y"]) is None
    assert choices_to_wire(["look", 3]) is None and choices_to_wire("look") is None
    # the client reads anything malformed (or absent, as from a version-1 server) as None
    assert choices_from_wire(ok) == tuple(ok)
    for bad in (None, "look", {"a": 1}, ["look", None], ["a"] * (MAX_CHOICES + 1), ["x" * (MAX_CHOICE_CHARS + 1)],
                ["x" * MAX_CHOICE_CHARS] * (n + 1)):
        assert choices_from_wire(bad) is None, bad


class ChoiceRecordingTestDouble:
    """Test double policy: records each AgentInput's choices and plays a fixed pick among them."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, ...] | None] = []

    def act(self, batch: list[AgentInput]) -> list[Action]:
        actions = []
        for inp in batch:
            self.seen.append(inp.choices)
            actions.append(Action(inp.choices[len(self.seen) % len(inp.choices)] if inp.choices else "look"))
        return actions


@pytest.mark.parametrize("how", ["factory", "stepper"])
def test_runner_gives_the_policy_the_remote_envs_choices(server, how):
    seeds = [0, 1]
    local_policy, remote_policy = ChoiceRecordingTestDouble(), ChoiceRecordingTestDouble()
    local = run_episodes(lambda: turngym.make(HOUSEHOLD, max_turns=5), local_policy, seeds, batch_size=2)
    envs = (lambda: turngym.make(HOUSEHOLD, remote=server.url, max_turns=5)) if how == "factory" else \
        RemoteStepper(server.url, HOUSEHOLD, max_turns=5)
    remote = run_episodes(envs, remote_policy, seeds, batch_size=2)
    assert len(remote_policy.seen) >= 8 and all(c for c in remote_policy.seen)
    assert remote_policy.seen == local_policy.seen
    dump = [json.loads(json.dumps(ep.to_dict())) for ep in remote]
    assert dump == [json.loads(json.dumps(ep.to_dict())) for ep in local]
    assert all(t["action_valid"] for ep in dump for t in ep["turns"])  # every pick was an admissible command


def test_eval_cli_constrains_a_remote_household_env(server, tmp_path):
    """``turngym eval --constrain-choices --env-arg remote=URL``: the tiny model only plays admissible commands."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from turngym.cli import main

    out = tmp_path / "eval"
    rc = main(["eval", HOUSEHOLD, "--agent", "hf:tiny", "--constrain-choices", "--episodes", "2", "--batch-size", "2",
               "--env-arg", f"remote={server.url}", "--env-arg", "max_turns=4", "--max-new-tokens", "12",
               "--quiet", "--json", "--out", str(out)])
    assert rc == 0
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    turns = [t for ep in episodes for t in ep["turns"]]
    assert len(turns) >= 4
    assert all(t["action_valid"] for t in turns), [t["action"] for t in turns if not t["action_valid"]]


@pytest.mark.parametrize("env_id", [MATH, HOUSEHOLD])
def test_policy_input_of_a_remote_env_equals_the_local_ones(server, env_id):
    """Stop strings, token budget, forced prefix and choices reach the policy as from the local env."""
    from turngym.rollout.runner import agent_input, new_episode

    def policy_input(env: Any) -> dict[str, Any]:
        obs, info = env.reset(seed=2)
        ep = new_episode(env, obs, info, episode_id="e", env_id=env_id, seed=2, group="g")
        inp = agent_input(ep, env, history=None)
        return {k: getattr(inp, k) for k in ("messages", "stop", "max_new_tokens", "action_prefix", "choices")}

    remote = turngym.make(env_id, remote=server.url)
    local = turngym.make(env_id)
    want = policy_input(local)
    assert want["stop"] or want["choices"]  # each env shapes the policy's output somehow
    assert want["max_new_tokens"] is not None
    assert policy_input(remote) == want
    remote.close()
