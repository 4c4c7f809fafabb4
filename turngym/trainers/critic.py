"""A learned turn-level critic: ``V(s_t)`` at each turn boundary, for PPO with GAE over turns.

The state a turn acts in is everything the policy has read before it writes its action, so
the critic reads the hidden state at the *turn boundary*: the last token before the turn's
action tokens (the end of the assistant header, after the observation). One value per turn,
not per token — the advantage estimators work on turns, and GAE's recursion runs over turns
(:func:`turngym.trainers.advantages.gae`), so a per-token critic would only add noise that
the turn-level advantage throws away.

Two kinds (``TrainConfig.critic``):

* ``shared`` — a linear value head on the *policy's* hidden state (shared trunk). The value
  loss is added to the policy loss (× ``value_coef``), so its gradient also shapes the trunk;
  the head has its own optimizer and learning rate. During the update the hidden states are
  read off the policy's own forward pass (a forward hook), so the critic adds a head, one
  no-grad trunk pass per rollout batch (the old values GAE needs) and nothing else.
* ``separate`` — a copy of the policy's (warm-started) trunk with its own head, weights and
  optimizer: no interference with the policy's features, at the price of a second
  forward/backward per update.

The value loss is PPO's clipped one: ``½ max((V − R)², (V_old + clip(V − V_old, ±ε) − R)²)``
with ``R`` the λ-return (the GAE advantage plus ``V_old``), averaged over turns.
:meth:`TurnCritic.state_dict` holds the head, the separate trunk and the optimizer, so a
checkpoint restores the critic exactly.
"""

from __future__ import annotations

import contextlib
import copy
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from turngym.core.errors import ConfigError

__all__ = [
    "CRITIC_KINDS",
    "TurnCritic",
    "TurnTargets",
    "critic_discount",
    "explained_variance",
    "fit_critic",
    "lambda_returns",
    "plot_value_vs_return",
    "turn_positions",
    "value_provider",
    "whiten",
]

CRITIC_KINDS = ("shared", "separate")


def turn_positions(sample: Any) -> list[int]:
    """Token positions whose hidden state is each turn's state, in turn order.

    The position just before a turn's first action token: the model has read the whole
    history and the new observation there, and nothing of the action it is about to write.
    """
    spans = sample.turn_spans
    out = []
    for turn in sorted(spans):
        start = spans[turn][0]
        if start < 1:
            raise ConfigError(f"turn {turn} of {sample.episode_id!r} starts at token 0: no state precedes it to read a value from")
        out.append(start - 1)
    return out


def explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
    """``1 − Var(R − V) / Var(R)``: 1 = the critic predicts every return, 0 = no better than their
    mean, negative = worse than the mean (NaN when the returns do not vary)."""
    returns = np.asarray(returns, np.float64)
    var = float(returns.var())
    if returns.size < 2 or var == 0.0:
        return float("nan")
    return 1.0 - float((returns - np.asarray(values, np.float64)).var()) / var


