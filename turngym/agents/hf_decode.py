"""Static-cache decoding for :class:`~turngym.agents.hf.HFPolicy`: few host round trips, CUDA graphs.

The first HF decode loop fed one token at a time through transformers' growing cache, built a
fresh attention mask every step, read every row's token and log-prob back to the host one by
one, decoded a text window per row to look for stop strings, and shrank the cache whenever a
row finished. On a CPU that is fine (the forward pass dominates); on a GPU a 135M model's decode
step is ~0.1 ms of arithmetic buried under ~60 ms of Python, kernel launches and host syncs —
110 tokens/s at 16 rows on an H200. This loop keeps the same semantics (exact ids, log-probs under
the sampling distribution, forced prefixes, choice tries, stop strings, prefix reuse) and removes
the overhead:

* **A static KV cache.** Every layer's keys/values live in preallocated ``[rows, heads, length,
  head_dim]`` buffers; a step writes one column in place (``index_copy_`` at a device-side
  column index) and attends over the whole buffer under a boolean validity mask that the loop
  updates in place. Shapes never change during a call, so...
* **CUDA graphs.** On a GPU one decode step (the whole model forward) is captured once per
  (rows, length) bucket and replayed: one launch instead of ~1,000. Buckets are powers of two so
  a handful of graphs serve every call; their buffers are kept between calls (an LRU under a byte
  cap) and dropped when the parameters are replaced (in-place optimizer updates keep the
  addresses a graph reads, so training between calls needs no re-capture).
* **Few host syncs.** Sampling, forced-prefix tokens and their log-probs stay on the device and
  are written into per-step output buffers; the host reads them back every ``sync_every`` steps
  in one transfer, then finds each row's end (end-of-turn token, a stop string, its budget) by
  replaying those steps on the host. Tokens a row sampled past its end are discarded — exactly
  what would have been generated had it stopped at once, since rows never interact. A stop
  string is looked for only after a token whose text could end one (a per-vocabulary table), not
  by decoding every row at every step. Rows under a choice trie need the host each step (the
  next step's mask depends on the token), so a batch with live trie rows syncs every step.
* **Compaction by bucket.** Finished rows stay in the batch until the live rows fit a bucket of
  half the size; then the survivors' cache rows are copied into that smaller bucket. On a CPU the
  bucket is the exact row count (the forward pass costs per row), so it shrinks as before.

* **Grouped attention without copies (CPU).** transformers' sdpa path repeats every key/value
  head ``heads / kv_heads`` times whenever a mask is given (GQA: SmolLM2 has 9 query heads over 3
  key/value heads), copying the whole cache in every layer at every step, and its CPU flash kernel
  is slow in bfloat16 for one query row. On a CPU the decoder's own forward passes instead attend
  over the written columns only, grouping query heads over their shared key/value head: torch's
  sdpa with ``enable_gqa`` in float32, a grouped matmul with a float32 softmax in bfloat16
  (:func:`grouped_attention`). Only this decoder's forwards take that path (they pass
  ``turngym_columns``); every other forward of the model (the learner's) runs transformers' own.

Models it cannot run (sliding-window or hybrid attention, attention implementations that take no
4-D mask, configs without the usual head fields) fall back to the original loop; so does any
failure to capture a graph (then the eager static loop runs and the reason is kept in
:attr:`StaticDecoder.graph_error`).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from turngym.agents.choices import ChoiceTrie

if TYPE_CHECKING:
    from turngym.agents.hf import Generation

__all__ = ["StaticDecoder", "DecodeHooks", "PrefixStore", "grouped_attention", "static_decoding_unsupported"]


class PrefixStore(Protocol):
    """The prefix key/value cache the decoder reads prompts from and stores finished rows in."""

    def take(self, prompts: Sequence[Sequence[int]], lengths: Sequence[int]) -> list[Any]:
        """Per prompt, its longest cached prefix within ``lengths`` (``.ids``, ``.kv`` per layer) or None."""
        ...

    def store(self, ids: list[int], past: Any, row: int, mask: Any) -> None:
        """Keep row ``row`` of ``past`` (its ``mask`` columns) as the cache of ``ids``."""
        ...


@dataclass(frozen=True, slots=True)
class DecodeHooks:
    """Everything :class:`StaticDecoder` needs of the policy it decodes for, declared in one place.

    The decoder runs the policy's own sampling, stop and choice rules (so both decode paths give
    the same tokens); it reaches them only through these fields, never through the policy's
    private members, so either side can change its internals without breaking the other.
    :meth:`turngym.agents.hf.HFPolicy.generate` builds one per batch.
    """

    pad_id: int
    eos_ids: frozenset[int]
    #: the prefix cache (read at the prompt, written when a row ends)
    prefix: PrefixStore
    #: extra keyword arguments of the prefill forward (``{"logits_to_keep": 1}`` where the model takes it)
    forward_extra: Mapping[str, Any]
    #: stop strings -> a test of after which tokens one of them may have appeared
    stop_candidates: Callable[[tuple[str, ...]], Callable[[int], bool]]
    #: the stop string a row's generated ids now end in (ids, stops, window), or None
    stop_hit: Callable[[list[int], Sequence[str], int], str | None]
    #: logits with every token a row's choice trie forbids at its node set to -inf
    mask_choices: Callable[[Any, Sequence[tuple[ChoiceTrie | None, int | None]]], Any]
    #: logits -> (token ids, their log-probs, the whole log-prob table)
    sample: Callable[[Any], tuple[Any, Any, Any]]
    #: (prompts, generated ids, log-probs, finish reasons, allowed ids) -> the policy's generations
    finish: Callable[..., list[Generation]]

_MASK_IMPLS = ("sdpa", "eager")


def static_decoding_unsupported(model: Any) -> str | None:
    """Why ``model`` cannot use the static loop (None when it can)."""
    config = getattr(model, "config", None)
    if config is None:
        return "the model has no config"
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if impl not in _MASK_IMPLS:
        return f"attention implementation {impl!r} takes no 4-D mask (static decoding supports {_MASK_IMPLS})"
    types = getattr(config, "layer_types", None)
    if getattr(config, "sliding_window", None) is not None or (types is not None and not set(types) <= {"full_attention"}):
        return "sliding-window or hybrid attention"
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder model"
    for name in ("num_hidden_layers", "num_attention_heads", "hidden_size"):
        if not isinstance(getattr(config, name, None), int):
            return f"config has no integer {name}"
    return None


def grouped_attention(query: Any, key: Any, value: Any, mask: Any, scaling: float | None) -> Any:
    """Attention of ``query`` [rows, heads, q, d] over ``key``/``value`` [rows, kv_heads, cols, d]
    under the boolean ``mask`` [rows, 1, q, cols] (True: attend), as [rows, q, heads, d].

    Query head ``h`` reads key/value head ``h // (heads / kv_heads)`` (transformers' ``repeat_kv``
    order) without materializing the repeat. Float32 goes through torch's sdpa (``enable_gqa``);
    half precision through a grouped matmul whose scores are softmaxed in float32 (torch's CPU
    flash kernel is ~10x slower in bfloat16 for a single query row).
    """
    import torch

    rows, heads, q, d = query.shape
    kv_heads = key.shape[1]
    if query.dtype == torch.float32:
        out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling,
                                                               enable_gqa=kv_heads != heads)
        return out.transpose(1, 2).contiguous()
    groups = heads // kv_heads
    scores = torch.matmul(query.reshape(rows, kv_heads, groups * q, d), key.transpose(-1, -2))
    scores = scores.float().view(rows, kv_heads, groups, q, -1) * (scaling if scaling is not None else d**-0.5)
    scores = scores.masked_fill(~mask[:, :, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(value.dtype).view(rows, kv_heads, groups * q, -1)
    return torch.matmul(probs, value).view(rows, heads, q, d).transpose(1, 2).contiguous()


_SDPA_LOCK = threading.Lock()


def _install_grouped_attention() -> bool:
    """Route sdpa forwards that carry ``turngym_columns`` to :func:`grouped_attention` (once per process).

    transformers picks the attention function by the config's name from a global registry, so the
    entry for ``"sdpa"`` is wrapped: a forward without the keyword (anyone but this decoder) calls
    the original function unchanged. False when this transformers has no such registry.
    """
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    except ImportError:
        return False
    with _SDPA_LOCK:
        original = ALL_ATTENTION_FUNCTIONS.get("sdpa")
        if original is None:
            return False
        if getattr(original, "_turngym_grouped", False):
            return True

        def sdpa_or_grouped(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, *args: Any,
                            turngym_columns: int | None = None, **kwargs: Any) -> tuple[Any, Any]:
            if turngym_columns is None or attention_mask is None or attention_mask.dtype.is_floating_point:
                return original(module, query, key, value, attention_mask, *args, **kwargs)
            n = turngym_columns
            return grouped_attention(query, key[:, :, :n], value[:, :, :n], attention_mask[..., :n],
                                     kwargs.get("scaling")), None

        sdpa_or_grouped._turngym_grouped = True  # type: ignore[attr-defined]
        ALL_ATTENTION_FUNCTIONS.register("sdpa", sdpa_or_grouped)
        return True


def _layer_class() -> type:
    """A cache layer over preallocated buffers, written at the columns its decoder points to."""
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):
        def __init__(self, keys: Any, values: Any, cols: list[Any]) -> None:
            super().__init__()
            self.keys, self.values = keys, values
            self.is_initialized = True
            self.dtype, self.device = keys.dtype, keys.device
            self._cols = cols  # shared by every layer: cols[0] is the column index tensor of this forward

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:  # buffers exist already
            return None

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            cols = self._cols[0]
            self.keys.index_copy_(2, cols, key_states.to(self.keys.dtype))
            self.values.index_copy_(2, cols, value_states.to(self.values.dtype))
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return int(self.keys.shape[-2])

        def get_mask_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
            return int(self.keys.shape[-2]), 0

    return SlotLayer


@dataclass
class _Slots:
    """One (rows, length) bucket's device state: cache buffers, step inputs, and its graph."""

    rows: int
    length: int
    cache: Any
    layers: list[Any]
    cols: list[Any]  # [the column index tensor the layers write at]
    step_col: Any  # [1] long: the column a decode step writes
    tok: Any  # [rows, 1] long: the token a decode step feeds
    pos: Any  # [rows, 1] long: its position id
    valid: Any  # [rows, length] bool: which cache columns each row attends to
    mask: Any  # the 4-D mask a decode step passes: a view of valid (sdpa) or an additive float buffer
    nbytes: int
    graph: Any = None
    logits: Any = None  # the graph's output buffer


