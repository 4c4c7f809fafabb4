"""SWE-v0 graded inside the container backend: same episodes as on bubblewrap, attacks still score 0.

The SWE grader starts the image's ``python3 -I -S`` and imports pytest only from the site
directories the sandbox's runtime names, so these runs fail if the image lacks pytest or the
runtime names the host's directories instead of the image's.
"""

from __future__ import annotations

import json
import re

import pytest

import turngym
from tests.docker.conftest import ROOT, play_traces
from tests.security.test_swe_grader import FORCE_PASS_HOOK
from turngym.envs.swe import testing
from turngym.envs.swe.env import SWEEnv
from turngym.envs.swe.tasks import SWETask, load_tasks
from turngym.sandbox.docker import DockerSandbox

SEEDS = (0, 1, 2)


@pytest.fixture
def grade_in():
    """``grade_in(sandbox)``: route SWE test runs through that sandbox (cache cleared each time)."""
    before = testing._executor

    def use(sandbox) -> None:
        testing.set_executor(testing.SandboxExecutor(sandbox))

    yield use
    testing.set_executor(before)


@pytest.fixture(scope="module")
def task() -> SWETask:
    return next(t for t in load_tasks() if t.id == "swe/lrucache/CacheStats.hit_rate/swap_operator/689")


def test_the_image_has_pytest_and_the_runtime_names_the_images_site_dirs(docker_sb):
    site = docker_sb.python.path
    assert site and all(d.startswith("/opt/venv/") for d in site), site  # the image's venv, not the host's
    res = docker_sb.run(["python3", "-I", "-S", "-c", "import sys; sys.path[:0] = sys.argv[1:]; import pytest, pluggy; "
                         "print(pytest.__version__, pytest.__file__)", *site])
    assert res.exit_code == 0, res.stderr
    assert res.stdout.split()[1].startswith(site[0])


def test_another_interpreter_of_the_image_gets_its_own_site_dirs(docker_client, sandbox_image):
    sb = DockerSandbox(image=sandbox_image, client=docker_client, python="/usr/bin/python3")  # the base's, no venv
    try:
        assert not any(d.startswith("/opt/venv/") for d in sb.python.path), sb.python.path
        assert sb.python.executable == "/usr/bin/python3"
    finally:
        sb.close()


def test_the_dockerfile_installs_the_pinned_sandbox_requirements(images):
    dockerfile = (ROOT / "docker/sandbox.Dockerfile").read_text()
    default = re.search(r'^ARG PACKAGES="([^"]*)"', dockerfile, re.MULTILINE)
    assert default and default.group(1) == images.sandbox_packages()
    assert "pytest==" in images.sandbox_packages()


def _episodes(seeds, sampled: int = 2) -> list[list]:
    """Random tool calls, then the oracle's until the episode ends: the whole trace per seed."""
    env = turngym.make("turngym/SWE-v0")
    try:
        return play_traces(env, seeds, sampled, 8)
    finally:
        env.close()


def _noop(task: SWETask) -> dict:
    env = SWEEnv(tasks=[task])
    env.reset(options={"task": task})
    calls = [{"name": "run_tests", "arguments": {}}, {"name": "submit", "arguments": {}}]
    _, reward, term, _, info = env.step(json.dumps(calls))
    assert term
    return {"reward": reward, **info}


def test_swe_episodes_match_bubblewrap_on_the_same_seeds(docker_sb, bwrap_sb, grade_in, task):
    grade_in(docker_sb)
    on_docker, noop_docker = _episodes(SEEDS), _noop(task)
    grade_in(bwrap_sb)
    on_bwrap, noop_bwrap = _episodes(SEEDS), _noop(task)
    assert on_docker == on_bwrap
    assert all(ep[-1][2] and ep[-1][1] == 1.0 for ep in on_docker)  # the oracle resolved every task
    assert noop_docker == noop_bwrap
    assert noop_docker["reward"] == 0.0 and noop_docker["infra_error"] is None
    assert noop_docker["signals"]["f2p_passing"] < 1.0 and noop_docker["signals"]["imports_ok"] == 1.0


def _submit_files(task: SWETask, files: dict[str, str]) -> dict:
    env = SWEEnv(tasks=[task])
    env.reset(options={"task": task})
    calls = [{"name": "create_file", "arguments": {"path": p, "content": c, "overwrite": True}} for p, c in files.items()]
    obs, reward, term, _, info = env.step(json.dumps([*calls, {"name": "submit", "arguments": {}}]))
    assert term and info["action_valid"], obs
    return {"reward": reward, **info}


def test_hidden_evaluation_attacks_score_zero_in_the_container(docker_sb, grade_in, task):
    grade_in(docker_sb)
    for files in (
        {"conftest.py": FORCE_PASS_HOOK},  # forge every verdict from a conftest
        {task.path: task.buggy_source + "import os, signal\nos.kill(-1, signal.SIGKILL)\n"},  # kill the grader
        {task.path: task.buggy_source + "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n"},
    ):
        info = _submit_files(task, files)
        assert info["infra_error"] is None, info["infra_error"]
        assert info["reward"] == 0.0 and info["signals"]["resolved"] == 0.0, (list(files), info["outcome"])
    # the honest fix beside the forging conftest still resolves: the grader is not simply failing
    fixed = task.buggy_source.replace(task.gold_old, task.gold_new, 1)
    info = _submit_files(task, {task.path: fixed, "conftest.py": FORCE_PASS_HOOK})
    assert info["reward"] == 1.0 and info["outcome"]["reason"] == ""
