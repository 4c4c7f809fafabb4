"""Collection rules for the whole repository (tests/ and the package's doctests).

``turngym.integrations.verl`` imports verl at module level (it registers an agent loop and
estimators on import), and verl pins a transformers older than the main environment's, so it
lives in a venv of its own (``scripts/ci_verl.sh``). Where verl is absent the module is not
collected for doctests, instead of failing the whole run at collection.

**A shuffled order.** The suite must pass in any order: a test that passes only after (or
before) another hides process-wide state that leaks between episodes (issue 31: a BFCL call
changed a default argument for the whole process). ``--shuffle-seed N`` (or
``TURNGYM_TEST_SHUFFLE=N``) runs the tests in an order drawn from ``N``: the order of the files,
of the classes and functions in each file, and of the tests in each class. A file's tests stay
together, so its module-scoped fixtures are built once. ``--shuffle-only PATH,...`` (or
``TURNGYM_TEST_SHUFFLE_ONLY``) shuffles only the tests under those paths among themselves, in
the places they held, and leaves every other test where it was. The seed is printed in the
header; rerun with it to reproduce a failure. ``.ci/run`` sets both. Under xdist (README line 2:
``-n 2 --dist loadfile``) every worker collects the same shuffled order, and a file's tests run
together on one worker.
"""

from __future__ import annotations

import importlib.util
import os
import random
from pathlib import Path

import pytest

collect_ignore = [] if importlib.util.find_spec("verl") else ["turngym/integrations/verl.py"]

# README line 2 runs the suite on two xdist workers sharing the cores: an OpenMP thread that spins
# while it waits (libgomp's default) takes a core from the other worker. Set before any test
# imports torch, in the workers only (a lone process keeps the default).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

SHUFFLE_ENV = "TURNGYM_TEST_SHUFFLE"
SHUFFLE_ONLY_ENV = "TURNGYM_TEST_SHUFFLE_ONLY"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("turngym")
    group.addoption(
        "--shuffle-seed", default=None, help=f"run the tests in an order shuffled by this seed (also: {SHUFFLE_ENV}=N)"
    )
    group.addoption(
        "--shuffle-only",
        default=None,
        help=f"comma-separated paths: shuffle only their tests (also: {SHUFFLE_ONLY_ENV})",
    )


def _shuffle_seed(config: pytest.Config) -> int | None:
    raw = config.getoption("--shuffle-seed") or os.environ.get(SHUFFLE_ENV) or None
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise pytest.UsageError(
            f"the shuffle seed must be an integer, got {raw!r}: pass --shuffle-seed N or set {SHUFFLE_ENV}=N"
        ) from None


def _shuffle_only(config: pytest.Config) -> tuple[Path, ...]:
    raw = config.getoption("--shuffle-only") or os.environ.get(SHUFFLE_ONLY_ENV) or ""
    return tuple((config.rootpath / p.strip()).resolve() for p in raw.split(",") if p.strip())


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = _shuffle_seed(config)
    if seed is None:
        return None
    only = _shuffle_only(config)
    scope = ", ".join(str(p.relative_to(config.rootpath)) for p in only) if only else "every test"
    return f"shuffled order: seed {seed} over {scope} (reproduce: --shuffle-seed {seed})"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    line = pytest_report_header(config)  # again at the end: ``-q`` hides the header
    if line is not None:
        terminalreporter.write_line(line)


@pytest.hookimpl(tryfirst=True)  # before pytest regroups the items by parametrized fixtures
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seed = _shuffle_seed(config)
    if seed is None:
        return
    only = _shuffle_only(config)
    slots = [
        i for i, item in enumerate(items) if not only or any(p == item.path or p in item.path.parents for p in only)
    ]
    for slot, item in zip(slots, _shuffled([items[i] for i in slots], random.Random(seed))):
        items[slot] = item


def _shuffled(items: list[pytest.Item], rng: random.Random) -> list[pytest.Item]:
    """Files in a random order; in each, its classes and functions; in each class, its tests."""
    files: dict[Path, dict[object, list[pytest.Item]]] = {}
    for item in items:
        cls = getattr(item, "cls", None)
        files.setdefault(item.path, {}).setdefault(cls if cls is not None else item.nodeid, []).append(item)
    out: list[pytest.Item] = []
    for units in rng.sample(list(files.values()), len(files)):
        for unit in rng.sample(list(units.values()), len(units)):
            out.extend(rng.sample(unit, len(unit)))
    return out
