"""What a request to the capture proxy may say: its headers, its errors, the proxy's settings, and
chat messages normalized before anything is sampled or recorded (split from
:mod:`turngym.proxy.service`, which answers them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turngym.core.errors import TurngymError
from turngym.proxy.tool_parsers import TOOL_PARSERS
from turngym.rollout.types import DEFAULT_REWARD_RANGE

__all__ = ["EPISODE_HEADER", "GROUP_HEADER", "ProxyConfig", "ProxyError", "model_fingerprint", "normalize_messages",
           "tokenizer_fingerprint"]

EPISODE_HEADER = "X-Turngym-Episode"
"""The request header naming the episode a request belongs to (or the body's ``user`` field)."""
GROUP_HEADER = "X-Turngym-Group"
"""Optional request header naming the episode's group (episodes of one task: GRPO/GiGPO groups)."""


class ProxyError(TurngymError):
    """A request the proxy refuses; ``status`` and ``code`` become the OpenAI-shaped error."""

    def __init__(self, status: int, message: str, *, code: str = "invalid_request", param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.param = status, code, param

    def body(self) -> dict[str, Any]:
        kind = {403: "permission_error", 404: "not_found_error", 409: "conflict_error", 429: "rate_limit_error"}.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error"
        )
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}}


@dataclass
class ProxyConfig:
    """How the proxy serves and records.

    Attributes:
        model_name: the model name clients must ask for (``GET /v1/models`` lists it).
        max_tokens: the most tokens one completion may ask for, and the default when a request
            names none (then also bounded by the room left in the model's context).
        outcome_timeout_s: an episode without an outcome this long after its last request is
            dropped (counted, never scored).
        max_open_episodes: episodes open at once; a request opening one more gets 429.
        max_batch_size: requests sampled in one ``generate`` call.
        max_messages: messages in one chat request.
        ignore_sampling_params: accept (and ignore, counting them) a request's temperature and
            top-p when they differ from the policy's, instead of refusing it. The recorded
            log-probs are always those of the distribution the proxy sampled from.
        keep_finished: finished episodes kept in memory (``GET /turngym/episodes``: the latest).
        keep_finished_bytes: and at most this much of their JSON (the oldest go first; the file keeps all).
        out: directory for ``episodes.jsonl`` (each finished episode, appended before its outcome is acknowledged).
        tool_call_parser: how replies are parsed into tool calls (a :data:`TOOL_PARSERS` name);
            None picks it from the chat template (:func:`~turngym.proxy.tool_parsers.detect_parser`).
        max_body_bytes: a request body past this is refused (413).
        max_json_depth: a body nesting deeper is refused (400): tool schemas need ~20 levels.
        max_info_bytes: an outcome's ``info`` past this, as JSON, is refused (400): it is kept with
            every segment of the episode, in memory and on disk.
        reward_range: ``(low, high)``: the outcome reward, each turn's reward and each signal must
            lie within it (finite always): one reward of 1e308 zeroes its whole group's advantage.
    """

    model_name: str = "tiny"
    max_tokens: int = 256
    outcome_timeout_s: float = 600.0
    max_open_episodes: int = 10_000
    max_batch_size: int = 64
    max_messages: int = 1024
    ignore_sampling_params: bool = False
    keep_finished: int = 10_000
    keep_finished_bytes: int = 64 << 20
    out: Path | None = None
    tool_call_parser: str | None = None
    max_body_bytes: int = 16 << 20
    max_json_depth: int = 64
    max_info_bytes: int = 64 << 10
    reward_range: tuple[float, float] = DEFAULT_REWARD_RANGE

    def __post_init__(self) -> None:
        from turngym.core.errors import ConfigError

        if self.tool_call_parser is not None and self.tool_call_parser not in TOOL_PARSERS:
            raise ConfigError(f"unknown tool call parser {self.tool_call_parser!r}; known: {sorted(TOOL_PARSERS)}")
        if self.max_tokens < 1 or self.outcome_timeout_s <= 0 or self.max_open_episodes < 1 or self.max_batch_size < 1:
            raise ConfigError("need max_tokens >= 1, outcome_timeout_s > 0, max_open_episodes >= 1 and max_batch_size >= 1")
        low, high = (float(x) for x in self.reward_range)
        if not (-float("inf") < low < high < float("inf")):
            raise ConfigError(f"reward_range must be two finite numbers, low < high; got {self.reward_range!r}")
        self.reward_range = (low, high)
        if min(self.max_body_bytes, self.max_json_depth, self.max_info_bytes, self.keep_finished_bytes) < 1:
            raise ConfigError("max_body_bytes, max_json_depth, max_info_bytes and keep_finished_bytes must be >= 1")


