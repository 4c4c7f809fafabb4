"""Constrained decoding over the env's choices: HFPolicy(constrain_choices=True) with the tiny model."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import turngym
from turngym.agents import AgentInput
from turngym.agents.choices import ChoiceTrie, encode_choices
from turngym.agents.hf import HFPolicy
from turngym.core.errors import ConfigError
from turngym.rollout import run_episodes
from turngym.rollout.runner import agent_input, new_episode

MSGS = [{"role": "user", "content": "You are in the middle of a room. Your task is to: put a mug in desk."}]
# "go to cabinet 1" is a prefix of "go to cabinet 10": the end token and the longer path are both allowed there
CHOICES = ("go to cabinet 1", "go to cabinet 10", "look", "take mug 1 from desk 2", "inventory")


@pytest.fixture(scope="module")
def base() -> HFPolicy:
    return HFPolicy.from_pretrained("tiny", temperature=0.0)


def _policy(base: HFPolicy, **kw) -> HFPolicy:
    return HFPolicy(base.model, base.tokenizer, **kw)


def test_every_constrained_action_is_exactly_one_choice(base: HFPolicy) -> None:
    seen = set()
    for seed in range(4):
        policy = _policy(base, temperature=1.0, seed=seed, constrain_choices=True)
        actions = policy.act([AgentInput(MSGS, choices=CHOICES, stop=("\n",), max_new_tokens=2) for _ in range(6)])
        for a in actions:
            assert a.text in CHOICES, a.text
            assert a.meta["constrained"] is True and a.meta["finish_reason"] == "eos"
            assert a.token_ids[-1] == policy.end_id and a.text == policy.tokenizer.decode(a.token_ids, skip_special_tokens=True)
            assert len(a.logprobs) == len(a.token_ids) and all(lp <= 1e-6 for lp in a.logprobs)
            seen.add(a.text)
    assert len(seen) >= 3  # sampling, not one fixed answer; a budget of 2 tokens does not cut a choice
    greedy = _policy(base, temperature=0.0, constrain_choices=True)
    [g1, g2] = greedy.act([AgentInput(MSGS, choices=CHOICES), AgentInput(MSGS, choices=CHOICES[::-1])])
    assert g1.text in CHOICES and g1.text == g2.text  # the argmax among allowed tokens, whatever the order


def test_logprobs_are_those_of_the_constrained_distribution(base: HFPolicy) -> None:
    choices = ("look", "inventory")
    first = {c: base.renderer.encode(c)[0] for c in choices}
    assert first["look"] != first["inventory"]
    lps: dict[str, float] = {}
    for seed in range(40):
        policy = _policy(base, temperature=1.0, seed=seed, constrain_choices=True)
        [a] = policy.act([AgentInput(MSGS, choices=choices)])
        lps[a.text] = a.logprobs[0]
        assert a.logprobs[-1] == pytest.approx(0.0, abs=1e-6)  # after a whole choice only the end token
        if len(lps) == 2:
            break
    assert set(lps) == set(choices)
    assert math.exp(lps["look"]) + math.exp(lps["inventory"]) == pytest.approx(1.0, abs=1e-4)
    # and they are the model's two logits renormalized (not its free log-probs over the vocabulary)
    import torch

    prompt = base.renderer.render(MSGS, [], add_generation_prompt=True).ids
    with torch.inference_mode():
        logits = base.model(input_ids=torch.tensor([prompt])).logits[0, -1].float()
    pair = torch.log_softmax(logits[[first["look"], first["inventory"]]], dim=-1)
    np.testing.assert_allclose([lps["look"], lps["inventory"]], pair.tolist(), atol=1e-4)
    free = torch.log_softmax(logits, dim=-1)[first["look"]]
    assert abs(float(free) - lps["look"]) > 0.5


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_rows_without_choices_decode_as_without_the_option(base: HFPolicy, temperature: float) -> None:
    # free rows with a 2-token budget finish before the constrained row (a 6-token choice) can leave
    # the batch, so even the sampled rows see the same batch at every step they live
    batch = [
        AgentInput(MSGS, max_new_tokens=2),
        AgentInput(MSGS, choices=("take mug 1 from desk 2",), max_new_tokens=10),
        AgentInput([{"role": "user", "content": "What is 3 * 4?"}], max_new_tokens=2),
    ]
    on = _policy(base, temperature=temperature, seed=5, constrain_choices=True).act(batch)
    off = _policy(base, temperature=temperature, seed=5).act(batch)
    assert on[1].text == "take mug 1 from desk 2" and on[1].meta["constrained"]
    assert off[1].text != on[1].text and not off[1].meta["constrained"]  # the option off ignores choices
    for r in (0, 2):
        assert on[r].token_ids == off[r].token_ids and not on[r].meta["constrained"]
        np.testing.assert_allclose(on[r].logprobs, off[r].logprobs, atol=1e-5)


def test_choices_win_over_a_forced_prefix_and_the_budget(base: HFPolicy) -> None:
    policy = _policy(base, temperature=1.0, seed=2, constrain_choices=True, force_action_prefix=True, max_new_tokens=1)
    [a] = policy.act([AgentInput(MSGS, choices=("take mug 1 from desk 2",), action_prefix="<")])
    assert a.text == "take mug 1 from desk 2" and a.meta["forced_tokens"] == 0


def test_trie_and_round_trip_checks() -> None:
    trie = ChoiceTrie([[1, 2], [1, 2, 3]], end_id=0)
    node = trie.advance(trie.advance(ChoiceTrie.ROOT, 1), 2)
    assert trie.allowed(node) == [0, 3] and trie.advance(node, 0) == -1
    with pytest.raises(ValueError):
        trie.advance(ChoiceTrie.ROOT, 2)
    with pytest.raises(ConfigError, match="round-trip"):
        encode_choices(["Look"], lambda s: [ord(c) for c in s], lambda ids: "".join(map(chr, ids)).lower(), 0)


def test_runner_passes_the_env_choices() -> None:
    for env_id, expect in (("turngym/Household-v0", True), ("turngym/Math-v0", False)):
        env = turngym.make(env_id)  # wrapped: the runner reads the unwrapped env
        obs, info = env.reset(seed=1)
        ep = new_episode(env, obs, info, episode_id="e", env_id=env_id, seed=1, group="g")
        inp = agent_input(ep, env, None)
        if expect:
            listed = obs.rsplit("Admissible actions: ", 1)[1].split(", ")
            assert inp.choices == tuple(env.unwrapped.admissible_actions()) == tuple(listed)
        else:
            assert inp.choices is None
        env.close()


def test_household_episode_with_constrained_tiny_model_has_no_invalid_action(base: HFPolicy) -> None:
    policy = _policy(base, temperature=1.0, seed=0, constrain_choices=True)
    eps = run_episodes(lambda: turngym.make("turngym/Household-v0", max_turns=4), policy, [0, 1], env_id="h", history=2)
    for ep in eps:
        assert len(ep.turns) >= 1 and (ep.turns[-1].terminated or ep.turns[-1].truncated) and ep.outcome
        assert all(t.action_valid for t in ep.turns), [t.action for t in ep.turns if not t.action_valid]
    free = _policy(base, temperature=1.0, seed=0, max_new_tokens=6)  # the same untrained model, free: noise
    eps = run_episodes(lambda: turngym.make("turngym/Household-v0", max_turns=2), free, [0], env_id="h", history=2)
    assert not any(t.action_valid for t in eps[0].turns)


def test_cli_eval_constrain_choices(capsys: pytest.CaptureFixture[str]) -> None:
    from turngym.cli import main

    args = ["eval", "turngym/Household-v0", "--agent", "hf:tiny", "--episodes", "1", "--env-arg", "max_turns=3",
            "--temperature", "0", "--json", "--quiet"]
    assert main([*args, "--constrain-choices"]) == 0
    assert json.loads(capsys.readouterr().out)["invalid_action_rate"] == 0.0
