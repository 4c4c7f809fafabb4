"""Headless Chromium drives `turngym view` on a short real training run: episodes → episode → group → runs.

Chromium is Debian's (`apt-get install chromium`), driven over the DevTools protocol with
`websockets`; nothing downloads a browser. Screenshots go to the test's tmp dir (and to
$TURNGYM_VIEW_SHOTS when set, for people to look at).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y chromium): browser test skipped")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Browser:
    """The smallest DevTools client: one page, commands in order, events collected."""

    def __init__(self, profile: Path) -> None:
        from websockets.sync.client import connect

        self.proc = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                                      "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1400,1000", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not start")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10).read())
        page = next(t for t in targets if t["type"] == "page")
        self._stack = ExitStack()  # websockets wants connect() used as a context manager
        self.ws = self._stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None))
        self.n = 0
        self.errors: list[str] = []
        for domain in ("Page", "Runtime", "Log"):
            self.cmd(f"{domain}.enable")

    def _event(self, msg: dict[str, Any]) -> None:
        m, p = msg.get("method"), msg.get("params", {})
        if m == "Runtime.exceptionThrown":
            self.errors.append(json.dumps(p["exceptionDetails"])[:500])
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append(json.dumps(p.get("args"))[:500])
        elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
            self.errors.append(p["entry"].get("text", "")[:500])

    def cmd(self, method: str, **params: Any) -> dict[str, Any]:
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:  # generous: a page whose server is busy tokenizing blocks evaluation on a loaded CI machine
            msg = json.loads(self.ws.recv(timeout=120))
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def js(self, expr: str) -> Any:
        return self.cmd("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)["result"].get("value")

    def wait_load(self, url_part: str) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.js("document.readyState") == "complete" and url_part in (self.js("location.href") or ""):
                return
            time.sleep(0.1)
        raise TimeoutError(f"page {url_part!r} did not load")

    def shot(self, path: Path) -> None:
        h = self.js("Math.min(document.documentElement.scrollHeight, 2400)")
        self.cmd("Emulation.setDeviceMetricsOverride", width=1400, height=int(h), deviceScaleFactor=1, mobile=False)
        path.write_bytes(base64.b64decode(self.cmd("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("view_run") / "run"
    cmd = [sys.executable, "-m", "turngym.cli", "train", "--steps", "2", "--out", str(out), "--quiet", "--set", "eval_episodes=8",
           "--set", "warmup_steps=5", "--set", "demo_episodes=32", "--set", "groups_per_step=2", "--set", "group_size=4"]
    subprocess.run(cmd, check=True, timeout=600, capture_output=True)
    assert (out / "episodes.jsonl").exists() and (out / "metrics.jsonl").exists()
    return out


def test_click_through_the_viewer(run_dir: Path, tmp_path: Path) -> None:
    from turngym.rollout import load_episodes

    shots = Path(os.environ.get("TURNGYM_VIEW_SHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    with _serve(run_dir) as base:
        browser = Browser(tmp_path / "profile")
        try:
            eps = list(load_episodes(run_dir / "episodes.jsonl"))

            browser.cmd("Page.navigate", url=base + "/")
            browser.wait_load("/")
            assert browser.js("document.querySelectorAll('#episodes tbody tr').length") == len(eps)
            browser.shot(shots / "episodes.png")

            # click a row (not its link): the row's handler opens the episode
            browser.js("document.querySelector('#episodes tbody tr[data-row=\"2\"] td:nth-child(3)').click()")
            browser.wait_load("/episode")
            shown = browser.js("[...document.querySelectorAll('#turns tr.turn td[data-reward]')].map(td => td.dataset.reward)")
            assert [float(x) for x in shown] == [t.reward for t in eps[2].turns]
            assert float(browser.js("document.getElementById('ep-return').dataset.value")) == eps[2].total_reward
            browser.js("document.querySelector('#turns details')?.setAttribute('open', '')")
            browser.shot(shots / "episode.png")

            browser.js("document.getElementById('group-link').click()")
            browser.wait_load("/group")
            assert browser.js("document.querySelectorAll('#group-grid [data-episode]').length") == 1  # evaluation episodes: groups of one
            browser.shot(shots / "group.png")

            browser.cmd("Page.navigate", url=base + "/runs")
            browser.wait_load("/runs")
            assert browser.js("document.querySelectorAll('svg[data-metric]').length") >= 3
            browser.shot(shots / "runs.png")
            assert browser.errors == [], browser.errors
        finally:
            browser.close()
    for name in ("episodes", "episode", "group", "runs"):
        assert (shots / f"{name}.png").stat().st_size > 5000


@contextmanager
def _serve(path: Path) -> Iterator[str]:
    """`turngym view PATH` on a free port, as a user starts it; yields its base URL."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "turngym.cli", "view", str(path), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = server.stdout.readline() if server.stdout else ""
        assert f"http://127.0.0.1:{port}/" in line, line
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(base + "/runs", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(10)


def test_tokens_and_tree_pages(run_dir: Path, tmp_path: Path) -> None:
    """Episode → Tokens on the trained model's own episodes (mask = the renderer's), then a tree rollout's Tree page → a leaf."""
    import turngym
    from turngym.agents import RandomAgent
    from turngym.agents.render import render_episode
    from turngym.rollout import load_episodes, run_tree, save_episodes
    from turngym.viewer.tokens import find_tokenizer_dir

    shots = Path(os.environ.get("TURNGYM_VIEW_SHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    tree_dir = run_dir / "trees"  # a second source beside the run's episodes (sorted after episodes.jsonl)
    tree_dir.mkdir(exist_ok=True)
    tree_eps = run_tree(lambda: turngym.make("turngym/Math-v0", max_turns=4), RandomAgent(seed=1), [1], branching=(3, 2), env_id="turngym/Math-v0").episodes
    save_episodes(tree_eps, tree_dir / "tree_episodes.jsonl")
    eps = list(load_episodes(run_dir / "episodes.jsonl"))
    row = next(i for i, ep in enumerate(eps) if ep.turns and all(t.token_ids for t in ep.turns))
    from transformers import AutoTokenizer

    tok_dir = find_tokenizer_dir(run_dir)
    assert tok_dir is not None
    sample = render_episode(eps[row], AutoTokenizer.from_pretrained(tok_dir))
    browser = None
    try:
        with _serve(run_dir) as base:
            browser = Browser(tmp_path / "profile")
            browser.cmd("Page.navigate", url=f"{base}/episode?src=0&row={row}")
            browser.wait_load("/episode")
            browser.js("document.getElementById('tokens-link').click()")
            browser.wait_load("/tokens")
            assert browser.js("document.getElementById('tokens').dataset.rendered") == "1"
            ids = browser.js("[...document.querySelectorAll('#tokens .tok')].map(s => +s.dataset.id)")
            mask = browser.js("[...document.querySelectorAll('#tokens .tok')].map(s => +s.dataset.mask)")
            assert ids == sample.input_ids and mask == sample.loss_mask
            grey = browser.js("[...document.querySelectorAll('#tokens .tok.ctx')].map(s => getComputedStyle(s).backgroundColor)")
            assert set(grey) == {"rgb(243, 244, 246)"}  # every mask-0 token is drawn grey
            browser.shot(shots / "tokens.png")

            browser.cmd("Page.navigate", url=f"{base}/tree?src=1")
            browser.wait_load("/tree")
            browser.js("document.querySelector('#tree-groups tr.click td').click()")
            browser.wait_load("g=")
            assert browser.js("document.querySelectorAll('#tree-svg g.node.leaf').length") == len(tree_eps)
            kids: dict[int, set[int]] = {}
            for ep in tree_eps:
                for t in ep.turns:
                    kids.setdefault(t.parent, set()).add(t.node)
            assert browser.js("document.getElementById('n-branch').textContent") == str(sum(len(k) > 1 for k in kids.values()))
            browser.shot(shots / "tree.png")
            browser.js("document.querySelector('#tree-svg a.leaf-link').dispatchEvent(new MouseEvent('click', {bubbles: true}))")
            browser.wait_load("/episode")
            assert browser.js("document.querySelectorAll('#turns tr.turn').length") >= 1

            browser.cmd("Page.navigate", url=f"{base}/tree?src=0")  # the run's own episodes are no tree
            browser.wait_load("/tree")
            assert "run_tree" in browser.js("document.getElementById('tree-howto').textContent")
            browser.shot(shots / "tree_none.png")
            assert browser.errors == [], browser.errors
    finally:
        if browser is not None:
            browser.close()
    for name in ("tokens", "tree", "tree_none"):
        assert (shots / f"{name}.png").stat().st_size > 5000
