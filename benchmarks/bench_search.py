"""Benchmark turngym/SearchQA-v0: corpus build, BM25 index, search latency, oracle vs. naive RAG.

Goals (issue 6): index 100k passages in under 30 s; search p50 under 5 ms.

    python benchmarks/bench_search.py                 # 10k and 100k passages
    python benchmarks/bench_search.py --sizes 10000 --json
    python benchmarks/bench_search.py --dense 2000    # also time the MiniLM retriever on 2k passages

Each size builds a fresh knowledge base (the in-process cache is cleared first, so build
times are cold). Latency is measured per query, single-threaded, on the oracle's hop queries
and on full questions (longer, more terms).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from typing import Any

import numpy as np

import turngym
from turngym.envs.search.baselines import naive_action
from turngym.envs.search.kb import build_kb
from turngym.envs.search.retrieval import BM25Retriever
from turngym.envs.search.tasks import generate_tasks

PASSAGES_PER_ENTITY = 2.3  # measured: ~2.3 passages per entity


def _percentiles(samples: list[float]) -> dict[str, float]:
    arr = np.asarray(samples) * 1000.0
    return {"p50_ms": float(np.percentile(arr, 50)), "p95_ms": float(np.percentile(arr, 95)),
            "p99_ms": float(np.percentile(arr, 99))}


def bench_size(target_passages: int, n_queries: int, seed: int) -> dict[str, Any]:
    n_entities = max(40, round(target_passages / PASSAGES_PER_ENTITY))
    build_kb.cache_clear()
    t0 = time.perf_counter()
    kb = build_kb(seed, n_entities)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    retriever = BM25Retriever(kb.passages)
    index_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    tasks = generate_tasks(kb, max(1, n_queries // 3), seed=seed)
    gen_ms = (time.perf_counter() - t0) * 1000 / len(tasks)
    hop_queries = [q for t in tasks for q in t.hop_queries][:n_queries]
    questions = [t.prompt for t in tasks]
    retriever.search(hop_queries[0], 3)  # warm-up
    lat_hop, lat_q = [], []
    for q in hop_queries:
        t0 = time.perf_counter()
        retriever.search(q, 3)
        lat_hop.append(time.perf_counter() - t0)
    for q in questions:
        t0 = time.perf_counter()
        retriever.search(q, 3)
        lat_q.append(time.perf_counter() - t0)
    return {
        "passages": len(kb.passages),
        "entities": kb.size,
        "kb_build_s": build_s,
        "bm25_index_s": index_s,
        "task_gen_ms": gen_ms,
        "hop_query": _percentiles(lat_hop),
        "question_query": _percentiles(lat_q),
        "queries": len(lat_hop) + len(lat_q),
    }


def bench_policies(n_tasks: int, kb_entities: int, seed: int) -> dict[str, Any]:
    """Oracle and retrieve-once baseline success rate by hop count, plus env step latency."""
    env = turngym.make("turngym/SearchQA-v0", kb_entities=kb_entities)
    tasks = generate_tasks(env.kb, n_tasks, seed=seed)
    stats: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    step_times = []
    for task in tasks:
        s = stats[task.hops]
        s["n"] += 1
        env.reset(options={"task": task})
        while True:
            action = env.oracle_action()
            t0 = time.perf_counter()
            *_, term, trunc, info = env.step(action)
            step_times.append(time.perf_counter() - t0)
            if term or trunc:
                break
        s["oracle"] += info["outcome"]["success"]
        s["oracle_support_recall"] += info["outcome"]["support_recall"]
        obs, _ = env.reset(options={"task": task})
        messages = [{"role": "user", "content": obs}]
        for _ in range(2):
            action = naive_action(messages)
            obs, _, term, trunc, info = env.step(action)
            messages += [{"role": "assistant", "content": action}, {"role": "user", "content": obs}]
        s["naive"] += info["outcome"]["success"]
        s["naive_f1"] += info["outcome"]["f1"]
        s[f"n_{task.kind}"] += 1
        s[f"naive_{task.kind}"] += info["outcome"]["success"]
    by_hops = {}
    for h, s in sorted(stats.items()):
        row = {k: v / s["n"] for k, v in s.items() if k != "n" and not k.startswith("n_")}
        for kind in ("bridge", "comparison"):  # per-kind rates over that kind's own count
            row[f"naive_{kind}"] = s[f"naive_{kind}"] / s[f"n_{kind}"] if s[f"n_{kind}"] else float("nan")
            row[f"n_{kind}"] = s[f"n_{kind}"]
        row["n"] = s["n"]
        by_hops[h] = row
    return {"kb_entities": kb_entities, "tasks": n_tasks, "by_hops": by_hops, "env_step": _percentiles(step_times)}


def bench_dense(n_passages: int, seed: int) -> dict[str, Any]:
    from turngym.envs.search.retrieval import DenseRetriever

    kb = build_kb(seed, max(40, round(n_passages / PASSAGES_PER_ENTITY)))
    t0 = time.perf_counter()
    r = DenseRetriever(kb.passages)
    index_s = time.perf_counter() - t0
    queries = [t.prompt for t in generate_tasks(kb, 100, seed=seed)]
    lat = []
    for q in queries:
        t0 = time.perf_counter()
        r.search(q, 3)
        lat.append(time.perf_counter() - t0)
    return {"passages": len(kb.passages), "encode_index_s": index_s, "search": _percentiles(lat)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="corpus sizes in passages")
    ap.add_argument("--queries", type=int, default=1000, help="hop queries timed per size")
    ap.add_argument("--tasks", type=int, default=500, help="tasks for the oracle / naive-baseline table")
    ap.add_argument("--dense", type=int, default=0, help="also time the MiniLM retriever on this many passages")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = ap.parse_args()

    result: dict[str, Any] = {"sizes": [bench_size(n, args.queries, args.seed) for n in args.sizes]}
    result["policies"] = bench_policies(args.tasks, 1200, args.seed)
    if args.dense:
        result["dense"] = bench_dense(args.dense, args.seed)
    if args.json:
        print(json.dumps(result, indent=2))
        return

    print("## Corpus build, BM25 index, search latency (single thread, top-k 3)\n")
    print("| passages | entities | KB build s | BM25 index s | hop query p50 / p95 ms | question p50 / p95 ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in result["sizes"]:
        hq, qq = r["hop_query"], r["question_query"]
        print(f"| {r['passages']:,} | {r['entities']:,} | {r['kb_build_s']:.2f} | {r['bm25_index_s']:.2f} | "
              f"{hq['p50_ms']:.3f} / {hq['p95_ms']:.3f} | {qq['p50_ms']:.3f} / {qq['p95_ms']:.3f} |")
    p = result["policies"]
    print(f"\n## Success by hop count ({p['tasks']} tasks, {p['kb_entities']} entities, BM25 top-3)\n")
    print("| hops | tasks (bridge/comparison) | oracle EM | oracle support recall | search-once EM | "
          "search-once F1 | search-once EM bridge / comparison |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for h, s in p["by_hops"].items():
        print(f"| {h} | {int(s['n'])} ({int(s['n_bridge'])}/{int(s['n_comparison'])}) | {s['oracle']:.3f} | "
              f"{s['oracle_support_recall']:.3f} | {s['naive']:.3f} | {s['naive_f1']:.3f} | "
              f"{s['naive_bridge']:.3f} / {s['naive_comparison']:.3f} |")
    es = p["env_step"]
    print(f"\nenv.step (oracle actions): p50 {es['p50_ms']:.3f} ms, p95 {es['p95_ms']:.3f} ms")
    if "dense" in result:
        d = result["dense"]
        print(f"\nDense MiniLM on {d['passages']:,} passages: encode+index {d['encode_index_s']:.1f} s, "
              f"search p50 {d['search']['p50_ms']:.1f} ms, p95 {d['search']['p95_ms']:.1f} ms")


if __name__ == "__main__":
    main()
