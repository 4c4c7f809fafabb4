"""Argument helpers shared by the ``turngym`` sub-commands (``cli`` and ``server.serve``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["parse_kv"]


def parse_kv(pairs: Sequence[str], *, flag: str = "--env-arg") -> dict[str, Any]:
    """``["max_steps=3", "tasks=x.jsonl"]`` → kwargs; values are JSON when they parse as JSON.

    A malformed pair exits with a message naming ``flag`` and the expected ``KEY=VALUE`` form.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise SystemExit(f"error: {flag} expects KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out
