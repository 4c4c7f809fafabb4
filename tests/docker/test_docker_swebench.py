"""A SWE-bench-format instance run end to end with ``backend="docker"``, in a locally built image.

The image is built here, offline, the way SWE-bench's are laid out: the sandbox image (pytest
in its venv) plus a real git repository in ``/testbed`` whose history holds ``base_commit``
(and a later commit, so a tree read from the working copy instead of the commit is caught).
The instance (``base_commit``, ``patch``, ``test_patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``)
gets the harness's verdicts: the gold patch resolves it, the empty patch does not, and both
backends agree on every signal.
"""

from __future__ import annotations

import difflib
import io
import json
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from turngym.envs.swe import swebench, testing
from turngym.envs.swe.env import SWEEnv
from turngym.envs.swe.repos import Tree, load_repo

REPO = "local/intervals"
INSTANCE_ID = "local__intervals-7"
IMAGE_TEMPLATE = "turngym-swebench-test.{instance_id}:latest"
PATH = "intervals/__init__.py"
TEST_SRC = "from intervals import Interval\n\n\ndef test_length():\n    assert Interval(2, 5).length == 3\n"
SMOKE_SRC = "from intervals import Interval\n\n\ndef test_contains():\n    assert Interval(0, 2).contains(1)\n"


def _git(cwd: Path, *args: str) -> str:
    ident = ["-c", "user.email=t@t", "-c", "user.name=t"]
    return subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _diff(a: str, b: str, name: str) -> str:
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), f"a/{name}", f"b/{name}"))


