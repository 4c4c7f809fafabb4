"""The HTML report of ``turngym eval --out DIR``: one self-contained file a person reads.

``summary.json`` and ``report.md`` give the headline numbers; this page adds what they cannot
show: the per-signal means (for all turns, and for the turns of successful and of failed
episodes, on the signal's declared range), each signal's mean by turn index, success by task
kind or task meta field with confidence intervals, and how long episodes ran.

The plots are inline SVG drawn here, with no script and no external resource, so the file opens
anywhere (offline, attached to a paper, in a CI artifact) and needs neither matplotlib nor a
CDN. Every string that comes from an episode (task ids, meta values, signal names) is escaped:
an agent or a task file must not be able to inject markup into the page a person opens.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from turngym.rollout.metrics import EvalSummary, wilson_interval
from turngym.rollout.types import Episode

__all__ = ["breakdowns", "render_html_report"]

_MAX_LEVELS = 30
"""A field with more distinct values than this is an identifier, not a category worth a chart."""

_MAX_TURN_COLUMNS = 30
"""Turn indices shown in the signal-by-turn heat map (later turns are rare and unreadable)."""

_GREEN, _RED, _BLUE, _GREY = "#2e7d32", "#c62828", "#1f5fa8", "#9e9e9e"

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1040px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:17px;margin:30px 0 8px;border-bottom:1px solid #dde1e7;padding-bottom:4px}
.sub{color:#5b6475;font-size:13px;margin-bottom:18px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:10px 14px;min-width:150px}
.card .k{font-size:12px;color:#5b6475}.card .v{font-size:22px;font-weight:600;margin-top:2px}.card .n{font-size:12px;color:#5b6475}
table{border-collapse:collapse;background:#fff;font-size:13px;margin:8px 0}
th,td{border:1px solid #dde1e7;padding:4px 8px;text-align:right}th{background:#eef1f5}td:first-child,th:first-child{text-align:left}
.panel{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:10px 12px;margin:8px 0;overflow-x:auto}
.note{color:#5b6475;font-size:12px}.legend span{display:inline-block;margin-right:14px;font-size:12px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
svg text{font-family:inherit}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _natural_key(value: Any) -> tuple[Any, ...]:
    """``"2" < "10"`` and ``"hard/2" < "hard/10"``: numbers inside labels sort as numbers."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", str(value)))


def _task_kind(task_id: str) -> str:
    """The task id without its last component (usually the seed): ``math/gen/6/123`` → ``math/gen/6``."""
    head, sep, _ = task_id.rpartition("/")
    return head if sep else task_id


def breakdowns(episodes: Sequence[Episode]) -> dict[str, dict[str, list[Episode]]]:
    """Scored episodes split by each categorical field: ``{field: {value: episodes}}``.

    The fields are the episodes' ``meta`` keys with scalar values, and the *task kind* (the
    task id without its seed, which encodes the difficulty or task type in the built-in envs),
    each kept only when it has 2 to ``_MAX_LEVELS`` values and does not give every episode a
    value of its own (then it is an identifier).
    """
    scored = [ep for ep in episodes if ep.infra_error is None]
    fields: dict[str, dict[str, list[Episode]]] = {}
    keys = sorted({k for ep in scored for k, v in ep.meta.items() if k not in ("infra_error", "infra_traceback", "gold") and isinstance(v, str | int | float | bool)})
    for key in keys:
        split: dict[str, list[Episode]] = {}
        for ep in scored:
            split.setdefault(str(ep.meta.get(key, "(none)")), []).append(ep)
        fields[f"meta: {key}"] = split
    kinds: dict[str, list[Episode]] = {}
    for ep in scored:
        kinds.setdefault(_task_kind(ep.task_id), []).append(ep)
    fields["task kind"] = kinds
    # Each varying part of the task kind on its own: ``household/seen/pick_place/2`` gives the
    # task type (part 3) and the difficulty (part 4) as separate charts.
    parts = [_task_kind(ep.task_id).split("/") for ep in scored]
    width = min((len(p) for p in parts), default=0)
    if len(kinds) > 1 and all(len(p) == width for p in parts):
        for i in range(width):
            split = {}
            for ep, p in zip(scored, parts):
                split.setdefault(p[i], []).append(ep)
            if 1 < len(split) < len(kinds):
                fields[f"task id part {i + 1} (" + "/".join("*" if j == i else "…" for j in range(width)) + ")"] = split
    return {name: dict(sorted(split.items(), key=lambda kv: _natural_key(kv[0])))
            for name, split in fields.items() if 2 <= len(split) <= _MAX_LEVELS and len(split) < len(scored)}


