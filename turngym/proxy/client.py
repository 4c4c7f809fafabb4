"""The client side: name an episode on each request, report its outcome when it ends.

>>> episode_headers("task-7/0")
{'X-Turngym-Episode': 'task-7/0'}

With the ``openai`` client::

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
    reply = client.chat.completions.create(model="tiny", messages=messages,
                                           extra_headers=episode_headers("task-7/0"))
    ...
    report_outcome("http://127.0.0.1:8000", "task-7/0", reward=1.0, group="task-7")
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from turngym.core.errors import ConfigError

__all__ = ["episode_headers", "report_outcome"]


@functools.cache
def _http() -> httpx.Client:
    """One pooled client per process: a fresh one per report costs ~100 ms (TLS context, connection)."""
    return httpx.Client()


def episode_headers(episode_id: str, group: str | None = None) -> dict[str, str]:
    """The headers that thread a request into ``episode_id`` (``extra_headers=`` for openai), and
    optionally name its ``group`` (episodes of one task; the outcome report may name it instead)."""
    from turngym.proxy.service import EPISODE_HEADER, GROUP_HEADER

    return {EPISODE_HEADER: episode_id} | ({GROUP_HEADER: group} if group else {})


def report_outcome(
    base_url: str,
    episode_id: str,
    *,
    reward: float,
    success: bool | None = None,
    env_id: str | None = None,
    task_id: str | None = None,
    group: str | None = None,
    seed: int | None = None,
    truncated: bool = False,
    turns: Sequence[Mapping[str, Any]] | None = None,
    info: Mapping[str, Any] | None = None,
    token: str | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """POST ``episode_id``'s outcome to the proxy at ``base_url`` (with or without ``/v1``).

    ``turns``: optional, one ``{"reward", "signals", "state_key", "action_valid"}`` per request
    the episode made, in order (see :class:`~turngym.proxy.capture.OutcomeReport`). Returns the
    proxy's answer (the ids of the episodes written). Raises :class:`ConfigError` with the
    proxy's message when it refuses the report.
    """
    body: dict[str, Any] = {"reward": reward, "truncated": truncated}
    for key, value in (("success", success), ("env_id", env_id), ("task_id", task_id), ("group", group), ("seed", seed)):
        if value is not None:
            body[key] = value
    if turns:
        body["turns"] = [dict(t) for t in turns]
    if info:
        body["info"] = dict(info)
    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = _http().post(f"{root}/turngym/episodes/{quote(episode_id, safe='')}/outcome", json=body, headers=headers, timeout=timeout)
    if r.status_code != 200:
        try:
            message = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = r.text
        raise ConfigError(f"the proxy refused the outcome of {episode_id!r} ({r.status_code}): {message}")
    return r.json()
