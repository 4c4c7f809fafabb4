"""Run a repository's pytest suite with a runner the repository cannot configure or replace.

The tree is written to a fresh directory and a trusted runner program runs there (in the
sandbox when one is available, see :func:`set_executor`). There are two, and which one grades
decides what a verdict is worth:

* **split** (``_split_boot.py``; the hidden evaluation of the shipped, generated tasks and of
  SWE-bench instances, unless one is loaded with ``grader="inprocess"``): pytest
  and the task's tests run in a process that never imports the agent's code; the package is
  imported only in a forked process of its own and reached through proxies that bring back
  plain data or handles, with comparisons against plain data made in the trusted process.
  Nothing the code under test does in its process (heap walks, ``ctypes``, patching pytest,
  planting files, exiting early) can write a verdict: at worst it kills the runner, which is
  the agent's failure. This needs suites that call the package and assert on what it
  returns, which is what the generated repositories' tests are; an SWE-bench instance is run
  through it when loaded (gold resolves, start does not) and refused if it does not (see
  :mod:`turngym.envs.swe.swebench`).
* **in-process** (``_grader_boot.py``; the agent's own ``run_tests``, and SWE-bench instances
  explicitly loaded with ``grader="inprocess"``, whose suites the split grader cannot serve):
  pytest beside the code under test, with the protections below. A split run's result may
  answer an in-process question about the same tree (cache), never the other way round (the
  load-time check's runs are cached apart: :func:`separate_cache`).

Where the sandbox gives a session a second uid (bubblewrap as root), the split grader is a
*trusted* launch: the process that judges keeps the session uid and the capabilities to
switch uids and kill, and the package's process drops to the untrusted uid with none, so the
agent's code cannot stop, kill, renice or ``prlimit`` the grader (a stalled grader would only
wait out its wall budget). In-process runs (the agent's ``run_tests``) are never trusted
launches: they run with no capabilities in a session of their own. With one uid (Docker, a
user namespace) the package can still stop or kill the grader: a run that then ends with no
verdict scores 0, never a forged pass.

What the tree cannot change in either runner, by construction:

* **which pytest runs** — ``python -I -S -B`` ignores ``PYTHON*`` variables, user site,
  ``site``/``.pth``/``sitecustomize``/``usercustomize`` and never puts the working directory
  first on ``sys.path``; pytest, every ``_pytest`` module and pluggy are imported from the
  runner's own site directories before the tree is on the path at all. Nothing is written
  back as bytecode, and the grader's tree holds no ``__pycache__`` (a planted compiled
  module or assertion-rewrite cache is never read).
* **its configuration** — ``-c /dev/null`` (no ``pytest.ini``/``pyproject.toml``/
  ``setup.cfg``/``tox.ini`` addopts or plugins), ``--rootdir``/``--confcutdir`` at the tree,
  ``-p no:cacheprovider``, plugin autoload off, ``PYTEST_ADDOPTS`` unset, and
  ``--noconftest`` unless the caller allows the tree's ``conftest.py`` files (the grader
  only does so for the task's pristine ones, see :mod:`turngym.envs.swe.grading`).
* **the result channel** — verdicts come from the runner's parent process, which never runs
  the tree's code, as one line tagged with a per-run nonce that only that parent ever sees;
  the test process's own output is console text, never parsed for verdicts. No file in the
  tree is read back, so deleting or rewriting "the report" is not possible.
* **the meaning of an early end** — a run whose test process exits, is killed, runs out of
  time or any limit before pytest finishes counts no test as passed. Only a runner that
  demonstrably could not start (no banner from the trusted parent) is an ``InfraError``.

What remains for the in-process runner (``grader="inprocess"`` instances): the code under test runs inside
pytest's interpreter, so the records of each test are claims of a process that runs agent code. They are MAC'd with a key made after the
fork and before any tree code runs, so raw bytes on the result pipe are rejected; before
agent code runs the runner snapshots the identity of every function and class of pytest,
pluggy, unittest and the runtime and reads the test files, and it marks the run
``tampering`` when one of those objects changed, a plugin or hook implementation was added,
a trace/profile function was installed, a test function is not the code compiled from its
file, or the test module gained names or lost its imports; the grader also adds a canary
test that must fail. Code that deliberately reaches the runner's own objects through the
heap (``gc``, frames, ``ctypes``, ``/proc/self/mem``) and forges only the task's test ids
through them, or that races the checks from a thread, is not excluded by this design: the red-team
suite shows such payloads forging a full pass there. An SWE-bench verdict is only as sound as
the policy is unaware of this runner; split-graded tasks (every generated task, SWE-bench
instances by default) do not have that gap.

Results are cached by (tree digest, selected tests, canary): the suite is a pure function of
the files, and envs re-check the same states often (branching, the checker's replays).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turngym.core.errors import ConfigError, InfraError
from turngym.envs.swe.repos import Tree
from turngym.sandbox.factory import make_sandbox
from turngym.sandbox.inline import inline_module, inside_prelude
from turngym.sandbox.limits import Limits

if TYPE_CHECKING:
    from turngym.sandbox.base import Sandbox

__all__ = ["TestRun", "RawRun", "run_pytest", "set_executor", "use_executor", "Executor", "SandboxExecutor",
           "subprocess_executor", "separate_cache", "CANARY_NAME"]

#: The basename of the canary module the grader adds next to the task's tests.
CANARY_NAME = "test_zz_turngym_canary.py"
_CANARY_SOURCE = 'def test_canary():\n    assert False, "the grader\'s canary: this test must fail"\n'
_BANNER = "turngym-grader-started"


@dataclass(frozen=True)
class RawRun:
    """What an executor saw: exit code (None when killed), stdout, stderr, limit that ended it.

    ``tree_error`` says why the agent's tree could not be written out (a file where a directory
    must be, ...): the run never started, and that is the agent's failure, not the infrastructure's.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    limit_hit: str | None = None
    tree_error: str = ""