# ------------------------------------------------------------------------------ SVG pieces
def _hbars(rows: Sequence[tuple[str, Sequence[tuple[float, str]], tuple[float, float] | None, str]], *,
           lo: float = 0.0, hi: float = 1.0, label_w: int = 200, plot_w: int = 520) -> str:
    """Horizontal bars: per row a label, one or more ``(value, colour)`` bars, an optional CI
    whisker and a text note at the right. Values are drawn on ``[lo, hi]`` (clamped)."""
    bar_h, gap = 12, 8
    heights = [len(bars) * bar_h + gap for _, bars, _, _ in rows]
    total_h = sum(heights) + 24
    width = label_w + plot_w + 170

    def x(v: float) -> float:
        frac = 0.0 if hi == lo else (min(max(v, lo), hi) - lo) / (hi - lo)
        return label_w + frac * plot_w

    out = [f'<svg width="{width}" height="{total_h}" role="img">']
    for i in range(5):  # grid and axis labels
        gx = label_w + i * plot_w / 4
        out.append(f'<line x1="{gx:.1f}" y1="0" x2="{gx:.1f}" y2="{total_h - 18}" stroke="#e3e6eb"/>')
        out.append(f'<text x="{gx:.1f}" y="{total_h - 4}" font-size="10" fill="#5b6475" text-anchor="middle">{lo + i * (hi - lo) / 4:g}</text>')
    if lo < 0 < hi:
        out.append(f'<line x1="{x(0):.1f}" y1="0" x2="{x(0):.1f}" y2="{total_h - 18}" stroke="#5b6475"/>')
    y = 0
    for (label, bars, ci, note), h in zip(rows, heights):
        short = label if len(label) <= 30 else "…" + label[-29:]  # the tail tells labels apart
        out.append(f'<text x="{label_w - 8}" y="{y + h / 2 + 1:.1f}" font-size="12" text-anchor="end" dominant-baseline="middle">'
                   f'<title>{_e(label)}</title>{_e(short)}</text>')
        base = x(max(lo, min(0.0, hi)))
        for j, (value, colour) in enumerate(bars):
            by = y + gap / 2 + j * bar_h
            x0, x1 = sorted((base, x(value)))
            out.append(f'<rect x="{x0:.1f}" y="{by:.1f}" width="{max(x1 - x0, 1):.1f}" height="{bar_h - 2}" fill="{colour}" rx="2">'
                       f'<title>{_e(label)}: {value:.3f}</title></rect>')
        if ci is not None:
            cy = y + h / 2
            out.append(f'<path d="M{x(ci[0]):.1f} {cy:.1f}H{x(ci[1]):.1f}M{x(ci[0]):.1f} {cy - 5:.1f}V{cy + 5:.1f}'
                       f'M{x(ci[1]):.1f} {cy - 5:.1f}V{cy + 5:.1f}" stroke="#1d2330" stroke-width="1.5" fill="none"/>')
        out.append(f'<text x="{label_w + plot_w + 8}" y="{y + h / 2 + 1:.1f}" font-size="11" fill="#1d2330" dominant-baseline="middle">{_e(note)}</text>')
        y += h
    out.append("</svg>")
    return "".join(out)


