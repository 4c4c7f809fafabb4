"""Whole-sandbox memory and process caps with a cgroup per session (v2 or v1).

Why: rlimits are per process. ``RLIMIT_AS`` lets eight children take eight times the limit,
and pages that no process maps -- a ``memfd``, files on a tmpfs -- are not counted at all. A
memory cgroup charges every page the sandbox's processes touch (anonymous memory, shmem and
memfd pages, tmpfs files, page cache), and on excess the kernel's OOM killer acts inside the
group only; the pids controller caps the number of tasks of the whole tree.

One cgroup per *session* (created when the session opens, removed when it closes), not per
run: creating a cgroup costs far more than joining one. Each run's launcher joins it before it
execs bubblewrap (a ``/bin/sh`` prefix writing ``0`` to ``cgroup.procs``), so every process of
the run is born inside the group; nothing can fork before the join.

Detection happens once per sandbox: cgroup v2 first (a writable cgroup with the ``memory``
and ``pids`` controllers, see :func:`detect`), then v1 (the ``memory`` and ``pids``
hierarchies). Group names carry the creating process's pid (``turngym-<pid>-<random>``) so
groups left behind by a crashed process are found and removed (:func:`reap_stale`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass

__all__ = ["CgroupHost", "SandboxCgroup", "detect", "reap_stale", "PREFIX"]

#: Name prefix of every cgroup turngym creates.
PREFIX = "turngym-"
_JOIN_SCRIPT = 'for f do case $f in --) shift; break;; esac; echo 0 >"$f" || exit 125; shift; done; exec "$@"'


def _read(path: str) -> str:
    with open(path, encoding="ascii") as fh:
        return fh.read()


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _counter(path: str, key: str) -> int:
    """A ``key value`` line of a cgroup events file (0 when absent or unreadable)."""
    try:
        for line in _read(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _mounts() -> list[tuple[str, str, set[str]]]:
    """``(mount point, fstype, super options)`` of every cgroup/cgroup2 mount."""
    out = []
    try:
        lines = _read("/proc/self/mountinfo").splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) >= 5 and len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2"):
            point = fields[4].replace("\\040", " ")
            out.append((point, rfields[0], set(rfields[2].split(","))))
    return out


def _own_v2_path() -> str | None:
    try:
        for line in _read("/proc/self/cgroup").splitlines():
            if line.startswith("0::"):
                return line[3:]
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class CgroupHost:
    """Where this process can create sandbox cgroups.

    ``version`` 2: ``parents`` holds one directory whose children get ``memory`` and ``pids``.
    ``version`` 1: ``parents`` holds the ``memory`` hierarchy's directory, then the ``pids`` one.
    """

    version: int
    parents: tuple[str, ...]

    def create(self) -> SandboxCgroup:
        """A new, empty group (call :meth:`SandboxCgroup.close` to remove it)."""
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        made: list[str] = []
        try:
            for parent in self.parents:
                path = os.path.join(parent, name)
                os.mkdir(path, 0o755)
                made.append(path)
        except OSError:
            for path in made:
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            raise
        return SandboxCgroup(self.version, tuple(made))

    def describe(self) -> str:
        return f"cgroup v{self.version} under {', '.join(self.parents)}"


class SandboxCgroup:
    """One session's group: limits, the launcher prefix that joins it, and its OOM/pids counters."""

    def __init__(self, version: int, paths: tuple[str, ...]) -> None:
        self.version = version
        self.paths = paths
        self._memory: int | None = None
        self._pids: int | None = None
        self._events = self._read_events()

    # -- limits ------------------------------------------------------------------------------
    def set_limits(self, memory_bytes: int, pids: int) -> None:
        """Apply the caps (a no-op when unchanged). Raises OSError if the kernel refuses."""
        if memory_bytes != self._memory:
            if self.version == 2:
                _write(os.path.join(self.paths[0], "memory.max"), str(memory_bytes))
                swap = os.path.join(self.paths[0], "memory.swap.max")
                if os.path.exists(swap):  # swap would stretch the limit: allow none
                    _write(swap, "0")
            else:
                mem = self.paths[0]
                files = ["memory.limit_in_bytes"]
                if os.path.exists(os.path.join(mem, "memory.memsw.limit_in_bytes")):
                    # memory+swap must stay >= memory: raise memsw first, lower it last.
                    growing = self._memory is not None and memory_bytes > self._memory  # new groups start unlimited
                    files = ["memory.memsw.limit_in_bytes", *files] if growing else [*files, "memory.memsw.limit_in_bytes"]
                for f in files:
                    _write(os.path.join(mem, f), str(memory_bytes))
            self._memory = memory_bytes
        if pids != self._pids:
            _write(os.path.join(self.paths[-1], "pids.max"), str(pids))
            self._pids = pids

    def join_argv(self) -> list[str]:
        """A prefix that moves the launcher into the group, then execs the rest of argv."""
        return ["/bin/sh", "-c", _JOIN_SCRIPT, "sh", *(os.path.join(p, "cgroup.procs") for p in self.paths), "--"]

    # -- what happened -------------------------------------------------------------------------
    def _read_events(self) -> tuple[int, int]:
        if self.version == 2:
            base = self.paths[0]
            return _counter(os.path.join(base, "memory.events"), "oom_kill"), _counter(os.path.join(base, "pids.events"), "max")
        return (_counter(os.path.join(self.paths[0], "memory.oom_control"), "oom_kill"),
                _counter(os.path.join(self.paths[-1], "pids.events"), "max"))  # fmt: skip

    def limit_hit(self) -> str | None:
        """``"memory"`` if the OOM killer acted, ``"pids"`` if a fork was refused, since the last call."""
        before, self._events = self._events, self._read_events()
        if self._events[0] > before[0]:
            return "memory"
        if self._events[1] > before[1]:
            return "processes"
        return None

    def memory_bytes(self) -> int:
        """Bytes charged to the group now (for tests and diagnostics)."""
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        try:
            return int(_read(os.path.join(self.paths[0], name)))
        except (OSError, ValueError):
            return 0

    def procs(self) -> list[int]:
        out: set[int] = set()
        for p in self.paths:
            with contextlib.suppress(OSError, ValueError):
                out.update(int(x) for x in _read(os.path.join(p, "cgroup.procs")).split())
        return sorted(out)

    def kill(self, timeout: float = 2.0) -> None:
        """SIGKILL every process in the group, until none is left (what a run left behind,
        ``setsid`` daemons included: a process cannot leave its cgroup without privileges)."""
        deadline = time.monotonic() + timeout
        kill_file = os.path.join(self.paths[0], "cgroup.kill") if self.version == 2 else ""
        while True:
            pids = self.procs()
            if not pids or time.monotonic() > deadline:
                return
            if kill_file and os.path.exists(kill_file):
                with contextlib.suppress(OSError):
                    _write(kill_file, "1")
            else:
                for pid in pids:
                    with contextlib.suppress(OSError):
                        os.kill(pid, 9)
            time.sleep(0.002)

    def close(self, timeout: float = 2.0) -> None:
        """Kill anything left inside and remove the group (idempotent)."""
        deadline = time.monotonic() + timeout
        for path in self.paths:
            while os.path.isdir(path):
                try:
                    os.rmdir(path)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left for reap_stale
                    if self.version == 2 and os.path.exists(os.path.join(path, "cgroup.kill")):
                        with contextlib.suppress(OSError):
                            _write(os.path.join(path, "cgroup.kill"), "1")
                    else:
                        for pid in self.procs():
                            with contextlib.suppress(OSError):
                                os.kill(pid, 9)
                    time.sleep(0.005)


