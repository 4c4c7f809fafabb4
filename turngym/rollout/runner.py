"""Run many episodes in lockstep: one policy call per turn for every active env.

Batching every active env's prompt into one ``policy.act`` call is what makes model rollouts
fast (one batched generation per turn instead of one per env). Scripted agents go through the
same path, so what is measured with them is what runs with models.

Groups: ``group_size=G`` plays G episodes per seed. Episodes of a group reset with the same
seed, so they share the task *and* the initial state (GRPO/GiGPO groups); they differ only by
what the policy samples. Every turn gets a node id unique within its group and its parent's id
(the previous turn; -1 at the root), so linear episodes and tree rollouts
(:func:`turngym.rollout.run_tree`) land in the same turn table.

Where the envs live is a :class:`~turngym.rollout.steppers.Stepper`: pass an env factory for
envs in this process, or a :class:`~turngym.rollout.steppers.RemoteStepper` (env server) or
:class:`~turngym.rollout.ray_stepper.RayStepper` (Ray actors). The schedule is this one
function for all of them, so groups, ids, infrastructure failures and the episodes themselves
are the same wherever the envs run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from turngym.agents.base import Action, AgentInput, Policy
from turngym.core.env import env_action_choices
from turngym.core.errors import ConfigError, InfraError, TurngymError
from turngym.core.infra import INFRA_OUTCOME, env_bug, guarded_step, infra_step
from turngym.rollout.steppers import Stepper, StepResult, as_stepper, task_gold
from turngym.rollout.types import Episode, Turn, group_id

__all__ = [
    "run_episodes", "record_turn", "append_turn", "policy_failure", "failed_step", "new_episode", "unscored_episode", "agent_input",
    "reset_failure",
]


def new_episode(
    env: Any, obs: str, info: dict[str, Any], *, episode_id: str, env_id: str, seed: int | None, group: str,
    gold: str | None = None,
) -> Episode:
    """An empty :class:`Episode` for an env just reset (system prompt and stop strings from the env).

    The task's gold answer (``gold``, else read from a local env) travels with the episode in
    ``meta["gold"]`` for trainers that score against it (IGPO's information gain); the policy
    never sees ``meta``.
    """
    raw = getattr(env, "unwrapped", env)
    gold = gold if gold is not None else task_gold(env)
    return Episode(
        episode_id=episode_id,
        env_id=env_id,
        task_id=info.get("task_id", ""),
        seed=seed,
        initial_observation=obs,
        system_prompt=getattr(raw, "system_prompt", ""),
        group=group,
        meta={} if gold is None else {"gold": gold},
    )


def unscored_episode(group: str, index: int, env_id: str, seed: int | None, why: str, traceback: str | None = None) -> Episode:
    """An episode that never started because the env's infrastructure failed at ``reset``.

    It carries ``meta["infra_error"]`` so summaries and trainers drop it instead of scoring it 0
    (and ``meta["infra_traceback"]`` when the env itself raised: an env bug).
    """
    ep = Episode(f"{group}/{index}", env_id, "", seed, "", group=group)
    ep.outcome = dict(INFRA_OUTCOME)
    ep.meta["infra_error"] = why
    if traceback:
        ep.meta["infra_traceback"] = traceback
    return ep


def reset_failure(exc: Exception, *, where: str = "reset") -> tuple[str, str | None]:
    """``(why, traceback)`` for a ``reset`` (or ``where``: ``snapshot``, ``restore``) that raised
    ``exc``, or re-raise it when it is the caller's.

    An :class:`~turngym.core.errors.InfraError` (the env's host is gone) and an exception
    that is not turngym's (an env bug: ``KeyError`` deep inside a task loader; from a server env,
    :class:`~turngym.server.errors.RemoteEnvError`) end the episode
    unscored; any other turngym error (a ``ConfigError`` or ``TaskError`` for a bad
    ``options={"task": ...}``) is the caller's mistake and is raised, to be fixed.
    """
    from turngym.server.errors import RemoteEnvError  # light: the server's web stack stays unimported

    if isinstance(exc, InfraError):
        return str(exc), None
    if isinstance(exc, TurngymError) and not isinstance(exc, RemoteEnvError):  # RemoteEnvError: an env bug on a server
        raise exc
    return env_bug(exc, where=where)


def agent_input(ep: Episode, env: Any, history: int | None) -> AgentInput:
    """What the policy sees for ``ep``'s next turn (see :meth:`Episode.context`)."""
    messages, action_ids = ep.context(history=history)
    raw = getattr(env, "unwrapped", env)
    return AgentInput(
        messages=messages,
        env=env,
        episode_id=ep.episode_id,
        stop=tuple(getattr(raw, "stop_strings", ())),
        action_token_ids=action_ids,
        max_new_tokens=getattr(raw, "max_new_tokens", None),
        action_prefix=getattr(raw, "action_prefix", ""),
        choices=env_action_choices(env),
    )


def policy_failure(ep: Episode, env: Any, action: Action, prev_key: str) -> StepResult | None:
    """The infra step for ``action`` when the policy's infrastructure failed, else None.

    ``action.meta["infra_error"]`` (the model server was unreachable after retries) means the
    env must not be stepped: the episode ends *unscored*, exactly like an env-side
    :class:`~turngym.core.errors.InfraError`.
    """
    why = action.meta.get("infra_error")
    return None if not why else failed_step(ep, env, f"policy: {why}", prev_key, source="policy")


def failed_step(ep: Episode, env: Any, why: str, prev_key: str, *, source: str = "environment") -> StepResult:
    """The :func:`~turngym.core.infra.infra_step` for ``ep``'s next turn on ``env``."""
    spec = getattr(getattr(env, "unwrapped", env), "reward_spec", None)
    zeros = spec.zeros() if spec is not None else {}
    return infra_step(why, turn=len(ep.turns) + 1, state_key=prev_key, signals=zeros, source=source)


def append_turn(ep: Episode, action: Action, result: StepResult, prev_key: str, *, node: int, parent: int) -> tuple[Turn, bool]:
    """Record the turn that ``action`` produced (``result`` is what the env's ``step`` returned).

    Returns the turn and whether the episode ended. An infrastructure failure changed no state
    anyone observed, so its turn keeps ``prev_key`` whoever reported it (env, client, runner);
    an env bug's traceback (``info["infra_traceback"]``) is kept in ``ep.meta["infra_traceback"]``.
    """
    obs, reward, term, trunc, info = result
    if info.get("infra_traceback"):
        ep.meta["infra_traceback"] = info["infra_traceback"]
    infra = info["infra_error"]
    turn = Turn(
        index=len(ep.turns),
        action=action.text,
        observation=obs,
        reward=reward,
        terminated=term,
        truncated=trunc,
        signals=info["signals"],
        state_key=prev_key if infra else info["state_key"],
        prev_state_key=prev_key,
        action_valid=info["action_valid"],
        invalid_reason=info["invalid_reason"],
        infra_error=infra,
        token_ids=action.token_ids,
        logprobs=action.logprobs,
        prompt_ids=action.prompt_ids,
        allowed_token_ids=action.allowed_token_ids,
        policy_version=action.meta.get("policy_version"),
        node=node,
        parent=parent,
    )
    ep.turns.append(turn)
    if term or trunc:
        ep.outcome = info.get("outcome", {})
    return turn, term or trunc


def record_turn(ep: Episode, env: Any, action: Action, prev_key: str, *, node: int, parent: int) -> tuple[Turn, bool]:
    """Step ``env`` with ``action`` (unless the policy's infrastructure failed) and record the turn.

    One env, one turn: for code that drives a single env itself (engine integrations). An
    exception out of ``env.step`` is an env bug: the turn is an infra error with its traceback.
    """
    result = policy_failure(ep, env, action, prev_key) or guarded_step(env, action.text)
    return append_turn(ep, action, result, prev_key, node=node, parent=parent)


def run_episodes(
    envs: Callable[[], Any] | Stepper,
    policy: Policy,
    seeds: Sequence[int],
    *,
    batch_size: int = 32,
    group_size: int = 1,
    history: int | None = None,
    env_id: str = "",
    tasks: Sequence[Any] | None = None,
    on_episode: Callable[[Episode], None] | None = None,
    on_turn: Callable[[Episode, Turn], None] | None = None,
) -> list[Episode]:
    """Play ``group_size`` episodes per seed with ``policy``, ``batch_size`` envs in lockstep.

    Args:
        envs: an env factory (``lambda: turngym.make(env_id)``; called ``min(batch_size,
            episodes)`` times, envs are reused), or a :class:`~turngym.rollout.steppers.Stepper`
            holding the envs elsewhere (an env server, Ray actors).
        policy: any :class:`~turngym.agents.base.Policy`.
        seeds: one reset seed per group; same seeds + same policy ⇒ same episodes, on any stepper.
        batch_size: envs stepped together (one ``policy.act`` call per turn for all of them).
        group_size: episodes per seed, sharing the task and initial state (``Episode.group``).
        history: turns of history in each prompt (None: all; k: the first observation plus
            the last k turns, verl-agent style). Render training samples with the same k.
        env_id: names the episodes and groups (:func:`~turngym.rollout.types.group_id`).
        tasks: optional task (or task id) per seed, passed as ``options={"task": ...}``.
        on_episode: called as each episode finishes (progress bars, streaming writers).
        on_turn: called after every turn (progress on long lockstep runs, where all episodes
            tend to finish together).

    A policy with an ``end_episode(episode)`` method is told as each episode ends (the openai
    agent reports the outcome to a turngym capture proxy then).

    Returns:
        The episodes in order: group by group, ``group_size`` consecutive episodes per seed.

    An env whose ``reset`` raises :class:`~turngym.core.errors.InfraError` (a remote env whose
    server is down, a dead Ray actor) yields an unscored episode with ``meta["infra_error"]``
    and the rollout goes on; infra errors during a step arrive as ``info["infra_error"]`` like
    any other, and so does a policy whose model server failed (``Action.meta["infra_error"]``).
    An env *bug* (any exception out of one env's ``reset`` or ``step`` that is not a turngym
    error) ends that one episode the same way, with the traceback in
    ``meta["infra_traceback"]``; the batch goes on. Bound how many a run accepts with
    :func:`~turngym.rollout.metrics.check_infra_error_rate`.
    """
    if tasks is not None and len(tasks) != len(seeds):
        raise ConfigError(f"got {len(tasks)} tasks for {len(seeds)} seeds; pass one task per seed")
    if group_size < 1 or batch_size < 1:
        raise ConfigError(f"group_size and batch_size must be >= 1, got {group_size}, {batch_size}")
    stepper = as_stepper(envs)
    jobs = [(s, g) for s in range(len(seeds)) for g in range(group_size)]
    results: list[Episode | None] = [None] * len(jobs)
    if not jobs:
        return []
    node_counter: dict[str, int] = {}
    queue = deque(range(len(jobs)))  # jobs not started yet; a dead slot's job goes back to the front
    # slot -> (job index, episode, previous state key, last node id)
    active: dict[int, tuple[int, Episode, str, int]] = {}
    dead: dict[int, str] = {}  # retired slots and why
    idle: set[int] = set()  # live slots whose last reset failed: each tries the next job after the next turn

    end_episode = getattr(policy, "end_episode", None)  # optional: a policy that reports outcomes (a capture proxy's)

    def finish(j: int, ep: Episode) -> None:
        results[j] = ep
        if end_episode is not None:
            end_episode(ep)
        if on_episode is not None:
            on_episode(ep)

    def unscored(j: int, why: str, tb: str | None = None) -> None:
        s, g = jobs[j]
        finish(j, unscored_episode(group_id(env_id, seeds[s]), g, env_id, seeds[s], why, tb))

    def start(slot: int) -> None:
        while queue:
            j = queue.popleft()
            s, g = jobs[j]
            options = {"task": tasks[s]} if tasks is not None else None
            try:
                obs, info, gold = stepper.reset(slot, seeds[s], options)
            except Exception as exc:  # a remote env's server is gone, an env bug: record it, go on
                why, tb = reset_failure(exc)
                if not stepper.alive(slot):  # the slot is gone for good: retire it, the job waits for a live one
                    dead[slot] = why
                    queue.appendleft(j)
                    return
                # one job per turn, not the whole queue: a server that is restarting must not unscore every
                # job left in the time the other slots play one turn
                unscored(j, why, tb)
                idle.add(slot)
                return
            group = group_id(env_id, seeds[s], None if tasks is None else info.get("task_id", s))
            ep = new_episode(
                stepper.env(slot), obs, info, episode_id=f"{group}/{g}", env_id=env_id, seed=seeds[s], group=group,
                gold=gold,
            )
            active[slot] = (j, ep, info["state_key"], -1)
            return

    stepper.open(min(batch_size, len(jobs)))
    try:
        for slot in range(min(batch_size, len(jobs))):
            start(slot)
        while True:
            for slot in sorted(idle):
                idle.discard(slot)
                start(slot)
            if not active:
                if queue and idle:  # only slots whose resets fail are left: each takes (and ends) a job per pass
                    continue
                break
            slots = list(active)
            actions = policy.act([agent_input(active[s][1], stepper.env(s), history) for s in slots])
            if len(actions) != len(slots):
                raise ConfigError(
                    f"{getattr(policy, 'name', policy)!r} returned {len(actions)} actions for {len(slots)} inputs"
                )
            stepped: dict[int, StepResult] = {}
            for slot, action in zip(slots, actions, strict=True):
                failed = policy_failure(active[slot][1], stepper.env(slot), action, active[slot][2])
                if failed is not None:
                    stepped[slot] = failed
            todo = [(slot, a.text) for slot, a in zip(slots, actions, strict=True) if slot not in stepped]
            stepped.update(zip([slot for slot, _ in todo], stepper.step(todo), strict=True))
            for slot, action in zip(slots, actions, strict=True):
                j, ep, prev_key, parent = active[slot]
                node = node_counter.get(ep.group, 0)
                node_counter[ep.group] = node + 1
                turn, ended = append_turn(ep, action, stepped[slot], prev_key, node=node, parent=parent)
                if on_turn is not None:
                    on_turn(ep, turn)
                if ended:
                    del active[slot]
                    finish(j, ep)
                    start(slot)
                else:
                    active[slot] = (j, ep, turn.state_key, node)
        for j in queue:  # every slot died: what is left cannot be played here
            unscored(j, f"no live env slot left ({len(dead)} retired; the last: {list(dead.values())[-1]})")
    finally:
        stepper.close()
    return [ep for ep in results if ep is not None]