#: An executor writes ``tree`` into a fresh working directory, runs ``[python, *flags, '-c',
#: boot, json(config + site dirs)]`` there with ``stdin`` under a wall-clock ``timeout``. It
#: raises :class:`InfraError` (or the sandbox's ``SandboxUnavailable``) only when it cannot run.
Executor = Callable[[Tree, Mapping[str, Any], bytes, float], RawRun]


#: The runner programs: tests beside the code (any pytest suite), or tests apart from it.
_BOOTS = {"inprocess": "_grader_boot.py", "split": "_split_boot.py"}
#: The sandbox toolkit's modules each runner imports (:mod:`turngym.sandbox.inside`).
_TOOLKIT = {"inprocess": ("framing", "hardening"), "split": ("codec", "framing", "hardening")}
#: The runner's own modules, shipped after the toolkit, each after those it imports: the file
#: beside this one and the name the runner imports it by. Their code's file name is ``<file>``, as
#: ``<string>`` was the one-file runner's: a traceback never reads a file of that name from the
#: working dir (the agent's tree) to show its lines.
_PIECES: dict[str, tuple[tuple[str, str], ...]] = {
    "inprocess": (),
    "split": (("_split_wire.py", "_turngym_split_wire"), ("_split_candidate.py", "_turngym_split_candidate"),
              ("_split_handles.py", "_turngym_split_handles")),
}


@lru_cache(maxsize=2)
def _boot_source(mode: str = "inprocess") -> str:
    here = Path(__file__).parent
    pieces = "".join(inline_module(name, (here / file).read_text(encoding="utf-8"), file) for file, name in _PIECES[mode])
    return inside_prelude(*_TOOLKIT[mode]) + pieces + (here / _BOOTS[mode]).read_text(encoding="utf-8")


def grader_argv(executable: str, site_dirs: Sequence[str], config: Mapping[str, Any]) -> list[str]:
    """The command line of the trusted runner (the tree never appears in it).

    ``config["mode"]`` picks the program: ``"split"`` (the split grader, for suites that call
    the package and assert on values) or ``"inprocess"`` (default; pytest beside the code).
    """
    cfg = {**config, "site": list(site_dirs)}
    return [executable, "-I", "-S", "-B", "-c", _boot_source(str(cfg.get("mode", "inprocess"))), json.dumps(cfg)]


def _host_site_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return [p for p in dict.fromkeys((paths["purelib"], paths["platlib"])) if os.path.isdir(p)]


