"""Asynchronous training: the version schedule, the weight board, prefix IS, and whole runs."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_run import TIMING_FIELDS, metric_rows, tiny_config  # noqa: E402

import turngym  # noqa: E402
from turngym.agents import OracleAgent  # noqa: E402
from turngym.core.errors import ConfigError  # noqa: E402
from turngym.rollout import run_episodes, to_turn_table  # noqa: E402
from turngym.trainers import TrainConfig, Trainer  # noqa: E402
from turngym.trainers.asynchronous import (  # noqa: E402
    RolloutWorker,
    VersionedPolicy,
    WeightBoard,
    WorkerStopped,
    staleness_stats,
    trainable_tensors,
)
from turngym.trainers.losses import prefix_behaviour  # noqa: E402

_ASYNC_TIMING = (*TIMING_FIELDS, "queue_wait_s", "swap_wait_s")


def _versions_board(model: torch.nn.Module, n: int) -> WeightBoard:
    """Versions 0..n-1 of ``model``: version v has every weight equal to v."""
    board = WeightBoard(keep=n)
    for v in range(n):
        board.publish(v, {name: torch.full_like(p, float(v)) for name, p in model.named_parameters()})
    return board


def test_partial_rollouts_move_in_flight_episodes_to_the_new_version_at_the_scheduled_call() -> None:
    model = torch.nn.Linear(2, 2)  # stands in for the worker's LM: only its weights are swapped
    board = _versions_board(model, 3)
    policy = VersionedPolicy(model, board, lambda seed: OracleAgent())
    policy.begin(seed=0, start=1, swap_to=2, swap_call=1)
    env = lambda: turngym.make("turngym/Math-v0", min_steps=2, max_steps=2)  # noqa: E731  (3 turns: calc, calc, answer)
    episodes = run_episodes(env, policy, [0, 1], group_size=2, env_id="turngym/Math-v0")
    assert all(len(ep.turns) == 3 for ep in episodes)
    # every episode was in flight at the swap: its first turn is version 1's, the rest version 2's
    assert [[t.policy_version for t in ep.turns] for ep in episodes] == [[1, 2, 2]] * 4
    assert float(model.weight.detach()[0, 0]) == 2.0  # the worker's weights are version 2's now
    table = to_turn_table(episodes)
    assert table["policy_version"].tolist() == [1, 2, 2] * 4
    stats = staleness_stats(episodes, version=2)
    assert stats["versions_per_batch"] == 2 and stats["mixed_version_episodes"] == 4 and stats["staleness_max"] == 1


def test_the_worker_waits_at_the_safe_point_until_the_learner_publishes() -> None:
    model = torch.nn.Linear(2, 2)
    board = WeightBoard(keep=2)
    board.publish(0, trainable_tensors(model))
    later = {name: torch.full_like(p, 7.0) for name, p in model.named_parameters()}
    policy = VersionedPolicy(model, board, lambda seed: OracleAgent())
    policy.begin(seed=0, start=0, swap_to=1, swap_call=1)
    timer = threading.Timer(0.3, board.publish, args=(1, later))
    timer.start()
    eps = run_episodes(lambda: turngym.make("turngym/Math-v0", min_steps=1, max_steps=1), policy, [3], env_id="m")
    timer.join()
    assert [t.policy_version for t in eps[0].turns] == [0, 1] and policy.wait_s >= 0.2
    board.close()
    with pytest.raises(WorkerStopped):
        board.get(5)


def test_a_worker_failure_reaches_the_learner() -> None:
    model = torch.nn.Linear(2, 2)
    board = _versions_board(model, 1)

    def play(step: int, policy: VersionedPolicy) -> list:
        raise RuntimeError("env exploded")

    worker = RolloutWorker(play, VersionedPolicy(model, board, lambda seed: OracleAgent()), lambda s: s, first=0, steps=2, lag=1, swap_call=1)
    worker.start()
    with pytest.raises(RuntimeError, match="env exploded"):
        worker.next_batch(0)
    worker.stop()


def test_prefix_behaviour_weights_each_token_by_the_ratio_of_its_whole_prefix() -> None:
    old = torch.tensor([[0.0, -1.0, -2.0, -1.0, -0.5]])
    behaviour = torch.tensor([[0.0, -1.5, -2.0, -0.5, -0.5]])
    mask = torch.tensor([[0.0, 1.0, 0.0, 1.0, 1.0]])  # position 2 is an observation token: no ratio
    w = torch.exp(old - prefix_behaviour(old, behaviour, mask))
    expected = torch.tensor([[1.0, np.exp(0.5), np.exp(0.5), np.exp(0.5 - 0.5), np.exp(0.0)]], dtype=w.dtype)
    assert torch.allclose(w, expected)


def test_async_config_errors_say_the_fix() -> None:
    with pytest.raises(ConfigError, match="stale_policy"):
        TrainConfig(stale_policy="skip")
    with pytest.raises(ConfigError, match="async_is"):
        TrainConfig(async_is="sequence")
    with pytest.raises(ConfigError, match="async_lag"):
        TrainConfig(async_lag=0)
    with pytest.raises(ConfigError, match="drop --engine vllm or --async"):
        TrainConfig(async_rollouts=True, engine="vllm")
    with pytest.raises(ConfigError, match="drop --async or --episodes"):
        TrainConfig(async_rollouts=True, episodes="captured", warmup_steps=0, eval_episodes=0)


def _async(**kw: object) -> TrainConfig:
    # 3 turns at most, the swap after the first decode call: every batch after the first mixes two versions
    base = dict(async_rollouts=True, async_lag=2, async_swap_call=1, steps=3, env_kwargs={"min_steps": 1, "max_steps": 2, "max_turns": 3})
    base.update(kw)
    return tiny_config(**base)


def _rows(out: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in _ASYNC_TIMING} for r in metric_rows(out)]


def _weights(out: Path) -> dict:
    return torch.load(sorted((out / "checkpoints").iterdir())[-1] / "trainable.pt")


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("async") / "straight"
    Trainer(_async(), out, progress=False, log=None).run()
    return out


def test_an_async_run_learns_from_mixed_versions_and_logs_them(straight: Path) -> None:
    rl = [r for r in _rows(straight) if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2, 3]
    assert all(np.isfinite(r["loss"]) for r in rl)
    assert rl[0]["versions_per_batch"] == 1 and rl[0]["staleness_max"] == 0  # step 0 is played by version 0 itself
    assert all(r["versions_per_batch"] == 2 and r["mixed_version_episodes"] > 0 for r in rl[1:])
    # lag 2: step 1 is played by versions 0 then 1 and learnt at 1; step 2 by 0 then 1, learnt at 2
    assert rl[1]["staleness_1_turns"] > 0 and rl[1]["staleness_0_turns"] > 0
    assert rl[2]["staleness_2_turns"] > 0 and rl[2]["staleness_1_turns"] > 0 and "staleness_0_turns" not in rl[2]
    assert all("is_ratio_mean" in r and "tis_weight" in r for r in rl)
    raw = [json.loads(x) for x in (straight / "metrics.jsonl").read_text().splitlines()]
    assert all("queue_wait_s" in r and "swap_wait_s" in r for r in raw if r["phase"] == "rl")
    assert all(r["infra_errors"] == 0 and r["infra_error_rate"] == 0.0 for r in rl)  # the run's bound is kept, async too


class _RecordingLearner:
    """Test double of the learner: a model to copy for the worker, and the episodes it was given."""

    def __init__(self) -> None:
        self.model = torch.nn.Linear(2, 2)
        self.given: list = []

    def learn(self, step: int, episodes: list, **kw: object) -> dict:
        self.given.append(episodes)
        return {"phase": "rl", "step": step + 1}


class _SavedProducer:
    """Test double of the producer: plays nothing, returns the same episodes (2 of 8 infra errors) every step."""

    def __init__(self, episodes: list) -> None:
        self.episodes = episodes

    def policy(self, *, seed: int) -> OracleAgent:
        return OracleAgent()

    def step_tasks(self, step: int) -> tuple[list[int], int]:
        return [0], 0

    def step_episodes(self, step: int, policy: object = None) -> list:
        return list(self.episodes)


def test_async_steps_count_and_bound_the_runs_infra_errors(tmp_path: Path) -> None:
    """The worker hands over infra failures too; the learner's side drops them, logs them and stops
    the run past max_infra_error_rate, exactly as a synchronous step does."""
    from turngym.core.errors import TooManyInfraErrors
    from turngym.trainers.asynchronous import AsyncRollouts

    episodes = run_episodes(lambda: turngym.make("turngym/Math-v0"), OracleAgent(), list(range(8)), env_id="turngym/Math-v0")
    for ep in episodes[:2]:
        ep.meta["infra_error"] = "sandbox died (test)"
    config = TrainConfig(async_rollouts=True, async_worker="thread", steps=2, max_infra_error_rate=0.3)  # test doubles: in-process
    learner = _RecordingLearner()
    rollouts = AsyncRollouts(config, learner, lambda model: _SavedProducer(episodes), first=0,
                             screen=Trainer(config, tmp_path / "a", log=None)._screen)
    try:
        row = rollouts.step(0)
    finally:
        rollouts.close()
    assert (row["infra_errors"], row["infra_error_rate"]) == (2, 0.25)
    assert [ep.episode_id for ep in learner.given[0]] == [ep.episode_id for ep in episodes[2:]]  # never scored
    strict = TrainConfig(async_rollouts=True, async_worker="thread", steps=2, max_infra_error_rate=0.1)
    rollouts = AsyncRollouts(strict, _RecordingLearner(), lambda model: _SavedProducer(episodes), first=0,
                             screen=Trainer(strict, tmp_path / "b", log=None)._screen)
    try:
        with pytest.raises(TooManyInfraErrors, match="this run's RL rollouts"):
            rollouts.step(0)
    finally:
        rollouts.close()


class _Killed(Exception):
    pass


def test_an_async_run_killed_mid_run_resumes_exactly(tmp_path: Path, straight: Path) -> None:
    out = tmp_path / "killed"

    def kill(name: str) -> None:
        if name == "rl@3":  # the worker has played step 2 with versions 0 and 1 when the learner dies
            raise _Killed

    with pytest.raises(_Killed):
        Trainer(_async(), out, progress=False, log=None, hook=kill).run()
    assert json.loads((out / "state.json").read_text())["step"] == 2
    assert sorted(torch.load(out / "checkpoints" / "step-000002" / "behaviour.pt")) == [0, 1]  # what step 2 is replayed with
    Trainer(TrainConfig(), out, resume=True, progress=False, log=None).run()
    assert _rows(out) == _rows(straight)
    a, b = _weights(straight), _weights(out)
    assert all(torch.equal(a[k], b[k]) for k in a)



def test_the_worker_process_and_the_worker_thread_give_the_same_run(tmp_path: Path, straight: Path) -> None:
    """``straight`` ran its worker in a process (the default); the threaded worker, same seed,
    must produce the same rows and weights: the process changes where rollouts run, not what they are."""
    assert _async().async_worker == "process"
    out = tmp_path / "thread"
    Trainer(_async(async_worker="thread"), out, progress=False, log=None).run()
    assert _rows(out) == _rows(straight)
    a, b = _weights(straight), _weights(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_dead_worker_process_stops_the_run_with_a_clear_error(tmp_path: Path) -> None:
    from turngym.trainers.worker_process import WorkerDied

    trainer: Trainer

    def kill(name: str) -> None:
        if name == "rl@2":  # step 3's batch needs version 2, which cannot exist yet (step 2's may have arrived)
            trainer.asynchronous.worker.proc.kill()

    trainer = Trainer(_async(), tmp_path / "dies", progress=False, log=None, hook=kill)
    with pytest.raises(WorkerDied, match=r"exit code -9\) before step [23]'s episodes"):
        trainer.run()
    assert trainer.asynchronous is None  # closed on the way out


def test_a_failure_inside_the_worker_process_reaches_the_learner_with_its_traceback() -> None:
    from turngym.trainers.worker_process import ProcessRolloutWorker, ProducerFactory

    config = TrainConfig(async_rollouts=True, steps=2)
    model = torch.nn.Linear(2, 2)
    board = WeightBoard(keep=3)
    board.publish(0, trainable_tensors(model))
    worker = ProcessRolloutWorker(ProducerFactory(config, None), model, board, first=0, steps=2, lag=2, swap_call=2, threads=1)
    try:
        with pytest.raises(Exception, match="no chat template") as info:  # no tokenizer: the child's policy cannot be built
            worker.next_batch(0)
        assert any("in the rollout worker process" in note for note in getattr(info.value, "__notes__", []))
    finally:
        worker.stop()
        worker.join(timeout=10)
    assert not worker.is_alive()


def test_a_worker_process_whose_policy_cannot_be_pickled_names_the_thread_fix() -> None:
    from turngym.trainers.worker_process import ProcessRolloutWorker, ProducerFactory

    model = torch.nn.Linear(2, 2)
    model.hook = lambda: None  # a closure on the module: not picklable
    board = WeightBoard(keep=3)
    board.publish(0, trainable_tensors(model))
    with pytest.raises(ConfigError, match="async_worker=thread"):
        ProcessRolloutWorker(ProducerFactory(TrainConfig(), None), model, board, first=0, steps=1, lag=2, swap_call=2, threads=1)


def test_one_minibatch_takes_pi_old_from_the_update_pass_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off-policy (async, vLLM) with one minibatch and one epoch: the update's forward pass runs on
    the unchanged weights, so its detached log-probs are π_old; the update equals the one with
    π_old recomputed in a pass of its own, which it no longer runs."""
    from turngym.trainers import engine
    from turngym.trainers import learner as learner_module

    trainer = Trainer(tiny_config(groups_per_step=4, group_size=4), tmp_path / "r", progress=False, log=None)
    trainer._setup()
    trainer._rl_setup()
    episodes = [ep for ep in trainer.producer.step_episodes(0) if ep.turns]
    model = trainer.learner.model
    with torch.no_grad():  # the learner has moved on since these episodes were sampled: π_old ≠ π_behaviour
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.02)
    start = {k: v.clone() for k, v in model.state_dict().items()}

    def update(**kw: object) -> tuple[dict, dict]:
        model.load_state_dict(start)
        trainer.learner.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        row = trainer.learner.learn(0, episodes, off_policy=True, prefix_is=True)
        return row, {k: v.clone() for k, v in model.state_dict().items()}

    recompute = engine.recompute_logprobs
    monkeypatch.setattr(engine, "recompute_logprobs", lambda *a, **k: pytest.fail("π_old recomputed in a pass of its own"))
    fused_row, fused = update()
    monkeypatch.setattr(engine, "recompute_logprobs", recompute)
    monkeypatch.setattr(learner_module, "has_dropout", lambda model: True)  # forces the separate pass
    row, weights = update()
    assert fused_row["is_ratio_min"] < 0.99 or fused_row["is_ratio_max"] > 1.01  # the check is not vacuous
    for key in ("is_ratio_mean", "is_ratio_min", "is_ratio_max", "tis_weight", "loss"):
        assert fused_row[key] == pytest.approx(row[key], rel=1e-4, abs=1e-6), key
    assert all(torch.allclose(fused[k], weights[k], atol=1e-6) for k in weights)
    assert not all(torch.equal(fused[k], start[k]) for k in start)  # and the update did move the weights