def _columns(counts: Sequence[tuple[str, int, int]]) -> str:
    """Stacked columns: per label, episodes that succeeded (green) over those that failed (red)."""
    if not counts:
        return ""
    top = max(s + f for _, s, f in counts) or 1
    col_w, plot_h, left = max(14, min(40, 640 // len(counts))), 160, 36
    width = max(left + col_w * len(counts) + 10, 260)  # room for the axis title under one column
    out = [f'<svg width="{width}" height="{plot_h + 34}" role="img">',
           f'<text x="{left - 6}" y="12" font-size="10" text-anchor="end" fill="#5b6475">{top}</text>',
           f'<line x1="{left}" y1="{plot_h}" x2="{width}" y2="{plot_h}" stroke="#5b6475"/>']
    for i, (label, wins, fails) in enumerate(counts):
        cx = left + i * col_w
        hf, hs = plot_h * fails / top, plot_h * wins / top
        out.append(f'<rect x="{cx + 2}" y="{plot_h - hf:.1f}" width="{col_w - 4}" height="{hf:.1f}" fill="{_RED}"><title>{_e(label)} turns: {fails} failed</title></rect>')
        out.append(f'<rect x="{cx + 2}" y="{plot_h - hf - hs:.1f}" width="{col_w - 4}" height="{hs:.1f}" fill="{_GREEN}"><title>{_e(label)} turns: {wins} succeeded</title></rect>')
        out.append(f'<text x="{cx + col_w / 2:.1f}" y="{plot_h + 14}" font-size="10" text-anchor="middle">{_e(label)}</text>')
    out.append(f'<text x="{left + (width - left) / 2:.1f}" y="{plot_h + 30}" font-size="11" text-anchor="middle" fill="#5b6475">turns in the episode</text></svg>')
    return "".join(out)


def _heat(value: float, lo: float, hi: float) -> str:
    """Cell colour: white at the bottom of the signal's range to blue at the top (red if negative)."""
    frac = 0.0 if hi == lo else (value - lo) / (hi - lo)
    frac = min(max(frac, 0.0), 1.0)
    if value < 0 <= hi and lo < 0:
        k = min(1.0, value / lo)
        return f"rgba(198,40,40,{0.15 + 0.7 * k:.2f})"
    return f"rgba(31,95,168,{0.05 + 0.8 * frac:.2f})"


# ------------------------------------------------------------------------------ sections
def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _signal_section(scored: Sequence[Episode], summary: EvalSummary, ranges: Mapping[str, tuple[float, float]]) -> str:
    if not summary.signal_means:
        return "<h2>Process signals</h2><p class='note'>No signals were recorded.</p>"
    by_outcome: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}
    by_turn: dict[str, dict[int, list[float]]] = {}
    for ep in scored:
        for t in ep.turns:
            for k, v in t.signals.items():
                by_outcome[bool(ep.success)].setdefault(k, []).append(float(v))
                by_turn.setdefault(k, {}).setdefault(t.index, []).append(float(v))
    parts = ["<h2>Process signals</h2>",
             "<p class='note'>Mean per turn, drawn on each signal's declared range. "
             "<span class='legend'>"
             f"<span><i class='sw' style='background:{_BLUE}'></i>all turns</span>"
             f"<span><i class='sw' style='background:{_GREEN}'></i>turns of successful episodes</span>"
             f"<span><i class='sw' style='background:{_RED}'></i>turns of failed episodes</span></span></p>"]
    by_range: dict[tuple[float, float], list[Any]] = {}  # one chart per declared range: a shared axis
    for name, mean in summary.signal_means.items():
        lo, hi = ranges.get(name, (min(0.0, mean), max(1.0, mean)))
        win, fail = by_outcome[True].get(name, []), by_outcome[False].get(name, [])
        bars = [(mean, _BLUE)] + ([(_mean(win), _GREEN)] if win else []) + ([(_mean(fail), _RED)] if fail else [])
        note = f"{mean:.3f}  (success {_mean(win):.3f}, failure {_mean(fail):.3f})" if win and fail else f"{mean:.3f}"
        by_range.setdefault((lo, hi), []).append((name, bars, None, note))
    for (lo, hi), rows in by_range.items():
        parts.append(f"<div class='panel'><div class='note'>signals with range [{lo:g}, {hi:g}]</div>{_hbars(rows, lo=lo, hi=hi)}</div>")
    turns = sorted({i for per in by_turn.values() for i in per})[:_MAX_TURN_COLUMNS]
    if turns:
        head = "".join(f"<th>{i + 1}</th>" for i in turns)
        rows = []
        for name in summary.signal_means:
            lo, hi = ranges.get(name, (0.0, 1.0))
            cells = []
            for i in turns:
                vals = by_turn.get(name, {}).get(i)
                if vals:
                    m = _mean(vals)
                    cells.append(f"<td style='background:{_heat(m, lo, hi)}' title='turn {i + 1}: {m:.4f} over {len(vals)} turns'>{m:.2f}</td>")
                else:
                    cells.append("<td></td>")
            rows.append(f"<tr><td>{_e(name)}</td>{''.join(cells)}</tr>")
        parts.append("<h2>Signals by turn</h2><p class='note'>Mean of each signal at each turn index (darker = higher on its range).</p>"
                     f"<div class='panel'><table><tr><th>signal \\ turn</th>{head}</tr>{''.join(rows)}</table></div>")
    return "".join(parts)


def _breakdown_section(episodes: Sequence[Episode]) -> str:
    fields = breakdowns(episodes)
    parts = ["<h2>Breakdowns</h2>"]
    if not fields:
        return "".join(parts) + ("<p class='note'>No task field splits these episodes into categories "
                                 "(task kind = the task id without its seed; and the episodes' meta fields).</p>")
    for name, split in fields.items():
        rows, table = [], []
        for value, eps in split.items():
            wins = sum(ep.success for ep in eps)
            rate, ci = wins / len(eps), wilson_interval(wins, len(eps))
            turns = [t for ep in eps for t in ep.turns]
            invalid = sum(not t.action_valid for t in turns) / len(turns) if turns else 0.0
            ret = _mean([ep.total_reward for ep in eps])
            rows.append((value, [(rate, _GREEN)], ci, f"{rate:.3f} [{ci[0]:.2f}, {ci[1]:.2f}]  n={len(eps)}"))
            table.append(f"<tr><td>{_e(value)}</td><td>{len(eps)}</td><td>{rate:.3f}</td><td>{ci[0]:.3f}–{ci[1]:.3f}</td>"
                         f"<td>{ret:.3f}</td><td>{len(turns) / len(eps):.2f}</td><td>{invalid:.3f}</td></tr>")
        parts.append(f"<h3>Success by {_e(name)}</h3><div class='panel'>{_hbars(rows)}"
                     "<table><tr><th>value</th><th>episodes</th><th>success</th><th>95% CI</th><th>mean return</th>"
                     f"<th>mean turns</th><th>invalid rate</th></tr>{''.join(table)}</table></div>")
    return "".join(parts)


def _cards(s: EvalSummary) -> str:
    lo, hi = s.success_ci95
    cards = [("success rate", f"{s.success_rate:.3f}", f"95% CI {lo:.3f}–{hi:.3f}"),
             ("mean return", f"{s.mean_return:.3f}", ""), ("mean turns", f"{s.mean_turns:.2f}", ""),
             ("invalid-action rate", f"{s.invalid_action_rate:.3f}", "of all turns")]
    if s.faithfulness is not None:
        cards.append(("faithfulness", f"{s.faithfulness:.3f}", f"of {s.faithfulness_n} successful episodes"))
    if s.mean_generated_tokens is not None:
        cards.append(("tokens per action", f"{s.mean_generated_tokens:.1f}", "mean generated"))
    body = "".join(f"<div class='card'><div class='k'>{_e(k)}</div><div class='v'>{_e(v)}</div><div class='n'>{_e(n)}</div></div>"
                   for k, v, n in cards)
    ci_plot = _hbars([("success rate", [(s.success_rate, _GREEN)], s.success_ci95, f"{s.success_rate:.3f} (95% CI {lo:.3f}–{hi:.3f})")])
    extra = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in s.extra.items())
    extra_table = f"<table><tr><th>also</th><th>value</th></tr>{extra}</table>" if extra else ""
    return f"<div class='cards'>{body}</div><div class='panel'>{ci_plot}</div>{extra_table}"


