"""The client side: name an episode on each request, report its outcome when it ends.

An episode belongs to the client that opened it (:mod:`turngym.proxy.guard`): every request and
the outcome carry its key. These helpers send a key derived from the episode's name and a secret
of this process (``$TURNGYM_EPISODE_SECRET`` when set, so several processes — an agent and a
separate grader — derive the same keys), so code that uses both carries it without knowing:

>>> sorted(episode_headers("task-7/0"))
['X-Turngym-Episode', 'X-Turngym-Episode-Key']
>>> episode_headers("task-7/0", key="my-own-secret-key-0001")["X-Turngym-Episode-Key"]
'my-own-secret-key-0001'

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
from turngym.proxy.guard import KEY_HEADER, KEY_SEP, derive_key

__all__ = ["episode_headers", "episode_ref", "report_outcome"]


@functools.cache
def _http() -> httpx.Client:
    """One pooled client per process: a fresh one per report costs ~100 ms (TLS context, connection)."""
    return httpx.Client()


def episode_headers(episode_id: str, group: str | None = None, *, key: str | None = None) -> dict[str, str]:
    """The headers that thread a request into ``episode_id`` (``extra_headers=`` for openai) with
    its key (default: derived, see the module docstring), and optionally name its ``group``
    (episodes of one task; the outcome report may name it instead)."""
    from turngym.proxy.service import EPISODE_HEADER, GROUP_HEADER

    key = key or derive_key(episode_id)
    return {EPISODE_HEADER: episode_id, KEY_HEADER: key} | ({GROUP_HEADER: group} if group else {})


def episode_ref(episode_id: str, *, key: str | None = None) -> str:
    """``NAME~KEY``: the episode and its key in one string, for clients that can set only the body's
    ``user`` field or one header (a framework that never reads response headers)."""
    return f"{episode_id}~{key or derive_key(episode_id)}"


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
    key: str | None = None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """POST ``episode_id``'s outcome to the proxy at ``base_url`` (with or without ``/v1``).

    ``turns``: optional, one ``{"reward", "signals", "state_key", "action_valid"}`` per request
    the episode made, in order (see :class:`~turngym.proxy.capture.OutcomeReport`). Returns the
    proxy's answer (the ids of the episodes written). Raises :class:`ConfigError` with the
    proxy's message when it refuses the report. ``key``: the episode's key (default: derived, as
    :func:`episode_headers` sends it); ``token``: the proxy's bearer token, if it has one.
    """
    body: dict[str, Any] = {"reward": reward, "truncated": truncated}
    for field, value in (("success", success), ("env_id", env_id), ("task_id", task_id), ("group", group), ("seed", seed)):
        if value is not None:
            body[field] = value
    if turns:
        body["turns"] = [dict(t) for t in turns]
    if info:
        body["info"] = dict(info)
    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if key is not None or KEY_SEP not in episode_id:  # NAME~KEY carries its own key
        headers[KEY_HEADER] = key or derive_key(episode_id)
    r = _http().post(f"{root}/turngym/episodes/{quote(episode_id, safe='')}/outcome", json=body, headers=headers, timeout=timeout)
    if r.status_code != 200:
        try:
            message = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = r.text
        raise ConfigError(f"the proxy refused the outcome of {episode_id!r} ({r.status_code}): {message}")
    return r.json()
