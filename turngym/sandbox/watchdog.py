"""A polling watchdog for whole-sandbox memory and disk, where the kernel cannot enforce them.

Used when no cgroup is writable (memory) or no sized tmpfs can be mounted for the working dir
(disk): typically when turngym does not run as root. While a run is in progress the launcher
polls :meth:`Watchdog.check` and kills the whole tree when it reports a limit.

What it counts, and why each part:

* the proportional set size (``Pss`` of ``/proc/PID/smaps_rollup``) of every process of the
  run -- proportional, so forked children sharing copy-on-write pages are not counted many
  times over, but eight children each touching their own pages are;
* ``memfd`` files held open by those processes (their pages are in no one's RSS until mapped);
* the used space of the sandbox's private ``/tmp`` (a tmpfs: its files are memory);
* for disk, the blocks used by the working dir.

A poll is not a limit: a program can overshoot by what it allocates between two polls. The
kernel-enforced paths (cgroup, tmpfs ``size=``) are preferred wherever they are available.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

from turngym.sandbox.limits import LimitName

__all__ = ["Watchdog", "tree_pids", "memory_of", "uid_pids"]

#: Seconds between polls (a disk walk that takes long backs the interval off).
INTERVAL_S = 0.05


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
            out.extend(int(x) for x in fh.read().split())
    return out


def tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants (processes reparented away are missed: see ``uid``)."""
    seen: dict[int, None] = {}  # ordered, with O(1) membership: a fork bomb has thousands of pids
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen[pid] = None
        stack.extend(_children(pid))
    return list(seen)


def uid_pids(uid: int) -> Iterator[int]:
    """Every process of ``uid`` but this one (sandboxes sweep what a run left behind by uid)."""
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != me:
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    yield int(entry.name)


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _memfds(pid: int, seen: set[tuple[int, int]]) -> int:
    total = 0
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return 0
    for fd in fds:
        path = f"{fd_dir}/{fd}"
        try:
            if not os.readlink(path).startswith("/memfd:"):
                continue
            st = os.stat(path)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key not in seen:
            seen.add(key)
            total += st.st_blocks * 512
    return total


def _tmpfs_used(path: str) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def memory_of(pids: list[int]) -> int:
    """Pss of ``pids`` plus the memfds they hold (each memfd counted once)."""
    seen: set[tuple[int, int]] = set()
    return sum(_pss(p) + _memfds(p, seen) for p in pids)


class Watchdog:
    """Polls one run. ``check(root_pid)`` returns the limit exceeded, or None.

    Args:
        memory_bytes: cap on the run's memory (None: not watched; a cgroup enforces it).
        disk_bytes: cap on the working dir's size (None: not watched; a tmpfs enforces it).
        disk_usage: measures the working dir (bytes).
        uid: the session's private uid when it has one: every process of that uid counts,
            daemons that left the tree included.
        run_uid: the session's untrusted uid (code its trusted programs run), counted alike.
        tmp_inside: count the ``/tmp`` tmpfs seen through ``/proc/<pid>/root/tmp`` of the
            run's processes (bubblewrap's private ``/tmp``).
    """

    def __init__(
        self,
        *,
        memory_bytes: int | None,
        disk_bytes: int | None,
        disk_usage: Callable[[], int],
        uid: int | None = None,
        tmp_inside: bool = True,
        run_uid: int | None = None,
    ) -> None:
        self.memory_bytes = memory_bytes
        self.disk_bytes = disk_bytes
        self._disk_usage = disk_usage
        self.uid = uid
        self.run_uid = run_uid
        self.tmp_inside = tmp_inside
        self.interval = INTERVAL_S
        self._next = 0.0
        self.peak_memory = 0

    @property
    def active(self) -> bool:
        return self.memory_bytes is not None or self.disk_bytes is not None

    def due(self, now: float) -> float:
        """Seconds until the next poll."""
        return max(0.0, self._next - now)

    @staticmethod
    def _private_tmpfs(pids: list[int]) -> int:
        """Used bytes of the distinct private ``/tmp`` and ``/dev/shm`` mounts the processes see.

        A process still on the host's root (the launcher, or bubblewrap before it pivoted
        into the sandbox) sees the host's directories: those are skipped.
        """
        host_root = os.stat("/")
        host_devs = {host_root.st_dev}
        for d in ("/tmp", "/dev/shm"):
            with contextlib.suppress(OSError):
                host_devs.add(os.stat(d).st_dev)
        seen: dict[int, str] = {}
        for p in pids:
            with contextlib.suppress(OSError):
                root = os.stat(f"/proc/{p}/root")
                if (root.st_dev, root.st_ino) == (host_root.st_dev, host_root.st_ino):
                    continue
                for d in ("tmp", "dev/shm"):
                    path = f"/proc/{p}/root/{d}"
                    st = os.stat(path)
                    if st.st_dev not in host_devs:
                        seen.setdefault(st.st_dev, path)
        return sum(_tmpfs_used(path) for path in seen.values())

    def check(self, root: int) -> LimitName | None:
        start = time.monotonic()
        hit: LimitName | None = None
        if self.memory_bytes is not None:
            pids = tree_pids(root)
            if self.uid is not None:
                pids = sorted({*pids, *uid_pids(self.uid), *(uid_pids(self.run_uid) if self.run_uid is not None else ())})
            used = memory_of(pids)
            if self.tmp_inside:
                used += self._private_tmpfs(pids)
            self.peak_memory = max(self.peak_memory, used)
            if used > self.memory_bytes:
                hit = "memory"
        if hit is None and self.disk_bytes is not None and self._disk_usage() > self.disk_bytes:
            hit = "disk"
        spent = time.monotonic() - start
        self.interval = max(INTERVAL_S, 10 * spent)  # never spend more than ~10% of a core polling
        self._next = time.monotonic() + self.interval
        return hit
