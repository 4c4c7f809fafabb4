"""Code-v0's solution process: how long a fresh one takes to start.

    python benchmarks/bench_candidate_start.py            # p50/p90 over 40 starts
    python benchmarks/bench_candidate_start.py -n 100 --json

The grader replaces a zygote a solution killed with a fresh interpreter (``python -I -S -B -c``
with the candidate side's source and the toolkit modules it ships), so its start is on the
critical path of the next test. Measured: from ``fork+exec`` to the zygote's ready byte on its
control socket (fd 3). Compare trees by running this file with each one first on PYTHONPATH.

Figures: ``start_ms`` p50/p90/min over n starts; ``source_chars``, the size of the shipped source.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time


def candidate_source() -> str:
    from turngym.envs.code import runner

    if hasattr(runner, "_candidate_source"):
        return runner._candidate_source()
    return runner._with_wire(runner._module_source("candidate.py") + "\nmain()\n")  # before the toolkit


def one_start(source: str) -> float:
    mine, theirs = socket.socketpair()
    t0 = time.perf_counter()
    pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-B", "-c", source], os.environ,
                         file_actions=[(os.POSIX_SPAWN_DUP2, theirs.fileno(), 3)])
    theirs.close()
    ready = mine.recv(1)
    took = time.perf_counter() - t0
    mine.close()
    os.waitpid(pid, 0)
    if ready != b"R":
        raise SystemExit("the candidate did not start")
    return took * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=40)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    source = candidate_source()
    one_start(source)  # warm the page cache
    times = sorted(one_start(source) for _ in range(args.n))
    out = {"start_ms_p50": round(statistics.median(times), 2), "start_ms_p90": round(times[int(0.9 * len(times)) - 1], 2),
           "start_ms_min": round(times[0], 2), "source_chars": len(source), "n": args.n,
           "load": round(os.getloadavg()[0], 2)}
    print(json.dumps(out) if args.json else "\n".join(f"{k:>16}  {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
