"""Whole-sandbox memory, process and CPU caps with a cgroup per session (v2 or v1).

Why: rlimits are per process. ``RLIMIT_AS`` lets eight children take eight times the limit,
and pages that no process maps -- a ``memfd``, files on a tmpfs -- are not counted at all. A
memory cgroup charges every page the sandbox's processes touch (anonymous memory, shmem and
memfd pages, tmpfs files, page cache), and on excess the kernel's OOM killer acts inside the
group only; the pids controller caps the number of tasks of the whole tree. The cpu
controller, where it is available, gives the sandbox a quota of cores (``cpu.max``;
``cpu.cfs_quota_us`` on v1) and a scheduling weight in proportion (``cpu.weight`` /
``cpu.shares``): a program burning CPU in 64 processes gets what one process of its quota
would, and the scheduler weighs the sandbox as one entity against every other sandbox and
host process, so a burn in some sandboxes cannot starve another's start.

One cgroup per *session* (created when the session opens, removed when it closes), not per
run: creating a cgroup costs far more than joining one. Each run's launcher joins it before it
execs bubblewrap (a ``/bin/sh`` prefix writing ``0`` to ``cgroup.procs``), so every process of
the run is born inside the group; nothing can fork before the join.

Detection happens once per sandbox: cgroup v2 first (a writable cgroup with the ``memory``
and ``pids`` controllers, and ``cpu`` where it can be enabled, see :func:`detect`), then v1
(the ``memory`` and ``pids`` hierarchies, and ``cpu``/``cpuacct`` where mounted). Group names carry the creating process's pid (``turngym-<pid>-<random>``) so
groups left behind by a crashed process are found and removed (:func:`reap_stale`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass

__all__ = ["CgroupHost", "SandboxCgroup", "CpuStat", "detect", "reap_stale", "PREFIX", "CPU_PERIOD_US"]

#: Name prefix of every cgroup turngym creates.
PREFIX = "turngym-"
#: The CFS period the CPU quota is counted over (the kernel's default): a sandbox over its
#: quota waits at most this long before it runs again.
CPU_PERIOD_US = 100_000
#: Controllers a session cgroup must have, and the ones it uses where present.
_REQUIRED = ("memory", "pids")
_OPTIONAL = ("cpu", "cpuacct")
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
class CpuStat:
    """CPU a session's group used (all its processes, since the group was made)."""

    usage_s: float
    throttled_periods: int
    throttled_s: float


@dataclass(frozen=True)
class CgroupHost:
    """Where this process can create sandbox cgroups.

    ``version`` 2: ``parents`` holds one directory whose children get ``memory``, ``pids``
    and, where ``cpu`` is in ``controllers``, ``cpu``.
    ``version`` 1: ``parents`` holds one directory per hierarchy (``memory``, ``pids``, then
    ``cpu`` and ``cpuacct`` where mounted, one entry where they are co-mounted);
    ``controllers`` names each one's controllers.
    """

    version: int
    parents: tuple[str, ...]
    controllers: tuple[frozenset[str], ...] = ()

    @property
    def cpu(self) -> bool:
        """Session groups get a CPU quota and weight."""
        return any("cpu" in c for c in self.controllers)

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
        return SandboxCgroup(self.version, tuple(made), self.controllers)

    def describe(self) -> str:
        return f"cgroup v{self.version} under {', '.join(self.parents)}"


