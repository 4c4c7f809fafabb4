"""``turngym/Tools-v0``: multi-turn tool calling against stateful APIs, state-checked every turn."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from turngym.core.env import Transition, TurngymEnv
from turngym.core.errors import ConfigError, TaskError
from turngym.core.hashing import state_hash
from turngym.core.parsing import ToolCall
from turngym.core.spec import RewardSpec, Signal
from turngym.envs.tools import MAX_TURNS
from turngym.envs.tools.backend import Backend
from turngym.envs.tools.oracle import oracle_message
from turngym.envs.tools.parsing import Reply, parse_message
from turngym.envs.tools.schema import Tool, check_structure, oversized_integer, validate_arguments
from turngym.envs.tools.state import FlatState, flat_key
from turngym.envs.tools.store import STORE_TOOLS, StoreBackend
from turngym.envs.tools.tasks import ORDER_STATUSES, STORE_ID_PREFIX, ToolsTask, generate_store_task, store_task_from_id
from turngym.envs.tools.verifier import GoldTrace, call_key, missing_answers, missing_results, progress, replay_gold

__all__ = ["ToolsEnv", "ToolsState", "SOURCES", "make_backend"]

SOURCES = ("store", "bfcl")

SYSTEM_PROMPT = """\
You are a helpful assistant that acts through tools. Each of your messages is either tool calls or a reply to the user.
To call a tool, write JSON: {"name": "TOOL", "arguments": {...}}. For several calls in order, write a JSON list of them
(or one <tool_call>{...}</tool_call> block per call). Each result comes back in a <tool_response> block.
To reply to the user, write plain text with no tool call: that ends your turn, and the user answers (or the
conversation ends). Put any facts the user asked for in that reply. Follow the tools' policies.
The tools you may use are listed in <tools> blocks; new ones may be added during the conversation.
Example:
User: Where is my order O1003? My email is ann@example.com.
You: [{"name": "identify_customer", "arguments": {"email": "ann@example.com"}}, {"name": "get_order", "arguments": {"order_id": "O1003"}}]
Reply: <tool_response> ... </tool_response> <tool_response> {"status": "shipped", ...} </tool_response>
You: Your order O1003 has shipped."""

_STORE_TOOLS = {t["function"]["name"]: t for t in STORE_TOOLS}
#: Gold replays kept per env: all 800 BFCL tasks fit (about 50 MB), generated store tasks rotate.
_GOLD_CACHE_SIZE = 1024


def make_backend(task: ToolsTask) -> Backend:
    """A fresh backend in the task's initial state."""
    if task.source == "store":
        return StoreBackend(task.initial)
    if task.source == "bfcl":
        from turngym.envs.tools.bfcl import BfclBackend

        return BfclBackend.create(task)
    raise TaskError(f"task {task.id!r} has unknown source {task.source!r}; expected one of {SOURCES}")


@dataclass
class ToolsState:
    """Everything that changes during an episode (snapshotted as a whole).

    Attributes:
        backend: the live API state.
        turn: index of the current user turn.
        calls_in_turn: calls executed during this user turn.
        results: the result text of every executed call this episode (BFCL's response rule
            looks across turns).
        verdicts: the per-turn verdict of every finished user turn.
        public: flat public state (cached after each call message).
        world_key: hash of the full flat state (cached likewise).
        progress: the DB-diff potential of ``public``.
    """

    backend: Backend
    turn: int = 0
    calls_in_turn: int = 0
    results: list[str] = field(default_factory=list)
    verdicts: list[bool] = field(default_factory=list)
    answered: list[float] = field(default_factory=list)
    public: FlatState = field(default_factory=dict)
    world_key: str = ""
    progress: float = 0.0


