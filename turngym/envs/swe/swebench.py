"""SWE-bench-format instances: load them, and run them.

An instance (``instance_id``, ``repo``, ``base_commit``, ``patch``, ``test_patch``,
``FAIL_TO_PASS``, ``PASS_TO_PASS``, ``problem_statement``) becomes an :class:`SWETask` whose
starting tree is the repository at ``base_commit`` with ``test_patch`` applied, and whose gold
tree additionally has ``patch`` applied.

Two backends:

* ``docker`` — SWE-bench's own way: the instance's evaluation image runs the tests. Needs a
  Docker engine and the image; without them :func:`check_docker` raises a clear error naming
  both and the alternative below.
* ``local`` — for pure-Python repositories you have cloned: the tree comes from
  ``git archive`` of the local clone, and tests run like the shipped repos' (bubblewrap or a
  subprocess). ``repo_dirs`` maps ``owner/name`` to the clone.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turngym.core.errors import ConfigError, InfraError, TaskError
from turngym.core.task import read_jsonl
from turngym.envs.swe.repos import Tree, load_tree
from turngym.envs.swe.tasks import SWETask

__all__ = ["SWEBenchInstance", "load_swebench", "materialize", "to_task", "check_docker", "DEFAULT_IMAGE"]

DEFAULT_IMAGE = "swebench/sweb.eval.x86_64.{instance_id}:latest"
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


def to_task(instance: SWEBenchInstance, start: Tree, gold: Tree) -> SWETask:
    """An :class:`SWETask` for the env; ``gold`` is the instance's patch."""
    changed = sorted(p for p in gold if start.get(p) != gold[p])
    if not changed:
        raise TaskError(f"{instance.instance_id}: the gold patch changes no file")
    return SWETask(
        id=instance.instance_id,
        prompt=instance.problem_statement,
        gold=instance.patch,
        meta={"source": "swe-bench", "repo": instance.repo, "base_commit": instance.base_commit},
        repo=instance.repo,
        path=changed[0],
        buggy_source=start.get(changed[0], ""),
        function="",
        fail_to_pass=instance.fail_to_pass,
        pass_to_pass=instance.pass_to_pass,
    )


def check_docker(instance: SWEBenchInstance, image_template: str = DEFAULT_IMAGE) -> str:
    """Return the instance's image name if a Docker engine answers and has it; else raise."""
    image = image_template.format(instance_id=instance.instance_id.lower())
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
