"""Local backends: bubblewrap (isolated, the default) and rlimit-only (not isolated).

Both keep the session's working dir on the host (a 0700 directory owned by the session's
own uid) and run each command as a fresh process tree under rlimits, killed as a group on the
wall deadline or an output flood (see :mod:`turngym.sandbox._proc`).

Why a uid per session: ``RLIMIT_NPROC`` counts processes per *real* uid and is not enforced
for root at all, so when turngym runs as root each session drops to its own unprivileged uid.
Then a fork bomb is capped, one session cannot signal or read another, and nothing the
sandboxed code creates is owned by root.

Host-side file access (``write_files``, ``read_file``, ``snapshot``) walks the workdir with
``O_NOFOLLOW`` directory fds: sandboxed code may plant symlinks to ``/etc/shadow``, and the
host, which may be root, must never follow them.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import ClassVar

from turngym.core.errors import ConfigError
from turngym.sandbox._proc import rlimit_argv, rlimit_setter, run_process
from turngym.sandbox.base import Files, PythonRuntime, Sandbox, Session, WorkdirSnapshot, check_relpath
from turngym.sandbox.errors import NotIsolatedWarning, SandboxError, SandboxUnavailable
from turngym.sandbox.limits import Limits, RunResult

__all__ = ["BubblewrapSandbox", "RlimitSandbox", "LocalSession"]

_PATH = "/usr/local/bin:/usr/bin:/bin"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# uids handed to sessions when running as root: a high range no distribution allocates.
_UID_BASE, _UID_SPAN = 0x40000000, 1 << 28


#: Host-side walks stop this deep: sandboxed code can nest directories faster than a
#: recursive walk (or PATH_MAX) tolerates.
MAX_WALK_DEPTH = 64


def _walk(root: str) -> Iterator[tuple[str, int, list[os.DirEntry[str]]]]:
    """Iterative, link-safe walk: ``(relative dir, its fd, its entries)`` for every dir.

    Subdirectories are opened with ``O_NOFOLLOW`` relative to the root fd; only called when
    no sandboxed process is running, so the tree cannot change underneath.
    """
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        stack = [""]
        while stack:
            rel = stack.pop()
            try:
                fd = os.open(rel, _DIR_FLAGS, dir_fd=root_fd) if rel else os.dup(root_fd)
            except OSError:
                continue  # vanished, or a path too long: skip it
            try:
                with os.scandir(fd) as it:
                    entries = list(it)
                yield rel, fd, entries
                if rel.count("/") < MAX_WALK_DEPTH:
                    stack.extend(f"{rel}/{e.name}" if rel else e.name for e in entries if e.is_dir(follow_symlinks=False))
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)


def _rmtree(path: str) -> None:
    """Delete a tree a sandbox wrote (modes may be 000, nesting deeper than Python recurses)."""
    try:
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=lambda func, p, exc: _force_remove(func, p))
        else:
            shutil.rmtree(path, onerror=lambda func, p, info: _force_remove(func, p))
    except RecursionError:
        subprocess.run(["rm", "-rf", "--one-file-system", path], check=False, capture_output=True)


def _base_env(home: str) -> dict[str, str]:
    """The whole environment of a sandboxed process: nothing leaks from the host's."""
    return {
        "PATH": _PATH,
        "HOME": home,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


class LocalSession(Session):
    """A session whose working dir is a host directory (bubblewrap binds it at ``/work``)."""

    sandbox: _LocalSandbox

    def __init__(self, sandbox: _LocalSandbox, limits: Limits, host_dir: str, uid: int | None) -> None:
        super().__init__(sandbox, limits)
        self.host_dir = host_dir
        self.uid = uid

    @property
    def workdir(self) -> str:
        return self.sandbox.inner_workdir or self.host_dir

    # -- safe host-side file access ------------------------------------------------------
    def _chown(self, fd: int) -> None:
        if self.uid is not None:
            os.fchown(fd, self.uid, self.uid)

    def _open_parent(self, rel: str, create: bool) -> tuple[int, str]:
        """A dir fd for ``rel``'s parent (walked without following links) and the leaf name."""
        parts = rel.split(os.sep)
        fd = os.open(self.host_dir, _DIR_FLAGS)
        try:
            for part in parts[:-1]:
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                    self._chown(nxt)
                os.close(fd)
                fd = nxt
        except OSError:
            os.close(fd)
            raise
        return fd, parts[-1]

    def write_files(self, files: Files) -> None:
        self._check_open()
        for path, content in files.items():
            rel = check_relpath(path)
            data = content.encode() if isinstance(content, str) else bytes(content)
            try:
                dfd, name = self._open_parent(rel, create=True)
            except OSError as exc:
                raise ConfigError(f"cannot create the parent directory of {path!r}: {exc.strerror}") from None
            try:
                try:
                    st = os.lstat(name, dir_fd=dfd)
                    if stat.S_ISDIR(st.st_mode):  # a planted dir, link or fifo: replace it
                        _rmtree(os.path.join(self.host_dir, rel))
                    elif not stat.S_ISREG(st.st_mode):
                        os.unlink(name, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
                try:
                    self._chown(fd)
                    with os.fdopen(fd, "wb", closefd=False) as fh:
                        fh.write(data)
                finally:
                    os.close(fd)
            finally:
                os.close(dfd)

    def read_file(self, path: str) -> bytes:
        self._check_open()
        rel = check_relpath(path)
        try:
            dfd, name = self._open_parent(rel, create=False)
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(f"no file {path!r} in the session's working dir") from None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            raise FileNotFoundError(f"cannot read {path!r} in the working dir: {exc.strerror} (links are not followed)") from None
        finally:
            os.close(dfd)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise FileNotFoundError(f"{path!r} is not a regular file")
            return fh.read()

    def snapshot(self) -> WorkdirSnapshot:
        self._check_open()
        entries: list[tuple[str, int, bytes]] = []
        for rel_dir, dfd, dir_entries in _walk(self.host_dir):
            for e in dir_entries:
                name = e.name
                rel = f"{rel_dir}/{name}" if rel_dir else name
                st = os.lstat(name, dir_fd=dfd)
                if stat.S_ISLNK(st.st_mode):
                    entries.append((rel, 0, os.readlink(name, dir_fd=dfd).encode()))
                elif stat.S_ISREG(st.st_mode):
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
                    with os.fdopen(fd, "rb") as fh:
                        entries.append((rel, stat.S_IMODE(st.st_mode), fh.read()))
        entries.sort()
        return WorkdirSnapshot(tuple(entries))

    def restore(self, snap: WorkdirSnapshot) -> None:
        self.reset()
        for rel, mode, data in snap.entries:
            if mode:
                self.write_files({rel: data})
                dfd, name = self._open_parent(rel, create=False)
                try:
                    os.chmod(name, mode, dir_fd=dfd)
                finally:
                    os.close(dfd)
            else:
                dfd, name = self._open_parent(rel, create=True)
                try:
                    os.symlink(data.decode(), name, dir_fd=dfd)
                    if self.uid is not None:
                        os.chown(name, self.uid, self.uid, dir_fd=dfd, follow_symlinks=False)
                finally:
                    os.close(dfd)

    def reset(self) -> None:
        self._check_open()
        for entry in os.scandir(self.host_dir):
            if entry.is_dir(follow_symlinks=False):
                _rmtree(entry.path)
            else:
                os.unlink(entry.path)

    def disk_usage(self) -> int:
        """Bytes the workdir occupies on disk (blocks, so sparse files count what they use)."""
        total = 0
        for _rel, _fd, entries in _walk(self.host_dir):
            for e in entries:
                try:
                    total += e.stat(follow_symlinks=False).st_blocks * 512
                except FileNotFoundError:
                    pass
        return total

    # -- commands ------------------------------------------------------------------------
    def _execute(self, argv: Sequence[str], *, stdin: bytes | None, limits: Limits, env: Mapping[str, str]) -> RunResult:
        result = self.sandbox._execute(self, argv, stdin=stdin, limits=limits, env=env)
        if self.sandbox.reap_by_uid and self.uid is not None:
            _kill_uid(self.uid)
        if result.limit_hit is None and self.disk_usage() > limits.disk_mb << 20:
            result = dataclasses.replace(result, limit_hit="disk")
        return result

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        if self.sandbox.reap_by_uid and self.uid is not None:
            _kill_uid(self.uid)
        _rmtree(self.host_dir)


def _force_remove(func: Callable[[str], object], path: str) -> None:
    """rmtree error hook: a sandboxed program may have chmod-ed a dir to 000."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        func(path)
    except OSError:
        pass


def _kill_uid(uid: int) -> None:
    """SIGKILL every process whose real uid is ``uid`` (a session's private uid)."""
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if os.stat(entry.path).st_uid == uid:
                os.kill(int(entry.name), 9)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue


class _LocalSandbox(Sandbox):
    """Shared machinery of the host-directory backends."""

    #: Where the program sees its workdir (None = at its host path).
    inner_workdir: ClassVar[str | None] = None
    #: Kill leftovers by uid after each run (when no PID namespace does it for us).
    reap_by_uid: ClassVar[bool] = False

    def __init__(self, limits: Limits | None = None, *, python: PythonRuntime | None = None, root: str | None = None) -> None:
        super().__init__(limits, python=python)
        self._as_root = os.geteuid() == 0
        self._root = tempfile.mkdtemp(prefix=f"turngym-{self.name}-", dir=root)
        os.chmod(self._root, 0o711)  # sessions can reach their own dir, not list others'
        # A sandbox that is never closed still removes its directory when collected.
        self._finalizer = weakref.finalize(self, _rmtree, self._root)

    def _session_uid(self) -> int | None:
        return _UID_BASE + secrets.randbelow(_UID_SPAN) if self._as_root else None

    def open_session(self, limits: Limits | None = None) -> LocalSession:
        uid = self._session_uid()
        try:
            host_dir = tempfile.mkdtemp(prefix="s-", dir=self._root)
            if uid is not None:  # root owns it (bwrap, capless, can enter), the session's gid writes
                os.chown(host_dir, 0, uid)
                os.chmod(host_dir, 0o770)
        except OSError as exc:
            raise SandboxError(f"{self.name}: cannot create a working dir under {self._root}: {exc}") from exc
        return LocalSession(self, limits or self.limits, host_dir, uid)

    def _execute(self, session: LocalSession, argv: Sequence[str], *, stdin: bytes | None, limits: Limits, env: Mapping[str, str]) -> RunResult:
        raise NotImplementedError

    def close(self) -> None:
        self._finalizer()


class BubblewrapSandbox(_LocalSandbox):
    """Linux namespaces via bubblewrap: the default, about 4 ms of overhead per run.

    Each run gets: no network (a private net namespace with only loopback), a read-only view
    of ``/usr``, ``/etc`` and the Python install and nothing else of the host, a private
    ``/tmp`` (tmpfs), the session's workdir at ``/work``, a new PID namespace (everything dies
    when the run ends, daemons included), all capabilities dropped, ``no_new_privs``, and
    ``--die-with-parent``. As root, the program runs as the session's own uid (via
    ``setpriv``) so ``RLIMIT_NPROC`` holds; otherwise bubblewrap uses a user namespace.
    """

    name = "bubblewrap"
    isolated = True
    inner_workdir = "/work"
    _probed: ClassVar[dict[tuple[str, ...], str | None]] = {}

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        python: PythonRuntime | None = None,
        root: str | None = None,
        ro_binds: Sequence[str] = (),
    ) -> None:
        self._bwrap = shutil.which("bwrap")
        if self._bwrap is None:
            raise SandboxUnavailable(
                "bubblewrap is not installed (no 'bwrap' on PATH). Install it with "
                "`apt-get install -y bubblewrap`, or use make_sandbox('docker') / make_sandbox('rlimit')."
            )
        super().__init__(limits, python=python, root=root)
        self._setpriv = shutil.which("setpriv") if self._as_root else None
        self._prlimit = shutil.which("prlimit")
        if self._as_root and self._setpriv is None:
            raise SandboxUnavailable("running as root needs util-linux's `setpriv` to drop to a session uid; install util-linux")
        self._prefix = self._build_prefix(ro_binds)
        self._probe()

    def _build_prefix(self, ro_binds: Sequence[str]) -> list[str]:
        # No --new-session: the launcher already starts in a new session without a controlling
        # terminal (start_new_session), which is what that flag guards against (TIOCSTI), and
        # it costs ~3 ms per run.
        args = [self._bwrap or "bwrap", "--die-with-parent", "--unshare-pid", "--unshare-net",
                "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox", "--unshare-cgroup-try"]
        if not self._as_root:
            args.append("--unshare-user")
        bound: list[str] = []
        for d in ("/usr", "/etc"):
            args += ["--ro-bind", d, d]
            bound.append(d)
        for d in ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", d, d]
                bound.append(d)
        made: set[str] = set()
        for d in sorted({*self.python.host_dirs(), *(os.path.realpath(b) for b in ro_binds)}):
            if any(d == b or d.startswith(b + "/") for b in bound) or not os.path.exists(d):
                continue
            parts = d.strip("/").split("/")
            for i in range(1, len(parts)):
                parent = "/" + "/".join(parts[:i])
                if parent not in made and not any(parent == b or parent.startswith(b + "/") for b in bound):
                    args += ["--perms", "0755", "--dir", parent]
                    made.add(parent)
            args += ["--ro-bind", d, d]
            bound.append(d)
        args += ["--proc", "/proc", "--dev", "/dev", "--cap-drop", "ALL"]
        if self._as_root:
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        return args

    def _argv(self, session: LocalSession, argv: Sequence[str], limits: Limits) -> list[str]:
        full = [*self._prefix, "--perms", "1777", "--size", str(limits.tmp_mb << 20), "--tmpfs", "/tmp",
                "--bind", session.host_dir, "/work", "--chdir", "/work"]
        if session.uid is not None:
            u = str(session.uid)
            full += [self._setpriv or "setpriv", f"--reuid={u}", f"--regid={u}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        full += argv
        return full

    def _execute(self, session: LocalSession, argv: Sequence[str], *, stdin: bytes | None, limits: Limits, env: Mapping[str, str]) -> RunResult:
        status_pipe = os.pipe()
        full = self._argv(session, argv, limits)
        full[1:1] = ["--json-status-fd", str(status_pipe[1])]
        if self._prlimit:
            full = rlimit_argv(self._prlimit, limits) + full
        return run_process(
            full,
            status_pipe=status_pipe,
            cwd=session.host_dir,
            env={**_base_env("/work"), **env},
            stdin=stdin,
            limits=limits,
            preexec=None if self._prlimit else rlimit_setter(limits),
            backend=self.name,
            signal_in_exit_code=True,
        )

    def _probe(self) -> None:
        """Run ``true`` once per configuration: fail at construction, not mid-episode."""
        key = tuple(self._prefix)
        if key not in self._probed:
            with self.open_session(Limits(wall_s=10)) as s:
                res = s.run(["true"])
            self._probed[key] = None if res.exit_code == 0 else (res.stderr.strip() or res.summary())
        err = self._probed[key]
        if err is not None:
            self.close()
            raise SandboxUnavailable(
                f"bubblewrap cannot create a sandbox here: {err}. User namespaces may be disabled "
                "(sysctl kernel.unprivileged_userns_clone=1) or the container forbids them; "
                "use make_sandbox('docker') or make_sandbox('rlimit')."
            )


def _others_can_exec(path: str) -> bool:
    """True if a stranger uid can reach and execute ``path`` (every ancestor is o+x)."""
    path = os.path.realpath(path)
    while True:
        try:
            if not os.stat(path).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


class RlimitSandbox(_LocalSandbox):
    """rlimits + process-group kill only: **not isolated** (code sees the host and network).

    For machines without user namespaces or Docker. Limits hold (time, memory, output, file
    size); the process count holds only when runs can drop to a private uid (running as root
    with an interpreter others can execute), in which case leftovers are also killed by uid
    after each run. Constructing one warns with :class:`NotIsolatedWarning`.
    """

    name = "rlimit"
    isolated = False
    reap_by_uid = True

    def __init__(self, limits: Limits | None = None, *, python: PythonRuntime | None = None, root: str | None = None) -> None:
        super().__init__(limits, python=python, root=root)
        warnings.warn(
            "RlimitSandbox is NOT isolated: sandboxed code can read host files and use the network. "
            "Use it only for trusted code or where bubblewrap/Docker are impossible.",
            NotIsolatedWarning,
            stacklevel=2,
        )
        self.drops_uid = self._as_root and _others_can_exec(self.python.executable)

    @property
    def reusable_sessions(self) -> bool:  # type: ignore[override]
        """Only with a private uid can every leftover process be found and killed."""
        return self.drops_uid

    @property
    def enforces_process_limit(self) -> bool:
        """``RLIMIT_NPROC`` only binds non-root users."""
        return self.drops_uid or not self._as_root

    def _session_uid(self) -> int | None:
        return super()._session_uid() if self.drops_uid else None

    def _execute(self, session: LocalSession, argv: Sequence[str], *, stdin: bytes | None, limits: Limits, env: Mapping[str, str]) -> RunResult:
        return run_process(
            argv,
            cwd=session.host_dir,
            env={**_base_env(session.host_dir), **env},
            stdin=stdin,
            limits=limits,
            preexec=rlimit_setter(limits),
            backend=self.name,
            user=session.uid,
        )

