"""The study report: every number is read from the metrics files a study wrote.

``OUT/runs/<claim>/<run>/metrics.jsonl`` (one line per RL step, from the trainer),
``OUT/runs/<claim>/<run>/study.json`` (pool and held-out evaluations), ``OUT/variance.json``
(claim 2), ``OUT/wall.json`` and an optional ``OUT/note.md`` (shown at the top) → ``OUT/report.md``, ``OUT/summary.json`` (the aggregated
numbers of every table) and ``OUT/*.png`` (learning curves: mean over seeds, band = ± std).
Re-running :func:`write_report` on the same directory reproduces the report exactly.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["load_runs", "write_report"]


def load_runs(out: Path) -> list[dict[str, Any]]:
    """Every finished run (a ``study.json``) with its RL-step records attached as ``curve``."""
    runs = []
    for path in sorted(Path(out).glob("runs/*/*/study.json")):
        rec = json.loads(path.read_text())
        lines = (path.parent / "metrics.jsonl").read_text().splitlines()
        rec["curve"] = [r for r in map(json.loads, lines) if r.get("phase") == "rl"]
        runs.append(rec)
    return runs


def _ms(values: list[float]) -> tuple[float, float, int]:
    v = np.asarray([x for x in values if x is not None and not math.isnan(x)], dtype=float)
    if v.size == 0:
        return float("nan"), float("nan"), 0
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0, int(v.size)


def _fmt(m: float, s: float, n: int, pct: bool = True) -> str:
    if n == 0:
        return "—"
    if pct:
        return f"{100 * m:.1f} ± {100 * s:.1f}" if n > 1 else f"{100 * m:.1f}"
    return f"{m:.3f} ± {s:.3f}" if n > 1 else f"{m:.3f}"


def _env_steps(curve: list[dict[str, Any]]) -> np.ndarray:
    return np.cumsum([r["episodes"] * r["mean_turns"] for r in curve])


def _late(curve: list[dict[str, Any]], key: str) -> float:
    """Mean of ``key`` over the second half of the RL steps."""
    vals = [r[key] for r in curve[len(curve) // 2 :] if key in r]
    return float(np.mean(vals)) if vals else float("nan")


def _plot(groups: dict[str, list[dict[str, Any]]], key: str, path: Path, title: str, ylabel: str) -> str | None:
    """Mean over seeds of ``key`` per RL step against env steps, band = ± std over seeds."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is in the train extra
        return None
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for label, runs in groups.items():
        curves = [r["curve"] for r in runs if r["curve"]]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        x = np.mean([_env_steps(c)[:n] for c in curves], axis=0)
        y = np.array([[rec.get(key, np.nan) for rec in c[:n]] for c in curves], dtype=float)
        m, s = np.nanmean(y, axis=0), (np.nanstd(y, axis=0, ddof=1) if len(curves) > 1 else np.zeros(n))
        (line,) = ax.plot(x, m, marker="o", ms=3, label=f"{label} (n={len(curves)})")
        ax.fill_between(x, m - s, m + s, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("env steps (training rollouts)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def _verdict_word(diff: float, se: float, n: int) -> str:
    """The verdict on a difference of arms: its sign against 2 standard errors."""
    if math.isnan(diff):
        return "not run"
    if n < 2:
        return "inconclusive"
    if diff > 2 * se and diff > 0:
        return "reproduced"
    if diff < -2 * se:
        return "contradicted"
    return "not reproduced at this scale"


_VERDICT_DETAIL = {
    "reproduced": "> 2 standard errors = {se2:.1f}",
    "contradicted": "beyond 2 standard errors = {se2:.1f}",
    "not reproduced at this scale": "within 2 standard errors = {se2:.1f}",
}


def _verdict(diff: float, se: float, n: int, *, what: str) -> str:
    word = _verdict_word(diff, se, n)
    if word == "not run":
        return "**not run**"
    if word == "inconclusive":
        return f"**inconclusive** (one seed: {what} {100 * diff:+.1f} points, no spread to compare against)"
    return f"**{word}** ({what} {100 * diff:+.1f} points, {_VERDICT_DETAIL[word].format(se2=100 * 2 * se)})"


def _glance(d: tuple[float, float, int], unit: str) -> str:
    """``**word** (+x.y unit, 2 s.e. z)``: one cell of the summary table."""
    return f"**{_verdict_word(*d)}** ({100 * d[0]:+.1f} {unit}, 2 s.e. {100 * 2 * d[1]:.1f})"


def _diff(a: list[float], b: list[float]) -> tuple[float, float, int]:
    ma, sa, na = _ms(a)
    mb, sb, nb = _ms(b)
    if not na or not nb:
        return float("nan"), float("nan"), 0
    return ma - mb, math.sqrt(sa**2 / na + sb**2 / nb), min(na, nb)


def _arm_diff(a: list[dict[str, Any]], b: list[dict[str, Any]], value: Callable[[dict[str, Any]], float | None]) -> tuple[float, float, int]:
    """Mean difference ``value(a) − value(b)`` and its standard error, **paired by seed**.

    The arms of a seed start from the same warm start and see the same task draws, so the
    per-seed difference cancels the (large) seed-to-seed spread of the warm start; unpaired
    when the two arms do not hold the same seeds.
    """
    va = {r["seed"]: value(r) for r in a}
    vb = {r["seed"]: value(r) for r in b}
    va = {k: v for k, v in va.items() if v is not None and not math.isnan(v)}
    vb = {k: v for k, v in vb.items() if v is not None and not math.isnan(v)}
    if set(va) != set(vb) or len(va) < 2:
        return _diff(list(va.values()), list(vb.values()))
    d = np.array([va[k] - vb[k] for k in sorted(va)])
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)), int(d.size)


