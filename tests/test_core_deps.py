"""``import turngym`` and every ``turngym <cmd> --help`` work with only the core dependencies.

README line 1 installs ``turngym[train]`` and nothing else, and a user who installs plain ``turngym``
gets only pyproject's ``dependencies``. Building a fresh venv per test run is too slow, so this runs
a subprocess whose import system refuses every installed distribution that the core dependencies
do not pull in (a ``sys.meta_path`` finder in front of the real ones): uvicorn, starlette, orjson,
websockets, ray, docker, wandb, and also torch and transformers (the ``train`` extra: ``--help``
must not need them either). ``.ci/run`` proves line 1 itself in a real fresh venv.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent

# What `python -m venv` puts in every venv besides the stdlib (Python 3.11: pip and setuptools).
_VENV_SEED = {"pip", "setuptools"}

# The subprocess's start: block the listed top-level modules, forget any a .pth file loaded
# already, and make importlib.util.find_spec answer None for them, as in a venv without them.
_BOOT = r"""
import importlib.abc, importlib.util, json, sys
BLOCKED = frozenset(json.loads(sys.argv[1]))
del sys.argv[1]

def _blocked(name):
    return name.partition(".")[0] in BLOCKED

class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if _blocked(name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
for _m in [m for m in sys.modules if _blocked(m)]:
    del sys.modules[_m]
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: None if _blocked(name) else _find_spec(name, package)
"""


def _requirements(names_with_extras: list[Requirement]) -> set[str]:
    """The installed distributions ``names_with_extras`` pull in, transitively (canonical names)."""
    seen: set[str] = set()
    todo = [(canonicalize_name(r.name), frozenset(r.extras)) for r in names_with_extras]
    while todo:
        name, extras = todo.pop()
        if name in seen:
            continue
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: nothing of it to block either
        seen.add(name)
        for line in requires:
            req = Requirement(line)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return seen


@cache
def core_closure() -> frozenset[str]:
    """The distributions a plain ``pip install turngym`` installs (this checkout's pyproject)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return frozenset(_requirements([Requirement(d) for d in deps]) | _VENV_SEED)


@cache
def non_core_modules() -> frozenset[str]:
    """Top-level module names that only distributions outside the core closure provide."""
    allowed = core_closure() | {"turngym"}
    blocked = set()
    for module, dists in metadata.packages_distributions().items():
        if module in sys.stdlib_module_names or not module.isidentifier():
            continue
        if not any(canonicalize_name(d) in allowed for d in dists):
            blocked.add(module)
    return frozenset(blocked)


def run_core_only(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that sees only the core dependencies (and this checkout)."""
    prog = _BOOT + code
    return subprocess.run(
        [sys.executable, "-c", prog, json.dumps(sorted(non_core_modules()))],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )


def test_the_blocker_blocks_the_extras_and_keeps_the_core():
    """The harness itself: the extras are out, the core in (else every test below proves nothing)."""
    blocked = non_core_modules()
    for module in ("uvicorn", "starlette", "torch", "transformers"):
        if any(canonicalize_name(d) for d in metadata.packages_distributions().get(module, [])):
            assert module in blocked, module
    assert not {"numpy", "gymnasium", "httpx", "tqdm", "regex"} & blocked
    res = run_core_only("import numpy, gymnasium\ntry:\n    import uvicorn\nexcept ModuleNotFoundError as e:\n"
                        "    print('blocked', e.name)\nimport importlib.util\nprint(importlib.util.find_spec('torch'))")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["blocked", "uvicorn", "None"]


# Every sub-command (and the nested ones) whose --help must work on the core dependencies.
_HELP_ARGV = [["--help"], ["envs", "--help"], ["play", "--help"], ["eval", "--help"], ["serve", "--help"],
              ["sandbox", "--help"], ["train", "--help"], ["view", "--help"], ["study", "--help"],
              ["study", "credit", "--help"], ["proxy", "--help"], ["new-env", "--help"]]


def test_every_subcommand_help_works_with_only_the_core_dependencies():
    from turngym.cli import COMMANDS

    assert {argv[0] for argv in _HELP_ARGV if argv[0] != "--help"} == set(COMMANDS), "a new command: add it above"
    code = f"""
import contextlib, io, sys, traceback
import turngym
from turngym.cli import main
bad = []
for argv in {_HELP_ARGV!r}:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            main(argv)
        bad.append((argv, "returned instead of exiting"))
    except SystemExit as e:
        if e.code != 0 or "usage:" not in out.getvalue():
            bad.append((argv, f"exit {{e.code}}"))
    except BaseException:
        bad.append((argv, traceback.format_exc()))
for argv, why in bad:
    print(" ".join(argv), "->", why)
sys.exit(1 if bad else 0)
"""
    res = run_core_only(code)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize(("argv", "extra"), [
    (["serve", "turngym/Math-v0", "--port", "1"], "server"),
    (["view", "runs/none-such-dir"], "server"),
    (["eval", "turngym/Math-v0", "--episodes", "1", "--env-arg", "remote=ws://127.0.0.1:1"], "server"),
    (["eval", "turngym/Math-v0", "--agent", "hf:tiny", "--episodes", "1"], "train"),
    (["eval", "turngym/Math-v0", "--agent", "vllm:tiny", "--episodes", "1"], "vllm"),
    (["train", "--steps", "1", "--out", "{tmp}/run"], "train"),
])
def test_a_missing_extra_is_a_clear_error_naming_it(argv, extra, tmp_path):
    """At use, not at import: the command exits 2 with ``pip install 'turngym[extra]'``, no traceback."""
    argv = [a.format(tmp=tmp_path) for a in argv]
    res = run_core_only(f"import sys\nfrom turngym.cli import main\nsys.exit(main({argv!r}))")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"pip install 'turngym[{extra}]'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "run").exists(), "train wrote a half-started run before finding torch missing"


def test_the_extras_table_matches_pyproject():
    """Every extra's distributions are in :data:`EXTRA_OF_MODULE`, under an extra that lists them."""
    from turngym.core.extras import EXTRA_OF_MODULE

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    listed = {name: {canonicalize_name(Requirement(r).name) for r in reqs} for name, reqs in extras.items()}
    modules_of: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(canonicalize_name(dist), set()).add(module)
    missing = []
    for extra, dists in listed.items():
        if extra == "dev":
            continue
        for dist in dists:
            modules = modules_of.get(dist) or {dist.replace("-", "_")}
            if not any(EXTRA_OF_MODULE.get(m) in listed and dist in listed[EXTRA_OF_MODULE[m]] for m in modules):
                missing.append(f"{extra}: {dist} ({sorted(modules)})")
    assert not missing, missing
    assert set(EXTRA_OF_MODULE.values()) <= set(listed)
