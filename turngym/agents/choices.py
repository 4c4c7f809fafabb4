"""Constrained decoding over an env's action choices: a token trie of every valid action.

When an env can enumerate its valid actions (``AgentInput.choices``, e.g. ALFWorld's admissible
commands), a generating policy may restrict each decoding step to the tokens that continue some
choice, and allow the end-of-turn token only once a whole choice has been produced. The action is
then exactly one of the choices: a small model that would otherwise echo the observation or
continue the list cannot produce an invalid action. This is vLLM's *guided choice* / the usual
ALFWorld setting for small models.

Each choice is tokenized alone, exactly as the policy's renderer encodes text, and must decode back
to itself: the ids a constrained policy samples are then ids that render back to the choice's text
in later prompts, with nothing re-tokenized.

>>> trie = ChoiceTrie([[5, 6], [5, 7, 8], [9]], end_id=0)
>>> trie.allowed(trie.ROOT)
[5, 9]
>>> node = trie.advance(trie.ROOT, 5)
>>> trie.allowed(node), trie.allowed(trie.advance(node, 6))
([6, 7], [0])
>>> trie.longest
3
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from turngym.core.errors import ConfigError

__all__ = ["ChoiceCache", "ChoiceTrie", "encode_choices"]


V = TypeVar("V")


class ChoiceCache(Generic[V]):
    """What a policy derives from one choice set (its trie, its token budget), built once per set.

    A location's choices recur on every visit and in every row of a batch, so re-deriving them
    each turn is wasted work; ``size`` sets are kept, the least recently used dropped first.
    """

    def __init__(self, build: Callable[[tuple[str, ...]], V], size: int = 256) -> None:
        self.build, self.size = build, size
        self._items: OrderedDict[Hashable, V] = OrderedDict()

    def __call__(self, choices: tuple[str, ...]) -> V:
        got = self._items.get(choices)
        if got is None:
            got = self._items[choices] = self.build(choices)
            if len(self._items) > self.size:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(choices)
        return got


class ChoiceTrie:
    """Token-id sequences as a trie; after a complete sequence only ``end_id`` is allowed.

    A sequence that is a prefix of another (``cabinet 1`` / ``cabinet 10`` when the digits are
    separate tokens) leaves both the end token and the longer continuation allowed.
    """

    ROOT = 0

    def __init__(self, sequences: Sequence[Sequence[int]], end_id: int) -> None:
        if not sequences:
            raise ConfigError("a choice trie needs at least one choice")
        self.end_id = int(end_id)
        self._children: list[dict[int, int]] = [{}]
        self._terminal: list[bool] = [False]
        for seq in sequences:
            node = self.ROOT
            for t in seq:
                nxt = self._children[node].get(int(t))
                if nxt is None:
                    nxt = len(self._children)
                    self._children[node][int(t)] = nxt
                    self._children.append({})
                    self._terminal.append(False)
                node = nxt
            self._terminal[node] = True
        self.longest = max(len(s) for s in sequences)
        self._allowed: dict[int, list[int]] = {}
        self._tensors: dict[tuple[int, Any], Any] = {}

    def allowed(self, node: int) -> list[int]:
        """Token ids allowed at ``node`` (sorted; the end id once a whole choice is in)."""
        got = self._allowed.get(node)
        if got is None:
            ids = set(self._children[node])
            if self._terminal[node]:
                ids.add(self.end_id)
            got = self._allowed[node] = sorted(ids)
        return got

    def allowed_tensor(self, node: int, device: Any) -> Any:
        """:meth:`allowed` as a long tensor on ``device`` (cached: one tensor op per masked step)."""
        key = (node, device)
        t = self._tensors.get(key)
        if t is None:
            import torch

            t = self._tensors[key] = torch.tensor(self.allowed(node), dtype=torch.long, device=device)
        return t

    def advance(self, node: int, token: int) -> int:
        """The node after ``token``; -1 after the end id (the action is complete)."""
        if token == self.end_id and self._terminal[node]:
            return -1
        nxt = self._children[node].get(int(token))
        if nxt is None:
            raise ValueError(f"token {token} is not allowed at trie node {node}")
        return nxt


def encode_choices(choices: Sequence[str], encode: Callable[[str], list[int]], decode: Callable[[list[int]], str],
                   end_id: int) -> ChoiceTrie:
    """The trie of ``choices`` as ``encode`` tokenizes them; each must decode back to itself.

    Raises :class:`ConfigError` naming a choice whose tokens do not round-trip (the constrained
    action would then not be the choice's text).
    """
    seqs = []
    for choice in dict.fromkeys(choices):  # duplicates add nothing
        ids = encode(choice)
        if decode(ids) != choice:
            raise ConfigError(
                f"choice {choice!r} does not round-trip through the tokenizer (decodes to {decode(ids)!r}); "
                "constrained decoding needs choices the tokenizer reproduces exactly: normalise the env's "
                "choice text or decode freely (constrain_choices=False)"
            )
        seqs.append(ids)
    return ChoiceTrie(seqs, end_id)
