"""Poisoned saved-episode files against ``turngym train --episodes``.

A file of captured episodes is input from outside the trainer: any client of ``turngym proxy``
wrote parts of it, and anyone can hand-edit it. Before these checks one NaN log-prob per turn
trained every LoRA tensor to NaN and exited 0, a token id past the vocabulary (or negative) was
an uncaught IndexError in the middle of the run, and one reward of 1e308 zeroed its whole group's
signal. Each poison is now refused before the first step, naming the episode and the reason (exit
2, nothing trained or saved), or, with ``--skip-bad-episodes``, left out and counted while the
clean episodes train to finite weights.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from turngym.agents.render import RECORDED
from turngym.cli import main
from turngym.core.errors import ConfigError
from turngym.rollout.types import Episode, Turn, save_episodes
from turngym.trainers.saved import load_training_data, vocab_size


@pytest.fixture(scope="module")
def model():
    """The model ``turngym train --episodes --model tiny`` trains (the embedded default)."""
    from transformers import AutoModelForCausalLM

    from turngym.agents.hf import resolve_model_path

    return AutoModelForCausalLM.from_pretrained(resolve_model_path("tiny"))


def clean_episodes(n: int = 4) -> list[Episode]:
    """``n`` recorded episodes of one GRPO group (two turns each, two solved), ids well inside the vocabulary."""
    episodes = []
    for e in range(n):
        prompt = [5 + (7 * e + k) % 90 for k in range(8)]
        turns = []
        for t in range(2):
            sampled = [10 + (3 * e + 5 * t + k) % 80 for k in range(4)]
            last = t == 1
            turns.append(Turn(t, "", "", float(e % 2) if last else 0.0, last, False, {}, f"s{t + 1}", f"s{t}",
                              token_ids=sampled, logprobs=[-1.5, -0.5, -2.0, -0.25], prompt_ids=list(prompt), node=t, parent=t - 1))
            prompt = prompt + sampled + [4, 6, 8]
        episodes.append(Episode(f"victim/{e}", "proxy", "0", 0, "", group="victim", turns=turns,
                                outcome={"reward": float(e % 2), "success": bool(e % 2)}, meta={"rendering": RECORDED}))
    return episodes


def _nan_logprob_every_turn(ep: Episode, vocab: int) -> None:
    for turn in ep.turns:
        turn.logprobs[1] = math.nan


def _id_past_vocabulary(ep: Episode, vocab: int) -> None:
    ep.turns[1].token_ids[2] = vocab


def _negative_id(ep: Episode, vocab: int) -> None:
    ep.turns[0].prompt_ids[3] = -1


def _huge_outcome_reward(ep: Episode, vocab: int) -> None:
    ep.outcome["reward"] = 1e308
    ep.turns[-1].reward = 1e308


def _huge_turn_reward(ep: Episode, vocab: int) -> None:
    ep.turns[0].reward = 1e308


def _prompt_that_does_not_extend(ep: Episode, vocab: int) -> None:
    ep.turns[1].prompt_ids[9] += 1  # a sampled id of turn 0, changed in turn 1's prompt


def _infinite_logprob(ep: Episode, vocab: int) -> None:
    ep.turns[0].logprobs[0] = -math.inf


def _positive_logprob(ep: Episode, vocab: int) -> None:
    ep.turns[0].logprobs[0] = 3.0


def _too_few_logprobs(ep: Episode, vocab: int) -> None:
    ep.turns[1].logprobs.pop()


def _nan_signal(ep: Episode, vocab: int) -> None:
    ep.turns[0].signals["progress"] = math.nan


def _float_id(ep: Episode, vocab: int) -> None:
    ep.turns[0].token_ids[0] = 12.5


def _signals_not_a_mapping(ep: Episode, vocab: int) -> None:
    ep.turns[0].signals = [1.0, 2.0]


def _allowed_not_a_list(ep: Episode, vocab: int) -> None:
    ep.turns[1].allowed_token_ids = 5


def _outcome_not_a_mapping(ep: Episode, vocab: int) -> None:
    ep.outcome = [1.0]


def _env_id_not_a_string(ep: Episode, vocab: int) -> None:
    ep.env_id = 7


POISONS: dict[str, tuple[Callable[[Episode, int], None], str]] = {
    "nan-logprob": (_nan_logprob_every_turn, "log-prob 1 is nan, not a finite number"),
    "id-past-vocabulary": (_id_past_vocabulary, "token_ids\\[2\\] = {vocab} is outside the vocabulary \\[0, {vocab}\\)"),
    "negative-id": (_negative_id, "prompt_ids\\[3\\] = -1 is outside the vocabulary"),
    "reward-1e308": (_huge_outcome_reward, "reward 1e\\+308 is outside the declared reward range"),
    "turn-reward-1e308": (_huge_turn_reward, "turn 0: its reward 1e\\+308 is outside the declared reward range"),
    "prompt-does-not-extend": (_prompt_that_does_not_extend, "turn 1: its prompt does not extend"),
    "infinite-logprob": (_infinite_logprob, "log-prob 0 is -inf, not a finite number"),
    "positive-logprob": (_positive_logprob, "log-prob 0 is 3.0, not a sampled token's"),
    "too-few-logprobs": (_too_few_logprobs, "turn 1 has 3 log-probs for 4 sampled ids"),
    "nan-signal": (_nan_signal, "signal 'progress' nan is not finite"),
    "float-id": (_float_id, "token_ids\\[0\\] = 12.5 is not an integer token id"),
    # a field of the wrong JSON type was an AttributeError/TypeError in the middle of the checks
    "signals-not-a-mapping": (_signals_not_a_mapping, "turn 0: its signals \\[1.0, 2.0\\] are not a mapping"),
    "allowed-not-a-list": (_allowed_not_a_list, "turn 1: its allowed_token_ids 5 are not a list"),
    "outcome-not-a-mapping": (_outcome_not_a_mapping, "its outcome \\[1.0\\] is not a mapping"),
    "env-id-not-a-string": (_env_id_not_a_string, "its env_id 7 is not a string"),
}


def _poisoned_file(tmp_path: Path, poison: str, vocab: int) -> Path:
    episodes = clean_episodes()
    POISONS[poison][0](episodes[2], vocab)
    path = tmp_path / "episodes.jsonl"
    save_episodes(episodes, path)  # json.dumps writes NaN / 1e+308 as a client's JSON would carry them
    return path


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_a_poisoned_record_is_refused_with_its_id_and_reason(model, tmp_path: Path, poison: str) -> None:
    vocab = vocab_size(model)
    path = _poisoned_file(tmp_path, poison, vocab)
    reason = POISONS[poison][1].format(vocab=vocab)
    with pytest.raises(ConfigError, match=f"episode 'victim/2' in .* cannot be trained on: .*{reason}"):
        load_training_data(path, model=model)
    data = load_training_data(path, model=model, skip_bad=True)
    assert [ep.episode_id for ep in data.episodes] == ["victim/0", "victim/1", "victim/3"]
    assert [b.episode_id for b in data.skipped] == ["victim/2"]
    assert load_training_data(_clean_file(tmp_path), model=model).skipped == []  # the same file without the poison trains


def _clean_file(tmp_path: Path) -> Path:
    path = tmp_path / "clean.jsonl"
    save_episodes(clean_episodes(), path)
    return path


def test_the_reward_range_is_declared_by_the_run(model, tmp_path: Path) -> None:
    path = _clean_file(tmp_path)
    with pytest.raises(ConfigError, match="reward 1.0 is outside the declared reward range \\[-0.5, 0.5\\]"):
        load_training_data(path, model=model, reward_range=(-0.5, 0.5))
    assert len(load_training_data(path, model=model, reward_range=(0.0, 1.0)).episodes) == 4


def test_train_refuses_a_poisoned_file_before_the_first_step(model, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _poisoned_file(tmp_path, "nan-logprob", vocab_size(model))
    out = tmp_path / "run"
    assert main(["train", "--episodes", str(path), "--steps", "1", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "episode 'victim/2'" in err and "log-prob 1 is nan" in err and "--skip-bad-episodes" in err
    assert not list(out.rglob("trainable.pt"))  # nothing trained, nothing saved


@pytest.mark.parametrize("poison", ["nan-logprob", "id-past-vocabulary", "reward-1e308"])
def test_skip_bad_episodes_trains_the_rest_to_finite_weights(model, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                             poison: str) -> None:
    path = _poisoned_file(tmp_path, poison, vocab_size(model))
    out = tmp_path / "run"
    assert main(["train", "--episodes", str(path), "--steps", "2", "--out", str(out), "--quiet", "--algo", "grpo",
                 "--skip-bad-episodes", "--set", "lr=1e-2"]) == 0
    logged = capsys.readouterr()
    assert "skipped saved episode 'victim/2'" in logged.out + logged.err and "skipped 1 of 4 saved episodes" in logged.out + logged.err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r.get("phase") == "rl"]
    assert [r["episodes"] for r in rl] == [3, 3] and all(r["skipped_updates"] == 0 and math.isfinite(r["loss"]) for r in rl)
    saved = torch.load(out / "checkpoints" / "step-000002" / "trainable.pt")
    assert saved and all(torch.isfinite(v).all() for v in saved.values() if v.is_floating_point())


def test_a_step_whose_every_update_is_skipped_is_logged_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A log-prob inside the accepted range whose importance ratio still overflows float32 (-900:
    exp(logp + 900) is inf) makes every minibatch's loss non-finite. The learner skips those
    updates; the step's record then has no loss, and the progress line read it (a KeyError that
    ended the run)."""
    episodes = clean_episodes()
    for ep in episodes:
        ep.turns[0].logprobs[0] = -900.0
    path = tmp_path / "episodes.jsonl"
    save_episodes(episodes, path)
    out = tmp_path / "run"
    assert main(["train", "--episodes", str(path), "--steps", "2", "--out", str(out), "--quiet", "--algo", "grpo"]) == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r.get("phase") == "rl"]
    assert len(rl) == 2 and all(r["skipped_updates"] > 0 and "loss" not in r for r in rl)
    assert "skipped an update on a non-finite loss" in capsys.readouterr().out
