"""MCP-SQLite-v0 from a venv run by a relative path (issue 38): ``../venv/bin/python`` makes
``sys.executable`` ``/cwd/../venv/bin/python``, a path the sandbox cannot resolve (it does not
show the cwd), so the server never started. The venv's own site-packages must still be the
server's (they hold the mcp packages here, as after ``pip install -e ".[mcp]"`` in a venv)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

pytest.importorskip("mcp_server_sqlite")

_PLAY = """
import json, sys, turngym
assert sys.prefix != sys.base_prefix and not sys.executable.startswith(sys.prefix), sys.executable  # a venv, run relatively
env = turngym.make("turngym/MCP-SQLite-v0", restart_each_episode=True)
env.reset(seed=3)
obs, reward, term, trunc, info = env.step(json.dumps({"name": "list_tables", "arguments": {}}))
env.close()
print(json.dumps({"infra_error": info["infra_error"], "obs": obs[:300]}))
"""


@pytest.mark.skipif(sys.prefix != sys.base_prefix, reason="the test venv's packages link to the base interpreter's site-packages")
def test_a_venv_run_by_a_relative_path_starts_the_server(tmp_path: Path) -> None:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(tmp_path / "venv")
    (tmp_path / "work").mkdir()
    inner = Path(subprocess.check_output([tmp_path / "venv/bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                         text=True).strip())
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():  # "installed" into the venv's own site-packages
        if not (inner / entry.name).exists():
            (inner / entry.name).symlink_to(entry)
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(["../venv/bin/python", "-c", _PLAY], cwd=tmp_path / "work", capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(repo)})
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["infra_error"] is None, result
    assert "employees" in result["obs"] or "projects" in result["obs"], result["obs"]