def subprocess_executor(tree: Tree, config: Mapping[str, Any], stdin: bytes, timeout: float) -> RawRun:
    """Run in a temporary directory with a plain subprocess: **not isolated** (trusted code only)."""
    with tempfile.TemporaryDirectory(prefix="turngym-swe-") as tmp:
        root = Path(tmp) / "work"
        root.mkdir()
        try:
            tree.write_to(root)
        except OSError as exc:
            return RawRun(None, "", "", tree_error=str(exc))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        argv = grader_argv(sys.executable, _host_site_dirs(), config)
        try:
            proc = subprocess.run(argv, cwd=root, env=env, input=stdin, capture_output=True, timeout=timeout + 5)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout or b""
            return RawRun(None, out.decode("utf-8", "replace") if isinstance(out, bytes) else out, "", "wall")
        except OSError as exc:
            raise InfraError(f"cannot start the SWE grader: {exc}") from exc
        return RawRun(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))


class SandboxExecutor:
    """Run the grader in a :mod:`turngym.sandbox` session: no network, private workdir, limits.

    Agent-written code runs inside the tests, so this is the default. ``backend`` is a
    backend name, created on first use (``SandboxUnavailable`` there is an infrastructure
    fault), or a sandbox instance (e.g. a ``DockerSandbox`` of a chosen image). Each run gets a
    fresh working dir holding the tree; the runner is the sandbox's own interpreter with the
    sandbox's site dirs (a container's, not the host's).
    """

    def __init__(
        self,
        backend: str | Sandbox = "auto",
        memory_mb: int | None = None,
        processes: int | None = None,
        *,
        limits: Limits | None = None,
    ) -> None:
        """``limits``: what each test run may use (memory, processes, ``cpu_cores``, disk, ...),
        the same :class:`~turngym.sandbox.Limits` that Code and MCP envs take; its ``wall_s`` and
        ``cpu_s`` are replaced by each run's timeout. ``memory_mb`` / ``processes`` are the old
        names for two of its fields: still honoured (over ``limits``), with a DeprecationWarning."""
        base = limits or Limits(memory_mb=2048, processes=64)
        old = {k: v for k, v in (("memory_mb", memory_mb), ("processes", processes)) if v is not None}
        if old:
            warnings.warn(f"SandboxExecutor({', '.join(old)}=...) is deprecated: pass limits=Limits(...) instead",
                          DeprecationWarning, stacklevel=2)
            base = base.replace(**old)
        self.backend = backend
        self.limits = base
        self._sandbox: Any = None

    @property
    def memory_mb(self) -> int:
        """``limits.memory_mb`` (the old attribute, read-only)."""
        return self.limits.memory_mb

    @property
    def processes(self) -> int:
        """``limits.processes`` (the old attribute, read-only)."""
        return self.limits.processes

    def __call__(self, tree: Tree, config: Mapping[str, Any], stdin: bytes, timeout: float) -> RawRun:
        if self._sandbox is None:
            self._sandbox = make_sandbox(self.backend)
        # the wall limit leaves the runner's own deadline (config["deadline"]) room to report
        limits = self.limits.replace(wall_s=timeout + 5, cpu_s=timeout + 5)
        files = {path: text.encode("utf-8", "surrogatepass") for path, text in tree.items()}
        with self._sandbox.open_session(limits) as session:
            try:
                session.write_files(files)
            except (ConfigError, OSError) as exc:  # the agent's tree (e.g. a file where a dir must be)
                return RawRun(None, "", "", tree_error=str(exc))
            py = self._sandbox.python
            argv = grader_argv(py.executable, py.path, config)
            env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
            if config.get("mode") == "split":
                # a trusted launch: with a second uid, the grader keeps the session uid and the
                # capabilities to drop its candidate (the package) to the untrusted one; with one
                # uid (bubblewrap in a user namespace) it is its PID namespace's init, which the
                # package cannot signal; Docker runs it as a plain run (see Session.run_trusted).
                # The nonce travels on stdin.
                res = session.run_trusted(argv, stdin=stdin, env=env)
            else:
                # every in-process run, the agent's own run_tests included: the session uid with
                # no capabilities, in a session of its own
                res = session.run(argv, stdin=stdin, env=env)
        return RawRun(res.exit_code, res.stdout, res.stderr, res.limit_hit)

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


_executor: Executor = SandboxExecutor()


def set_executor(executor: Executor | None) -> None:
    """Route test runs through ``executor``; None = the default sandbox executor.

    ``subprocess_executor`` runs tests unisolated (only for trusted code, e.g. generating
    tasks from the project's own repositories).
    """
    global _executor
    _executor = executor or SandboxExecutor()
    _CACHE.clear()


#: (scope, executor) routing this context's runs instead of the process-wide executor.
_scoped: ContextVar[tuple[str, Executor] | None] = ContextVar("turngym_swe_executor", default=None)


