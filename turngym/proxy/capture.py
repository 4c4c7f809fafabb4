"""Requests → episodes: threading a client's calls into token-exact turngym episodes.

A client names its episode (``X-Turngym-Episode``); every completion it asks for becomes one
turn recorded with the exact prompt ids the model was conditioned on, the ids it sampled and
their log-probs. A request *continues* the episode when its prompt extends, token for token,
the previous turn's ``prompt_ids + token_ids``; for chat requests that means its messages
repeat the recorded ones, then the assistant reply exactly as it was returned, then anything
new. The earlier assistant turns are then rendered from the ids that were sampled for them
(:class:`~turngym.agents.render.ChatRenderer` splices them in), never re-tokenized from text.

Clients that tidy replies: many agents keep the reply they got in a slightly different form —
stripped of leading/trailing whitespace, or with the stop string the API cut off appended back
(smolagents' ``CodeAgent`` appends ``</code>`` and ``.strip()``s). A history whose only change
to the previous reply is that (:func:`tidied`) still continues the episode: the reply is
rendered from the ids that were sampled, as for a verbatim one, and the tidying is counted
(``normalizations`` in the stats, ``meta["tidied"]`` on the episode). Any other edit branches.

When a request does not continue its episode — the agent edited, summarized or truncated its
history, changed an assistant reply, or the chat template does not reproduce the recorded
prompt — the session starts a new **segment**: a separate episode (``{id}#1``, ``{id}#2``…)
whose first prompt is whatever this request renders to. Nothing is ever spliced across a break,
so each segment is one consistent token sequence; the break is counted (``branches`` in the
stats, by reason) and announced to the client (``X-Turngym-Branched``). Every segment of a
session receives the session's outcome when it is reported: each is a part of the attempt that
earned it (``meta["segment"]``, ``meta["segments"]`` say which).

A session with no outcome reported within ``outcome_timeout_s`` of its last request is dropped
and counted, never scored: an unreported outcome is not a reward of 0.

Nothing here imports torch or an HTTP framework; :mod:`turngym.proxy.service` drives it.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turngym.agents.render import RECORDED
from turngym.rollout.types import DEFAULT_REWARD_RANGE, Episode, Turn

__all__ = ["CapturedTurn", "OutcomeReport", "Segment", "Session", "SessionStore", "parse_outcome", "tidied"]

#: Why a segment began: the session's first request, or a request that did not continue it.
START, EDITED, TEMPLATE = "start", "history_edited", "template_mismatch"


@dataclass
class CapturedTurn:
    """One completion as it was sampled.

    Attributes:
        index: the turn's index in its session (per-turn reports address it).
        prompt_ids: the prompt the model was conditioned on.
        token_ids: the sampled ids, verbatim (a stop string's tokens and the end token included).
        logprobs: the sampling log-prob of each id.
        text: the text returned to the client (cut before a stop string, as OpenAI does).
        sampled_text: ``decode(token_ids)``, what was sampled (with the stop string).
        finish_reason: ``eos``, ``stop`` or ``length``.
        messages: chat requests: the request's messages (normalized); None for completions.
        action_ids: chat requests: the ids rendered for each assistant message of ``messages``.
        prompt_text: completion requests: the prompt text (None when it came as token ids).
        stops: the request's stop strings (a client may append one to the reply it keeps).
        tidied: how the request tidied the previous turn's reply before sending it back
            (``whitespace``, ``stop_appended``, ``stop_appended+whitespace``; see :func:`tidied`),
            None when it came back verbatim (or this turn continues nothing).
    """

    index: int
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    sampled_text: str
    finish_reason: str
    messages: list[dict[str, str]] | None = None
    action_ids: list[list[int] | None] | None = None
    prompt_text: str | None = None
    stops: tuple[str, ...] = ()
    tidied: str | None = None

    @property
    def sequence(self) -> list[int]:
        """What a continuing request's prompt must start with."""
        return self.prompt_ids + self.token_ids


@dataclass
class Segment:
    """A run of turns that form one token sequence: one captured :class:`Episode`."""

    index: int
    reason: str
    turns: list[CapturedTurn] = field(default_factory=list)


@dataclass
class Session:
    """Everything recorded under one episode id, until its outcome is reported (or it times out)."""

    episode_id: str
    created: float
    last_seen: float
    segments: list[Segment] = field(default_factory=list)
    group: str = ""
    infra_error: str | None = None
    turns: int = 0
    owner: str = ""
    """SHA-256 of the key the episode was opened with: later requests and the outcome must carry it."""
    sampled: dict[str, list[int]] = field(default_factory=dict)
    """Returned text → the ids sampled for it (latest wins): lets a new segment still render the
    agent's earlier replies from their sampled ids instead of re-tokenizing them."""
    issued: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    """Tool call id the proxy returned → (the sampled text of its turn, every id that turn returned):
    a later history carrying those ids is that turn (:func:`turngym.proxy.tools.recognize_calls`)."""

    @property
    def last(self) -> CapturedTurn | None:
        return self.segments[-1].turns[-1] if self.segments and self.segments[-1].turns else None

    def record(self, turn: CapturedTurn, reason: str | None) -> Segment:
        """Append ``turn``: to the current segment, or (``reason`` given) to a new one."""
        if reason is not None or not self.segments:
            self.segments.append(Segment(len(self.segments), reason or START))
        seg = self.segments[-1]
        seg.turns.append(turn)
        self.turns += 1
        if turn.messages is not None:
            self.sampled[turn.text] = turn.token_ids
        return seg


@dataclass
class OutcomeReport:
    """What the client reports when an episode ends (``POST /turngym/episodes/{id}/outcome``).

    Attributes:
        reward: the outcome reward; it lands on the episode's last turn, as an env's final step
            reward does. The episode's return is it plus the per-turn rewards.
        success: whether the task was solved (default: ``reward > 0``).
        env_id, task_id, group, seed: name the task. ``group`` puts episodes of one task in one
            GRPO/GiGPO group (default: the episode's own id, a group of one).
        truncated: the episode ran out of budget rather than ending (default False).
        turns: optional, one entry per recorded turn in order: ``reward`` (added to the turn),
            ``signals`` (``{name: value}``), ``state_key`` (the env state after the turn, for
            GiGPO's anchor groups), ``action_valid``, ``invalid_reason``.
        info: anything else, kept in the episode's ``outcome``.
    """

    reward: float
    success: bool
    env_id: str = "proxy"
    task_id: str = ""
    group: str = ""
    seed: int | None = None
    truncated: bool = False
    turns: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


_TURN_KEYS = {"reward", "signals", "state_key", "action_valid", "invalid_reason"}
_OUTCOME_KEYS = {"reward", "success", "env_id", "task_id", "group", "seed", "truncated", "turns", "info"}


def parse_outcome(body: Any, n_turns: int, *, reward_range: tuple[float, float] = DEFAULT_REWARD_RANGE) -> OutcomeReport:
    """Validate a client's outcome report; raises ``ValueError`` saying what is wrong.

    ``reward_range``: the outcome reward, each turn's reward and each signal must lie within it."""
    if not isinstance(body, Mapping):
        raise ValueError('the outcome must be a JSON object such as {"reward": 1.0, "success": true}')
    unknown = sorted(set(body) - _OUTCOME_KEYS)
    if unknown:
        raise ValueError(f"unknown outcome field(s) {unknown}; known: {sorted(_OUTCOME_KEYS)}")
    reward = _number(body.get("reward"), "reward", reward_range)
    success = body.get("success", reward > 0)
    if not isinstance(success, bool):
        raise ValueError(f"success must be true or false, got {success!r}")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ValueError(f"seed must be an integer or null, got {seed!r}")
    for name in ("env_id", "task_id", "group"):
        if not isinstance(body.get(name, ""), str):
            raise ValueError(f"{name} must be a string")
    turns = body.get("turns") or []
    if not isinstance(turns, list) or len(turns) not in (0, n_turns):
        raise ValueError(f"turns must list one entry per recorded turn ({n_turns}), got {len(turns) if isinstance(turns, list) else turns!r}")
    for k, t in enumerate(turns):
        if not isinstance(t, Mapping) or set(t) - _TURN_KEYS:
            raise ValueError(f"turns[{k}] must be an object with keys among {sorted(_TURN_KEYS)}")
        if "reward" in t:
            _number(t["reward"], f"turns[{k}].reward", reward_range)
        signals = t.get("signals", {})
        if not isinstance(signals, Mapping):
            raise ValueError(f"turns[{k}].signals must be an object of numbers")
        for name, value in signals.items():
            _number(value, f"turns[{k}].signals[{name!r}]", reward_range)
    info = body.get("info") or {}
    if not isinstance(info, Mapping):
        raise ValueError("info must be an object")
    return OutcomeReport(
        reward=reward, success=success, env_id=body.get("env_id") or "proxy", task_id=body.get("task_id", ""),
        group=body.get("group", ""), seed=seed, truncated=bool(body.get("truncated", False)), turns=list(turns), info=dict(info),
    )


def _is_trim(body: str, text: str) -> bool:
    """Whether ``body`` is ``text`` less some of its leading and/or trailing whitespace."""
    if body.strip() != text.strip():
        return False
    lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
    if not text.strip():  # an all-whitespace reply: any run of it (or nothing) is a trim
        return body in text
    return lead.endswith(body[: len(body) - len(body.lstrip())]) and trail.startswith(body[len(body.rstrip()) :])


def tidied(sent: str, text: str, stops: Sequence[str]) -> str | None:
    r"""How ``sent`` (an assistant message a client sent back) tidies ``text`` (the reply it was
    given), or None when it is not a tidying of it (or is ``text`` itself).

    A tidying is leading/trailing whitespace stripped (``whitespace``), one of the request's
    ``stops`` appended (``stop_appended``; the API cut it off, clients put it back), or both
    (``stop_appended+whitespace``; the stop itself may be stripped too, as in
    ``(text + "</code>").strip()``). The model then saw its sampled ids, which hold the stop
    string when it stopped on one, so nothing the client believes the model said is lost.

    >>> tidied("x = 1\n</code>", "\nx = 1\n", ["</code>"])
    'stop_appended+whitespace'
    >>> tidied("x = 2", "x = 1", [])
    """
    if sent == text:
        return None
    if _is_trim(sent, text):
        return "whitespace"
    for stop in stops:
        for form in dict.fromkeys((stop, stop.rstrip(), stop.strip())):
            if form and sent.endswith(form):
                body = sent[: -len(form)]
                if body == text and form == stop:
                    return "stop_appended"
                if _is_trim(body, text):
                    return "stop_appended+whitespace"
    return None


def _number(value: Any, name: str, bounds: tuple[float, float] = DEFAULT_REWARD_RANGE) -> float:
    """A reward or signal a report may carry: finite, and within ``bounds``, so that a group's mean and
    standard deviation stay meaningful (one 1e308 zeroed its whole group's advantage)."""
    try:
        x = float(value) if not isinstance(value, bool) and isinstance(value, (int, float)) else math.nan
    except OverflowError:  # an integer past float's range (10**400)
        x = math.inf
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {str(value)[:40]}")
    if not bounds[0] <= x <= bounds[1]:
        raise ValueError(f"{name}={x:g} is outside the proxy's reward range [{bounds[0]:g}, {bounds[1]:g}] "
                         "(scale your rewards, or start the proxy with a wider --reward-range)")
    return x


def _digest(ids: Sequence[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def _describe(messages: Sequence[Mapping[str, str]]) -> str:
    """Messages as observation text for viewers (one message: its content; several: role-tagged)."""
    if len(messages) == 1:
        return messages[0].get("content", "")
    return "\n".join(f"[{m.get('role', '')}] {m.get('content', '')}" for m in messages)


def to_episodes(session: Session, report: OutcomeReport, meta: Mapping[str, Any]) -> list[Episode]:
    """The session's segments as turngym episodes carrying the reported outcome.

    Observations are display text (the messages the agent added between two turns); training
    renders from the recorded ids (``meta["rendering"] = "recorded"``). State keys: the reported
    ones, else a unique key per turn, so no two turns are wrongly taken for the same state; the
    state before the first turn is the hash of the first prompt, shared by episodes of a group
    that start from the same prompt (GiGPO's first anchor group).
    """
    episodes = []
    n = len(session.segments)
    group = report.group or session.group or session.episode_id
    for seg in session.segments:
        eid = session.episode_id if seg.index == 0 else f"{session.episode_id}#{seg.index}"
        first = seg.turns[0]
        system, initial = "", ""
        if first.messages is not None:
            msgs = first.messages
            if msgs and msgs[0]["role"] == "system":
                system, msgs = msgs[0]["content"], msgs[1:]
            initial = _describe(msgs)
        else:
            initial = first.prompt_text or ""
        ep = Episode(
            episode_id=eid, env_id=report.env_id, task_id=report.task_id, seed=report.seed, initial_observation=initial,
            system_prompt=system, group=group,
            meta={**meta, "rendering": RECORDED, "segment": seg.index, "segments": n, "segment_reason": seg.reason,
                  "session": session.episode_id},
        )
        tidy = {str(j - 1): ct.tidied for j, ct in enumerate(seg.turns) if j and ct.tidied}
        if tidy:  # turn j's reply came back tidied in turn j+1's request (rendered from its sampled ids)
            ep.meta["tidied"] = tidy
        prev_key = "prompt:" + _digest(first.prompt_ids)
        for j, ct in enumerate(seg.turns):
            nxt = seg.turns[j + 1] if j + 1 < len(seg.turns) else None
            rep = report.turns[ct.index] if report.turns else {}
            if nxt is not None and nxt.messages is not None and ct.messages is not None:
                observation = _describe(nxt.messages[len(ct.messages) + 1 :])
            else:
                observation = ""
            last = nxt is None
            reward = float(rep.get("reward", 0.0)) + (report.reward if last else 0.0)
            key = str(rep.get("state_key") or f"{eid}/{j}")
            ep.turns.append(Turn(
                index=j, action=ct.text, observation=observation, reward=reward,
                terminated=last and not report.truncated, truncated=last and report.truncated,
                signals={k: float(v) for k, v in (rep.get("signals") or {}).items()}, state_key=key, prev_state_key=prev_key,
                action_valid=bool(rep.get("action_valid", True)), invalid_reason=rep.get("invalid_reason"),
                token_ids=list(ct.token_ids), logprobs=list(ct.logprobs), prompt_ids=list(ct.prompt_ids), node=j, parent=j - 1,
            ))
            prev_key = key
        ep.outcome = {**report.info, "reward": report.reward, "success": report.success}  # info never overrides the checked fields
        episodes.append(ep)
    return episodes


class SessionStore:
    """Open sessions, ids already used, and the counters the stats report.

    Args:
        outcome_timeout_s: a session whose last request is older than this without an outcome
            is dropped (counted under ``dropped["no_outcome"]``).
        max_open: sessions open at once; a request that would open one more is refused.
        remember_closed: finished or dropped ids remembered, so a late request or a second
            outcome for them is refused instead of silently starting a new episode.
    """

    def __init__(self, *, outcome_timeout_s: float = 600.0, max_open: int = 10_000, remember_closed: int = 100_000) -> None:
        self.outcome_timeout_s = float(outcome_timeout_s)
        self.max_open = int(max_open)
        self.open: dict[str, Session] = {}
        self.closed: OrderedDict[str, str] = OrderedDict()  # id -> "finished" | "dropped: why"
        self._remember = remember_closed
        self.counts: Counter[str] = Counter()
        self.branches: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.normalizations: Counter[str] = Counter()
        """Replies a client sent back tidied (:func:`tidied`) that still continued their episode, by kind."""

    def get(self, episode_id: str) -> Session | None:
        return self.open.get(episode_id)

    def closed_reason(self, episode_id: str) -> str | None:
        return self.closed.get(episode_id)

    def can_open(self, pending: int = 0) -> bool:
        """Whether one more session fits, ``pending`` more being opened already."""
        return len(self.open) + pending < self.max_open

    def session(self, episode_id: str, now: float | None = None) -> Session:
        now = time.monotonic() if now is None else now
        s = self.open.get(episode_id)
        if s is None:
            s = self.open[episode_id] = Session(episode_id, now, now)
        return s

    def close(self, episode_id: str, why: str) -> Session | None:
        s = self.open.pop(episode_id, None)
        self.closed[episode_id] = why
        while len(self.closed) > self._remember:
            self.closed.popitem(last=False)
        return s

    def expired(self, now: float | None = None) -> list[Session]:
        """Drop the sessions whose outcome never came; returns them."""
        now = time.monotonic() if now is None else now
        stale = [s for s in self.open.values() if now - s.last_seen > self.outcome_timeout_s]
        for s in stale:
            self.close(s.episode_id, "dropped: no outcome reported")
            self.dropped["no_outcome"] += 1
        return stale

    def stats(self) -> dict[str, Any]:
        return {
            **dict(self.counts),
            "episodes_open": len(self.open),
            "branches": dict(self.branches),
            "dropped": dict(self.dropped),
            "errors": dict(self.errors),
            "normalizations": dict(self.normalizations),
        }
