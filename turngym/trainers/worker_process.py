"""The asynchronous rollout worker in a process of its own.

A worker *thread* (:class:`~turngym.trainers.rollout_worker.RolloutWorker`) shares the learner's
interpreter lock. Decoding a small model is mostly Python (sampling bookkeeping, env steps,
parsing), so the two threads took turns on the lock instead of overlapping: on this project's
2-core machine the threaded worker's rollouts took twice the synchronous ones and ``--async``
was *slower* than synchronous training (``docs/async.md``). A process has its own interpreter.

:class:`ProcessRolloutWorker` starts ``python -m turngym.trainers.worker_process`` (a fresh
interpreter, not ``multiprocessing``: no re-import of the user's ``__main__`` script, no
daemonic-process limits on the env's own subprocesses) with two pipes:

* learner → worker: the run (config, tokenizer, the model pickled once), then every policy
  version the learner publishes, then ``stop``;
* worker → learner: every step's :class:`~turngym.trainers.rollout_worker.AsyncBatch`, and between
  them each change of what the worker is doing (``("progress", phase)``: the learner's deadline,
  :mod:`turngym.trainers.deadline`, names the last one when the worker stops or hangs).

Inside, the child runs the same :class:`~turngym.trainers.rollout_worker.RolloutWorker` and
:class:`~turngym.trainers.rollout_worker.VersionedPolicy` over a local
:class:`~turngym.trainers.rollout_worker.WeightBoard` that the pipe fills, so the version schedule,
the partial rollouts and the episodes are exactly the threaded worker's (tested: the two give the
same run, row for row). Sending happens on threads on both sides, so the learner never blocks on
a pipe. The child exits when the learner says ``stop`` or its pipe closes (the learner died).
"""

from __future__ import annotations

import io
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from turngym.core.errors import ConfigError
from turngym.trainers.deadline import Progress, await_batch
from turngym.trainers.rollout_worker import RolloutWorker, VersionedPolicy, WeightBoard, checked

__all__ = ["LaunchedWorker", "ProcessRolloutWorker", "ProducerFactory", "WorkerDied", "process_state"]


class WorkerDied(RuntimeError):
    """The rollout worker's process ended without a batch the learner waits for."""


class ProducerFactory:
    """Builds the worker's :class:`~turngym.trainers.producer.RolloutProducer` around a model.

    Picklable (a run's config and tokenizer), so the worker process can build the same producer
    the threaded worker gets; it plays with the hf engine (the only one ``--async`` allows).
    """

    def __init__(self, config: Any, tokenizer: Any) -> None:
        self.config = config
        self.tokenizer = tokenizer

    def __call__(self, model: Any) -> Any:
        from turngym.trainers.producer import RolloutProducer

        return RolloutProducer(self.config, lambda: model, self.tokenizer, model_path=_no_model_path, log=_log, bar=_no_bar)


def _no_model_path() -> Any:
    raise ConfigError("the rollout worker plays with the hf engine only: it has no base model directory for vLLM")


def _log(message: str) -> None:
    print(f"[rollout worker] {message}", file=sys.stderr, flush=True)


def _no_bar(total: int, desc: str, initial: int = 0) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, disable=True)


def _dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


