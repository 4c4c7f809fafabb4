"""Page times of ``turngym view`` on a large synthetic episodes file (default 100,000 episodes).

Usage:
    python benchmarks/bench_viewer.py                     # 100k episodes, 4 turns each
    python benchmarks/bench_viewer.py --episodes 20000 --json

Times, through Starlette's TestClient (the app's own work, no network): building the byte-offset
index once (first request), then the episodes page unsorted, sorted by return, filtered by text,
a deep page, an episode page (its group's advantages computed live) and a group page.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path


def synth(path: Path, n: int, turns: int, group: int) -> None:
    rng = random.Random(0)
    with open(path, "w") as fh:
        for i in range(n):
            g = i // group
            ts = []
            for t in range(turns):
                ok = rng.random() > 0.2
                ts.append({"index": t, "action": f"<calc>{rng.randint(1, 99)}*{rng.randint(1, 99)}</calc>", "observation": "= 42 " * 20,
                           "reward": round(rng.random() - 0.3, 3), "terminated": t == turns - 1, "truncated": False,
                           "signals": {"progress": rng.random(), "tool_ok": float(ok)}, "state_key": f"s{g}-{t}-{rng.randint(0, 2)}",
                           "prev_state_key": f"s{g}-{t - 1}-{rng.randint(0, 2)}" if t else f"s{g}", "action_valid": ok,
                           "invalid_reason": None if ok else "no action found"})
            ep = {"episode_id": f"g{g}/{i % group}", "env_id": "turngym/Math-v0", "task_id": f"math/{g}", "seed": g,
                  "initial_observation": "What is 6*7?", "group": f"g{g}", "turns": ts, "outcome": {"success": rng.random() > 0.5}}
            fh.write(json.dumps(ep) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="best of N per page")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from starlette.testclient import TestClient

    from turngym.viewer import create_app

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "episodes.jsonl"
        synth(path, args.episodes, args.turns, args.group)
        client = TestClient(create_app(path))
        t0 = time.perf_counter()
        assert client.get("/").status_code == 200
        out: dict[str, float | int] = {"episodes": args.episodes, "file_mb": round(path.stat().st_size / 2**20, 1),
                                       "first_page_with_index_s": round(time.perf_counter() - t0, 3)}
        last = args.episodes // 2
        pages = {"episodes_page_s": "/", "sorted_by_return_s": "/?sort=return&desc=1", "filtered_text_s": "/?q=math/123",
                 "deep_page_s": f"/?page={args.episodes // 50 - 1}", "episode_page_s": f"/episode?src=0&row={last}&est=gigpo",
                 "group_page_s": f"/group?src=0&g=g{last // args.group}&a=grpo&b=gigpo"}
        for name, url in pages.items():
            best = float("inf")
            for _ in range(args.repeat):
                t = time.perf_counter()
                r = client.get(url)
                best = min(best, time.perf_counter() - t)
                assert r.status_code == 200, (url, r.status_code)
            out[name] = round(best, 4)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:<28} {v}")


if __name__ == "__main__":
    main()
