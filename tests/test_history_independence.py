"""Same seed + same actions => same episode, whatever ran before in the process (issue 31).

Two fresh interpreters play the same fixed episodes of every registered env (seeded oracle and
random play; for BFCL, a task that posts a tweet without mentions): one with no history, one
after random, garbage and oracle episodes of every env and the BFCL calls that once changed
Python's default arguments for the whole process. Their transcripts — observations, rewards,
``terminated``/``truncated``, state keys, signals, outcomes — must be identical, on a fresh env
and on the env that played the noise. Both run at once (``tests/history_probe.py``).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import turngym

PROBE = Path(__file__).with_name("history_probe.py")
ROOT = Path(turngym.__file__).resolve().parents[1]


def _first_difference(clean: list, dirty: list) -> str:
    for a, b in zip(clean, dirty):
        if a == b:
            continue
        if a["obs"] != b["obs"] or a["state_key"] != b["state_key"]:
            return f"{a['spec']}: the reset differs: {a['obs'][:200]!r} vs {b['obs'][:200]!r}"
        for i, (x, y) in enumerate(zip(a["steps"], b["steps"])):
            if x != y:
                fields = ["action", "obs", "reward", "terminated", "truncated", "state_key", "signals",
                          "action_valid", "outcome", "infra_error"]
                diff = {f: (u, v) for f, u, v in zip(fields, x, y) if u != v}
                return f"{a['spec']}: step {i} differs: {json.dumps(diff, default=repr)[:1500]}"
        return f"{a['spec']}: {len(a['steps'])} steps vs {len(b['steps'])}"
    return f"{len(clean)} episodes vs {len(dirty)}"


def test_every_env_is_independent_of_the_process_history(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    outs = {mode: tmp_path / f"{mode}.json" for mode in ("clean", "dirty")}
    procs = {
        mode: subprocess.Popen([sys.executable, str(PROBE), mode, str(out)], env=env, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for mode, out in outs.items()
    }
    for mode, proc in procs.items():
        log, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"the {mode} probe failed:\n{log[-3000:]}"
    clean = json.loads(outs["clean"].read_text())
    dirty = json.loads(outs["dirty"].read_text())
    assert sorted(clean) == sorted(turngym.list_envs())
    for env_id, episodes in clean.items():  # the BFCL episode does post a tweet without mentions
        if any("task" in e["spec"] for e in episodes):
            assert any('\\"mentions\\": []' in step[1] for e in episodes for step in e["steps"]), env_id
    differ = {}
    for env_id, episodes in clean.items():
        for run in (env_id, env_id + " (after noise, same env)"):
            if dirty[run] != episodes:
                differ[run] = _first_difference(episodes, dirty[run])
    assert not differ, "episodes depend on what ran before in the process:\n" + "\n".join(
        f"{k}: {v}" for k, v in differ.items()
    )