def _v2_candidates(explicit: str | None) -> list[str]:
    if explicit:
        return [explicit]
    own = _own_v2_path()
    out = []
    for point, fstype, _opts in _mounts():
        if fstype == "cgroup2" and own is not None:
            out.append(os.path.normpath(point + own))
    return out


def _try_v2(parent: str) -> CgroupHost | None:
    """A usable v2 parent: ``memory`` and ``pids`` enabled for its children (enabling them if
    this process may), and a child can be created there."""
    try:
        enabled = set(_read(os.path.join(parent, "cgroup.subtree_control")).split())
        available = set(_read(os.path.join(parent, "cgroup.controllers")).split())
    except OSError:
        return None
    need = {"memory", "pids"}
    if not need <= available:
        return None
    if not need <= enabled:
        try:  # fails with EBUSY when processes live in the parent (the no-internal-process rule)
            _write(os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in sorted(need - enabled)))
        except OSError:
            return None
    host = CgroupHost(2, (parent,))
    return host if _probe(host) else None


def _try_v1(memory_parent: str | None, pids_parent: str | None) -> CgroupHost | None:
    if memory_parent is None or pids_parent is None:
        return None
    host = CgroupHost(1, (memory_parent, pids_parent))
    return host if _probe(host) else None


def _probe(host: CgroupHost) -> bool:
    try:
        cg = host.create()
    except OSError:
        return False
    try:
        cg.set_limits(64 << 20, 16)
        for p in cg.paths:
            if not os.access(os.path.join(p, "cgroup.procs"), os.W_OK):
                return False
        return True
    except OSError:
        return False
    finally:
        cg.close()


def detect(parent: str | None = None) -> CgroupHost | None:
    """The cgroup setup sandboxes can use here, or None (then a watchdog enforces instead).

    ``parent``: a cgroup v2 directory to create sandbox groups under (e.g. one delegated with
    ``systemd-run -p Delegate=yes``); by default this process's own v2 cgroup, then the v1
    ``memory`` and ``pids`` hierarchies. Stale groups of dead processes are reaped on the way.
    """
    parent = parent or os.environ.get("TURNGYM_CGROUP_PARENT") or None
    for cand in _v2_candidates(parent):
        reap_stale(cand)
        host = _try_v2(cand)
        if host is not None:
            return host
    if parent is not None:
        return None
    v1: dict[str, str] = {}
    for point, fstype, opts in _mounts():
        if fstype == "cgroup":
            for ctrl in ("memory", "pids"):
                if ctrl in opts and ctrl not in v1:
                    v1[ctrl] = point
    for p in v1.values():
        reap_stale(p)
    return _try_v1(v1.get("memory"), v1.get("pids"))


def reap_stale(parent: str) -> int:
    """Remove empty ``turngym-<pid>-*`` groups whose creating process is gone; returns how many."""
    n = 0
    try:
        names = os.listdir(parent)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(parent, name))
            n += 1
    return n
