"""A hostile OpenEnv client against the env server (127.0.0.1, bounded): a frame nested past the
JSON decoder's stack is an ``INVALID_JSON`` error frame and the connection lives on -- before, the
``RecursionError`` (a ``RuntimeError``) was taken for a closed socket and the server hung up silently.
The native protocol's first frame gets its refusal frame the same way."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("uvicorn", reason="needs the server extra: pip install 'turngym[server]'")
from websockets.asyncio.client import connect

from turngym.server.testing import ServerThread

DEEP = "[" * 100_000


@pytest.fixture(scope="module")
def server():
    with ServerThread(["turngym/Math-v0"], max_sessions=4) as srv:
        yield srv


async def _round_trip(ws, frame) -> dict:
    await ws.send(frame if isinstance(frame, str) else json.dumps(frame))
    return json.loads(await asyncio.wait_for(ws.recv(), 20))


def test_openenv_frame_nested_past_the_stack_is_an_error_frame_and_the_episode_goes_on(server) -> None:
    async def play() -> None:
        async with connect(server.url + "/ws", max_size=None) as ws:
            assert (await _round_trip(ws, {"type": "reset", "data": {"seed": 0}}))["type"] == "observation"
            reply = await _round_trip(ws, DEEP)
            assert reply["type"] == "error" and reply["data"]["code"] == "INVALID_JSON"
            step = await _round_trip(ws, {"type": "step", "data": {"text": "<answer>1</answer>"}})
            assert step["type"] == "observation" and step["data"]["observation"]["turn"] == 1

    asyncio.run(play())


def test_native_first_frame_nested_past_the_stack_is_refused_with_a_frame(server) -> None:
    async def play() -> None:
        async with connect(server.url + "/v1/session", max_size=None) as ws:
            reply = await _round_trip(ws, DEEP)
            assert reply["ok"] is False and "first frame" in reply["error"]["message"]

    asyncio.run(play())
