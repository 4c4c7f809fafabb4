"""Policies: scripted agents now; HF transformers, vLLM and OpenAI-compatible backends plug in
through the same :class:`Policy` protocol and :func:`make_agent` specs."""

from turngym.agents.base import Action, AgentInput, Message, Policy
from turngym.agents.registry import make_agent
from turngym.agents.scripted import OracleAgent, RandomAgent

__all__ = ["Action", "AgentInput", "Message", "OracleAgent", "Policy", "RandomAgent", "make_agent"]
