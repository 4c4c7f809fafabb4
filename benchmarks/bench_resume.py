"""Resume under real kills: SIGKILL a small ``turngym train`` at random moments, resume, compare.

Usage:
    python benchmarks/bench_resume.py                     # 20 trials, one kill each
    python benchmarks/bench_resume.py --trials 50 --kills 3 --json

First one uninterrupted run of a small config (the reference). Then each trial starts the same
run in a fresh directory as a subprocess, SIGKILLs its whole process group at a random moment
of the run (not in Python's start-up or the final plot): by default, one of the intervals between
two consecutive commits of the reference is chosen uniformly, and the kill comes a uniform
fraction of that interval's reference length after the trial itself made the interval's first
commit — so the few seconds of RL steps and saves get as many kills as the long model loading and
warm start (``--draw uniform``: uniform over the reference run from the trial's first commit;
the machine's load makes this map onto the trial's run only roughly). Later kills of the same
trial hit ``--resume`` processes anywhere in their life. Then ``turngym train --resume`` runs to
completion. A trial succeeds when that resume exits 0 with a finished run; it is *exact* when
its ``metrics.jsonl`` rows (timings aside) and final weights equal the reference's, with no
repeated row. Where each kill landed (the committed phase, and whether a save was in flight) is
tallied, so the figure says which boundaries the random draws covered.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

_SETTINGS = {
    "steps": 4, "groups_per_step": 2, "group_size": 2, "max_new_tokens": 6, "warmup_steps": 4, "warmup_batch_size": 4,
    "demo_episodes": 8, "eval_episodes": 4, "eval_every": 1, "micro_batch_size": 4, "task_pool": 4, "lr": 1e-3,
}
_ENV_ARGS = {"min_steps": 1, "max_steps": 1, "max_turns": 2}
_TIMING = ("rollout_s", "step_s")


def _command(out: Path, resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "turngym.cli", "train", "--out", str(out), "--quiet"]
    if resume:
        return [*cmd, "--resume"]
    for key, value in _SETTINGS.items():
        cmd += ["--set", f"{key}={json.dumps(value)}"]
    for key, value in _ENV_ARGS.items():
        cmd += ["--env-arg", f"{key}={json.dumps(value)}"]
    return cmd


def _start(out: Path, resume: bool) -> subprocess.Popen[bytes]:
    return subprocess.Popen(_command(out, resume), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def _rows(out: Path) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in _TIMING} for r in rows]


def _weights(out: Path) -> dict[str, Any]:
    import torch

    state = json.loads((out / "state.json").read_text())
    return torch.load(out / state["checkpoint"] / "trainable.pt")


def _same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _where(out: Path) -> str:
    """The committed phase at the kill, and whether a save was in flight."""
    phase = _phase(out) or "before state.json"
    saving = any(p.name.endswith(".tmp") for d in (out, out / "checkpoints") if d.is_dir() for p in d.iterdir())
    return phase + (" (save in flight)" if saving else "")


def _kill_at(proc: subprocess.Popen[bytes], delay: float) -> bool:
    """SIGKILL the process group after ``delay`` s; False if the run had already exited."""
    try:
        proc.wait(timeout=delay)
        return False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


def _phase(out: Path) -> str | None:
    try:
        state = json.loads((out / "state.json").read_text())
        return f"{state['phase']}@{state['step']}"
    except (OSError, ValueError, KeyError):
        return None


def reference(root: Path, timeout: float) -> tuple[Path, float, float, list[tuple[float, str]]]:
    """The uninterrupted run: its directory, the seconds from its first commit (``started``) to
    ``finished``, its whole duration, and when each commit happened."""
    out = root / "reference"
    t0 = time.perf_counter()
    proc = _start(out, resume=False)
    timeline: list[tuple[float, str]] = []
    while proc.poll() is None and time.perf_counter() - t0 < timeout:
        phase = _phase(out)
        if phase is not None and (not timeline or timeline[-1][1] != phase):
            timeline.append((time.perf_counter() - t0, phase))
        time.sleep(0.005)
    _, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0 or not timeline or not timeline[-1][1].startswith("finished"):
        raise SystemExit(f"the reference run failed:\n{err.decode()[-2000:]}")
    return out, timeline[-1][0] - timeline[0][0], time.perf_counter() - t0, timeline


def _wait_phase(out: Path, proc: subprocess.Popen[bytes], names: list[str], target: int, timeout: float) -> None:
    """Until the run in ``out`` has committed ``names[target]`` (or a later one), or exited."""
    t0 = time.perf_counter()
    while proc.poll() is None and time.perf_counter() - t0 < timeout:
        phase = _phase(out)
        if phase in names and names.index(phase) >= target:
            return
        time.sleep(0.005)


def _first_kill(out: Path, proc: subprocess.Popen[bytes], rng: random.Random, timeline: list[tuple[float, str]], how: str,
                timeout: float) -> float:
    """Wait for the moment the first kill is measured from and return its delay: ``uniform`` —
    from the run's first commit, uniform over the reference's run; ``phases`` — a uniformly
    chosen interval between two consecutive commits of the reference, from the moment the trial
    makes the first of them, uniform over that interval's length in the reference (so the short
    RL steps and saves get as many kills as the long model loading and warm start)."""
    names = [name for _, name in timeline]
    if how == "uniform":
        _wait_phase(out, proc, names, 0, timeout)
        return rng.uniform(0, timeline[-1][0] - timeline[0][0])
    i = rng.randrange(len(timeline) - 1)
    _wait_phase(out, proc, names, i, timeout)
    return rng.uniform(0, timeline[i + 1][0] - timeline[i][0])


def trial(root: Path, index: int, ref: Path, timeline: list[tuple[float, str]], draw: str, total_s: float, kills: int,
          rng: random.Random, timeout: float) -> dict[str, Any]:
    out = root / f"trial-{index}"
    landed: list[str] = []
    for k in range(kills):
        proc = _start(out, resume=k > 0)
        if k == 0:
            delay = _first_kill(out, proc, rng, timeline, draw, timeout)
        else:
            delay = rng.uniform(0, total_s)
        if _kill_at(proc, delay):
            landed.append(_where(out))
        else:
            landed.append("after the end (not killed)")
    t0 = time.perf_counter()
    proc = _start(out, resume=True)
    try:
        _, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err, rc = b"", b"timed out", -9
    record: dict[str, Any] = {"trial": index, "killed_at": landed, "resume_rc": rc, "resume_s": round(time.perf_counter() - t0, 1)}
    try:
        finished = json.loads((out / "state.json").read_text())["phase"] == "finished"
    except (OSError, ValueError, KeyError):
        finished = False
    record["resumed"] = rc == 0 and finished
    if not record["resumed"]:
        record["error"] = err.decode(errors="replace")[-600:]
        return record
    rows, ref_rows = _rows(out), _rows(ref)
    keys = [(r["phase"], r["step"]) for r in rows]
    record["duplicate_rows"] = len(keys) - len(set(keys))
    record["metrics_equal"] = rows == ref_rows
    record["weights_equal"] = _same_weights(_weights(out), _weights(ref))
    return record


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--kills", type=int, default=1, help="SIGKILLs per trial before the final resume")
    p.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    p.add_argument("--draw", choices=("phases", "uniform"), default="phases",
                   help="first kill: uniform inside a uniformly chosen interval between two commits (default), or uniform over the run")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds any one process may take")
    p.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="bench_resume_"))
    try:
        ref, run_s, total_s, timeline = reference(root, args.timeout)
        if not args.json:
            print(f"reference run: {run_s:.1f} s from its first commit to finished ({total_s:.1f} s in all); "
                  f"{args.trials} trials x {args.kills} kill(s)")
            print("  commits: " + ", ".join(f"{name} {t:.1f} s" for t, name in timeline))
        records = []
        for i in range(args.trials):
            rec = trial(root, i, ref, timeline, args.draw, total_s, args.kills, rng, args.timeout)
            records.append(rec)
            if not args.json:
                verdict = ("exact" if rec.get("metrics_equal") and rec.get("weights_equal") and not rec.get("duplicate_rows")
                           else "resumed, differs" if rec["resumed"] else f"FAILED rc={rec['resume_rc']}")
                print(f"  trial {i:3d}: killed at {', '.join(rec['killed_at'])}: {verdict} (resume {rec['resume_s']} s)")
                if not rec["resumed"]:
                    print("    " + rec["error"].strip().replace("\n", "\n    "))
        n = len(records)
        summary = {
            "trials": n,
            "kills_per_trial": args.kills,
            "draw": args.draw,
            "kills": sum(1 for r in records for w in r["killed_at"] if not w.startswith("after the end")),
            "resumed": sum(r["resumed"] for r in records),
            "metrics_equal": sum(bool(r.get("metrics_equal")) for r in records),
            "weights_equal": sum(bool(r.get("weights_equal")) for r in records),
            "duplicate_rows": sum(r.get("duplicate_rows", 0) for r in records),
            "kill_points": dict(Counter(w for r in records for w in r["killed_at"]).most_common()),
            "reference_train_s": round(run_s, 1),
            "reference_commits": [[round(t, 2), name] for t, name in timeline],
            "mean_resume_s": round(sum(r["resume_s"] for r in records) / max(n, 1), 1),
        }
        if args.json:
            print(json.dumps({"summary": summary, "trials": records}, indent=1))
        else:
            print(f"resume succeeded {summary['resumed']}/{n}; metrics identical to the uninterrupted run {summary['metrics_equal']}/{n}; "
                  f"final weights identical {summary['weights_equal']}/{n}; duplicated rows {summary['duplicate_rows']}")
            print("where the kills landed (committed phase at the kill):")
            for where, count in summary["kill_points"].items():
                print(f"  {count:3d}  {where}")
    finally:
        if args.keep:
            print(f"run directories kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
