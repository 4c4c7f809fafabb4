"""The static-cache decode loop (turngym.agents.hf_decode) against the original loop, and device placement.

The static loop is the default wherever a model can run it; the original loop stays as the
fallback (sliding-window models, ``static_decoding=False``). Greedy decoding makes both exact
functions of the model, so they must agree token for token on every path the policy has: left
padding, cached prefixes from an earlier turn, forced action prefixes, stop strings, budgets,
choice tries, and rows finishing at different steps (cache compaction).

Device placement: on a GPU, a tensor the policy builds from Python data without ``device=``
lands on the CPU and crashes the first operation that meets a CUDA tensor (the first GPU run
died that way at its first cached-prefix turn). On a CPU-only machine both are the same device,
so the bug is invisible — unless the default device is ``meta``: every tensor built without an
explicit device is then a data-less meta tensor, and any use of one next to the model's real
tensors raises. Running the policy under ``torch.device("meta")`` is a CPU test for the GPU bug.
"""

from __future__ import annotations

import numpy as np
import pytest

from turngym.agents import AgentInput
from turngym.agents.hf import HFPolicy

torch = pytest.importorskip("torch")

from hf_prompts import PROMPTS  # noqa: E402


@pytest.fixture(scope="module")
def pair() -> tuple[HFPolicy, HFPolicy]:
    fast = HFPolicy.from_pretrained("tiny", temperature=0.0, seed=0)
    slow = HFPolicy(fast.model, fast.tokenizer, temperature=0.0, seed=0, static_decoding=False)
    assert fast._static is not None and slow._static is None
    return fast, slow


def _turns(policy: HFPolicy, inputs: list[AgentInput]) -> list:
    """Two turns: the second prompt extends the first turn's sequence (prefix reuse)."""
    first = policy.act(inputs)
    second_inputs = [
        AgentInput(inp.messages + [{"role": "assistant", "content": a.text}, {"role": "user", "content": "Go on."}],
                   stop=inp.stop, action_token_ids=[a.token_ids], max_new_tokens=inp.max_new_tokens,
                   action_prefix=inp.action_prefix, choices=inp.choices)
        for inp, a in zip(inputs, first, strict=True)
    ]
    return first + policy.act(second_inputs)


def _same(a: list, b: list) -> None:
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    assert [x.meta["finish_reason"] for x in a] == [x.meta["finish_reason"] for x in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x.logprobs, y.logprobs, atol=2e-4)


def test_static_loop_equals_the_original_loop(pair) -> None:
    fast, slow = pair
    # budgets that differ per row, a stop string that ends some rows early: rows finish at
    # different steps, so the static loop compacts its cache mid-call
    inputs = [AgentInput(m, stop=("e",) if i % 2 else (), max_new_tokens=4 + 3 * i) for i, m in enumerate(PROMPTS)]
    a, b = _turns(fast, inputs), _turns(slow, inputs)
    _same(a, b)
    assert {x.meta["finish_reason"] for x in a} >= {"length"}
    assert fast._prefix.hits > 0, "the second turn reused the first turn's keys/values"


def test_static_loop_forced_prefix_and_choices_equal_the_original(pair) -> None:
    fast, slow = pair
    fast.force_action_prefix = slow.force_action_prefix = True
    fast.constrain_choices = slow.constrain_choices = True
    try:
        inputs = [
            AgentInput(PROMPTS[0], action_prefix="<calc>", max_new_tokens=8, stop=(">",)),
            AgentInput(PROMPTS[1], choices=("go to desk 1", "open drawer 2", "look")),
            AgentInput(PROMPTS[2], action_prefix="<", max_new_tokens=5),
        ]
        a, b = _turns(fast, inputs), _turns(slow, inputs)
    finally:
        fast.force_action_prefix = slow.force_action_prefix = False
        fast.constrain_choices = slow.constrain_choices = False
    _same(a, b)
    assert a[1].text in ("go to desk 1", "open drawer 2", "look") and a[1].allowed_token_ids == b[1].allowed_token_ids
    assert a[0].text.startswith("<calc>") and a[0].meta["forced_tokens"] > 0


