"""Policies: scripted agents, HF transformers, vLLM and OpenAI-compatible backends, all behind
the same :class:`Policy` protocol and built from :func:`make_agent` specs.

Backends that need torch, httpx clients or vLLM live in their own modules
(:mod:`turngym.agents.hf`, :mod:`turngym.agents.tiny`, :mod:`turngym.agents.openai_http`,
:mod:`turngym.agents.vllm_backend`) and are imported only when used.
"""

from turngym.agents.base import Action, AgentInput, Message, Policy
from turngym.agents.registry import make_agent
from turngym.agents.render import ChatRenderer, RenderError, TokenSample, render_episode, render_turns
from turngym.agents.scripted import OracleAgent, RandomAgent

__all__ = [
    "Action",
    "AgentInput",
    "ChatRenderer",
    "Message",
    "OracleAgent",
    "Policy",
    "RandomAgent",
    "RenderError",
    "TokenSample",
    "make_agent",
    "render_episode",
    "render_turns",
]
