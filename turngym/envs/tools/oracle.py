"""The oracle: replay the gold calls of the current turn, then reply with the facts asked for."""

from __future__ import annotations

import json

from turngym.envs.tools.tasks import ToolsTask

__all__ = ["oracle_message"]


def oracle_message(task: ToolsTask, turn: int, calls_made_this_turn: int) -> str:
    """The oracle's next message at user turn ``turn``.

    All gold calls of the turn go out in one message (a JSON list, executed in order); once the
    agent has called something this turn, the oracle replies, quoting the required answers.

    >>> from turngym.envs.tools.tasks import generate_store_task
    >>> t = generate_store_task(3)
    >>> json.loads(oracle_message(t, 0, 0))[0]["name"]
    'identify_customer'
    >>> oracle_message(t, 0, 2).startswith("Done.")
    True
    """
    gold = task.gold[turn]
    if gold and calls_made_this_turn == 0:
        return json.dumps([{"name": c["name"], "arguments": c["arguments"]} for c in gold])
    answers = task.answers[turn] if turn < len(task.answers) else ()
    return "Done." + (" " + "; ".join(answers) if answers else "")
