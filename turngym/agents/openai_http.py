"""OpenAI-compatible chat-completions backend: benchmark any served model.

Works against vLLM's and llama.cpp's servers, SGLang, and hosted APIs: ``POST
{base_url}/chat/completions`` with the conversation, the env's stop strings and the sampling
options. Requests of one ``act`` batch run concurrently (at most ``concurrency`` in flight);
transient failures (connection errors, timeouts, 408/409/429/5xx) are retried with exponential
backoff and jitter, honouring ``Retry-After``. When a request still fails, its action carries
``meta["infra_error"]`` and the rollout ends that episode *unscored* — a dead server is never
scored as a wrong answer. A 200 answer without a well-formed reply (no choices, non-string
content) is the agent's: an empty action flagged ``meta["malformed_response"]``, judged invalid by
the env, never dropped as an infra error. Errors that retrying cannot fix (401, 404, 400: a wrong key, model
name or URL) raise :class:`~turngym.core.errors.ConfigError` at once.

Stop strings: the OpenAI API strips the matched stop string from the reply, but an action
such as ``<calc>2+3`` is incomplete without ``</calc>``. The policy appends it back: the
server's ``stop_reason`` when it reports one (vLLM does), else the closing tag whose opening
tag appears last in the reply. With vLLM, ``extra_body={"include_stop_str_in_output": True,
"return_tokens_as_token_ids": True}`` and ``logprobs=True`` make the server return the exact
text, token ids and log-probs instead.

A turngym capture proxy (``turngym proxy``): every request names its episode in the
``X-Turngym-Episode`` header — a fresh id per episode (the run's episode id, ``@`` and a random
suffix, so two runs never collide on the proxy) — with a secret key of its own in
``X-Turngym-Episode-Key`` (a proxy that guards episodes lets only its holder add turns or report the
outcome); other servers ignore both. When the server
answers as a turngym proxy (its replies carry ``turngym``), :meth:`OpenAIPolicy.end_episode`
(the rollout calls it as each episode ends) reports the episode's outcome and per-turn rewards,
signals and state keys to it, so an eval through the proxy is also a capture. An episode that
ended in an infrastructure error is not reported: the proxy drops it unscored.

Choices: with ``constrain_choices`` a row whose env lists its valid actions
(``AgentInput.choices``) is sent with vLLM's structured-outputs field, ``"structured_outputs":
{"choice": [...]}`` (vLLM >= 0.11; older servers took ``guided_choice``), no stop strings (a stop
string inside a choice would cut it) and a token budget of at least the longest choice's UTF-8 bytes
plus one (no tokenization spells a choice in more tokens than bytes), so the reply is exactly one
choice and never truncated. A server that ignores the field answers freely: the reply is passed on
unchanged for the env to judge as usual, flagged ``meta["off_choices"] = True`` and counted in
``OpenAIPolicy.off_choice_replies``, never silently replaced by a valid choice.

Native tool calls (``native_tools``, opt-in: a server without tool parsing refuses ``tools``): where
the env exposes its tools as OpenAI function schemas (``env.tools``: Tools-v0, BFCL, MCP), they are
sent as the request's ``tools`` (without the env's stop strings, which would cut a call's closing
tag), and the reply's ``tool_calls`` become the env's JSON action ``[{"name": ..., "arguments":
{...}}]`` — how a served model is used by agent frameworks, so that is how it is measured. A reply
without calls is its text (a reply to the user). Arguments that are not a JSON object are passed on
as they came, for the env to judge invalid. Such actions carry ``meta["tool_calls"]`` (how many) and
no token ids or log-probs (the action's text is not what the model sampled).
"""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from turngym.agents.base import Action, AgentInput
from turngym.core.errors import ConfigError

if TYPE_CHECKING:
    from turngym.rollout.types import Episode

__all__ = ["OpenAIPolicy", "RETRY_STATUS"]

#: HTTP statuses worth retrying (transient by nature).
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")
_OPEN_TAG = re.compile(r"^</([A-Za-z_][\w-]*)>$")
EPISODE_HEADER = "X-Turngym-Episode"
"""The capture proxy's episode header (:data:`turngym.proxy.service.EPISODE_HEADER`; not imported:
the proxy imports the agents package, never the reverse)."""
KEY_HEADER = "X-Turngym-Episode-Key"
"""The capture proxy's episode-ownership header: the key the episode was opened with."""
PROXY_NAME_CHARS = "A-Za-z0-9._:/@+=-"
"""The characters of a capture proxy's episode name, as a regex class (``#`` is its segment
separator): :mod:`turngym.proxy.guard` checks names with it, and :class:`OpenAIPolicy` writes them."""
PROXY_NAME_MAX = 200
"""The longest episode name a capture proxy takes."""
_NOT_IN_NAME = re.compile(f"[^{PROXY_NAME_CHARS}]")


