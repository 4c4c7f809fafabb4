"""Episodes → training tokens that reuse the generated ids verbatim, with a policy-token mask.

Why this exists: decoding a policy's output and re-tokenizing it for training silently changes
the tokens (BPE merges across boundaries, chat templates that rewrite earlier turns, special
tokens after the end-of-turn marker), so the trainer optimizes log-probabilities of sequences
the policy never produced. Peer projects keep rediscovering this (SkyRL #710/#2075, Search-R1
#20). Here one :class:`ChatRenderer` builds *both* the prompts a model is conditioned on during
rollout and the sequences training sees, and it splices the generated ids in untouched:

* system/user turns and the template's own framing (``<|im_start|>assistant\\n``, the
  ``<|im_end|>\\n`` after a turn) come from the tokenizer's chat template, tokenized one
  message segment at a time (memoized);
* an assistant turn with known ids contributes exactly those ids (mask 1); if they end with
  the end-of-turn token, the template's copy of it is not repeated.

Two training layouts, as in the literature:

* :func:`render_episode` — one concatenated multi-turn sequence (RAGEN/SkyRL style); the mask
  covers every policy turn, observations are context.
* :func:`render_turns` — one sample per turn, its prompt holding the first observation and the
  last ``history`` turns (verl-agent style). Roll out with the same ``history`` so each
  sample's prompt equals the prompt the model actually saw.

>>> from turngym.agents.tiny import build_tiny_model
>>> from transformers import AutoTokenizer
>>> tok = AutoTokenizer.from_pretrained(build_tiny_model())
>>> r = ChatRenderer(tok)
>>> gen = tok.encode("<calc>2 + 3</calc>") + [tok.eos_token_id]   # as if sampled
>>> out = r.render([{"role": "user", "content": "Add 2 and 3."},
...                 {"role": "assistant", "content": "<calc>2 + 3</calc>"}], [gen])
>>> start, end = out.spans[0]
>>> out.ids[start:end] == gen, sum(out.mask) == len(gen)
(True, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from turngym.core.errors import TurngymError

if TYPE_CHECKING:
    from turngym.rollout.types import Episode

__all__ = [
    "RECORDED",
    "ChatRenderer",
    "RenderError",
    "RenderedChat",
    "TokenSample",
    "render_episode",
    "render_recorded",
    "render_turns",
]

RECORDED = "recorded"
"""``Episode.meta["rendering"]`` of an episode whose turns' ``prompt_ids`` are the truth (captured
by :mod:`turngym.proxy`): it renders from those ids, never from its messages' text."""


class RenderError(TurngymError, ValueError):
    """The tokenizer's chat template cannot be rendered incrementally (or lacks a template)."""


@dataclass
class RenderedChat:
    """Token ids of a conversation and where each assistant message's tokens are.

    Attributes:
        ids: the whole sequence.
        mask: 1 on policy tokens (assistant messages rendered from generated ids, or from text
            when ``train_text_actions``), 0 elsewhere.
        spans: per assistant message, ``(start, end)`` of its content tokens in ``ids``.
        generated: per assistant message, True if its tokens are the generated ids verbatim.
    """

    ids: list[int]
    mask: list[int]
    spans: list[tuple[int, int]]
    generated: list[bool]


@dataclass
class TokenSample:
    """One training sequence.

    Attributes:
        input_ids: the token ids.
        loss_mask: 1 on the policy tokens to train on, 0 on prompt/observation/template tokens.
        logprobs: sampling log-prob per token (0.0 where unknown or not a policy token).
        turn_spans: ``turn index -> (start, end)`` of that turn's action tokens.
        episode_id: the episode it came from.
        turn: for per-turn samples, the turn index; -1 for a concatenated episode.
        allowed: ``position -> token ids`` constrained decoding allowed for the token at that
            position (its log-prob is normalized over them); positions absent were free.
    """

    input_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    turn_spans: dict[int, tuple[int, int]] = field(default_factory=dict)
    episode_id: str = ""
    turn: int = -1
    allowed: dict[int, list[int]] = field(default_factory=dict)