def test_the_worker_process_keeps_its_pipes_from_every_process_it_starts() -> None:
    """The learner unpickles what comes down the worker's pipe, so no process an env starts (a
    sandbox, an agent's code) may inherit it: the worker marks both ends close-on-exec first."""
    import time

    from turngym.trainers.worker_process import LaunchedWorker

    launched = LaunchedWorker()
    fds = launched.proc.args[-2:]
    try:
        deadline = time.monotonic() + 30
        while True:
            flags = [int(next(line.split()[1] for line in open(f"/proc/{launched.proc.pid}/fdinfo/{fd}") if line.startswith("flags:")), 8)
                     for fd in fds]
            if all(f & 0o2000000 for f in flags):  # O_CLOEXEC
                break
            assert time.monotonic() < deadline, f"the worker's pipes stay inheritable (flags {[oct(f) for f in flags]})"
            time.sleep(0.05)
    finally:
        launched.close(timeout=120)  # it exits once its imports (slow on a loaded machine) are done
    assert launched.proc.returncode == 0  # let go without a run: it exits cleanly


def test_a_stopped_worker_process_stops_the_run_within_its_deadline(tmp_path: Path) -> None:
    """SIGSTOP: the process is alive and silent. The learner gives up after ``worker_timeout_s``
    of silence, names the process (pid, stopped) and what it last did, and kills it on the way out."""
    import os
    import signal
    import time

    from turngym.trainers.deadline import WorkerStalled

    trainer: Trainer
    stopped: list[tuple[int, float]] = []

    def stop(name: str) -> None:
        if name == "rl@1" and not stopped:  # step 2's batch needs version 1, which is published after this step
            proc = trainer.asynchronous.worker.proc
            os.kill(proc.pid, signal.SIGSTOP)
            stopped.append((proc.pid, time.monotonic()))

    trainer = Trainer(_async(worker_timeout_s=3.0), tmp_path / "stopped", progress=False, log=None, hook=stop)
    try:
        with pytest.raises(WorkerStalled) as info:
            trainer.run()
    finally:
        for pid, _ in stopped:  # never leave a stopped process behind, whatever happened
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    pid, at = stopped[0]
    waited = time.monotonic() - at
    message = str(info.value)
    assert f"pid {pid}, stopped" in message and "deadline 3 s" in message and "what it last did" in message
    assert "step " in message.split("what it last did")[1]  # a phase of a step, not the start-up's
    assert waited < 3.0 + 20  # the deadline, plus the update the learner was running and the kill
    assert trainer.asynchronous is None
    with pytest.raises(ChildProcessError):  # killed and reaped by the run's close, not left stopped
        os.waitpid(pid, os.WNOHANG)