@contextmanager
def use_executor(executor: Executor, scope: str) -> Iterator[None]:
    """Route the test runs made inside the block (this thread or task only) through ``executor``.

    For runs that must happen somewhere else than the process-wide executor says, e.g. an
    SWE-bench instance whose tests run in its own image while other envs in the process use
    the default sandbox. ``scope`` names where the runs happen (the image): results are cached
    per scope, since the same tree can give other verdicts in another environment.
    """
    if not scope:
        raise ConfigError("use_executor needs a non-empty scope (e.g. the image name)")
    token = _scoped.set((scope, executor))
    try:
        yield
    finally:
        _scoped.reset(token)


@contextmanager
def separate_cache(label: str) -> Iterator[None]:
    """Run the block's tests where they would run, with results cached apart from all others.

    For runs whose verdicts must not answer later questions: a split run of a suite the split
    grader turns out not to serve (a load-time check that fails) would otherwise answer the
    in-process runs of the same trees.
    """
    scope, executor = _scoped.get() or ("", _executor)
    with use_executor(executor, scope=f"{scope}#{label}"):
        yield


@dataclass(frozen=True)
class TestRun:
    """Per-test verdicts of one pytest run.

    Attributes:
        passed / failed: test ids (``tests/test_x.py::test_name``).
        messages: failure message of each failed test (first lines).
        collection_error: the suite could not be collected/imported (the repo is broken).
        timed_out: the run hit the wall-clock limit.
        output: pytest's console output (truncated).
        duration: seconds.
        aborted: why the run ended before pytest finished ("" if it finished); no test passed.
        tampering: what the code under test changed in the runner ("" if nothing); no test passed.
        hidden: the split grader's hidden-case part as JSON text (``{"obs", "done", "error"}``), or
            None when the run had no hidden cases (see :mod:`turngym.envs.swe.hidden`).
    """

    passed: frozenset[str]
    failed: frozenset[str]
    messages: tuple[tuple[str, str], ...]
    collection_error: bool
    timed_out: bool
    output: str
    duration: float
    aborted: str = ""
    tampering: str = ""
    hidden: str | None = None

    @property
    def imports_ok(self) -> bool:
        return not self.collection_error and not self.timed_out and not self.aborted and not self.tampering

    @property
    def problem(self) -> str:
        """Why this run's verdicts do not count ("" when they do)."""
        if self.tampering:
            return f"the code under test tampered with the test runner ({self.tampering})"
        if self.timed_out:
            return "the tests timed out"
        return self.aborted


def _pytest_args(tree: Tree, tests: Sequence[str]) -> list[str]:
    args = ["-q", "-c", "/dev/null", "--rootdir=.", "--confcutdir=.", "-p", "no:cacheprovider", "--tb=short",
            "--import-mode=prepend"]
    if not any(p == "conftest.py" or p.endswith("/conftest.py") for p in tree):
        args.append("--noconftest")
    return [*args, *tests]


def _check_test_ids(tests: Sequence[str]) -> None:
    for t in tests:
        path = t.split("::", 1)[0]
        if not t or t.startswith("-") or path.startswith("/") or ".." in path.split("/") or "\0" in t:
            raise ConfigError(f"test id {t!r} must be a path inside the repository (e.g. 'tests/test_x.py::test_y')")


#: Object addresses in reprs ("<Cache object at 0x7f...>") differ between processes.
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
#: pytest's closing line ("1 failed, 2 passed in 0.61s"): its wall time varies from run to run.
_SUMMARY_TIME = re.compile(r"^(=* ?\d+ [a-z].*?) in \d+(?:\.\d+)?s(?: \([0-9:.]+\))?( =*)?$", re.MULTILINE)


def _stable(console: str) -> str:
    """Console text without what varies between runs of the same tree: pytest's run time on
    its summary lines and object addresses, so that the same seed and actions give the same
    episode in any process.

    >>> _stable("F.\\n1 failed, 1 passed in 0.61s\\n")
    'F.\\n1 failed, 1 passed\\n'
    >>> _stable("==== 1 error in 12.01s (0:00:12) ====")
    '==== 1 error ===='
    >>> _stable("assert <lrucache.LRUCache object at 0x7f65fbc8e0d0> is None")
    'assert <lrucache.LRUCache object> is None'
    """
    return _ADDRESS.sub("", _SUMMARY_TIME.sub(lambda m: m.group(1) + (m.group(2) or ""), console))