class ChatRenderer:
    """Renders chat messages to ids with ``tokenizer``'s chat template, splicing in generated ids.

    Used by token-generating policies to build prompts *and* by the training renderers, so
    the ids a model was conditioned on are exactly the ids training sees.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template (ChatML, Llama, SmolLM2…).
        cache_size: memoized segment encodings (system prompts and task texts repeat a lot).
    """

    def __init__(self, tokenizer: Any, cache_size: int = 8192) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise RenderError(
                f"{type(tokenizer).__name__} has no chat template; set tokenizer.chat_template "
                "(a Jinja string) or use a chat/instruct model"
            )
        self.tokenizer = tokenizer
        self.eos_id: int | None = tokenizer.eos_token_id
        self.eos_text: str = tokenizer.eos_token or ""
        self._cache: dict[str, tuple[int, ...]] = {}
        self._cache_size = cache_size

    # ------------------------------------------------------------------ primitives
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without added special tokens (memoized; a fresh list each call,
        so a caller that appends to it cannot corrupt the cache)."""
        ids = self._cache.get(text)
        if ids is None:
            ids = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(self._cache) >= self._cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[text] = ids
        return list(ids)

    def _template(
        self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool, tools: Sequence[dict[str, Any]] | None = None
    ) -> str:
        if not messages and not add_generation_prompt:
            return ""
        extra = {"tools": list(tools)} if tools else {}
        return self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )

    # ------------------------------------------------------------------ rendering
    def render(
        self,
        messages: Sequence[dict[str, str]],
        action_token_ids: Sequence[Sequence[int] | None] = (),
        *,
        add_generation_prompt: bool = False,
        train_text_actions: bool = False,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> RenderedChat:
        """Render ``messages``; the i-th assistant message uses ``action_token_ids[i]`` verbatim.

        Args:
            messages: ``[{"role", "content"}]``.
            action_token_ids: per assistant message, its generated ids (None/absent: tokenize
                the text, e.g. a scripted turn).
            add_generation_prompt: end with the template's assistant header (a prompt).
            train_text_actions: also put assistant messages without ids under the mask
                (imitation of scripted demonstrations).
            tools: OpenAI function tools, passed to the chat template (``apply_chat_template(...,
                tools=...)``) at every step, so the rendering holds them where the template puts them.

        Raises:
            RenderError: the template is not prefix-stable (it rewrites earlier turns), so no
                multi-turn sequence can both match the prompts and reuse the ids.
        """
        ids: list[int] = []
        mask: list[int] = []
        spans: list[tuple[int, int]] = []
        generated: list[bool] = []
        prev_text = ""
        n_assistant = 0
        for i, msg in enumerate(messages):
            text = self._template(messages[: i + 1], False, tools)
            if not text.startswith(prev_text):
                raise RenderError(
                    f"the chat template rewrites earlier messages when message {i} is added "
                    "(e.g. it strips reasoning from past turns); multi-turn token reuse needs a "
                    "prefix-stable template: pass a tokenizer whose chat_template only appends"
                )
            segment = text[len(prev_text) :]
            if msg["role"] != "assistant":
                seg_ids = self.encode(segment)
                ids += seg_ids
                mask += [0] * len(seg_ids)
            else:
                gen = action_token_ids[n_assistant] if n_assistant < len(action_token_ids) else None
                n_assistant += 1
                header = self._template(messages[:i], True, tools)[len(prev_text) :]
                head, footer = self._split_assistant(segment, header, msg["content"], i)
                head_ids = self.encode(head)
                ids += head_ids
                mask += [0] * len(head_ids)
                if gen is not None:
                    body = list(gen)
                    if body and body[-1] == self.eos_id and self.eos_text and footer.startswith(self.eos_text):
                        footer = footer[len(self.eos_text) :]
                else:
                    # A text action (a demonstration) ends with the template's end-of-turn token
                    # under the mask, like a sampled action that stopped on EOS: imitation must
                    # teach the policy to *stop*, or it rambles past every action.
                    body = self.encode(msg["content"])
                    if self.eos_id is not None and self.eos_text and footer.startswith(self.eos_text):
                        body.append(self.eos_id)
                        footer = footer[len(self.eos_text) :]
                spans.append((len(ids), len(ids) + len(body)))
                generated.append(gen is not None)
                ids += body
                mask += [1 if (gen is not None or train_text_actions) else 0] * len(body)
                foot_ids = self.encode(footer) if footer else []
                ids += foot_ids
                mask += [0] * len(foot_ids)
            prev_text = text
        if add_generation_prompt:
            tail = self._template(messages, True, tools)
            if not tail.startswith(prev_text):
                raise RenderError("the chat template's generation prompt rewrites the conversation")
            tail_ids = self.encode(tail[len(prev_text) :])
            ids += tail_ids
            mask += [0] * len(tail_ids)
        return RenderedChat(ids, mask, spans, generated)

    def prompt_ids(
        self, messages: Sequence[dict[str, str]], action_token_ids: Sequence[Sequence[int] | None] = ()
    ) -> list[int]:
        """The prompt for the next assistant turn (ids of earlier turns reused verbatim)."""
        return self.render(messages, action_token_ids, add_generation_prompt=True).ids

    @staticmethod
    def _split_assistant(segment: str, header: str, content: str, index: int) -> tuple[str, str]:
        """Split an assistant segment into (text before the content, text after it)."""
        if segment.startswith(header):
            rest = segment[len(header) :]
            if rest.startswith(content):
                return header, rest[len(content) :]
        core = content.strip()
        j = segment.find(core, len(header) if segment.startswith(header) else 0)
        if j < 0 or not core and content:
            raise RenderError(
                f"assistant message {index}: the chat template does not reproduce its content "
                "verbatim, so generated ids cannot be spliced in"
            )
        return segment[:j], segment[j + len(core) :]


def _renderer(tokenizer_or_renderer: Any) -> ChatRenderer:
    if isinstance(tokenizer_or_renderer, ChatRenderer):
        return tokenizer_or_renderer
    return ChatRenderer(tokenizer_or_renderer)


def render_episode(episode: Episode, tokenizer: Any, *, train_text_actions: bool = False) -> TokenSample:
    """The whole episode as one sequence: every turn's generated ids under the mask.

    ``tokenizer`` may be a tokenizer or a :class:`ChatRenderer` (reuse one across calls).
    The final observation (after the last action) is not part of the sequence.
    """
    if episode.meta.get("rendering") == RECORDED:
        return render_recorded(episode)
    r = _renderer(tokenizer)
    if not episode.turns:
        raise RenderError(f"episode {episode.episode_id!r} has no turns to render")
    last = episode.turns[-1]
    messages, action_ids = episode.context(upto=last.index)
    messages.append({"role": "assistant", "content": last.action})
    action_ids.append(last.token_ids)
    out = r.render(messages, action_ids, train_text_actions=train_text_actions)
    logprobs = [0.0] * len(out.ids)
    spans: dict[int, tuple[int, int]] = {}
    allowed: dict[int, list[int]] = {}
    for turn, (start, end), verbatim in zip(episode.turns, out.spans, out.generated, strict=True):
        spans[turn.index] = (start, end)
        if turn.logprobs is not None and turn.token_ids is not None:
            logprobs[start:end] = turn.logprobs
        if verbatim:
            allowed.update(_allowed_at(start, turn))
    return TokenSample(out.ids, out.mask, logprobs, spans, episode.episode_id, -1, allowed)


def render_recorded(episode: Episode) -> TokenSample:
    """The episode as one sequence built from its recorded ids alone: ``prompt_ids + token_ids`` of
    its last turn, every turn's generated ids under the mask.

    For episodes whose conversation is not :meth:`Episode.context`'s shape (tool messages, several
    messages between two actions, raw completions) — what :mod:`turngym.proxy` captures, marked
    ``meta["rendering"] = "recorded"``. Each turn's prompt must extend the previous turn's
    ``prompt_ids + token_ids`` (the proxy starts a new episode where it does not), so the sequence
    holds, verbatim, every prompt the model was conditioned on and every id it sampled.

    Raises:
        RenderError: a turn lacks its ids, or its prompt does not extend the turn before it.
    """
    if not episode.turns:
        raise RenderError(f"episode {episode.episode_id!r} has no turns to render")
    ids: list[int] = []
    spans: dict[int, tuple[int, int]] = {}
    for turn in episode.turns:
        if turn.prompt_ids is None or turn.token_ids is None:
            raise RenderError(f"turn {turn.index} of recorded episode {episode.episode_id!r} lacks its prompt or generated ids")
        if turn.prompt_ids[: len(ids)] != ids:
            raise RenderError(
                f"turn {turn.index} of recorded episode {episode.episode_id!r}: its prompt does not extend the sequence "
                "before it (prompt + generated ids of the previous turn); such a turn starts a new episode"
            )
        ids = list(turn.prompt_ids)
        spans[turn.index] = (len(ids), len(ids) + len(turn.token_ids))
        ids += turn.token_ids
    mask = [0] * len(ids)
    logprobs = [0.0] * len(ids)
    allowed: dict[int, list[int]] = {}
    for turn in episode.turns:
        start, end = spans[turn.index]
        mask[start:end] = [1] * (end - start)
        if turn.logprobs is not None:
            if len(turn.logprobs) != end - start:
                raise RenderError(f"turn {turn.index}: {len(turn.logprobs)} log-probs for {end - start} generated ids")
            logprobs[start:end] = turn.logprobs
        allowed.update(_allowed_at(start, turn))
    return TokenSample(ids, mask, logprobs, spans, episode.episode_id, -1, allowed)


def _allowed_at(start: int, turn: Any) -> dict[int, list[int]]:
    """``position -> allowed ids`` of a constrained turn whose generated ids begin at ``start``."""
    sets = getattr(turn, "allowed_token_ids", None)
    if not sets or turn.token_ids is None:
        return {}
    if len(sets) != len(turn.token_ids):
        raise RenderError(f"turn {turn.index} has {len(sets)} allowed-token sets for {len(turn.token_ids)} generated ids")
    return {start + k: ids for k, ids in enumerate(sets)}


def render_turns(
    episode: Episode, tokenizer: Any, *, history: int | None = None, train_text_actions: bool = False
) -> list[TokenSample]:
    """One sample per turn: the prompt (first observation + last ``history`` turns) + the action.

    With the same ``history`` the rollout used, each sample's prompt ids equal the turn's
    recorded ``prompt_ids`` (what the model saw), and its action ids are the generated ids.
    """
    recorded = episode.meta.get("rendering") == RECORDED
    r = None if recorded else _renderer(tokenizer)
    samples: list[TokenSample] = []
    for turn in episode.turns:
        if recorded:  # the prompt the model saw, whatever the conversation looked like
            if turn.prompt_ids is None or turn.token_ids is None:
                raise RenderError(f"turn {turn.index} of recorded episode {episode.episode_id!r} lacks its prompt or generated ids")
            prompt = list(turn.prompt_ids)
        else:
            assert r is not None
            messages, action_ids = episode.context(upto=turn.index, history=history)
            prompt = r.prompt_ids(messages, action_ids)
        if turn.token_ids is not None:
            body, on = list(turn.token_ids), 1
        else:
            assert r is not None
            body, on = r.encode(turn.action), int(train_text_actions)
        known = turn.logprobs is not None and turn.token_ids is not None
        logprobs = [0.0] * len(prompt) + (list(turn.logprobs) if known else [0.0] * len(body))
        samples.append(
            TokenSample(
                input_ids=prompt + body,
                loss_mask=[0] * len(prompt) + [on] * len(body),
                logprobs=logprobs,
                turn_spans={turn.index: (len(prompt), len(prompt) + len(body))},
                episode_id=episode.episode_id,
                turn=turn.index,
                allowed=_allowed_at(len(prompt), turn),
            )
        )
    return samples
