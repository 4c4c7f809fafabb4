"""Concurrent requests → one ``generate`` call per round (the proxy's batching).

While one batch is being generated, new requests queue and go into the next call, so N agents
cost about one batched decode instead of N sequential ones. A failed call is retried one request
at a time, so only the request that broke the model fails.
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
        self.isolated = 0
        """Failed batches retried one request at a time."""

    async def submit(self, prompt: list[int], stop: tuple[str, ...], reusable: int, limit: int, forced: list[int]) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append(((prompt, stop, reusable, limit, forced), fut))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[: self._max], self._pending[self._max :]
            await self._run(batch)

    async def _run(self, batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        """One ``generate`` call for ``batch``. Should it fail with several requests in it, each is
        retried alone, so a request that breaks the model fails only its own episode: else one
        client's request marked every episode sampled beside it as an infrastructure error."""
        batch = [(a, fut) for a, fut in batch if not fut.done()]  # a client that went away cancelled its future
        if not batch:
            return
        args = [list(col) for col in zip(*(a for a, _ in batch), strict=True)]
        if not any(args[-1]):  # nothing forced: the policy's four-argument generate (any token policy) will do
            args.pop()
        t0 = time.perf_counter()
        try:
            gens, failure = await asyncio.to_thread(self._generate, *args), None
        except Exception as exc:  # the model failed
            gens, failure = None, exc
        self.generate_s += time.perf_counter() - t0
        self.calls += 1
        if failure is not None and len(batch) > 1:
            self.isolated += 1
            for item in batch:
                await self._run([item])
        elif failure is not None:
            if not batch[0][1].done():
                batch[0][1].set_exception(failure)
        else:
            for (_, fut), gen in zip(batch, gens, strict=True):
                if not fut.done():
                    fut.set_result(gen)
