"""SWE-bench-format instances: load them, and run them.

An instance (``instance_id``, ``repo``, ``base_commit``, ``patch``, ``test_patch``,
``FAIL_TO_PASS``, ``PASS_TO_PASS``, ``problem_statement``) becomes an :class:`SWETask` whose
starting tree is the repository at ``base_commit`` with ``test_patch`` applied, and whose gold
tree additionally has ``patch`` applied.

Grading: the **split** grader by default (``grader="split"``; :mod:`turngym.envs.swe.grading`):
the instance's tests and the verdict run in a process that never imports the agent's code,
which runs in a process of its own (another uid where the sandbox has one) reached through
proxies, so nothing the agent's code does -- heap walks, ``ctypes``, patching pytest, exiting
early -- can write a verdict. It needs the tests in a directory of their own (``tests/`` beside
the package, as in flask, requests, pylint) and a suite that works through
those proxies: :func:`check_split_grading` runs the gold and the start tree through it when an
instance is loaded, and an instance that fails that check is refused with the reason. Such an
instance (tests inside the package, as in sympy or astropy; tests that subclass the package's
classes) loads only with ``grader="inprocess"``: pytest beside the code under test, whose
verdicts a targeted heap or ``ctypes`` attack by the agent's code can forge (see
:mod:`turngym.envs.swe.testing`) -- never the grader for a reported number.

The package's process writes only to its temporary directory (Landlock; and, with bubblewrap
as root, as another uid than the files'), so it cannot rewrite the files the tests read while
they run. What the split grader does not close for an instance: a test of its own that runs
repository code itself -- ``exec`` of a file it reads, or a subprocess (``python -m pkg``) --
runs the agent's code in, or as a child of, the judging process; and with one uid (Docker,
bubblewrap in a user namespace) the package's process can still signal the grader, which ends
the run with no verdict (the agent's failure) or stalls it to its wall budget, never a pass.

Two backends:

* ``docker`` — SWE-bench's own way: the instance's image holds the repository at
  ``base_commit`` in ``/testbed`` and the environment its tests need. The tree is read out of
  the image (``/testbed`` with its ``.git``, then ``git archive base_commit`` on the host, so
  the start tree is exactly the commit), and every test run -- the hidden evaluation and the
  agent's ``run_tests`` -- runs in a container of that image (:func:`docker_executor`) with
  the same trusted runner as the other backends, started with the image's interpreter and
  pytest. The tree is written to the sandbox's workdir and imported from there (pytest's
  ``prepend`` import mode), which is what a pure-Python repository needs; a repository whose
  package must be built in place (C extensions) is not covered. Needs a Docker engine and the
  image; without them :func:`check_docker` raises a clear error naming both and the
  alternative below.
* ``local`` — for pure-Python repositories you have cloned: the tree comes from
  ``git archive`` of the local clone, and tests run like the shipped repos' (bubblewrap or a
  subprocess). ``repo_dirs`` maps ``owner/name`` to the clone.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turngym.core.errors import ConfigError, InfraError, TaskError
from turngym.core.task import read_jsonl
from turngym.envs.swe.repos import Tree, load_tree
from turngym.envs.swe.tasks import SWETask

if TYPE_CHECKING:
    from turngym.envs.swe.testing import SandboxExecutor
    from turngym.sandbox.limits import Limits

__all__ = ["SWEBenchInstance", "load_swebench", "materialize", "materialize_from_image", "to_task", "check_docker",
           "docker_executor", "image_name", "check_split_grading", "DEFAULT_IMAGE", "SWEBENCH_PYTHON", "TESTBED"]

#: The official SWE-bench evaluation images (``{instance_id}`` lower-cased, as the harness names them).
DEFAULT_IMAGE = "swebench/sweb.eval.x86_64.{instance_id}:latest"
#: The interpreter of the official images' ``testbed`` environment (it has the repository's pytest).
SWEBENCH_PYTHON = "/opt/miniconda3/envs/testbed/bin/python"
#: Where SWE-bench images hold the repository (a git checkout at ``base_commit``).
TESTBED = "/testbed"
_REQUIRED = ("instance_id", "repo", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "problem_statement")


@dataclass(frozen=True)
class SWEBenchInstance:
    instance_id: str
    repo: str
    base_commit: str
    patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    problem_statement: str
    extra: Mapping[str, Any]


def _test_list(value: Any, field: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):  # the HF dataset stores these as JSON strings
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TaskError(f"{where}: {field} is not a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskError(f"{where}: {field} must be a list of test ids")
    return tuple(value)


def load_swebench(path: str | Path) -> list[SWEBenchInstance]:
    """Read SWE-bench instances from JSONL (one instance per line), validating the fields."""
    out = []
    for i, row in enumerate(read_jsonl(path), 1):
        where = f"{path}:{i}"
        missing = [k for k in _REQUIRED if k not in row]
        if missing:
            raise TaskError(f"{where}: missing SWE-bench field(s) {missing}")
        out.append(
            SWEBenchInstance(
                instance_id=row["instance_id"],
                repo=row["repo"],
                base_commit=row["base_commit"],
                patch=row["patch"],
                test_patch=row["test_patch"],
                fail_to_pass=_test_list(row["FAIL_TO_PASS"], "FAIL_TO_PASS", where),
                pass_to_pass=_test_list(row["PASS_TO_PASS"], "PASS_TO_PASS", where),
                problem_statement=row["problem_statement"],
                extra={k: v for k, v in row.items() if k not in _REQUIRED},
            )
        )
    if not out:
        raise TaskError(f"{path}: no instances")
    return out


def _git(args: Sequence[str], cwd: Path, stdin: bytes | None = None) -> bytes:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InfraError(f"git {' '.join(args)} failed to run: {exc}") from exc
    if proc.returncode != 0:
        raise TaskError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def _apply(root: Path, patch: str, what: str) -> None:
    if not patch.strip():
        return
    try:
        _git(["apply", "--whitespace=nowarn", "-"], root, patch.encode())
    except TaskError as exc:
        raise TaskError(f"cannot apply the {what}: {exc}") from None


def materialize(instance: SWEBenchInstance, repo_dir: str | Path) -> tuple[Tree, Tree]:
    """(start tree, gold tree) from a local clone: base_commit + test_patch, then + patch."""
    repo_dir = Path(repo_dir)
    if not (repo_dir / ".git").exists():
        raise ConfigError(f"{repo_dir} is not a git clone of {instance.repo}")
    with tempfile.TemporaryDirectory(prefix="turngym-swebench-") as tmp:
        root = Path(tmp)
        archive = _git(["archive", "--format=tar", instance.base_commit], repo_dir)
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
        _apply(root, instance.test_patch, "test_patch")
        start = load_tree(root)
        _apply(root, instance.patch, "gold patch")
        gold = load_tree(root)
    return start, gold


_INPROCESS_HINT = ('SWEEnv(swebench=..., grader="inprocess") loads it with pytest beside the code under test, '
                   "whose verdicts the agent's code can forge (heap/ctypes): not for a reported number")


def to_task(instance: SWEBenchInstance, start: Tree, gold: Tree, grader: str = "split") -> SWETask:
    """An :class:`SWETask` for the env; ``gold`` is the instance's patch, ``grader`` the runner that grades it.

    A split-graded instance whose layout the split grader cannot serve (tests at the top level
    or inside the package the fix changes) is refused here, before any test runs.
    """
    from turngym.envs.swe.grading import GRADERS, split_problem

    if grader not in GRADERS:
        raise ConfigError(f"grader must be one of {GRADERS}, got {grader!r}")
    changed = sorted(p for p in gold if start.get(p) != gold[p])
    if not changed:
        raise TaskError(f"{instance.instance_id}: the gold patch changes no file")
    touched = [*changed, *(p for p in start if p not in gold)]  # deletions too
    if grader == "split" and (problem := split_problem((*instance.fail_to_pass, *instance.pass_to_pass), touched, start)):
        raise ConfigError(f"{instance.instance_id}: the split grader cannot grade this instance: {problem}. {_INPROCESS_HINT}")
    return SWETask(
        id=instance.instance_id,
        prompt=instance.problem_statement,
        gold=instance.patch,
        meta={"source": "swe-bench", "repo": instance.repo, "base_commit": instance.base_commit, "grader": grader},
        repo=instance.repo,
        path=changed[0],
        buggy_source=start.get(changed[0], ""),
        function="",
        fail_to_pass=instance.fail_to_pass,
        pass_to_pass=instance.pass_to_pass,
    )


def check_split_grading(task: SWETask, start: Tree, gold: Tree) -> None:
    """Raise :class:`ConfigError` unless the split grader grades ``task`` as its harness would.

    The gold tree must resolve (every FAIL_TO_PASS and PASS_TO_PASS test passes) and no
    FAIL_TO_PASS test may pass on the start tree: a suite that needs the package in its own
    process (subclasses of its classes, fixtures built from it) fails the first, and one whose
    tests would pass vacuously through the proxies fails the second. Run inside the executor
    scope the instance's tests use (its image, for the docker backend).
    """
    from turngym.envs.swe.grading import evaluate

    def why(run: Any, tests: Sequence[str]) -> str:
        bad = [t for t in tests if t not in run.passed][:3]
        messages = dict(run.messages)
        detail = run.problem or "; ".join(f"{t}: {messages.get(t, 'not run')}"[:300] for t in bad)
        return f"{bad} ({detail})"

    fixed = evaluate(task, gold, start)
    wanted = (*task.fail_to_pass, *task.pass_to_pass)
    if fixed.problem or not set(wanted) <= fixed.passed:
        raise ConfigError(f"{task.id}: under the split grader the gold patch does not resolve the instance: "
                          f"{why(fixed, wanted)}. {_INPROCESS_HINT}")
    broken = evaluate(task, start, start)
    if passing := sorted(set(task.fail_to_pass) & broken.passed):
        raise ConfigError(f"{task.id}: under the split grader FAIL_TO_PASS test(s) {passing[:3]} pass without the fix. "
                          f"{_INPROCESS_HINT}")


def image_name(instance: SWEBenchInstance, image_template: str = DEFAULT_IMAGE) -> str:
    """The instance's image: ``image_template`` with ``{instance_id}`` (lower-cased, as Docker needs)."""
    return image_template.format(instance_id=instance.instance_id.lower())


