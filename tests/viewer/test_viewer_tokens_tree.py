"""The Tokens and Tree pages of `turngym view`: their numbers equal the trainer's renderer and the tree statistics.

The Tokens page is checked on a real episode of the embedded tiny model (generated ids and
log-probs recorded by the rollout), against :func:`render_episode` + :func:`token_advantages`,
the two calls the trainer makes. The Tree page is checked against the ``tree`` estimator's own
node values (:func:`tree_stats`), computed here from the file, not from the viewer.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import turngym
from turngym.agents import RandomAgent
from turngym.rollout import load_episodes, run_tree, save_episodes, to_turn_table
from turngym.trainers.advantages import compute_advantages
from turngym.trainers.advantages._tree import tree_stats
from turngym.trainers.advantages.table import as_turn_table
from turngym.viewer import create_app
from turngym.viewer.pages import TREE_HOWTO

ENV = "turngym/Math-v0"


def _env() -> turngym.TurngymEnv:
    return turngym.make(ENV, min_steps=1, max_steps=1, max_turns=3)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree of tiny-model episodes (token ids + log-probs) and the tokenizer saved beside them, like a run dir."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from turngym.agents.hf import HFPolicy
    from turngym.agents.tiny import build_tiny_model

    out = tmp_path_factory.mktemp("view_tiny")
    path = build_tiny_model()
    tok = AutoTokenizer.from_pretrained(path)
    policy = HFPolicy(AutoModelForCausalLM.from_pretrained(path), tok, temperature=1.0, max_new_tokens=6, seed=0)
    eps = run_tree(_env, policy, [0], branching=(2, 2), env_id=ENV).episodes
    assert all(t.token_ids and t.logprobs for ep in eps for t in ep.turns)
    save_episodes(eps, out / "episodes.jsonl")
    tok.save_pretrained(out / "warm_start")
    return out


def _tiny_with_spread_returns(tiny_dir: Path, dst: Path) -> Path:
    """The same real episodes with the last reward of each leaf set apart, so advantages are nonzero."""
    dst.mkdir()
    shutil.copytree(tiny_dir / "warm_start", dst / "warm_start")
    lines = []
    for k, line in enumerate((tiny_dir / "episodes.jsonl").read_text().splitlines()):
        d = json.loads(line)
        d["turns"][-1]["reward"] = float(k)
        lines.append(json.dumps(d))
    (dst / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    return dst


def _group_advantages(eps: list, row: int, est: str) -> list[float]:
    group = [i for i, ep in enumerate(eps) if ep.group == eps[row].group]
    table = to_turn_table([eps[i] for i in group])
    adv = compute_advantages(est, table)
    return adv[table["episode"] == group.index(row)].tolist()


def _tokens(text: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'data-(\w+)="([^"]*)"', m)) for m in re.findall(r'<span class="tok [^"]*"([^>]*)>', text)]


@pytest.mark.parametrize("est", ["tree", "grpo"])
def test_tokens_page_is_the_trainers_sample(tiny_dir: Path, tmp_path: Path, est: str) -> None:
    from transformers import AutoTokenizer

    from turngym.agents.render import render_episode
    from turngym.trainers.batch import token_advantages

    src = _tiny_with_spread_returns(tiny_dir, tmp_path / "run")
    eps = list(load_episodes(src / "episodes.jsonl"))
    tok = AutoTokenizer.from_pretrained(src / "warm_start")
    client = TestClient(create_app(src))
    for row in (0, 3):
        sample = render_episode(eps[row], tok)
        turn_adv = _group_advantages(eps, row, est)
        assert any(a != 0 for a in turn_adv)
        want_adv = token_advantages(sample, turn_adv)
        r = client.get("/tokens", params={"src": 0, "row": row, "est": est})
        assert r.status_code == 200 and 'data-rendered="1"' in r.text
        shown = _tokens(r.text)
        assert [int(t["id"]) for t in shown] == sample.input_ids
        assert [int(t["mask"]) for t in shown] == sample.loss_mask  # grey exactly where the loss does not look
        assert [float(t["adv"]) for t in shown] == want_adv
        assert [float(t["logprob"]) for t in shown if "logprob" in t] == [lp for lp, m in zip(sample.logprobs, sample.loss_mask) if m]
        assert all(("background:rgba" in m) == (t["mask"] == "1") for m, t in zip(re.findall(r'<span class="tok [^>]*>', r.text), shown))
        pieces = [html.unescape(p) for p in re.findall(r'<span class="tok [^>]*>(.*?)</span>', r.text, re.S)]
        decoded = [tok.decode([i]) for i in sample.input_ids]
        plain = [k for k, d in enumerate(decoded) if d and not any(c.isspace() for c in d)]
        assert plain and [pieces[k] for k in plain] == [decoded[k] for k in plain]
        assert f'id="n-policy">{sum(sample.loss_mask)}<' in r.text


def test_tokens_page_without_tokenizer_shows_the_generated_ids(tiny_dir: Path, tmp_path: Path) -> None:
    shutil.copy(tiny_dir / "episodes.jsonl", tmp_path / "episodes.jsonl")
    eps = list(load_episodes(tmp_path / "episodes.jsonl"))
    r = TestClient(create_app(tmp_path / "episodes.jsonl")).get("/tokens?src=0&row=1&est=grpo")
    assert r.status_code == 200 and 'data-rendered="0"' in r.text and "no tokenizer under this path" in r.text
    assert [int(t["id"]) for t in _tokens(r.text)] == [i for t in eps[1].turns for i in t.token_ids]


def test_tokens_page_of_a_scripted_episode_shows_no_tokens(eval_dir: Path) -> None:
    eps = list(load_episodes(eval_dir / "episodes.jsonl"))
    row = 5
    assert all(t.token_ids is None for t in eps[row].turns)
    r = TestClient(create_app(eval_dir)).get(f"/tokens?src=0&row={row}&est=gigpo")
    assert r.status_code == 200 and 'id="no-tokens"' in r.text and 'class="tok ' not in r.text
    shown = [float(x) for x in re.findall(r'data-adv="([^"]+)"', r.text)]
    assert shown == _group_advantages(eps, row, "gigpo")
    for t in eps[row].turns:
        assert html.escape(t.action) in r.text


@pytest.fixture(scope="module")
def tree_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("view_tree") / "tree_episodes.jsonl"
    eps = run_tree(lambda: turngym.make(ENV, max_turns=4), RandomAgent(seed=3), [1, 2], branching=(3, 2), env_id=ENV).episodes
    assert len({ep.total_reward for ep in eps}) > 1  # outcomes that differ, so node values differ
    save_episodes(eps, out)
    return out


def test_tree_page_node_values_equal_tree_stats(tree_file: Path) -> None:
    eps = list(load_episodes(tree_file))
    client = TestClient(create_app(tree_file))
    groups = sorted({ep.group for ep in eps})
    index = client.get("/tree?src=0").text
    assert all(html.escape(g) in index for g in groups)
    for g in groups:
        rows = [i for i, ep in enumerate(eps) if ep.group == g]
        members = [eps[i] for i in rows]
        table = as_turn_table(to_turn_table(members))
        table.require("tree", "node", "parent")
        st = tree_stats(table)
        want: dict[int, float] = {}
        children: dict[int, set[int]] = {}
        for k, ep in enumerate(members):
            for t in ep.turns:
                j = int(((table.episode == k) & (table.turn == t.index)).nonzero()[0][0])
                want[t.node] = float(st.value[j])
                children.setdefault(t.parent, set()).add(t.node)
        r = client.get("/tree", params={"src": 0, "g": g})
        assert r.status_code == 200
        shown = {int(n): float(v) for n, v in re.findall(r'data-node="(-?\d+)" data-value="([^"]+)"', r.text)}
        assert shown.pop(-1) == pytest.approx(sum(ep.total_reward for ep in members) / len(members))
        assert shown.keys() == want.keys()
        assert all(shown[n] == pytest.approx(want[n], abs=1e-12) for n in want)
        assert f'id="n-branch">{sum(1 for c in children.values() if len(c) > 1)}<' in r.text
        assert sorted(int(x) for x in re.findall(r'class="leaf-link" data-row="(\d+)"', r.text)) == rows
        # the group page and every episode page of a tree link here
        assert "tree-link" in client.get("/group", params={"src": 0, "g": g}).text
        assert "tree-link" in client.get(f"/episode?src=0&row={rows[0]}").text


def test_tree_page_without_trees_says_how_to_make_them(eval_dir: Path, tmp_path: Path) -> None:
    client = TestClient(create_app(eval_dir))
    r = client.get("/tree?src=0")
    assert r.status_code == 200 and 'id="no-trees"' in r.text and html.escape(TREE_HOWTO) in r.text
    eps = list(load_episodes(eval_dir / "episodes.jsonl"))
    assert "tree-link" not in client.get("/group", params={"src": 0, "g": eps[0].group}).text  # independent episodes: no tree
    assert client.get("/tree?src=0&g=nope").status_code == 404
    # the command the page gives works: it writes tree episodes the page then draws
    make = TREE_HOWTO.split(" && ")[0]
    subprocess.run(make.replace("python ", f"{sys.executable} ", 1), shell=True, check=True, cwd=tmp_path, timeout=120)
    made = TestClient(create_app(tmp_path / "tree_episodes.jsonl")).get("/tree?src=0")
    assert 'id="tree-groups"' in made.text and made.text.count('<tr class="click"') == 3