def _setup_table(out: Path, runs: list[dict[str, Any]]) -> list[str]:
    """One row per env: its configuration, RL iterations, warm-start NLL and success."""
    lines = ["## Setup", "", "| env | env arguments | imitation steps × batch | micro-batch | RL iterations | imitation NLL (end) | warm start success (pool) |",
             "|---|---|---|---|---|---|---|"]
    for env in sorted({r["env"] for r in runs}):
        rs = [r for r in runs if r["env"] == env]
        tc = rs[0].get("train_config", {})
        nll, warm_cfg = [], {}
        for seed in sorted({r["seed"] for r in rs}):
            wdir = out / "warm" / f"{env}-s{seed}"
            if (wdir / "metrics.jsonl").exists():
                recs = [json.loads(x) for x in (wdir / "metrics.jsonl").read_text().splitlines()]
                nll += [recs[-1]["nll"]] if recs else []
            if (wdir / "config.json").exists():
                warm_cfg = json.loads((wdir / "config.json").read_text())
        imitation = f"{warm_cfg['warmup_steps']} × {warm_cfg['warmup_batch_size']}" if warm_cfg else "—"
        lines.append(f"| {env} (`{rs[0]['env_id']}`) | `{json.dumps(tc.get('env_kwargs', {}))}` | {imitation} | {tc.get('micro_batch_size', '—')} | "
                     f"{sorted({r['steps'] for r in rs})[0]} | {_fmt(*_ms(nll), pct=False)} | {_fmt(*_ms(list({r['seed']: r['success_before'] for r in rs}.values())))} |")
    return lines + [""]


def _success_stats(rs: list[dict[str, Any]]) -> tuple[tuple[float, float, int], ...]:
    """(warm start, after RL on the pool, after RL held out): mean, std, n over the runs."""
    return (_ms([r["success_before"] for r in rs]), _ms([r["pool_eval"]["success"] for r in rs]),
            _ms([r["heldout_eval"]["success"] for r in rs]))


