"""Hugging Face transformers backend: batched sampling that returns exact token ids + log-probs.

:class:`HFPolicy` runs any local causal-LM directory (the embedded tiny model, SmolLM2, your
own checkpoint) on CPU by default and on the GPU when one is present. One ``act`` call renders
every conversation with :class:`~turngym.agents.render.ChatRenderer` (earlier turns' generated
ids spliced in verbatim), left-pads them into one batch and samples them together with a KV
cache. Rows leave the batch as soon as they finish — at the end-of-turn token, at one of the
env's stop strings (kept in the action) or at ``max_new_tokens`` — so a long straggler does not
make the batch recompute finished rows.

For every action it records the generated ids, their log-probs under the sampling distribution
(``log_softmax(logits / temperature)``, before top-p truncation; with the default temperature
1.0 these are the model's own log-probs, what a PPO ratio needs) and the prompt ids.

Where a model's files come from (``"tiny"``, ``"smollm2"``, a directory) lives in
:mod:`turngym.agents.hf_models`, the keys/values kept between turns in :mod:`turngym.agents.hf_cache`;
their public names are re-exported here, so ``from turngym.agents.hf import resolve_model_path`` works.

torch and transformers are imported when a policy is built, never by ``import turngym``.

>>> from turngym.agents.hf import HFPolicy
>>> from turngym.agents.base import AgentInput
>>> policy = HFPolicy.from_pretrained("tiny", max_new_tokens=8, seed=0)
>>> [a] = policy.act([AgentInput([{"role": "user", "content": "What is 2 + 3?"}])])
>>> len(a.token_ids) == len(a.logprobs) <= 8 and a.text == policy.tokenizer.decode(a.token_ids, skip_special_tokens=True)
True
"""

from __future__ import annotations

import contextlib
import inspect
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turngym.agents.base import Action, AgentInput
from turngym.agents.choices import ChoiceCache, ChoiceTrie, encode_choices
from turngym.agents.hf_cache import PrefixCache, new_cache
from turngym.agents.hf_decode import DecodeHooks, StaticDecoder, static_decoding_unsupported
from turngym.agents.hf_models import SMOLLM2_GGUF, resolve_model_path, smollm2_dir, smollm2_tokenizer
from turngym.agents.render import ChatRenderer
from turngym.core.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "Generation",
    "GenerationStats",
    "HFPolicy",
    "PrefixCache",
    "SMOLLM2_GGUF",
    "draw",
    "resolve_model_path",
    "smollm2_dir",
    "smollm2_tokenizer",
]

DEFAULT_MAX_NEW_TOKENS = 128
"""Tokens per action when neither the policy nor the env sets a budget."""


@dataclass
class Generation:
    """One sampled continuation.

    Attributes:
        token_ids: generated ids, verbatim (including the end-of-turn token if sampled).
        logprobs: log-prob of each generated id under the sampling distribution.
        text: ``decode(token_ids, skip_special_tokens=True)``.
        finish_reason: ``"eos"``, ``"stop"`` (a stop string) or ``"length"``.
        stop: the stop string that ended it, if any.
        allowed_token_ids: under a choice trie, per generated id the ids the trie allowed at
            that step (what ``logprobs`` are normalized over); None when decoding was free.
    """

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    stop: str | None = None
    prompt_ids: list[int] = field(default_factory=list)
    allowed_token_ids: list[list[int]] | None = None


@dataclass
class GenerationStats:
    """Running totals of what a policy generated, for progress lines (tokens/s) and reports.

    Attributes:
        calls: ``generate`` calls.
        actions: continuations sampled.
        tokens: generated tokens.
        seconds: wall time spent in ``generate``.
    """

    calls: int = 0
    actions: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def add(self, gens: Sequence[Generation], seconds: float) -> None:
        self.calls += 1
        self.actions += len(gens)
        self.tokens += sum(len(g.token_ids) for g in gens)
        self.seconds += seconds

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


