"""What the proxy checks at the door: episode ids and their keys, and the shape of every JSON body.

Many clients share one proxy (and usually one bearer token: it is what every OpenAI client sends as
its ``api_key``), so the bearer token says *who may use the proxy*, not *which episode is yours*.
An attack round showed why that matters: any client could add turns to, or report the outcome of,
another client's episode, so its text became the victim's segment and took the victim's reward.

**Episode keys.** An episode belongs to the client that opened it. A request names its episode by
a *reference*: ``NAME`` or ``NAME~KEY``, in the ``X-Turngym-Episode`` header or the body's ``user``
field, with the key alternatively in the ``X-Turngym-Episode-Key`` header. The first request to
``NAME`` claims it with the key it carries, or, carrying none, receives a fresh one (the response's
``X-Turngym-Episode-Key`` header and ``turngym.episode_key`` field). Every later request and the
outcome report must carry the same key; anything else is refused (403) before it touches the
episode. Only ``NAME`` is recorded (episode ids, listings, files); the key never leaves the proxy's
memory, which keeps only its SHA-256.

Why a client may choose its key: agent frameworks (smolagents, openai-agents) set request headers
or the ``user`` field once per run and never read response headers, so a key handed out by the
proxy would never reach their second request. A client that names its episode ``NAME~KEY`` with an
unguessable ``KEY`` owns it from its first request, with nothing to read back. ``KEY`` is at least
16 characters of ``[A-Za-z0-9_-]`` (``secrets.token_urlsafe(16)`` is one).
:func:`turngym.proxy.client.episode_headers` and :func:`~turngym.proxy.client.report_outcome` send
a key derived from a per-process secret (HMAC of the name), so code using them carries it without
change; processes that share ``TURNGYM_EPISODE_SECRET`` derive the same keys (a grader reporting
outcomes from another process).

**Names** are 1-200 characters of ``[A-Za-z0-9._:/@+=-]`` starting with a letter or digit: ``#``
is reserved for segment ids (``NAME#1``), ``~`` separates the key, and ASCII keeps every id a valid
HTTP header value (a non-Latin-1 id used to fail *after* sampling, as the response header was built).

**Bodies** are parsed strictly: at most ``max_depth`` levels of nesting (a 100k-deep array was a
``RecursionError``, a 500), no ``NaN``/``Infinity`` (not JSON; they poison rewards and readers), and
every string, keys included, encodable as UTF-8 (a lone surrogate such as ``"\\ud800"`` is valid
JSON text but cannot be written to ``episodes.jsonl``: it used to fail *after* the episode was
closed, losing it). Every check runs before anything is mutated.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Mapping
from typing import Any, NamedTuple

from turngym.agents.openai_http import PROXY_NAME_CHARS, PROXY_NAME_MAX

__all__ = [
    "KEY_HEADER", "KEY_SEP", "EpisodeRef", "Refused", "check_json", "check_size", "derive_key", "key_digest",
    "key_matches", "loads", "mint_key", "parse_ref",
]

KEY_HEADER = "X-Turngym-Episode-Key"
"""Request header carrying an episode's key; the response of the first request names it too."""
KEY_SEP = "~"
"""Separates an episode's name from its key in a reference (``NAME~KEY``)."""

_NAME = re.compile(f"[A-Za-z0-9][{PROXY_NAME_CHARS}]{{0,{PROXY_NAME_MAX - 1}}}")
_KEY = re.compile(r"[A-Za-z0-9_-]{16,128}")
_SECRET_ENV = "TURNGYM_EPISODE_SECRET"
_PROCESS_SECRET = secrets.token_bytes(32)
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


