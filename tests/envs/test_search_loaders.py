"""QA loaders (HotpotQA / NQ / FlashRAG shapes) and the env over a user corpus, on hand-written fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import turngym
from turngym.core.errors import ConfigError, TaskError
from turngym.envs.search.tasks import SearchTask, load_qa

FIXTURES = Path(__file__).parent / "fixtures" / "search"
CORPUS = FIXTURES / "corpus.jsonl"


def test_hotpotqa_jsonl():
    tasks = load_qa(FIXTURES / "hotpotqa.jsonl")
    cmp_, bridge = tasks
    assert cmp_.id == "5a8b57f25542995d1e6f1371" and cmp_.gold == "yes" and cmp_.kind == "comparison"
    assert cmp_.support == ("Scott Derrickson", "Ed Wood") and cmp_.support_key == "title"
    # Two supporting sentences of one article are one supporting passage.
    assert bridge.support == ("Eiffel Tower", "Gustave Eiffel") and bridge.hops == 2
    assert bridge.hop_queries == bridge.support and bridge.meta["level"] == "medium"


def test_hotpotqa_json_array():
    (task,) = load_qa(FIXTURES / "hotpotqa_dev.json")
    assert task.id == "hp-array-1" and task.gold == "Scott Derrickson" and task.hops == 1


def test_nq_answer_and_answers_lists():
    a, b = load_qa(FIXTURES / "nq.jsonl")
    assert a.gold == "Mount Everest" and a.aliases == ("Everest",) and a.id == "nq/0"
    assert b.id == "nq-2" and b.answers == ("Nile", "the Nile River")
    assert a.kind == "open" and a.support == () and a.hop_queries == (a.prompt,)


def test_flashrag_with_and_without_support():
    a, b = load_qa(FIXTURES / "flashrag.jsonl")
    assert a.id == "test_0" and a.answers == ("Scott Derrickson", "Derrickson") and a.kind == "open"
    assert b.support == ("Eiffel Tower", "Gustave Eiffel") and b.kind == "bridge" and b.gold == "Dijon"


def test_format_can_be_forced_and_bad_rows_are_reported(tmp_path):
    assert load_qa(FIXTURES / "nq.jsonl", format="nq", limit=1)[0].gold == "Mount Everest"
    with pytest.raises(ConfigError):
        load_qa(FIXTURES / "nq.jsonl", format="squad")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q?", "text": "no answer"}) + "\n")
    with pytest.raises(TaskError, match="cannot tell the QA format"):
        load_qa(bad)
    bad.write_text(json.dumps({"question": "q?", "answers": []}) + "\n")
    with pytest.raises(TaskError, match="no answer"):
        load_qa(bad)
    bad.write_text("not json\n")
    with pytest.raises(TaskError, match="not valid JSON"):
        load_qa(bad)


def test_tasks_round_trip_through_dicts():
    for t in load_qa(FIXTURES / "hotpotqa.jsonl"):
        back = SearchTask.from_dict(json.loads(json.dumps(t.to_dict())))
        assert back == t


@pytest.mark.parametrize("qa", ["hotpotqa.jsonl", "hotpotqa_dev.json", "nq.jsonl", "flashrag.jsonl"])
def test_env_over_user_corpus_oracle_succeeds(qa):
    env = turngym.make("turngym/SearchQA-v0", corpus=str(CORPUS), tasks=str(FIXTURES / qa))
    assert env.kb is None
    for task in env.tasks:
        env.reset(options={"task": task.id})
        recall = 0.0
        while True:
            *_, term, trunc, info = env.step(env.oracle_action())
            recall = info["signals"]["support_recall"]
            if term or trunc:
                break
        assert info["outcome"]["success"], task
        assert recall == (1.0 if task.support else 0.0)


def test_env_over_user_corpus_signals_use_titles():
    env = turngym.make("turngym/SearchQA-v0", corpus=str(CORPUS), tasks=str(FIXTURES / "hotpotqa.jsonl"), top_k=1)
    env.reset(options={"task": "hp-bridge-1"})
    *_, info = env.step("<search> who designed the Eiffel Tower </search>")
    assert info["signals"]["new_evidence"] == 1.0 and info["signals"]["support_recall"] == 0.5
    *_, info = env.step("<search> Gustave Eiffel birthplace </search>")
    assert info["signals"]["support_recall"] == 1.0 and info["signals"]["answer_in_context"] == 1.0
    turngym.check_env(env, oracle_episodes=2, n_garbage=30)
