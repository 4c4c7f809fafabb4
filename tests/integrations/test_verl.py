"""turngym inside verl, on CPU with the real verl (its own venv: scripts/ci_verl.sh).

The agent loop runs inside verl's real ``AgentLoopWorker`` (built from verl's own config, the
agent loop instantiated by name through hydra as the worker does); only the rollout server is a
test double — :class:`StandInRolloutServer`, Hugging Face ``generate`` on the embedded tiny model
(verl's vLLM/SGLang servers need a GPU). The worker's ``DataProto`` then goes through verl's
``compute_advantage`` with the registered ``turngym_*`` estimators.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("TURNGYM_REQUIRE_VERL") != "1":
    pytest.importorskip("verl", reason="verl is an optional extra in its own venv: scripts/ci_verl.sh")
    pytest.importorskip("cachetools")

import turngym.integrations.verl as tv  # noqa: E402
from turngym.agents.render import ChatRenderer  # noqa: E402
from turngym.integrations.episodes import episode_from_json, sequence_advantages, turn_advantages  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "engines.md"


def _recipe_overrides() -> list[str]:
    """The hydra overrides of the launch command in docs/engines.md (the first main_ppo call)."""
    text = DOC.read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "verl.trainer.main_ppo" in b)
    cmd = block[block.index("python -m verl.trainer.main_ppo") :].replace("\\\n", " ")
    return shlex.split(cmd)[3:]


def _compose(overrides: list[str]):
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def test_the_documented_multi_gpu_recipe_passes_verls_config_loader():
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    overrides = _recipe_overrides()
    assert "algorithm.adv_estimator=turngym_gigpo" in overrides
    cfg = _compose(overrides)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    algo = omega_conf_to_dataclass(cfg.algorithm)  # what the trainer builds: a closed dataclass
    assert algo.adv_estimator == "turngym_gigpo"
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == tv.AGENT_NAME
    assert cfg.trainer.use_v1 is False and cfg.trainer.n_gpus_per_node == 8
    from verl.trainer.ppo import core_algos

    assert core_algos.get_adv_estimator_fn("turngym_gigpo") is not None


def test_every_turngym_estimator_is_registered_under_a_turngym_name():
    from verl.trainer.ppo import core_algos

    from turngym.trainers.advantages import ESTIMATORS

    for name in ESTIMATORS:
        assert core_algos.get_adv_estimator_fn(f"turngym_{name}").__name__ == f"turngym_{name}"


class StandInRolloutServer:
    """Test double for verl's rollout server (vLLM/SGLang need a GPU): HF ``generate`` on the tiny model.

    Honors what verl's servers honor that the agent loop sends: ``max_tokens`` and ``stop``.
    Records every generation so the test can check the ids reach the batch verbatim.
    """

    def __init__(self, policy) -> None:
        self.policy = policy
        self.generations: list[list[int]] = []
        self.fail_after: int | None = None

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        from verl.workers.rollout.replica import TokenOutput

        if self.fail_after is not None and len(self.generations) >= self.fail_after:
            raise ConnectionError("stand-in server gone")
        self.policy.max_new_tokens = int(sampling_params["max_tokens"])
        gen = self.policy.generate([list(prompt_ids)], [tuple(sampling_params.get("stop") or ())])[0]
        self.generations.append(list(gen.token_ids))
        return TokenOutput(token_ids=gen.token_ids, log_probs=gen.logprobs, stop_reason="completed")


@pytest.fixture(scope="module")
def tiny():
    from turngym.agents.hf import HFPolicy
    from turngym.agents.tiny import build_tiny_model

    path = build_tiny_model()
    return path, HFPolicy.from_pretrained(path, device="cpu", temperature=1.0, seed=0, max_new_tokens=16)


#: The agent loop as a user configures it: an ``agent_loop_config_path`` entry with keyword
#: arguments (short actions keep the tiny model's CPU generation cheap).
SHORT_LOOP, SHORT_TOKENS = "turngym_short", 8


@pytest.fixture(scope="module")
def loop_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("verl") / "agent_loops.yaml"
    path.write_text(
        f"- name: {SHORT_LOOP}\n  _target_: turngym.integrations.verl.TurngymAgentLoop\n"
        f"  max_tokens_per_turn: {SHORT_TOKENS}\n"
    )
    return str(path)


def _worker(tiny_path, server, loop_config: str, response_length: int = 384):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    cfg = _compose(
        [
            f"actor_rollout_ref.model.path={tiny_path}",
            f"actor_rollout_ref.rollout.agent.default_agent_loop={SHORT_LOOP}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_config}",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.prompt_length=512",
            f"actor_rollout_ref.rollout.response_length={response_length}",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "trainer.use_v1=false",
        ]
    )
    return AgentLoopWorker(cfg, server), cfg


def _batch(env_id: str, seeds: list[int], n: int, env_kwargs: dict):
    from verl import DataProto

    rows = [(s, g) for s in seeds for g in range(n)]
    nt = {
        "raw_prompt": np.array([[{"role": "user", "content": f"{env_id} {s}"}] for s, _ in rows] + [None], dtype=object)[:-1],
        "extra_info": np.array([{"env_id": env_id, "seed": s, "index": i, "env_kwargs": env_kwargs} for i, (s, _) in enumerate(rows)]),
        "agent_name": np.array([SHORT_LOOP] * len(rows), dtype=object),
        "index": np.arange(len(rows)),
        "uid": np.array([f"uid-{s}" for s, _ in rows], dtype=object),
    }
    return DataProto(batch=None, non_tensor_batch=nt, meta_info={})


def _expected(name: str, out) -> np.ndarray:
    """turngym's own rule, computed outside verl: compute_advantages on the episodes, spans on tokens."""
    nt = out.non_tensor_batch
    eps = [episode_from_json(e) for e in nt["turngym_episode"]]
    per_turn = turn_advantages(name, eps)
    width = out.batch["responses"].shape[1]
    return np.stack([sequence_advantages(a, json.loads(s), width) for a, s in zip(per_turn, nt["turngym_spans"])])


