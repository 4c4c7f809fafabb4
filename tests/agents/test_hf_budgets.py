"""Per-env action budgets, stop strings and generation stats of the HF backend (tiny model: fast)."""

from __future__ import annotations

import json

import pytest

import turngym
from turngym.agents import AgentInput
from turngym.agents.base import Action
from turngym.agents.hf import DEFAULT_MAX_NEW_TOKENS, HFPolicy
from turngym.rollout import run_episodes

PROMPT = [{"role": "user", "content": "Hugo has 5 crates with 20 apples in each. How many apples?"}]

FAMILIES = [
    "turngym.envs.math.env:MathEnv",
    "turngym.envs.search.env:SearchQAEnv",
    "turngym.envs.shop.env:ShopEnv",
    "turngym.envs.household.env:HouseholdEnv",
    "turngym.envs.tools.env:ToolsEnv",
    "turngym.envs.code.env:CodeEnv",
    "turngym.envs.swe.env:SWEEnv",
]


@pytest.fixture(scope="module")
def tiny() -> HFPolicy:
    return HFPolicy.from_pretrained("tiny", temperature=0.0)


def test_each_row_gets_its_own_budget_in_one_batch(tiny: HFPolicy) -> None:
    # A 1-token budget cannot hold any action, so that row must end on "length" after one token,
    # while the other row in the same batch keeps generating past it.
    budgets = [1, 9]
    actions = tiny.act([AgentInput(PROMPT, max_new_tokens=m) for m in budgets])
    assert len(actions[0].token_ids) == 1 and actions[0].meta["finish_reason"] == "length"
    assert 1 < len(actions[1].token_ids) <= 9
    for a in actions:
        assert len(a.token_ids) == len(a.logprobs)


def test_a_policy_limit_overrides_the_env_budget(tiny: HFPolicy) -> None:
    capped = HFPolicy(tiny.model, tiny.tokenizer, temperature=0.0, max_new_tokens=2)
    [a] = capped.act([AgentInput(PROMPT, max_new_tokens=50)])
    assert len(a.token_ids) <= 2
    assert HFPolicy(tiny.model, tiny.tokenizer).max_new_tokens is None  # default: defer to the env
    [b] = tiny.act([AgentInput(PROMPT)])  # neither sets one: the module default
    assert len(b.token_ids) <= DEFAULT_MAX_NEW_TOKENS


def test_stats_count_every_generated_token(tiny: HFPolicy) -> None:
    policy = HFPolicy(tiny.model, tiny.tokenizer, temperature=1.0, seed=3)
    actions = policy.act([AgentInput(PROMPT, max_new_tokens=6) for _ in range(5)])
    assert policy.stats.tokens == sum(len(a.token_ids) for a in actions) > 0
    assert policy.stats.actions == 5 and policy.stats.calls == 1
    assert policy.stats.seconds > 0 and policy.stats.tokens_per_s > 0


@pytest.mark.parametrize("path", FAMILIES)
def test_every_family_declares_stop_strings_and_a_budget(path: str) -> None:
    import importlib

    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert cls.stop_strings and all(isinstance(s, str) and s for s in cls.stop_strings)
    assert isinstance(cls.max_new_tokens, int) and 8 <= cls.max_new_tokens <= 512
    assert "Example" in cls.system_prompt  # one worked example a small model can copy


class _Recorder:
    """Test double: records what the rollout hands the policy, answers with a fixed action."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[AgentInput] = []

    def act(self, batch: list[AgentInput]) -> list[Action]:
        self.seen += batch
        return [Action("<answer>0</answer>") for _ in batch]


def test_rollouts_pass_the_env_budget_and_stops_to_the_policy() -> None:
    from turngym.envs.math.env import MathEnv

    rec = _Recorder()
    run_episodes(lambda: turngym.make("turngym/Math-v0"), rec, [0, 1], group_size=2)
    assert len(rec.seen) == 4
    assert all(i.max_new_tokens == MathEnv.max_new_tokens and i.stop == MathEnv.stop_strings for i in rec.seen)


def test_eval_shows_progress_with_tokens_per_s_even_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    from turngym.cli import main

    assert main(["eval", "turngym/Math-v0", "--agent", "hf:tiny", "--episodes", "2", "--json"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)  # stdout stays pure JSON
    assert "tok/s" in err and "hf:tiny on turngym/Math-v0" in err
    assert summary["extra"]["generated_tokens"] > 0 and summary["extra"]["tokens_per_s"] > 0


def test_a_forced_action_prefix_is_fed_and_recorded_faithfully(tiny: HFPolicy) -> None:
    import numpy as np

    policy = HFPolicy(tiny.model, tiny.tokenizer, temperature=1.0, seed=7, force_action_prefix=True)
    prefix = "<answer>"
    want = policy.renderer.encode(prefix)
    actions = policy.act([AgentInput(PROMPT, max_new_tokens=12, action_prefix=prefix) for _ in range(4)])
    for a in actions:
        assert a.token_ids[: len(want)] == want and a.text.startswith(prefix)
        assert a.meta["forced_tokens"] == len(want) and len(a.logprobs) == len(a.token_ids)
        # the recorded log-probs (forced and sampled alike) are the model's, as a trainer rescores them
        [scores] = policy.score([a.prompt_ids + a.token_ids], [[0] * len(a.prompt_ids) + [1] * len(a.token_ids)])
        np.testing.assert_allclose(scores, a.logprobs, atol=1e-4)
    off = HFPolicy(tiny.model, tiny.tokenizer, temperature=0.0)  # opt-in: without it the prefix is ignored
    [free] = off.act([AgentInput(PROMPT, max_new_tokens=12, action_prefix="zzz")])
    assert free.meta["forced_tokens"] == 0 and not free.text.startswith("zzz")


@pytest.mark.parametrize("lora", [False, True])
def test_the_prompt_pass_projects_only_the_last_position(lora: bool) -> None:
    """The prefill asks the model for the last position's logits only — also through peft's
    wrapper (the trainer's LoRA policy), whose forward hides the keyword behind ``**kwargs``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from turngym.agents.tiny import build_tiny_model

    path = build_tiny_model()
    model = AutoModelForCausalLM.from_pretrained(path)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    policy = HFPolicy(model, AutoTokenizer.from_pretrained(path), temperature=0.0, max_new_tokens=2)
    base = model.get_base_model() if lora else model
    widths: list[int] = []
    forward = base.forward

    def spy(*args, **kwargs):
        out = forward(*args, **kwargs)
        widths.append(out.logits.shape[1])
        return out

    base.forward = spy
    policy.generate([list(range(5, 25))], max_new_tokens=[2])
    assert widths and widths[0] == 1  # 20 prompt tokens, one row of logits