_STOP_TABLES: weakref.WeakKeyDictionary[Any, ChoiceCache[frozenset[int]]] = weakref.WeakKeyDictionary()


def _stop_tables(tokenizer: Any) -> ChoiceCache[frozenset[int]]:
    """Per stop-string set, the ids whose text could end one of them: a token's own text holds a
    stop's last character, or is part of a multi-byte character (decoded alone as U+FFFD).

    Kept per tokenizer (a trainer builds a policy per rollout; decoding every id alone is the cost).
    """
    try:
        return _STOP_TABLES[tokenizer]
    except KeyError:
        pass
    texts: list[str] = []

    def build(stops: tuple[str, ...]) -> frozenset[int]:
        if not texts:
            texts.extend(tokenizer.batch_decode([[i] for i in range(len(tokenizer))], skip_special_tokens=True))
        last = {x[-1] for x in stops if x}
        return frozenset(i for i, text in enumerate(texts) if "\ufffd" in text or any(c in text for c in last))

    tables: ChoiceCache[frozenset[int]] = ChoiceCache(build)
    with contextlib.suppress(TypeError):  # a tokenizer that takes no weak reference: no sharing
        _STOP_TABLES[tokenizer] = tables
    return tables


def draw(probs: Any, generator: Any) -> Any:
    """One index per row of ``probs`` (non-negative, any scale), drawn with probability ∝ the row.

    On a CPU by the inverse CDF: a float64 cumulative sum, one uniform per row, a binary search
    (``right=True``: a zero-probability entry is never drawn). ``torch.multinomial`` draws a
    single sample by an exponential race, an exponential variate (a log) for every entry of the
    vocabulary; on a CPU that was 18% of a tiny-model rollout and ~4× the inverse CDF's time
    (``benchmarks/bench_sampler.py``). On an accelerator the race is cheap and runs inside
    the captured CUDA graphs: kept there.
    """
    import torch

    if probs.device.type != "cpu":
        return torch.multinomial(probs, 1, generator=generator)[:, 0]
    cdf = probs.double().cumsum(-1)
    u = torch.rand((probs.shape[0], 1), generator=generator, dtype=torch.float64, device=probs.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True)[:, 0].clamp_(max=probs.shape[-1] - 1)



