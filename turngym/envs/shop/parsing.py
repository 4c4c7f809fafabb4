"""The shop's action grammar: ``search[QUERY]`` and ``click[TARGET]`` (WebShop's).

The first ``search[...]`` or ``click[...]`` in the text is the action, so a model may think
aloud before it ("The second result fits. click[b0abc12345]"). Keywords are case-insensitive;
the body is stripped and may not contain brackets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from turngym.core.parsing import Parsed

__all__ = ["ShopAction", "parse_action", "MAX_QUERY_CHARS"]

#: Longer queries are cut here (a query is a handful of words; this bounds the work per turn).
MAX_QUERY_CHARS = 500

_ACTION = re.compile(r"\b(search|click)\[([^\[\]]*)\]", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ShopAction:
    """A parsed action: ``kind`` is ``search`` or ``click``; ``arg`` the stripped body."""

    kind: str
    arg: str


def parse_action(text: str) -> Parsed[ShopAction]:
    """Parse the first ``search[...]`` / ``click[...]`` in ``text``.

    >>> parse_action("I will look. search[ Red  Shoes ]").value
    ShopAction(kind='search', arg='Red  Shoes')
    >>> parse_action("Click[Buy Now]").value
    ShopAction(kind='click', arg='buy now')
    >>> parse_action("buy it").error
    'no action found: write search[QUERY] on the search page or click[BUTTON] with a listed button'
    """
    m = _ACTION.search(text)
    if m is None:
        return Parsed(error="no action found: write search[QUERY] on the search page or click[BUTTON] with a listed button")
    kind, arg = m.group(1).lower(), m.group(2).strip()
    if not arg:
        return Parsed(error=f"{kind}[] is empty: put a {'query' if kind == 'search' else 'button'} inside the brackets")
    if kind == "click":
        return Parsed(ShopAction(kind, " ".join(arg.lower().split())))
    return Parsed(ShopAction(kind, arg[:MAX_QUERY_CHARS]))
