"""Agent specs: the strings ``turngym eval --agent SPEC`` accepts.

A spec is ``kind`` or ``kind:argument`` (``oracle``, ``random``, ``hf:/path/to/model``,
``openai:http://host/v1``, ``vllm:/path``). Each kind maps to a factory; dispatch is by table,
never by an ``if/elif`` chain on strings. Factories import their backend lazily, so building a
scripted agent never imports torch.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from turngym.agents.base import Policy
from turngym.agents.scripted import OracleAgent, RandomAgent
from turngym.core.errors import ConfigError
from turngym.core.extras import require_extra

__all__ = ["AGENT_KINDS", "CONSTRAINABLE_KINDS", "make_agent", "register_agent"]

AgentFactory = Callable[..., Policy]

_SAMPLING = ("temperature", "top_p", "max_new_tokens", "seed")


def _pick(options: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: options[k] for k in keys if options.get(k) is not None}


def _hf(arg: str | None, **options: Any) -> Policy:
    """``hf`` / ``hf:tiny`` (embedded model), ``hf:smollm2``, ``hf:/path/to/model_dir``; ``dtype=bfloat16``
    samples in bf16 (~3x float32's tokens/s on an avx512_bf16 CPU: ``benchmarks/results/hf_decode.md``).

    Forces each env's action prefix unless ``force_action_prefix=False``: a small chat model
    asked for ``<calc>...</calc>`` otherwise starts most answers with prose, and nearly every
    action is invalid (SmolLM2-135M on Math: 98% invalid free, 2.1% forced and greedy).
    """
    options = {**options, "force_action_prefix": options.get("force_action_prefix") is not False}  # on unless off
    with require_extra("the hf agent", "train"):
        from turngym.agents.hf import HFPolicy  # torch is imported only when an HF agent is built

        return HFPolicy.from_pretrained(arg, device=options.get("device"), **_pick(options, (*_SAMPLING, "max_batch_size", "force_action_prefix", "constrain_choices", "dtype")))


def _openai(arg: str | None, **options: Any) -> Policy:
    """``openai:http://host:port/v1`` with ``model=NAME`` (the key from ``$OPENAI_API_KEY``)."""
    from turngym.agents.openai_http import OpenAIPolicy

    if not arg:
        raise ConfigError("the openai agent needs a base URL: --agent openai:http://127.0.0.1:8000/v1 --model NAME")
    keys = ("model", "api_key_env", "timeout", "max_retries", "concurrency", "constrain_choices", "native_tools", *_SAMPLING)
    return OpenAIPolicy(arg, **_pick(options, keys))


def _vllm(arg: str | None, **options: Any) -> Policy:
    """``vllm:tiny|smollm2|/path`` (optional extra: ``pip install vllm``)."""
    with require_extra("the vllm agent", "vllm"):
        from turngym.agents.vllm_backend import VLLMPolicy

        return VLLMPolicy.from_pretrained(arg, **_pick(options, (*_SAMPLING, "constrain_choices")))


#: Kinds that can decode exactly one of the env's listed actions (``constrain_choices``).
CONSTRAINABLE_KINDS = frozenset({"hf", "vllm", "openai"})

AGENT_KINDS: dict[str, AgentFactory] = {
    "oracle": lambda arg, **kw: OracleAgent(),
    "random": lambda arg, **kw: RandomAgent(seed=kw.get("seed") or 0),
    "hf": _hf,
    "openai": _openai,
    "vllm": _vllm,
}


def register_agent(kind: str, factory: AgentFactory) -> None:
    """Add an agent kind: ``factory(argument_or_None, **options) -> Policy``.

    Env families register their own baselines here when their package is imported (the search
    family's ``naive-rag``), so this module names no family.
    """
    AGENT_KINDS[kind] = factory


def make_agent(spec: str, **options: Any) -> Policy:
    """Build a policy from a spec string such as ``"oracle"``, ``"hf:smollm2"`` or ``"openai:URL"``.

    Options (ignored by kinds that do not use them): ``seed``, ``temperature``, ``top_p``,
    ``max_new_tokens``, ``device``, ``max_batch_size``, ``force_action_prefix`` (hf: on unless False); ``constrain_choices``
    (hf, vllm, openai: any other kind raises :class:`ConfigError` rather than silently decoding
    freely); ``model``, ``api_key_env``, ``timeout``, ``max_retries``, ``concurrency``, ``native_tools`` (openai).
    ``None`` values mean "default".
    """
    import turngym.envs  # noqa: F401  (families register their baseline agents on import)

    kind, _, arg = spec.partition(":")
    factory = AGENT_KINDS.get(kind)
    if factory is None:
        close = difflib.get_close_matches(kind, list(AGENT_KINDS), n=2)
        hint = f" Did you mean {' or '.join(close)}?" if close else ""
        raise ConfigError(f"unknown agent {spec!r}.{hint} Known kinds: {', '.join(sorted(AGENT_KINDS))}")
    if options.get("constrain_choices") and kind not in CONSTRAINABLE_KINDS:
        raise ConfigError(
            f"agent {kind!r} cannot constrain its actions to the env's choices: drop --constrain-choices "
            f"(constrain_choices) or use a model agent ({', '.join(sorted(CONSTRAINABLE_KINDS))})"
        )
    if options.get("force_action_prefix") and kind != "hf":
        raise ConfigError(f"agent {kind!r} cannot force the env's action prefix: drop --force-action-prefix "
                          "(force_action_prefix), which only hf agents support")
    return factory(arg or None, **options)
