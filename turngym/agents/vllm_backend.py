"""vLLM backend (optional extra, GPU): the offline ``vllm.LLM`` engine, token ids in and out.

Prompts are rendered to ids by the same :class:`~turngym.agents.render.ChatRenderer` as the
HF backend (earlier turns' generated ids spliced in verbatim) and passed to vLLM as
``TokensPrompt`` — vLLM never re-tokenizes text, so the ids it returns are exactly what
training renders. Each request gets its own ``SamplingParams`` seed (``seed + request
index``): reproducible, and members of a group still sample differently. Stop strings are kept
in the output (``include_stop_str_in_output``) and ``logprobs=0`` returns the sampled token's
log-prob.

Install with ``pip install vllm`` (it pins its own torch; use a separate environment from the
CPU-only one). Nothing in turngym imports this module unless ``--agent vllm:...`` is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from turngym.agents.base import Action, AgentInput
from turngym.agents.render import ChatRenderer
from turngym.core.errors import ConfigError

__all__ = ["VLLMPolicy"]


class VLLMPolicy:
    """A ``vllm.LLM`` engine as a :class:`~turngym.agents.base.Policy`.

    Args:
        llm: a ``vllm.LLM``.
        tokenizer: the HF tokenizer of the same model (with a chat template).
        temperature, top_p, max_new_tokens, seed: sampling.
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
        name: str = "vllm",
    ) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        self.renderer = ChatRenderer(tokenizer)
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self.seed = seed
        self.name = name
        self._requests = 0

    @classmethod
    def from_pretrained(
        cls, path: str | Path | None = None, *, engine_kwargs: dict[str, Any] | None = None, **kwargs: Any
    ) -> VLLMPolicy:
        """Start an engine on ``path`` (``"tiny"``, ``"smollm2"`` or a model directory)."""
        try:
            from vllm import LLM
        except ImportError:
            raise ConfigError("the vllm agent needs vLLM: pip install vllm (GPU machines)") from None
        from transformers import AutoTokenizer

        from turngym.agents.hf import resolve_model_path

        model_dir = resolve_model_path(path)
        llm = LLM(model=str(model_dir), seed=kwargs.get("seed", 0), **(engine_kwargs or {}))
        kwargs.setdefault("name", f"vllm:{path or 'tiny'}")
        return cls(llm, AutoTokenizer.from_pretrained(model_dir), **kwargs)

    def act(self, batch: Sequence[AgentInput]) -> list[Action]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [self.renderer.prompt_ids(inp.messages, inp.action_token_ids) for inp in batch]
        params = [
            SamplingParams(
                temperature=self.temperature,
                top_p=self.top_p,
                max_tokens=self.max_new_tokens,
                stop=list(inp.stop) or None,
                include_stop_str_in_output=True,
                logprobs=0,
                seed=self.seed + self._requests + i,
            )
            for i, inp in enumerate(batch)
        ]
        self._requests += len(batch)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        actions = []
        for prompt, out in zip(prompts, outputs, strict=True):
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            lps = [float(step[t].logprob) for t, step in zip(ids, comp.logprobs or [], strict=False)]
            actions.append(
                Action(
                    self.tokenizer.decode(ids, skip_special_tokens=True),
                    token_ids=ids,
                    logprobs=lps if len(lps) == len(ids) else None,
                    prompt_ids=prompt,
                    meta={"finish_reason": comp.finish_reason, "stop": comp.stop_reason},
                )
            )
        return actions
