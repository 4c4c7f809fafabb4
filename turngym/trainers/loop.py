"""The training loop: rollout → rewards → advantages (by name) → clipped PG loss → update.

:class:`Trainer` is thin orchestration over two halves, readable top to bottom: a
:class:`~turngym.trainers.producer.RolloutProducer` plays episodes (which tasks, which policy,
demonstrations, evaluation) and a :class:`~turngym.trainers.learner.Learner` owns the weights
and changes them (imitation, LoRA, the RL update, the critic, checkpoint state).

1. **Warm start** — behaviour cloning of (noisy) oracle demonstrations
   (:mod:`turngym.trainers.imitation`), then the success rate of that policy is measured.
2. **RL iterations** — for each step: sample ``groups_per_step`` tasks, roll out
   ``group_size`` episodes per task with the current policy (:func:`turngym.rollout.run_episodes`,
   exact token ids and log-probs), shape per-turn rewards from the env's signals
   (:class:`turngym.rewards.RewardShaper`), compute per-turn advantages with the estimator named
   by ``algo`` (:func:`turngym.trainers.advantages.compute_advantages`), put each turn's
   advantage on its action tokens and minimize the clipped policy-gradient loss (+ β·KL to the
   warm-started policy as a separate loss term) with gradient accumulation.
3. **Bookkeeping** — ``OUT/metrics.jsonl`` (one JSON line per warm-up chunk, evaluation and RL
   step), the warm-started model, a checkpoint after every ``save_every`` steps (weights or LoRA
   adapters, optimizer), ``OUT/learning_curve.png`` and ``OUT/summary.json``.

Every phase ends with an atomic commit (:mod:`turngym.trainers.rundir`), so ``resume=True``
continues a run killed at any point *exactly* where an uninterrupted run would be: every random
draw of step ``k`` is seeded by ``(seed, k)``, the warm start is never redone on top of itself, a
finished run is left as it is, and damaged files are named instead of loaded.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError
from turngym.core.extras import require_extra
from turngym.trainers.asynchronous import AsyncRollouts, launch_worker, load_behaviour, save_behaviour, start_rollouts
from turngym.trainers.atomic import ArtifactError, write_json, write_text
from turngym.trainers.config import TrainConfig
from turngym.trainers.learner import Learner
from turngym.trainers.producer import EVAL_SEED, RolloutProducer, make_env, success_rate
from turngym.trainers.rundir import ResumePoint, RunDir
from turngym.trainers.signal import batch_signal
from turngym.trainers.tracking import NullTracker, Tracker, episode_rows, open_tracker, require_backends

__all__ = ["EVAL_SEED", "Trainer", "TrainResult", "train"]


@dataclass
class TrainResult:
    """What a run achieved (also written to ``OUT/summary.json``)."""

    success_before: float
    success_after: float
    steps: int
    seconds: float
    out: Path

    @property
    def improvement(self) -> float:
        return self.success_after - self.success_before


class Trainer:
    """Runs one training job described by a :class:`TrainConfig` into the directory ``out``.

    Args:
        config: the run (ignored on resume: the saved ``OUT/config.json`` is used).
        out: output directory.
        resume: continue the run in ``out`` from its last valid save instead of starting over.
        overwrite: start over even if ``out`` holds a run's results (they are deleted); without
            it, a fresh run refuses such a directory rather than silently replacing its results.
        progress: show progress bars (stderr).
        log: where one-line status messages go (None = silent).
        hook: called with the name of every save and evaluation boundary as the run reaches it
            (``"eval@0"``, ``"checkpoint@3 written"``, ...) — fault-injection tests raise from it
            to stop the run exactly there.
        success_before: the warm start's success rate on this run's evaluation tasks, when the
            caller measured it already (a study whose arms share one warm start evaluates it
            once), so the run skips evaluating it.
    """

    def __init__(self, config: TrainConfig, out: str | Path, *, resume: bool = False, overwrite: bool = False, progress: bool = True,
                 log: Callable[[str], None] | None = print, hook: Callable[[str], None] | None = None,
                 success_before: float | None = None) -> None:
        self.out = Path(out)
        self.known_before = success_before
        self.rundir = RunDir(self.out)
        self.resume = resume
        self.overwrite = overwrite
        self.hook = hook
        self.last_eval_episodes: list[Any] = []
        """Episodes of the latest :meth:`evaluate` (tool calls, hops, … beyond its success rate)."""
        self.tracker: Tracker = NullTracker()
        """Mirrors every ``metrics.jsonl`` row (``config.report_to``); open only while :meth:`run` runs."""
        self.learner: Learner | None = None
        """Holds the trained policy and updates it (built when the run loads its model)."""
        self.producer: RolloutProducer | None = None
        """Plays the run's episodes (built with the learner)."""
        self.asynchronous: AsyncRollouts | None = None
        """The rollout worker and its weight board while an ``async_rollouts`` run's RL loop runs."""
        self._launched: Any = None
        """The worker interpreter started at the run's beginning (``async_worker="process"``) until the worker takes it."""
        self._behaviour: dict[int, Any] = {}
        self._infra_seen = 0
        self._episodes_seen = 0
        """Infra-error episodes and all episodes of this process's RL rollouts (``max_infra_error_rate``)."""
        if resume and overwrite:
            raise ConfigError("resume continues the run in out, overwrite discards it: pass one of them")
        if resume:
            config = self._saved_config()
        self.config = config
        self.progress = progress
        self.log = log or (lambda msg: None)

    def _saved_config(self) -> TrainConfig:
        path = self.rundir.config
        if not path.exists():
            if self.rundir.holds_results():
                raise ArtifactError(f"{path} is missing, so the run in {self.out} cannot be continued: start over with "
                                    f"`turngym train --out {self.out} --overwrite` (discards its results), or restore config.json")
            raise ConfigError(f"nothing to resume in {self.out}: no config.json (start without --resume)")
        try:
            return TrainConfig.load(path)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise ArtifactError(f"{path} is damaged ({exc}): restore it, or start over with `turngym train --out {self.out} --overwrite`") from exc

    # ---------------------------------------------------------------------- the two halves
    def _setup(self, source: Path | None = None) -> None:
        """Load the policy from ``source`` (the run's saved warm start, or None: the base model) into
        the learner, and build the producer that plays episodes with it."""
        self.learner = Learner(self.config, metric=self._metric, log=self.log, bar=self._bar)
        self.learner.setup(source if source is not None else self._model_path(), self._make_env)
        self.producer = RolloutProducer(self.config, lambda: self.learner.model, self.learner.tokenizer, model_path=self._model_path,
                                        log=self.log, bar=self._bar, saved=self.learner.saved_episodes)

    # The learner's state under the names callers (providers, studies, tests) have always used.
    model = property(lambda self: self.learner.model)
    tokenizer = property(lambda self: self.learner.tokenizer)
    renderer = property(lambda self: self.learner.renderer)
    pad_id = property(lambda self: self.learner.pad_id)
    device = property(lambda self: self.learner.device)
    shaper = property(lambda self: self.learner.shaper)
    process_shaper = property(lambda self: self.learner.process_shaper)
    success_threshold = property(lambda self: self.learner.success_threshold)
    critic = property(lambda self: self.learner.critic if self.learner is not None else None)
    saved_episodes = property(lambda self: self.learner.saved_episodes)
    engine = property(lambda self: self.producer.engine if self.producer is not None else None)

    def _model_path(self) -> Path:
        from turngym.agents.hf_models import resolve_model_path

        if self.config.model == "tiny" and self.config.tiny_model:
            from turngym.agents.tiny import TinyModelConfig, build_tiny_model

            try:
                return build_tiny_model(config=TinyModelConfig(**self.config.tiny_model))
            except TypeError as exc:
                raise ConfigError(f"tiny_model: {exc}; fields are those of turngym.agents.tiny.TinyModelConfig") from exc
        return resolve_model_path(self.config.model)

    def _make_env(self, env_id: str | None = None) -> Any:
        return make_env(self.config, env_id)

    def evaluate(self, n: int | None = None, *, env_id: str | None = None) -> float:
        """Success rate of the current policy, sampling at ``temperature``: on held-out task seeds,
        or on the task pool (cycled) when ``task_pool`` is set. ``env_id``: on the held-out task
        seeds of another env instead (an unseen split, e.g. ``turngym/Household-Unseen-v0``)."""
        n = n or self.config.eval_episodes
        if n == 0:
            return float("nan")
        from turngym.rollout import check_infra_error_rate

        self.last_eval_episodes = self.producer.evaluation(n, env_id)  # for callers that want more than the success rate
        check_infra_error_rate(self.last_eval_episodes, self.config.max_infra_error_rate, what="an evaluation")  # a biased success rate is no result
        return success_rate(self.last_eval_episodes)

    def _warm_start(self) -> None:
        if self.config.warmup_steps == 0:
            return
        self.learner.imitate(self.producer.demonstrations())

    def _rl_step(self, step: int) -> dict[str, Any]:
        """RL step ``step``: the producer plays its tasks with the current policy, the learner updates
        on them (asynchronous: the worker played them already, with older versions)."""
        if self.asynchronous is not None:
            return self.asynchronous.step(step) | batch_signal(self.learner.last_batch[0])
        t0 = time.perf_counter()
        episodes, sampled = self.producer.step_batch(step, self._screen)
        t_rollout = time.perf_counter() - t0
        record = self.learner.learn(step, episodes, off_policy=self.producer.rollout_engine.off_policy) | sampled | batch_signal(episodes)
        sync = self.producer.sync()  # the next rollout samples the updated weights
        if sync is not None:
            record |= {"sync_s": round(sync.seconds, 3), "sync_mb": round(sync.bytes / 2**20, 1)}
        return {**record, "rollout_s": round(t_rollout, 2), "step_s": round(time.perf_counter() - t0, 2)}

    def _start_async(self, first: int) -> AsyncRollouts:
        launched, self._launched = self._launched, None
        return start_rollouts(self.config, self.learner, first=first, behaviour=self._behaviour, screen=self._screen, launched=launched)

    def _screen(self, episodes: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        """The episodes of an RL step that are scored (infrastructure failures and empty episodes
        dropped: never scored) and the row's ``infra_errors`` / ``infra_error_rate``; bounded by
        :meth:`_count_infra_errors`. Runs in the learner's thread, in step order, sync or async."""
        infra_errors, infra_rate = self._count_infra_errors(episodes)
        kept = [ep for ep in episodes if not ep.infra_error and ep.turns]
        return kept, {"infra_errors": infra_errors, "infra_error_rate": round(infra_rate, 4)}

    def _count_infra_errors(self, episodes: list[Any]) -> tuple[int, float]:
        """This batch's infra-error episodes and the run's share so far (RL rollouts of this
        process); raises :class:`~turngym.core.errors.TooManyInfraErrors` past
        ``max_infra_error_rate``, or when no episode of the batch is left to train on."""
        from turngym.core.errors import TooManyInfraErrors
        from turngym.rollout import check_infra_error_rate

        bad = sum(ep.infra_error is not None for ep in episodes)
        self._infra_seen += bad
        self._episodes_seen += len(episodes)
        rate = check_infra_error_rate(episodes, self.config.max_infra_error_rate, what="this run's RL rollouts",
                                      infra=self._infra_seen, total=self._episodes_seen)
        if bad and bad == len(episodes):
            raise TooManyInfraErrors(f"every one of the {bad} episodes of this RL step ended in an infrastructure error "
                                     f"(the first: {episodes[0].infra_error}): nothing is left to train on; fix the env or its infrastructure")
        return bad, rate

    # ---------------------------------------------------------------------- helpers
    def _bar(self, total: int, desc: str, initial: int = 0) -> Any:
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc=desc, disable=not self.progress, file=sys.stderr, dynamic_ncols=True)

    def _event(self, name: str) -> None:
        if self.hook is not None:
            self.hook(name)

    def _sub_hook(self, label: str) -> Callable[[str], None]:
        return lambda what: self._event(f"{label} {what}")

    # ---------------------------------------------------------------------- checkpoints
    def _save_checkpoint(self, step: int, before: float) -> None:
        rd = self.rundir
        path = rd.checkpoint_dir(step)
        commit, metrics = rd.commit("rl", step, success_before=before, checkpoint=path.relative_to(self.out).as_posix())

        def write(tmp: Path) -> None:
            self.learner.save_state(tmp)
            if self.producer.edge is not None:  # the pool the next steps draw from, scored by an earlier policy
                self.producer.edge.save(tmp)
            if self.config.async_rollouts:  # the older versions the worker still samples with after a resume here
                save_behaviour(tmp, self.asynchronous, step)

        rd.save_artifact(path, write, commit, metrics, hook=self._sub_hook(f"checkpoint@{step}"))
        self._event(f"checkpoint saved@{step}")
        rd.write_state(commit)
        self._event(f"checkpoint committed@{step}")
        rd.prune(self.config.keep_checkpoints)
        self._checkpoint = commit.checkpoint

    def _load_checkpoint(self, point: ResumePoint) -> None:
        """Weights (or adapters) and optimizer state of a verified checkpoint into the live objects."""
        assert point.source is not None
        fix = f"delete {point.source} to resume from the checkpoint before it, or start over with `turngym train --out {self.out} --overwrite`"
        self.learner.load_state(point.source, fix)
        if self.producer.edge is not None and not self.producer.edge.load(point.source):
            self.log(f"warning: {point.source} holds no edge pool: it is rescored with the resumed policy")
        if self.config.async_rollouts:
            self._behaviour = load_behaviour(point.source, self.learner.device, fix)
        self._checkpoint = point.commit.checkpoint

    # ---------------------------------------------------------------------- run
    def _begin(self) -> ResumePoint | None:
        """Prepare ``out`` and return where the run continues (None: from the beginning)."""
        rd = self.rundir
        self.out.mkdir(parents=True, exist_ok=True)
        if self.resume:
            point, notes = rd.resume_point(self.config.steps)
            for note in notes:
                self.log(f"warning: {note}")
            if point is None:
                self.log(f"nothing of the run in {self.out} was saved yet: starting it from the beginning")
                rd.restore_metrics("", "the start")
                rd.write_state(rd.commit("started")[0])
                return None
            note = rd.restore_metrics(point.metrics, str(point.source or rd.state))
            if note:
                self.log(f"warning: {note}")
            return point
        if rd.holds_results() and not self.overwrite:
            raise ConfigError(f"{self.out} already holds a training run ({rd.describe(self.config.steps)}): pass --resume to continue it, "
                              "--overwrite to discard it and start over, or choose another --out")
        rd.clear()
        self.config.save(rd.config)
        rd.write_state(rd.commit("started")[0])
        return None

    def _rl_setup(self) -> None:
        """From the warm-started policy to the RL one: adapters, the KL reference, the optimizer (the learner's)."""
        self.learner.rl_setup()

    def _metric(self, record: dict[str, Any]) -> None:
        """Append a row to ``metrics.jsonl`` (the record), then mirror it to the trackers."""
        self.rundir.append_metric(record)
        self.tracker.log_metrics(record)

    def run(self) -> TrainResult:
        require_backends(self.config.report_to)  # a missing tracker package fails before anything is written
        with require_extra("training", "train"):  # and so does a missing torch: no half-started run dir
            import torch  # noqa: F401
            import transformers  # noqa: F401
        try:
            return self._run()
        finally:
            self.tracker.close()
            self.tracker = NullTracker()

    def _run(self) -> TrainResult:
        cfg = self.config
        start_time = time.perf_counter()
        point = self._begin()
        self._prepare()
        phase = point.commit.phase if point else "started"
        if point is not None and phase == "finished":
            return self._already_finished(point, start_time)
        self._launched = launch_worker(cfg)  # async_worker="process": its interpreter imports while we warm up
        try:
            return self._train(point, phase, start_time)
        finally:
            if self.asynchronous is not None:
                self.asynchronous.close()
                self.asynchronous = None
            if self._launched is not None:
                self._launched.close()
                self._launched = None

    def _train(self, point: ResumePoint | None, phase: str, start_time: float) -> TrainResult:
        cfg = self.config
        rd = self.rundir
        self.tracker = open_tracker(cfg.report_to, self.out, fresh=point is None, config=cfg.to_dict())

        if phase == "started":
            self._setup()
            self._event("warm_start@0")
            self._warm_start()
            commit, metrics = rd.commit("warm_started")
            rd.save_artifact(rd.warm_start, self.learner.save_model, commit, metrics, hook=self._sub_hook("warm_start@0"))
            self._event("warm_start saved@0")
            rd.write_state(commit)
        else:
            self._setup(rd.warm_start)  # verified by resume_point

        if phase in ("started", "warm_started"):
            if phase == "warm_started":
                self.log(f"resuming {self.out}: the warm start is saved; evaluating it")
            first = 0
            if cfg.async_rollouts:  # the worker plays step 0 with version 0 (the warm start) while it is evaluated
                self._rl_setup()
                self.asynchronous = self._start_async(first)
            self._event("eval@0")
            before = self.evaluate() if self.known_before is None else self.known_before
            self._metric({"phase": "eval", "step": 0, "success": before, "label": "warm start"})
            self._event("eval logged@0")
            if cfg.eval_episodes:  # none (training on saved episodes): there is no success rate to state
                self.log(f"success rate of the warm-started policy: {before:.1%} ({cfg.eval_episodes} episodes)")
            if not cfg.async_rollouts:
                self._rl_setup()
            self._save_checkpoint(0, before)
        else:
            assert point is not None and point.commit.success_before is not None
            self._rl_setup()
            self._load_checkpoint(point)
            first, before = point.commit.step, point.commit.success_before
            self.log(f"resuming {self.out} at step {first}/{cfg.steps}")
            if cfg.async_rollouts:
                self.asynchronous = self._start_async(first)

        self._rl_loop(first, before)
        if self.asynchronous is not None:  # the worker is done: it stops before the final evaluation
            self.asynchronous.close()
            self.asynchronous = None

        self._event(f"eval@{cfg.steps}")
        after = self.evaluate()
        # the final evaluation's episodes, for `turngym view OUT` (the file is written whole or not at all)
        write_text(self.out / "episodes.jsonl", "".join(json.dumps(ep.to_dict(), ensure_ascii=False) + "\n" for ep in self.last_eval_episodes))
        self._metric({"phase": "eval", "step": cfg.steps, "success": after, "label": "after RL"})
        self._event(f"eval logged@{cfg.steps}")
        rd.write_state(rd.commit("finished", cfg.steps, success_before=before, success_after=after, checkpoint=self._checkpoint)[0])
        self._event(f"finished@{cfg.steps}")
        seconds = time.perf_counter() - start_time
        self._write_summary(before, after, seconds)
        self._event(f"summary@{cfg.steps}")
        self._plot()
        rates = (f"success rate: {before:.1%} (warm start) -> {after:.1%} (after {cfg.steps} RL steps, {cfg.algo})"
                 if cfg.eval_episodes else f"{cfg.steps} RL steps, {cfg.algo}, no evaluation")
        self.log(f"{rates}; {seconds:.0f} s; see {self.out}/metrics.jsonl and learning_curve.png")
        return TrainResult(success_before=before, success_after=after, steps=cfg.steps, seconds=seconds, out=self.out)

    def _rl_loop(self, first: int, before: float) -> None:
        """RL steps ``first .. steps − 1``, each logged, evaluated and checkpointed as configured."""
        cfg = self.config
        bar = self._bar(cfg.steps, f"{cfg.algo} on {cfg.env_id}", initial=first)
        for step in range(first, cfg.steps):
            self._event(f"rl@{step + 1}")
            record = self._rl_step(step)
            self._metric(record)
            if step == first or (step + 1) % max(1, cfg.steps // 8) == 0 or step + 1 == cfg.steps:
                self.tracker.log_episodes(step + 1, episode_rows(*self.learner.last_batch))
            self._event(f"rl logged@{step + 1}")
            bar.update(1)
            # no loss when every update of the step was skipped (a non-finite loss or gradient)
            bar.set_postfix(success=f"{record['success']:.2f}", loss=f"{record.get('loss', math.nan):+.3f}")
            if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and step + 1 < cfg.steps:
                self._event(f"eval@{step + 1}")
                self._metric({"phase": "eval", "step": step + 1, "success": self.evaluate()})
                self._event(f"eval logged@{step + 1}")
            if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
                self._save_checkpoint(step + 1, before)
        bar.close()

    def _already_finished(self, point: ResumePoint, start_time: float) -> TrainResult:
        """Resuming a finished run changes nothing (it only restores a lost summary or plot)."""
        cfg, commit = self.config, point.commit
        before = commit.success_before if commit.success_before is not None else float("nan")
        after = commit.success_after if commit.success_after is not None else float("nan")
        self.log(f"{self.out} is already finished ({commit.step}/{cfg.steps} RL steps, success {before:.1%} -> {after:.1%}): "
                 "nothing to do (pass --overwrite to train it again)")
        seconds = time.perf_counter() - start_time
        try:
            json.loads((self.out / "summary.json").read_text())
        except (OSError, ValueError):
            self._write_summary(before, after, 0.0)
        if not (self.out / "learning_curve.png").exists():
            self._plot()
        return TrainResult(success_before=before, success_after=after, steps=commit.step, seconds=seconds, out=self.out)

    def _write_summary(self, before: float, after: float, seconds: float) -> None:
        cfg = self.config
        summary = {"env_id": cfg.env_id, "algo": cfg.algo, "model": cfg.model, "success_before": before, "success_after": after,
                   "improvement": after - before, "steps": cfg.steps, "seconds_this_session": round(seconds, 1)}
        write_json(self.out / "summary.json", summary)

    def _plot(self) -> None:
        cfg = self.config
        try:
            from turngym.trainers.plot import plot_learning_curve

            plot_learning_curve(self.rundir.metrics, self.out / "learning_curve.png", title=f"{cfg.algo} on {cfg.env_id}")
            critic_last = self.learner.critic_last if self.learner is not None else None  # None: a finished run only re-plots
            if critic_last is not None:  # the last RL step's values against their targets, and EV per step
                from turngym.trainers.atomic import complete_lines
                from turngym.trainers.critic import plot_value_vs_return

                rows = [json.loads(x) for x in complete_lines(self.rundir.metrics) if x.strip()]
                ev = [(r["step"], r["critic_ev"]) for r in rows if r.get("phase") == "rl" and "critic_ev" in r]
                plot_value_vs_return(*critic_last, self.out / "value_vs_return.png", ev_by_step=ev, title=f"{cfg.critic_kind} critic")
        except ImportError:
            self.log("matplotlib is not installed: skipped learning_curve.png (pip install matplotlib)")

    def load(self) -> Trainer:
        """Load ``config.model`` as it is (no warm start, no RL, nothing written), for callers
        that only :meth:`evaluate` a model."""
        self._prepare()
        self._setup()
        return self

    def warm_start_only(self, save_to: str | Path) -> Path:
        """Run only the imitation phase and save the warm-started model (a normal HF model
        directory, written atomically with a manifest) to ``save_to``; its NLL curve goes to
        ``OUT/metrics.jsonl`` (``out``'s earlier files are replaced: this is a building block
        whose callers decide whether to rebuild, with :func:`turngym.trainers.atomic.is_complete_dir`).

        A later run with ``model=save_to, warmup_steps=0`` starts RL from exactly these
        weights — how several estimators share one warm start.
        """
        save_to = Path(save_to)
        self.out.mkdir(parents=True, exist_ok=True)
        self.rundir.clear()
        self.config.save(self.rundir.config)
        self._prepare()
        self._setup()
        self._warm_start()
        commit, metrics = self.rundir.commit("warm_started")
        self.rundir.save_artifact(save_to, self.learner.save_model, commit, metrics, hook=self._sub_hook("warm_start@0"))
        return save_to

    def _prepare(self) -> None:
        import torch

        torch.manual_seed(self.config.seed)
        self._checkpoint: str | None = None


def train(config: TrainConfig | None = None, out: str | Path = "runs/default", **options: Any) -> TrainResult:
    """Run :class:`Trainer` (``options``: ``resume``, ``progress``, ``log``)."""
    return Trainer(config or TrainConfig(), out, **options).run()

