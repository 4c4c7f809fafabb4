"""Server-side HTML of the viewer's pages: plain HTML, one inline stylesheet, a few lines of JS.

Every string that came from an episode (actions, observations, ids) is agent- or env-written, so
it is HTML-escaped here and nowhere trusted. Numbers the tests compare with the files are also
written unrounded in ``data-*`` attributes; the visible text is rounded for reading.
"""

from __future__ import annotations

import hashlib
import html
import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from turngym.viewer.data import Run, SignalRange, ViewerData
from turngym.viewer.index import EpisodeIndex, Page

__all__ = ["Links", "episode_page", "episodes_page", "group_page", "layout", "runs_page", "tokens_page", "tree_page"]

e = html.escape

CSS = """
:root{--bg:#f7f8fa;--card:#fff;--ink:#1d2330;--mute:#6b7280;--line:#e5e7eb;--acc:#2563eb;--pos:#15803d;--neg:#b91c1c}
*{box-sizing:border-box}body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif}
header.top{background:#111827;color:#fff;padding:10px 24px;display:flex;gap:22px;align-items:center}
header.top b{font-size:16px;letter-spacing:.3px}header.top a{color:#cbd5e1;text-decoration:none}header.top a.on,header.top a:hover{color:#fff}
main{padding:18px 24px;max-width:1500px}h1{font-size:20px;margin:4px 0 12px}h2{font-size:16px;margin:18px 0 8px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 16px;margin-bottom:14px}
table{border-collapse:collapse;width:100%}th,td{padding:6px 9px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{font-weight:600;color:var(--mute);font-size:12px;text-transform:uppercase;letter-spacing:.4px;background:#fafafa;position:sticky;top:0}
th a{color:inherit;text-decoration:none}tr.click{cursor:pointer}tr.click:hover td{background:#eef4ff}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
a{color:var(--acc)}.mute{color:var(--mute)}.pill{display:inline-block;padding:1px 8px;border-radius:99px;font-size:12px;font-weight:600}
.ok{background:#dcfce7;color:var(--pos)}.bad{background:#fee2e2;color:var(--neg)}.warn{background:#fef3c7;color:#92400e}
form.filters{display:flex;gap:10px;flex-wrap:wrap;align-items:center;margin-bottom:10px}
input,select,button{font:inherit;padding:5px 8px;border:1px solid #cbd5e1;border-radius:6px;background:#fff}
button{background:var(--acc);color:#fff;border-color:var(--acc);cursor:pointer}
.pager{display:flex;gap:12px;align-items:center;margin-top:10px}
pre{margin:0;white-space:pre-wrap;word-break:break-word;font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
details>summary{cursor:pointer;color:var(--mute)}details[open]>summary{margin-bottom:4px}
.sig{display:grid;grid-template-columns:130px 110px 58px;gap:6px;align-items:center;font-size:12px}
.bar{position:relative;height:9px;background:#eef0f3;border-radius:5px;overflow:hidden}
.bar i{position:absolute;top:0;bottom:0}.bar i.p{background:#22c55e}.bar i.n{background:#ef4444}.bar b{position:absolute;top:0;bottom:0;width:1px;background:#94a3b8}
.adv{font-variant-numeric:tabular-nums;font-weight:600;border-radius:6px;text-align:center;padding:2px 6px;display:inline-block;min-width:62px}
.key{font:11px ui-monospace,monospace;padding:1px 6px;border-radius:5px;display:inline-block}
.meta{display:flex;gap:18px;flex-wrap:wrap}.meta div span{display:block;font-size:11px;color:var(--mute);text-transform:uppercase}
.grid{display:grid;gap:8px}.cell{border:1px solid var(--line);border-radius:8px;padding:6px 8px;background:#fff;min-height:40px}
.cell.invalid{border-color:#fca5a5;background:#fff7f7}.legend span{margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:12px;height:3px;margin-right:5px;vertical-align:middle}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(430px,1fr));gap:12px}
"""

JS = """
document.addEventListener('click',function(ev){var tr=ev.target.closest('tr[data-href]');
 if(tr&&!ev.target.closest('a,summary,details')){location.href=tr.getAttribute('data-href');}});
document.querySelectorAll('select[data-autosubmit]').forEach(function(s){s.addEventListener('change',function(){s.form.submit();});});
"""


class Links:
    """URLs of the pages; the static export overrides them with in-file anchors."""

    def episodes(self, **params: Any) -> str:
        return "/?" + urlencode({k: v for k, v in params.items() if v not in ("", None)})

    def episode(self, src: int, row: int, est: str) -> str:
        return f"/episode?{urlencode({'src': src, 'row': row, 'est': est})}"

    def group(self, src: int, group: str, a: str, b: str) -> str:
        return f"/group?{urlencode({'src': src, 'g': group, 'a': a, 'b': b})}"

    def runs(self) -> str:
        return "/runs"

    def tokens(self, src: int, row: int, est: str) -> str:
        return f"/tokens?{urlencode({'src': src, 'row': row, 'est': est})}"

    def tree(self, src: int, group: str | None = None, est: str = "tree") -> str:
        return f"/tree?{urlencode({'src': src, 'g': group, 'est': est} if group is not None else {'src': src})}"

    static = False


