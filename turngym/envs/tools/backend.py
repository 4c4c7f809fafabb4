"""What the tools env needs from a stateful API: call a function, expose the state, copy.

Two backends implement it: :class:`~turngym.envs.tools.bfcl.BfclBackend` (BFCL's Python
classes, driven by method calls, never by ``eval``) and
:class:`~turngym.envs.tools.store.StoreBackend` (our online store). The env never looks
inside a backend beyond this interface, so a new source is one class.
"""

from __future__ import annotations

import copy
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turngym.envs.tools.state import FlatState, flatten

__all__ = ["Backend", "CallResult", "format_result", "UNPRINTABLE"]

#: What a call's content starts with when its return value cannot be rendered as text.
UNPRINTABLE = "Error during execution: the result cannot be printed"


@dataclass(frozen=True, slots=True)
class CallResult:
    """The outcome of one executed call.

    Attributes:
        content: the text the agent receives (for BFCL, byte-identical to what BFCL's checker
            records, so the response check compares the same strings).
        error: the call ran but failed (raised, or returned an error response).
        forbidden: a policy rule refused it (the store's rules; BFCL has none inside calls).
    """

    content: str
    error: bool = False
    forbidden: bool = False


def format_result(result: Any) -> str:
    """Render a return value the way BFCL's executor does (str as is, dict as JSON, else str).

    >>> format_result({"a": 1}), format_result("ok"), format_result(None)
    ('{"a": 1}', 'ok', 'None')
    """
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError, RecursionError):
            pass
    try:
        return str(result)
    except (ValueError, RecursionError) as exc:  # an int past Python's digit limit, a self-nesting value
        return f"{UNPRINTABLE} ({str(exc).split(';')[0]})"


class Backend(ABC):
    """A stateful API the agent calls. Subclasses hold all episode state in plain attributes."""

    @abstractmethod
    def call(self, name: str, arguments: Mapping[str, Any]) -> CallResult:
        """Execute one call whose name is a known function and whose arguments passed the schema."""

    @abstractmethod
    def state_roots(self) -> Mapping[str, Any]:
        """The objects that make up the state, by name (``_``-prefixed names are private)."""

    @abstractmethod
    def same_state(self, other: Backend) -> bool:
        """True if the compared (public) state equals ``other``'s: the per-turn gold check."""

    def flat(self) -> tuple[FlatState, FlatState]:
        """``(public, private)`` flat views of the state (see :mod:`.state`)."""
        return flatten(self.state_roots())

    def copy(self) -> Backend:
        """An independent deep copy (snapshots, gold replays)."""
        return copy.deepcopy(self)
