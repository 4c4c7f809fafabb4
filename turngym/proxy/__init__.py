"""Train any agent as it is: an OpenAI-compatible proxy that records what the policy sampled.

``turngym proxy --model tiny --out captured/`` serves ``/v1/chat/completions`` and
``/v1/completions`` from turngym's policy. A user's own agent loop points its OpenAI client at
it, names each episode with the ``X-Turngym-Episode`` header (and its key) and reports the outcome when the
episode ends (:func:`report_outcome`); the proxy writes each episode, with the exact prompt ids,
sampled ids and log-probs of every turn, to ``captured/episodes.jsonl`` in turngym's episode
format, and ``turngym train --episodes captured/episodes.jsonl`` trains on them.

* :mod:`turngym.proxy.capture` — requests → sessions → token-exact episodes; history edits.
* :mod:`turngym.proxy.request` — headers, errors, settings, chat messages normalized.
* :mod:`turngym.proxy.service` — the OpenAI request semantics, refusals.
* :mod:`turngym.proxy.batcher` — concurrent requests sampled in one ``generate`` call per round.
* :mod:`turngym.proxy.tools` — ``tools`` / ``tool_choice``: rendering, forced openings, call ids in history.
* :mod:`turngym.proxy.tool_parsers` — replies → ``tool_calls``, one parser per model family (a table).
* :mod:`turngym.proxy.responses` — ``/v1/responses`` translated to and from the chat path.
* :mod:`turngym.proxy.app` — the starlette app (the ``server`` extra), imported on demand.
* :mod:`turngym.proxy.client` — :func:`episode_headers`, :func:`episode_ref`, :func:`report_outcome`.
* :mod:`turngym.proxy.guard` — episode ids and keys (an episode belongs to the client that opened
  it), strict JSON bodies (depth, Unicode, no NaN), size limits.
* :mod:`turngym.proxy.ledger` — finished episodes written before acknowledged, kept within a byte budget.
"""

from turngym.proxy.capture import OutcomeReport
from turngym.proxy.client import episode_headers, episode_ref, report_outcome
from turngym.proxy.service import EPISODE_HEADER, CaptureProxy, ProxyConfig, ProxyError

__all__ = ["EPISODE_HEADER", "CaptureProxy", "OutcomeReport", "ProxyConfig", "ProxyError", "episode_headers", "episode_ref", "report_outcome"]