class ToolsEnv(TurngymEnv[ToolsTask, ToolsState | None]):
    """Multi-turn tool calling against stateful APIs, with BFCL's per-turn state check.

    ## Description
    A simulated user makes requests over several turns; the agent serves them by calling tools
    (JSON-schema functions in the OpenAI format) that read and write a stateful backend. After
    every user turn the env compares the world with the gold world (the state the gold calls
    produce) — BFCL's multi-turn rule — so each turn carries a verifiable verdict, not only the
    episode. Two sources: **BFCL v4 multi-turn** (800 real tasks on BFCL's own backends: file
    system, vehicle, trading, travel, messaging, posting, tickets, math; needs ``bfcl-eval``)
    and a generated **online store** (customers, orders, inventory, returns) whose tools enforce
    policy, τ-bench style.

    ## Task Distribution
    ``sources`` picks uniformly among the given sources, then a task: a fresh store task from a
    seed, or one of the BFCL tasks of ``categories`` (``base``, ``long_context``,
    ``miss_func``, ``miss_param``). ``tasks`` replaces both with a fixed list.

    ## Action Space
    Text, either **tool calls** — ``{"name": ..., "arguments": {...}}``, a JSON list of them
    (executed in order), or ``<tool_call>{...}</tool_call>`` blocks — or a **reply** to the user
    (text without tool calls), which ends the agent's turn: the next user message follows, or
    the episode ends after the last one. This is BFCL's rule (a response with no function call
    ends the turn) and τ-bench's (the user speaks after the agent's message).
    Valid: ``[{"name": "cd", "arguments": {"folder": "document"}}]``, ``The file is moved.``
    Invalid (nothing runs, the observation says why): a broken call (``{"name": "cd",``), an
    unknown or unavailable tool, unknown or missing arguments, and — store only — argument
    types or values that break the schema. BFCL variants execute type mismatches as BFCL's
    harness does (its ground truth itself has one); ``call_valid`` is 0 for them.

    ## Observation
    On reset: the available tools (a ``<tools>`` block, one JSON function per line) and the
    first user message. After tool calls: one ``<tool_response>`` block per call with its
    result. After a reply: the next user message, with a ``<tools>`` block first when new tools
    became available (BFCL miss_func). ``env.tools`` lists the current tools in OpenAI format
    for chat templates with native tool calling.

    ## Rewards
    Outcome: 1 if every user turn passed (so the final state equals the gold state and every
    required answer was given), else 0.

    | signal | range | emitted when | meaning |
    |---|---|---|---|
    | call_valid | 0–1 | call messages | every call parsed, names an offered tool and matches its schema |
    | exec_ok | 0–1 | call messages | fraction of the calls that ran without an error |
    | forbidden_action | 0–1 | call messages | a call the policy refused, or a tool not offered (held out / excluded) |
    | unneeded_call | 0–1 | call messages | fraction of calls that were not needed (see below) |
    | progress | 0–1 | every turn | DB-diff potential: share of the initial→goal difference achieved |
    | state_match | 0–1 | replies | the state equals the gold state after this user turn |
    | answers_given | 0–1 | replies | share of required answers given (BFCL: gold results among the agent's) |
    | turn_passed | 0–1 | replies | BFCL's per-turn verdict: calls made if gold has any, state match, answers |

    A call is *needed* if it is a gold call of this or a later turn, or returned a gold result
    of this turn, or the message it was in raised ``progress``. On a user turn whose gold is
    empty (BFCL miss_func / miss_param: the right move is to ask or decline) ``turn_passed`` is
    1, as BFCL checks nothing there; ``state_match`` still says whether the world was changed.

    ## Starting State
    The task's initial world (BFCL's ``initial_config`` loaded into its classes exactly as
    BFCL's executor does; the store's generated database), no customer identified.

    ## Episode End
    Terminated after the reply that ends the last user turn; truncated after ``max_turns``
    messages (default 40).

    ## Arguments
    ``sources`` (``("store", "bfcl")``), ``categories`` (BFCL subsets), ``tasks`` (a fixed
    list of :class:`ToolsTask` or ids), ``strict_types`` (default: True for the store, False
    for BFCL), plus the base class's ``max_turns`` and invalid-action options.

    >>> import turngym
    >>> env = turngym.make("turngym/Tools-Store-v0")
    >>> obs, info = env.reset(seed=0)
    >>> obs, reward, terminated, truncated, info = env.step(env.oracle_action())
    >>> info["signals"]["call_valid"], info["signals"]["exec_ok"]
    (1.0, 1.0)
    >>> obs, reward, terminated, truncated, info = env.step(env.oracle_action())
    >>> info["signals"]["turn_passed"]
    1.0

    ## Oracle
    Sends all gold calls of the current turn in one message, then replies with the required
    answers.

    ## Version History
    * v0: initial release (BFCL v4 multi-turn, 800 tasks; generated online store).
    """

    reward_spec = RewardSpec(
        signals=(
            Signal(
                "call_valid",
                0,
                1,
                "verifiable",
                "every call of the message parsed, names an offered tool and matches its JSON schema",
                weight=0.05,
            ),
            Signal(
                "exec_ok",
                0,
                1,
                "verifiable",
                "fraction of the message's calls that executed without an error",
                weight=0.05,
            ),
            Signal(
                "forbidden_action",
                0,
                1,
                "verifiable",
                "a call the policy forbids was attempted (refused store action, or a tool not offered)",
                weight=-0.2,
            ),
            Signal(
                "unneeded_call",
                0,
                1,
                "verifiable",
                "fraction of the message's calls that were not needed (no gold call, no gold result, no progress)",
                weight=-0.02,
            ),
            Signal(
                "progress",
                0,
                1,
                "verifiable",
                "DB-diff potential: 1 - |diff(state, goal)| / |diff(initial, goal)| over the compared state",
                weight=0.5,
                potential=True,
            ),
            Signal(
                "state_match",
                0,
                1,
                "verifiable",
                "at the end of a user turn: the state equals the gold state after that turn",
            ),
            Signal(
                "answers_given",
                0,
                1,
                "verifiable",
                "at the end of a user turn: share of the required answers given (BFCL: gold results among the agent's)",
            ),
            Signal(
                "turn_passed",
                0,
                1,
                "verifiable",
                "at the end of a user turn: BFCL's per-turn verdict (calls made if needed, state match, answers)",
                weight=0.2,
            ),
        ),
        outcome="1 if every user turn passed BFCL's per-turn check (final state = gold, all answers given), else 0",
    )
    default_max_turns = MAX_TURNS
    task_type = ToolsTask
    system_prompt = SYSTEM_PROMPT
    stop_strings = ("</tool_call>",)  # one <tool_call> block per message when the model uses that form
    max_new_tokens = 160  # a JSON list of a few calls, or a short reply to the user

    def __init__(
        self,
        *,
        sources: Sequence[str] = SOURCES,
        categories: Sequence[str] | None = None,
        tasks: Sequence[ToolsTask | str] | None = None,
        strict_types: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        sources = tuple(sources)
        bad = [s for s in sources if s not in SOURCES]
        if not sources or bad:
            raise ConfigError(f"sources must be a non-empty subset of {SOURCES}, got {sources!r}")
        self.sources = sources
        self.strict_types = strict_types
        self._bfcl_tasks: tuple[ToolsTask, ...] = ()
        if "bfcl" in sources and tasks is None:
            from turngym.envs.tools.bfcl import BFCL_CATEGORIES, load_bfcl_tasks

            cats = tuple(categories) if categories is not None else BFCL_CATEGORIES
            unknown = [c for c in cats if c not in BFCL_CATEGORIES]
            if not cats or unknown:
                raise ConfigError(f"categories must be a non-empty subset of {BFCL_CATEGORIES}, got {cats!r}")
            self._bfcl_tasks = load_bfcl_tasks(cats)
        self._set_task_pool(None if tasks is None else [t if isinstance(t, ToolsTask) else self._task_from_id(t) for t in tasks])
        self._gold: OrderedDict[str, tuple[ToolsTask, GoldTrace]] = OrderedDict()
        self._tool_cache: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[str, Tool]] = {}
        self.state = None

    # -- tasks -------------------------------------------------------------------------------
    def _generate_task(self, rng: np.random.Generator) -> ToolsTask:
        source = self.sources[int(rng.integers(len(self.sources)))]
        if source == "store":
            return generate_store_task(int(rng.integers(1 << 31)))
        return self._bfcl_tasks[int(rng.integers(len(self._bfcl_tasks)))]

    def _regenerate_task(self, task_id: str) -> ToolsTask:
        if task_id.startswith(STORE_ID_PREFIX):
            return store_task_from_id(task_id)
        if task_id.startswith("bfcl/"):
            from turngym.envs.tools.bfcl import bfcl_task

            return bfcl_task(task_id)
        raise TaskError(f"unknown tools task id {task_id!r}; expected 'tools/store/SEED' or 'bfcl/multi_turn_base_0'")

    def gold_trace(self, task: ToolsTask) -> GoldTrace:
        """The task's gold replay (cached per task id; recomputed if a different task reuses the id)."""
        hit = self._gold.get(task.id)
        if hit is not None and (hit[0] is task or hit[0] == task):
            self._gold.move_to_end(task.id)
            return hit[1]
        trace = replay_gold(task, make_backend)
        self._gold[task.id] = (task, trace)
        if len(self._gold) > _GOLD_CACHE_SIZE:
            self._gold.popitem(last=False)
        return trace

    # -- tools -------------------------------------------------------------------------------
    def _all_tools(self, task: ToolsTask, *, include_excluded: bool = False) -> dict[str, Tool]:
        if task.source == "store":
            return _STORE_TOOLS
        key = (task.classes, () if include_excluded else task.excluded)
        tools = self._tool_cache.get(key)
        if tools is None:
            from turngym.envs.tools.bfcl import bfcl_tools

            tools = self._tool_cache[key] = bfcl_tools(task, include_excluded=include_excluded)
        return tools

    def _hidden(self, task: ToolsTask, turn: int) -> frozenset[str]:
        return frozenset(name for k, names in task.missed.items() if int(k) > turn for name in names)

    def available_tools(self, task: ToolsTask | None = None, turn: int | None = None) -> dict[str, Tool]:
        """The tools offered at ``turn`` of ``task`` (default: now), by name."""
        task = task or self.task
        if task is None:
            return {}
        turn = self.state.turn if turn is None and self.state is not None else (turn or 0)
        tools = self._all_tools(task)
        hidden = self._hidden(task, min(turn, task.n_turns - 1))
        return {n: t for n, t in tools.items() if n not in hidden} if hidden else tools

    @property
    def tools(self) -> list[Tool]:
        """The tools offered now, in OpenAI format (for chat templates with native tools)."""
        return list(self.available_tools().values())

    @staticmethod
    def _render_tools(tools: Mapping[str, Tool]) -> str:
        lines = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools.values())
        return f"<tools>\n{lines}\n</tools>"

    # -- episode -----------------------------------------------------------------------------
    def _reset(self, task: ToolsTask, options: Mapping[str, Any]) -> str:
        if not task.turns or len(task.gold) != task.n_turns:
            raise TaskError(f"task {task.id!r} needs one gold call tuple per user turn")
        gold = self.gold_trace(task)
        self.state = ToolsState(backend=gold.initial.copy())
        self._refresh(gold)
        return f"{self._render_tools(self.available_tools(task, 0))}\n\nUser: {task.turns[0]}"

    def _refresh(self, gold: GoldTrace) -> None:
        st = self.state
        assert st is not None
        public, private = st.backend.flat()
        st.public = public
        st.world_key = flat_key(public, private)
        st.progress = progress(public, gold)

    def _strict(self, task: ToolsTask) -> bool:
        return self.strict_types if self.strict_types is not None else task.source != "bfcl"

    def _state_signals(self) -> dict[str, float]:
        assert self.state is not None
        return {"progress": self.state.progress}

    def _step(self, action: str) -> Transition:
        parsed = parse_message(action)
        if not parsed.ok:
            return self._invalid(f"invalid tool call: {parsed.error}", parsed.error or "", forbidden=False)
        assert parsed.value is not None
        if isinstance(parsed.value, Reply):
            return self._end_turn(parsed.value.text)
        return self._call(self.current_task, parsed.value)

    def _invalid(self, obs: str, reason: str, *, forbidden: bool) -> Transition:
        st = self.state
        assert st is not None
        return Transition(
            obs=f'{obs}\nNothing was executed. Call tools as JSON {{"name": ..., "arguments": {{...}}}} '
            "(a list for several), or reply in plain text to end your turn.",
            valid=False,
            invalid_reason=reason,
            signals={"forbidden_action": 1.0 if forbidden else 0.0},
        )

    def _call(self, task: ToolsTask, calls: tuple[ToolCall, ...]) -> Transition:
        st = self.state
        assert st is not None
        available = self.available_tools()
        everything = self._all_tools(task, include_excluded=True)
        strict = self._strict(task)
        errors: list[str] = []
        forbidden = False
        schema_ok = True
        for i, c in enumerate(calls, 1):
            tool = available.get(c.name)
            if tool is None:
                hidden = everything.get(c.name)
                if hidden is None:
                    errors.append(f"call {i}: unknown tool {c.name!r}; available: {', '.join(available)}")
                    continue
                forbidden = True
                if strict:
                    errors.append(f"call {i}: tool {c.name!r} is not available to you")
                    continue
                # BFCL's executor runs any method of the involved classes, offered or not (its
                # ground truth calls a held-out function once): run it, flagged.
                schema_ok = False
                tool = hidden
            huge = oversized_integer(c.arguments)
            if huge is not None:  # refused even where type mismatches run (BFCL): no tool takes such numbers
                errors.append(f"call {i} ({c.name}): {huge}")
                continue
            params = tool["function"]["parameters"]
            problem = validate_arguments(c.arguments, params)
            if problem is None:
                continue
            if strict or check_structure(c.arguments, params) is not None:
                errors.append(f"call {i} ({c.name}): {problem}")
            else:
                schema_ok = False  # a type mismatch, executed anyway (BFCL compatibility)
        if errors:
            return self._invalid("Invalid tool call(s):\n" + "\n".join(errors), "; ".join(errors), forbidden=forbidden)

        gold = self.gold_trace(task)
        turn = min(st.turn, task.n_turns - 1)
        before = st.progress
        outputs: list[str] = []
        contents: list[str] = []
        n_ok = 0
        for c in calls:
            res = st.backend.call(c.name, c.arguments)
            st.results.append(res.content)
            contents.append(res.content)
            forbidden = forbidden or res.forbidden
            n_ok += not res.error
            outputs.append(
                "<tool_response>\n"
                + json.dumps({"name": c.name, "content": res.content}, ensure_ascii=False)
                + "\n</tool_response>"
            )
        st.calls_in_turn += len(calls)
        self._refresh(gold)
        gained = st.progress > before
        gold_results = set(gold.results[turn])
        needed_keys = gold.keys[turn]
        unneeded = sum(
            1
            for c, content in zip(calls, contents)
            if not gained and content not in gold_results and call_key(c.name, c.arguments) not in needed_keys
        )
        return Transition(
            obs="\n".join(outputs),
            signals={
                "call_valid": 1.0 if schema_ok else 0.0,
                "exec_ok": n_ok / len(calls),
                "forbidden_action": 1.0 if forbidden else 0.0,
                "unneeded_call": unneeded / len(calls),
            },
        )

    def _end_turn(self, message: str) -> Transition:
        st, task = self.state, self.current_task
        assert st is not None
        gold = self.gold_trace(task)
        k = st.turn
        state_match = st.backend.same_state(gold.states[k])
        required = list(gold.results[k]) if task.check_results else list(task.answers[k])
        if task.check_results:
            missing = missing_results(gold.results[k], st.results)
        else:
            missing = missing_answers(task.answers[k], message, kinds=(ORDER_STATUSES,), context=task.turns[k])
        answered = 1.0 - len(missing) / len(required) if required else 1.0
        if task.gold[k]:
            passed = state_match and not missing and st.calls_in_turn > 0
        else:  # BFCL checks nothing on a turn whose gold is empty (state_match still reports the state)
            passed = True
        st.verdicts.append(passed)
        st.answered.append(answered)
        st.turn += 1
        st.calls_in_turn = 0
        signals = {
            "state_match": 1.0 if state_match else 0.0,
            "answers_given": answered,
            "turn_passed": 1.0 if passed else 0.0,
        }
        if st.turn >= task.n_turns:
            success = all(st.verdicts)
            return Transition(
                obs=f"The conversation is over: {sum(st.verdicts)}/{task.n_turns} turns done as requested.",
                terminated=True,
                signals=signals,
                outcome=self._outcome(success, final_state_match=state_match),
            )
        nxt = task.turns[st.turn]
        new_tools = {n: t for n, t in self.available_tools().items() if n not in self.available_tools(task, k)}
        obs = f"{self._render_tools(new_tools)}\n\nUser: {nxt}" if new_tools else f"User: {nxt}"
        return Transition(obs=obs, signals=signals)

    def _outcome(self, success: bool, *, final_state_match: bool, reason: str = "completed") -> dict[str, Any]:
        st, task = self.state, self.current_task
        assert st is not None
        return {
            "reward": 1.0 if success else 0.0,
            "success": success,
            "reason": reason,
            "turns_passed": sum(st.verdicts) / task.n_turns,
            "turn_verdicts": list(st.verdicts),
            "final_state_match": final_state_match,
            "answers_given": sum(st.answered) / task.n_turns,
            "source": task.source,
            "category": task.category,
        }

    def _outcome_on_truncation(self) -> dict[str, Any]:
        st = self.state
        assert st is not None
        final = st.backend.same_state(self.gold_trace(self.current_task).states[-1])
        return self._outcome(False, final_state_match=final, reason="max_turns")

    def _state_key(self) -> str:
        """The world (public and private state), the user turn, and what the verdict still needs.

        Beyond the world, two episodes can only continue alike if they are at the same user
        turn, agree on whether a call was made in it, on which of its gold results are still
        missing (BFCL's response rule) and on whether every earlier turn passed.
        """
        st, task = self.state, self.task
        if st is None or task is None:
            return state_hash("empty")
        pending: tuple[str, ...] = ()
        if task.check_results and st.turn < task.n_turns:
            pending = tuple(sorted(missing_results(self.gold_trace(task).results[st.turn], st.results)))
        return state_hash((st.world_key, st.turn, st.calls_in_turn > 0, pending, all(st.verdicts)))

    def _get_state(self) -> ToolsState:
        st = self.state
        assert st is not None
        return ToolsState(
            backend=st.backend.copy(),
            turn=st.turn,
            calls_in_turn=st.calls_in_turn,
            results=list(st.results),
            verdicts=list(st.verdicts),
            answered=list(st.answered),
            public=st.public,  # replaced, never mutated, by _refresh
            world_key=st.world_key,
            progress=st.progress,
        )

    def _set_state(self, payload: ToolsState | None) -> None:
        assert payload is not None  # _get_state never snapshots a missing state
        self.state = ToolsState(
            backend=payload.backend.copy(),
            turn=payload.turn,
            calls_in_turn=payload.calls_in_turn,
            results=list(payload.results),
            verdicts=list(payload.verdicts),
            answered=list(payload.answered),
            public=payload.public,
            world_key=payload.world_key,
            progress=payload.progress,
        )

    # -- scripted policies -------------------------------------------------------------------
    def _oracle_action(self) -> str:
        st, task = self.state, self.current_task
        if st is None or st.turn >= task.n_turns:
            return "Done."
        return oracle_message(task, st.turn, st.calls_in_turn)

    def sample_action(self, rng: np.random.Generator) -> str:
        """A random call to a random offered tool with random arguments, or (20%) a reply."""
        tools = list(self.available_tools().values()) or list(_STORE_TOOLS.values())
        if rng.random() < 0.2:
            return str(rng.choice(["OK, done.", "Could you tell me more?", "I can't do that, sorry."]))
        tool = tools[int(rng.integers(len(tools)))]["function"]
        params = tool["parameters"]
        required = set(params.get("required") or ())
        args = {
            name: _random_value(spec, rng)
            for name, spec in params.get("properties", {}).items()
            if name in required or rng.random() < 0.3
        }
        return json.dumps({"name": tool["name"], "arguments": args})


_WORDS = ("temp", "report.txt", "document", "O1001", "C01", "mug", "alice", "NYC", "ticket", "42", "..")


def _random_value(spec: Mapping[str, Any], rng: np.random.Generator) -> Any:
    if "enum" in spec:
        return spec["enum"][int(rng.integers(len(spec["enum"])))]
    typ = spec.get("type")
    if typ == "integer":
        return int(rng.integers(0, 20))
    if typ == "number":
        return float(rng.integers(0, 200)) / 2
    if typ == "boolean":
        return bool(rng.integers(2))
    if typ == "array":
        item = spec.get("items") or {"type": "string"}
        return [_random_value(item, rng) for _ in range(int(rng.integers(0, 3)))]
    if typ == "object":
        props = spec.get("properties") or {}
        return {k: _random_value(v, rng) for k, v in props.items()}
    return str(_WORDS[int(rng.integers(len(_WORDS)))])