def layout(title: str, body: str, links: Links, active: str = "") -> str:
    nav = "".join(
        f'<a href="{e(url)}" class="{"on" if name == active else ""}">{name}</a>'
        for name, url in (("Episodes", links.episodes()), *((("Tree", links.tree(0)),) if not links.static else ()), ("Runs", links.runs()))
    )
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content='width=device-width'>"
            f"<title>{e(title)} · turngym view</title><style>{CSS}</style></head><body>"
            f"<header class=top><b>turngym view</b>{nav}</header><main>{body}</main><script>{JS}</script></body></html>")


def _fmt(x: float, nd: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _badge(ok: bool, yes: str = "success", no: str = "fail") -> str:
    return f'<span class="pill {"ok" if ok else "bad"}">{yes if ok else no}</span>'


def _adv_style(a: float, scale: float) -> str:
    if math.isnan(a):
        return "background:#f3f4f6"
    alpha = 0.12 + 0.6 * min(1.0, abs(a) / scale) if scale > 0 else 0.12
    rgb = "21,128,61" if a > 0 else "185,28,28" if a < 0 else "148,163,184"
    return f"background:rgba({rgb},{alpha:.2f});color:{'#052e16' if a > 0 else '#450a0a' if a < 0 else '#334155'}"


def _adv_cell(a: float, scale: float) -> str:
    text = "–" if math.isnan(a) else f"{a:+.3f}"
    return f'<span class="adv" data-adv="{a!r}" style="{_adv_style(a, scale)}">{text}</span>'


def _key_chip(key: str) -> str:
    h = hashlib.sha1(key.encode()).digest()
    short = key if len(key) <= 14 else hashlib.sha1(key.encode()).hexdigest()[:10]
    return f'<span class="key" title="{e(key)}" style="background:hsl({h[0] * 360 // 256},70%,90%)">{e(short)}</span>'


def _bar(v: float, r: SignalRange) -> str:
    span = r.high - r.low
    if span <= 0:
        return '<div class="bar"></div>'
    pos = lambda x: min(100.0, max(0.0, 100.0 * (x - r.low) / span))  # noqa: E731
    zero, val = pos(min(max(0.0, r.low), r.high)), pos(v)
    left, width = min(zero, val), abs(val - zero)
    cls = "p" if v >= 0 else "n"
    return f'<div class="bar" title="{_fmt(v)} in [{r.low:g}, {r.high:g}]"><i class="{cls}" style="left:{left:.1f}%;width:{max(width, 0.8):.1f}%"></i><b style="left:{zero:.1f}%"></b></div>'


_INFRA_YES = '<span class="pill warn">yes</span>'


def _text(s: str, limit: int = 90) -> str:
    first = s.strip().splitlines()[0] if s.strip() else ""
    return e(first[:limit] + ("…" if len(first) > limit or len(s.strip().splitlines()) > 1 else ""))


# ---------------------------------------------------------------------- Episodes
def episodes_page(data: ViewerData, src: int, page: Page, params: dict[str, Any], links: Links, est: str) -> str:
    idx = data.index(src)
    sources = ""
    if len(data.episode_files) > 1 and not links.static:
        opts = "".join(f'<option value="{i}" {"selected" if i == src else ""}>{e(data.label(p))}</option>' for i, p in enumerate(data.episode_files))
        sources = f'<select name="src" data-autosubmit>{opts}</select>'
    filt = ""
    if not links.static:
        env_opts = "".join(f'<option {"selected" if v == params.get("env") else ""}>{e(v)}</option>' for v in idx.envs)

        def sel(name: str, label: str) -> str:
            cur = params.get(name, "")
            o = "".join(f'<option value="{v}" {"selected" if v == cur else ""}>{t}</option>' for v, t in (("", f"{label}: any"), ("1", f"{label}: yes"), ("0", f"{label}: no")))
            return f'<select name="{name}" data-autosubmit>{o}</select>'

        filt = (f'<form class="filters" method="get" action="/">{sources}'
                f'<input name="q" placeholder="task, episode or group id" value="{e(params.get("q", ""))}">'
                f'<select name="env" data-autosubmit><option value="">all envs</option>{env_opts}</select>'
                f'{sel("success", "success")}{sel("infra", "infra error")}'
                f'<input type="hidden" name="sort" value="{e(params.get("sort", "row"))}">'
                f'<input type="hidden" name="desc" value="{e(str(params.get("desc", "")))}"><button>Filter</button></form>')
    cols = [("row", "#", True), ("env", "env", False), ("task", "task", False), ("group", "group", False), ("success", "success", False),
            ("return", "return", True), ("turns", "turns", True), ("invalid", "invalid actions", True), ("infra", "infra errors", True)]
    head = ""
    for key, label, num in cols:
        if links.static:
            head += f'<th class="{"num" if num else ""}">{label}</th>'
            continue
        cur = params.get("sort", "row") == key
        desc = "" if (cur and params.get("desc")) else ("1" if cur else "")
        arrow = (" ▼" if params.get("desc") else " ▲") if cur else ""
        url = links.episodes(**{**params, "sort": key, "desc": desc, "page": ""})
        head += f'<th class="{"num" if num else ""}"><a href="{e(url)}">{label}{arrow}</a></th>'
    body = []
    for r in page.rows:
        url = links.episode(src, r, est)
        body.append(
            f'<tr class="click" data-href="{e(url)}" data-row="{r}" data-return="{float(idx.ret[r])!r}">'
            f'<td class="num"><a href="{e(url)}">{r}</a></td><td>{e(idx.env[r])}</td><td>{e(idx.task[r])}</td>'
            f'<td><a href="{e(links.group(src, idx.group[r], "grpo", "gigpo"))}">{e(idx.group[r])}</a></td>'
            f'<td>{_badge(bool(idx.success[r]))}</td><td class="num">{idx.ret[r]:.3f}</td><td class="num">{idx.turns[r]}</td>'
            f'<td class="num">{idx.invalid[r]}</td><td class="num">{_INFRA_YES if idx.infra[r] else "0"}</td></tr>')
    pager = ""
    if not links.static:
        prev = links.episodes(**{**params, "page": page.page - 1}) if page.page > 0 else ""
        nxt = links.episodes(**{**params, "page": page.page + 1}) if page.page + 1 < page.pages else ""
        prev_a = f'<a id="prev" href="{e(prev)}">← prev</a>' if prev else ""
        next_a = f'<a id="next" href="{e(nxt)}">next →</a>' if nxt else ""
        pager = (f'<div class="pager">{prev_a}<span class="mute">page {page.page + 1} of {page.pages} · {page.total} matching of {len(idx)}</span>'
                 f'{next_a}</div>')
    skipped = f' <span class="pill warn">{idx.skipped} unreadable lines skipped</span>' if idx.skipped else ""
    return (f'<h1>Episodes <span class="mute">{e(data.label(data.episode_files[src]))}</span>{skipped}</h1><div class="card">{filt}'
            f'<table id="episodes" data-total="{page.total}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>{pager}</div>')


# ---------------------------------------------------------------------- Episode
def episode_page(data: ViewerData, src: int, row: int, est: str, estimators: list[str], links: Links) -> str:
    idx: EpisodeIndex = data.index(src)
    group = str(idx.group[row])
    credit = data.group_credit(src, group, est)
    pos = credit.rows.index(row)
    ep = credit.episodes[pos]
    adv = credit.advantages[pos] if credit.advantages is not None else None
    scale = max((float(abs(x)) for a in (credit.advantages or []) for x in a if not math.isnan(x)), default=1.0)
    ranges = data.signal_ranges(ep.env_id, credit.episodes)
    est_form = ""
    if not links.static:
        opts = "".join(f'<option {"selected" if n == est else ""}>{e(n)}</option>' for n in estimators)
        est_form = (f'<form method="get" action="/episode" style="display:inline"><input type="hidden" name="src" value="{src}">'
                    f'<input type="hidden" name="row" value="{row}">advantage estimator <select name="est" data-autosubmit>{opts}</select></form>')
    meta = "".join(f"<div><span>{k}</span>{v}</div>" for k, v in (
        ("env", e(ep.env_id)), ("task", e(ep.task_id)), ("group", f'<a id="group-link" href="{e(links.group(src, group, "grpo", est if est != "grpo" else "gigpo"))}">{e(group)}</a> ({len(credit.rows)} episodes)'),
        ("outcome", _badge(ep.success)), ("return", f'<span id="ep-return" data-value="{ep.total_reward!r}">{ep.total_reward:.3f}</span>'),
        ("turns", str(len(ep.turns))), ("seed", e(str(ep.seed))), ("advantages", est_form or e(est)), *_more_views(src, row, group, est, ep, links)))
    infra = f'<p><span class="pill warn">infra error</span> {e(ep.infra_error)}</p>' if ep.infra_error else ""
    err = f'<p><span class="pill warn">no advantages</span> {e(credit.error)}</p>' if credit.error else ""
    sysp = f"<details><summary>system prompt</summary><pre>{e(ep.system_prompt)}</pre></details>" if ep.system_prompt else ""
    rows = []
    for i, t in enumerate(ep.turns):
        sigs = "".join(
            f'<div class="sig" data-signal="{e(k)}" data-value="{v!r}"><span title="{e(ranges[k].description)}">{e(k)}{"" if ranges[k].declared else " *"}</span>'
            f'{_bar(v, ranges[k])}<span class="num">{v:+.3f}</span></div>' for k, v in sorted(t.signals.items()))
        valid = ('<span class="pill ok">valid</span>' if t.action_valid
                 else f'<span class="pill bad">invalid</span> <span class="mute">{e(t.invalid_reason or "")}</span>')
        if t.infra_error:
            valid += f' <span class="pill warn">infra: {e(t.infra_error)}</span>'
        a = float(adv[i]) if adv is not None else math.nan
        n_shared = credit.shared[pos][i]
        rows.append(
            f'<tr class="turn" data-turn="{t.index}"><td class="num">{t.index}</td>'
            f'<td style="max-width:380px"><details><summary>{_text(t.observation)}</summary><pre>{e(t.observation)}</pre></details></td>'
            f'<td style="max-width:320px"><pre>{e(t.action)}</pre>{valid}</td>'
            f'<td class="num" data-reward="{t.reward!r}">{t.reward:+.3f}</td><td>{sigs or "<span class=mute>none</span>"}</td>'
            f'<td class="num">{_adv_cell(a, scale)}</td>'
            f'<td>{_key_chip(t.prev_state_key)}<div class="mute" data-shared="{n_shared}">shared by {n_shared} other episode{"s" if n_shared != 1 else ""}</div></td></tr>')
    undeclared = ' <span class="mute">(* range not declared by the env: observed range)</span>' if any(not r.declared for r in ranges.values()) else ""
    return (f'<h1>Episode <span class="mute">{e(ep.episode_id)}</span></h1><div class="card meta">{meta}</div>{infra}{err}'
            f'<div class="card">{sysp}<details open><summary>initial observation</summary><pre>{e(ep.initial_observation)}</pre></details></div>'
            f'<div class="card"><table id="turns"><thead><tr><th class="num">turn</th><th>observation</th><th>action</th><th class="num">reward</th>'
            f'<th>signals{undeclared}</th><th class="num">advantage ({e(est)})</th><th>state (step group in this group)</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def _more_views(src: int, row: int, group: str, est: str, ep: Any, links: Links) -> list[tuple[str, str]]:
    """The Tokens and Tree links of an episode (the static export holds neither page)."""
    if links.static:
        return []
    out = [("training sample", f'<a id="tokens-link" href="{e(links.tokens(src, row, est))}">tokens</a>')]
    if any(t.node >= 0 for t in ep.turns):
        out.append(("rollout", f'<a id="tree-link" href="{e(links.tree(src, group, est))}">tree of its group</a>'))
    return out


# ---------------------------------------------------------------------- Group
def group_page(data: ViewerData, src: int, group: str, a: str, b: str, estimators: list[str], links: Links) -> str:
    ca, cb = data.group_credit(src, group, a), data.group_credit(src, group, b)
    eps = ca.episodes
    scale = max((float(abs(x)) for c in (ca, cb) for adv in (c.advantages or []) for x in adv if not math.isnan(x)), default=1.0)
    form = ""
    if not links.static:
        def sel(name: str, cur: str) -> str:
            opts = "".join(f"<option{' selected' if n == cur else ''}>{e(n)}</option>" for n in estimators)
            return f'<select name="{name}" data-autosubmit>{opts}</select>'
        form = (f'<form method="get" action="/group" class="filters"><input type="hidden" name="src" value="{src}"><input type="hidden" name="g" value="{e(group)}">'
                f'compare {sel("a", a)} with {sel("b", b)}</form>')
    errs = "".join(f'<p><span class="pill warn">{e(n)}</span> {e(c.error)}</p>' for n, c in ((a, ca), (b, cb)) if c.error)
    if not links.static:
        from turngym.viewer.tree import is_tree

        if is_tree(eps):
            form += f'<p>This group is a tree rollout: <a id="tree-link" href="{e(links.tree(src, group, b))}">see it drawn as a tree</a>.</p>'

    n_turns = max((len(ep.turns) for ep in eps), default=0)
    cols = f"60px repeat({len(eps)}, minmax(190px, 1fr))"
    cells = ['<div class="mute">turn</div>']
    for r, ep in zip(ca.rows, eps):
        cells.append(f'<div class="cell" data-episode="{r}"><a href="{e(links.episode(src, r, b))}">{e(ep.episode_id)}</a><br>'
                     f'{_badge(ep.success)} <span class="mute">return</span> {ep.total_reward:.3f}</div>')
    for ti in range(n_turns):
        cells.append(f'<div class="mute">{ti}</div>')
        for k, ep in enumerate(eps):
            if ti >= len(ep.turns):
                cells.append("<div></div>")
                continue
            t = ep.turns[ti]
            va = float(ca.advantages[k][ti]) if ca.advantages is not None else math.nan
            vb = float(cb.advantages[k][ti]) if cb.advantages is not None else math.nan
            cells.append(
                f'<div class="cell{"" if t.action_valid else " invalid"}" data-ep="{k}" data-turn="{ti}"><pre title="{e(t.action)}">{_text(t.action, 60)}</pre>'
                f'<div style="margin-top:4px">{_key_chip(t.prev_state_key)} <span class="mute">r</span> {t.reward:+.2f}</div>'
                f'<div style="margin-top:4px" class="pair"><span class="mute">{e(a)}</span> <span data-est="a">{_adv_cell(va, scale)}</span> '
                f'<span class="mute">{e(b)}</span> <span data-est="b">{_adv_cell(vb, scale)}</span></div></div>')
    return (f'<h1>Group <span class="mute">{e(group)}</span></h1><div class="card">{form}{errs}<p class="mute">The group\'s episodes side by side, '
            f"aligned by turn; advantages of both estimators computed live on the env's rewards. Same-coloured state chips are the same "
            f'state (GiGPO\'s step groups).</p><div class="grid" id="group-grid" style="grid-template-columns:{cols}">{"".join(cells)}</div></div>')


# ---------------------------------------------------------------------- Runs
PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777", "#4b5563", "#65a30d"]
_PREFERRED = ["success", "mean_return", "mean_shaped_return", "invalid_rate", "kl", "approx_kl", "clip_frac", "zero_adv_frac", "adv_abs_mean",
              "entropy", "confident_frac", "identical_group_frac", "uniform_reward_frac", "informative_episodes",
              "loss", "grad_norm", "mean_turns", "tokens_per_s", "tokens", "step_s"]


def _series(runs: list[Run]) -> dict[str, list[tuple[str, list[tuple[float, float]]]]]:
    out: dict[str, list[tuple[str, list[tuple[float, float]]]]] = {}
    for run in runs:
        per: dict[str, list[tuple[float, float]]] = {}
        for row in run.rows:
            phase, step = row.get("phase", "rl"), row.get("step")
            if not isinstance(step, (int, float)):
                continue
            for k, v in row.items():
                if k in ("step", "phase", "label") or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    continue
                name = k if phase == "rl" else f"{phase}/{k}"
                per.setdefault(name, []).append((float(step), float(v)))
        for name, pts in per.items():
            out.setdefault(name, []).append((run.label, pts))
    order = {n: i for i, n in enumerate(["eval/success", *_PREFERRED])}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def svg_chart(title: str, series: list[tuple[str, list[tuple[float, float]]]], colours: dict[str, str], w: int = 430, h: int = 220) -> str:
    """A line chart as inline SVG (axes, 3 ticks each, one polyline per run; points when few)."""
    pts = [p for _, s in series for p in s]
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y0, y1 = y0 - (abs(y0) or 1) * 0.1, y1 + (abs(y1) or 1) * 0.1
    L, R, T, B = 52, 12, 26, 28  # noqa: N806
    sx = lambda x: L + (x - x0) / (x1 - x0) * (w - L - R)  # noqa: E731
    sy = lambda y: h - B - (y - y0) / (y1 - y0) * (h - T - B)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="100%" role="img" data-metric="{e(title)}">',
             f'<text x="{L}" y="16" font-size="13" font-weight="600" fill="#1d2330">{e(title)}</text>']
    for f in (0.0, 0.5, 1.0):
        yv, xv = y0 + f * (y1 - y0), x0 + f * (x1 - x0)
        parts.append(f'<line x1="{L}" x2="{w - R}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" stroke="#e5e7eb"/>'
                     f'<text x="{L - 6}" y="{sy(yv) + 4:.1f}" font-size="10" text-anchor="end" fill="#6b7280">{yv:.3g}</text>'
                     f'<text x="{sx(xv):.1f}" y="{h - 10}" font-size="10" text-anchor="middle" fill="#6b7280">{xv:.0f}</text>')
    for label, s in series:
        c = colours[label]
        pl = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{pl}"><title>{e(label)}</title></polyline>')
        if len(s) <= 30:
            parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.6" fill="{c}"><title>{e(label)} step {x:g}: {y:.4g}</title></circle>' for x, y in s]
    parts.append("</svg>")
    return "".join(parts)


def runs_page(data: ViewerData, selected: list[str] | None, links: Links) -> str:
    runs = data.runs()
    if not runs:
        return '<h1>Runs</h1><div class="card mute">No metrics.jsonl under this path.</div>'
    labels = [r.label for r in runs]
    chosen = [r for r in runs if not selected or r.label in selected]
    colours = {lab: PALETTE[i % len(PALETTE)] for i, lab in enumerate(labels)}
    picker = ""
    if not links.static and len(runs) > 1:
        boxes = "".join(f'<label style="margin-right:12px"><input type="checkbox" name="run" value="{e(lab)}" {"checked" if not selected or lab in selected else ""}> '
                        f'<i style="display:inline-block;width:10px;height:10px;background:{colours[lab]};border-radius:2px"></i> {e(lab)}</label>' for lab in labels)
        picker = f'<form method="get" action="/runs" class="filters">{boxes}<button>Overlay</button></form>'
    legend = "".join(f'<span><i style="background:{colours[r.label]}"></i>{e(r.label)}</span>' for r in chosen)
    charts = "".join(f'<div class="card">{svg_chart(name, s, colours)}</div>' for name, s in _series(chosen).items())
    return f'<h1>Runs</h1><div class="card">{picker}<div class="legend">{legend}</div></div><div class="charts">{charts}</div>'


RenderFn = Callable[..., str]


# ---------------------------------------------------------------------- Tokens
TOKENS_CSS = """
.toks{font:12.5px/1.9 ui-monospace,SFMono-Regular,Menlo,monospace;white-space:pre-wrap;word-break:break-all}
.tok{border-radius:3px;padding:1px 0;margin-right:1px;cursor:default}.tok.ctx{color:#9ca3af;background:#f3f4f6}
.tok.pol{outline:1px solid rgba(37,99,235,.35)}.tok:hover{outline:2px solid #111827}
.tok.turn-start{margin-left:3px}.legend i.swatch{display:inline-block;width:24px;height:12px;border-radius:3px;vertical-align:middle;margin-right:5px}
"""


def _tok_piece(piece: str) -> str:
    """A token's text made visible: whitespace marked, newlines kept, everything escaped."""
    shown = piece.replace("\t", "→").replace("\n", "↵\n")
    if shown.strip() == "" and shown:
        shown = shown.replace(" ", "·")
    return e(shown) if shown else '<span class="mute">∅</span>'


def tokens_page(data: ViewerData, src: int, row: int, est: str, estimators: list[str], links: Links) -> str:
    """One episode's training sample: loss mask (grey = context) and per-token advantage (colour)."""
    from turngym.viewer.tokens import has_token_ids, token_view

    idx = data.index(src)
    group = str(idx.group[row])
    credit = data.group_credit(src, group, est)
    pos = credit.rows.index(row)
    ep = credit.episodes[pos]
    adv = [float(x) for x in credit.advantages[pos]] if credit.advantages is not None else [math.nan] * len(ep.turns)
    scale = max((abs(a) for a in adv if not math.isnan(a)), default=0.0) or 1.0
    est_form = ""
    if not links.static:
        opts = "".join(f'<option {"selected" if n == est else ""}>{e(n)}</option>' for n in estimators)
        est_form = (f'<form method="get" action="/tokens" style="display:inline"><input type="hidden" name="src" value="{src}">'
                    f'<input type="hidden" name="row" value="{row}">advantage estimator <select name="est" data-autosubmit>{opts}</select></form>')
    back = f'<a href="{e(links.episode(src, row, est))}">← episode {row}</a>'
    err = f'<p><span class="pill warn">no advantages</span> {e(credit.error)}</p>' if credit.error else ""
    head = f'<h1>Tokens <span class="mute">{e(ep.episode_id)}</span></h1><style>{TOKENS_CSS}</style>'
    if not has_token_ids(ep):
        rows = "".join(
            f'<tr class="turn" data-turn="{t.index}"><td class="num">{t.index}</td><td><pre>{e(t.action)}</pre></td>'
            f'<td class="num">{_adv_cell(adv[i], scale)}</td></tr>' for i, t in enumerate(ep.turns))
        return (f'{head}<div class="card meta"><div><span>episode</span>{back}</div><div><span>advantages</span>{est_form or e(est)}</div></div>{err}'
                f'<div class="card" id="no-tokens"><p><span class="pill warn">no token ids</span> This episode carries no generated token ids: '
                f'it was played by a scripted or oracle agent (or a policy that does not report its tokens), so there is no sampled token '
                f'sequence to show, and none is made up here. Its actions, with the advantage of each turn:</p>'
                f'<table id="turn-actions"><thead><tr><th class="num">turn</th><th>action</th><th class="num">advantage ({e(est)})</th></tr></thead>'
                f'<tbody>{rows}</tbody></table></div>')
    renderer, tok_note = data.renderer()
    try:
        view = token_view(ep, adv, renderer)
    except Exception as exc:  # a template that cannot render this episode: show the ids instead, and why
        tok_note = f"the tokenizer could not render this episode ({exc}); showing the generated ids of each turn"
        view = token_view(ep, adv, None)
    n_pol = sum(view.mask)
    spans = []
    prev_turn = -2
    for i, (tid, m, a, lp, tn) in enumerate(zip(view.ids, view.mask, view.advantages, view.logprobs, view.turns)):
        piece = view.pieces[i] if view.pieces is not None else f"[{tid}]"
        tip = f"token {i} · id {tid}" + (f" · turn {tn}" if tn >= 0 else " · context") + (f" · logprob {lp:.4f}" if lp is not None else "")
        tip += f" · advantage {a:+.4f}" if m else " · not trained (mask 0)"
        cls = "pol" if m else "ctx"
        if view.pieces is None and tn != prev_turn:
            cls += " turn-start"
        style = f' style="{_adv_style(a, scale)}"' if m else ""
        lp_attr = f' data-logprob="{lp!r}"' if lp is not None else ""
        spans.append(f'<span class="tok {cls}" data-i="{i}" data-id="{tid}" data-mask="{m}" data-adv="{a!r}" data-turn="{tn}"'
                     f'{lp_attr} title="{e(tip)}"{style}>{_tok_piece(piece)}</span>')
        if view.pieces is None and tn != prev_turn:
            prev_turn = tn
    meta = "".join(f"<div><span>{k}</span>{v}</div>" for k, v in (
        ("episode", back), ("tokens", f'<b id="n-tokens">{len(view.ids)}</b>'), ("policy tokens (mask 1)", f'<b id="n-policy">{n_pol}</b>'),
        ("sample", "rendered as the trainer does" if view.rendered else "generated ids only"), ("advantages", est_form or e(est))))
    legend = (f'<div class="legend"><span><i class="swatch" style="{_adv_style(scale, scale)}"></i>positive advantage</span>'
              f'<span><i class="swatch" style="{_adv_style(-scale, scale)}"></i>negative</span>'
              f'<span><i class="swatch" style="{_adv_style(0.0, scale)}"></i>zero</span>'
              f'<span><i class="swatch" style="background:#f3f4f6"></i>context: prompt, observations, template (mask 0)</span>'
              f'<span class="mute">colour strength = |advantage| / {scale:.3g}; hover a token for its id, log-prob and advantage</span></div>')
    note = f'<p class="mute" id="tokenizer-note">{e(tok_note)}</p>' if tok_note else ""
    return (f'{head}<div class="card meta">{meta}</div>{err}<div class="card">{legend}{note}</div>'
            f'<div class="card"><div class="toks" id="tokens" data-rendered="{int(view.rendered)}">{"".join(spans)}</div></div>')


# ---------------------------------------------------------------------- Tree
TREE_HOWTO = ("python -c \"import turngym; from turngym.agents import RandomAgent; from turngym.rollout import run_tree, save_episodes; "
              "save_episodes(run_tree(lambda: turngym.make('turngym/Math-v0'), RandomAgent(seed=0), [0, 1, 2], branching=(2, 2), "
              "env_id='turngym/Math-v0').episodes, 'tree_episodes.jsonl')\" && turngym view tree_episodes.jsonl")


def _value_colour(v: float, lo: float, hi: float) -> str:
    if hi - lo <= 1e-12:
        return "#94a3b8"
    f = (v - lo) / (hi - lo)  # red (worst) → amber → green (best)
    hue = 0 + 130 * f
    return f"hsl({hue:.0f},65%,45%)"


def tree_page(data: ViewerData, src: int, group: str | None, est: str, links: Links) -> str:
    """The group's rollout tree as inline SVG; without a group, the source's tree groups (or how to make some)."""
    from turngym.viewer.tree import build_tree, is_tree

    idx = data.index(src)
    if not group:
        trees = data.tree_groups(src)
        if not trees:
            return (f'<h1>Tree</h1><div class="card" id="no-trees"><p>No tree rollouts in <b>{e(data.label(data.episode_files[src]))}</b>: '
                    f'no group here has episodes that share a turn. Tree rollouts come from <code>turngym.rollout.run_tree</code> '
                    f'(and are what the <code>tree</code> estimator credits). To make some and view them:</p><pre id="tree-howto">{e(TREE_HOWTO)}</pre></div>')
        items = "".join(f'<tr class="click" data-href="{e(links.tree(src, g, est))}"><td><a href="{e(links.tree(src, g, est))}">{e(g)}</a></td>'
                        f'<td class="num">{len(idx.groups[g])}</td></tr>' for g in trees)
        return (f'<h1>Tree <span class="mute">{len(trees)} tree rollout{"s" if len(trees) != 1 else ""}</span></h1><div class="card">'
                f'<table id="tree-groups"><thead><tr><th>group</th><th class="num">leaves (episodes)</th></tr></thead><tbody>{items}</tbody></table></div>')
    rows = idx.groups[group]
    eps = idx.load_many(rows)
    tree = build_tree(eps)
    nodes = tree.nodes
    values = [n.value for n in nodes.values()]
    lo, hi = min(values), max(values)
    col_w, row_h, left, top = (150 if tree.depth <= 6 else 110), 34, 40, 48
    w = left + col_w * tree.depth + 260
    h = top + row_h * max(1, len(tree.leaves)) + 10
    X = lambda n: left + col_w * n.depth  # noqa: E731, N806
    Y = lambda n: top + row_h * n.y  # noqa: E731, N806
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="tree-svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img">']
    for n in nodes.values():
        if n.node == -1:
            continue
        p = nodes[n.parent]
        xm = (X(p) + X(n)) / 2
        parts.append(f'<path d="M{X(p):.1f},{Y(p):.1f} C{xm:.1f},{Y(p):.1f} {xm:.1f},{Y(n):.1f} {X(n):.1f},{Y(n):.1f}" fill="none" '
                     f'stroke="{"#fca5a5" if not n.valid else "#cbd5e1"}" stroke-width="{1 + 3 * len(n.episodes) / len(eps):.1f}"/>')
    for n in nodes.values():
        x, y = X(n), Y(n)
        colour = _value_colour(n.value, lo, hi)
        r = 9 if n.branch else 6
        kind = "root" if n.node == -1 else "leaf" if n.is_leaf else "branch" if n.branch else "inner"
        tip = (("reset state (root)" if n.node == -1 else f"turn {n.depth - 1} · node {n.node}\naction: {n.action[:200]}\nreward {n.reward:+.3f}")
               + f"\nvalue (mean return of {len(n.leaf_returns)} leaves below) {n.value:.4f}" + (f"\nbranch point: {len(n.children)} children" if n.branch else ""))
        ring = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r + 4}" fill="none" stroke="#2563eb" stroke-width="2"/>' if n.branch else ""
        dot = (f'<g class="node {kind}" data-node="{n.node}" data-value="{n.value!r}" data-leaves="{len(n.leaf_returns)}" data-children="{len(n.children)}">'
               f'{ring}<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{colour}" stroke="#fff" stroke-width="1.5"><title>{e(tip)}</title></circle>'
               f'<text x="{x:.1f}" y="{y - r - 5:.1f}" font-size="10" text-anchor="middle" fill="#374151">{n.value:.2f}</text>')
        if n.is_leaf and n.node != -1:
            i = n.episodes[0]
            ep = eps[i]
            label = f'{ep.episode_id} · return {ep.total_reward:+.3f}{" ✓" if ep.success else ""}'
            dot += (f'<a href="{e(links.episode(src, rows[i], est))}" class="leaf-link" data-row="{rows[i]}">'
                    f'<text x="{x + r + 6:.1f}" y="{y + 4:.1f}" font-size="11" fill="#2563eb">{e(label)}</text></a>')
            dot = dot.replace(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}"', f'<a href="{e(links.episode(src, rows[i], est))}"><circle cx="{x:.1f}" cy="{y:.1f}" r="{r}"', 1)
            dot = dot.replace("</circle>", "</circle></a>", 1)
        parts.append(dot + "</g>")
    for d in range(tree.depth + 1):
        parts.append(f'<text x="{left + col_w * d}" y="14" font-size="10" text-anchor="middle" fill="#6b7280">{"root" if d == 0 else f"turn {d - 1}"}</text>')
    parts.append("</svg>")
    n_branch = sum(1 for n in nodes.values() if n.branch)
    meta = "".join(f"<div><span>{k}</span>{v}</div>" for k, v in (
        ("group", f'<a href="{e(links.group(src, group, "grpo", "tree"))}">{e(group)}</a>'), ("leaves (episodes)", str(len(tree.leaves))),
        ("nodes (turns)", str(len(nodes) - 1)), ("branch points", f'<b id="n-branch">{n_branch}</b>'),
        ("root value (mean return)", f"{nodes[-1].value:.3f}"), ("shape", "tree" if is_tree(eps) else "independent chains (no shared turn)")))
    legend = (f'<div class="legend"><span>node colour = value: mean return of the leaves below it, from '
              f'<b style="color:{_value_colour(lo, lo, hi)}">{lo:.3g}</b> to <b style="color:{_value_colour(hi, lo, hi)}">{hi:.3g}</b></span>'
              f'<span>ringed = branch point (more than one child)</span><span>edge width = episodes through it; red edge = invalid action</span>'
              f'<span>click a leaf for its episode</span></div>')
    return (f'<h1>Tree <span class="mute">{e(group)}</span></h1><div class="card meta">{meta}</div><div class="card">{legend}</div>'
            f'<div class="card" style="overflow-x:auto">{"".join(parts)}</div>')
