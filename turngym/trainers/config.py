"""Training configuration: one dataclass, a docstring per field, validated up front."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError
from turngym.rollout.metrics import DEFAULT_MAX_INFRA_ERROR_RATE
from turngym.rollout.types import DEFAULT_REWARD_RANGE

__all__ = ["TrainConfig"]


@dataclass
class TrainConfig:
    """Everything a ``turngym train`` run needs; the defaults are the embedded default run.

    The default trains the embedded tiny model (a 0.5M-parameter variant) on
    ``turngym/Math-v0`` with 1–2 calculator steps before the answer, so the outcome depends on
    earlier turns, with GiGPO: 150 imitation steps on oracle demonstrations of which 30% of
    the turns are random actions, then 24 RL steps with groups of 8 rollouts for each of 16
    tasks. Tasks come from a fixed pool of 32 (RL on a fixed set of levels: a model this small
    cannot learn to copy numbers from unseen problems in a CPU budget of minutes), and the
    success rate is measured on that pool, sampling as in training. Measured on a 2-core CPU:
    34.5% → 61.5% in 167 s (seed 0; deterministic for a given set of installed libraries, the
    same under load, only slower).
    """

    env_id: str = "turngym/Math-v0"
    """Environment id to train on."""
    env_kwargs: dict[str, Any] = field(default_factory=lambda: {"min_steps": 1, "max_steps": 2})
    """Constructor arguments of the env."""
    algo: str = "gigpo"
    """Advantage estimator (a key of ``turngym.trainers.advantages.ESTIMATORS``)."""
    algo_params: dict[str, Any] = field(default_factory=dict)
    """Keyword parameters of the estimator (``{"gamma": 0.95, "omega": 1.0}``)."""
    model: str = "tiny"
    """``tiny`` (embedded), ``smollm2`` or a local Hugging Face model directory."""
    tiny_model: dict[str, Any] = field(default_factory=lambda: {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2})
    """Architecture overrides of the embedded model (:class:`turngym.agents.tiny.TinyModelConfig`
    fields) when ``model="tiny"``: the default run uses a 0.5M-parameter variant, which learns
    the default task ~5× faster on a CPU than the 4M-parameter rollout default. ``{}`` = that."""
    steps: int = 24
    """RL iterations (one rollout batch and one or more updates each)."""
    seed: int = 0
    """Seeds everything: tasks, sampling, data order. Same seed ⇒ same run."""
    groups_per_step: int = 16
    """Tasks per RL iteration."""
    group_size: int = 8
    """Rollouts per task (sharing its initial state), the GRPO/GiGPO group. Keep ≥ 8 for a
    pretrained model: at a 20–30% success rate a group of 4 is all-failure about a third of the
    time (0.75⁴ ≈ 0.32), a group of 8 a tenth (0.75⁸ ≈ 0.10)."""
    max_new_tokens: int = 24
    """Token budget of one action."""
    temperature: float = 1.0
    """Sampling temperature of rollouts (1.0 keeps the recorded log-probs the model's own). A
    warm-started small model is nearly deterministic at 1.0 (``confident_frac`` ≈ 0.9 in
    ``docs/study/smollm2-rl-cpu``); 1.0 with dynamic sampling is the recipe's choice, above it
    the update's ratio is to a tempered policy the model never plays greedily."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling (:func:`turngym.trainers.sampling.dynamic_batch`): drop the groups
    whose returns are all equal (no group-relative signal) and play more rounds of fresh tasks,
    at most ``dynamic_rounds``, until ``groups_per_step`` informative groups are in hand. For a
    small pretrained model: on (its warm-started policy is nearly deterministic, so most groups
    are uniform); off in the embedded tiny run, whose measured default it would change."""
    dynamic_rounds: int = 3
    """Extra rollout rounds dynamic sampling may play per step (bounds the step's cost at
    ``1 + dynamic_rounds`` rollouts); a batch still short is filled with uniform groups."""
    edge_pool: int = 0
    """Difficulty-filtered task pool (:class:`turngym.trainers.sampling.EdgePool`): every
    ``edge_refresh`` steps score this many candidate tasks with ``edge_k`` rollouts of the current
    policy and train on those solved 1..k−1 times. 0 = off. For a small pretrained model on fresh
    tasks: 4 × ``groups_per_step`` candidates (a 25–75% success rate keeps about a third of them)."""
    edge_k: int = 4
    """Rollouts per candidate task when scoring the edge pool (≥ 2: a task needs a success and a failure)."""
    edge_refresh: int = 10
    """RL steps between two scorings of the edge pool (the policy moves; the edge moves with it)."""
    lr: float = 2e-4
    """RL learning rate (AdamW)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping."""
    micro_batch_size: int = 32
    """Episodes per forward/backward; gradients accumulate over the whole minibatch."""
    minibatches: int = 1
    """Optimizer steps per rollout batch per epoch (the batch split evenly)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch (> 1 makes the clipping matter)."""
    clip_low: float = 0.2
    """PPO clip ε below 1."""
    clip_high: float = 0.28
    """PPO clip ε above 1 (DAPO clip-higher)."""
    kl_coef: float = 0.0
    """β of the KL(π‖π_ref) loss term; the reference is the warm-started policy. 0 = off (no
    reference forward pass): the small-model successes of issue 37 (nanochat, DAPO) train without it."""
    reward_weights: dict[str, float] = field(default_factory=dict)
    """Per-signal shaping weights overriding the env spec's (``{"progress": 0.5}``)."""
    process_weights: dict[str, float] | None = None
    """Per-signal weights of the ``process`` column, PAPO's process score (None = the env spec's
    suggestions, independent of ``reward_weights`` — ``reward_weights`` all 0 gives PAPO's
    outcome-only reward with a dense process term)."""
    shaping_cap: float = 0.5
    """Bound on an episode's cumulative shaping reward."""
    warmup_steps: int = 150
    """Imitation (SFT) steps on oracle demonstrations before RL; 0 = none."""
    warmup_holdout: int = 0
    """Demonstrations held out of imitation to watch it (:mod:`turngym.trainers.warmstop`); 0 = none
    (no early stop). The held-out NLL and predictive entropy go to ``metrics.jsonl`` (``phase: warmup``)."""
    warmup_check_every: int = 5
    """Imitation steps between two held-out checks."""
    warmup_patience: int = 0
    """Stop imitation after this many held-out checks without a lower NLL (0 = never on NLL)."""
    warmup_entropy_floor: float = 0.0
    """Stop imitation once the policy's mean predictive entropy (nats per action token) on the
    held-out demonstrations falls below this: a warm start that leaves room to explore (0 = off)."""
    warmup_lr: float = 2e-3
    """Imitation learning rate."""
    warmup_batch_size: int = 32
    """Demonstrations per imitation step."""
    demo_episodes: int = 1000
    """Oracle demonstrations collected for the warm start."""
    demo_noise: float = 0.3
    """Probability that a demonstration turn is a random action instead of the oracle's."""
    task_pool: int = 32
    """Draw every task (demonstrations, RL, evaluation) from this many fixed task seeds, like
    RL on a fixed set of levels; 0 = a fresh task every episode, evaluated on held-out seeds."""
    eval_episodes: int = 200
    """Episodes for the before/after success rate (sampled at ``temperature``): held-out tasks,
    or the task pool cycled when ``task_pool`` is set."""
    eval_every: int = 0
    """Also evaluate every N RL steps (0 = only before and after)."""
    lora: bool | None = None
    """Train LoRA adapters (peft) instead of all weights; None = only for non-tiny models."""
    lora_rank: int = 16
    """LoRA rank (1–32 suffices for RL, "LoRA Without Regret"); 16 for a small pretrained model."""
    lora_alpha: int = 32
    """LoRA alpha (scale alpha/rank = 2). The RL ``lr`` of a LoRA run is ~10× full fine-tuning's: 1e-3 on SmolLM2-135M
    (``docs/study/smollm2-rl-cpu``'s sweep)."""
    lora_targets: str = "all-linear"
    """Modules that get adapters: ``"all-linear"`` (every linear layer of the decoder: attention and
    MLP, not the head) or a comma-separated list of module names (``"q_proj,v_proj"``). RL with
    LoRA matches full fine-tuning only with adapters on every layer and every linear module
    ("LoRA Without Regret", 2025): keep ``all-linear`` and ``lora_layers=0`` unless the CPU
    budget forces fewer."""
    lora_layers: int = 0
    """Put adapters on the last ``lora_layers`` decoder layers only (0 = every layer). Backward
    then stops at the lowest adapted layer: on a CPU, where a 135M model's update costs minutes,
    adapting the top quarter makes an update about half as expensive as adapting all of it."""
    bf16: bool = True
    """bfloat16 weights and autocast on CUDA (see ``cpu_bf16`` for a CPU)."""
    cpu_bf16: bool = False
    """bfloat16 autocast for the update on a CPU with native bf16 (``avx512_bf16`` or AMX; ignored,
    with a note in the log, on one without, where bf16 is emulated and slower). The weights stay
    float32 and only the matrix products run in bf16: SmolLM2-135M's forward and backward with
    LoRA on every linear module take 0.62× the float32 time on this project's avx512_bf16 CPU
    (``benchmarks/bench_train_dtype.py``). The learner's log-probs are then not the float32
    sampler's, so the update recomputes π_old itself and weights tokens by TIS, as it does for
    vLLM's rollouts (no extra pass with one minibatch and one epoch)."""
    keep_system_prompt: bool | None = None
    """Show the env's instructions to the model; None = not for the tiny model (it learns the
    format from demonstrations, and the prompt would triple its sequence length)."""
    history: int | None = None
    """Turns of history in each prompt (None = all)."""
    constrain_choices: bool = False
    """Where the env enumerates its valid actions (``env.action_choices()``, e.g. Household's
    admissible commands), decode only one of them (``HFPolicy(constrain_choices=True)``): no
    invalid action is ever sampled, and the update renormalizes the model's log-probs over the
    same allowed tokens each rollout recorded, so the constrained rollouts stay on-policy. For a
    small model that cannot yet write a whole valid command, this is the difference between
    learning which action to take and learning nothing (every action invalid)."""
    episodes: str | None = None
    """Train on saved episodes instead of rolling out the env: a JSONL file (``turngym proxy``'s
    ``OUT/episodes.jsonl`` — your own agent's episodes — or any episodes sampled by a token policy)
    or a directory holding ``episodes.jsonl``. Every RL step is one round of updates over all of
    them; their recorded log-probs are π_old, so PPO's clip bounds how far the later steps move.
    Needs ``warmup_steps=0`` and ``eval_episodes=0`` (no env to imitate or evaluate on); rewards
    are shaped with the spec of the episodes' env when that env is registered."""
    skip_bad_episodes: bool = False
    """With ``episodes``: leave out the saved records that fail the checks run before the first step
    (non-finite or positive log-probs, token ids outside the vocabulary, a prompt that does not
    extend the turn before it, a reward outside ``reward_range``), logging each one's id and reason
    and counting them, instead of refusing the run on the first (``turngym train --skip-bad-episodes``)."""
    reward_range: tuple[float, float] = DEFAULT_REWARD_RANGE
    """The declared range of every reward in saved episodes (each turn's reward and signals, the
    outcome's reward): one reward of 1e308 would swamp its group's baseline and zero every other
    episode's signal, so a record outside it is refused (or skipped with ``skip_bad_episodes``)."""
    max_tokens_per_micro_batch: int | None = None
    """Padded tokens per forward/backward (rows × longest row), beside ``micro_batch_size`` rows:
    activation memory grows with tokens, not rows, so a micro-batch of long captured episodes is
    split further (a row longer than this goes alone). 0 = rows only; None = 8192 for every model
    but the embedded tiny one (its activations are small, and its default run keeps its exact
    micro-batches)."""
    logit_chunk_tokens: int = 1024
    """Policy tokens whose vocabulary logits exist at once in the update (each chunk checkpointed:
    :func:`turngym.trainers.batch.token_logprobs`); 0 = all of a micro-batch's at once."""
    gradient_checkpointing: bool | None = None
    """Recompute each decoder layer's activations in backward instead of keeping them (one more
    forward pass per update): a 2.6k-token SmolLM2 episode otherwise keeps ~4 GB of activations.
    None = on for every model but the embedded tiny one (whose activations are small)."""
    save_every: int = 1
    """Checkpoint every N RL steps (and always at the end)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk, newest first: resume falls back to an older one when the newest
    is damaged."""
    threads: int = 1
    """torch CPU threads (0 = torch's default). One is fastest for the tiny model: its matrices
    are too small to amortize thread synchronization, and on a busy machine extra OpenMP
    threads spin against other processes (10× slower measured on a loaded 2-core box)."""

    engine: str = "hf"
    """Rollout engine: ``"hf"`` (the trained torch model samples) or ``"vllm"`` (a vLLM engine
    samples; the trainer's weights, LoRA merged, are pushed into it after every update, and the
    loss is importance-corrected against the engine's log-probs: :mod:`turngym.trainers.engine`). A name
    of the table :data:`turngym.trainers.engines.ENGINES`."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """``vllm.LLM`` keywords for ``engine="vllm"`` (``dtype``, ``kv_cache_gb``, ``enforce_eager``, ...)."""
    tis_cap: float = 2.0
    """Truncation ``C`` of the per-token importance ratio ``min(π_trainer / π_engine, C)`` (``engine="vllm"``)."""

    async_rollouts: bool = False
    """Overlap rollouts with updates (``turngym train --async``, :mod:`turngym.trainers.asynchronous`):
    a rollout worker (``async_worker``) plays the next steps' episodes on its own copy of the weights while the learner
    updates; every turn records the policy version that sampled it, and the update corrects each
    token by the truncated importance ratio to the version that sampled it (``tis_cap``)."""
    async_worker: str = "process"
    """Where the rollout worker runs: ``"process"`` (its own interpreter: the worker and the learner
    run in parallel, not taking turns on the GIL; start-up ~2–3 s and the policy pickled once) or
    ``"thread"`` (in the learner's process; for tests, or when the model's kernels, which release
    the GIL, dominate decoding). Both give the same run, row for row."""
    worker_timeout_s: float = 0.0
    """How long the learner waits for a batch while the rollout worker reports nothing (it reports
    every decode call and every wait for weights) before it stops the run with an error naming the
    worker and what it last did (:mod:`turngym.trainers.deadline`). 0 = automatic: 300 s, or 5× the
    slowest step's rollout so far if that is longer."""
    async_lag: int = 2
    """How many versions the worker's policy may trail the learner when it starts a step's batch
    (step ``k`` starts with version ``k − async_lag``): the bound of the queue of played batches.
    With 1 the worker must wait at its swap call for the update running beside it (the two
    overlap only until then); with 2 that version was published a whole step earlier."""
    async_swap_call: int = 2
    """Partial rollouts: at this decode call of each batch the worker moves its in-flight episodes
    on to the next version (waiting for it if the learner has not published it). A fixed call keeps
    the run a function of its seed, so a killed run resumes exactly; 0 = take the newest version at
    every decode call (never waits, but which turn got which version then depends on timing)."""
    async_is: str = "prefix"
    """Importance correction of stale turns: ``"prefix"`` weights each token by the truncated
    ratio of every action token up to it (per-decision IS: it also corrects how likely the
    learner was to reach the turn's state, which matters when episode length depends on the
    policy), ``"token"`` by its own ratio only (vLLM-style TIS). Measured in ``docs/async.md``."""
    max_staleness: int = 2
    """Turns sampled more than this many versions behind the learner follow ``stale_policy``."""
    stale_policy: str = "is"
    """What happens to an episode with a turn staler than ``max_staleness``: ``"is"`` keeps it
    (importance-corrected like every async turn), ``"drop"`` drops the episode (biased toward
    episodes that finish fast: long ones are the ones that span versions)."""

    critic: str = "auto"
    """Learned turn-level critic (:mod:`turngym.trainers.critic`): ``"shared"`` (a value head on the
    policy's hidden state at each turn boundary), ``"separate"`` (a copy of the policy's trunk with
    its own head), ``"none"``; ``"auto"`` = ``"shared"`` for estimators that read a ``value``
    column (``gae``: PPO with GAE over turns), none otherwise. A critic trained beside another
    estimator logs its explained variance, and ``gae_grouped`` uses it as its baseline with
    ``algo_params={"value_baseline": True}``. The shared head is the default because it adds a
    fraction of what a second trunk adds to an update (``benchmarks/bench_critic.py
    --update-only``) while learning a known value function nearly as well; the separate trunk
    keeps the value loss out of the policy's features."""
    critic_lr: float = 1e-3
    """The critic's own learning rate (head, and the separate trunk)."""
    value_clip: float = 0.2
    """ε of PPO's clipped value loss (how far a value may move from the one GAE used; 0 = plain MSE)."""
    value_coef: float = 0.5
    """Weight of the value loss in the total loss (with the shared head, how hard it pulls on the trunk)."""

    max_infra_error_rate: float = DEFAULT_MAX_INFRA_ERROR_RATE
    """The largest share of episodes ending in an infrastructure error (a dead sandbox or server, or
    an env bug: an exception out of ``env.step``) the run accepts, over all its RL rollouts so far
    and within each evaluation. Such episodes are dropped, never scored; past this share the
    survivors are no longer a fair sample, so the run stops with
    :class:`~turngym.core.errors.TooManyInfraErrors` (quoting the first error; its traceback is in
    the episode's ``meta["infra_traceback"]``) instead of silently training on them. 1 = never stop.
    Each RL row of ``metrics.jsonl`` logs ``infra_errors`` and the run's ``infra_error_rate``."""

    report_to: tuple[str, ...] = ()
    """Experiment trackers that mirror every ``metrics.jsonl`` row and sample episodes:
    ``("tensorboard",)`` → ``OUT/tensorboard``, ``("wandb",)`` → ``OUT/wandb`` (honours
    ``WANDB_MODE=offline``). Optional extras: ``pip install 'turngym[track]'``."""

    def __post_init__(self) -> None:
        from turngym.trainers.advantages import ESTIMATORS
        from turngym.trainers.engines import engine_class
        from turngym.trainers.tracking import parse_backends

        self.report_to = parse_backends(self.report_to)  # JSON gives a list, ``--set`` a comma string

        if self.algo not in ESTIMATORS:
            import difflib

            close = difflib.get_close_matches(self.algo, list(ESTIMATORS), n=2)
            hint = f" Did you mean {' or '.join(close)}?" if close else ""
            raise ConfigError(f"unknown algo {self.algo!r}.{hint} Choose one of: {', '.join(sorted(ESTIMATORS))}")
        from turngym.trainers.providers import missing_inputs

        lacking = missing_inputs(self.algo)
        if lacking:
            raise ConfigError(f"algo {self.algo!r} reads the column(s) {lacking}, which the rollout's turn table lacks and no provider "
                              "fills (a 'value' column needs a learned critic): register one with "
                              "turngym.trainers.providers.register_provider, or choose an estimator without them (gae_grouped)")
        if self.critic not in ("auto", "shared", "separate", "none"):
            raise ConfigError(f"critic must be 'auto', 'shared', 'separate' or 'none', got {self.critic!r}")
        from turngym.trainers.advantages import estimator_inputs

        if self.critic == "none" and "value" in estimator_inputs(self.algo):
            raise ConfigError(f"algo {self.algo!r} reads a learned critic's values: set critic='shared', 'separate' or 'auto' (not 'none')")
        if self.algo_params.get("value_baseline") and self.critic_kind is None:
            raise ConfigError("algo_params value_baseline=True uses the learned critic's values: set critic='shared' or 'separate'")
        if self.critic_lr <= 0 or self.value_clip < 0 or self.value_coef < 0:
            raise ConfigError(f"need critic_lr > 0, value_clip >= 0, value_coef >= 0; got {self.critic_lr}, {self.value_clip}, {self.value_coef}")
        positive = ("steps", "groups_per_step", "group_size", "max_new_tokens", "micro_batch_size", "minibatches", "ppo_epochs", "warmup_batch_size", "save_every", "keep_checkpoints")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "demo_episodes", "eval_episodes", "eval_every", "kl_coef", "threads", "task_pool", "lora_layers",
                     "dynamic_rounds", "edge_pool", "warmup_holdout", "warmup_patience", "warmup_entropy_floor"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.max_infra_error_rate <= 1.0:
            raise ConfigError(f"max_infra_error_rate is a share of episodes in [0, 1], got {self.max_infra_error_rate}")
        if not 0.0 <= self.demo_noise <= 1.0:
            raise ConfigError(f"demo_noise is a probability, got {self.demo_noise}")
        if self.warmup_steps and not self.demo_episodes:
            raise ConfigError("warmup_steps > 0 needs demo_episodes > 0 (demonstrations to imitate)")
        if self.lr <= 0 or self.warmup_lr <= 0:
            raise ConfigError(f"learning rates must be > 0, got lr={self.lr}, warmup_lr={self.warmup_lr}")
        if not (0 <= self.clip_low < 1 and self.clip_high >= 0):
            raise ConfigError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {self.clip_low}, {self.clip_high}")
        if self.temperature <= 0:
            raise ConfigError("temperature must be > 0 for RL (log-probs of greedy actions are not a policy's)")
        refuses = engine_class(self.engine).refuses
        if self.constrain_choices and "constrain_choices" in refuses:
            raise ConfigError(f"constrain_choices trains on the hf engine only ({refuses['constrain_choices']}): "
                              f"drop --engine {self.engine} or constrain_choices")
        if self.episodes is not None and (self.warmup_steps or self.eval_episodes or "episodes" in refuses):
            raise ConfigError("training on saved episodes (episodes=...) has no env to imitate, evaluate or roll out: set "
                              "warmup_steps=0 and eval_episodes=0 and keep engine='hf' (turngym train --episodes does this)")
        if self.episodes is not None and self.async_rollouts:
            raise ConfigError("saved episodes (episodes=...) are the same batch every step: there is no rollout for --async to "
                              "overlap with the updates; drop --async or --episodes")
        bounds = [float(x) for x in self.reward_range]  # JSON and --set give a list
        if len(bounds) != 2 or not all(math.isfinite(x) for x in bounds) or bounds[0] > bounds[1]:
            raise ConfigError(f"reward_range must be [low, high] with finite low <= high, got {list(self.reward_range)}")
        self.reward_range = (bounds[0], bounds[1])
        if (self.max_tokens_per_micro_batch or 0) < 0 or self.logit_chunk_tokens < 0:
            raise ConfigError(f"need max_tokens_per_micro_batch >= 0 and logit_chunk_tokens >= 0 (0 = no bound), got "
                              f"{self.max_tokens_per_micro_batch}, {self.logit_chunk_tokens}")
        if self.tis_cap <= 0:
            raise ConfigError(f"tis_cap must be > 0 (2 is common), got {self.tis_cap}")
        if self.async_lag < 1 or self.async_swap_call < 0 or self.max_staleness < 0:
            raise ConfigError(f"need async_lag >= 1, async_swap_call >= 0 and max_staleness >= 0; got {self.async_lag}, "
                              f"{self.async_swap_call}, {self.max_staleness}")
        if self.worker_timeout_s < 0:
            raise ConfigError(f"worker_timeout_s must be >= 0 (0: automatic), got {self.worker_timeout_s}")
        if self.async_worker not in ("process", "thread"):
            raise ConfigError(f"async_worker must be 'process' (the worker in its own interpreter) or 'thread', got {self.async_worker!r}")
        if self.async_is not in ("prefix", "token"):
            raise ConfigError(f"async_is must be 'prefix' (per-decision IS) or 'token' (per-token TIS), got {self.async_is!r}")
        if self.stale_policy not in ("is", "drop"):
            raise ConfigError(f"stale_policy must be 'is' (keep stale turns, importance-corrected) or 'drop', got {self.stale_policy!r}")
        if self.async_rollouts and "async_rollouts" in refuses:
            raise ConfigError(f"async_rollouts runs the rollout worker on the hf engine ({refuses['async_rollouts']}): "
                              f"drop --engine {self.engine} or --async")
        if self.edge_k < 2 or self.edge_refresh < 1 or self.warmup_check_every < 1:
            raise ConfigError(f"need edge_k >= 2, edge_refresh >= 1 and warmup_check_every >= 1; got {self.edge_k}, {self.edge_refresh}, "
                              f"{self.warmup_check_every}")
        if (self.dynamic_sampling or self.edge_pool) and (self.async_rollouts or self.episodes is not None):
            raise ConfigError("dynamic_sampling and edge_pool choose what the synchronous trainer plays: not with async_rollouts "
                              "or saved episodes")
        if (self.warmup_patience or self.warmup_entropy_floor) and not self.warmup_holdout:
            raise ConfigError("warmup_patience and warmup_entropy_floor watch held-out demonstrations: set warmup_holdout > 0")
        if self.warmup_holdout and self.warmup_holdout >= self.demo_episodes:
            raise ConfigError(f"warmup_holdout={self.warmup_holdout} leaves none of the {self.demo_episodes} demonstrations to imitate")
        if not self.lora_targets.strip():
            raise ConfigError("lora_targets must be 'all-linear' or a comma-separated list of module names")
        if self.groups_per_step * self.group_size % self.minibatches:
            raise ConfigError(f"minibatches={self.minibatches} must divide the {self.groups_per_step * self.group_size} episodes per step")

    @property
    def critic_kind(self) -> str | None:
        """The critic this run trains (``"shared"``/``"separate"``), or None."""
        if self.critic == "auto":
            from turngym.trainers.advantages import estimator_inputs

            return "shared" if "value" in estimator_inputs(self.algo) else None
        return None if self.critic == "none" else self.critic

    @property
    def use_lora(self) -> bool:
        return self.lora if self.lora is not None else self.model != "tiny"

    @property
    def micro_batch_tokens(self) -> int:
        """The bound on a micro-batch's padded tokens (0 = none)."""
        if self.max_tokens_per_micro_batch is not None:
            return self.max_tokens_per_micro_batch
        return 0 if self.model == "tiny" else 8192

    @property
    def use_gradient_checkpointing(self) -> bool:
        return self.gradient_checkpointing if self.gradient_checkpointing is not None else self.model != "tiny"

    @property
    def show_system_prompt(self) -> bool:
        return self.keep_system_prompt if self.keep_system_prompt is not None else self.model != "tiny"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown config field(s) {unknown}")
        return cls(**data)

    def save(self, path: Path) -> None:
        """Write the config atomically (a kill leaves the old file or the new one, never half)."""
        from turngym.trainers.atomic import write_json

        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: Path) -> TrainConfig:
        return cls.from_dict(json.loads(path.read_text()))
