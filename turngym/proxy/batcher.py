"""Concurrent requests → one ``generate`` call per round (the proxy's batching).

While one batch is being generated, new requests queue and go into the next call, so N agents
cost about one batched decode instead of N sequential ones.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

__all__ = ["Batcher"]


class Batcher:
    """Collects concurrent requests and samples them in one ``generate`` call per round."""

    def __init__(self, generate: Any, max_batch: int) -> None:
        self._generate, self._max = generate, max_batch
        self._pending: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._task: asyncio.Task[None] | None = None
        self.generate_s = 0.0
        self.calls = 0

    async def submit(self, prompt: list[int], stop: tuple[str, ...], reusable: int, limit: int, forced: list[int]) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append(((prompt, stop, reusable, limit, forced), fut))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[: self._max], self._pending[self._max :]
            args = [list(col) for col in zip(*(a for a, _ in batch), strict=True)]
            if not any(args[-1]):  # nothing forced: the policy's four-argument generate (any token policy) will do
                args.pop()
            t0 = time.perf_counter()
            try:
                gens = await asyncio.to_thread(self._generate, *args)
            except Exception as exc:  # the model failed: every waiting request learns it
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            finally:
                self.generate_s += time.perf_counter() - t0
                self.calls += 1
            for (_, fut), gen in zip(batch, gens, strict=True):
                if not fut.done():  # a client that went away cancelled its future
                    fut.set_result(gen)