class Refused(ValueError):
    """A request the door refuses: ``status``, an error ``code`` and a message naming the fix."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.param = status, code, param


class EpisodeRef(NamedTuple):
    """An episode reference: the recorded ``name`` and the ``key`` that proves ownership (or None)."""

    name: str
    key: str | None


def parse_ref(raw: Any, key_header: str | None = None, *, where: str = "episode id") -> EpisodeRef:
    """``NAME`` or ``NAME~KEY`` (the key may come as ``key_header`` instead), checked.

    Raises :class:`Refused` (400) saying what is wrong; a key given twice must agree."""
    if not isinstance(raw, str) or not raw:
        raise Refused(400, "missing_episode", f"no {where}")
    name, sep, key = raw.partition(KEY_SEP)
    if not _NAME.fullmatch(name):
        raise Refused(400, "invalid_episode_id",
                      f"{where} {name[:80]!r} is not 1-{PROXY_NAME_MAX} characters of [{PROXY_NAME_CHARS}] starting with a letter or "
                      f"digit ('#' is reserved for segment ids such as NAME#1, '{KEY_SEP}' separates NAME{KEY_SEP}KEY)")
    given = key if sep else None
    if key_header is not None:
        if given is not None and not hmac.compare_digest(given.encode(errors="surrogatepass"), key_header.encode(errors="surrogatepass")):
            raise Refused(400, "invalid_episode_key", f"the {where} carries a key that differs from the {KEY_HEADER} header")
        given = key_header
    if given is not None and not _KEY.fullmatch(given):
        raise Refused(400, "invalid_episode_key",
                      "an episode key is 16-128 characters of [A-Za-z0-9_-] (e.g. secrets.token_urlsafe(16))")
    return EpisodeRef(name, given)


def mint_key() -> str:
    """A fresh unguessable key (192 bits) for an episode opened without one."""
    return secrets.token_urlsafe(24)


def derive_key(name: str, secret: bytes | str | None = None) -> str:
    """The key a client derives for episode ``name``: HMAC-SHA256 of the name under ``secret``
    (default: ``$TURNGYM_EPISODE_SECRET``, else a random secret of this process), 32 characters."""
    if secret is None:
        secret = os.environ.get(_SECRET_ENV) or _PROCESS_SECRET
    if isinstance(secret, str):
        secret = secret.encode()
    digest = hmac.new(secret, name.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:24]).decode()


def key_digest(key: str) -> str:
    """What the proxy keeps of a key: its SHA-256 (a memory dump reveals no usable key)."""
    return hashlib.sha256(key.encode()).hexdigest()


def key_matches(digest: str, key: str | None) -> bool:
    """Whether ``key`` is the one whose digest is ``digest`` (constant-time)."""
    return key is not None and hmac.compare_digest(digest, key_digest(key))


def _no_constant(name: str) -> Any:
    raise Refused(400, "invalid_json", f"{name} is not JSON (numbers must be finite)")


def loads(raw: bytes, *, max_depth: int) -> Any:
    """Parse a request body strictly (see the module docstring); raises :class:`Refused` (400)."""
    try:
        value = json.loads(raw or b"{}", parse_constant=_no_constant)
    except RecursionError:
        raise Refused(400, "json_too_deep", f"the request body nests deeper than {max_depth} levels") from None
    except ValueError as exc:
        if isinstance(exc, Refused):
            raise
        raise Refused(400, "invalid_json", "the request body is not valid JSON (UTF-8)") from None
    # strings need a look only when the text could hold a lone surrogate: an escape \\uD800-\\uDFFF,
    # or its raw bytes (which json decodes with surrogatepass); `in` is a fast prefilter
    strings = (b"\\u" in raw or b"\xed" in raw) and _MAYBE_SURROGATE.search(raw) is not None
    check_json(value, max_depth=max_depth, strings=strings)
    return value


def check_json(value: Any, *, max_depth: int, where: str = "the request body", strings: bool = True) -> None:
    """Refuse nesting past ``max_depth`` and (``strings``) strings, keys included, that are not valid
    Unicode. Iterative, so no depth of input can exhaust the interpreter's stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if strings:
                _check_text(item, where)
        elif isinstance(item, (list, dict)):
            if depth > max_depth:
                raise Refused(400, "json_too_deep", f"{where} nests deeper than {max_depth} levels")
            values = item.values() if isinstance(item, dict) else item
            if strings:
                for k in item if isinstance(item, dict) else ():
                    _check_text(k, where)
                stack.extend((v, depth + 1) for v in values)
            else:  # only containers can nest
                stack.extend((v, depth + 1) for v in values if isinstance(v, (list, dict)))


def _check_text(text: str, where: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(400, "invalid_text", f"{where} holds a lone UTF-16 surrogate (e.g. \\ud800): send valid Unicode "
                                           "text") from None


def check_size(value: Mapping[str, Any], limit: int, name: str) -> int:
    """The size of ``value`` as compact JSON, refused (400) past ``limit`` bytes."""
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    if size > limit:
        raise Refused(400, f"{name}_too_large", f"{name} is {size} bytes as JSON; the proxy keeps at most {limit} "
                                                f"(put bulky data in your own store and report a reference)", param=name)
    return size
