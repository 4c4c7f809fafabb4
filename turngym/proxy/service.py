"""OpenAI-style requests → turngym's policy → recorded turns (no HTTP framework here).

:class:`CaptureProxy` answers ``/v1/chat/completions`` and ``/v1/completions`` bodies with a
token-generating policy (:class:`~turngym.agents.hf.HFPolicy`'s public ``generate``: token ids
in, token ids + log-probs out) and records every answer in its session
(:mod:`turngym.proxy.capture`). Concurrent requests are sampled together: while one batch is
being generated, new requests queue and go into the next ``generate`` call, so N agents cost
about one batched decode instead of N sequential ones. Requests of the *same* episode are
served one at a time in arrival order (a second request cannot continue a turn that does not
exist yet).

What is refused, with an OpenAI-shaped error that names the fix (and counted in the stats):
an unknown model (404), a request without an episode id, ``n > 1``, legacy ``functions`` and
JSON modes, penalties, logit biases and top log-probs, a temperature or top-p other than the
proxy's (the recorded log-probs must be those of the distribution that sampled: training
needs them), a prompt plus ``max_tokens`` beyond the model's positions or the proxy's cap, a
request for an episode already finished or dropped (409), and too many open episodes (429).
An episode belongs to the client that opened it: ids and keys are checked at the door and a
request or outcome without the episode's key is refused (403) before it touches the episode
(:mod:`turngym.proxy.guard`); an outcome is written to ``episodes.jsonl`` before it is
acknowledged (:mod:`turngym.proxy.ledger`).
A failure of the model itself answers 500 and marks the episode as an infrastructure error:
its outcome is recorded, but trainers drop it instead of scoring it.

Tools (``tools``, ``tool_choice``, ``parallel_tool_calls``) are rendered through the model's chat
template and its replies parsed back into ``tool_calls`` (:mod:`turngym.proxy.tools`,
:mod:`turngym.proxy.tool_parsers`); ``tool_choice: required`` or a named function feeds the
parser's opening text (``<tool_call>\n{"name": "``) instead of sampling it. A reply that does not
parse is returned as text and counted (``tool_parse_failures``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from turngym.agents.render import RenderError
from turngym.proxy.batcher import Batcher
from turngym.proxy.capture import (
    EDITED,
    TEMPLATE,
    CapturedTurn,
    Session,
    SessionStore,
    parse_outcome,
    tidied,
    to_episodes,
)
from turngym.proxy.guard import (
    KEY_HEADER,
    EpisodeRef,
    Refused,
    check_json,
    check_size,
    key_digest,
    key_matches,
    mint_key,
    parse_ref,
)
from turngym.proxy.ledger import FinishedLog
from turngym.proxy.request import (  # the request's names, re-exported: importers of this module keep them
    _REFUSED,
    EPISODE_HEADER,
    GROUP_HEADER,
    ProxyConfig,
    ProxyError,
    model_fingerprint,
    normalize_messages,
    tokenizer_fingerprint,
)
from turngym.proxy.tool_parsers import TOOL_PARSERS, ParsedReply, ToolParser, detect_parser
from turngym.proxy.tools import ToolRequest, ToolTemplate, parse_reply, parse_tool_request, recognize_calls

__all__ = ["CaptureProxy", "ProxyConfig", "ProxyError", "model_fingerprint", "tokenizer_fingerprint", "EPISODE_HEADER", "GROUP_HEADER"]


class CaptureProxy:
    """Serve a policy behind OpenAI-style endpoints and record what it sampled, per episode.

    Args:
        policy: a token policy with ``generate(prompts, stops, reusable, max_new_tokens)``,
            ``tokenizer``, ``renderer``, ``temperature``, ``top_p`` and ``max_positions`` —
            :class:`~turngym.agents.hf.HFPolicy`.
        config: limits and where episodes go.
    """

    def __init__(self, policy: Any, config: ProxyConfig | None = None) -> None:
        self.policy = policy
        self.config = config or ProxyConfig()
        self.tokenizer = policy.tokenizer
        self.renderer = policy.renderer
        self.store = SessionStore(outcome_timeout_s=self.config.outcome_timeout_s, max_open=self.config.max_open_episodes)
        out = self.config.out / "episodes.jsonl" if self.config.out is not None else None
        self.finished = FinishedLog(out, max_count=self.config.keep_finished, max_bytes=self.config.keep_finished_bytes)
        """The most recent finished episodes (``GET /turngym/episodes``); ``out/episodes.jsonl`` has them all."""
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._opening: set[str] = set()
        """Episodes whose first request is being sampled: they count against ``max_open_episodes``
        (else concurrent first requests all pass the check before any of them opens its session)."""
        self._batcher = Batcher(policy.generate, self.config.max_batch_size)
        self.request_s = 0.0
        self._reaped = 0.0
        self.meta = {
            "model": self.config.model_name, "temperature": float(policy.temperature), "top_p": float(policy.top_p),
            "tokenizer": tokenizer_fingerprint(self.tokenizer), "source": "turngym.proxy",
        }
        arch = model_fingerprint(getattr(policy, "model", None))
        if arch is not None:
            self.meta["architecture"] = arch
        if self.config.out is not None:
            self.config.out.mkdir(parents=True, exist_ok=True)
        self._token_bytes = max(map(len, self.tokenizer.get_vocab()), default=1)
        """The longest token's spelling: no token covers more bytes of text (see :meth:`_check_text`)."""
        self.tool_parser: ToolParser = TOOL_PARSERS[self.config.tool_call_parser
                                                    or detect_parser(getattr(self.tokenizer, "chat_template", None))]()
        """Reads tool calls out of replies (``--tool-call-parser``, default: the template's format)."""
        self.tool_template = ToolTemplate(self.tokenizer, self.tool_parser)
        self.template_splices = self._probe_template()
        """Whether the chat template renders a conversation incrementally (only appends), so
        multi-turn episodes can reuse sampled ids; when not, every chat turn is an episode of its own."""

    def _probe_template(self) -> bool:
        probe = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                 {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}]
        return self._render(probe, [None], None) is not None

    # ------------------------------------------------------------------ bookkeeping
    def stats(self) -> dict[str, Any]:
        """Counters: requests, tokens, episodes open/finished, branches, drops and errors by kind."""
        s = self.store.stats()
        s["template_splices"] = self.template_splices
        s["tool_call_parser"] = self.tool_parser.name
        s["tools_native"] = self.tool_template.native
        s["generate_calls"] = self._batcher.calls
        s["generate_isolated"] = self._batcher.isolated
        s["generate_s"] = round(self._batcher.generate_s, 4)
        s["request_s"] = round(self.request_s, 4)
        return s

    def reap(self) -> int:
        """Drop the episodes whose outcome timed out; returns how many."""
        stale = self.store.expired()
        return len(stale)

    def _fail(self, exc: ProxyError) -> ProxyError:
        self.store.errors[exc.code] += 1
        return exc

    @contextlib.asynccontextmanager
    async def _lock(self, episode_id: str) -> AsyncIterator[None]:
        """Serve one episode's requests one at a time; the lock lives while someone holds or awaits it."""
        lock, users = self._locks.get(episode_id) or (asyncio.Lock(), 0)
        self._locks[episode_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[episode_id]
            if users == 1:
                del self._locks[episode_id]
            else:
                self._locks[episode_id] = (lock, users - 1)

    def _episode_id(self, body: Mapping[str, Any], header: str | None, key: str | None = None) -> EpisodeRef:
        """The request's episode reference (``NAME`` or ``NAME~KEY``; see :mod:`turngym.proxy.guard`)."""
        raw = header or body.get("user")
        if not isinstance(raw, str) or not raw.strip():
            raise self._fail(ProxyError(400, f"no episode id: send the header {EPISODE_HEADER} (openai: "
                                             f"extra_headers={{'{EPISODE_HEADER}': ID}}) or the body's user field",
                                        code="missing_episode"))
        return self._ref(raw, key)

    def _ref(self, raw: str, key: str | None) -> EpisodeRef:
        try:
            return parse_ref(raw, key)
        except Refused as exc:
            raise self._fail(ProxyError(exc.status, str(exc), code=exc.code, param=exc.param)) from None

    def _owned(self, session: Session, ref: EpisodeRef) -> None:
        """Refuse (403) a request for ``session`` that does not carry the key it was opened with."""
        if not key_matches(session.owner, ref.key):
            what = "no key" if ref.key is None else "a key that is not its owner's"
            raise self._fail(ProxyError(403, f"episode {ref.name!r} belongs to the client that opened it and this request "
                                             f"carries {what}: send the {KEY_HEADER} header of its first response, or name "
                                             "episodes NAME~KEY with a secret KEY of your own from the first request "
                                             "(turngym.proxy.episode_headers and report_outcome do this for you; processes "
                                             "that share episodes must share TURNGYM_EPISODE_SECRET)",
                                        code="not_episode_owner"))

    def _open(self, ref: EpisodeRef) -> Session | None:
        """``ref``'s open session (its owner's only: 403 otherwise), or None for a new episode."""
        episode_id = ref.name
        why = self.store.closed_reason(episode_id)
        if why is not None:
            raise self._fail(ProxyError(409, f"episode {episode_id!r} is {why}; start a new episode with a new id",
                                        code="episode_closed"))
        session = self.store.get(episode_id)
        if session is not None:
            self._owned(session, ref)
        if session is None and not self.store.can_open(pending=len(self._opening)):
            raise self._fail(ProxyError(429, f"{self.config.max_open_episodes} episodes are open; report outcomes "
                                             "(or let them time out) before starting more", code="too_many_episodes"))
        return session

    # ------------------------------------------------------------------ request checks
    def _check(self, body: Any) -> None:
        if not isinstance(body, Mapping):
            raise self._fail(ProxyError(400, "the request body must be a JSON object"))
        model = body.get("model")
        if model != self.config.model_name:
            raise self._fail(ProxyError(404, f"model {model!r} is not served here; this proxy serves "
                                             f"{self.config.model_name!r}", code="model_not_found", param="model"))
        for key, why in _REFUSED.items():
            if body.get(key) not in (None, False, [], {}, 0):
                raise self._fail(ProxyError(400, f"{key}: {why}", code="unsupported_parameter", param=key))
        if body.get("n") not in (None, 1):
            raise self._fail(ProxyError(400, "n must be 1: send one request per sample (each its own episode)",
                                        code="unsupported_parameter", param="n"))
        for key, neutral in (("presence_penalty", 0.0), ("frequency_penalty", 0.0), ("repetition_penalty", 1.0)):
            if body.get(key) is not None and body.get(key) != neutral:
                raise self._fail(ProxyError(400, f"{key} changes the sampling distribution, so the recorded log-probs "
                                                 "would not be the policy's", code="unsupported_parameter", param=key))
        fmt = body.get("response_format")
        if fmt is not None and (not isinstance(fmt, Mapping) or fmt.get("type") != "text"):
            raise self._fail(ProxyError(400, "response_format: only text is supported", code="unsupported_parameter",
                                        param="response_format"))
        for key in ("temperature", "top_p"):
            value, mine = body.get(key), getattr(self.policy, key)
            if value is not None and (not isinstance(value, (int, float)) or abs(value) > 1e6 or float(value) != mine):
                if self.config.ignore_sampling_params:
                    self.store.counts[f"ignored_{key}"] += 1
                    continue
                raise self._fail(ProxyError(400, f"{key}={value!r} differs from the proxy's {mine} (the recorded log-probs must "
                                                 f"be those of the distribution that sampled): omit it, or start the proxy with "
                                                 f"--{key.replace('_', '-')} {value} or --ignore-sampling-params",
                                            code="unsupported_sampling", param=key))

    def _stops(self, body: Mapping[str, Any]) -> tuple[str, ...]:
        stop = body.get("stop")
        stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
        if not isinstance(stops, list) or len(stops) > 16 or not all(isinstance(s, str) and s for s in stops):
            raise self._fail(ProxyError(400, "stop must be a non-empty string or a list of at most 16", param="stop"))
        return tuple(stops)

    def _limit(self, body: Mapping[str, Any], prompt_len: int) -> int:
        asked = body.get("max_completion_tokens")
        if asked is None:  # absent or null: a null newer field must not hide the older one
            asked = body.get("max_tokens")
        room = self.policy.max_positions - prompt_len if self.policy.max_positions is not None else None
        if asked is None:
            limit = self.config.max_tokens if room is None else min(self.config.max_tokens, room)
        elif isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
            raise self._fail(ProxyError(400, f"max_tokens must be a positive integer, got {asked!r}", param="max_tokens"))
        elif asked > self.config.max_tokens:
            raise self._fail(ProxyError(400, f"max_tokens={asked} exceeds the proxy's cap of {self.config.max_tokens} "
                                             "(start it with a larger --max-tokens)", code="max_tokens_exceeded", param="max_tokens"))
        else:
            limit = asked
        if room is not None and limit > room or limit < 1:
            raise self._fail(ProxyError(400, f"the prompt has {prompt_len} tokens and the model {self.policy.max_positions} "
                                             f"positions: no room for {max(limit, 1)} new tokens; shorten the conversation or "
                                             "lower max_tokens", code="context_length_exceeded", param="messages"))
        return limit

    def _check_text(self, texts: list[str]) -> None:
        """Refuse, before tokenizing, text no tokenizer takes (a lone surrogate) or text that alone
        needs more tokens than the model has positions: no token spells more than ``_token_bytes``
        bytes, so such a text is surely too long, and tokenizing megabytes on the event loop would
        stall every other client for seconds."""
        try:
            size = sum(len(t.encode()) for t in texts)
        except UnicodeEncodeError:  # valid JSON ("\ud800"), but no tokenizer takes it (a TypeError: 500)
            raise self._fail(ProxyError(400, "the prompt holds a lone UTF-16 surrogate (e.g. \\ud800): send valid Unicode text",
                                        code="invalid_text", param="messages")) from None
        positions = self.policy.max_positions
        if positions is not None and size > positions * self._token_bytes:
            raise self._fail(ProxyError(400, f"the prompt's {size} bytes of text cannot fit the model's {positions} positions; "
                                             "shorten the conversation", code="context_length_exceeded", param="messages"))

    # ------------------------------------------------------------------ threading
    def _thread_chat(self, session: Session | None, messages: list[dict[str, Any]],
                     tools: ToolRequest | None) -> tuple[list[int], list[Any], int, str | None, str | None]:
        """Prompt ids for ``messages``, the reason for a new segment (None: continue / first) and
        how the previous reply came back tidied (None: verbatim; see :func:`~turngym.proxy.capture.tidied`)."""
        self._check_text([t for m in messages for t in (m["content"], m.get("name", ""), m.get("tool_call_id", ""),
                                                        *(c["function"]["name"] + c["function"]["arguments"]
                                                          for c in m.get("tool_calls", ())))]
                         + [json.dumps(tools.tools) if tools is not None else ""])
        last = session.last if session is not None else None
        reason: str | None = None
        if last is not None:
            reason = EDITED
            if last.messages is not None and last.action_ids is not None:
                n = len(last.messages)
                tidy = None
                if len(messages) > n and messages[:n] == last.messages and messages[n].get("role") == "assistant":
                    tidy = tidied(messages[n]["content"], last.text, last.stops)
                recorded = [*last.messages, {"role": "assistant", "content": last.text}]
                if tidy is not None:  # the client kept the reply tidied: render the ids it was sampled as
                    recorded[n] = messages[n]
                if messages[: len(recorded)] == recorded:
                    new = [session.sampled.get(m["content"]) if session and not m.get("tool_calls") else None
                           for m in messages[len(recorded) :] if m["role"] == "assistant"]
                    ids = [*last.action_ids, last.token_ids, *new]
                    r = self._render(messages, ids, tools)
                    seq = last.sequence
                    if r is not None and r.ids[: len(seq)] == seq:
                        if tidy is not None:
                            assert session is not None
                            session.sampled.setdefault(messages[n]["content"], last.token_ids)
                        return r.ids, ids, _reusable(r), None, tidy
                    reason = TEMPLATE  # the template does not reproduce what the model saw: never splice across
        sampled = session.sampled if session is not None else {}
        ids = [None if m.get("tool_calls") else sampled.get(m["content"]) for m in messages if m["role"] == "assistant"]
        r = self._render(messages, ids, tools)
        if r is None:  # a template that rewrites history: the prompt as it renders, a segment of its own
            self.store.counts["template_rewrites"] += 1
            return self._template_ids(messages, tools), [None] * len(ids), 0, TEMPLATE if last is not None else None, None
        return r.ids, ids, _reusable(r), reason, None

    def _render(self, messages: list[dict[str, Any]], ids: list[Any], tools: ToolRequest | None) -> Any:
        """The incremental rendering with sampled ids spliced in; None when the chat template is not
        prefix-stable (it rewrites earlier messages, e.g. strips past reasoning), so no splice exists."""
        from jinja2 import TemplateError

        msgs, schemas = self.tool_template.prepare(messages, tools)
        try:
            return self.renderer.render(msgs, ids, add_generation_prompt=True, tools=schemas)
        except RenderError:
            return None
        except (TemplateError, ValueError, TypeError) as exc:  # the template refuses a prefix (e.g. no user message before it)
            raise self._fail(ProxyError(400, f"the model's chat template refuses these messages: {exc}",
                                        code="render_error", param="messages")) from None

    def _template_ids(self, messages: list[dict[str, Any]], tools: ToolRequest | None) -> list[int]:
        """The prompt exactly as the chat template renders it (text, then tokenized once)."""
        from jinja2 import TemplateError

        msgs, schemas = self.tool_template.prepare(messages, tools)
        try:
            text = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                                      **({"tools": schemas} if schemas else {}))
        except (TemplateError, ValueError, TypeError) as exc:  # what the template's author raises ("roles must alternate")
            raise self._fail(ProxyError(400, f"the model's chat template refuses these messages: {exc}",
                                        code="render_error", param="messages")) from None
        return self.renderer.encode(text)

    def _thread_text(self, session: Session | None, prompt: Any) -> tuple[list[int], str | None, int, str | None]:
        """Prompt ids for a completion request, its text (if text), reusable prefix, new-segment reason."""
        last = session.last if session is not None else None
        text: str | None = None
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            self._check_text([prompt])
            text = prompt
            if last is not None and last.prompt_text is not None and prompt.startswith(last.prompt_text + last.sampled_text):
                rest = prompt[len(last.prompt_text) + len(last.sampled_text) :]
                ids = last.sequence + (self.renderer.encode(rest) if rest else [])
            else:
                ids = list(self.tokenizer(prompt)["input_ids"])
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
            if min(ids) < 0 or max(ids) >= len(self.tokenizer):
                raise self._fail(ProxyError(400, f"prompt token ids must be in [0, {len(self.tokenizer)})", param="prompt"))
        else:
            raise self._fail(ProxyError(400, "prompt must be a string, a list of token ids, or a list holding one of "
                                             "those (one prompt per request)", param="prompt"))
        if not ids:
            raise self._fail(ProxyError(400, "the prompt is empty", param="prompt"))
        if last is None:
            return ids, text, 0, None
        seq = last.sequence
        if ids[: len(seq)] == seq:
            return ids, text, len(seq) - 1, None
        return ids, text, 0, EDITED

    # ------------------------------------------------------------------ endpoints
    async def chat(self, body: Any, episode_header: str | None = None, group: str | None = None, *,
                   key: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
        """Answer a ``/v1/chat/completions`` body; returns the response body and headers.

        ``episode_header``: the ``X-Turngym-Episode`` value (``NAME`` or ``NAME~KEY``); ``group``:
        the ``X-Turngym-Group`` value, the episode's group unless its outcome report names one;
        ``key``: the ``X-Turngym-Episode-Key`` value."""
        return await self._complete(body, episode_header, group, chat=True, key=key)

    async def completion(self, body: Any, episode_header: str | None = None, group: str | None = None, *,
                         key: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
        """Answer a ``/v1/completions`` body (a text or token-id prompt, no chat template)."""
        return await self._complete(body, episode_header, group, chat=False, key=key)

    async def _complete(self, body: Any, header: str | None, group: str | None, *, chat: bool,
                        key: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
        t0 = time.perf_counter()
        self.store.counts["requests"] += 1
        if t0 - self._reaped > 1.0:  # the app's reaper covers idle servers; this, busy ones
            self._reaped = t0
            self.reap()
        self._check(body)
        if not chat and body.get("stream"):
            raise self._fail(ProxyError(400, "stream is supported on /v1/chat/completions only", code="unsupported_parameter",
                                        param="stream"))
        stops = asked_stops = self._stops(body)
        want_lps = bool(body.get("logprobs")) if chat else body.get("logprobs") is not None
        if not chat and body.get("logprobs") not in (None, 0):
            raise self._fail(ProxyError(400, "logprobs must be 0 or null (each sampled token's log-prob; top alternatives "
                                             "are not supported)", code="unsupported_parameter", param="logprobs"))
        messages = normalize_messages(body.get("messages"), self.config.max_messages) if chat else None
        tools = self._tool_request(body) if chat else None
        if tools is not None and tools.active and not tools.parallel and self.tool_parser.stop:
            stops = (*stops, self.tool_parser.stop)  # one call, then stop: what parallel_tool_calls=false asks
        forced = self.renderer.encode(self.tool_parser.forced_prefix(tools.name)) if tools is not None and tools.forced else []
        ref = self._episode_id(body, header, key)
        eid, key = ref.name, ref.key or mint_key()  # no key: the first request is given one, later ones must send it
        async with self._lock(eid):
            session = self._open(ref)
            if session is not None:
                session.last_seen = time.monotonic()  # in flight: not idle, not to be reaped meanwhile
            else:
                self._opening.add(eid)
            try:
                if chat:
                    assert messages is not None
                    if session is not None and session.issued:  # the proxy's own calls, as the client sends them back
                        messages, hits = recognize_calls(messages, session.issued)
                        self.store.counts["tool_history_recognized"] += hits
                    prompt, action_ids, reusable, reason, tidy = self._thread_chat(session, messages, tools)
                    prompt_text = None
                else:
                    prompt, prompt_text, reusable, reason = self._thread_text(session, body.get("prompt"))
                    action_ids, tidy = None, None
                limit = self._limit(body, len(prompt))
                gen_t0 = time.perf_counter()
                try:
                    gen = await self._batcher.submit(prompt, stops, reusable, limit, forced)
                except Exception as exc:
                    if session is not None:
                        session.infra_error = f"{type(exc).__name__}: {exc}"
                    raise self._fail(ProxyError(500, f"the model failed to generate ({type(exc).__name__}: {exc}); the episode "
                                                     "is marked as an infrastructure error", code="generation_failed")) from exc
                gen_s = time.perf_counter() - gen_t0
                text = gen.text
                if gen.finish_reason == "stop" and gen.stop and gen.stop in text and gen.stop in asked_stops:
                    text = text[: text.index(gen.stop)]  # OpenAI returns the text before the stop string
                elif gen.finish_reason == "stop" and gen.stop and gen.stop in text:  # the proxy's one-call stop: kept
                    text = text[: text.index(gen.stop) + len(gen.stop)]
                reply, counted = parse_reply(self.tool_parser, text, tools)
                if counted:
                    self.store.counts[counted] += len(reply.calls) if reply is not None and reply.calls else 1
                why = self.store.closed_reason(eid)
                if why is not None:  # reaped while sampling (a generation longer than the outcome timeout)
                    raise self._fail(ProxyError(409, f"episode {eid!r} was {why} while this request was sampled; start a new "
                                                     "episode (or raise --outcome-timeout)", code="episode_closed"))
                session = self.store.session(eid)
                session.owner = session.owner or key_digest(key)
                session.last_seen = time.monotonic()
                if group and not session.group:
                    session.group = group[:256]
                turn = CapturedTurn(
                    index=session.turns, prompt_ids=list(prompt), token_ids=list(gen.token_ids), logprobs=list(gen.logprobs),
                    text=text, sampled_text=gen.text, finish_reason=gen.finish_reason, messages=messages, action_ids=action_ids,
                    prompt_text=prompt_text, stops=stops, tidied=tidy,
                )
                if tidy is not None:
                    self.store.normalizations[tidy] += 1
                had = len(session.segments)
                seg = session.record(turn, reason)
                if reply is not None and reply.calls:
                    ids_of_turn = frozenset(c.id for c in reply.calls)
                    session.issued.update((c.id, (turn.text, ids_of_turn)) for c in reply.calls)
                if reason is not None and had:
                    self.store.branches[reason] += 1
            finally:
                self._opening.discard(eid)
        counts = self.store.counts
        counts["completions"] += 1
        counts["prompt_tokens"] += len(prompt)
        counts["completion_tokens"] += len(turn.token_ids)
        headers = {EPISODE_HEADER: eid, KEY_HEADER: key, "X-Turngym-Turn": str(turn.index), "X-Turngym-Segment": str(seg.index)}
        if reason is not None and had:
            headers["X-Turngym-Branched"] = reason
        if tidy is not None:
            headers["X-Turngym-Tidied"] = tidy
        response = self._response(turn, chat=chat, want_logprobs=want_lps, return_ids=bool(body.get("return_token_ids")),
                                  reply=reply)
        response["turngym"] = {"episode_id": eid, "episode_key": key, "turn": turn.index, "segment": seg.index,
                               "branched": reason if reason is not None and had else None, "tidied": tidy}
        self.request_s += (time.perf_counter() - t0) - gen_s
        return response, headers

    def _tool_request(self, body: Mapping[str, Any]) -> ToolRequest | None:
        try:
            return parse_tool_request(body)
        except ValueError as exc:
            raise self._fail(ProxyError(400, str(exc), code="invalid_tools", param="tools")) from None

    def _response(self, turn: CapturedTurn, *, chat: bool, want_logprobs: bool, return_ids: bool,
                  reply: ParsedReply | None = None) -> dict[str, Any]:
        finish = "length" if turn.finish_reason == "length" else "stop"
        calls = reply.calls if reply is not None else ()
        if calls:
            finish = "tool_calls"
        usage = {"prompt_tokens": len(turn.prompt_ids), "completion_tokens": len(turn.token_ids),
                 "total_tokens": len(turn.prompt_ids) + len(turn.token_ids)}
        pieces = [self.tokenizer.decode([t]) for t in turn.token_ids] if want_logprobs else []
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": reply.content if calls else turn.text}
            if calls:
                choice["message"]["tool_calls"] = [c.to_openai() for c in calls]
            if want_logprobs:
                choice["logprobs"] = {"content": [{"token": p, "logprob": lp, "bytes": list(p.encode()), "top_logprobs": []}
                                                  for p, lp in zip(pieces, turn.logprobs, strict=True)]}
        else:
            choice["text"] = turn.text
            if want_logprobs:
                offsets, at = [], 0
                for p in pieces:
                    offsets.append(at)
                    at += len(p)
                choice["logprobs"] = {"tokens": pieces, "token_logprobs": list(turn.logprobs), "top_logprobs": None,
                                      "text_offset": offsets}
        if return_ids:
            choice["token_ids"] = list(turn.token_ids)
        out: dict[str, Any] = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.config.model_name,
            "choices": [choice],
            "usage": usage,
        }
        if return_ids:
            out["prompt_token_ids"] = list(turn.prompt_ids)
        return out

    async def outcome(self, episode_id: str, body: Any, *, key: str | None = None) -> dict[str, Any]:
        """Record ``episode_id``'s outcome (see :class:`~turngym.proxy.capture.OutcomeReport`); its
        episodes are finished and written out.

        ``episode_id`` is ``NAME`` or ``NAME~KEY`` (``key``: the ``X-Turngym-Episode-Key`` value):
        only the client that opened the episode may report it (403). Everything is checked before
        anything changes, and the records are appended to ``episodes.jsonl`` before the episode is
        closed: a refused or failed report leaves it open, to be reported again."""
        ref = self._ref(episode_id, key)
        async with self._lock(ref.name):
            session = self.store.get(ref.name)
            if session is None:
                why = self.store.closed_reason(ref.name)
                if why is not None:
                    raise self._fail(ProxyError(409, f"episode {ref.name!r} is {why}", code="episode_closed"))
                raise self._fail(ProxyError(404, f"no episode {ref.name!r}: it made no request (or every request failed)",
                                            code="unknown_episode"))
            self._owned(session, ref)
            try:
                check_json(body, max_depth=self.config.max_json_depth, where="the outcome")
                report = parse_outcome(body, session.turns, reward_range=self.config.reward_range)
                check_size(report.info, self.config.max_info_bytes, "info")
                check_size(body, self.config.max_info_bytes + _TURN_REPORT_BYTES * (session.turns + 1), "outcome")
            except Refused as exc:
                raise self._fail(ProxyError(exc.status, str(exc), code=exc.code, param=exc.param)) from None
            except ValueError as exc:
                raise self._fail(ProxyError(400, str(exc), code="bad_outcome")) from None
            meta = dict(self.meta)
            if session.infra_error:
                meta["infra_error"] = session.infra_error
            episodes = to_episodes(session, report, meta)
            try:
                self.finished.commit(episodes)  # written before it is acknowledged, and before the episode closes
            except OSError as exc:
                raise self._fail(ProxyError(500, f"could not write the episode ({type(exc).__name__}: {exc}); it stays open: "
                                                 "report its outcome again", code="write_failed")) from None
            self.store.close(ref.name, "finished")
        if session.infra_error:
            self.store.dropped["infra_error"] += 1
        self.store.counts["episodes_finished"] += len(episodes)
        return {"episode_id": ref.name, "episodes": [ep.episode_id for ep in episodes], "turns": session.turns}

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.config.model_name, "object": "model", "created": 0, "owned_by": "turngym"}]}


_TURN_REPORT_BYTES = 4096
"""What one turn's report (reward, signals, state key) may add to an outcome's size, besides ``info``."""


def _reusable(rendered: Any) -> int:
    """Prefix of the prompt the policy's KV cache may hold (the previous turn's sequence, less
    its last sampled id, which was never fed back) — as :meth:`HFPolicy.act` computes it."""
    return rendered.spans[-1][1] - 1 if rendered.spans and rendered.generated[-1] else 0

