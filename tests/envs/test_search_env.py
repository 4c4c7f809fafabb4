"""turngym/SearchQA-v0: contract, oracle, baseline gap, signals, task generation."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import turngym
from turngym.core.errors import ConfigError, TaskError
from turngym.envs.search.baselines import first_entity, naive_action
from turngym.envs.search.env import SearchQAEnv, shared_retriever
from turngym.envs.search.kb import build_kb
from turngym.envs.search.tasks import SearchTask, generate_task, generate_tasks
from turngym.envs.search.verifier import normalize_answer

ENV_ID = "turngym/SearchQA-v0"


@pytest.fixture(scope="module")
def env() -> SearchQAEnv:
    return turngym.make(ENV_ID)


def play(env: SearchQAEnv, task: SearchTask, policy) -> tuple[dict, list[dict]]:
    """Run one episode; returns the final info and every turn's signals."""
    env.reset(options={"task": task})
    signals = []
    while True:
        *_, term, trunc, info = env.step(policy())
        signals.append(info["signals"])
        if term or trunc:
            return info, signals


def test_check_env_passes():
    turngym.check_env(ENV_ID, oracle_episodes=5)


def test_gymnasium_make_works():
    env = gym.make(ENV_ID)
    obs, info = env.reset(seed=1)
    assert obs.startswith("Question: ")
    obs, *_ = env.step("<search> anything at all </search>")
    assert "<information>" in obs


def _oracle_and_baseline(env: SearchQAEnv, tasks: list[SearchTask]) -> dict[int, dict[str, float]]:
    stats: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for task in tasks:
        info, _ = play(env, task, env.oracle_action)
        s = stats[task.hops]
        s["n"] += 1
        s["oracle"] += info["outcome"]["success"]
        s["oracle_recall"] += info["outcome"]["support_recall"]
        obs, _ = env.reset(options={"task": task})
        messages = [{"role": "user", "content": obs}]
        for _ in range(2):
            action = naive_action(messages)
            obs, _, term, trunc, info = env.step(action)
            messages += [{"role": "assistant", "content": action}, {"role": "user", "content": obs}]
        assert term
        s["naive"] += info["outcome"]["success"]
    return {h: {k: (v / s["n"] if k != "n" else v) for k, v in s.items()} for h, s in stats.items()}


def _assert_gap(stats: dict[int, dict[str, float]]) -> None:
    for hops, s in stats.items():
        assert s["oracle"] == 1.0, f"oracle failed on {hops}-hop tasks: {s}"
        assert s["oracle_recall"] == 1.0, f"oracle missed gold passages on {hops}-hop tasks: {s}"
    # Retrieve-once works for some single lookups, and rarely once a bridge is needed (its
    # wins are comparison questions where the top passage happens to be the winner's).
    assert stats[1]["naive"] > 0.3
    for hops in (2, 3, 4):
        assert stats[hops]["naive"] < 0.12, stats
        assert stats[hops]["naive"] < stats[1]["naive"] / 4, stats


def test_oracle_solves_all_and_naive_baseline_is_far_lower(env):
    _assert_gap(_oracle_and_baseline(env, generate_tasks(env.kb, 200, seed=7)))


@pytest.mark.slow
def test_oracle_solves_500_tasks_and_naive_baseline_by_hops(env):
    stats = _oracle_and_baseline(env, generate_tasks(env.kb, 500, seed=11))
    _assert_gap(stats)
    assert sum(s["n"] for s in stats.values()) == 500


def test_random_policy_stays_far_below_the_oracle(env):
    rng = np.random.default_rng(0)
    wins, recalls = 0, []
    for seed in range(40):
        env.reset(seed=seed)
        while True:
            *_, term, trunc, info = env.step(env.sample_action(rng))
            assert not env.reward_spec.violations(info["signals"])
            if term or trunc:
                break
        wins += info["outcome"]["success"]
        recalls.append(info["signals"]["support_recall"])
    assert wins <= 2 and np.mean(recalls) < 0.7


def test_tasks_have_gold_support_and_answers_not_in_question():
    kb = build_kb(0, 1200)
    tasks = generate_tasks(kb, 200, seed=3)
    passage_ids = {p.id for p in kb.passages}
    kinds = {t.kind for t in tasks}
    assert kinds == {"bridge", "comparison"}
    for t in tasks:
        assert t.hops == len(t.support) == len(set(t.support)) == len(t.hop_queries)
        assert set(t.support) <= passage_ids
        q = f" {normalize_answer(t.prompt)} "
        for ans in t.answers:
            assert f" {normalize_answer(ans)} " not in q, (t.prompt, ans)
        assert t.gold == t.answers[0]


