"""Free-text graders are bounded: a reply naming more candidates than the answer has scores nothing.

The attack (issue 38, item 1): on a question-only MCP-SQLite task, a reply listing all 140
first x last name pairs, with no tool call, scored reward 1.0 because text answers were matched by
substring. The rule of :mod:`turngym.core.answers` covers every env that grades free text:
MCP-SQLite, Tools-v0 / Tools-Store (order statuses and amounts) and MCP-Memory.
"""

from __future__ import annotations

import pytest

import turngym
from turngym.core.answers import ANSWER_SLACK, missing_answers
from turngym.envs.mcp.sqlite_tasks import _FIRST, _LAST, ANSWER_KINDS, generate_sqlite_task
from turngym.envs.tools.oracle import oracle_message
from turngym.envs.tools.tasks import ORDER_STATUSES, generate_store_task

ALL_NAMES = ", ".join(f"{f} {last}" for f in _FIRST for last in _LAST)


def test_rule_counts_candidates_of_the_answers_kind():
    names = [["Ava Kim", "Ben Rossi", "Chloe Silva", "Dev Novak", "Elena Haddad"]]
    assert missing_answers(["Ben Rossi"], "It is Ben Rossi.", kinds=names) == []
    # a small vocabulary allows no extra guess: two names of five would pay 40% for none of the work
    assert missing_answers(["Ben Rossi"], "Ben Rossi or Ava Kim", kinds=names) == ["Ben Rossi"]
    # a large one allows ANSWER_SLACK: answer + slack candidates still score; one more and nothing does
    many = [[f"{a} {b}" for a in ("Ava", "Ben", "Cy", "Dee", "Eve") for b in ("Kim", "Rossi", "Silva", "Novak")]]
    within = ", ".join(["Ben Rossi", *[n for n in many[0] if n != "Ben Rossi"][:ANSWER_SLACK]])
    assert missing_answers(["Ben Rossi"], within, kinds=many) == []
    over = ", ".join(["Ben Rossi", *[n for n in many[0] if n != "Ben Rossi"][: ANSWER_SLACK + 1]])
    assert missing_answers(["Ben Rossi"], over, kinds=many) == ["Ben Rossi"]
    assert missing_answers(["Ben Rossi"], ", ".join(names[0]), kinds=names) == ["Ben Rossi"]
    # a choice the request offers: restating it names the answer for free, so context is not excused
    assert missing_answers(["Ben Rossi"], "Ben Rossi or Dev Novak.", kinds=many, context="Ben Rossi or Dev Novak?") == []
    assert missing_answers(["Ben Rossi"], "Ben Rossi or Dev Novak.", kinds=names, context="Ben Rossi or Dev Novak?") == ["Ben Rossi"]
    assert missing_answers(["45"], "45 or 54", context="is it 45 or 54?") == []  # numbers keep the slack of 2
    assert missing_answers(["45"], "45, 54, 12 or 7", context="is it 45 or 54?") == ["45"]
    # numbers are one kind: every distinct number counts, except those the user's request gave
    assert missing_answers(["3"], "0 1 2 3 4 5 6 7 8 9") == ["3"]
    assert missing_answers(["45.50"], "Order O1003 (2 items) cost 45.5.", context="order O1003") == []
    # another kind's mentions do not count against this one
    assert missing_answers(["3"], "3 people: Ava Kim, Ben Rossi, Chloe Silva, Dev Novak", kinds=names) == []


def test_listing_every_name_pair_forges_nothing_on_mcp_sqlite_seed_4():
    pytest.importorskip("mcp_server_sqlite")
    env = turngym.make("turngym/MCP-SQLite-v0")
    try:
        env.reset(seed=0, options={"task": "mcp/sqlite/4"})
        task = env.unwrapped.current_task
        assert task.answers and not task.writes and task.answers[0] in ALL_NAMES  # a question-only task
        _, reward, terminated, _, info = env.step(ALL_NAMES)
        assert terminated and reward == 0.0 and not info["outcome"]["success"]
        assert info["signals"]["answers_given"] == 0.0
        env.reset(seed=0, options={"task": "mcp/sqlite/4"})
        _, reward, *_ = env.step(f"The highest-paid employee there is {task.answers[0]}.")
        assert reward == 1.0
    finally:
        env.close()


def test_honest_sqlite_replies_score_on_every_task():
    for seed in range(2000):
        t = generate_sqlite_task(seed)
        if t.answers:
            honest = "Done: " + ", ".join(t.answers) + "."
            assert missing_answers(t.answers, honest, kinds=ANSWER_KINDS, context=t.prompt) == [], t.id
            assert missing_answers(t.answers, ALL_NAMES + " " + " ".join(map(str, range(100))),
                                   kinds=ANSWER_KINDS, context=t.prompt) == list(t.answers), t.id