class OpenAIPolicy:
    """A policy that asks an OpenAI-compatible server for each action.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name.
        api_key_env: environment variable holding the API key (no header when unset, as
            local servers expect).
        temperature, top_p, max_new_tokens: sampling (``max_new_tokens`` → ``max_tokens``).
        seed: if set, request ``i`` of this policy sends ``seed + i`` (reproducible where the
            server honours seeds, and still different samples for the members of a group).
        timeout: seconds per request (connect: at most 10).
        max_retries: retries after the first attempt for transient failures.
        backoff: first retry delay in seconds; doubles each retry (with jitter), capped at 30.
        concurrency: requests in flight at once.
        logprobs: ask for per-token log-probs (``Action.logprobs``).
        extra_body: more JSON fields for every request (server extensions).
        constrain_choices: where the env enumerates its valid actions (``AgentInput.choices``), ask
            the server to answer exactly one of them (see the module docs); those actions carry
            ``meta["constrained"] = True``. With a vLLM server their log-probs are those of the
            constrained distribution. Rows without choices are sent as without the option.
        native_tools: send the env's tool schemas as ``tools`` and turn the reply's ``tool_calls``
            into the env's JSON action (see the module docs); envs without ``tools`` are unaffected.
        transport: an ``httpx`` transport (tests pass ``httpx.MockTransport``).
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "default",
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        seed: int | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        concurrency: int = 8,
        logprobs: bool = False,
        extra_body: Mapping[str, Any] | None = None,
        constrain_choices: bool = False,
        native_tools: bool = False,
        transport: httpx.BaseTransport | None = None,
        name: str | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, got {base_url!r}")
        if concurrency < 1 or max_retries < 0 or timeout <= 0:
            raise ConfigError(
                f"need concurrency >= 1, max_retries >= 0, timeout > 0; got {concurrency}, {max_retries}, {timeout}"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = name or f"openai:{model}"
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self.seed = seed
        self.max_retries, self.backoff, self.concurrency = max_retries, backoff, concurrency
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        self.constrain_choices = bool(constrain_choices)
        self.native_tools = bool(native_tools)
        self.off_choice_replies = 0  # constrained requests whose reply was none of the choices
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(10.0, timeout)),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            transport=transport,
        )
        self._jitter = random.Random(seed)
        self._lock = threading.Lock()
        self._requests = 0
        self._episodes: dict[str, dict[str, str]] = {}
        """The run's episode id → the headers naming it on the server (a fresh id and key per episode)."""
        self._captured: dict[str, int] = {}
        """Server episode id → turns a capture proxy recorded for it (only for proxies)."""
        self.outcomes_reported = 0
        self.outcome_errors: list[str] = []

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ policy
    def act(self, batch: Sequence[AgentInput]) -> list[Action]:
        start = self._requests
        self._requests += len(batch)
        jobs = [(inp, start + i) for i, inp in enumerate(batch)]
        if len(jobs) == 1 or self.concurrency == 1:
            return [self._act_one(inp, i) for inp, i in jobs]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs))) as pool:
            return list(pool.map(lambda job: self._act_one(*job), jobs))

    def _choices(self, inp: AgentInput) -> list[str] | None:
        """The row's choices when it is decoded constrained (deduplicated, in the env's order)."""
        return list(dict.fromkeys(inp.choices)) if self.constrain_choices and inp.choices else None

    def _tools(self, inp: AgentInput) -> list[dict[str, Any]] | None:
        """The env's tools as OpenAI function schemas, when ``native_tools`` is on and the env has any."""
        if not self.native_tools:
            return None
        tools = getattr(getattr(inp.env, "unwrapped", inp.env), "tools", None)
        return list(tools) if isinstance(tools, list) and tools else None

    def _payload(self, inp: AgentInput, i: int, choices: list[str] | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": inp.messages,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_new_tokens,
        }
        tools = self._tools(inp)
        if choices is not None:
            body["structured_outputs"] = {"choice": choices}
            body["max_tokens"] = max(self.max_new_tokens, 1 + max(len(c.encode()) for c in choices))
        elif tools is not None:
            body["tools"] = tools
        elif inp.stop:
            body["stop"] = list(inp.stop)[:4]  # the OpenAI API accepts at most 4
        if self.seed is not None:
            body["seed"] = self.seed + i
        if self.logprobs:
            body["logprobs"] = True
        body.update(self.extra_body)
        return body

    def _server_episode(self, episode_id: str) -> dict[str, str]:
        """The headers naming this episode on the server: the run's id with a fresh suffix, and a key."""
        with self._lock:
            headers = self._episodes.get(episode_id)
            if headers is None:
                sid = f"{_proxy_name(episode_id)}@{secrets.token_hex(6)}"
                headers = self._episodes[episode_id] = {EPISODE_HEADER: sid, KEY_HEADER: secrets.token_urlsafe(16)}
            return headers

    def _act_one(self, inp: AgentInput, i: int) -> Action:
        choices = self._choices(inp)
        episode = self._server_episode(inp.episode_id)
        sid = episode[EPISODE_HEADER]
        t0 = time.perf_counter()
        data, error, attempts = self._post(self._payload(inp, i, choices), episode)
        latency = time.perf_counter() - t0
        if data is None:
            return Action("", meta={"infra_error": error, "attempts": attempts, "latency_s": latency})
        if isinstance(data, Mapping) and isinstance(data.get("turngym"), Mapping):  # a capture proxy recorded this turn
            with self._lock:
                self._captured[sid] = self._captured.get(sid, 0) + 1
        choice = _first_choice(data)
        if choice is None:  # the server answered, with no reply in it: the agent's failure, judged as an empty action
            return Action("", meta={"malformed_response": str(data)[:200], "attempts": attempts, "latency_s": latency})
        text = choice["message"].get("content") or ""
        finish = choice.get("finish_reason")
        meta: dict[str, Any] = {
            "finish_reason": finish,
            "attempts": attempts,
            "latency_s": latency,
            "usage": data.get("usage"),
            "constrained": choices is not None,
        }
        if choices is not None:
            if text not in choices:  # the server ignored the constraint: the env judges the reply as it is
                meta["off_choices"] = True
                with self._lock:
                    self.off_choice_replies += 1
        elif finish == "stop" and inp.stop:
            stop = _matched_stop(text, inp.stop, choice.get("stop_reason"))
            if stop is not None and not text.endswith(stop):
                text += stop
                meta["stop_appended"] = stop  # token ids/logprobs (if any) do not cover it
            meta["stop"] = stop
        calls = choice["message"].get("tool_calls") if self._tools(inp) is not None else None
        if calls:
            meta["tool_calls"] = len(calls)
            return Action(_calls_as_action(calls), meta=meta)
        token_ids, logprobs = _token_info(choice.get("logprobs"))
        return Action(text, token_ids=token_ids if "stop_appended" not in meta else None, logprobs=logprobs, meta=meta)

    def end_episode(self, episode: Episode) -> None:
        """``episode`` ended: forget its server id, and report its outcome to a capture proxy that
        recorded it (reward, success, per-turn rewards/signals/state keys). Never raises: a refused
        report is counted in ``outcome_errors`` (the proxy then drops the episode unscored)."""
        with self._lock:
            headers = self._episodes.pop(episode.episode_id, None)
            sid = headers[EPISODE_HEADER] if headers is not None else ""
            recorded = self._captured.pop(sid, 0)
        if not recorded or headers is None or episode.infra_error or not episode.turns:
            return
        body = _outcome(episode, per_turn=recorded == len(episode.turns))
        try:
            resp = self._client.post(f"{self._root}/turngym/episodes/{quote(sid, safe='')}/outcome", json=body,
                                     headers=headers)
            ok, why = resp.status_code == 200, f"HTTP {resp.status_code}: {resp.text[:200]}"
        except (httpx.HTTPError, TypeError, ValueError) as exc:  # unreachable, or an outcome that is not JSON
            ok, why = False, f"{type(exc).__name__}: {exc}"
        with self._lock:
            if ok:
                self.outcomes_reported += 1
            else:
                self.outcome_errors.append(f"{sid}: {why}")

    @property
    def _root(self) -> str:
        return self.base_url.removesuffix("/v1")

    def _post(self, body: dict[str, Any], headers: Mapping[str, str] | None = None) -> tuple[dict[str, Any] | None, str, int]:
        """POST with retries; returns (json, "", attempts) or (None, last error, attempts)."""
        error = ""
        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            try:
                resp = self._client.post("/chat/completions", json=body, headers=headers)
            except httpx.TransportError as exc:  # connect/read errors, timeouts
                error = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code == 200:
                    try:
                        return resp.json(), "", attempt + 1
                    except ValueError:
                        error = f"non-JSON 200 response: {resp.text[:200]!r}"
                elif resp.status_code in RETRY_STATUS:
                    error = f"HTTP {resp.status_code}: {resp.text[:200]}"
                    retry_after = _retry_after(resp.headers.get("retry-after"))
                else:
                    raise ConfigError(
                        f"{self.base_url}/chat/completions answered HTTP {resp.status_code} for model "
                        f"{self.model!r}: {resp.text[:300]} — check the URL, --model and the API key variable"
                    )
            if attempt < self.max_retries:
                with self._lock:
                    jitter = self._jitter.uniform(0.5, 1.5)
                time.sleep(min(30.0, retry_after if retry_after is not None else self.backoff * 2**attempt * jitter))
        return None, f"gave up after {self.max_retries + 1} attempts: {error}", self.max_retries + 1


