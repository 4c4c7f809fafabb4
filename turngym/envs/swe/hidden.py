"""Hidden cases: inputs the agent never sees, checked against the gold implementation.

The visible tests are in the tree, so an agent can answer exactly the inputs they assert
(a table keyed by the asserted calls) and leave the bug in place. A generated task is
therefore resolved only if, besides its FAIL_TO_PASS and PASS_TO_PASS tests, the agent's
package agrees with the gold package on cases it never saw (differential testing):

* **Cases** come from the repository's driver (:mod:`turngym.envs.swe.drivers`): random inputs
  over the whole public API, derived deterministically from ``(seed, repository)`` at grade
  time — nothing is stored, and nothing of them is in the tree.
* **Where they run**: in the split grader's trusted process, after the tests, against the
  agent's package through the same proxies (:mod:`turngym.envs.swe.testing`). Driver and inputs
  travel on the grader's stdin after the package's process is forked, so they are neither
  on disk in the sandbox nor in that process's memory; the package sees an input only when
  it is called with it. What the driver observes comes back on the nonce-tagged verdict line.
* **The reference**: the same cases run once per process and repository on the gold tree (the
  shipped repository) through the same grader, so both sides are observed identically. The
  expected values never enter a sandbox that runs the agent's code.

Observations agree when they are equal, floats within a relative 1e-9 (a fix that computes
the same value in another order still agrees).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from functools import lru_cache
from importlib import import_module
from pathlib import Path
from typing import Any

from turngym.core.errors import InfraError
from turngym.envs.swe.repos import load_repo
from turngym.envs.swe.testing import TestRun, run_pytest

__all__ = ["HIDDEN_SEED", "N_CASES", "has_hidden_cases", "hidden_spec", "gold_observations", "hidden_failing",
           "agree"]

#: The seed the hidden cases are drawn from (with the repository's name).
HIDDEN_SEED = 0
#: Cases per repository (each exercises a slice of the whole public API).
N_CASES = 200

_DRIVERS = Path(__file__).with_name("drivers")
_PRELUDE = (_DRIVERS / "_prelude.py").read_text(encoding="utf-8")
"""What every driver shares (:mod:`turngym.envs.swe.drivers._prelude`), sent ahead of its text."""
_IMPORT = re.compile(r"^from turngym\.envs\.swe\.drivers\._prelude import [^\n]*\n", re.M)


def has_hidden_cases(repo: str) -> bool:
    """Whether ``repo`` (a shipped repository) has a driver."""
    return repo.isidentifier() and (_DRIVERS / f"{repo}.py").is_file()


@lru_cache(maxsize=32)
def _spec_text(repo: str, seed: int, n: int) -> str:
    driver = import_module(f"turngym.envs.swe.drivers.{repo}")
    cases = driver.generate(random.Random(f"hidden/{seed}/{repo}"), n)
    source = _PRELUDE + _IMPORT.sub("", (_DRIVERS / f"{repo}.py").read_text(encoding="utf-8"), count=1)
    return json.dumps({"package": repo, "source": source, "cases": cases}, sort_keys=True)


def hidden_spec(repo: str, seed: int = HIDDEN_SEED, n: int = N_CASES) -> dict[str, Any]:
    """The hidden cases of ``repo``: ``{"package", "source", "cases"}`` for :func:`~turngym.envs.swe.testing.run_pytest`."""
    return json.loads(_spec_text(repo, seed, n))  # type: ignore[no-any-return]


def _observations(run: TestRun) -> tuple[list[Any], bool, str]:
    if run.hidden is None:
        return [], False, "the run carried no hidden cases"
    part = json.loads(run.hidden)
    return list(part.get("obs", [])), bool(part.get("done")), str(part.get("error", ""))


_GOLD: dict[tuple[str, str], list[Any]] = {}


def gold_observations(repo: str, spec: dict[str, Any]) -> list[Any]:
    """What the gold package answers to ``spec`` (run once per process, repository and cases).

    Raises :class:`InfraError` when the gold tree does not run its cases to the end: the
    reference is missing, which is never the agent's failure.
    """
    key = (repo, hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest())
    if key not in _GOLD:
        run = run_pytest(load_repo(repo), None, canary=True, split=True, hidden=spec)
        obs, done, error = _observations(run)
        if not done or len(obs) != len(spec["cases"]) or run.problem or run.failed:
            raise InfraError(f"the gold {repo} did not answer its hidden cases ({error or run.problem or 'tests failed'})")
        _GOLD[key] = obs
    return _GOLD[key]


def agree(a: Any, b: Any) -> bool:
    """Equal observations (JSON data); floats within a relative 1e-9."""
    if type(a) is float or type(b) is float:
        if type(a) in (int, float) and type(b) in (int, float):
            return a == b or (a != a and b != b) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return False
    if type(a) is list and type(b) is list:
        return len(a) == len(b) and all(agree(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict and type(b) is dict:
        return a.keys() == b.keys() and all(agree(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def hidden_failing(run: TestRun, gold: list[Any]) -> float:
    """The fraction of hidden cases on which ``run`` disagrees with ``gold`` (missing ones disagree)."""
    obs, _, _ = _observations(run)
    if not gold:
        return 0.0
    same = sum(agree(g, o) for g, o in zip(gold, obs, strict=False))
    return 1.0 - same / len(gold)