def _store_task_with(answer_is_status: bool) -> tuple[str, int]:
    for seed in range(500):
        t = generate_store_task(seed)
        for k, answers in enumerate(t.answers):
            if answers and (answers[0] in ORDER_STATUSES) == answer_is_status:
                return t.id, k
    raise AssertionError("no such store task")


@pytest.mark.parametrize("status", [True, False], ids=["status", "amount"])
def test_store_hedges_score_nothing_and_the_oracle_still_does(status):
    task_id, turn = _store_task_with(status)
    env = turngym.make("turngym/Tools-Store-v0")
    hedge = ", ".join(sorted(ORDER_STATUSES)) if status else " ".join(f"{c / 100:.2f}" for c in range(0, 100_000, 7))
    for use_hedge, want in ((True, 0.0), (False, 1.0)):
        env.reset(seed=0, options={"task": task_id})
        while True:
            action = env.unwrapped.oracle_action()
            if use_hedge and env.unwrapped.state.turn == turn and not action.startswith("["):
                action = hedge
            _, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        assert reward == want, (use_hedge, info["outcome"])
        assert (info["signals"]["answers_given"] if turn == len(env.unwrapped.current_task.turns) - 1 else 1.0) >= want
    env.close()


def test_oracle_replies_score_on_every_store_turn():
    for seed in range(500):
        t = generate_store_task(seed)
        for k, answers in enumerate(t.answers):
            reply = oracle_message(t, k, 1)
            assert missing_answers(answers, reply, kinds=(ORDER_STATUSES,), context=t.turns[k]) == [], (t.id, k)


def test_naming_the_whole_vocabulary_scores_nothing_even_when_the_request_mentioned_part_of_it():
    """Attack round: the request's mentions are excused as context, so on MCP-Memory a city
    question whose request names two other cities was credited for a reply listing all five
    (20 of 1805 question tasks of seeds 0-2999); and a kind of answers + slack members or fewer
    could always be listed whole."""
    from turngym.envs.mcp.memory_tasks import ANSWER_KINDS as MEMORY_KINDS
    from turngym.envs.mcp.memory_tasks import generate_memory_task

    cities = ["Oakridge", "Millbrook", "Harbor City", "Pinecrest", "Eastwick"]
    context = "Please add Ivy Fox, who lives in Pinecrest, and remove the fact 'lives in Eastwick' from Hugo Ito."
    every = "It is " + ", ".join(cities) + "."
    assert missing_answers(["Millbrook"], every, kinds=[cities], context=context) == ["Millbrook"]
    assert missing_answers(["Millbrook"], "Millbrook (Ivy lives in Pinecrest).", kinds=[cities], context=context) == []
    small = ["red", "green", "blue"]
    assert missing_answers(["red"], "red, green or blue", kinds=[small]) == ["red"]
    assert missing_answers(["red"], "red", kinds=[small]) == []
    assert missing_answers(["red"], "red, not green", kinds=[small]) == ["red"]  # 2 of 3: a guess, in a small vocabulary
    forged = []
    for seed in range(3000):
        t = generate_memory_task(seed)
        kind = next((k for k in MEMORY_KINDS if t.answers and t.answers[0] in k), None)
        if kind is not None and not missing_answers(t.answers, ", ".join(sorted(kind)), kinds=MEMORY_KINDS,
                                                     context=t.prompt):
            forged.append(seed)
    assert forged == []


@pytest.mark.parametrize("how", ["plain", "zero-width", "look-alike", "upper", "reversed", "hex", "words"])
def test_no_reply_is_credited_for_more_guesses_than_the_bound(how):
    """A reply that does not know the answer must be credited for whichever candidate is right, so the
    invariant is over the whole vocabulary: however its candidates are written (hidden with a zero-width
    joiner or a Cyrillic look-alike, reversed, in hex or words: all of them, so that few are counted), one reply
    is credited for at most
    ``1 + ANSWER_SLACK`` of them. Credit and count use the same test, so hiding a candidate from the count
    hides it from the credit too."""
    names = sorted({n for kind in ANSWER_KINDS for n in kind if " " in n})
    forms = {
        "plain": lambda n: n, "upper": str.upper, "reversed": lambda n: ", ".join(reversed(n.split())),
        "zero-width": lambda n: n[0] + "\u200d" + n[1:], "look-alike": lambda n: n.replace("a", "\u0430"),
    }
    if how in forms:
        reply = "; ".join(forms[how](n) for n in names)
        credited = [n for n in names if missing_answers([n], reply, kinds=ANSWER_KINDS) == []]
    else:
        words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
        values = [str(v) for v in range(100)]
        reply = ", ".join(hex(int(v)) if how == "hex" else f"{words[int(v) // 10]}-{words[int(v) % 10]}" for v in values)
        credited = [v for v in values if missing_answers([v], reply) == []]
    assert len(credited) <= 1 + ANSWER_SLACK, (how, credited[:5])