def _results_table(runs: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    rows, lines = [], [
        "| group | env | arm | seeds | RL steps | warm start (pool) | after RL (pool) | after RL (held out) | held-out split |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by[r["name"].split("/")[0], r["env"], r["arm"]].append(r)
    for (claim, env, arm), rs in sorted(by.items()):
        before, after, held = _success_stats(rs)
        rows.append({"claim": claim, "env": env, "arm": arm, "seeds": len(rs), "before": before, "after_pool": after, "after_heldout": held})
        split = rs[0]["heldout_env_id"] + (" (unseen split)" if rs[0]["heldout_env_id"] != rs[0]["env_id"] else " (fresh task seeds)")
        lines.append(f"| {claim} | {env} | {arm} | {len(rs)} | {rs[0]['steps']} | {_fmt(*before)} | {_fmt(*after)} | {_fmt(*held)} | {split} |")
    return lines, rows


def write_report(out: Path, *, command: str, note: str = "") -> Path:
    """Aggregate ``out``'s metrics files into ``report.md``, ``summary.json`` and PNGs."""
    out = Path(out)
    if not note and (out / "note.md").exists():  # what the study's author must say about its files (runs taken from another study...)
        note = (out / "note.md").read_text().strip()
    cfg = json.loads((out / "study_config.json").read_text()) if (out / "study_config.json").exists() else {}
    runs = load_runs(out)
    wall = json.loads((out / "wall.json").read_text())["seconds"] if (out / "wall.json").exists() else float("nan")
    summary: dict[str, Any] = {"wall_seconds": wall, "runs": len(runs), "claims": {}}
    md: list[str] = ["# Credit-assignment claims in miniature", ""]
    md += [f"Regenerate everything (runs, metrics, this report): `{command}`", ""]
    if note:  # every line of a multi-paragraph note (tables, lists) stays inside the quote
        first, *rest = note.splitlines()
        md += [f"> **Note.** {first}", *[f"> {line}".rstrip() for line in rest], ""]
    model = cfg.get("model", "tiny")
    model_words = "tiny 0.5M-parameter model" if model == "tiny" else f"pretrained `{model}` with LoRA on its last {cfg.get('lora_layers') or 'all'} layers"
    md += [f"Wall time: {wall / 60:.1f} min on this machine (2 shared CPU cores, {model_words}, {cfg.get('threads', 1)} torch thread(s) per run, "
           f"{cfg.get('jobs', 1)} run(s) in parallel). {len(runs)} training runs; budget {cfg.get('budget')} RL env steps per run, "
           f"{cfg.get('seeds')} seed(s)." + (" **Quick mode** (CI smoke test): the numbers are not evidence." if cfg.get("quick") else ""), ""]
    noise = {r.get("train_config", {}).get("demo_noise", 0.3) for r in runs} or {0.3}
    demos = ("clean oracle demonstrations" if noise == {0.0} else
             "noisy oracle demonstrations (" + " / ".join(f"{n:.0%}" for n in sorted(noise)) + " random turns)")
    md += [f"Every (env, seed) has **one** warm start — imitation of {demos}, seeded by "
           "the seed — and every arm of that env and seed starts from it, with the same hyper-parameters "
           f"(groups {cfg.get('groups_per_step')} × {cfg.get('group_size')}, lr {cfg.get('lr')}, task pool {cfg.get('task_pool')}, "
           "the same env-step budget); only the estimator (claim 3: also the process term, claim 4: the shaping guard) differs. "
           "*Pool* = the training task pool (sampled at temperature 1), *held out* = tasks never trained on. "
           "Raw metrics: `runs/<group>/<run>/metrics.jsonl` (per RL step) and `study.json` (evaluations), "
           "`warm/<env>-s<seed>/metrics.jsonl` (imitation NLL), `variance.json`; aggregated numbers: `summary.json`. "
           "Verdicts compare the mean difference between two arms, paired by seed (the arms of a seed share its warm start "
           "and task draws), with 2 standard errors of that difference — a lenient bar with 3 seeds (a two-sided 95% t-test "
           "with 2 degrees of freedom needs 4.3), so read *reproduced* as \"the sign is consistent across seeds\".", ""]
    glance_at = len(md)
    glance: dict[str, str] = {}
    md += _setup_table(out, runs)
    table, rows = _results_table(runs)
    md += ["## Results", "", *table, ""]
    if cfg.get("task_pool") == 0:
        md += ["With `task_pool=0` every training episode draws a fresh task, so the *pool* columns are evaluations on "
               "held-out seeds of the training distribution, not on tasks trained on.", ""]
    summary["results"] = rows
    if model != "tiny":
        md += _pretrained_section(cfg, runs, summary, out)
    md += _movement_section(runs, summary)

    # ---- claim 1
    md += ["## Claim 1 — GiGPO beats GRPO on household and shop", "",
           "Paper (GiGPO, 1.5B): +13.9 points on ALFWorld, +10.6 on WebShop.",
           f"Run here on: {', '.join(cfg.get('envs', [])) or 'nothing'} (the `--envs` of this study), algorithms {', '.join(cfg.get('algos', []))}.", ""]
    c1_envs, c1_algos = cfg.get("envs", []), cfg.get("algos", [])
    c1 = [r for r in runs if r["name"].startswith("train/") and r["env"] in c1_envs and r["arm"] in c1_algos]
    c1 = c1 if "gigpo_vs_grpo" in cfg.get("claims", []) else []
    if not c1:
        md += ["Not run.", ""]
    for env in sorted({r["env"] for r in c1}):
        env_runs = [r for r in c1 if r["env"] == env]
        by_arm = {a: [r for r in env_runs if r["arm"] == a] for a in sorted({r["arm"] for r in env_runs})}
        png = _plot(by_arm, "success", out / f"claim1_{env}.png", f"{env}: training success", "success rate")
        g, b = by_arm.get("gigpo", []), by_arm.get("grpo", [])
        d_pool = _arm_diff(g, b, lambda r: r["pool_eval"]["success"])
        d_held = _arm_diff(g, b, lambda r: r["heldout_eval"]["success"])
        summary["claims"][f"gigpo_vs_grpo/{env}"] = {"diff_pool": d_pool, "diff_heldout": d_held}
        md += [f"**{env}** — pool: {_verdict(*d_pool, what='GiGPO − GRPO')}; held out: {_verdict(*d_held, what='GiGPO − GRPO')}.", ""]
        glance[f"1. GiGPO > GRPO ({env})"] = _glance(d_pool, "points of pool success")
        md += ["| arm | success: warm start → after RL (pool) | held out | turns/episode (first RL step → 2nd half) | invalid actions (first → 2nd half) |",
               "|---|---|---|---|---|"]
        for arm, rs in by_arm.items():
            first = {k: _ms([r["curve"][0].get(k, math.nan) for r in rs if r["curve"]]) for k in ("mean_turns", "invalid_rate")}
            late = {k: _ms([_late(r["curve"], k) for r in rs]) for k in ("mean_turns", "invalid_rate")}
            before, after, held = _success_stats(rs)
            md.append(f"| {arm} | {_fmt(*before)} → {_fmt(*after)} | {_fmt(*held)} "
                      f"| {_fmt(*first['mean_turns'], pct=False)} → {_fmt(*late['mean_turns'], pct=False)} "
                      f"| {_fmt(*first['invalid_rate'])}% → {_fmt(*late['invalid_rate'])}% |")
        md.append("")
        worse = [a for a, rs in by_arm.items() if _ms([r["pool_eval"]["success"] for r in rs])[0] < _ms([r["success_before"] for r in rs])[0]]
        limit = env_runs[0].get("train_config", {}).get("env_kwargs", {}).get("max_turns")
        late_turns = _ms([_late(r["curve"], "mean_turns") for r in env_runs])[0]
        if worse and len(worse) == len(by_arm) and limit and late_turns > 0.95 * limit:
            md += [f"Every arm ends *below* its warm start: the policies cut their invalid actions and ran episodes to the turn limit "
                   f"({late_turns:.2f} of {limit} turns) instead of finishing the task. With success near 0, the invalid-action penalty "
                   "(−0.1 a turn) is the strongest signal in the return, and avoiding it is what RL learned — a failure of this "
                   "scale (warm start, model size), not evidence about the estimators.", ""]
        if png:
            md += [f"![{env}]({png})", ""]

    # ---- claim 2
    md += ["## Claim 2 — turn-level and tree baselines reduce advantage variance", ""]
    vpath = out / "variance.json"
    if vpath.exists():
        v = json.loads(vpath.read_text())
        vc = v["config"]
        md += [f"No training: a fixed policy (the Math oracle, a random action with probability {vc['noise']}) on "
               f"`{vc['env_id']}` {vc['env_kwargs']}; {vc['tasks']} tasks × {vc['repeats']} independent rollouts per shape; "
               f"ground truth A*(s,a) = Q(s,a) − V(s) from {vc['mc']} Monte Carlo rollouts per value ({v['mc_states']} states). "
               "Each estimator is fitted to A* by one least-squares scale c; *variance* = within-(s,a) variance of c·Â across "
               "rollouts (the estimator's noise on the same state and action), *rel. MSE* = mean (c·Â − A*)² / Var(A*), "
               "*corr* = Pearson correlation of Â with A*. Lower variance and rel. MSE, higher corr are better.", ""]
        md += ["| rollout shape | estimator | variance | rel. MSE | corr | zero-adv. rows |", "|---|---|---|---|---|---|"]
        for shape, d in v["shapes"].items():
            for name, e in d["estimators"].items():
                md.append(f"| {shape} {tuple(d['branching'])}, {d['rows']} rows | {name} | {e['variance']:.4f} | {e['rel_mse']:.3f} | {e['corr']:.3f} | {100 * e['zero_frac']:.0f}% |")
        md.append("")
        tree_shape = v["shapes"].get("tree", {}).get("estimators", {})
        grp = tree_shape.get("grpo")
        verdicts = []
        for name in ("turn_grpo", "tree", "gigpo", "gae_grouped"):
            e = tree_shape.get(name)
            if e and grp:
                lower_var = e["variance"] < grp["variance"]
                better = e["rel_mse"] < grp["rel_mse"]
                ratio = grp["variance"] / e["variance"] if e["variance"] > 0 else float("inf")
                mostly_zero = e["zero_frac"] > 0.5
                verdicts.append(f"`{name}` vs `grpo` on the same tree rollouts: variance {e['variance']:.4f} vs {grp['variance']:.4f} "
                                f"(×{ratio:.2f} {'lower' if lower_var else 'not lower'}), rel. MSE {e['rel_mse']:.3f} vs {grp['rel_mse']:.3f} "
                                f"({'closer to the truth' if better else 'not closer'}), corr {e['corr']:.3f} vs {grp['corr']:.3f}"
                                + (f" — the low variance is mostly *silence*: {100 * e['zero_frac']:.0f}% of its rows are exactly 0 "
                                   "(siblings with equal returns, or no siblings), so it tracks A* worse, not better" if mostly_zero and not better else ""))
        for shape, d in v["shapes"].items():
            cv, est = d.get("critic_value"), d["estimators"]
            if cv and "critic_mc" in est and "grpo" in est:
                fit = v.get("critic_fit", {})
                verdicts.append(f"learned critic ({shape} rollouts; a separate tiny trunk fitted for {fit.get('steps')} minibatches on "
                                f"{fit.get('episodes')} other episodes of the policy): its V(s) explains {cv['ev_vs_mc_value']:.2f} of the variance of "
                                f"the Monte Carlo V(s) (mean abs. error {cv['mae_vs_mc_value']:.3f}); `critic_mc` (G − V) rel. MSE "
                                f"{est['critic_mc']['rel_mse']:.3f}, `critic_td` (r + V' − V) {est['critic_td']['rel_mse']:.3f}, "
                                f"vs `grpo` {est['grpo']['rel_mse']:.3f} and `gigpo` {est['gigpo']['rel_mse']:.3f}"
                                + (" — `critic_td` has no within-(s,a) variance at all: this env's transitions are deterministic, so the same "
                                   "(s, a) always reaches the same s' and r + V(s') − V(s) carries no sampling noise; its error is the critic's bias"
                                   if est["critic_td"]["variance"] < 1e-12 else ""))
        T = v["shapes"].get("tree", {}).get("mean_turns", float("nan"))
        verdicts.append(f"SLATE's bound is a variance reduction of up to ×T, T ≈ {T:.1f} turns here; the table shows how much of it appears at this scale.")
        summary["claims"]["variance"] = v["shapes"]
        wins = [n for n in ("turn_grpo", "tree") if n in tree_shape and grp and tree_shape[n]["variance"] < grp["variance"] and tree_shape[n]["rel_mse"] < grp["rel_mse"]]
        head = (f"**partly reproduced**: {', '.join('`' + w + '`' for w in wins)} has both lower variance and lower error than `grpo` on the same states, "
                f"by a factor far below ×T" if wins else "**not reproduced**: no turn-level or tree baseline has both lower variance and lower error than `grpo`")
        summary["claims"]["variance_verdict"] = {"both_better_than_grpo": wins}
        glance["2. turn/tree baselines reduce variance"] = head.split(":")[0] + (f" ({', '.join(wins)} only)" if wins else "")
        grp_est = v["shapes"].get("group", {}).get("estimators", {})
        if "critic_td" in grp_est and "grpo" in grp_est:
            best = min(("grpo", "gigpo", "gae_grouped"), key=lambda n: grp_est[n]["rel_mse"] if n in grp_est else math.inf)
            glance["2b. a learned critic's GAE advantages vs group baselines (group rollouts)"] = (
                f"rel. MSE to the truth: `critic_td` {grp_est['critic_td']['rel_mse']:.3f}, `critic_mc` {grp_est['critic_mc']['rel_mse']:.3f}, "
                f"best group baseline (`{best}`) {grp_est[best]['rel_mse']:.3f}")
        md += [f"Verdict: {head}. Details (tree rollouts, where the turn-level and tree baselines have siblings to compare):", ""]
        md += [f"- {x}" for x in verdicts]
        md.append("")
    else:
        md += ["Not run.", ""]

    # ---- claim 3
    md += ["## Claim 3 — PAPO keeps a learning signal when groups are all-correct", ""]
    p = [r for r in runs if r["claim"] == "papo" and r["arm"] == "papo_outcome"]
    o = [r for r in runs if r["claim"] == "papo" and r["arm"] == "grpo_outcome"]
    if p and o:
        zp, zo = _ms([_late(r["curve"], "zero_adv_frac") for r in p]), _ms([_late(r["curve"], "zero_adv_frac") for r in o])
        d = _arm_diff(p, o, lambda r: r["pool_eval"]["success"])
        dz = _arm_diff(o, p, lambda r: _late(r["curve"], "zero_adv_frac"))
        groups = {"papo (outcome reward + process term)": p, "grpo (outcome only)": o}
        png = _plot(groups, "zero_adv_frac", out / "claim3_zero_adv.png", "math: fraction of zero advantages", "zero-advantage turns")
        png2 = _plot(groups, "success", out / "claim3_success.png", "math: training success", "success rate")
        summary["claims"]["papo"] = {"zero_adv_papo": zp, "zero_adv_grpo": zo, "zero_adv_grpo_minus_papo": dz, "diff_pool": d}
        md += ["Both arms get the outcome reward only (every shaping weight 0); PAPO adds its process term: each turn's shaping "
               "under the env's suggested weights, z-scored among the correct episodes of the group only. *Zero-advantage turns* = "
               "the fraction of turns whose advantage is exactly 0 (no gradient), over the second half of training.", "",
               "| arm | zero-advantage turns (2nd half) | warm start (pool) | after RL (pool) | after RL (held out) |", "|---|---|---|---|---|"]
        for label, rs in groups.items():
            before, after, held = _success_stats(rs)
            md.append(f"| {label} | {_fmt(*_ms([_late(r['curve'], 'zero_adv_frac') for r in rs]))}% | {_fmt(*before)} | {_fmt(*after)} | {_fmt(*held)} |")
        md.append("")
        md += [f"Learning signal: {_verdict(*dz, what='zero-advantage turns, GRPO − PAPO')} — PAPO "
               f"{'keeps' if dz[0] > 0 else 'does NOT keep'} a gradient on the turns where outcome-only GRPO has none. "
               f"Final pool success: {_verdict(*d, what='PAPO − GRPO')}.", ""]
        glance["3. PAPO keeps a signal on all-correct groups"] = (_glance(dz, "points fewer zero-advantage turns")
                                                                  + "; final success: " + _glance(d, "points"))
        if zo[0] < 0.05:
            md += [f"**Caveat — the premise did not arise:** GRPO's advantages were exactly zero on only {100 * zo[0]:.1f}% of turns "
                   "(few all-correct or all-wrong groups at this success rate), so this run cannot test the claim.", ""]
        md += [f"![zero advantages]({png})", "", f"![success]({png2})", ""] if png and png2 else []
    else:
        md += ["Not run.", ""]

    # ---- claim 4
    md += ["## Claim 4 — bounded shaping stops reward farming", ""]
    nv = [r for r in runs if r["claim"] == "farming" and r["arm"] == "naive"]
    bd = [r for r in runs if r["claim"] == "farming" and r["arm"] == "bounded"]
    if nv and bd:
        def first_last(rs: list[dict[str, Any]], key: str) -> tuple[tuple[float, float, int], tuple[float, float, int]]:
            return _ms([r["curve"][0][key] for r in rs if r["curve"]]), _ms([_late(r["curve"], key) for r in rs])

        rows4 = []
        for label, rs in (("naive (unbounded)", nv), ("bounded guard", bd)):
            t0, t1 = first_last(rs, "mean_turns")
            s0, s1 = first_last(rs, "mean_shaped_return")
            calls = _ms([r["pool_eval"]["tool_calls"] for r in rs])
            succ = _ms([r["pool_eval"]["success"] for r in rs])
            rows4.append((label, t0, t1, s0, s1, calls, succ))
        md += ["Math with a shaped reward of 0.25 per successful calculator call (`tool_ok`; repeats pay too; other shaping off). "
               "Naive: unbounded sum; bounded: the guard caps an episode's cumulative shaping at 0.25. Same GRPO, same everything else.", "",
               "| arm | turns/episode (first RL step → 2nd half) | shaped return (first → 2nd half) | calculator calls/episode (eval) | success (eval) |",
               "|---|---|---|---|---|"]
        for label, t0, t1, s0, s1, calls, succ in rows4:
            md.append(f"| {label} | {_fmt(*t0, pct=False)} → {_fmt(*t1, pct=False)} | {_fmt(*s0, pct=False)} → {_fmt(*s1, pct=False)} | {_fmt(*calls, pct=False)} | {_fmt(*succ)} |")
        md.append("")
        farm_naive = rows4[0][2][0] - rows4[0][1][0]
        farm_bounded = rows4[1][2][0] - rows4[1][1][0]
        d = _arm_diff(nv, bd, lambda r: r["pool_eval"]["tool_calls"])
        summary["claims"]["farming"] = {"turns_change_naive": farm_naive, "turns_change_bounded": farm_bounded, "tool_calls_naive_minus_bounded": d}
        farms = farm_naive > 0.25 and d[0] > 0
        glance["4. bounded shaping stops farming"] = (f"**reproduced** (naive: {d[0]:+.1f} calculator calls per episode vs bounded)"
                                                     if farms and farm_bounded < farm_naive else "**not reproduced at this scale**")
        md += [f"Change in episode length during training: naive {farm_naive:+.2f} turns, bounded {farm_bounded:+.2f}; calculator calls per "
               f"episode after training, naive − bounded: {d[0]:+.2f} ({f'2 s.e. = {2 * d[1]:.2f}' if d[2] > 1 else 'one seed per arm: no spread, a single-seed result'}). Verdict: "
               + ("**reproduced** — the naive arm learns to farm the repeatable signal, the bounded one does not." if farms and farm_bounded < farm_naive
                  else "**not reproduced at this scale** — the naive arm did not measurably learn to farm within the budget."), ""]
        png = _plot({"naive": nv, "bounded": bd}, "mean_turns", out / "claim4_turns.png", "math + per-call shaping: episode length", "turns per episode")
        md += [f"![turns]({png})", ""] if png else []
    else:
        md += ["Not run.", ""]

    # ---- claim 5
    md += ["## Claim 5 — information gain helps multi-hop search", ""]
    plain_search = [r for r in runs if r["name"].startswith("train/") and r["env"] == "search"] if "info_gain" in cfg.get("claims", []) else []
    ig = [r for r in plain_search if r["arm"] == "igpo"]
    gr = [r for r in plain_search if r["arm"] == "grpo"]
    if ig and gr:
        hops = sorted({h for r in ig + gr for h in r["pool_eval"].get("success_by_hops", {})}, key=int)
        md += ["| split | hops | IGPO | GRPO | IGPO − GRPO |", "|---|---|---|---|---|"]
        c5: dict[str, Any] = {}
        for split in ("pool_eval", "heldout_eval"):
            for h in hops:
                a = [r[split].get("success_by_hops", {}).get(h) for r in ig]
                b = [r[split].get("success_by_hops", {}).get(h) for r in gr]
                d = _diff(a, b)
                c5[f"{split}/{h}"] = d
                md.append(f"| {split.split('_')[0]} | {h} | {_fmt(*_ms(a))} | {_fmt(*_ms(b))} | {100 * d[0]:+.1f} |")
        md.append("")

        def multi_hop(r: dict[str, Any], split: str) -> float | None:
            """Success over a run's multi-hop (≥ 2) questions, weighted by their counts."""
            ev = r[split]
            pairs = [(ev["success_by_hops"][h], ev.get("episodes_by_hops", {}).get(h, 1)) for h in ev.get("success_by_hops", {}) if int(h) >= 2]
            n = sum(c for _, c in pairs)
            return sum(v * c for v, c in pairs) / n if n else None

        summary["claims"]["info_gain"] = c5
        for split, label in (("pool_eval", "pool"), ("heldout_eval", "held out")):
            d = _arm_diff(ig, gr, lambda r: multi_hop(r, split))  # noqa: B023 - used at once
            c5[f"{split}/multi_hop"] = d
            md += [f"Verdict ({label}, all multi-hop questions): " + (_verdict(*d, what="IGPO − GRPO") if d[2] else "**no multi-hop tasks evaluated**") + ".", ""]
            if split == "pool_eval" and d[2]:
                glance["5. IGPO > GRPO on multi-hop search"] = _glance(d, "points of multi-hop pool success")
        png = _plot({"igpo": ig, "grpo": gr}, "success", out / "claim5_success.png", "search: training success", "success rate")
        md += [f"![search]({png})", ""] if png else []
    else:
        md += ["Not run.", ""]

    md += _critic_section(out, cfg, runs, summary, glance)

    if glance:
        held = [row["after_heldout"][0] for row in rows if row["after_heldout"][2]]
        scope = ([f"Scope: held-out success after RL is at most {100 * max(held):.1f}% in every arm — the 0.5M-parameter policy "
                  f"learns its {cfg.get('task_pool')}-task pool (RL on fixed levels) and does not generalize to new tasks, so every "
                  "verdict here is about the pool.", ""] if held and max(held) < 0.05 else [])
        md[glance_at:glance_at] = ["## Verdicts at a glance", "", "| claim | here |", "|---|---|",
                                   *[f"| {k} | {v} |" for k, v in glance.items()], "", *scope]
    summary["glance"] = glance
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    path = out / "report.md"
    path.write_text("\n".join(md) + "\n")
    return path


def _rate_ci(rate: float, n: int) -> tuple[float, float]:
    """95% Wilson interval of a success rate measured on ``n`` episodes."""
    from turngym.rollout.metrics import wilson_interval

    return wilson_interval(round(rate * n), n)


def _two_prop_z(a: tuple[float, int], b: tuple[float, int]) -> float:
    """z statistic of the difference of two proportions (pooled standard error)."""
    (pa, na), (pb, nb) = a, b
    p = (pa * na + pb * nb) / max(na + nb, 1)
    se = math.sqrt(max(p * (1 - p) * (1 / max(na, 1) + 1 / max(nb, 1)), 1e-12))
    return (pa - pb) / se


def _pct_ci(rate: float | None, n: int) -> str:
    if rate is None or n == 0:
        return "—"
    lo, hi = _rate_ci(rate, n)
    return f"{100 * rate:.1f} [{100 * lo:.0f}, {100 * hi:.0f}]"


def _pretrained_section(cfg: dict[str, Any], runs: list[dict[str, Any]], summary: dict[str, Any], out_dir: Path) -> list[str]:
    """Held-out success of a pretrained model: zero-shot, after the warm start (both from the warm
    start's ``evals.json``, measured once), after RL per arm (its seeds' episodes pooled)."""
    md = ["## Held-out success of the pretrained model", "",
          f"`{cfg.get('model')}`, every number on tasks never trained on (RL draws a fresh task every episode; the held-out seeds "
          "and the unseen split are never drawn). *Zero-shot* = the base model with the env's system prompt (action grammar and a "
          "worked example), the format it gets at inference; the warm start and the RL runs see no system prompt (they learned the "
          "format from demonstrations). Rates pool every held-out episode of an arm's seeds, with 95% Wilson intervals; "
          "*z* is a two-proportion test (|z| > 1.96 ≈ p < 0.05) of the warm start against the base model (what imitation added; in "
          "the warm start column), of after-RL against the base model (what training with turngym — imitation, then RL — added) "
          "and against the warm start (what the RL phase added on its own); the last column is each seed's after-RL rate.", "",
          "| env | held-out split | zero-shot | warm start (z vs zero-shot) | arm | after RL | Δ vs zero-shot (z) | Δ vs warm start (z) | "
          "per seed |",
          "|---|---|---|---|---|---|---|---|---|"]
    out: dict[str, Any] = {}
    for env in sorted({r["env"] for r in runs}):
        rs = [r for r in runs if r["env"] == env and "heldout_before" in r]
        if not rs:
            continue
        evals_path = out_dir / "warm" / Path(rs[0]["warm_start"]).name / "evals.json"
        evals = json.loads(evals_path.read_text()) if evals_path.exists() else {}
        n_after = rs[0]["heldout_eval"]["episodes"]
        n_warm = evals.get("warm_heldout_eval", {}).get("episodes", n_after)
        base, n_base = rs[0].get("heldout_base"), evals.get("base_heldout_eval", {}).get("episodes", n_after)
        warm = rs[0]["heldout_before"]  # one shared warm start: its evaluation once
        z_warm = _two_prop_z((warm, n_warm), (base, n_base)) if base is not None else None
        warm_cell = _pct_ci(warm, n_warm) + (f" ({z_warm:+.2f})" if z_warm is not None else "")
        for arm in sorted({r["arm"] for r in rs}):
            ar = [r for r in rs if r["arm"] == arm]
            n = sum(r["heldout_eval"]["episodes"] for r in ar)
            after = sum(r["heldout_eval"]["success"] * r["heldout_eval"]["episodes"] for r in ar) / max(n, 1)
            z = _two_prop_z((after, n), (warm, n_warm))
            z_base = _two_prop_z((after, n), (base, n_base)) if base is not None else None
            vs_base = f"{100 * (after - base):+.1f} ({z_base:+.2f})" if z_base is not None else "—"
            per_seed = ", ".join(f"{100 * r['heldout_eval']['success']:.1f}" for r in sorted(ar, key=lambda r: r["seed"]))
            md.append(f"| {env} | `{ar[0]['heldout_env_id']}` | {_pct_ci(base, n_base)} | {warm_cell} "
                      f"| {arm} | {_pct_ci(after, n)} | {vs_base} | {100 * (after - warm):+.1f} ({z:+.2f}) | {per_seed} |")
            out[f"{env}/{arm}"] = {"zero_shot": base, "zero_shot_episodes": n_base, "warm_start": warm, "warm_start_episodes": n_warm,
                                   "after": after, "episodes": n, "seeds": len(ar), "z_vs_warm": z, "z_vs_zero_shot": z_base,
                                   "z_warm_vs_zero_shot": z_warm}
    summary["pretrained_heldout"] = out
    png = _heldout_bars(out, out_dir / "heldout.png") if out else None
    return md + [""] + ([f"![held-out success]({png})", ""] if png else [])


MOVEMENT = ("approx_kl", "ratio_std", "clip_frac", "grad_norm", "zero_adv_frac")
"""Per-step RL diagnostics of :func:`_movement_section` (``approx_kl`` and ``ratio_std``: :func:`turngym.trainers.losses.policy_movement`)."""


def _movement_section(runs: list[dict[str, Any]], summary: dict[str, Any]) -> list[str]:
    """How far the RL steps moved each arm's policy and where its training curve stands: the
    per-step diagnostics averaged over steps and seeds, and training success of the first and the
    second half of the steps (episodes pooled over seeds). Empty for runs logged before
    ``approx_kl`` existed, so older studies' reports are unchanged."""
    rows: dict[str, Any] = {}
    for key in sorted({(r["env"], r["arm"]) for r in runs}):
        ar = [r for r in runs if (r["env"], r["arm"]) == key and any("approx_kl" in c for c in r.get("curve", []))]
        if not ar:
            continue
        steps = [c for r in ar for c in r["curve"]]
        row: dict[str, Any] = {"seeds": len(ar), "steps": max(len(r["curve"]) for r in ar)}
        row |= {m: float(np.mean([c[m] for c in steps if m in c])) for m in MOVEMENT if any(m in c for c in steps)}
        for half, pick in (("first", lambda i, n: i < n // 2), ("second", lambda i, n: i >= n // 2)):
            eps = [(c["success"], c.get("episodes", 0)) for r in ar for i, c in enumerate(r["curve"]) if pick(i, len(r["curve"]))]
            n = sum(e for _, e in eps)
            row[f"success_{half}_half"] = sum(s * e for s, e in eps) / max(n, 1)
            row[f"episodes_{half}_half"] = n
        rows["/".join(key)] = row
    if not rows:
        return []
    summary["movement"] = rows
    md = ["## How far the RL steps moved the policy", "",
          "Per RL step, averaged over the steps and seeds of an arm: *approx KL* = k3 estimate of KL(π_old ‖ π_θ) over the action "
          "tokens and *ratio std* = the spread of π_θ / π_old (both ≈ 0 on a step's first minibatch, which is on-policy: with "
          "`minibatches > 1` they measure how far the step's earlier minibatches moved the policy), *clip* = share of tokens "
          "the PPO clip cut, *zero adv* = share of turns whose advantage is exactly 0 (no gradient). *Training success* = the "
          "sampled (temperature 1) training episodes of the first and the second half of the steps, pooled over seeds, with "
          "95% Wilson intervals: where the curve stands.", "",
          "| env / arm | seeds × steps | approx KL | ratio std | clip | grad norm | zero adv | training success, 1st half | 2nd half |",
          "|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        cells = [f"{r[m]:.2e}" if m == "approx_kl" and m in r else (f"{r[m]:.3f}" if m in r else "—") for m in MOVEMENT]
        md.append(f"| {name} | {r['seeds']} × {r['steps']} | " + " | ".join(cells)
                  + f" | {_pct_ci(r['success_first_half'], r['episodes_first_half'])} | {_pct_ci(r['success_second_half'], r['episodes_second_half'])} |")
    return md + [""]


def _heldout_bars(rows: dict[str, dict[str, Any]], path: Path) -> str | None:
    """Held-out success per env: zero-shot, warm start, and each arm after RL (bars with 95% Wilson intervals)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is in the train extra
        return None
    envs = sorted({k.split("/")[0] for k in rows})
    fig, axes = plt.subplots(1, len(envs), figsize=(3.6 * len(envs), 3.4), dpi=100, squeeze=False)
    for ax, env in zip(axes[0], envs, strict=True):
        arms = {k.split("/")[1]: v for k, v in rows.items() if k.startswith(env + "/")}
        first = next(iter(arms.values()))
        bars = [("zero-shot", first["zero_shot"], first["zero_shot_episodes"]), ("warm start", first["warm_start"], first["warm_start_episodes"])]
        bars += [(f"{arm}\n(after RL)", v["after"], v["episodes"]) for arm, v in arms.items()]
        for i, (_label, rate, m) in enumerate(bars):
            if rate is None:
                continue
            lo, hi = _rate_ci(rate, m)
            ax.bar(i, 100 * rate, color=f"C{i}", alpha=0.8)
            ax.errorbar(i, 100 * rate, yerr=[[100 * (rate - lo)], [100 * (hi - rate)]], color="k", capsize=4)
        ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
        ax.set_title(env, fontsize=10)
        ax.set_ylabel("held-out success (%)")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


_CRITIC_ARMS = {"gae": "PPO + learned critic (shared head)", "gae_separate": "PPO + learned critic (separate trunk)", "grpo": "GRPO", "gigpo": "GiGPO"}


def _critic_section(out: Path, cfg: dict[str, Any], runs: list[dict[str, Any]], summary: dict[str, Any], glance: dict[str, str]) -> list[str]:
    """Claim 6: PPO with a learned turn-level critic against the critic-free group estimators."""
    md = ["## Claim 6 — a learned critic vs group statistics (PPO + GAE over turns vs GRPO vs GiGPO)", "",
          "verl-agent, RAGEN and every PPO stack ship a learned critic; GRPO and GiGPO replace it with statistics of the group. "
          "Same warm start, budget, seeds and update as the other arms; the critic arms compute GAE (γ = 0.95, λ = 0.95) over "
          "turns from a value per turn boundary, whiten the advantages over the batch, and add the clipped value loss "
          "(`turngym.trainers.critic`). *Critic EV* = explained variance of the critic's values (before each update) against the "
          "Monte-Carlo return of the turn, mean over the second half of training; *s/step* = mean wall seconds of an RL step "
          "(rollout + update) and its ratio to GiGPO's on the same seeds, in the same study (the same machine load).", ""]
    envs = cfg.get("critic_envs", ["household"]) if "critic" in cfg.get("claims", []) else []
    mine = [r for r in runs if r["env"] in envs and r["arm"] in _CRITIC_ARMS and (r["claim"] == "critic" or r["name"].startswith("train/"))]
    if not any(r["arm"].startswith("gae") for r in mine):
        return md + ["Not run.", ""]
    section: dict[str, Any] = {}
    for env in sorted({r["env"] for r in mine}):
        rs_env = [r for r in mine if r["env"] == env]
        by_arm = {a: [r for r in rs_env if r["arm"] == a] for a in _CRITIC_ARMS if any(r["arm"] == a for r in rs_env)}
        png = _plot({_CRITIC_ARMS[a]: rs for a, rs in by_arm.items()}, "success", out / f"claim6_{env}.png", f"{env}: training success", "success rate")
        ev_png = _plot({_CRITIC_ARMS[a]: rs for a, rs in by_arm.items() if a.startswith("gae")}, "critic_ev_mc", out / f"claim6_{env}_ev.png",
                       f"{env}: critic explained variance (vs Monte-Carlo return)", "explained variance")
        gigpo = by_arm.get("gigpo", [])
        md += ["| arm | success: warm start → after RL (pool) | held out | critic EV (2nd half) | value loss (2nd half) | s/step | cost vs GiGPO |",
               "|---|---|---|---|---|---|---|"]
        rows = {}
        for arm, rs in by_arm.items():
            before, after, held = _success_stats(rs)
            ev = _ms([_late(r["curve"], "critic_ev_mc") for r in rs])
            vl = _ms([_late(r["curve"], "value_loss") for r in rs])
            sps = _ms([_mean_step_s(r) for r in rs])
            ratio = _arm_ratio(rs, gigpo, _mean_step_s)
            rows[arm] = {"before": before, "after_pool": after, "after_heldout": held, "critic_ev": ev, "value_loss": vl, "step_s": sps, "cost_vs_gigpo": ratio}
            md.append(f"| {_CRITIC_ARMS[arm]} | {_fmt(*before)} → {_fmt(*after)} | {_fmt(*held)} | {_fmt(*ev, pct=False) if ev[2] else '—'} "
                      f"| {_fmt(*vl, pct=False) if vl[2] else '—'} | {_fmt(*sps, pct=False)} | {_fmt_ratio(ratio)} |")
        md.append("")
        verdicts = {}
        ppo = by_arm.get("gae", [])
        for other in ("grpo", "gigpo"):
            if ppo and by_arm.get(other):
                d = _arm_diff(ppo, by_arm[other], lambda r: r["pool_eval"]["success"])
                verdicts[other] = d
                md.append(f"- PPO + critic vs {_CRITIC_ARMS[other]} (pool success): {_verdict(*d, what=f'PPO − {_CRITIC_ARMS[other]}')}.")
        if ppo and by_arm.get("gae_separate"):
            d = _arm_diff(by_arm["gae_separate"], ppo, lambda r: r["pool_eval"]["success"])
            verdicts["separate_vs_shared"] = d
            md.append(f"- separate trunk vs shared head (pool success): {_verdict(*d, what='separate − shared')}.")
        md.append("")
        if "gigpo" in verdicts:
            d = verdicts["gigpo"]
            word = _verdict_word(*d)
            glance[f"6. group statistics replace a learned critic ({env})"] = (
                {"reproduced": "**no**: PPO + critic beats GiGPO", "contradicted": "**yes, and better**: GiGPO beats PPO + critic",
                 "not reproduced at this scale": "**yes, at this scale**: PPO + critic and GiGPO are within noise",
                 "inconclusive": "**inconclusive** (one seed)"}[word] + f" ({100 * d[0]:+.1f} points PPO − GiGPO, 2 s.e. {100 * 2 * d[1]:.1f})")
        section[env] = {"arms": rows, "verdicts": verdicts}
        md += [f"![{env}]({png})", ""] if png else []
        md += [f"![{env} critic EV]({ev_png})", ""] if ev_png else []
    summary["claims"]["critic"] = section
    return md


def _fmt_ratio(r: tuple[float, float, int]) -> str:
    if not r[2]:
        return "—"
    return f"×{r[0]:.2f} ± {r[1]:.2f}" if r[2] > 1 else f"×{r[0]:.2f}"


def _mean_step_s(r: dict[str, Any]) -> float:
    """Mean wall seconds of a run's RL steps (NaN without timings)."""
    vals = [c["step_s"] for c in r["curve"] if "step_s" in c]
    return float(np.mean(vals)) if vals else float("nan")


def _arm_ratio(a: list[dict[str, Any]], b: list[dict[str, Any]], value: Callable[[dict[str, Any]], float | None]) -> tuple[float, float, int]:
    """Mean ratio ``value(a) / value(b)`` paired by seed, with its standard deviation over seeds."""
    va = {r["seed"]: value(r) for r in a}
    vb = {r["seed"]: value(r) for r in b}
    pairs = [va[k] / vb[k] for k in sorted(set(va) & set(vb)) if va[k] and vb[k] and not math.isnan(va[k] / vb[k])]
    if not pairs:
        return float("nan"), float("nan"), 0
    return float(np.mean(pairs)), float(np.std(pairs, ddof=1)) if len(pairs) > 1 else 0.0, len(pairs)
