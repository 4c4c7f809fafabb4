"""The shipped repositories: small real Python libraries with their own pytest suites.

They live in ``tasks/swe/repos/<name>/`` (a package directory plus ``tests/``). A repository is
loaded as a :class:`Tree`: an immutable mapping of relative path → file text, which is what the
env edits, snapshots and hashes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path

from turngym.core.errors import ConfigError, TaskError

__all__ = ["Tree", "repos_dir", "load_repo", "REPO_NAMES"]

REPO_NAMES = ("inifile", "intervals", "lrucache", "tinytemplate", "unitconv")


def repos_dir() -> Path:
    """Where the shipped repositories are: ``$TURNGYM_SWE_REPOS`` or ``<checkout>/tasks/swe/repos``."""
    env = os.environ.get("TURNGYM_SWE_REPOS")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "tasks" / "swe" / "repos"
        if candidate.is_dir():
            return candidate
    raise TaskError(
        "cannot find the SWE repositories (tasks/swe/repos): run from a turngym source checkout "
        "or set TURNGYM_SWE_REPOS to the directory holding them"
    )


class Tree(Mapping[str, str]):
    """An immutable file tree (relative POSIX path → text) with a cached content hash.

    Edits return a new tree sharing the unchanged files, so a snapshot is a reference.
    """

    __slots__ = ("_files", "_hash")

    def __init__(self, files: Mapping[str, str]) -> None:
        self._files = dict(files)
        self._hash: str | None = None

    def __getitem__(self, path: str) -> str:
        return self._files[path]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._files))

    def __len__(self) -> int:
        return len(self._files)

    def with_file(self, path: str, text: str) -> Tree:
        files = dict(self._files)
        files[path] = text
        return Tree(files)

    @property
    def digest(self) -> str:
        """SHA-256 over sorted (path, text): equal digests ⇔ equal trees."""
        if self._hash is None:
            h = hashlib.sha256()
            for path in sorted(self._files):
                h.update(path.encode())
                h.update(b"\0")
                h.update(self._files[path].encode("utf-8", "surrogatepass"))
                h.update(b"\0")
            self._hash = h.hexdigest()
        return self._hash

    def write_to(self, root: Path) -> None:
        for path, text in self._files.items():
            dest = root / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")


_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".git"}


@lru_cache(maxsize=16)
def load_repo(name: str) -> Tree:
    """Load a shipped repository by name (cached; trees are immutable).

    ``name`` is a directory name under :func:`repos_dir`, never a path: a task naming
    ``/etc`` or ``../x`` would otherwise turn the agent's ``view_file`` into a host file reader.
    """
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        raise ConfigError(f"SWE repository name {name!r} must be one of the shipped repositories ({', '.join(REPO_NAMES)})")
    root = repos_dir() / name
    if not root.is_dir():
        raise TaskError(f"no SWE repository {name!r} in {repos_dir()}; known: {', '.join(REPO_NAMES)}")
    return load_tree(root)


def load_tree(root: Path) -> Tree:
    files: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for fn in sorted(filenames):
            full = Path(dirpath) / fn
            if fn.endswith((".pyc", ".pyo")) or full.is_symlink():  # never follow a link out of the repository
                continue
            files[full.relative_to(root).as_posix()] = full.read_text(encoding="utf-8")
    return Tree(files)