def test_gold_support_passage_states_the_fact():
    """The last gold passage of a bridge task contains the answer; earlier ones name the next hop."""
    kb = build_kb(0, 1200)
    by_id = {p.id: p for p in kb.passages}
    for t in generate_tasks(kb, 100, seed=5, comparison_rate=0.0):
        last = by_id[t.support[-1]].contents
        assert any(normalize_answer(a) in normalize_answer(last) for a in t.answers), (t.prompt, last)


def test_each_fact_lives_in_exactly_one_passage():
    kb = build_kb(1, 300)
    names = [e.name for e in kb.entities]
    for (eid, fact), pid in kb.fact_passage.items():
        assert pid.startswith(eid + ".")
        e = kb.by_id[eid]
        value = kb.by_id[e.rels[fact]].name if fact in e.rels else str(e.attrs[fact])
        own = [p for p in kb.passages if p.id.startswith(eid + ".")]
        holders = [p.id for p in own if value in p.text]
        assert pid in holders, (eid, fact, value)
        for other in (p for p in own if p.id in holders and p.id != pid):
            # Only as part of a longer look-alike name ("Brompim" inside "Brompim Holdings").
            assert any(value in n and n != value and n in other.text for n in names), (eid, fact, value, other)


def test_knowledge_base_is_seeded_and_has_look_alike_names():
    a, b = build_kb(3, 400), build_kb(3, 400)
    assert a is b  # cached: one build per (seed, size)
    build_kb.cache_clear()
    c = build_kb(3, 400)
    assert c is not a and c.passages == a.passages
    assert build_kb(4, 400).passages != a.passages
    persons = [e.name for e in a.by_type["person"]]
    surnames = [n.split()[1] for n in persons]
    firsts = [n.split()[0] for n in persons]
    assert len(set(persons)) == len(persons)
    assert len(set(surnames)) < len(surnames) and len(set(firsts)) < len(firsts)  # shared name parts


