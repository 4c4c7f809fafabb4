"""The viewer's web app (Starlette, served by uvicorn) and its one-file static export.

The app only reads PATH; it binds 127.0.0.1 unless told otherwise because the episodes it shows
may hold anything an agent or a task wrote. Each response carries a Content-Security-Policy that
allows nothing to load from elsewhere: the pages are self-contained by construction.
"""

from __future__ import annotations

import argparse
import hashlib
import html
from pathlib import Path
from typing import Any

from turngym.viewer.data import ViewerData
from turngym.viewer.index import SORT_KEYS
from turngym.viewer.pages import (
    Links,
    episode_page,
    episodes_page,
    group_page,
    layout,
    runs_page,
    tokens_page,
    tree_page,
)

__all__ = ["create_app", "run_command", "setup_parser", "write_static"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; form-action 'self'"
DEFAULT_EST = "gigpo"


def _estimators() -> list[str]:
    from turngym.trainers.advantages import ESTIMATORS

    return sorted(ESTIMATORS)


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        return default


def create_app(path: str | Path | ViewerData, tokenizer: str | Path | None = None) -> Any:
    """A Starlette app over ``path`` (see :class:`~turngym.viewer.data.ViewerData`); ``tokenizer``
    decodes the Tokens page when PATH holds none."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    data = path if isinstance(path, ViewerData) else ViewerData(path, tokenizer)
    links = Links()
    ests = _estimators()

    def page(title: str, body: str, active: str = "", status: int = 200) -> HTMLResponse:
        return HTMLResponse(layout(title, body, links, active), status_code=status, headers={"Content-Security-Policy": CSP})

    def missing(what: str) -> HTMLResponse:
        return page("not found", f'<h1>Not found</h1><div class="card">{html.escape(what)}</div>', status=404)

    def est_of(request: Request, key: str = "est", default: str = DEFAULT_EST) -> str:
        name = request.query_params.get(key) or default
        return name if name in ests else default

    async def episodes(request: Request) -> HTMLResponse:
        if not data.episode_files:
            return page("Runs", runs_page(data, None, links), "Runs")
        qp = request.query_params
        src = _int(qp.get("src"), 0)
        if not 0 <= src < len(data.episode_files):
            return missing(f"no episode source {src}")
        params = {k: qp.get(k, "") for k in ("q", "env", "success", "infra", "sort", "desc")}
        params["sort"] = params["sort"] if params["sort"] in SORT_KEYS else "row"
        params["src"] = str(src) if src else ""
        idx = data.index(src)
        pg = idx.query(q=params["q"], env=params["env"], success=params["success"], infra=params["infra"], sort=params["sort"],
                       desc=bool(params["desc"]), page=_int(qp.get("page"), 0), per_page=min(max(_int(qp.get("per_page"), 50), 1), 500))
        return page("Episodes", episodes_page(data, src, pg, params, links, data.estimator(src, DEFAULT_EST)), "Episodes")

    async def episode(request: Request) -> HTMLResponse:
        qp = request.query_params
        src, row = _int(qp.get("src"), 0), _int(qp.get("row"), -1)
        try:
            idx = data.index(src)
            if not 0 <= row < len(idx):
                raise IndexError(f"no episode row {row}")
        except IndexError as exc:
            return missing(str(exc))
        return page(f"Episode {row}", episode_page(data, src, row, est_of(request, default=data.estimator(src, DEFAULT_EST)), ests, links), "Episodes")

    async def group(request: Request) -> HTMLResponse:
        qp = request.query_params
        src, g = _int(qp.get("src"), 0), qp.get("g", "")
        try:
            if g not in data.index(src).groups:
                raise IndexError(f"no group {g!r}")
        except IndexError as exc:
            return missing(str(exc))
        return page(f"Group {g}", group_page(data, src, g, est_of(request, "a", "grpo"), est_of(request, "b", "gigpo"), ests, links), "Episodes")

    async def tokens(request: Request) -> HTMLResponse:
        qp = request.query_params
        src, row = _int(qp.get("src"), 0), _int(qp.get("row"), -1)
        try:
            if not 0 <= row < len(data.index(src)):
                raise IndexError(f"no episode row {row}")
        except IndexError as exc:
            return missing(str(exc))
        return page(f"Tokens {row}", tokens_page(data, src, row, est_of(request, default=data.estimator(src, DEFAULT_EST)), ests, links), "Episodes")

    async def tree(request: Request) -> HTMLResponse:
        qp = request.query_params
        src, g = _int(qp.get("src"), 0), qp.get("g") or None
        try:
            if g is not None and g not in data.index(src).groups:
                raise IndexError(f"no group {g!r}")
            data.index(src)
        except IndexError as exc:
            return missing(str(exc))
        return page(f"Tree {g or ''}", tree_page(data, src, g, est_of(request, "est", "tree"), links), "Tree")

    async def runs(request: Request) -> HTMLResponse:
        return page("Runs", runs_page(data, request.query_params.getlist("run") or None, links), "Runs")

    return Starlette(routes=[Route("/", episodes), Route("/episode", episode), Route("/group", group), Route("/runs", runs),
                              Route("/tokens", tokens), Route("/tree", tree)])


class _StaticLinks(Links):
    """Links to sections of the one exported file."""

    static = True

    def episodes(self, **params: Any) -> str:
        return "#episodes"

    def episode(self, src: int, row: int, est: str) -> str:
        return f"#episode-{src}-{row}"

    def group(self, src: int, group: str, a: str, b: str) -> str:
        return f"#group-{src}-{hashlib.sha1(group.encode()).hexdigest()[:12]}"

    def runs(self) -> str:
        return "#runs"


_STATIC_JS = """
function show(){var id=(location.hash||'#episodes').slice(1);var s=document.getElementById(id)?id:'episodes';
 document.querySelectorAll('section.page').forEach(function(x){x.style.display=x.id===s?'block':'none';});window.scrollTo(0,0);}
window.addEventListener('hashchange',show);show();
"""


def write_static(path: str | Path, out: str | Path, *, limit: int = 50, src: int = 0, estimator: str = DEFAULT_EST) -> Path:
    """One self-contained HTML file: the first ``limit`` episodes of source ``src``, their episode
    and group pages, and the runs page; every link is an anchor inside the file."""
    data = ViewerData(path)
    links = _StaticLinks()
    ests = _estimators()
    sections: list[tuple[str, str]] = []
    if data.episode_files:
        idx = data.index(src)
        pg = idx.query(per_page=max(1, limit))
        sections.append(("episodes", episodes_page(data, src, pg, {}, links, estimator)))
        seen: set[str] = set()
        for r in pg.rows:
            sections.append((links.episode(src, r, estimator)[1:], episode_page(data, src, r, estimator, ests, links)))
            g = str(idx.group[r])
            if g not in seen:
                seen.add(g)
                sections.append((links.group(src, g, "grpo", "gigpo")[1:], group_page(data, src, g, "grpo", estimator if estimator != "grpo" else "gigpo", ests, links)))
    sections.append(("runs", runs_page(data, None, links)))
    body = "".join(f'<section class="page" id="{sid}">{content}</section>' for sid, content in sections)
    doc = layout(f"{data.root.name}", body, links).replace("</body>", f"<script>{_STATIC_JS}</script></body>")
    out = Path(out)
    from turngym.trainers.atomic import write_text

    write_text(out, doc)
    return out


# ---------------------------------------------------------------------- command line
def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", type=Path, help="a run directory (turngym train/study), an `eval --out` directory, or an episodes JSONL")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    p.add_argument("--static", type=Path, metavar="OUT.html", help="write one self-contained HTML file instead of serving")
    p.add_argument("--limit", type=int, default=50, help="episodes in the --static file (default: 50)")
    p.add_argument("--tokenizer", help="tokenizer (directory or hub name) to decode the Tokens page when PATH holds none")


def run_command(args: argparse.Namespace) -> int:
    if args.static is not None:
        out = write_static(args.path, args.static, limit=args.limit)
        print(f"wrote {out}")
        return 0
    import uvicorn

    app = create_app(args.path, getattr(args, "tokenizer", None))
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"turngym view: serving {args.path} at http://{host}:{args.port}/  (Ctrl-C to stop)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