def render_html_report(summary: EvalSummary, episodes: Sequence[Episode], *,
                       signal_ranges: Mapping[str, tuple[float, float]] | None = None) -> str:
    """The whole report page for ``summary`` of ``episodes`` (``signal_ranges``: the env's
    declared ``{signal: (low, high)}``, which the signal bars are drawn on)."""
    ranges = dict(signal_ranges or {})
    scored = [ep for ep in episodes if ep.infra_error is None]
    title = f"{summary.agent} on {summary.env_id}"
    sub = f"{summary.episodes} episodes, {summary.scored_episodes} scored, {summary.infra_errors} infra errors (excluded from every score)"
    length: dict[int, list[int]] = {}
    for ep in scored:
        length.setdefault(len(ep.turns), [0, 0])[0 if ep.success else 1] += 1
    counts = [(str(n), w, f) for n, (w, f) in sorted(length.items())]
    body = [
        f"<h1>{_e(title)}</h1><div class='sub'>{_e(sub)}</div>",
        "<h2>Summary</h2>", _cards(summary),
        _signal_section(scored, summary, ranges),
        _breakdown_section(episodes),
        "<h2>Episode length</h2><p class='note'>Episodes by number of turns: "
        f"<span class='legend'><span><i class='sw' style='background:{_GREEN}'></i>succeeded</span>"
        f"<span><i class='sw' style='background:{_RED}'></i>failed</span></span></p>",
        f"<div class='panel'>{_columns(counts)}</div>",
    ]
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)} — turngym eval</title>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{_CSS}</style></head>"
            f"<body><main>{''.join(body)}</main></body></html>\n")