def model_fingerprint(model: Any) -> str | None:
    """A short hash of a model's architecture (type and sizes; not its weights): a trainer refuses
    captured episodes sampled by another architecture (e.g. another tiny-model variant)."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    keys = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "intermediate_size", "max_position_embeddings")
    return hashlib.sha256(repr([getattr(config, k, None) for k in keys]).encode()).hexdigest()[:16]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of what decides token ids (vocabulary size, special tokens, chat template):
    a trainer refuses captured episodes whose fingerprint is not its tokenizer's."""
    parts = [str(len(tokenizer)), str(tokenizer.eos_token_id), str(tokenizer.bos_token_id), str(getattr(tokenizer, "chat_template", ""))]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def _text_of(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ProxyError(400, f"{where}: only text content parts are supported", param="messages")
            parts.append(part["text"])
        return "".join(parts)
    raise ProxyError(400, f"{where}: content must be a string or a list of text parts", param="messages")


def _calls_of(raw: Any, where: str) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls``, normalized (arguments as a JSON string)."""
    if not isinstance(raw, list) or len(raw) > 128:
        raise ProxyError(400, f"{where}.tool_calls must be a list of at most 128 calls", param="messages")
    out = []
    for c in raw:
        fn = c.get("function") if isinstance(c, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not isinstance(c.get("id"), str):
            raise ProxyError(400, f'{where}.tool_calls: each call must be {{"id": ..., "type": "function", "function": '
                                  '{"name": ..., "arguments": "..."}}', param="messages")
        args = fn.get("arguments", "{}")
        out.append({"id": c["id"], "type": "function",
                    "function": {"name": fn["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return out


def normalize_messages(raw: Any, limit: int) -> list[dict[str, Any]]:
    """The request's messages as ``{"role", "content"}`` (what chat templates read), plus an
    assistant's ``tool_calls`` and a tool message's ``tool_call_id``."""
    if not isinstance(raw, list) or not raw:
        raise ProxyError(400, "messages must be a non-empty list of {role, content} objects", param="messages")
    if len(raw) > limit:
        raise ProxyError(400, f"{len(raw)} messages exceed the proxy's limit of {limit}", param="messages")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ProxyError(400, f"messages[{i}] must be an object with a string role", param="messages")
        if m.get("function_call"):
            raise ProxyError(400, f"messages[{i}] carries a legacy function_call: send tool_calls", param="messages")
        msg: dict[str, Any] = {"role": m["role"], "content": _text_of(m.get("content"), f"messages[{i}]")}
        if isinstance(m.get("name"), str):
            msg["name"] = m["name"]
        if m.get("tool_calls"):
            msg["tool_calls"] = _calls_of(m["tool_calls"], f"messages[{i}]")
        if isinstance(m.get("tool_call_id"), str):
            msg["tool_call_id"] = m["tool_call_id"]
        out.append(msg)
    return out


_REFUSED = {
    "functions": "legacy function calling is not supported: send tools (and tool_choice)",
    "logit_bias": "logit_bias changes the sampling distribution, so the recorded log-probs would not be the policy's",
    "top_logprobs": "top_logprobs is not supported (logprobs=true returns each sampled token's log-prob)",
    "echo": "echo is not supported",
    "suffix": "suffix (insertion) is not supported",
    "best_of": "best_of is not supported",
}
