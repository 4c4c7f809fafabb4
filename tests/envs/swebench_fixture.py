"""SWE-bench-format instances for the tests, built offline from the shipped ``intervals`` repo.

A real git clone whose ``base_commit`` has an injected bug (``Interval.length`` negated), and a
JSONL row with the harness's fields: the gold ``patch`` restores the line, the ``test_patch``
adds the FAIL_TO_PASS test, a smoke test already in the repository is PASS_TO_PASS. Layouts:

* ``"tests"`` -- the tests in ``tests/`` beside the package (django, flask, requests...): the
  split grader grades it.
* ``"data"`` -- as ``"tests"``, the FAIL_TO_PASS test reading its expected value from
  ``tests/expected_length.txt`` while it runs (as suites read fixture data and golden files).
* ``"tests_package"`` -- as ``"tests"``, with ``tests/__init__.py`` (requests, sphinx): pytest then
  imports the tests as ``tests.test_x``, and would import a top-level ``__init__.py`` too.
* ``"top_package"`` -- as ``"tests_package"`` with a top-level ``__init__.py`` in the repository:
  refused by the split grader before any run (collecting would import it, and the code through it).
* ``"src"`` -- the package under ``src/``, put on ``sys.path`` by the repository's own top-level
  ``conftest.py``: refused by the split grader's load-time run (it never imports the tree's
  code by any name but its top-level one, so the tests cannot import the package).
* ``"inside"`` -- the tests inside the package (``intervals/tests/``, as in sympy): refused by
  the split grader before any run (it would run the package in the judging process).
* ``"subclass"`` -- a PASS_TO_PASS test subclasses the package's class: refused by the split
  grader's load-time run (the gold patch does not resolve through its proxies).
"""

from __future__ import annotations

import difflib
import json
import subprocess
from pathlib import Path

from turngym.envs.swe.repos import Tree, load_repo

REPO = "local/intervals"
PATH = "intervals/__init__.py"
TEST_SRC = "from intervals import Interval\n\n\ndef test_length():\n    assert Interval(2, 5).length == 3\n"
DATA_TEST_SRC = ("from pathlib import Path\n\nfrom intervals import Interval\n\n\ndef test_length():\n"
                 "    want = int((Path(__file__).parent / 'expected_length.txt').read_text())\n"
                 "    assert Interval(2, 5).length == want\n")
SMOKE_SRC = "from intervals import Interval\n\n\ndef test_contains():\n    assert Interval(0, 2).contains(1)\n"
SUBCLASS_SRC = ("from intervals import Interval\n\n\nclass Wide(Interval):\n    pass\n\n\n"
                "def test_contains():\n    assert Wide(0, 2).contains(1)\n")


def git(cwd: Path, *args: str) -> str:
    ident = ["-c", "user.email=t@t", "-c", "user.name=t"]
    return subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def diff(a: str, b: str, name: str) -> str:
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), f"a/{name}", f"b/{name}"))


def buggy_source() -> str:
    good = load_repo("intervals")[PATH]
    buggy = good.replace("return self.end - self.start", "return self.start - self.end")
    assert buggy != good
    return buggy


def package_path(layout: str) -> str:
    """Where the buggy module is in ``layout``."""
    return "src/" + PATH if layout == "src" else PATH


def make_instance(tmp: Path, *, layout: str = "tests", instance_id: str = "local__intervals-1") -> tuple[Path, Path]:
    """(instances.jsonl, clone) for one instance in ``layout`` (see the module docstring)."""
    tests_dir = "intervals/tests" if layout == "inside" else "tests"
    path = package_path(layout)
    repo = tmp / "clone"
    good = load_repo("intervals")
    buggy = buggy_source()
    files = {p: t for p, t in good.items() if p not in ("tests/test_intervals.py", PATH)}
    files[path] = buggy
    if layout == "src":
        files["conftest.py"] = "import os\nimport sys\n\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), 'src'))\n"
    files[f"{tests_dir}/test_smoke.py"] = SUBCLASS_SRC if layout == "subclass" else SMOKE_SRC
    if layout in ("inside", "tests_package", "top_package"):
        files[f"{tests_dir}/__init__.py"] = ""
    if layout == "top_package":
        files["__init__.py"] = ""
    if layout == "data":
        files["tests/expected_length.txt"] = "3\n"
    test_src = DATA_TEST_SRC if layout == "data" else TEST_SRC
    Tree(files).write_to(repo)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    row = {
        "instance_id": instance_id,
        "repo": REPO,
        "base_commit": git(repo, "rev-parse", "HEAD"),
        "patch": diff(buggy, good[PATH], path),
        "test_patch": f"--- /dev/null\n+++ b/{tests_dir}/test_length.py\n@@ -0,0 +1,{test_src.count(chr(10))} @@\n"
        + "".join("+" + ln for ln in test_src.splitlines(True)),
        "FAIL_TO_PASS": json.dumps([f"{tests_dir}/test_length.py::test_length"]),
        "PASS_TO_PASS": [f"{tests_dir}/test_smoke.py::test_contains"],
        "problem_statement": "Interval.length is negative for Interval(2, 5).",
        "version": "0.1",
    }
    data = tmp / "instances.jsonl"
    data.write_text(json.dumps(row) + "\n")
    return data, repo