class _Sender(threading.Thread):
    """Sends queued messages down a pipe in order, so the caller never blocks on a full pipe."""

    def __init__(self, conn: Connection, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.conn = conn
        self.outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.failed: BaseException | None = None

    def send(self, message: Any) -> None:
        self.outbox.put(message)

    def close(self) -> None:
        self.outbox.put(None)

    def run(self) -> None:
        while (message := self.outbox.get()) is not None:
            try:
                self.conn.send_bytes(message if isinstance(message, bytes) else _dumps(message))
            except (BrokenPipeError, OSError) as exc:  # the other side is gone: nothing more can be sent
                self.failed = exc
                return
        self.conn.close()


class LaunchedWorker:
    """A worker interpreter started ahead of need: it imports torch, transformers and turngym
    (2–3 s on a CPU) while the trainer warms up and evaluates, then waits for its run.

    Dropped without a run (:meth:`close`, or the trainer dying), the child reads the end of its
    pipe and exits.
    """

    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # the learner's import path, as spawn does
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "turngym.trainers.worker_process", str(to_child_r), str(from_child_w)],
                                         pass_fds=(to_child_r, from_child_w), env=env, stdin=subprocess.DEVNULL)
        except BaseException:
            for fd in (to_child_w, from_child_r):
                os.close(fd)
            raise
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self._outbox: Connection | None = Connection(to_child_w, readable=False)
        self._inbox: Connection | None = Connection(from_child_r, writable=False)

    def take(self) -> tuple[Connection, Connection]:
        """Its two pipe ends (to the worker, from the worker), handed over once: the worker's run owns them."""
        if self._outbox is None or self._inbox is None:
            raise ConfigError("this launched worker was already given a run")
        pipes, self._outbox, self._inbox = (self._outbox, self._inbox), None, None
        return pipes

    def close(self, timeout: float = 10.0) -> None:
        """Let an unused worker go (a run that ended before its RL loop); killed past ``timeout`` s
        (it reads the pipe's end once its imports are done, which a loaded machine can stretch)."""
        for conn in (self._outbox, self._inbox):
            if conn is not None:
                conn.close()
        self._outbox = self._inbox = None
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ProcessRolloutWorker:
    """The learner's handle on the worker process (the interface of the threaded worker).

    Args:
        factory: builds the producer in the child (picklable: :class:`ProducerFactory`).
        model: the policy to copy into the child (the learner's model, after LoRA).
        board: the learner's :class:`~turngym.trainers.rollout_worker.WeightBoard`: the versions it
            holds now, and every later one, are sent to the child.
        first, steps, lag, swap_call: the schedule (:class:`~turngym.trainers.rollout_worker.RolloutWorker`).
        threads: torch CPU threads in the child (the run's ``threads``; 0: torch's default).
        launched: the interpreter a :class:`LaunchedWorker` started earlier (None: start one now).
    """

    def __init__(self, factory: Any, model: Any, board: Any, *, first: int, steps: int, lag: int, swap_call: int, threads: int,
                 launched: LaunchedWorker | None = None) -> None:
        import torch

        buf = io.BytesIO()
        try:
            torch.save(model, buf)
            init = _dumps({"factory": factory, "model": buf.getvalue(), "first": first, "steps": steps, "lag": lag,
                           "swap_call": swap_call, "threads": threads})
        except Exception as exc:  # a model or tokenizer with unpicklable parts (hooks, closures)
            raise ConfigError(f"the rollout worker process needs the policy and tokenizer pickled, and this one is not "
                              f"({type(exc).__name__}: {exc}): use the worker thread instead (--set async_worker=thread)") from exc
        launched = launched or LaunchedWorker()
        self.proc = launched.proc
        self.steps = steps
        self.batches: queue.Queue[Any] = queue.Queue()
        self.progress = Progress("started; its run sent")
        outbox, self._inbox = launched.take()
        self._sender = _Sender(outbox, "turngym-weights-sender")
        self._receiver = threading.Thread(target=self._receive, name="turngym-batch-receiver", daemon=True)
        self._sender.start()
        self._receiver.start()
        self._sender.send(init)
        self._stopped = False
        self._board = board
        board.subscribe(self._send_version)  # first, so that no version published from here on is missed
        for version, tensors in sorted(board.saved(range(first - lag, first + 1)).items()):
            self._send_version(version, tensors)

    def _send_version(self, version: int, tensors: dict[str, Any]) -> None:
        self._sender.send(("version", version, tensors))

    def _receive(self) -> None:
        try:
            while True:
                message = pickle.loads(self._inbox.recv_bytes())
                if isinstance(message, tuple) and message[:1] == ("progress",):
                    self.progress.set(str(message[1]))
                else:
                    self.batches.put(message)
        except (EOFError, OSError):
            self.batches.put(None)  # the child closed its end: finished, stopped or dead
        except BaseException as exc:  # an unreadable batch: the learner raises it
            self.batches.put(exc)

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def describe(self) -> str:
        """The worker as an error names it: its pid and what the kernel says it is doing."""
        return f"the rollout worker process (pid {self.proc.pid}, {process_state(self.proc.pid)})"

    def next_batch(self, step: int, deadline_s: float = float("inf")) -> tuple[Any, float]:
        """Step ``step``'s batch (waiting for it) and the seconds the learner waited; raises
        :class:`~turngym.trainers.deadline.WorkerStalled` after ``deadline_s`` without progress."""
        t0 = time.perf_counter()
        # alive while the receiver reads: it queues None (the pipe closed) before it ends, after every batch sent
        batch = await_batch(self.batches, step=step, deadline_s=deadline_s, progress=self.progress, describe=self.describe,
                            alive=self._receiver.is_alive)
        if batch is None:
            code = self.proc.wait()
            raise WorkerDied(f"the rollout worker process ended (exit code {code}) before step {step + 1}'s episodes: its stderr above says why")
        if isinstance(batch, BaseException):
            raise batch
        return checked(batch, step), time.perf_counter() - t0

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._board.unsubscribe(self._send_version)
            self._sender.send(("stop",))
            self._sender.close()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the child to exit (killed past ``timeout``), and for both pipe threads."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._sender.join(timeout=5)
        self._receiver.join(timeout=5)
        self._inbox.close()


_STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O", "T": "stopped", "t": "stopped by a tracer",
           "Z": "exited, not reaped"}


def process_state(pid: int) -> str:
    """The kernel's state of ``pid`` in words (Linux ``/proc``; "state unknown" elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            code = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "state unknown"
    return _STATES.get(code, f"state {code}")


# ------------------------------------------------------------------------------ the child
def _progress(outbox: Connection, phase: str) -> None:
    outbox.send_bytes(_dumps(("progress", phase)))


def _child(inbox: Connection, outbox: Connection) -> int:
    init = pickle.loads(inbox.recv_bytes())
    import torch

    if init["threads"]:
        torch.set_num_threads(init["threads"])
    _progress(outbox, f"loading the policy ({len(init['model']) / 2**20:.1f} MiB)")
    model = torch.load(io.BytesIO(init["model"]), weights_only=False).eval()
    _progress(outbox, "building its rollout producer")
    producer = init["factory"](model)
    board = WeightBoard(keep=init["lag"] + 1)

    def receive() -> None:
        try:
            while True:
                message = pickle.loads(inbox.recv_bytes())
                if message[0] == "stop":
                    break
                board.publish(message[1], message[2])
        except (EOFError, OSError):  # the learner is gone
            pass
        worker.stop()

    policy = VersionedPolicy(model, board, lambda seed: producer.policy(seed=seed))
    worker = RolloutWorker(lambda step, pol: producer.step_episodes(step, policy=pol), policy,
                           lambda step: producer.step_tasks(step)[1], first=init["first"], steps=init["steps"],
                           lag=init["lag"], swap_call=init["swap_call"])
    threading.Thread(target=receive, name="turngym-weights-receiver", daemon=True).start()
    worker.start()
    sent = init["first"]
    reported = 0.0
    while sent < init["steps"]:
        phase, at = worker.progress.last()
        if at != reported:  # what the worker does now, for the learner's deadline (one writer: this thread)
            reported = at
            try:
                _progress(outbox, phase)
            except (BrokenPipeError, OSError):
                return 0
        try:
            batch = worker.batches.get(timeout=0.1)
        except queue.Empty:
            if worker.is_alive():
                continue
            return 0  # stopped by the learner
        if batch.error is not None:  # keep the child's traceback: the learner raises the error in its own
            batch.error.add_note("in the rollout worker process:\n" + "".join(traceback.format_exception(batch.error)))
        try:
            data = _dumps(batch)
        except Exception as exc:
            cause = batch.error if batch.error is not None else exc
            batch.episodes, batch.error = [], WorkerDied("".join(traceback.format_exception(cause)))
            data = _dumps(batch)
        try:
            outbox.send_bytes(data)
        except (BrokenPipeError, OSError):
            return 0
        if batch.error is not None:
            return 1
        sent += 1
    return 0


def _main(argv: list[str]) -> int:
    inbox = Connection(int(argv[0]), writable=False)
    outbox = Connection(int(argv[1]), readable=False)
    for conn in (inbox, outbox):  # the learner unpickles what comes down this pipe: no process an env starts may hold it
        os.set_inheritable(conn.fileno(), False)
    import torch  # noqa: F401  (the imports a run needs, while the trainer still warms up: see LaunchedWorker)
    import transformers  # noqa: F401

    import turngym.agents.hf  # noqa: F401
    import turngym.trainers.producer  # noqa: F401

    try:
        return _child(inbox, outbox)
    except (EOFError, BrokenPipeError):  # launched, then let go without a run (or the learner left during start-up)
        return 0
    finally:
        outbox.close()


if __name__ == "__main__":
    code = _main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # daemon threads may still block on a pipe: leave without waiting for them