def whiten(adv: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """Advantages with mean 0 and standard deviation 1 over the batch (PPO's normalization:
    GAE's scale follows the reward's, which would otherwise set the policy's step size)."""
    adv = np.asarray(adv, np.float64)
    if adv.size < 2:
        return adv - adv.mean() if adv.size else adv
    return (adv - adv.mean()) / (adv.std() + eps)


def lambda_returns(turns: Any, values: np.ndarray, *, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(GAE advantages, λ-returns ``A + V``) of a turn table's rows with the critic's ``values``.

    The λ-return is the critic's regression target: with λ = 1 the Monte-Carlo return-to-go,
    with λ = 0 the one-step TD target ``r + γ V(s')``.
    """
    from turngym.trainers.advantages import as_turn_table
    from turngym.trainers.advantages.gae import gae

    table = as_turn_table(turns)
    cols = {"episode": table.episode, "group": table.group, "turn": table.turn, "reward": table.reward, "value": np.asarray(values, np.float64)}
    adv = gae(cols, gamma=gamma, lam=lam)
    return adv, adv + np.asarray(values, np.float64)


@dataclass
class TurnTargets:
    """One episode's critic data: where its turns' states are, their old values, their targets."""

    positions: list[int]
    old_values: np.ndarray
    returns: np.ndarray


class TurnCritic:
    """The value function ``V(s_t)`` of a causal LM policy, one value per turn (see the module doc).

    Args:
        policy: the policy model (a Hugging Face causal LM, possibly LoRA-wrapped).
        kind: ``"shared"`` (a head on the policy's trunk) or ``"separate"`` (a copy of the trunk).
        lr: the critic's learning rate (head, and the separate trunk).
        clip: ε of the clipped value loss (0 = unclipped).
        max_grad_norm: gradient clipping of the critic's own parameters.
        seed: seeds the head's initialization (without touching the global torch RNG, so a
            run with a critic draws the same rollouts as one without).
    """

    def __init__(self, policy: Any, *, kind: str = "shared", lr: float = 1e-3, clip: float = 0.2, max_grad_norm: float = 1.0,
                 weight_decay: float = 0.0, seed: int = 0) -> None:
        import torch

        if kind not in CRITIC_KINDS:
            raise ConfigError(f"critic kind must be one of {CRITIC_KINDS}, got {kind!r}")
        self.kind, self.clip, self.max_grad_norm = kind, clip, max_grad_norm
        hidden = int(policy.config.hidden_size)
        device = next(policy.parameters()).device
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.head = torch.nn.Linear(hidden, 1).to(device)
            torch.nn.init.normal_(self.head.weight, std=1.0 / hidden)
            torch.nn.init.zeros_(self.head.bias)
        self.trunk: Any = None
        if kind == "separate":
            self.trunk = copy.deepcopy(_decoder(policy)).float()
            for p in self.trunk.parameters():
                p.requires_grad_(True)
        self.optimizer = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=weight_decay)
        self._captured: Any = None

    # ---------------------------------------------------------------- parameters and state
    def parameters(self) -> list[Any]:
        params = list(self.head.parameters())
        if self.trunk is not None:
            params += [p for p in self.trunk.parameters() if p.requires_grad]
        return params

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "head": self.head.state_dict(), "trunk": None if self.trunk is None else self.trunk.state_dict(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != self.kind:
            raise ConfigError(f"this critic is {self.kind!r}, the saved one {state.get('kind')!r}")
        self.head.load_state_dict(state["head"])
        if self.trunk is not None:
            self.trunk.load_state_dict(state["trunk"])
        self.optimizer.load_state_dict(state["optimizer"])

    def train(self, mode: bool = True) -> None:
        self.head.train(mode)
        if self.trunk is not None:
            self.trunk.train(mode)

    # ---------------------------------------------------------------- forward
    @contextlib.contextmanager
    def reading(self, policy: Any) -> Iterator[None]:
        """While active, the shared critic keeps the hidden states of the policy's forward passes
        (so the update reads its values off the pass that computes the log-probs)."""
        if self.kind != "shared":
            yield
            return

        def keep(_module: Any, _args: Any, output: Any) -> None:
            self._captured = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]

        handle = _decoder(policy).register_forward_hook(keep)
        try:
            yield
        finally:
            handle.remove()
            self._captured = None

    def hidden(self, policy: Any, batch: Any) -> Any:
        """Hidden states ``(n, width, hidden)`` the critic reads for ``batch``: the separate trunk's,
        or (shared) those of the policy's forward pass just run under :meth:`reading` — or a
        fresh pass of the policy's trunk when none was captured."""
        if self.trunk is not None:
            return self.trunk(input_ids=batch.input_ids).last_hidden_state
        if self._captured is not None:
            h, self._captured = self._captured, None
            return h
        return _decoder(policy)(input_ids=batch.input_ids).last_hidden_state

    def predict(self, hidden: Any, rows: Any, cols: Any) -> Any:
        """Values at the given (row, position) pairs of ``hidden``."""
        return self.head(hidden[rows, cols].float()).squeeze(-1)

    def values(self, policy: Any, samples: Sequence[Any], *, pad_id: int, device: Any, micro_batch_size: int = 32) -> list[np.ndarray]:
        """Per-turn values of each rendered episode (no gradients), in turn order."""
        import torch

        from turngym.trainers.batch import collate

        out: list[np.ndarray] = [np.zeros(0)] * len(samples)
        order = np.argsort([len(s.input_ids) for s in samples], kind="stable")  # similar lengths together: less padding
        was_training = policy.training
        policy.eval()
        self.train(False)
        try:
            with torch.no_grad():
                for start in range(0, len(order), micro_batch_size):
                    idx = order[start : start + micro_batch_size]
                    batch = collate([samples[i] for i in idx], None, pad_id, device)
                    rows, cols, counts = _gather_index([turn_positions(samples[i]) for i in idx], device)
                    v = self.predict(self.hidden(policy, batch), rows, cols).double().cpu().numpy()
                    for i, part in zip(idx, np.split(v, np.cumsum(counts)[:-1])):
                        out[i] = part
        finally:
            policy.train(was_training)
        return out

    # ---------------------------------------------------------------- loss and update
    def loss(self, policy: Any, batch: Any, targets: Sequence[TurnTargets]) -> tuple[Any, dict[str, float]]:
        """The clipped value loss of one micro-batch (``targets`` aligned with its rows)."""
        import torch

        device = batch.input_ids.device
        rows, cols, _ = _gather_index([t.positions for t in targets], device)
        pred = self.predict(self.hidden(policy, batch), rows, cols)
        old = torch.as_tensor(np.concatenate([t.old_values for t in targets]), dtype=pred.dtype, device=device)
        ret = torch.as_tensor(np.concatenate([t.returns for t in targets]), dtype=pred.dtype, device=device)
        loss = clipped_value_loss(pred, old, ret, self.clip)
        with torch.no_grad():
            clipped = (pred - old).abs() > self.clip if self.clip > 0 else torch.zeros_like(pred, dtype=torch.bool)
        return loss, {"value_clip_frac": float(clipped.float().mean().item())}

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> float:
        """Clip the critic's gradients, take an optimizer step; returns the gradient norm."""
        import torch

        norm = torch.nn.utils.clip_grad_norm_(self.parameters(), self.max_grad_norm)
        self.optimizer.step()
        return float(norm)


def clipped_value_loss(pred: Any, old: Any, ret: Any, clip: float) -> Any:
    """PPO's clipped value loss ``½ mean max((V − R)², (V_old + clip(V − V_old, ±ε) − R)²)``:
    a value cannot move more than ε from the one GAE used in a single update (``clip`` 0 = plain MSE)."""
    import torch

    err = (pred - ret) ** 2
    if clip > 0:
        clipped = old + torch.clamp(pred - old, -clip, clip)
        err = torch.maximum(err, (clipped - ret) ** 2)
    return 0.5 * err.mean()


def _gather_index(positions: Sequence[Sequence[int]], device: Any) -> tuple[Any, Any, list[int]]:
    import torch

    counts = [len(p) for p in positions]
    rows = torch.as_tensor(np.repeat(np.arange(len(positions)), counts), dtype=torch.long, device=device)
    cols = torch.as_tensor(np.concatenate([np.asarray(p, np.int64) for p in positions]) if positions else np.zeros(0, np.int64),
                           dtype=torch.long, device=device)
    return rows, cols, counts


def _decoder(model: Any) -> Any:
    """The transformer trunk (no LM head) of a causal LM, LoRA-wrapped or not."""
    try:
        decoder = model.get_decoder()
    except (AttributeError, NotImplementedError):
        decoder = None
    if decoder is None:
        raise ConfigError(f"{type(model).__name__} exposes no decoder (get_decoder()): a turn-level critic reads the trunk's hidden states")
    return decoder


def plot_value_vs_return(values: np.ndarray, returns: np.ndarray, out: Path, *, ev_by_step: Sequence[tuple[int, float]] = (),
                         title: str = "") -> Path:
    """Scatter of the critic's values against the returns they predict (one point per turn),
    beside the explained variance per RL step. Needs matplotlib; written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from turngym.trainers.atomic import write_bytes

    values, returns = np.asarray(values, np.float64), np.asarray(returns, np.float64)
    fig, axes = plt.subplots(1, 2 if ev_by_step else 1, figsize=(10 if ev_by_step else 5, 4), dpi=110, squeeze=False)
    ax = axes[0, 0]
    ax.scatter(returns, values, s=6, alpha=0.4, color="#4c72b0")
    if values.size:
        lo, hi = float(min(values.min(), returns.min())), float(max(values.max(), returns.max()))
        ax.plot([lo, hi], [lo, hi], color="#c44e52", lw=1, label="V = R")
        ax.legend(loc="upper left", fontsize=8)
    ax.set_xlabel("λ-return R (target)")
    ax.set_ylabel("critic value V (before the update)")
    ax.set_title(f"{title} — EV {explained_variance(values, returns):.2f}".strip(" —"))
    ax.grid(alpha=0.3)
    if ev_by_step:
        ax2 = axes[0, 1]
        steps, evs = zip(*ev_by_step)
        ax2.plot(steps, evs, "o-", color="#55a868")
        ax2.axhline(0.0, color="grey", lw=0.8)
        ax2.set_xlabel("RL step")
        ax2.set_ylabel("explained variance")
        ax2.set_title("critic explained variance per step")
        ax2.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    write_bytes(Path(out), buf.getvalue())
    return Path(out)


def critic_discount(algo: str, params: dict[str, Any]) -> tuple[float, float]:
    """(γ, λ) of the critic's targets for a run of ``algo``: the estimator's own ``gamma``/``lam``
    (its defaults, overridden by ``params``), so the critic learns the returns the advantages
    discount with; an estimator without them (GRPO, GiGPO's ``omega`` only…) gives the
    undiscounted Monte-Carlo return (γ = λ = 1)."""
    import inspect

    from turngym.trainers.advantages import ESTIMATORS

    sig = inspect.signature(ESTIMATORS[algo]).parameters
    out = []
    for name in ("gamma", "lam"):
        default = sig[name].default if name in sig and sig[name].default is not inspect.Parameter.empty else 1.0
        out.append(float(params.get(name, default)))
    return out[0], out[1]


def value_provider(ctx: Any) -> np.ndarray:
    """The ``value`` column: the trainer's critic's value of each turn's state (before the update).

    Registered as the provider of ``value`` (:mod:`turngym.trainers.providers`), so an estimator
    that declares it — ``gae`` — gets the learned critic's values in the built-in trainer.
    """
    from turngym.agents.render import render_episode

    trainer = ctx.trainer
    critic = getattr(trainer, "critic", None)
    if critic is None:
        raise ConfigError("the 'value' column comes from a learned critic, and this run has none: set critic='shared' or 'separate'")
    samples = [render_episode(ep, trainer.renderer) for ep in ctx.episodes]
    values = critic.values(trainer.model, samples, pad_id=trainer.pad_id, device=trainer.device, micro_batch_size=trainer.config.micro_batch_size)
    return np.concatenate(values) if values else np.zeros(0)


def fit_critic(critic: TurnCritic, policy: Any, samples: Sequence[Any], returns: Sequence[np.ndarray], *, steps: int, batch_size: int,
               pad_id: int, seed: int = 0, policy_optimizer: Any = None) -> list[float]:
    """Regress the critic on fixed targets (one array of returns per sample) for ``steps``
    minibatches; returns the loss per step. Outside the trainer: the variance study fits a critic
    to a fixed policy's returns, and the tests check it learns a known value function.
    ``policy_optimizer`` also steps the policy's trunk (the shared kind trains it through the loss)."""
    from turngym.trainers.batch import collate

    rng = np.random.default_rng(seed)
    device = next(policy.parameters()).device
    losses = []
    self_targets = [TurnTargets(turn_positions(s), np.asarray(r, np.float64), np.asarray(r, np.float64)) for s, r in zip(samples, returns)]
    saved_clip, critic.clip = critic.clip, 0.0  # fixed targets: nothing to stay close to
    critic.train(True)
    try:
        for _ in range(steps):
            idx = rng.choice(len(samples), size=min(batch_size, len(samples)), replace=False)
            batch = collate([samples[i] for i in idx], None, pad_id, device)
            critic.zero_grad()
            if policy_optimizer is not None:
                policy_optimizer.zero_grad(set_to_none=True)
            loss, _ = critic.loss(policy, batch, [self_targets[i] for i in idx])
            loss.backward()
            critic.step()
            if policy_optimizer is not None:
                policy_optimizer.step()
            losses.append(float(loss.item()))
    finally:
        critic.clip = saved_clip
    return losses