def test_knowledge_base_and_tasks_are_identical_across_processes():
    """Seeded from strings, never from hash(): another interpreter (other hash seed) agrees."""
    code = (
        "import hashlib;from turngym.envs.search.kb import build_kb;"
        "from turngym.envs.search.tasks import generate_tasks;kb=build_kb(2, 300);"
        "print(hashlib.sha256(repr((kb.passages, generate_tasks(kb, 50))).encode()).hexdigest())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "123"}, cwd=Path(turngym.__file__).parent.parent)
    kb = build_kb(2, 300)
    here = hashlib.sha256(repr((kb.passages, generate_tasks(kb, 50))).encode()).hexdigest()
    assert out.stdout.strip() == here


def test_envs_share_one_index():
    e1 = turngym.make(ENV_ID, kb_entities=300)
    e2 = turngym.make(ENV_ID, kb_entities=300)
    assert e1.retriever is e2.retriever is shared_retriever("bm25", 0, 300)
    assert e1.kb is e2.kb


def test_signals_track_evidence_repeats_and_answer(env):
    task = generate_task(env.kb, seed=21, hops=3, comparison_rate=0.0)
    env.reset(options={"task": task})
    _, _, _, _, info = env.step(f"<search>{task.hop_queries[0]}</search>")
    s = info["signals"]
    assert s["new_evidence"] == 1.0 and s["support_recall"] == pytest.approx(1 / 3)
    assert s["repeat_query"] == 0.0 and s["redundant_docs"] == 0.0
    # The same query, reworded: repeat, no new evidence, every passage already seen.
    _, _, _, _, info = env.step(f"<search> {task.hop_queries[0].upper()}? </search>")
    s = info["signals"]
    assert s["repeat_query"] == 1.0 and s["new_evidence"] == 0.0 and s["redundant_docs"] == 1.0
    assert s["support_recall"] == pytest.approx(1 / 3)
    _, _, _, _, info = env.step(f"<search>{task.hop_queries[1]}</search>")
    _, _, _, _, info = env.step(f"<search>{task.hop_queries[2]}</search>")
    s = info["signals"]
    assert s["support_recall"] == 1.0 and s["answer_in_context"] == 1.0
    # A partially right answer: EM 0, F1 > 0.
    obs, reward, term, trunc, info = env.step(f"<answer>{task.gold} and more words</answer>")
    assert term and not trunc and reward == 0.0
    assert info["signals"]["answer_em"] == 0.0 and 0 < info["signals"]["answer_f1"] < 1
    assert info["outcome"]["success"] is False and info["outcome"]["support_recall"] == 1.0


def test_answer_matches_aliases_after_normalization(env):
    kb = env.kb
    task = next(t for t in generate_tasks(kb, 200, seed=2, min_hops=1, max_hops=1) if t.aliases)
    env.reset(options={"task": task})
    alias = task.aliases[0]
    _, reward, term, _, info = env.step(f"<think>easy</think><answer>  {alias.upper()}. </answer>")
    assert term and reward == 1.0 and info["outcome"]["em"] == 1.0


def test_invalid_actions_are_part_of_the_episode(env):
    env.reset(seed=3)
    for bad in ("I think it is Paris", "<search>", "<answer></answer>", "<search>" + "x" * 1001 + "</search>"):
        obs, reward, term, trunc, info = env.step(bad)
        assert info["action_valid"] is False and info["invalid_reason"]
        assert reward == pytest.approx(-0.1) and not term
        assert "<search> query </search>" in obs


def test_truncation_after_max_turns():
    env = turngym.make(ENV_ID, max_turns=2, kb_entities=300)
    env.reset(seed=0)
    env.step("<search>a</search>")
    _, reward, term, trunc, info = env.step("<search>b</search>")
    assert trunc and not term and info["outcome"]["success"] is False


def test_task_ids_regenerate_and_check_the_knowledge_base(env):
    _, info = env.reset(seed=5)
    task = env.task
    env.reset(options={"task": info["task_id"]})
    assert env.task == task
    other = turngym.make(ENV_ID, kb_entities=300)
    with pytest.raises(TaskError, match="kb_entities=1200"):
        other.reset(options={"task": task.id})
    with pytest.raises(TaskError):
        env.reset(options={"task": "nope"})
    with pytest.raises(ConfigError, match="kb_entities=1200"):
        other.reset(options={"task": task})  # the object, not the id: checked too


def test_state_key_depends_on_seen_passages_not_history(env):
    task = generate_task(env.kb, seed=1, hops=2, comparison_rate=0.0)
    keys = []
    for order in ((0, 1), (1, 0)):
        env.reset(options={"task": task})
        for i in order:
            *_, info = env.step(f"<search>{task.hop_queries[i]}</search>")
        keys.append(info["state_key"])
    assert keys[0] == keys[1]  # same searches in another order: same state
    env.reset(options={"task": task})
    *_, info = env.step(f"<search>{task.hop_queries[0]}</search>")
    assert info["state_key"] != keys[0]


def test_bad_config_is_rejected():
    with pytest.raises(ConfigError):
        SearchQAEnv(min_hops=3, max_hops=2)
    with pytest.raises(ConfigError):
        SearchQAEnv(top_k=0)
    with pytest.raises(ConfigError):
        SearchQAEnv(retriever="elastic")
    with pytest.raises(ConfigError, match="needs tasks"):
        SearchQAEnv(corpus="x.jsonl")


def test_top_k_controls_passages_shown():
    env = turngym.make(ENV_ID, kb_entities=300, top_k=5)
    env.reset(seed=0)
    obs, *_ = env.step("<search> city river founded </search>")
    assert obs.count("Doc ") == 5 and "Doc 5(Title: " in obs


def test_first_entity_skips_question_words():
    assert first_entity("It first appeared in 1971.", "When did X appear?") == "1971"
    assert first_entity("Vellamir Press was founded by Orsa Vellamir.", "Who founded Vellamir Press?") == "Orsa Vellamir"
    assert first_entity("no names here", "") is None


def test_naive_rag_agent_runs_through_the_rollout_engine():
    from turngym.agents.registry import make_agent
    from turngym.rollout.runner import run_episodes

    tasks = generate_tasks(build_kb(0, 1200), 40, seed=9, min_hops=1, max_hops=1)
    agent = make_agent("naive-rag")
    episodes = run_episodes(lambda: turngym.make(ENV_ID), agent, list(range(40)), batch_size=8, tasks=tasks)
    assert all(len(ep.turns) == 2 for ep in episodes)
    wins = sum(ep.success for ep in episodes)
    assert 0.3 * 40 < wins < 40  # finds many single-hop answers, not all