def _proxy_name(episode_id: str) -> str:
    """The run's episode id as a capture proxy takes a name: 1-200 characters of ``[A-Za-z0-9._:/@+=-]``
    starting with a letter or digit. Other characters become ``-`` (a tree rollout's ``GROUP#NODE``
    was refused, and the refusal stopped the rollout); the random suffix keeps names apart."""
    name = _NOT_IN_NAME.sub("-", episode_id)[: PROXY_NAME_MAX - 20] or "episode"  # room for the suffix
    return name if name[0].isalnum() else f"e{name}"


def _calls_as_action(calls: Any) -> str:
    """OpenAI ``tool_calls`` as the tool envs' JSON action (a list of ``{"name", "arguments"}``); a call
    whose arguments are not a JSON object keeps them as sent, so the env judges it invalid."""
    out = []
    for call in calls if isinstance(calls, list) else []:
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping):
            out.append({"name": None, "arguments": None})
            continue
        args = fn.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass
        out.append({"name": fn.get("name"), "arguments": args})
    return json.dumps(out, ensure_ascii=False)


def _outcome(episode: Episode, *, per_turn: bool) -> dict[str, Any]:
    """The proxy's outcome report for ``episode``: the last turn's reward as the outcome and the
    others per turn (the proxy adds the outcome to the last turn: the same return), or, when the
    proxy recorded another number of turns than the episode has, the return as the outcome."""
    last = episode.turns[-1]
    body: dict[str, Any] = {
        "success": episode.success, "env_id": episode.env_id, "task_id": episode.task_id, "group": episode.group,
        "seed": episode.seed, "truncated": bool(last.truncated and not last.terminated),
        "info": {k: v for k, v in episode.outcome.items() if k not in ("reward", "success")},
    }
    if per_turn:
        body["reward"] = last.reward
        body["turns"] = [{"reward": 0.0 if t is last else t.reward, "signals": dict(t.signals), "state_key": t.state_key,
                          "action_valid": t.action_valid, "invalid_reason": t.invalid_reason} for t in episode.turns]
    else:
        body["reward"] = episode.total_reward
    return body


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _first_choice(data: Any) -> dict[str, Any] | None:
    """The reply's first choice when it is a well-formed chat completion (string or null content), else None.

    A 200 answer is the agent's: a body without a usable reply must end as the agent's invalid
    action, never as an ``infra_error`` (which drops the episode from every score, so a served
    model could hide its losses behind malformed answers) nor as an exception (``content: 5``
    crashed the whole run on ``text.endswith``).
    """
    try:
        choice = data["choices"][0]
        content = choice["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return choice if isinstance(choice, dict) and (content is None or isinstance(content, str)) else None


def _matched_stop(text: str, stops: Sequence[str], reported: Any) -> str | None:
    """Which stop string ended the reply (the API strips it)."""
    if isinstance(reported, str) and reported in stops:
        return reported
    if any(text.endswith(s) for s in stops):
        return None
    best, best_pos = None, -1
    for s in stops:
        m = _OPEN_TAG.match(s)
        if m is not None:
            pos = text.rfind(f"<{m.group(1)}>")
            if pos > best_pos:
                best, best_pos = s, pos
    return best


def _token_info(logprobs: Any) -> tuple[list[int] | None, list[float] | None]:
    """Per-token log-probs, and token ids when the server encodes them (vLLM ``token_id:N``)."""
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not content:
        return None, None
    lps = [float(t.get("logprob", 0.0)) for t in content]
    ids = [_TOKEN_ID.match(str(t.get("token", ""))) for t in content]
    return ([int(m.group(1)) for m in ids] if all(ids) else None), lps