def _instance(tmp: Path) -> tuple[Path, Path]:
    """A git repo (base_commit has the bug; a later commit adds a file) and its instance JSONL."""
    repo = tmp / "testbed"
    good = load_repo("intervals")
    buggy = good[PATH].replace("return self.end - self.start", "return self.start - self.end")
    assert buggy != good[PATH]
    files = {p: t for p, t in good.items() if p != "tests/test_intervals.py"}
    Tree({**files, PATH: buggy, "tests/test_smoke.py": SMOKE_SRC}).write_to(repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base_commit = _git(repo, "rev-parse", "HEAD")
    (repo / "LATER.txt").write_text("a commit after base_commit: not part of the task\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "later")
    row = {
        "instance_id": INSTANCE_ID,
        "repo": REPO,
        "base_commit": base_commit,
        "patch": _diff(buggy, good[PATH], PATH),
        "test_patch": "--- /dev/null\n+++ b/tests/test_length.py\n@@ -0,0 +1,5 @@\n"
        + "".join("+" + ln for ln in TEST_SRC.splitlines(True)),
        "FAIL_TO_PASS": json.dumps(["tests/test_length.py::test_length"]),
        "PASS_TO_PASS": json.dumps(["tests/test_smoke.py::test_contains"]),
        "problem_statement": "Interval.length is negative for Interval(2, 5).",
        "version": "0.1",
    }
    data = tmp / "instances.jsonl"
    data.write_text(json.dumps(row) + "\n")
    return data, repo


def _build_image(client, base: str, repo: Path, tag: str) -> float:
    """``FROM base`` + ``COPY testbed /testbed``: no RUN step, so no network is needed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dockerfile = b"ARG BASE\nFROM ${BASE}\nCOPY testbed /testbed\n"
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
        tar.add(repo, arcname="testbed")
    buf.seek(0)
    t0 = time.perf_counter()
    client.images.build(fileobj=buf, custom_context=True, tag=tag, buildargs={"BASE": base}, network_mode="none",
                        rm=True, forcerm=True)
    return time.perf_counter() - t0


@pytest.fixture(scope="module")
def instance(tmp_path_factory, docker_client, sandbox_image) -> Iterator[tuple[Path, Path, str]]:
    tmp = tmp_path_factory.mktemp("swebench")
    data, repo = _instance(tmp)
    image = swebench.image_name(swebench.load_swebench(data)[0], IMAGE_TEMPLATE)
    _build_image(docker_client, sandbox_image, repo, image)
    yield data, repo, image
    docker_client.images.remove(image, force=True)


def _submit(env: SWEEnv, patch: bool) -> dict:
    """One episode: the gold patch applied with the tools (or nothing), then submit."""
    env.reset(seed=0)
    trace = []
    if patch:
        for _ in range(6):
            action = env.oracle_action()
            if '"submit"' in action:
                break
            _, _, term, _, info = env.step(action)
            assert not term and info["infra_error"] is None, info
            trace.append(info["signals"])
    _, reward, term, _, info = env.step(json.dumps({"name": "submit", "arguments": {}}))
    assert term and info["infra_error"] is None, info
    return {"reward": reward, "signals": info["signals"], "outcome": info["outcome"], "trace": trace}


@pytest.fixture
def no_default_executor():
    """Fail any test run that goes to the process-wide executor instead of the instance's image."""
    before = testing._executor

    def refuse(*_args):
        raise AssertionError("a docker-backed instance ran its tests outside its image")

    testing.set_executor(refuse)
    yield
    testing.set_executor(before)


def test_swebench_docker_backend_gold_resolves_empty_does_not(instance, no_leaks, no_default_executor):
    data, repo, image = instance
    env = SWEEnv(swebench=data, backend="docker", image=IMAGE_TEMPLATE)
    try:
        task = env.tasks[0]
        assert env._executors[task.id][0] == image
        start, gold = env.start_tree(task), env.gold_tree(task)
        # the tree is base_commit's (from the image's git history) with test_patch applied
        assert "LATER.txt" not in start and "tests/test_length.py" in start
        assert start[PATH] != gold[PATH]
        gold_run, empty_run = _submit(env, patch=True), _submit(env, patch=False)
    finally:
        env.close()
    assert gold_run["reward"] == 1.0 and gold_run["outcome"]["success"] is True, gold_run
    assert gold_run["signals"]["f2p_passing"] == 1.0 and gold_run["signals"]["p2p_failing"] == 0.0
    assert empty_run["reward"] == 0.0 and empty_run["outcome"]["success"] is False, empty_run
    assert empty_run["signals"]["f2p_passing"] == 0.0 and empty_run["signals"]["imports_ok"] == 1.0


def test_swebench_docker_and_local_backends_agree(instance, no_leaks):
    data, repo, _ = instance
    runs = {}
    for backend in ("docker", "local"):
        env = SWEEnv(swebench=data, backend=backend, image=IMAGE_TEMPLATE, repo_dirs={REPO: repo})
        try:
            runs[backend] = (_submit(env, patch=True), _submit(env, patch=False))
        finally:
            env.close()
    assert runs["docker"] == runs["local"]
    assert [r["reward"] for r in runs["docker"]] == [1.0, 0.0]


def test_swebench_docker_backend_clear_errors(instance, docker_client, tmp_path):
    data, _, _ = instance
    with pytest.raises(Exception, match="not present"):
        SWEEnv(swebench=data, backend="docker", image="turngym-no-such-image.{instance_id}:latest")
    # an instance whose base_commit the image's checkout does not hold is a task error, not a crash
    bad = tmp_path / "bad.jsonl"
    row = json.loads(data.read_text())
    bad.write_text(json.dumps({**row, "base_commit": "0" * 40}) + "\n")
    with pytest.raises(Exception, match="git archive"):
        SWEEnv(swebench=bad, backend="docker", image=IMAGE_TEMPLATE)


def _forge(env: SWEEnv, payload: str) -> dict:
    """One turn: the buggy module with ``payload`` appended, then submit."""
    env.reset(seed=0)
    source = env.start_tree(env.tasks[0])[PATH]
    calls = [{"name": "create_file", "arguments": {"path": PATH, "content": source + payload, "overwrite": True}},
             {"name": "submit", "arguments": {}}]
    _, reward, term, _, info = env.step(json.dumps(calls))
    assert term, info
    return {"reward": reward, **info}


def test_swebench_docker_backend_grades_split_so_the_heap_forgeries_fail(instance, no_leaks, no_default_executor):
    """In the instance's image, the forgeries that resolve an in-process-graded instance (heap walk
    to the recorder, ctypes writes to its result pipe, disabled checks, values equal to anything)
    score 0 under the default split grader, as the agent's failure; one of them resolves the same
    instance loaded with ``grader="inprocess"`` in the same image (the attack is real there)."""
    from tests.security.test_swebench_grader import FORGED_IN_PROCESS

    data, _, _ = instance
    env = SWEEnv(swebench=data, backend="docker", image=IMAGE_TEMPLATE)
    try:
        for name, payload in sorted(FORGED_IN_PROCESS.items()):
            info = _forge(env, payload)
            assert info["infra_error"] is None and info["reward"] == 0.0, (name, info["outcome"])
    finally:
        env.close()
    with pytest.warns(UserWarning, match="forge"):
        env = SWEEnv(swebench=data, backend="docker", image=IMAGE_TEMPLATE, grader="inprocess")
    testing._CACHE.clear()  # the split verdicts above would answer the in-process question about the same tree
    try:
        info = _forge(env, FORGED_IN_PROCESS["gc_walk_to_the_recorder"])
        assert info["reward"] == 1.0, info["outcome"]
    finally:
        env.close()


def test_split_grading_in_a_container_keeps_the_tests_files_out_of_the_packages_reach(docker_client, sandbox_image, no_leaks):
    """One uid in a container: without the package's Landlock, rewriting the data a test reads, or
    swapping the tests' directory for a forged copy, passed the test. Both fail now; the gold passes."""
    import tempfile

    from tests.envs.swebench_fixture import make_instance
    from tests.security.test_swebench_grader import DATA_ATTACKS
    from turngym.envs.swe.grading import grading_tree

    with tempfile.TemporaryDirectory() as tmp:
        data, repo = make_instance(Path(tmp), layout="data")
        env = SWEEnv(swebench=data, backend="local", repo_dirs={REPO: repo})
    task = env.tasks[0]
    start, gold = env.start_tree(task), env.gold_tree(task)
    tests = sorted({*task.fail_to_pass, *task.pass_to_pass})
    executor = swebench.docker_executor(sandbox_image)
    try:
        with testing.use_executor(executor, scope=f"docker:{sandbox_image}:data"):
            honest = testing.run_pytest(grading_tree(task, gold, start), tests, canary=True, split=True)
            assert set(tests) <= honest.passed, honest.problem
            for name, payload in sorted(DATA_ATTACKS.items()):
                tree = grading_tree(task, start.with_file(PATH, start[PATH] + payload), start)
                run = testing.run_pytest(tree, tests, canary=True, split=True)
                assert not set(task.fail_to_pass) & run.passed, (name, run.output[-600:])
    finally:
        executor.close()
