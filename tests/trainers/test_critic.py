"""The learned turn-level critic: GAE over turns, the clipped value loss, learning a known value
function, and a checkpoint that restores it exactly."""

from __future__ import annotations

import numpy as np
import pytest

from turngym.trainers.critic import explained_variance, lambda_returns, whiten


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread, like the trainer (``TrainConfig.threads``): the tiny model's matrices are
    too small for threads, and on a busy machine extra threads spin against other processes."""
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Three episodes of different lengths, rows deliberately out of turn order.
TURNS = {
    "episode": [0, 0, 0, 1, 1, 2, 0],
    "group": [0, 0, 0, 0, 0, 1, 0],
    "turn": [0, 2, 1, 1, 0, 0, 3],
    "reward": [0.1, -0.2, 0.0, 1.0, 0.3, 0.7, 0.5],
}
VALUES = np.array([0.4, -0.3, 0.9, 0.2, -0.6, 0.25, 0.8])
GAMMA = 0.9


def _by_episode() -> dict[int, list[int]]:
    """Row indices of each episode in turn order (the plain-loop reference's view)."""
    rows: dict[int, list[int]] = {}
    for i in sorted(range(len(TURNS["turn"])), key=lambda i: (TURNS["episode"][i], TURNS["turn"][i])):
        rows.setdefault(TURNS["episode"][i], []).append(i)
    return rows


def test_gae_with_lambda_one_and_a_zero_critic_is_the_monte_carlo_return() -> None:
    zero = np.zeros(len(VALUES))
    adv, ret = lambda_returns(TURNS, zero, gamma=GAMMA, lam=1.0)
    expected = np.zeros(len(VALUES))
    for rows in _by_episode().values():
        g = 0.0
        for i in reversed(rows):
            g = TURNS["reward"][i] + GAMMA * g
            expected[i] = g
    assert adv == pytest.approx(expected, abs=1e-12)
    assert ret == pytest.approx(expected, abs=1e-12)
    # with a non-zero critic, λ = 1 is still the Monte-Carlo return minus the baseline
    adv_v, ret_v = lambda_returns(TURNS, VALUES, gamma=GAMMA, lam=1.0)
    assert adv_v == pytest.approx(expected - VALUES, abs=1e-12)
    assert ret_v == pytest.approx(expected, abs=1e-12)


def test_gae_with_lambda_zero_is_the_one_step_td_error() -> None:
    adv, ret = lambda_returns(TURNS, VALUES, gamma=GAMMA, lam=0.0)
    expected = np.zeros(len(VALUES))
    for rows in _by_episode().values():
        for k, i in enumerate(rows):
            v_next = VALUES[rows[k + 1]] if k + 1 < len(rows) else 0.0  # 0 after the final turn
            expected[i] = TURNS["reward"][i] + GAMMA * v_next - VALUES[i]
    assert adv == pytest.approx(expected, abs=1e-12)
    assert ret == pytest.approx(expected + VALUES, abs=1e-12)


def test_explained_variance_and_whitening() -> None:
    r = np.array([0.0, 1.0, 2.0, 3.0])
    assert explained_variance(r, r) == 1.0
    assert explained_variance(np.full(4, r.mean()), r) == pytest.approx(0.0)
    assert explained_variance(-r, r) < 0
    assert np.isnan(explained_variance(r, np.ones(4)))
    w = whiten(np.array([1.0, 2.0, 6.0]))
    assert w.mean() == pytest.approx(0.0, abs=1e-12) and w.std() == pytest.approx(1.0, abs=1e-6)


def test_clipped_value_loss_limits_the_move_from_the_old_value() -> None:
    torch = pytest.importorskip("torch")
    from turngym.trainers.critic import clipped_value_loss

    old = torch.tensor([0.0, 0.0])
    ret = torch.tensor([1.0, 1.0])
    pred = torch.tensor([0.9, 0.1], requires_grad=True)
    loss = clipped_value_loss(pred, old, ret, 0.2)
    # row 0 moved 0.9 > ε: its clipped value 0.2 has the larger error (0.64), no gradient reaches it;
    # row 1 moved 0.1 < ε: plain squared error 0.81
    assert loss.item() == pytest.approx(0.5 * (0.64 + 0.81) / 2)
    loss.backward()
    assert pred.grad[0].item() == 0.0 and pred.grad[1].item() != 0.0
    assert clipped_value_loss(pred, old, ret, 0.0).item() == pytest.approx(0.5 * (0.01 + 0.81) / 2)


def _oracle_math(n: int):
    """Deterministic oracle episodes on Math with 1–3 calculator steps, rendered for the tiny model."""
    import turngym
    from turngym.agents.render import ChatRenderer, render_episode
    from turngym.rollout import run_episodes
    from turngym.trainers.imitation import NoisyOracle

    eps = run_episodes(lambda: turngym.make("turngym/Math-v0", min_steps=1, max_steps=3), NoisyOracle(0.0, seed=0), list(range(n)), batch_size=n)
    return eps, ChatRenderer, render_episode


def test_the_shared_value_head_learns_a_known_value_function() -> None:
    """The oracle is deterministic and so is the env, so a state's value under it is exactly the
    return that followed it: V*(s_t) = γ^(turns left) — 1, ½, ¼ or ⅛ (γ = ½) by how many
    calculator steps the problem still needs, which the critic must read from the text.

    Threshold: the explained variance on 32 *held-out* episodes must reach 3/4 of that of the
    best predictor that knows only the turn index (the mean return per turn index on the
    training episodes; it cannot tell a 2-turn problem from a 4-turn one at turn 0), after 40
    minibatches of 8. An untrained critic scores ≈ 0 (asserted before training), and a critic
    that read the wrong position (no state) stays near 0; the critic passes the position-only
    predictor itself with longer training, too slow for CI, so the bar keeps a margin below
    what 40 minibatches reach.
    """
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from turngym.agents.tiny import TinyModelConfig, build_tiny_model
    from turngym.trainers.config import TrainConfig
    from turngym.trainers.critic import TurnCritic, fit_critic

    torch.manual_seed(0)
    path = build_tiny_model(config=TinyModelConfig(**TrainConfig().tiny_model))
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    eps, ChatRenderer, render_episode = _oracle_math(96)
    assert all(e.success for e in eps)
    renderer = ChatRenderer(tok)
    samples = [render_episode(e, renderer, train_text_actions=True) for e in eps]
    gamma = 0.5
    returns = []
    for e in eps:
        cols = {"episode": [0] * len(e.turns), "group": [0] * len(e.turns), "turn": [t.index for t in e.turns], "reward": [t.reward for t in e.turns]}
        returns.append(lambda_returns(cols, np.zeros(len(e.turns)), gamma=gamma, lam=1.0)[1])
    assert sorted({round(float(x), 3) for r in returns for x in r}) == [0.125, 0.25, 0.5, 1.0]
    train, test = slice(0, 64), slice(64, 96)
    by_turn: dict[int, list[float]] = {}
    for r in returns[train]:
        for t, g in enumerate(r):
            by_turn.setdefault(t, []).append(float(g))
    position_only = explained_variance(np.concatenate([[np.mean(by_turn[t]) for t in range(len(r))] for r in returns[test]]),
                                       np.concatenate(returns[test]))
    assert position_only > 0.3  # the bar below is a real one
    critic = TurnCritic(model, kind="shared", lr=1e-3, seed=0)
    pad = tok.pad_token_id

    def ev() -> float:
        v = critic.values(model, samples[test], pad_id=pad, device="cpu")
        return explained_variance(np.concatenate(v), np.concatenate(returns[test]))

    assert abs(ev()) < 0.05
    losses = fit_critic(critic, model, samples[train], returns[train], steps=40, batch_size=8, pad_id=pad,
                        policy_optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3))
    final = ev()
    assert losses[-1] < losses[0]
    assert final >= 0.75 * position_only, (final, position_only)


