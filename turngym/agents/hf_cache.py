"""The keys/values :class:`~turngym.agents.hf.HFPolicy` keeps between turns, and the KV caches it decodes into.

A multi-turn prompt extends the sequence the policy generated the turn before, so the keys and
values of that sequence are kept (:class:`PrefixCache`, keyed by token ids, LRU within a byte
budget) and only the new observation is run through the model. :func:`new_cache` builds the
transformers cache a batch decodes into, with layers whose appends are amortized O(1).

Kept apart from :mod:`turngym.agents.hf` because cache bookkeeping is independent of sampling: it
knows nothing of policies, prompts' rendering or stop strings. torch and transformers are imported
inside the functions that need them, never at module level.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PrefixCache", "new_cache"]


def _growing_layer_class() -> type:
    """A transformers ``DynamicLayer`` whose appends are amortized O(1).

    ``DynamicLayer`` concatenates the whole cache with each new token, so decoding a long
    multi-turn context copies O(context) memory per token and layer; this layer writes into
    a buffer with spare capacity (doubling when full) and exposes a view of it.
    """
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        _kbuf: Any = None
        _vbuf: Any = None

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n = self.keys.shape[-2] if self.keys.numel() else 0
            new = key_states.shape[-2]
            buf = self._kbuf
            if (
                buf is None
                or buf.shape[:2] != key_states.shape[:2]
                or n + new > buf.shape[-2]
                or (n and self.keys.data_ptr() != buf.data_ptr())  # replaced (batch_select_indices)
            ):
                cap = max(64, 2 * (n + new))
                kbuf = key_states.new_empty((*key_states.shape[:2], cap, key_states.shape[-1]))
                vbuf = value_states.new_empty((*value_states.shape[:2], cap, value_states.shape[-1]))
                if n:
                    kbuf[:, :, :n] = self.keys
                    vbuf[:, :, :n] = self.values
                self._kbuf, self._vbuf = kbuf, vbuf
            self._kbuf[:, :, n : n + new] = key_states
            self._vbuf[:, :, n : n + new] = value_states
            self.keys = self._kbuf[:, :, : n + new]
            self.values = self._vbuf[:, :, : n + new]
            return self.keys, self.values

    return GrowingLayer


def new_cache(config: Any, layers: Sequence[tuple[Any, Any]] = ()) -> Any:
    """An empty (or pre-filled) KV cache; growing layers where every layer is full attention."""
    from transformers import DynamicCache

    types = getattr(config, "layer_types", None)
    full = getattr(config, "sliding_window", None) is None and (types is None or set(types) <= {"full_attention"})
    if not full:
        return DynamicCache(ddp_cache_data=list(layers) or None, config=config)
    cls = _growing_layer_class()
    cache = DynamicCache()
    cache.layer_class_to_replicate = cls
    for k, v in layers:
        layer = cls()
        layer.update(k, v)
        cache.layers.append(layer)
    return cache


@dataclass
class _Cached:
    ids: list[int]
    kv: list[tuple[Any, Any]]  # per layer: keys, values of shape [heads, len(ids), head_dim]
    nbytes: int


class PrefixCache:
    """Keys/values of recently generated sequences, keyed by their token ids (LRU eviction).

    Keyed by content, not by episode: a sequence can be reused by any later prompt that
    extends it — the same episode's next turn, or every child of a tree node.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, ...], _Cached] = OrderedDict()
        self.nbytes = 0
        self.hits = 0
        self.reused_tokens = 0

    def take(self, prompts: Sequence[Sequence[int]], lengths: Sequence[int]) -> list[_Cached | None]:
        """For each prompt, the cached sequence equal to ``prompt[:length]`` (or None).

        Entries found are consumed: each caller extends its sequence and stores the longer
        one, which supersedes it, so the cache holds about one entry per live episode and
        round-robin batches never thrash it. Tree siblings share one lookup batch, so they
        all find their parent before it is dropped.
        """
        found: list[_Cached | None] = []
        used: set[tuple[int, ...]] = set()
        for prompt, length in zip(prompts, lengths, strict=True):
            entry = None
            if 0 < length < len(prompt) and self.entries:
                key = tuple(prompt[:length])
                entry = self.entries.get(key)
                if entry is not None:
                    used.add(key)
                    self.hits += 1
                    self.reused_tokens += length
            found.append(entry)
        for key in used:
            self.nbytes -= self.entries.pop(key).nbytes
        return found

    def store(self, ids: list[int], past: Any, row: int, mask: Any) -> None:
        if self.max_bytes <= 0 or not hasattr(past, "layers"):
            return
        valid = mask.bool()
        if int(valid.sum()) != len(ids):
            return  # the cache does not hold exactly this sequence (should not happen): skip
        kv = [(layer.keys[row][:, valid].clone(), layer.values[row][:, valid].clone()) for layer in past.layers]
        nbytes = sum(k.numel() * k.element_size() * 2 for k, _ in kv)
        if nbytes > self.max_bytes:
            return
        key = tuple(ids)
        old = self.entries.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes
        self.entries[key] = _Cached(ids, kv, nbytes)
        self.nbytes += nbytes
        while self.nbytes > self.max_bytes:
            _, evicted = self.entries.popitem(last=False)
            self.nbytes -= evicted.nbytes

    @staticmethod
    def batch(cached: Sequence[_Cached | None], width: int, config: Any, device: Any) -> tuple[Any, Any]:
        """A left-padded batch cache of ``width`` positions, and its attention mask."""
        import torch

        ref = next(c for c in cached if c is not None)
        layers = []
        for i, (k0, v0) in enumerate(ref.kv):
            keys = k0.new_zeros((len(cached), k0.shape[0], width, k0.shape[2]))
            values = v0.new_zeros((len(cached), v0.shape[0], width, v0.shape[2]))
            for r, c in enumerate(cached):
                if c is not None:
                    keys[r, :, width - len(c.ids) :] = c.kv[i][0]
                    values[r, :, width - len(c.ids) :] = c.kv[i][1]
            layers.append((keys.to(device), values.to(device)))
        mask = torch.zeros((len(cached), width), dtype=torch.long, device="cpu")
        for r, c in enumerate(cached):
            if c is not None:
                mask[r, width - len(c.ids) :] = 1
        return new_cache(config, layers), mask.to(device)