def test_a_stuck_worker_thread_stops_the_learner_with_what_it_last_did() -> None:
    from turngym.trainers.deadline import WorkerStalled

    model = torch.nn.Linear(2, 2)
    board = _versions_board(model, 1)
    release = threading.Event()

    def play(step: int, policy: VersionedPolicy) -> list:  # an env step that never returns (until the test ends)
        policy.progress.report("env steps after decode call 4")
        release.wait(60)
        return []

    worker = RolloutWorker(play, VersionedPolicy(model, board, lambda seed: OracleAgent()), lambda s: s, first=0, steps=2, lag=1, swap_call=1)
    worker.start()
    try:
        with pytest.raises(WorkerStalled, match=r"rollout worker thread 'turngym-rollout-worker'.* for 1\.\d s.*"
                                                r"'step 1: env steps after decode call 4'"):
            worker.next_batch(0, deadline_s=1.0)
    finally:
        release.set()
        worker.stop()
        worker.join(5)


def test_the_deadline_counts_silence_from_when_the_learner_starts_to_wait() -> None:
    """A worker that sat waiting for the learner's update is not late: the clock starts at the wait."""
    import queue
    import time

    from turngym.trainers.deadline import Progress, auto_deadline, await_batch

    progress = Progress("waiting for policy version 3")
    time.sleep(0.3)  # longer than the deadline, before the learner waits
    batches: queue.Queue = queue.Queue()
    threading.Timer(0.15, batches.put, args=("batch",)).start()
    assert await_batch(batches, step=0, deadline_s=0.25, progress=progress, describe=str, alive=lambda: True) == "batch"
    assert auto_deadline(0, 10) == 300 and auto_deadline(0, 100) == 500 and auto_deadline(7, 100) == 7
