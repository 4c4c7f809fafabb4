"""The capture proxy's memory under hostile and heavy outcomes: RSS growth, measured.

Two phases against ``turngym proxy`` on the tiny model (the real app over HTTP, on a thread):

* **attack** — the issue-36 replay: six outcomes each carrying an 8 MB ``info`` (before the fix
  they were accepted, kept with 10,000 finished episodes, and grew the process by ~70 MB). Now each
  is refused (400 ``info_too_large``) and the episode stays open.
* **flood** — ``--episodes`` honest episodes, each reporting an ``info`` just under the 64 KiB cap,
  through a proxy whose in-memory listing is capped at ``--keep-mib`` MiB (``keep_finished_bytes``),
  then the same through one whose cap is effectively unbounded (what the old count-only cap did
  for this many episodes). Reported: RSS growth of each, the JSON kept in memory, records evicted.

RSS is the process's resident set (``/proc/self/statm``); freed memory stays with the allocator
(glibc keeps an arena per thread, and ``generate`` runs on worker threads), so RSS growth is an upper
bound on what is still held. ``held_mib`` is what Python objects allocated during the flood still
hold at its end (``tracemalloc``): the figure the cap bounds.

    python benchmarks/bench_proxy_memory.py                  # 600 episodes, 8 MiB cap
    python benchmarks/bench_proxy_memory.py --episodes 2000 --keep-mib 16 --json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import httpx  # noqa: E402

from turngym.proxy import episode_headers  # noqa: E402
from turngym.proxy.guard import derive_key  # noqa: E402
from turngym.proxy.serve import ProxyThread, build_proxy  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _open(http: httpx.Client, name: str) -> None:
    r = http.post("/v1/chat/completions", headers=episode_headers(name),
                  json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    r.raise_for_status()


def _report(http: httpx.Client, name: str, info: dict) -> httpx.Response:
    return http.post(f"/turngym/episodes/{name}/outcome", headers={"X-Turngym-Episode-Key": derive_key(name)},
                     json={"reward": 1.0, "info": info})


def attack(policy_model: str, out: Path) -> dict:
    proxy = build_proxy(policy_model, out=out, max_tokens=4, seed=0, device="cpu")
    with ProxyThread(proxy) as server, httpx.Client(base_url=server.url, timeout=120) as http:
        _open(http, "warm/0")
        _report(http, "warm/0", {})
        gc.collect()
        before = rss_mib()
        codes = []
        for i in range(6):
            _open(http, f"attack/{i}")
            codes.append(_report(http, f"attack/{i}", {"blob": "x" * (8 << 20)}).status_code)
        gc.collect()
        return {"refused": sum(c == 400 for c in codes), "of": len(codes), "rss_growth_mib": round(rss_mib() - before, 1),
                "kept_bytes": proxy.finished.bytes}


def flood(policy_model: str, out: Path, episodes: int, keep_bytes: int) -> dict:
    proxy = build_proxy(policy_model, out=out, max_tokens=4, seed=0, device="cpu", keep_finished_bytes=keep_bytes)
    info = {"blob": "x" * (60 << 10)}
    with ProxyThread(proxy) as server, httpx.Client(base_url=server.url, timeout=120) as http:
        _open(http, "warm/0")
        _report(http, "warm/0", {})
        gc.collect()
        tracemalloc.start()
        before, t0 = rss_mib(), time.perf_counter()
        for i in range(episodes):
            _open(http, f"flood/{i}")
            assert _report(http, f"flood/{i}", info).status_code == 200
        wall = time.perf_counter() - t0
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return {"episodes": episodes, "rss_growth_mib": round(rss_mib() - before, 1), "held_mib": round(held / 2**20, 1),
                "kept_mib": round(proxy.finished.bytes / 2**20, 1), "kept_records": len(proxy.finished),
                "evicted": proxy.finished.evicted, "file_mib": round((out / "episodes.jsonl").stat().st_size / 2**20, 1),
                "s_per_episode": round(wall / episodes, 4)}


def _phase(args: argparse.Namespace, phase: str) -> dict:
    """One phase in a fresh process: RSS a phase frees stays with the allocator and would hide the next one's growth."""
    cmd = [sys.executable, __file__, "--phase", phase, "--model", args.model, "--episodes", str(args.episodes),
           "--keep-mib", str(args.keep_mib)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--episodes", type=int, default=600)
    ap.add_argument("--keep-mib", type=float, default=8.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--phase", choices=["attack", "capped", "uncapped"], default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase is not None:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            if args.phase == "attack":
                print(json.dumps(attack(args.model, out)))
            else:
                keep = int(args.keep_mib * 2**20) if args.phase == "capped" else 1 << 40
                print(json.dumps(flood(args.model, out, args.episodes, keep)))
        return
    result = {"attack_8mb_info_x6": _phase(args, "attack"), "flood_capped": _phase(args, "capped"),
              "flood_uncapped": _phase(args, "uncapped"), "keep_mib": args.keep_mib}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    a, c, u = result["attack_8mb_info_x6"], result["flood_capped"], result["flood_uncapped"]
    print(f"attack: {a['refused']}/{a['of']} outcomes with 8 MB info refused; RSS +{a['rss_growth_mib']} MiB")
    print(f"flood {c['episodes']} x 60 KiB info, cap {args.keep_mib} MiB: RSS +{c['rss_growth_mib']} MiB, held "
          f"{c['held_mib']} MiB, kept "
          f"{c['kept_mib']} MiB ({c['kept_records']} records, {c['evicted']} evicted), file {c['file_mib']} MiB")
    print(f"flood without a byte cap: RSS +{u['rss_growth_mib']} MiB, held {u['held_mib']} MiB, kept {u['kept_mib']} MiB "
          f"({u['kept_records']} records)")


if __name__ == "__main__":
    main()
