"""HTTP-level tests of `turngym view`: the numbers on each page equal the files and the estimators."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from turngym.cli import main
from turngym.rollout import load_episodes, to_turn_table
from turngym.trainers.advantages import compute_advantages
from turngym.viewer import EpisodeIndex, create_app


@pytest.fixture(scope="module")
def client(eval_dir: Path) -> TestClient:
    return TestClient(create_app(eval_dir))


def _floats(pattern: str, text: str) -> list[float]:
    return [float(x) for x in re.findall(pattern, text)]


def test_episodes_table_shows_the_file(client: TestClient, eval_dir: Path) -> None:
    eps = list(load_episodes(eval_dir / "episodes.jsonl"))
    r = client.get("/")
    assert r.status_code == 200 and "default-src 'none'" in r.headers["content-security-policy"]
    assert f'data-total="{len(eps)}"' in r.text
    assert _floats(r'data-return="([^"]+)"', r.text) == [ep.total_reward for ep in eps]
    # sorted by return, descending, ties in file order
    r = client.get("/?sort=return&desc=1&per_page=500")
    want = sorted(range(len(eps)), key=lambda i: (-eps[i].total_reward, i))
    assert [int(x) for x in re.findall(r'data-row="(\d+)"', r.text)] == want
    # filter on success, and paging
    r = client.get("/?success=1&per_page=500")
    assert [int(x) for x in re.findall(r'data-row="(\d+)"', r.text)] == [i for i, ep in enumerate(eps) if ep.success]
    r = client.get("/?per_page=5&page=1")
    assert [int(x) for x in re.findall(r'data-row="(\d+)"', r.text)] == [5, 6, 7, 8, 9]


@pytest.mark.parametrize("est", ["gigpo", "grpo", "rloo"])
def test_episode_page_advantages_equal_compute_advantages(client: TestClient, eval_dir: Path, est: str) -> None:
    eps = list(load_episodes(eval_dir / "episodes.jsonl"))
    row = 5
    group = [i for i, ep in enumerate(eps) if ep.group == eps[row].group]
    table = to_turn_table([eps[i] for i in group])
    adv = compute_advantages(est, table)
    mine = adv[table["episode"] == group.index(row)]
    r = client.get(f"/episode?src=0&row={row}&est={est}")
    assert r.status_code == 200
    shown = np.array(_floats(r'data-adv="([^"]+)"', r.text))
    assert shown.tolist() == mine.tolist() and len(shown) == len(eps[row].turns)
    assert _floats(r'data-reward="([^"]+)"', r.text) == [t.reward for t in eps[row].turns]
    signals = [(html.unescape(k), float(v)) for k, v in re.findall(r'data-signal="([^"]+)" data-value="([^"]+)"', r.text)]
    assert signals == [(k, v) for t in eps[row].turns for k, v in sorted(t.signals.items())]
    for t in eps[row].turns:
        assert html.escape(t.action) in r.text


def test_group_page_shows_two_estimators(client: TestClient, eval_dir: Path) -> None:
    eps = list(load_episodes(eval_dir / "episodes.jsonl"))
    g = eps[0].group
    members = [ep for ep in eps if ep.group == g]
    table = to_turn_table(members)
    r = client.get("/group", params={"src": 0, "g": g, "a": "grpo", "b": "gigpo"})
    assert r.status_code == 200
    for slot, est in (("a", "grpo"), ("b", "gigpo")):
        shown = _floats(rf'data-est="{slot}"><span class="adv" data-adv="([^"]+)"', r.text)
        adv = compute_advantages(est, table)
        # the grid is turn-major: row t holds turn t of each episode
        want = [adv[(table["episode"] == k) & (table["turn"] == t)][0] for t in range(max(len(m.turns) for m in members))
                for k, m in enumerate(members) if t < len(m.turns)]
        assert shown == want


def test_unknown_rows_are_404_and_hostile_text_is_escaped(tmp_path: Path) -> None:
    ep = {"episode_id": "<script>alert(1)</script>", "env_id": "nope/Env-v0", "task_id": "t", "seed": 0, "initial_observation": "<img src=x onerror=alert(1)>",
          "group": "g", "turns": [{"index": 0, "action": "</pre><script>x()</script>", "observation": "o", "reward": 1.0, "terminated": True,
                                   "truncated": False, "signals": {"s": 0.5}, "state_key": "a", "prev_state_key": "b"}], "outcome": {"success": True}}
    (tmp_path / "e.jsonl").write_text(json.dumps(ep) + "\n{half a line")
    c = TestClient(create_app(tmp_path / "e.jsonl"))
    assert c.get("/episode?src=0&row=7").status_code == 404
    assert c.get("/group?src=0&g=zzz").status_code == 404
    for url in ("/", "/episode?src=0&row=0", "/group?src=0&g=g"):
        text = c.get(url).text
        assert "<script>alert" not in text and "<script>x()" not in text and "<img src=x" not in text
    assert "1 unreadable lines skipped" in c.get("/").text
    assert len(EpisodeIndex(tmp_path / "e.jsonl")) == 1


def test_runs_page_plots_every_metric(client: TestClient) -> None:
    r = client.get("/runs")
    for m in ("eval/success", "success", "mean_return", "invalid_rate"):
        assert f'data-metric="{m}"' in r.text


def test_static_export_is_self_contained(eval_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "view.html"
    assert main(["view", str(eval_dir), "--static", str(out), "--limit", "4"]) == 0
    text = out.read_text()
    assert text.count('class="page"') == 1 + 4 + 1 + 1  # table, 4 episodes, their one group, runs
    assert not re.search(r'(src|href)="(https?:)?//', text)  # nothing fetched from elsewhere
    assert 'href="#episode-0-3"' in text


@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_links_open_on_the_runs_own_estimator(eval_dir: Path, tmp_path: Path, algo: str) -> None:
    """A run's episodes link to its own estimator's credit (issue 39: every link said est=gigpo)."""
    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"algo": algo}))
    (run / "samples" / "episodes.jsonl").write_text((eval_dir / "episodes.jsonl").read_text())
    client = TestClient(create_app(run))
    links = re.findall(r'href="[^"]*est=([a-z_]+)', client.get("/").text)
    assert links and set(links) == {algo}
    assert f'value="{algo}" selected' in client.get("/episode?src=0&row=0").text or algo in client.get("/episode?src=0&row=0").text
    plain = TestClient(create_app(eval_dir))  # no run config: the default
    assert set(re.findall(r'href="[^"]*est=([a-z_]+)', plain.get("/").text)) == {"gigpo"}