def test_static_loop_samples_reproducibly_and_stops_at_stop_strings(pair) -> None:
    fast, _ = pair
    runs = []
    for _ in range(2):
        policy = HFPolicy(fast.model, fast.tokenizer, temperature=1.0, seed=7, max_new_tokens=24)
        runs.append(policy.act([AgentInput(PROMPTS[i % 4], stop=("e", "1")) for i in range(12)]))
    assert [a.token_ids for a in runs[0]] == [a.token_ids for a in runs[1]]
    stopped = [a for a in runs[0] if a.meta["finish_reason"] == "stop"]
    assert stopped
    for a in stopped:  # ends at the first occurrence: no earlier prefix of the action holds a stop
        text = fast.tokenizer.decode(a.token_ids[:-1], skip_special_tokens=True)
        assert "e" not in text and "1" not in text
        assert a.meta["stop"] in a.text


def test_host_reads_every_k_steps_give_the_same_actions(pair) -> None:
    """``sync_every`` > 1 (the GPU default) lets rows run past their end between host reads;
    what they sampled there is dropped, so the actions are those of a read every step."""
    fast, _ = pair
    lazy = HFPolicy(fast.model, fast.tokenizer, temperature=0.0, sync_every=5)
    inputs = [AgentInput(m, stop=("e",), max_new_tokens=3 + 4 * i) for i, m in enumerate(PROMPTS)]
    _same(_turns(lazy, inputs), _turns(fast, inputs))


def test_buffers_kept_between_calls_give_the_same_actions(pair) -> None:
    """On a GPU the decoder keeps each bucket's buffers (and graphs) between calls; they were
    first created inside inference mode, and a later call must still reset them (the first GPU
    run died there). A CPU decoder told to keep buffers runs the same path."""
    from turngym.agents.hf_decode import StaticDecoder

    fast, _ = pair
    keeping = HFPolicy(fast.model, fast.tokenizer, temperature=0.0)
    keeping._static = StaticDecoder(fast.model, max_bytes=1 << 30)
    # four rows, two finishing after 2 tokens: the survivors move into a (2, length) bucket made
    # mid-call; the second call (two rows, same length) starts in that bucket
    first = [AgentInput(PROMPTS[1], max_new_tokens=b) for b in (2, 2, 8, 8)]
    second = [AgentInput(PROMPTS[1], max_new_tokens=8) for _ in range(2)]
    _same(keeping.act(first) + keeping.act(second), fast.act(first) + fast.act(second))
    assert len(keeping._static._slots) == 2, "both buckets of the first call were kept and the second reused one"


@pytest.mark.parametrize("static", [None, False], ids=["static", "original"])
def test_no_tensor_is_built_on_the_default_device(pair, static) -> None:
    fast, _ = pair
    policy = HFPolicy(fast.model, fast.tokenizer, temperature=1.0, seed=1, max_new_tokens=6, static_decoding=static,
                      force_action_prefix=True, constrain_choices=True)
    inputs = [AgentInput(PROMPTS[0], stop=("e",), action_prefix="<"), AgentInput(PROMPTS[1], choices=("look", "go"))]
    with torch.device("meta"):
        actions = _turns(policy, inputs)
    assert all(a.token_ids for a in actions)
    assert policy._prefix.hits > 0, "the cached-prefix path ran (where the GPU bug was)"


def test_training_batches_build_no_tensor_on_the_default_device(pair) -> None:
    from turngym.agents.render import TokenSample
    from turngym.trainers.batch import collate, token_logprobs

    fast, _ = pair
    actions = fast.act([AgentInput(m, max_new_tokens=5) for m in PROMPTS])
    samples = []
    for m, a in zip(PROMPTS, actions, strict=True):
        r = fast.renderer.render(m + [{"role": "assistant", "content": a.text}], [a.token_ids])
        samples.append(TokenSample(input_ids=r.ids, loss_mask=r.mask, logprobs=[0.0] * len(r.ids)))
    with torch.device("meta"):
        batch = collate(samples, [[1.0] * len(s.input_ids) for s in samples], fast.pad_id)
        logp = token_logprobs(fast.model, batch)
    assert logp.device.type == "cpu" and torch.isfinite(logp).all()