class SandboxCgroup:
    """One session's group: limits, the launcher prefix that joins it, and its OOM/pids counters."""

    def __init__(self, version: int, paths: tuple[str, ...], controllers: tuple[frozenset[str], ...] = ()) -> None:
        self.version = version
        self.paths = paths
        if not controllers:  # v2: one dir for all; v1: memory, then pids
            controllers = (frozenset(_REQUIRED),) if version == 2 else (frozenset({"memory"}), frozenset({"pids"}))
        self._dirs = {ctrl: path for path, ctrls in zip(paths, controllers) for ctrl in ctrls}
        self._memory: int | None = None
        self._pids: int | None = None
        self._cpu: float | None = None
        self._events = self._read_events()

    def _dir(self, controller: str) -> str:
        return self._dirs[controller]

    @property
    def has_cpu(self) -> bool:
        """The group has a CPU quota (the cpu controller is available for it)."""
        return "cpu" in self._dirs

    # -- limits ------------------------------------------------------------------------------
    def set_limits(self, memory_bytes: int, pids: int, cpu_cores: float | None = None) -> None:
        """Apply the caps (a no-op when unchanged). Raises OSError if the kernel refuses.

        ``cpu_cores``: the group's CPU quota in cores (its weight follows it); ignored where
        the group has no cpu controller.
        """
        if memory_bytes != self._memory:
            if self.version == 2:
                _write(os.path.join(self._dir("memory"), "memory.max"), str(memory_bytes))
                swap = os.path.join(self._dir("memory"), "memory.swap.max")
                if os.path.exists(swap):  # swap would stretch the limit: allow none
                    _write(swap, "0")
            else:
                mem = self._dir("memory")
                files = ["memory.limit_in_bytes"]
                if os.path.exists(os.path.join(mem, "memory.memsw.limit_in_bytes")):
                    # memory+swap must stay >= memory: raise memsw first, lower it last.
                    growing = self._memory is not None and memory_bytes > self._memory  # new groups start unlimited
                    files = ["memory.memsw.limit_in_bytes", *files] if growing else [*files, "memory.memsw.limit_in_bytes"]
                for f in files:
                    _write(os.path.join(mem, f), str(memory_bytes))
            self._memory = memory_bytes
        if pids != self._pids:
            _write(os.path.join(self._dir("pids"), "pids.max"), str(pids))
            self._pids = pids
        if cpu_cores is not None and cpu_cores != self._cpu and self.has_cpu:
            self._set_cpu(cpu_cores)
            self._cpu = cpu_cores

    def _set_cpu(self, cores: float) -> None:
        """Quota ``cores`` x the period per period; weight in proportion (1 core = the weight of
        one ordinary process), so under contention sandboxes share by their quotas."""
        cpu = self._dir("cpu")
        quota = max(1000, round(cores * CPU_PERIOD_US))  # the kernel's minimum is 1 ms
        if self.version == 2:
            _write(os.path.join(cpu, "cpu.max"), f"{quota} {CPU_PERIOD_US}")
            _write(os.path.join(cpu, "cpu.weight"), str(min(10_000, max(1, round(100 * cores)))))
        else:
            _write(os.path.join(cpu, "cpu.cfs_period_us"), str(CPU_PERIOD_US))
            _write(os.path.join(cpu, "cpu.cfs_quota_us"), str(quota))
            _write(os.path.join(cpu, "cpu.shares"), str(min(262_144, max(2, round(1024 * cores)))))

    def cpu_stat(self) -> CpuStat | None:
        """CPU time the group's processes used, and how often the quota held them back (None
        where the group has no CPU accounting)."""
        try:
            if self.version == 2:
                fields = dict(line.split(" ", 1) for line in _read(os.path.join(self.paths[0], "cpu.stat")).splitlines())
                return CpuStat(int(fields["usage_usec"]) / 1e6, int(fields.get("nr_throttled", 0)),
                               int(fields.get("throttled_usec", 0)) / 1e6)
            if "cpuacct" not in self._dirs:
                return None
            usage = int(_read(os.path.join(self._dir("cpuacct"), "cpuacct.usage"))) / 1e9
            throttled = _counter(os.path.join(self._dir("cpu"), "cpu.stat"), "nr_throttled") if self.has_cpu else 0
            waited = _counter(os.path.join(self._dir("cpu"), "cpu.stat"), "throttled_time") / 1e9 if self.has_cpu else 0.0
            return CpuStat(usage, throttled, waited)
        except (OSError, ValueError, KeyError):
            return None

    def join_argv(self) -> list[str]:
        """A prefix that moves the launcher into the group, then execs the rest of argv."""
        return ["/bin/sh", "-c", _JOIN_SCRIPT, "sh", *(os.path.join(p, "cgroup.procs") for p in self.paths), "--"]

    # -- what happened -------------------------------------------------------------------------
    def _read_events(self) -> tuple[int, int]:
        if self.version == 2:
            base = self.paths[0]
            return _counter(os.path.join(base, "memory.events"), "oom_kill"), _counter(os.path.join(base, "pids.events"), "max")
        return (_counter(os.path.join(self._dir("memory"), "memory.oom_control"), "oom_kill"),
                _counter(os.path.join(self._dir("pids"), "pids.events"), "max"))  # fmt: skip

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
            return int(_read(os.path.join(self._dir("memory"), name)))
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
    this process may), and a child can be created there; ``cpu`` too where it can be enabled."""
    try:
        enabled = set(_read(os.path.join(parent, "cgroup.subtree_control")).split())
        available = set(_read(os.path.join(parent, "cgroup.controllers")).split())
    except OSError:
        return None
    need = set(_REQUIRED)
    if not need <= available:
        return None
    want = need | ({"cpu"} & available)
    if not want <= enabled:
        try:  # fails with EBUSY when processes live in the parent (the no-internal-process rule)
            _write(os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in sorted(want - enabled)))
        except OSError:
            if not need <= enabled:
                try:
                    _write(os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in sorted(need - enabled)))
                except OSError:
                    return None
    with contextlib.suppress(OSError):
        enabled = set(_read(os.path.join(parent, "cgroup.subtree_control")).split())
    host = CgroupHost(2, (parent,), (frozenset(want & enabled),))
    return _probed(host)


def _try_v1(hierarchies: dict[str, str]) -> CgroupHost | None:
    """The v1 ``memory`` and ``pids`` hierarchies, with ``cpu``/``cpuacct`` where mounted
    (one entry per mount: they are often co-mounted as ``cpu,cpuacct``)."""
    if not all(c in hierarchies for c in _REQUIRED):
        return None
    by_point: dict[str, set[str]] = {}
    for ctrl in (*_REQUIRED, *_OPTIONAL):
        if ctrl in hierarchies:
            by_point.setdefault(hierarchies[ctrl], set()).add(ctrl)
    host = CgroupHost(1, tuple(by_point), tuple(frozenset(c) for c in by_point.values()))
    return _probed(host)


def _probed(host: CgroupHost) -> CgroupHost | None:
    """``host`` if a group made there takes every cap; without the cpu ones if only those fail."""
    if _probe(host):
        return host
    if not host.cpu:
        return None
    keep = [(p, c - set(_OPTIONAL)) for p, c in zip(host.parents, host.controllers) if c - set(_OPTIONAL)]
    bare = CgroupHost(host.version, tuple(p for p, _ in keep), tuple(frozenset(c) for _, c in keep))
    return bare if _probe(bare) else None


def _probe(host: CgroupHost) -> bool:
    try:
        cg = host.create()
    except OSError:
        return False
    try:
        cg.set_limits(64 << 20, 16, 0.5 if host.cpu else None)
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
    ``memory`` and ``pids`` (and ``cpu``, ``cpuacct``) hierarchies. Stale groups of dead
    processes are reaped on the way.
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
            for ctrl in (*_REQUIRED, *_OPTIONAL):
                if ctrl in opts and ctrl not in v1:
                    v1[ctrl] = point
    for p in set(v1.values()):
        reap_stale(p)
    return _try_v1(v1)


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
