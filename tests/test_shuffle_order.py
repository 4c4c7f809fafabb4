"""The seeded test shuffle of the repository's conftest (``--shuffle-seed``, ``--shuffle-only``).

Run on a scratch suite in a subprocess, with a copy of the conftest, so the real suite's
order is not involved.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


@pytest.fixture(scope="module")
def plain(suite):
    return _order(suite)[0]


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    (root / "conftest.py").write_text(CONFTEST.read_text())
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_a.py").write_text(
        "".join(f"def test_a{i}(): pass\n" for i in range(6))
        + "class TestK:\n" + "".join(f"    def test_k{i}(self): pass\n" for i in range(4))
    )
    (root / "test_b.py").write_text("".join(f"def test_b{i}(): pass\n" for i in range(6)))
    (root / "sub").mkdir()
    (root / "sub" / "test_c.py").write_text("".join(f"def test_c{i}(): pass\n" for i in range(6)))
    return root


def _order(root: Path, *args: str, env: dict | None = None) -> tuple[list[str], str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TURNGYM_TEST_SHUFFLE")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", *args],
        cwd=root, env={**environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {})},
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line.strip().split(" ")[-1].strip("<>") for line in proc.stdout.splitlines() if "<Function" in line]
    return ids, proc.stdout


def test_a_seed_shuffles_files_classes_and_tests_keeping_each_file_together(suite, plain):
    shuffled, header = _order(suite, "--shuffle-seed", "5")
    assert "shuffled order: seed 5 over every test" in header
    assert sorted(shuffled) == sorted(plain) and shuffled != plain
    files = [name[:6].replace("test_k", "test_a") for name in shuffled]  # TestK is in test_a.py
    groups = [g for i, g in enumerate(files) if i == 0 or g != files[i - 1]]
    assert len(groups) == len(set(groups)), f"a file's tests were split: {shuffled}"
    k = [i for i, name in enumerate(shuffled) if name.startswith("test_k")]
    assert k == list(range(k[0], k[0] + 4)), "a class's tests were split"
    assert _order(suite, env={"TURNGYM_TEST_SHUFFLE": "5"})[0] == shuffled  # reproducible, by either
    assert _order(suite, "--shuffle-seed", "6")[0] != shuffled


def test_shuffle_only_leaves_the_other_tests_in_place(suite, plain):
    shuffled, header = _order(suite, "--shuffle-seed", "5", "--shuffle-only", "sub,test_b.py")
    assert "over sub, test_b.py" in header
    assert sorted(shuffled) == sorted(plain) and shuffled != plain
    for i, name in enumerate(plain):
        if name.startswith(("test_a", "test_k")):
            assert shuffled[i] == name