def test_agent_loop_in_verls_worker_and_registered_estimators_match_turngym(tiny, loop_config):
    import torch
    from verl.trainer.ppo import ray_trainer

    path, policy = tiny
    server = StandInRolloutServer(policy)
    worker, cfg = _worker(path, server, loop_config)
    out = asyncio.run(worker.generate_sequences(_batch("turngym/Math-v0", [3, 4], 2, {"max_turns": 2})))

    nt = out.non_tensor_batch
    eps = [episode_from_json(e) for e in nt["turngym_episode"]]
    assert max(len(e.turns) for e in eps) >= 2, "episodes were single-turn"
    assert max(map(len, server.generations)) <= SHORT_TOKENS, "the agent loop's configured kwargs must reach it"
    renderer = ChatRenderer(policy.tokenizer)
    mask = out.batch["response_mask"]
    responses = out.batch["responses"]
    for i, ep in enumerate(eps):
        m = mask[i].bool()
        # token-faithful: the mask covers exactly the generated ids, verbatim and in order
        policy_ids = responses[i][m].tolist()
        assert policy_ids == [tok for t in json.loads(nt["turngym_spans"][i]) for tok in responses[i][t[0] : t[1]].tolist()]
        assert int(m.sum()) == sum(b - a for a, b in json.loads(nt["turngym_spans"][i]))
        assert int(nt["turngym_num_turns"][i]) == len(ep.turns)
        # the prompt is the env's real first prompt, rendered with the model's chat template
        prompt = out.batch["prompts"][i][out.batch["attention_mask"][i][: out.batch["prompts"].shape[1]].bool()].tolist()
        assert prompt == renderer.prompt_ids(ep.context(upto=0)[0])
        assert float(out.batch["rm_scores"][i].sum()) == pytest.approx(ep.total_reward)
    all_generated = sorted(map(tuple, server.generations))
    batch_generated = sorted(
        tuple(responses[i][a:b].tolist()) for i in range(len(eps)) for a, b in json.loads(nt["turngym_spans"][i])
    )
    assert batch_generated == all_generated, "every generation reaches the batch verbatim, nothing else under the mask"

    out.batch["token_level_rewards"] = out.batch["rm_scores"]
    for name in ("gigpo", "turn_grpo", "grpo", "papo"):
        data = ray_trainer.compute_advantage(out, f"turngym_{name}", config=cfg.algorithm)
        got = data.batch["advantages"].numpy()
        np.testing.assert_allclose(got, _expected(name, out), rtol=1e-6, atol=1e-6)
        assert torch.equal(data.batch["advantages"] * (1 - mask), torch.zeros_like(data.batch["advantages"]))

    # verl's own estimators still run unchanged through the wrapper
    data = ray_trainer.compute_advantage(out, "grpo", config=cfg.algorithm)
    assert data.batch["advantages"].shape == mask.shape


def test_rollout_server_failure_is_an_unscored_episode_with_zero_advantage(tiny, loop_config):
    from verl.trainer.ppo import ray_trainer

    path, policy = tiny
    server = StandInRolloutServer(policy)
    server.fail_after = 3
    worker, cfg = _worker(path, server, loop_config)
    out = asyncio.run(worker.generate_sequences(_batch("turngym/Math-v0", [5], 3, {"max_turns": 2})))
    infra = [bool(x) for x in out.non_tensor_batch["turngym_infra_error"]]
    assert any(infra), "a failing rollout server must mark episodes infra_error"
    out.batch["token_level_rewards"] = out.batch["rm_scores"]
    adv = ray_trainer.compute_advantage(out, "turngym_grpo", config=cfg.algorithm).batch["advantages"]
    for i, bad in enumerate(infra):
        if bad:
            assert float(adv[i].abs().sum()) == 0.0


def test_estimator_without_the_batch_says_the_fix():
    import torch
    from verl.trainer.ppo import core_algos

    fn = core_algos.get_adv_estimator_fn("turngym_gigpo")
    with pytest.raises(Exception, match="use_v1=false"):
        fn(token_level_rewards=torch.zeros(2, 4), response_mask=torch.ones(2, 4), index=np.array(["a", "a"]))