def _interpret(raw: RawRun, nonce: str, canary_id: str | None, duration: float) -> TestRun:
    """Verdicts from the trusted parent's nonce line; everything else is console text."""
    line = next((ln for ln in reversed(raw.stdout.splitlines()) if ln.startswith(nonce + " ")), None)
    if line is None:
        if _BANNER not in raw.stdout:
            if raw.tree_error:
                return TestRun(frozenset(), frozenset(), (), True, False, raw.tree_error[-2000:], duration,
                               aborted="the repository could not be written out: " + raw.tree_error[-300:])
            raise InfraError(f"the SWE grader did not start (exit {raw.exit_code}, limit {raw.limit_hit}):\n{(raw.stderr or raw.stdout)[-1000:]}")
        why = f"the {raw.limit_hit} limit" if raw.limit_hit else f"exit status {raw.exit_code}"
        return TestRun(frozenset(), frozenset(), (), False, raw.limit_hit in ("wall", "cpu"), "", duration,
                       aborted=f"the grader was stopped before it reported ({why}); the code under test killed it or exhausted a limit")
    try:
        payload = json.loads(line[len(nonce) + 1 :])
        if not isinstance(payload, dict) or not isinstance(payload.get("records"), list):
            raise ValueError("not a verdict object")
    except ValueError:  # cut short: the parent was killed while writing it
        return TestRun(frozenset(), frozenset(), (), False, False, "", duration,
                       aborted="the grader's report was cut short (the code under test killed it or exhausted a limit)")
    console = _stable(str(payload.get("console", ""))[-4000:])
    phases: dict[str, dict[str, str]] = {}
    messages: dict[str, str] = {}
    collect_failed, done, tampered, crash = False, None, "", ""
    for rec in payload["records"]:
        if not isinstance(rec, dict):
            continue
        kind = rec.get("k")
        if kind == "test":
            nodeid, when, outcome = str(rec.get("nodeid")), str(rec.get("when")), str(rec.get("outcome"))
            phases.setdefault(nodeid, {})[when] = outcome
            if outcome == "failed" and nodeid not in messages:
                messages[nodeid] = _stable("\n".join(str(rec.get("msg", "")).strip().splitlines()[:20]))
        elif kind == "collect":
            collect_failed = True
        elif kind == "done":
            done = rec.get("exit")
        elif kind == "tampered" and not tampered:
            tampered = "; ".join(str(w) for w in rec.get("what", []))[:500] or "unknown"
        elif kind == "crash":
            crash = str(rec.get("text", ""))[:300]
    if payload.get("forged") and not tampered:
        tampered = f"{payload['forged']} record(s) on the result channel were not written by the recorder"
    passed = {n for n, ph in phases.items() if ph.get("call") == "passed" and "failed" not in ph.values()}
    failed = {n for n, ph in phases.items() if "failed" in ph.values()}
    if canary_id is not None:
        canary = phases.pop(canary_id, {})
        passed.discard(canary_id)
        failed.discard(canary_id)
        messages.pop(canary_id, None)
        if done is not None and not collect_failed and not tampered:
            if canary.get("call") != "failed":
                tampered = "the canary test, which must fail, was not reported failed"
            elif done != 1:
                tampered = f"pytest's exit status {done} contradicts the failing canary"
    aborted = ""
    if payload.get("timed_out"):
        aborted = "the tests timed out"
    elif payload.get("fatal"):  # the split grader: the package's process died or broke the protocol
        aborted = str(payload["fatal"])[:300]
    elif done is None:
        status = payload.get("status")
        aborted = f"the test process ended before pytest finished (status {status}{', ' + crash if crash else ''})"
    collection_error = collect_failed or (done in (2, 3, 4) and not phases)
    if tampered or aborted:
        failed |= passed
        passed = set()
    hidden = json.dumps(payload["hidden"]) if isinstance(payload.get("hidden"), dict) else None
    return TestRun(frozenset(passed), frozenset(failed), tuple(sorted(messages.items())), collection_error,
                   bool(payload.get("timed_out")), console, duration, aborted=aborted if not payload.get("timed_out") else "",
                   tampering=tampered, hidden=hidden)


#: (scope, tree digest, selected tests, canary, split, hidden-cases digest) -> run
_CACHE: OrderedDict[tuple[str, str, tuple[str, ...], bool, bool, str], TestRun] = OrderedDict()
_CACHE_SIZE = 4096


