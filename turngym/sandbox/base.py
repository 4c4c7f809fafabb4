"""The one sandbox interface: :class:`Sandbox` (a backend) and :class:`Session` (a workdir).

A :class:`Session` is a working directory that lives across commands: write files, run
commands or Python source in it, read files back, snapshot and restore it. Every command
runs in a fresh process tree under the session's :class:`~turngym.sandbox.limits.Limits`;
only the files persist. :meth:`Sandbox.run` / :meth:`Sandbox.run_python` are the one-shot
form (a throwaway session). Multi-turn envs keep a session per episode; the SWE env builds on
``write_files`` / ``run`` / ``snapshot``.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import ClassVar

from turngym.core.errors import ConfigError
from turngym.sandbox.errors import SessionClosed
from turngym.sandbox.limits import Limits, RunResult

__all__ = ["Sandbox", "Session", "PythonRuntime", "WorkdirSnapshot", "Files", "check_relpath"]

Files = Mapping[str, "str | bytes"]
#: Sources longer than this are written to a file instead of passed with ``-c`` (argv limit).
_MAX_INLINE_SOURCE = 64_000
_SCRIPT_NAME = ".turngym_main.py"


def check_relpath(path: str) -> str:
    """Normalise a workdir-relative path; reject absolute paths and ``..`` escapes.

    >>> check_relpath("pkg/./mod.py")
    'pkg/mod.py'
    >>> check_relpath("../etc/passwd")
    Traceback (most recent call last):
    ...
    turngym.core.errors.ConfigError: file path '../etc/passwd' must stay inside the working dir (relative, no '..')
    """
    norm = os.path.normpath(path) if isinstance(path, str) else ""
    if not norm or norm == "." or os.path.isabs(norm) or norm.split(os.sep)[0] == ".." or "\x00" in norm:
        raise ConfigError(f"file path {path!r} must stay inside the working dir (relative, no '..')")
    return norm


#: Names of the directories ``site`` adds packages from.
_SITE_DIR_NAMES = frozenset({"site-packages", "dist-packages"})


def _site_dirs() -> tuple[str, ...]:
    """This interpreter's own site directories, then the other site directories on its ``sys.path``.

    With ``-S`` the sandboxed interpreter runs no ``.pth`` file, so a site directory one of them
    added (a venv layered over another environment: ``scripts/layered_venv.py``, verl's venv) must
    be named here, or the packages found on the host (an MCP server's) fail to import inside.
    Only directories named like site directories are taken: an editable install's source tree
    (a path ``.pth``) stays out, as does the user site.
    """
    paths = sysconfig.get_paths()
    out: list[str] = []
    for key in ("purelib", "platlib"):
        p = paths.get(key)
        if p and os.path.isdir(p) and p not in out:
            out.append(p)
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    for p in sys.path:
        if p and os.path.basename(p) in _SITE_DIR_NAMES and p not in out and p != user and os.path.isdir(p):
            out.append(p)
    return tuple(out)


@dataclass(frozen=True)
class PythonRuntime:
    """Which interpreter runs ``run_python`` and how it starts.

    The default is the host's interpreter with ``-S`` (skip ``site``: .pth processing costs
    ~30 ms per start) and its site-packages put back through ``PYTHONPATH``, so numpy and
    friends import, but this repository's editable install does not leak in.
    ``PYTHONHASHSEED=0`` makes set/dict iteration of agent code reproducible.
    """

    executable: str = field(default_factory=lambda: os.path.realpath(sys.executable))
    flags: tuple[str, ...] = ("-S", "-B")
    path: tuple[str, ...] = field(default_factory=_site_dirs)

    def argv(self) -> list[str]:
        return [self.executable, *self.flags]

    def env(self) -> dict[str, str]:
        env = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
        if self.path:
            env["PYTHONPATH"] = os.pathsep.join(self.path)
        return env

    def host_dirs(self) -> tuple[str, ...]:
        """Directories the interpreter needs to see (for backends that bind them in)."""
        dirs = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *self.path)}
        dirs.add(os.path.dirname(os.path.dirname(self.executable)))
        return tuple(sorted(dirs))


@dataclass(frozen=True)
class WorkdirSnapshot:
    """An immutable copy of a session's files: ``(path, mode, content)`` sorted by path.

    Symlinks are kept as links (``mode`` 0 and the target as content), never followed.
    """

    entries: tuple[tuple[str, int, bytes], ...]

    @property
    def files(self) -> dict[str, bytes]:
        """Regular files only, path -> content."""
        return {p: data for p, mode, data in self.entries if mode}

    @property
    def size_bytes(self) -> int:
        return sum(len(d) for _, _, d in self.entries)

    def changed_paths(self, other: WorkdirSnapshot) -> list[str]:
        """Paths added, removed or modified (content or mode) between ``self`` and ``other``.

        >>> a = WorkdirSnapshot((("x", 0o644, b"1"), ("y", 0o644, b"2")))
        >>> b = WorkdirSnapshot((("x", 0o644, b"1"), ("y", 0o644, b"3"), ("z", 0o644, b"")))
        >>> a.changed_paths(b)
        ['y', 'z']
        """
        mine = {p: (m, d) for p, m, d in self.entries}
        theirs = {p: (m, d) for p, m, d in other.entries}
        return sorted(p for p in mine.keys() | theirs.keys() if mine.get(p) != theirs.get(p))


class Session(ABC):
    """A persistent working directory in a sandbox (files survive between commands)."""

    def __init__(self, sandbox: Sandbox, limits: Limits) -> None:
        self.sandbox = sandbox
        self.limits = limits
        self._closed = False
        self._owner_pid = os.getpid()  # a forked child's copy of this object is not its owner

    # -- files -----------------------------------------------------------------------------
    @abstractmethod
    def write_files(self, files: Files) -> None:
        """Create or overwrite files (parents are created); paths are workdir-relative."""

    @abstractmethod
    def read_file(self, path: str) -> bytes:
        """Content of a regular file in the workdir (symlinks are never followed)."""

    @abstractmethod
    def snapshot(self) -> WorkdirSnapshot:
        """Copy every file of the workdir."""

    @abstractmethod
    def restore(self, snap: WorkdirSnapshot) -> None:
        """Make the workdir hold exactly ``snap``'s files."""

    @abstractmethod
    def reset(self) -> None:
        """Delete every file in the workdir (the session stays usable)."""

    def copy_in(self, src: str | os.PathLike[str], dest: str = ".", *, batch_bytes: int = 32 << 20) -> int:
        """Copy a host directory tree into the workdir under ``dest``; returns the file count.

        Regular files only (symlinks and special files are skipped); modes are not kept.
        """
        self._check_open()
        root = os.fspath(src)
        if not os.path.isdir(root):
            raise ConfigError(f"copy_in: {root!r} is not a directory")
        prefix = "" if dest in ("", ".") else check_relpath(dest) + "/"
        batch: dict[str, bytes] = {}
        size = count = 0
        for dirpath, _dirs, names in os.walk(root):
            for name in names:
                path = os.path.join(dirpath, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                with open(path, "rb") as fh:
                    data = fh.read()
                batch[prefix + os.path.relpath(path, root)] = data
                size += len(data)
                count += 1
                if size >= batch_bytes:
                    self.write_files(batch)
                    batch, size = {}, 0
        if batch:
            self.write_files(batch)
        return count

    def list_files(self) -> list[str]:
        """Relative paths of every file in the workdir, sorted."""
        return [p for p, _, _ in self.snapshot().entries]

    # -- commands --------------------------------------------------------------------------
    @abstractmethod
    def _execute(self, argv: Sequence[str], *, stdin: bytes | None, limits: Limits, env: Mapping[str, str]) -> RunResult:
        """Run ``argv`` in the workdir (the backend's part)."""

    @property
    @abstractmethod
    def workdir(self) -> str:
        """The working dir's path as the sandboxed program sees it."""

    def run(
        self,
        command: str | Sequence[str],
        *,
        stdin: str | bytes | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> RunResult:
        """Run a shell command line (``str``) or an argv list in the workdir."""
        self._check_open()
        argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        if not argv:
            raise ConfigError("run() needs a non-empty command")
        data = stdin.encode() if isinstance(stdin, str) else stdin
        return self._execute(argv, stdin=data, limits=limits or self.limits, env=dict(env or {}))

    def run_python(
        self,
        source: str,
        *,
        args: Sequence[str] = (),
        stdin: str | bytes | None = None,
        limits: Limits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> RunResult:
        """Run Python ``source`` in the workdir with the sandbox's :class:`PythonRuntime`."""
        self._check_open()
        py = self.sandbox.python
        full_env = {**py.env(), **(env or {})}
        if len(source) <= _MAX_INLINE_SOURCE:
            return self.run([*py.argv(), "-c", source, *args], stdin=stdin, limits=limits, env=full_env)
        self.write_files({_SCRIPT_NAME: source})
        return self.run([*py.argv(), _SCRIPT_NAME, *args], stdin=stdin, limits=limits, env=full_env)

    def run_trusted(self, argv: Sequence[str], *, stdin: str | bytes | None = None, limits: Limits | None = None,
                    env: Mapping[str, str] | None = None) -> RunResult:
        """Run a *trusted* program (a grader) that runs the code it judges under another uid
        where the backend can give it one (bubblewrap as root); elsewhere the same as :meth:`run`."""
        return self.run(list(argv), stdin=stdin, limits=limits, env=env)

    def run_trusted_python(self, source: str, *, limits: Limits | None = None) -> RunResult:
        """:meth:`run_trusted` for Python ``source`` (see :meth:`run_python`)."""
        self._check_open()
        py = self.sandbox.python
        if len(source) <= _MAX_INLINE_SOURCE:
            return self.run_trusted([*py.argv(), "-c", source], limits=limits, env=py.env())
        self.write_files({_SCRIPT_NAME: source})
        return self.run_trusted([*py.argv(), _SCRIPT_NAME], limits=limits, env=py.env())

    # -- lifetime --------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop everything and delete the workdir (idempotent)."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed("this sandbox session is closed; open a new one with sandbox.open_session()")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten session must not leave a workdir or a container
        # ...but only in the process that opened it: a forked child that drops its copy must not
        # delete the parent's workdir or kill the parent's runs
        if not getattr(self, "_closed", True) and getattr(self, "_owner_pid", None) == os.getpid():
            try:
                self.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown: nothing sensible to do
                pass


class Sandbox(ABC):
    """A backend that runs untrusted code. Use :func:`turngym.sandbox.make_sandbox` to pick one.

    Class attributes:
        name: backend name (``bubblewrap``, ``rlimit``, ``docker``).
        isolated: False if code can see the host's files and network (rlimit-only).
        reusable_sessions: a session can be wiped with ``reset()`` and safely handed to
            another episode (nothing from the previous user can survive in it).
    """

    name: ClassVar[str]
    isolated: ClassVar[bool]
    reusable_sessions: ClassVar[bool] = True

    def __init__(self, limits: Limits | None = None, *, python: PythonRuntime | None = None) -> None:
        self.limits = limits or Limits()
        self.python = python or PythonRuntime()

    @abstractmethod
    def open_session(self, limits: Limits | None = None) -> Session:
        """A fresh, empty working dir with ``limits`` (default: the sandbox's)."""

    @contextmanager
    def _one_shot_session(self, limits: Limits | None) -> Iterator[Session]:
        """The session one :meth:`run`/:meth:`run_python` call uses, released when the call ends.

        A backend whose sessions are costly to open (a container) overrides this to lend a
        wiped, reused one instead; the run methods themselves stay the same for every backend.
        """
        with self.open_session(limits) as s:
            yield s

    def run(
        self,
        command: str | Sequence[str],
        *,
        files: Files | None = None,
        stdin: str | bytes | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """Run one command in a fresh working dir holding ``files``, then delete it."""
        with self._one_shot_session(limits) as s:
            if files:
                s.write_files(files)
            return s.run(command, stdin=stdin)

    def run_python(
        self,
        source: str,
        *,
        files: Files | None = None,
        args: Sequence[str] = (),
        stdin: str | bytes | None = None,
        limits: Limits | None = None,
    ) -> RunResult:
        """Run Python source in a fresh working dir holding ``files``, then delete it."""
        with self._one_shot_session(limits) as s:
            if files:
                s.write_files(files)
            return s.run_python(source, args=args, stdin=stdin)

    def run_trusted_python(self, source: str, *, files: Files | None = None, limits: Limits | None = None) -> RunResult:
        """Run a trusted Python program (a grader) in a fresh working dir: the code it starts
        runs as the session's untrusted uid where the backend has one (see
        :meth:`Session.run_trusted`)."""
        with self._one_shot_session(limits) as s:
            if files:
                s.write_files(files)
            return s.run_trusted_python(source)

    def close(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release backend resources (sessions close themselves)."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(isolated={self.isolated}, limits={self.limits})"


