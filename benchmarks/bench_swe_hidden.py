"""What the SWE hidden cases cost: grading time per episode with and without them.

Grades fresh (uncached) gold-patched trees of ``--tasks`` shipped tasks through the split
grader twice each, interleaved: the task's tests alone (the grading before hidden cases) and
the tests plus the hidden cases (the grading now); reports p50/p90 of both and of the
difference, and the one-time cost of the gold reference per repository (one grading run per
process and repository).

    PYTHONPATH=$PWD python benchmarks/bench_swe_hidden.py [--tasks 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1000, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from turngym.envs.swe.grading import grading_tree, hidden_cases_of, protected_dirs
    from turngym.envs.swe.hidden import N_CASES, gold_observations
    from turngym.envs.swe.repos import REPO_NAMES, load_repo
    from turngym.envs.swe.tasks import buggy_tree, load_tasks
    from turngym.envs.swe.testing import run_pytest

    out: dict[str, object] = {"hidden_cases_per_repo": N_CASES}
    gold = {}
    for repo in REPO_NAMES:
        task = next(t for t in load_tasks() if t.repo == repo)
        s = time.perf_counter()
        gold_observations(repo, hidden_cases_of(task))  # type: ignore[arg-type]
        gold[repo] = time.perf_counter() - s
    out["gold_reference_ms_per_repo_mean (once per process)"] = 1000 * sum(gold.values()) / len(gold)

    sample = random.Random(0).sample(load_tasks(), args.tasks)
    plain, hidden = [], []
    for i, t in enumerate(sample):
        for with_hidden in (i % 2 == 0, i % 2 == 1):  # interleaved, alternating which goes first
            tree = load_repo(t.repo).with_file("bench_marker.py", f"# {i} {with_hidden} {time.time()}\n")
            graded = grading_tree(t, tree, buggy_tree(t))
            s = time.perf_counter()
            run = run_pytest(graded, None, canary=True, split=True, test_dirs=protected_dirs(t),
                             hidden=hidden_cases_of(t) if with_hidden else None)
            (hidden if with_hidden else plain).append(time.perf_counter() - s)
            assert not run.failed and not run.problem, (t.id, run.problem)
    out["tasks"] = len(sample)
    out["grade_tests_only_ms_p50"] = pct(plain, 50)
    out["grade_tests_only_ms_p90"] = pct(plain, 90)
    out["grade_with_hidden_ms_p50"] = pct(hidden, 50)
    out["grade_with_hidden_ms_p90"] = pct(hidden, 90)
    out["added_ms_p50 (paired)"] = pct([h - p for h, p in zip(hidden, plain, strict=True)], 50)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:<52} {v:.1f}" if isinstance(v, float) else f"{k:<52} {v}")


if __name__ == "__main__":
    main()