class _Killed(BaseException):
    """A kill: BaseException, so no ``except Exception`` in the trainer can swallow it."""


def _critic_cfg(**kw):
    from tiny_run import tiny_config

    return tiny_config(**{"algo": "gae", "steps": 3, "micro_batch_size": 2, "ppo_epochs": 2, "algo_params": {"gamma": 0.95, "lam": 0.9}, **kw})


def _final(out):
    import json

    torch = pytest.importorskip("torch")
    state = json.loads((out / "state.json").read_text())
    assert state["phase"] == "finished"
    ck = out / state["checkpoint"]
    return torch.load(ck / "trainable.pt"), torch.load(ck / "critic.pt")


def _same(a, b) -> bool:
    torch = pytest.importorskip("torch")
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b


@pytest.fixture(scope="module")
def gae_run(tmp_path_factory: pytest.TempPathFactory):
    """``turngym train --algo gae`` (PPO with the default learned critic), uninterrupted."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from turngym.trainers import Trainer

    out = tmp_path_factory.mktemp("gae")
    Trainer(_critic_cfg(), out, progress=False, log=None).run()
    return out


def test_train_with_algo_gae_runs_end_to_end(gae_run) -> None:
    from tiny_run import metric_rows

    rl = [r for r in metric_rows(gae_run) if r["phase"] == "rl"]
    assert len(rl) == 3
    for r in rl:
        assert {"critic_ev", "critic_ev_mc", "value_loss", "value_mean", "critic_grad_norm"} <= set(r)
        assert r["value_loss"] >= 0
    assert rl[0]["value_mean"] != rl[-1]["value_mean"]  # the critic moved
    assert (gae_run / "value_vs_return.png").stat().st_size > 0
    weights, critic = _final(gae_run)
    assert critic["kind"] == "shared" and critic["trunk"] is None and set(critic["head"]) == {"weight", "bias"}


def test_resume_is_exact_with_the_critic(tmp_path, gae_run) -> None:
    """Killed after the first RL step's checkpoint, the resumed run ends with the uninterrupted
    run's metrics, policy weights *and* critic (head and optimizer state): a critic re-initialized
    on resume would give other values, advantages and weights from step 2 on."""
    from tiny_run import metric_rows

    from turngym.trainers import Trainer

    out = tmp_path / "run"

    def kill(name: str) -> None:
        if name == "checkpoint committed@1":
            raise _Killed(name)

    with pytest.raises(_Killed):
        Trainer(_critic_cfg(), out, progress=False, log=None, hook=kill).run()
    Trainer(_critic_cfg(), out, resume=True, progress=False, log=None).run()
    assert metric_rows(out) == metric_rows(gae_run)
    w_ref, c_ref = _final(gae_run)
    w, c = _final(out)
    assert _same(w, w_ref) and _same(c, c_ref)


def test_a_separate_critic_and_a_critic_baseline_for_gae_grouped(tmp_path) -> None:
    from tiny_run import metric_rows

    from turngym.trainers import Trainer

    Trainer(_critic_cfg(steps=1, critic="separate"), tmp_path / "sep", progress=False, log=None).run()
    _, critic = _final(tmp_path / "sep")
    assert critic["kind"] == "separate" and critic["trunk"]
    cfg = _critic_cfg(steps=1, algo="gae_grouped", critic="shared", algo_params={"value_baseline": True})
    Trainer(cfg, tmp_path / "gg", progress=False, log=None).run()
    assert "critic_ev" in [r for r in metric_rows(tmp_path / "gg") if r["phase"] == "rl"][0]


def test_critic_config_errors_say_the_fix() -> None:
    from turngym.core.errors import ConfigError
    from turngym.trainers import TrainConfig

    with pytest.raises(ConfigError, match="critic='shared'"):
        TrainConfig(algo="gae", critic="none")
    with pytest.raises(ConfigError, match="value_baseline"):
        TrainConfig(algo="gae_grouped", algo_params={"value_baseline": True})
    with pytest.raises(ConfigError, match="critic must be"):
        TrainConfig(critic="big")
    assert TrainConfig(algo="gae").critic_kind == "shared" and TrainConfig().critic_kind is None
    assert TrainConfig(algo="grpo", critic="separate").critic_kind == "separate"


def test_the_value_provider_fills_gae_s_column_from_a_trainer_s_critic() -> None:
    """Outside the built-in loop (which fills ``value`` itself), ``fill_inputs`` asks the provider,
    which renders the episodes and reads the trainer's critic: the same values, row for row."""
    from types import SimpleNamespace

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from turngym.agents.tiny import TinyModelConfig, build_tiny_model
    from turngym.rollout import to_turn_table
    from turngym.trainers.config import TrainConfig
    from turngym.trainers.critic import TurnCritic
    from turngym.trainers.providers import fill_inputs

    path = build_tiny_model(config=TinyModelConfig(**TrainConfig().tiny_model))
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    eps, ChatRenderer, render_episode = _oracle_math(4)
    renderer = ChatRenderer(tok)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        critic = TurnCritic(model, kind="shared", seed=3)
        torch.nn.init.normal_(critic.head.weight)  # values that differ by state, so a misaligned row would show
    trainer = SimpleNamespace(critic=critic, model=model, renderer=renderer, pad_id=tok.pad_token_id, device="cpu",
                              config=SimpleNamespace(micro_batch_size=3))
    table = to_turn_table(eps)
    fill_inputs("gae", eps, table, trainer)
    want = critic.values(model, [render_episode(e, renderer) for e in eps], pad_id=tok.pad_token_id, device="cpu")
    assert len(set(np.round(table["value"], 6))) > 4
    np.testing.assert_allclose(table["value"], np.concatenate(want), rtol=1e-5, atol=1e-6)