def _subset(full: TestRun, tests: Sequence[str]) -> TestRun | None:
    """The selected tests' verdicts read from a full-suite run of the same tree (tests are independent)."""
    if not full.imports_ok or not set(tests) <= full.passed | full.failed:
        return None
    wanted = set(tests)
    return TestRun(full.passed & wanted, full.failed & wanted, tuple(m for m in full.messages if m[0] in wanted),
                   False, False, full.output, 0.0)


def _lookup(scope: str, tree: Tree, tests: tuple[str, ...], canary: bool, split: bool, hidden: str = "") -> TestRun | None:
    # a canary run answers a canary-less question too (the canary never touches other tests);
    # a split run answers an in-process question, never the other way round (an in-process
    # run's records are claims of the code under test, never a verdict)
    flags = [(c, sp) for c in ((True,) if canary else (True, False)) for sp in ((True,) if split else (True, False))]
    for c, sp in flags:
        key = (scope, tree.digest, tests, c, sp, hidden)
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    if tests and not hidden:  # a subset carries no hidden part
        for c, sp in flags:
            full = _CACHE.get((scope, tree.digest, (), c, sp, hidden))
            if full is not None and (sub := _subset(full, tests)) is not None:
                return sub
    return None


def canary_path(tree: Tree, tests: Sequence[str]) -> str:
    """Where the canary goes: next to the first selected test file (or in ``tests/``)."""
    first = next((t.split("::", 1)[0] for t in tests if "/" in t.split("::", 1)[0]), "tests/x.py")
    return f"{first.rsplit('/', 1)[0]}/{CANARY_NAME}"


def _store(key: tuple[str, str, tuple[str, ...], bool, bool, str], run: TestRun) -> None:
    _CACHE[key] = run
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)


def run_pytest(tree: Tree, tests: Sequence[str] | None = None, *, timeout: float = 30.0, canary: bool = False,
               split: bool = False, test_dirs: Sequence[str] = ("tests",), hidden: Mapping[str, Any] | None = None) -> TestRun:
    """Run the suite (or the selected test ids) of ``tree``; cached by tree digest.

    ``canary`` adds a test that must fail (the grader's check against runs that report
    everything passed); its verdict is taken out of the result. ``split`` runs the tests in
    a process that never imports the tree's code outside ``test_dirs`` (see
    ``_split_boot.py``): only for suites that call the package and assert on what it returns,
    and only when every file in ``test_dirs`` is trusted (the task's own).

    ``hidden`` (split runs only): hidden cases, ``{"package", "source", "cases"}``, that the
    grader runs after the tests and reports in :attr:`TestRun.hidden`. They travel on the
    grader's stdin, never in the tree. The tests' part of such a run also answers the same
    question without hidden cases (e.g. the agent's ``run_tests``): the grader takes it before
    the hidden cases run, and the copy cached for that question carries nothing of them.
    """
    selected = tuple(tests or ())
    _check_test_ids(selected)
    if hidden is not None and not split:
        raise ConfigError("hidden cases run only in the split grader (split=True)")
    hidden_line = json.dumps(hidden, sort_keys=True) if hidden is not None else ""
    hidden_key = hashlib.sha256(hidden_line.encode()).hexdigest() if hidden is not None else ""
    scope, executor = _scoped.get() or ("", _executor)
    hit = _lookup(scope, tree, selected, canary, split, hidden_key)
    if hit is not None:
        return hit
    run_tree, canary_id, args_tests = tree, None, list(selected or ["tests"])
    if canary:
        cpath = canary_path(tree, selected)
        run_tree = tree.with_file(cpath, _CANARY_SOURCE)
        canary_id = f"{cpath}::test_canary"
        if selected:
            args_tests.append(cpath)
    nonce = secrets.token_hex(16)
    config: dict[str, Any] = {"args": _pytest_args(run_tree, args_tests), "deadline": timeout}
    if split:
        config.update(mode="split", test_dirs=sorted({d.split("/", 1)[0] for d in test_dirs if d}), hidden=bool(hidden_line))
    t0 = time.perf_counter()
    raw = executor(run_tree, config, (nonce + "\n" + (hidden_line + "\n" if hidden_line else "")).encode(), timeout)
    run = _interpret(raw, nonce, canary_id, time.perf_counter() - t0)
    _store((scope, tree.digest, selected, canary, split, hidden_key), run)
    if hidden_key:
        _store((scope, tree.digest, selected, canary, split, ""), replace(run, hidden=None))
    return run