class HFPolicy:
    """A causal LM from transformers as a :class:`~turngym.agents.base.Policy`.

    Args:
        model: a loaded ``PreTrainedModel``.
        tokenizer: its tokenizer (with a chat template).
        temperature: sampling temperature; 0 = greedy.
        top_p: nucleus sampling mass (1.0 = off).
        max_new_tokens: per action; None (the default) takes each env's own budget
            (``AgentInput.max_new_tokens``, sized to its action grammar), else
            :data:`DEFAULT_MAX_NEW_TOKENS`. A number here overrides every env's budget.
        seed: seeds this policy's own torch generator (same seed + same inputs ⇒ same actions).
        max_batch_size: rows per forward pass; larger ``act`` batches are split.
        force_action_prefix: start each action with its env's ``AgentInput.action_prefix`` (e.g.
            ``<``, the first character of every tag of a tag grammar). The prefix's tokens are
            fed instead of sampled and kept in ``token_ids`` with the model's log-probs for them
            (so rendering stays exact and training sees what the model was conditioned on); an
            action's ``meta["forced_tokens"]`` counts them. Off by default: it is a decoding
            constraint that lets a very small model produce parseable actions, not sampling.
        constrain_choices: where the env enumerates its valid actions (``AgentInput.choices``),
            decode exactly one of them: each step may only continue some choice (a token trie of
            the choices as the renderer encodes them, :mod:`turngym.agents.choices`), and the
            end-of-turn token is allowed only after a whole choice. Sampling renormalizes over the
            allowed tokens (greedy takes the argmax among them), and ``logprobs`` are log-probs of
            that *constrained* distribution, flagged by ``meta["constrained"] = True``. Rows without
            choices decode freely in the same batch. With choices, the forced action prefix, the
            stop strings and the token budget do not apply (the choices win: every choice already
            is a whole valid action; the budget becomes the longest choice plus the end token).
            Each constrained action carries ``allowed_token_ids`` (per token, the ids the trie
            allowed), so a trainer renormalizes its recomputed log-probs over the same sets and
            the rollout stays on-policy (``TrainConfig.constrain_choices``). Off by default.
        prefix_cache_mb: memory for keys/values kept between turns (0 disables prefix reuse).
            A multi-turn prompt extends the previous turn's sequence, so only the new
            observation is run through the model instead of the whole history.
        static_decoding: the static-cache loop (:mod:`turngym.agents.hf_decode`; default: where the model runs it).
        cuda_graphs: replay decode steps as CUDA graphs (default: on CUDA).
        sync_every: decode steps between host reads (default 8 on CUDA, 1 elsewhere).
        grouped_attention: the static loop's forwards attend over written cache columns with grouped
            key/value heads (:func:`~turngym.agents.hf_decode.grouped_attention`; default: on a CPU).
        name: shown in reports.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int | None = None,
        seed: int = 0,
        max_batch_size: int | None = None,
        force_action_prefix: bool = False,
        constrain_choices: bool = False,
        prefix_cache_mb: int = 2048,
        static_decoding: bool | None = None,
        cuda_graphs: bool | None = None,
        sync_every: int | None = None,
        grouped_attention: bool | None = None,
        name: str = "hf",
    ) -> None:
        import torch

        if max_batch_size is None:  # a GPU decodes hundreds of rows per step for the price of a few
            max_batch_size = 256 if next(model.parameters()).device.type == "cuda" else 64
        if temperature < 0 or not 0 < top_p <= 1 or (max_new_tokens is not None and max_new_tokens < 1) or max_batch_size < 1:
            raise ConfigError(
                f"need temperature >= 0, 0 < top_p <= 1, max_new_tokens >= 1, max_batch_size >= 1; got "
                f"{temperature}, {top_p}, {max_new_tokens}, {max_batch_size}"
            )
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_new_tokens = None if max_new_tokens is None else int(max_new_tokens)
        self.max_batch_size = int(max_batch_size)
        self.name = name
        self.force_action_prefix = bool(force_action_prefix)
        self.constrain_choices = bool(constrain_choices)
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        eos = {tokenizer.eos_token_id}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos |= set(gen_eos) if isinstance(gen_eos, (list, tuple)) else {gen_eos}
        self.eos_ids = frozenset(i for i in eos if i is not None)
        # after a whole choice only the renderer's end-of-turn token: the one it splices back
        self.end_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else min(self.eos_ids)
        self._choice_trie = ChoiceCache(self._build_trie)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        self.max_positions = getattr(model.config, "max_position_embeddings", None)
        self._prefix = PrefixCache(int(prefix_cache_mb) << 20)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft's forward hides the keyword behind **kwargs
        forward_args = inspect.signature(base.forward).parameters
        self._last_logits_only = {"logits_to_keep": 1} if "logits_to_keep" in forward_args else {}
        self._weights_seen = self._weights_version()
        self.stats = GenerationStats()
        self._stop_tables = _stop_tables(tokenizer)
        # The static-cache loop (turngym.agents.hf_decode) unless the model cannot run it or the
        # caller asked for the original loop; the reason is kept for reports.
        self.static_reason = static_decoding_unsupported(model) if static_decoding is not False else "static_decoding=False"
        if static_decoding and self.static_reason is not None:
            raise ConfigError(f"static_decoding=True, but {self.static_reason}; leave static_decoding unset to fall back")
        self._static = (
            StaticDecoder.for_model(model, graphs=cuda_graphs, sync_every=sync_every, grouped=grouped_attention)
            if self.static_reason is None else None
        )

    @classmethod
    def from_pretrained(
        cls, path: str | Path | None = None, *, device: str | None = None, dtype: str | None = None, **kwargs: Any
    ) -> HFPolicy:
        """Load ``path`` (``"tiny"``, ``"smollm2"`` or a model directory); GPU if available.

        ``dtype`` defaults to float32 on CPU and bfloat16 on CUDA. ``dtype="bfloat16"`` on a CPU
        with avx512_bf16 samples SmolLM2 several times faster than float32
        (``benchmarks/results/hf_decode.md``); the recorded log-probs are then the bf16 model's
        (what the sampler drew from), ~0.04 per token from any teacher-forced recompute, in bf16
        or float32 alike: a learner in another dtype treats them as behaviour log-probs.
        """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_dir = resolve_model_path(path)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = (
            getattr(torch, dtype) if dtype else (torch.bfloat16 if device.startswith("cuda") else torch.float32)
        )
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype).to(device)
        kwargs.setdefault("name", f"hf:{path or 'tiny'}")
        return cls(model, tokenizer, **kwargs)

    # ------------------------------------------------------------------ policy
    def clear_prefix_cache(self) -> None:
        """Forget every cached sequence (done automatically when the weights change)."""
        self._prefix = PrefixCache(self._prefix.max_bytes)

    def _weights_version(self) -> int:
        # In-place updates (optimizer.step, load_state_dict) bump each tensor's version counter,
        # so cached keys/values computed with older weights are never reused.
        return sum(p._version for p in self.model.parameters())

    def act(self, batch: Sequence[AgentInput]) -> list[Action]:
        prompts, reusable = [], []
        for inp in batch:
            r = self.renderer.render(inp.messages, inp.action_token_ids, add_generation_prompt=True)
            prompts.append(r.ids)
            # The previous turn's sequence ends one token before the end of its generated ids
            # (the last sampled token was never fed back), which is what the cache holds.
            reusable.append(r.spans[-1][1] - 1 if r.spans and r.generated[-1] else 0)
        limits = [self.max_new_tokens or inp.max_new_tokens or DEFAULT_MAX_NEW_TOKENS for inp in batch]
        tries = [self._choice_trie(tuple(inp.choices)) if self.constrain_choices and inp.choices else None for inp in batch]
        forced = [
            self.renderer.encode(inp.action_prefix) if self.force_action_prefix and inp.action_prefix and t is None else []
            for inp, t in zip(batch, tries, strict=True)
        ]
        gens = self.generate(prompts, [inp.stop for inp in batch], reusable, limits, forced, tries)
        return [
            Action(
                g.text,
                token_ids=g.token_ids,
                logprobs=g.logprobs,
                prompt_ids=g.prompt_ids,
                meta={"finish_reason": g.finish_reason, "stop": g.stop, "forced_tokens": min(len(f), len(g.token_ids)),
                      "constrained": t is not None},
                allowed_token_ids=g.allowed_token_ids,
            )
            for g, f, t in zip(gens, forced, tries, strict=True)
        ]

    def _build_trie(self, choices: tuple[str, ...]) -> ChoiceTrie:
        """The trie of ``choices`` (built once per distinct set: :attr:`_choice_trie` caches it)."""
        return encode_choices(choices, self.renderer.encode, lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True),
                              self.end_id)

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        stops: Sequence[Sequence[str]] | None = None,
        reusable: Sequence[int] | None = None,
        max_new_tokens: Sequence[int] | None = None,
        forced: Sequence[Sequence[int]] | None = None,
        tries: Sequence[ChoiceTrie | None] | None = None,
    ) -> list[Generation]:
        """Sample one continuation per prompt (token ids in, token ids + log-probs out).

        ``max_new_tokens[i]``: prompt ``i``'s token budget (default: the policy's, else
        :data:`DEFAULT_MAX_NEW_TOKENS`); rows with different budgets share one batch.
        ``forced[i]``: token ids prompt ``i``'s continuation must start with (fed instead of
        sampled, recorded with the model's log-probs; see ``force_action_prefix``).
        ``tries[i]``: a :class:`~turngym.agents.choices.ChoiceTrie` prompt ``i``'s continuation
        must follow to its end token (see ``constrain_choices``); it overrides ``forced[i]``,
        the stop strings and the budget of that prompt.

        ``reusable[i]``: the length of a prefix of prompt ``i`` that may be cached — a
        sequence this policy produced before, i.e. an earlier ``prompt + token_ids[:-1]``
        (:meth:`act` passes the previous turn's). Its keys/values are then reused and only the
        rest of the prompt is run through the model.
        """
        version = self._weights_version()
        if version != self._weights_seen:
            self.clear_prefix_cache()
            self._weights_seen = version
        self.model.eval()  # a trainer may have left it in train mode (dropout)
        stops = list(stops) if stops is not None else [()] * len(prompts)
        reuse = list(reusable) if reusable is not None else [0] * len(prompts)
        default = self.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        limits = [int(m) for m in max_new_tokens] if max_new_tokens is not None else [default] * len(prompts)
        if any(m < 1 for m in limits):
            raise ConfigError(f"max_new_tokens must be >= 1 for every prompt, got {min(limits)}")
        trie = list(tries) if tries is not None else [None] * len(prompts)
        force = [list(f) if t is None else [] for f, t in zip(forced or [[]] * len(prompts), trie, strict=True)]
        limits = [m if t is None else t.longest + 1 for m, t in zip(limits, trie, strict=True)]
        out: list[Generation] = []
        t0 = time.perf_counter()
        for i in range(0, len(prompts), self.max_batch_size):
            j = i + self.max_batch_size
            self._check_positions(prompts[i:j], limits[i:j])
            if self._static is not None:
                out += self._static.generate(self._decode_hooks(), prompts[i:j], stops[i:j], reuse[i:j], limits[i:j],
                                             force[i:j], trie[i:j])
            else:
                out += self._generate_batch(prompts[i:j], stops[i:j], reuse[i:j], limits[i:j], force[i:j], trie[i:j])
        self.stats.add(out, time.perf_counter() - t0)
        return out

    def _generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        stops: Sequence[Sequence[str]],
        reusable: Sequence[int],
        limits: Sequence[int],
        forced: Sequence[Sequence[int]] = (),
        tries: Sequence[ChoiceTrie | None] = (),
    ) -> list[Generation]:
        import torch

        n = len(prompts)
        if n == 0:
            return []
        dev = self.device
        # Prefix reuse: a row whose prompt extends a sequence this policy generated before (the
        # previous turn of its episode or tree path) starts from that sequence's cached
        # keys/values and only feeds the new tokens (the observation and the template framing).
        cached = self._prefix.take(prompts, reusable)
        lengths = [len(c.ids) if c is not None else 0 for c in cached]
        deltas = [list(p[c:]) for p, c in zip(prompts, lengths, strict=True)]
        cmax, dmax = max(lengths), max(map(len, deltas))
        ids = torch.full((n, dmax), self.pad_id, dtype=torch.long, device="cpu")
        attn = torch.zeros((n, dmax), dtype=torch.long, device="cpu")
        for r, d in enumerate(deltas):  # left padding: every row's next token is at the end
            if d:
                ids[r, dmax - len(d) :] = torch.tensor(d, dtype=torch.long, device="cpu")
                attn[r, dmax - len(d) :] = 1
        ids, attn = ids.to(dev), attn.to(dev)  # before the concatenation: the cached mask is on the model's device
        if cmax:
            past, cache_mask = self._prefix.batch(cached, cmax, self.model.config, dev)
            attn = torch.cat([cache_mask, attn], dim=1)
        else:
            past = new_cache(self.model.config)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        gen_ids: list[list[int]] = [[] for _ in range(n)]
        gen_lps: list[list[float]] = [[] for _ in range(n)]
        gen_allowed: list[list[list[int]] | None] = [[] if tries and tries[r] is not None else None for r in range(n)]
        finish: list[tuple[str, str | None]] = [("length", None)] * n
        window = [max((len(s) for s in st), default=0) + 2 for st in stops]
        rows = list(range(n))  # original row of each live batch position
        done: set[int] = set()
        node = [ChoiceTrie.ROOT if tries and tries[r] is not None else None for r in range(n)]
        next_pos = pos[:, -1]
        with torch.inference_mode():
            out = self.model(  # only the last position's logits: a long prompt's full vocabulary projection is wasted work
                input_ids=ids, attention_mask=attn, position_ids=pos[:, -dmax:], past_key_values=past, use_cache=True,
                **self._last_logits_only,
            )
            past = out.past_key_values
            for step in range(max(limits)):
                logits = out.logits[:, -1, :]
                if any(node[r] is not None and r not in done for r in rows):
                    logits = self._mask_choices(logits, [(tries[r], node[r]) if r not in done else (None, None) for r in rows])
                token, logprob = self._sample(logits)
                keep: list[int] = []
                for b, r in enumerate(rows):
                    if r in done:  # a finished row carried along by a cache that cannot shrink
                        keep.append(b)
                        continue
                    if forced and step < len(forced[r]):  # the env's action prefix: fed, not sampled
                        token[b] = forced[r][step]
                        logprob[b] = self._logprob_of(out.logits[b, -1, :], forced[r][step])
                    t = int(token[b])
                    gen_ids[r].append(t)
                    gen_lps[r].append(float(logprob[b]))
                    if node[r] is not None:
                        gen_allowed[r].append(tries[r].allowed(node[r]))
                        node[r] = tries[r].advance(node[r], t)
                    if t in self.eos_ids:
                        finish[r] = ("eos", None)
                    elif node[r] is not None:  # a constrained row ends only at its end token
                        keep.append(b)
                        continue
                    elif (hit := self._stop_hit(gen_ids[r], stops[r], window[r])) is not None:
                        finish[r] = ("stop", hit)
                    elif len(gen_ids[r]) < limits[r]:
                        keep.append(b)
                        continue
                    done.add(r)  # the cache holds the prompt and all but the last token
                    self._prefix.store(list(prompts[r]) + gen_ids[r][:-1], past, b, attn[b])
                if len(done) == n:
                    break
                if len(keep) < len(rows):
                    if not hasattr(past, "batch_select_indices"):
                        keep = list(range(len(rows)))  # cannot shrink this cache: carry finished rows
                    else:
                        idx = torch.tensor(keep, device=dev)
                        past.batch_select_indices(idx)
                        attn, token, next_pos = attn[idx], token[idx], next_pos[idx]
                        rows = [rows[b] for b in keep]
                attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=1)
                next_pos = next_pos + 1
                out = self.model(
                    input_ids=token[:, None],
                    attention_mask=attn,
                    position_ids=next_pos[:, None],
                    past_key_values=past,
                    use_cache=True,
                )
                past = out.past_key_values
        return self._finish(prompts, gen_ids, gen_lps, finish, gen_allowed)

    def _check_positions(self, prompts: Sequence[Sequence[int]], limits: Sequence[int]) -> None:
        if not prompts:
            return
        longest, budget = max(zip(map(len, prompts), limits, strict=True), key=sum)
        if self.max_positions is not None and longest + budget > self.max_positions:
            raise ConfigError(
                f"a prompt of {longest} tokens + max_new_tokens={budget} exceeds the model's "
                f"{self.max_positions} positions; keep fewer turns in the prompt (history=k) or lower max_new_tokens"
            )

    def _decode_hooks(self) -> DecodeHooks:
        """What the static decoder needs of this policy (its sampling, stop and choice rules, the
        prefix cache as it is now: :meth:`clear_prefix_cache` replaces it)."""
        return DecodeHooks(
            pad_id=self.pad_id,
            eos_ids=self.eos_ids,
            prefix=self._prefix,
            forward_extra=self._last_logits_only,
            stop_candidates=self._stop_candidates,
            stop_hit=self._stop_hit,
            mask_choices=self._mask_choices,
            sample=self._sample_full,
            finish=self._finish,
        )

    def _stop_candidates(self, stops: tuple[str, ...]) -> Any:
        """A membership test: after which tokens a stop string may have appeared."""
        return self._stop_tables(stops).__contains__

    def _finish(self, prompts, gen_ids, gen_lps, finish, allowed) -> list[Generation]:  # noqa: ANN001
        results = []
        for r, p in enumerate(prompts):
            ids = gen_ids[r]
            reason, stop = finish[r]
            results.append(
                Generation(
                    token_ids=ids,
                    logprobs=gen_lps[r],
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    finish_reason=reason,
                    stop=stop,
                    prompt_ids=list(p),
                    allowed_token_ids=allowed[r],
                )
            )
        return results

    def _mask_choices(self, logits: Any, row_tries: Sequence[tuple[ChoiceTrie | None, int | None]]) -> Any:
        """``logits`` with every token a row's choice trie does not allow at its node set to -inf."""
        import torch

        bias = torch.zeros_like(logits, dtype=torch.float32)
        for b, (trie, at) in enumerate(row_tries):
            if trie is not None and at is not None:
                bias[b] = float("-inf")
                bias[b, trie.allowed_tensor(at, bias.device)] = 0.0
        return logits.float() + bias

    def _stop_hit(self, ids: list[int], stops: Sequence[str], window: int) -> str | None:
        if not stops:
            return None
        tail = self.tokenizer.decode(ids[-window:], skip_special_tokens=True)
        return next((s for s in stops if s in tail), None)

    def _logprob_of(self, logits: Any, token: int) -> float:
        """The log-prob of ``token`` under the distribution :meth:`_sample` would have drawn from."""
        import torch

        logits = logits.float()
        if self.temperature not in (0.0, 1.0):
            logits = logits / self.temperature
        return float(torch.log_softmax(logits, dim=-1)[token])

    def _sample(self, logits: Any) -> tuple[Any, Any]:
        token, logprob, _ = self._sample_full(logits)
        return token, logprob

    def _sample_full(self, logits: Any) -> tuple[Any, Any, Any]:
        """Sampled ids, their log-probs, and the whole log-prob table they came from (all on device)."""
        import torch

        logits = logits.float()
        if self.temperature == 0:
            logp = torch.log_softmax(logits, dim=-1)
            token = logp.argmax(dim=-1)
            return token, logp.gather(-1, token[:, None])[:, 0], logp
        logp = torch.log_softmax(logits / self.temperature, dim=-1)
        probs = logp.exp()
        if self.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p >= self.top_p  # keep the smallest set reaching top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        token = draw(probs, self.generator)
        return token, logp.gather(-1, token[:, None])[:, 0], logp

    # ------------------------------------------------------------------ scoring
    def score(self, sequences: Sequence[Sequence[int]], masks: Sequence[Sequence[int]]) -> list[list[float]]:
        """Teacher-forced log-prob of each masked token (no grad), per sequence.

        ``score(sample.input_ids, sample.loss_mask)`` on a rendered sample reproduces the
        rollout's recorded ``logprobs`` (up to float error at temperature 1), which is a cheap
        end-to-end check that rendering and generation agree.
        """
        import torch

        results: list[list[float]] = []
        self.model.eval()
        with torch.inference_mode():
            for seq, mask in zip(sequences, masks, strict=True):
                x = torch.tensor([list(seq)], device=self.device)
                logits = self.model(input_ids=x).logits[0, :-1].float()
                if self.temperature not in (0.0, 1.0):
                    logits = logits / self.temperature
                logp = torch.log_softmax(logits, dim=-1).gather(-1, x[0, 1:, None])[:, 0].tolist()
                results.append([logp[j - 1] for j in range(1, len(seq)) if mask[j]])
        return results