_SHARED: weakref.WeakKeyDictionary[Any, dict[tuple[Any, Any], StaticDecoder]] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


class StaticDecoder:
    """Static-cache, graph-replayed decoding for one model (held by an :class:`HFPolicy`).

    :meth:`for_model` shares one decoder among every policy over the same model (a trainer
    builds a fresh policy for each rollout: re-allocating the buffers and re-capturing the graphs
    each time would cost more than the decoding). Calls on one decoder are serialized by a lock.

    Args:
        model: the causal LM (a peft model too).
        graphs: capture CUDA graphs (default: when the model is on a CUDA device).
        sync_every: decode steps between host reads (default 8 on CUDA, 1 elsewhere: on a CPU a
            read costs nothing and steps past a row's end would be wasted arithmetic).
        max_bytes: cache buffers kept between calls (default: a quarter of the card's memory on CUDA,
            none on a CPU, where allocation is cheap; 0 keeps none, so every call allocates and captures anew).
        grouped: attend over the written columns with :func:`grouped_attention` (default: on a CPU
            with sdpa; never under CUDA graphs, whose captured shapes cannot follow the column count).
    """

    def __init__(self, model: Any, *, graphs: bool | None = None, sync_every: int | None = None,
                 max_bytes: int | None = None, grouped: bool | None = None) -> None:
        import torch

        self.model = model
        config = model.config
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.cuda = self.device.type == "cuda"
        self.graphs = self.cuda if graphs is None else bool(graphs) and self.cuda
        self.sync_every = max(1, int(sync_every if sync_every is not None else (8 if self.cuda else 1)))
        if max_bytes is None:  # a quarter of the card (buckets for a rollout's shapes, graphs kept); none on a CPU
            max_bytes = torch.cuda.get_device_properties(self.device).total_memory // 4 if self.cuda else 0
        self.max_bytes = int(max_bytes)
        heads = config.num_attention_heads
        self.n_layers = config.num_hidden_layers
        self.kv_heads = getattr(config, "num_key_value_heads", None) or heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.bool_mask = (getattr(config, "_attn_implementation", None) or "eager") == "sdpa"
        want = (not self.cuda) if grouped is None else bool(grouped) and not self.graphs
        self.grouped = want and self.bool_mask and _install_grouped_attention()
        self._slots: OrderedDict[tuple[int, int], _Slots] = OrderedDict()
        self._signature: tuple[int, ...] = ()
        self._pool = torch.cuda.graph_pool_handle() if self.graphs else None
        self._layer_cls = _layer_class()
        self.graph_error: str | None = None
        self.captures = 0
        self.lock = threading.Lock()

    @classmethod
    def for_model(cls, model: Any, *, graphs: bool | None = None, sync_every: int | None = None,
                  grouped: bool | None = None) -> StaticDecoder:
        """The decoder shared by every policy over ``model`` with these settings."""
        with _SHARED_LOCK:
            per = _SHARED.setdefault(model, {})
            key = (graphs, sync_every, grouped)
            if key not in per:
                per[key] = cls(model, graphs=graphs, sync_every=sync_every, grouped=grouped)
            return per[key]

    # ------------------------------------------------------------------ buckets and buffers
    def bucket_rows(self, n: int) -> int:
        return 1 << max(0, n - 1).bit_length() if self.cuda else n

    def bucket_length(self, n: int) -> int:
        return max(256, 1 << max(0, n - 1).bit_length()) if self.cuda else n

    def _check_signature(self) -> None:
        """Drop every kept buffer and graph when the parameter tensors were replaced."""
        sig = tuple(p.data_ptr() for p in self.model.parameters())
        if sig != self._signature:
            self._slots.clear()
            self._signature = sig
            first = next(self.model.parameters())
            if (first.device, first.dtype) != (self.device, self.dtype):
                raise RuntimeError(f"the model moved to {first.device}/{first.dtype} after its decoder was built on "
                                   f"{self.device}/{self.dtype}; build a new HFPolicy")

    def slots(self, rows: int, length: int) -> _Slots:
        import torch

        key = (rows, length)
        if key in self._slots:
            self._slots.move_to_end(key)
            return self._slots[key]
        dev, dt = self.device, self.dtype
        shape = (rows, self.kv_heads, length, self.head_dim)
        step_col = torch.zeros(1, dtype=torch.long, device=dev)
        cols = [step_col]  # decode steps write at step_col; a prefill points cols[0] at its range meanwhile
        layers = [self._layer_cls(torch.zeros(shape, dtype=dt, device=dev), torch.zeros(shape, dtype=dt, device=dev), cols)
                  for _ in range(self.n_layers)]
        from transformers import DynamicCache

        cache = DynamicCache()
        cache.layers.extend(layers)
        cache.layer_class_to_replicate = None
        valid = torch.zeros((rows, length), dtype=torch.bool, device=dev)
        mask = valid[:, None, None, :] if self.bool_mask else torch.full(
            (rows, 1, 1, length), torch.finfo(dt).min, dtype=dt, device=dev)
        nbytes = 2 * self.n_layers * rows * self.kv_heads * length * self.head_dim * torch.finfo(dt).bits // 8
        s = _Slots(rows, length, cache, layers, cols, step_col,
                   torch.zeros((rows, 1), dtype=torch.long, device=dev), torch.zeros((rows, 1), dtype=torch.long, device=dev),
                   valid, mask, nbytes)
        if self.max_bytes > 0 and nbytes <= self.max_bytes:
            self._slots[key] = s
            while sum(x.nbytes for x in self._slots.values()) > self.max_bytes:
                self._slots.popitem(last=False)
        return s

    def _mask_of(self, allowed: Any) -> Any:
        """``allowed`` (bool) as the attention implementation takes it: itself for sdpa, else additive."""
        import torch

        if self.bool_mask:
            return allowed
        return torch.where(allowed, torch.zeros((), dtype=self.dtype, device=self.device),
                           torch.tensor(torch.finfo(self.dtype).min, dtype=self.dtype, device=self.device))

    def _open(self, s: _Slots, col: int) -> None:
        """Let every row attend to cache column ``col`` (written by the step that feeds it)."""
        s.valid[:, col] = True
        if not self.bool_mask:
            s.mask[:, 0, 0, col] = 0.0

    # ------------------------------------------------------------------ forward passes
    def prefill(self, s: _Slots, ids: Any, start: int, extra: Mapping[str, Any]) -> Any:
        """Feed ``ids`` [rows, d] at columns ``start .. start+d`` (``s.valid`` already marks them); last logits."""
        import torch

        d = ids.shape[1]
        q = s.cols[0] = torch.arange(start, start + d, device=self.device)  # the columns this forward writes
        causal = torch.arange(s.length, device=self.device)[None, :] <= q[:, None]  # [d, length]
        allowed = s.valid[:, None, :] & causal[None]  # [rows, d, length]
        allowed[:, torch.arange(d, device=self.device), q] = True  # a pad position sees itself: no empty softmax row
        pos = (s.valid.long().cumsum(-1) - 1).clamp(min=0)[:, start : start + d]
        if self.grouped:
            extra = {**extra, "turngym_columns": start + d}
        out = self.model(input_ids=ids, attention_mask=self._mask_of(allowed[:, None]), position_ids=pos,
                         past_key_values=s.cache, use_cache=True, **extra)
        s.pos.copy_(pos[:, -1:])
        s.cols[0] = s.step_col
        return out.logits[:, -1, :]

    def _forward_step(self, s: _Slots, columns: int | None = None) -> Any:
        extra = {"turngym_columns": columns} if self.grouped and columns is not None else {}
        out = self.model(input_ids=s.tok, attention_mask=s.mask, position_ids=s.pos, past_key_values=s.cache, use_cache=True,
                         **extra)
        return out.logits[:, -1, :]

    def step(self, s: _Slots, columns: int | None = None) -> Any:
        """One decode step with the inputs already in ``s``: the next logits [rows, vocab]. ``columns``:
        how many cache columns are written (eager steps attend over those only)."""
        if not self.graphs or self.graph_error is not None:
            return self._forward_step(s, columns)
        if s.graph is None:
            self._capture(s)
            if s.graph is None:
                return self._forward_step(s)
        s.graph.replay()
        return s.logits

    def _capture(self, s: _Slots) -> None:
        """Capture ``s``'s decode step. Warm-up and capture write the same key/value column the
        replay writes (same inputs), so capturing mid-generation changes nothing."""
        import torch

        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self._forward_step(s)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                logits = self._forward_step(s)
            s.graph, s.logits = graph, logits
            self.captures += 1
        except Exception as exc:  # noqa: BLE001 — any capture failure: run eagerly, say why
            torch.cuda.synchronize()
            self.graph_error = f"{type(exc).__name__}: {exc}"
            s.graph = None

    def compact(self, s: _Slots, keep: list[int]) -> _Slots:
        """The rows ``keep`` of ``s`` moved into the bucket that fits them."""
        import torch

        new = self.slots(self.bucket_rows(len(keep)), s.length)
        idx = torch.tensor(keep, device=self.device)
        k = len(keep)
        for a, b in zip(new.layers, s.layers, strict=True):
            a.keys[:k].copy_(b.keys.index_select(0, idx))
            a.values[:k].copy_(b.values.index_select(0, idx))
        new.valid[:k].copy_(s.valid.index_select(0, idx))
        new.valid[k:] = False
        new.valid[k:, 0] = True  # filler rows attend to one column: never an empty softmax row
        new.tok[:k].copy_(s.tok.index_select(0, idx))
        new.pos[:k].copy_(s.pos.index_select(0, idx))
        new.step_col.copy_(s.step_col)
        self._refresh_mask(new)
        return new

    def _refresh_mask(self, s: _Slots) -> None:
        if not self.bool_mask:  # sdpa's mask is a view of s.valid already
            s.mask.copy_(self._mask_of(s.valid)[:, None, None, :])

    # ------------------------------------------------------------------ the loop
    def generate(self, *args: Any) -> list[Generation]:
        """:meth:`_decode` (``hooks, prompts, stops, reusable, limits, forced, tries``) under this
        decoder's lock and in inference mode (buffers kept between calls are inference tensors: a
        later call must be able to reset them)."""
        import torch

        with self.lock, torch.inference_mode():
            return self._decode(*args)

    def _decode(
        self,
        hooks: DecodeHooks,
        prompts: Sequence[Sequence[int]],
        stops: Sequence[Sequence[str]],
        reusable: Sequence[int],
        limits: Sequence[int],
        forced: Sequence[Sequence[int]],
        tries: Sequence[ChoiceTrie | None],
    ) -> list[Generation]:
        """One batch, decoded under ``hooks``: prompts, stop strings, reusable prefix
        lengths, budgets, forced prefixes and choice tries, as :meth:`HFPolicy.generate` documents them."""
        import torch

        self._check_signature()
        n = len(prompts)
        cached = hooks.prefix.take(prompts, reusable)
        lengths = [len(c.ids) if c is not None else 0 for c in cached]
        deltas = [list(p[c:]) for p, c in zip(prompts, lengths, strict=True)]
        cmax, dmax, budget = max(lengths), max(map(len, deltas)), max(limits)
        s = self.slots(self.bucket_rows(n), self.bucket_length(cmax + dmax + budget))
        dev, rows = self.device, s.rows

        # --- the prompt: cached prefixes written in, the rest fed in one batched forward
        s.valid.zero_()
        ids = torch.full((rows, dmax), hooks.pad_id, dtype=torch.long, device="cpu")
        for r, (c, d) in enumerate(zip(cached, deltas, strict=True)):
            if c is not None:
                for layer, (k, v) in zip(s.layers, c.kv, strict=True):
                    layer.keys[r, :, cmax - len(c.ids) : cmax] = k
                    layer.values[r, :, cmax - len(c.ids) : cmax] = v
                s.valid[r, cmax - len(c.ids) : cmax] = True
            if d:
                ids[r, dmax - len(d) :] = torch.tensor(d, dtype=torch.long, device="cpu")
                s.valid[r, cmax + dmax - len(d) : cmax + dmax] = True
        logits = self.prefill(s, ids.to(dev), cmax, hooks.forward_extra)
        self._refresh_mask(s)

        # --- host-side state, per original row
        gen_ids: list[list[int]] = [[] for _ in range(n)]
        gen_lps: list[list[float]] = [[] for _ in range(n)]
        gen_allowed: list[list[list[int]] | None] = [[] if tries[r] is not None else None for r in range(n)]
        finish: list[tuple[str, str | None]] = [("length", None)] * n
        node: list[int | None] = [ChoiceTrie.ROOT if tries[r] is not None else None for r in range(n)]
        window = [max((len(x) for x in st), default=0) + 2 for st in stops]
        stop_cand = [hooks.stop_candidates(tuple(st)) if st else None for st in stops]
        slot_row: list[int | None] = [r if r < n else None for r in range(rows)]
        live = set(range(n))
        fmax = max((len(f) for f in forced), default=0)
        force_t = None
        if fmax:
            force_t = torch.full((rows, fmax), -1, dtype=torch.long, device="cpu")
            for r, f in enumerate(forced):
                if f:
                    force_t[r, : len(f)] = torch.tensor(list(f), dtype=torch.long, device="cpu")
            force_t = force_t.to(dev)
        col = cmax + dmax  # the next column a decode step writes
        out_tok: list[Any] = []  # per step since the last host read: token [rows], logprob [rows]
        out_lp: list[Any] = []

        def host_read() -> None:
            """Replay the buffered steps on the host: record tokens, find each row's end."""
            nonlocal s, slot_row
            if not out_tok:
                return
            pack = torch.stack([torch.stack(out_tok).double(), torch.stack(out_lp).double()]).tolist()
            toks, lps = pack
            out_tok.clear()
            out_lp.clear()
            for b, r in enumerate(slot_row):
                if r is None or r not in live:
                    continue
                for t_step in range(len(toks)):
                    t = int(toks[t_step][b])
                    gen_ids[r].append(t)
                    gen_lps[r].append(lps[t_step][b])
                    if self._row_done(hooks, r, t, gen_ids, finish, node, tries, gen_allowed, stops, window,
                                      stop_cand, limits):
                        live.discard(r)
                        # the cache holds the prompt and every generated token fed before this one (generated
                        # token j is fed at column cmax + dmax + j; the last one never was)
                        fed = torch.arange(s.length, device=dev) < cmax + dmax + len(gen_ids[r]) - 1
                        hooks.prefix.store(list(prompts[r]) + gen_ids[r][:-1], s.cache, b, s.valid[b] & fed)
                        break

        for step in range(budget):
            row_tries = [(tries[r], node[r]) if r is not None and r in live and node[r] is not None else (None, None)
                         for r in slot_row]
            trie_rows = any(t is not None for t, _ in row_tries)  # their next mask needs this step's token
            if trie_rows:
                logits = hooks.mask_choices(logits, row_tries)
            token, logprob, logp = hooks.sample(logits)
            if force_t is not None and step < fmax:
                f = force_t[:, step]
                use = f >= 0
                token = torch.where(use, f, token)
                logprob = torch.where(use, logp.gather(-1, f.clamp(min=0)[:, None])[:, 0], logprob)
            out_tok.append(token)
            out_lp.append(logprob)
            if trie_rows or len(out_tok) >= self.sync_every or step == budget - 1:
                host_read()
                if not live:
                    break
                keep = [b for b, r in enumerate(slot_row) if r is not None and r in live]
                if self.bucket_rows(len(keep)) < s.rows:
                    s = self.compact(s, keep)
                    token = _rows(token, keep, s.rows, hooks.pad_id)
                    if force_t is not None:
                        force_t = _rows(force_t, keep, s.rows, -1)
                    slot_row = [slot_row[b] for b in keep] + [None] * (s.rows - len(keep))
            if step == budget - 1:
                break
            s.tok[:, 0] = token
            s.step_col.fill_(col)
            s.pos.add_(1)
            self._open(s, col)
            col += 1
            logits = self.step(s, col)
        return hooks.finish(prompts, gen_ids, gen_lps, finish, gen_allowed)

    @staticmethod
    def _row_done(hooks: DecodeHooks, r: int, t: int, gen_ids: list[list[int]], finish: list[tuple[str, str | None]],
                  node: list[int | None], tries: Sequence[ChoiceTrie | None], allowed: list[list[list[int]] | None],
                  stops: Sequence[Sequence[str]], window: Sequence[int], stop_cand: Sequence[Callable[[int], bool] | None],
                  limits: Sequence[int]) -> bool:
        """Whether row ``r`` ends with the token ``t`` just appended (the original loop's rules, in order)."""
        if node[r] is not None:
            allowed[r].append(tries[r].allowed(node[r]))
            node[r] = tries[r].advance(node[r], t)
        if t in hooks.eos_ids:
            finish[r] = ("eos", None)
            return True
        if node[r] is not None:  # a constrained row ends only at its end token
            return False
        cand = stop_cand[r]
        if cand is not None and cand(t):
            hit = hooks.stop_hit(gen_ids[r], stops[r], window[r])
            if hit is not None:
                finish[r] = ("stop", hit)
                return True
        return len(gen_ids[r]) >= limits[r]


def _rows(x: Any, keep: list[int], rows: int, fill: int) -> Any:
    """Rows ``keep`` of ``x``, padded with ``fill`` to ``rows`` (a compacted batch's per-row tensor)."""
    import torch

    x = x.index_select(0, torch.tensor(keep, dtype=torch.long, device=x.device))
    if x.shape[0] < rows:
        x = torch.cat([x, x.new_full((rows - x.shape[0], *x.shape[1:]), fill)])
    return x
