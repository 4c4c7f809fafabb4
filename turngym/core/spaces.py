"""Text spaces for observations and actions.

gymnasium's :class:`~gymnasium.spaces.Text` only admits characters from a fixed charset, but an
LLM may emit any Unicode. :class:`TextSpace` keeps ``Text``'s sampling (printable ASCII, so
``action_space.sample()`` yields garbage an env must survive) while *containing* every
string up to ``max_length`` characters.
"""

from __future__ import annotations

import string
from typing import Any

from gymnasium import spaces

__all__ = ["TextSpace"]

_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n"


class TextSpace(spaces.Text):
    """Any ``str`` of at most ``max_length`` characters.

    >>> TextSpace(max_length=8).contains("héllo <x>")
    False
    >>> TextSpace(max_length=16).contains("héllo <x>")
    True
    """

    def __init__(self, max_length: int = 1 << 20, *, seed: int | None = None) -> None:
        super().__init__(max_length=max_length, min_length=0, charset=_SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"