def check_docker(instance: SWEBenchInstance, image_template: str = DEFAULT_IMAGE) -> str:
    """Return the instance's image name if a Docker engine answers and has it; else raise."""
    image = image_name(instance, image_template)
    try:
        import docker
    except ImportError:
        raise ConfigError("the docker backend needs the Docker SDK: pip install docker") from None
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # the SDK raises DockerException subclasses and requests errors alike
        raise InfraError(
            f"no Docker engine answers ({exc.__class__.__name__}: {exc}); SWE-bench instances need it and "
            f"the image {image}. For a pure-Python repository you have cloned, use backend='local' "
            "with repo_dirs={'owner/name': '/path/to/clone'}."
        ) from None
    try:
        client.images.get(image)
    except Exception:
        raise InfraError(f"the Docker image {image} is not present: pull or build it (SWE-bench's harness builds it)") from None
    return image


def _owned_by_me(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter (no absolute paths, no links out, no devices), files owned by
    this process: git refuses a checkout owned by another uid (``safe.directory``)."""
    member = tarfile.data_filter(member, dest)
    return member.replace(uid=os.getuid(), gid=os.getgid(), uname="", gname="", deep=False)


def materialize_from_image(instance: SWEBenchInstance, image: str, *, client: Any = None,
                           testbed: str = TESTBED) -> tuple[Tree, Tree]:
    """(start tree, gold tree) from the repository in the instance's image.

    The image's ``testbed`` (a git checkout) is copied out of a container that is created but
    never started, and :func:`materialize` takes ``base_commit`` from it: a checkout whose
    history lacks the commit is a clear :class:`TaskError`, and files the image's set-up left in
    the working tree (build outputs) are not part of the task.
    """
    if client is None:
        import docker

        client = docker.from_env()
    try:
        container = client.containers.create(image, command=["true"], network_disabled=True)
    except Exception as exc:  # the SDK's errors: engine gone, image missing
        raise InfraError(f"cannot create a container of {image}: {exc}") from exc
    try:
        try:
            stream, _ = container.get_archive(testbed)
            data = b"".join(stream)
        except Exception as exc:
            raise TaskError(f"{instance.instance_id}: the image {image} has no {testbed} ({exc})") from None
    finally:
        container.remove(force=True)
    with tempfile.TemporaryDirectory(prefix="turngym-swebench-image-") as tmp:
        try:
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                tar.extractall(tmp, filter=_owned_by_me)
        except tarfile.TarError as exc:  # e.g. a link out of the checkout
            raise TaskError(f"{instance.instance_id}: cannot copy {testbed} out of {image}: {exc}") from None
        repo = Path(tmp) / Path(testbed).name
        if not (repo / ".git").exists():
            raise TaskError(f"{instance.instance_id}: {testbed} in {image} is not a git checkout")
        return materialize(instance, repo)


def docker_executor(image: str, *, python: str = "python3", client: Any = None,
                    limits: Limits | None = None) -> SandboxExecutor:
    """The SWE grader's executor for ``image``: each test run in a fresh container of it (no
    network, read-only root, ``limits`` or the executor's default), the runner started with the
    image's ``python`` and the image's own site directories."""
    from turngym.envs.swe.testing import SandboxExecutor
    from turngym.sandbox.docker import DockerSandbox

    return SandboxExecutor(DockerSandbox(image=image, python=python, client=client), limits=limits)
