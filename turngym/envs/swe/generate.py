"""Regenerate the shipped SWE task set: ``python -m turngym.envs.swe.generate``.

Runs every candidate mutation of every shipped repository (a few minutes on 2 cores), keeps
the valid ones, validates each (gold patch resolves it, the bug breaks it) and writes JSONL.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from turngym.core.task import write_jsonl
from turngym.envs.swe.grading import validate_task
from turngym.envs.swe.repos import REPO_NAMES
from turngym.envs.swe.tasks import default_tasks_path, generate_tasks

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repos", nargs="*", default=list(REPO_NAMES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-per-repo", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    tasks = generate_tasks(args.repos, seed=args.seed, max_per_repo=args.max_per_repo, progress=True)
    bad = {t.id: p for t in tasks if (p := validate_task(t))}
    if bad:
        print(f"{len(bad)} tasks failed validation: {list(bad.items())[:3]}", file=sys.stderr)
        tasks = [t for t in tasks if t.id not in bad]
    out = args.out or default_tasks_path()
    write_jsonl(tasks, out)
    print(f"{len(tasks)} validated tasks -> {out} in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
