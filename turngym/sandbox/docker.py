"""Docker backend: one container per session, one ``exec`` per command.

Used when a Docker engine answers (``docker.from_env().ping()``); otherwise constructing it
raises :class:`SandboxUnavailable` saying so. A session's container has no network, a
read-only root, all capabilities dropped, ``no-new-privileges``, a pids, memory and CPU cap and a
tmpfs ``/tmp``. Its workdir ``/work`` is a *tmpfs-backed named volume* (sized by
``Limits.disk_mb``): Docker cannot copy files into a tmpfs mount of a read-only container
(``put_archive`` is refused, or lands under the mount), but it can into a volume, so files go
in and out with ``put_archive`` / ``get_archive``, which the engine resolves inside the
container's root (a planted symlink never reaches the host).

Commands run as uid 65534 under ``timeout`` and ``prlimit``. The container's own processes
(``docker-init`` and a root, capless ``sleep``) cannot be signalled by uid 65534, so a
``kill -9 -1`` issued as 65534 removes everything a command left behind without stopping the
container. Every command's wrapper does that when the command ends; the host then counts the
container's processes (its pids cgroup, or ``docker top``) and, if anything survived (the
command killed its own wrapper, or a fork bomb refills the pid limit faster than it is
emptied), kills again, and failing that restarts the container. So no process of one command
lives into the next one, the same guarantee bubblewrap's per-run PID namespace gives.

One-shot :meth:`DockerSandbox.run` / :meth:`~DockerSandbox.run_python` reuse wiped containers
(starting one costs far more than an ``exec``).

The sandbox's Python runtime is the image's ``python3``, and its site directories are the
image's, not the host's: a trusted runner that starts Python with ``-I -S`` (the SWE grader)
must find pytest where the image installed it. They are asked of the image once per image and
process (:meth:`DockerSandbox.site_dirs`).
"""

from __future__ import annotations

import io
import json
import os
import shlex
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from turngym.sandbox._proc import classify_failure
from turngym.sandbox.base import Files, PythonRuntime, Sandbox, Session, WorkdirSnapshot, check_relpath
from turngym.sandbox.errors import SandboxError, SandboxUnavailable
from turngym.sandbox.limits import LimitName, Limits, RunResult

__all__ = ["DockerSandbox", "DockerSession", "DEFAULT_IMAGE", "exec_argv"]

DEFAULT_IMAGE = "turngym-sandbox:latest"
_UID = 65534
_USER = f"{_UID}:{_UID}"
_STDIN = ".turngym-stdin"
_PATH = "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"
#: Processes of an idle container: docker-init and its ``sleep``.
_IDLE_PROCS = 2
#: Seconds past a run's wall limit before the host stops waiting for the in-container ``timeout``.
_GRACE_S = 3.0
# Kill every process of uid 65534 but the caller, until none is left (a bomb may fork meanwhile).
_REAP = "i=0; while kill -9 -1 2>/dev/null && [ $i -lt 50 ]; do i=$((i+1)); done"
_ENOSPC_MARKERS = ("no space left on device", "[errno 28]")
# Empty the workdir and /tmp (a program may have chmod-ed its dirs to 000).
_WIPE = "chmod -R u+rwx /work 2>/dev/null; find /work /tmp -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + 2>/dev/null"
# The site dirs the image's interpreter puts on sys.path when it starts normally (-I: no user
# site, no cwd). Not sysconfig's purelib: Debian's python3 names /usr/local/... there even in a venv.
_SITE_PROBE = (
    "import json, os, sys; print(json.dumps([p for p in sys.path "
    "if p.rstrip('/').endswith(('site-packages', 'dist-packages')) and os.path.isdir(p)]))"
)
#: Site dirs of each (image id, interpreter) this process has asked.
_SITE_DIRS: dict[tuple[str, str], tuple[str, ...]] = {}
_SITE_LOCK = threading.Lock()


def exec_argv(argv: Sequence[str], limits: Limits, *, stdin_file: str | None = None) -> list[str]:
    """The argv ``exec``'d in the container: ``timeout`` and ``prlimit`` around ``argv``.

    ``prlimit`` (util-linux, in every Debian image), not the shell's ``ulimit``: dash, the
    ``/bin/sh`` of Debian images, takes one limit per call and has no ``-u``. The process
    count is the container's ``pids_limit`` (``RLIMIT_NPROC`` would count uid 65534 across
    every container on the host).

    >>> exec_argv(["python3", "-c", "pass"], Limits(wall_s=2, cpu_s=1, memory_mb=256))[:5]
    ['timeout', '--signal=KILL', '2.0', 'prlimit', '--cpu=1:2']
    """
    from turngym.sandbox._proc import rlimit_argv

    limits_argv = [a for a in rlimit_argv("prlimit", limits) if not a.startswith("--nproc")]
    cmd = ["timeout", "--signal=KILL", str(float(limits.wall_s)), *limits_argv, *argv]
    if stdin_file:
        return ["sh", "-c", f'exec "$@" < {shlex.quote(stdin_file)}', "sh", *cmd]
    return cmd


def _run_and_reap(argv: Sequence[str], limits: Limits, *, stdin: bool, wipe: bool = False) -> list[str]:
    """:func:`exec_argv` inside a shell that hands over stdin, then reaps leftovers.

    The staged stdin file is opened and deleted before the command starts, so the program
    never sees it in its workdir. With ``wipe`` (one-shot runs) the shell also empties
    ``/work`` and ``/tmp`` afterwards, saving the separate wipe ``exec``; the host still checks
    the result before the container is reused (:meth:`DockerSession.is_pristine`).
    """
    feed = f'exec 0<{_STDIN}; rm -f {_STDIN}; ' if stdin else "exec 0</dev/null; "
    script = feed + '"$@"; rc=$?; ' + _REAP + ("; " + _WIPE if wipe else "") + "; exit $rc"
    return ["sh", "-c", script, "sh", *exec_argv(argv, limits)]


def _tar(entries: Sequence[tuple[str, int, bytes]]) -> bytes:
    """A tar of ``(path, mode, content)`` (mode 0: a symlink to ``content``), owned by 65534.

    Parent directories are listed explicitly so they are created owned by the sandbox user
    (the engine would make them root's) and so a planted link in their place is replaced.
    """
    buf = io.BytesIO()
    dirs: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, mode, data in entries:
            parts = path.split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o755, _UID, _UID
                    tar.addfile(info)
            info = tarfile.TarInfo(path)
            info.uid = info.gid = _UID
            if mode:
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, data.decode(), 0o777
                tar.addfile(info)
    return buf.getvalue()


def _cgroup_pids_file(container_id: str) -> str | None:
    """The container's ``pids.current`` when the engine runs on this host (cgroup v1 or v2)."""
    for path in (
        f"/sys/fs/cgroup/pids/docker/{container_id}/pids.current",
        f"/sys/fs/cgroup/docker/{container_id}/pids.current",
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/pids.current",
        f"/sys/fs/cgroup/pids/system.slice/docker-{container_id}.scope/pids.current",
    ):
        if os.path.exists(path):
            return path
    return None


class DockerSession(Session):
    """A running container; the workdir is its ``/work`` volume."""

    sandbox: DockerSandbox

    def __init__(self, sandbox: DockerSandbox, limits: Limits) -> None:
        super().__init__(sandbox, limits)
        self.container: Any = None
        self.volume: Any = None
        self._pids_file: str | None = None
        #: set while a one-shot run borrows this session: its wrapper wipes the files too
        self._wipe_after_run = False
        self._start()

    # -- lifetime ------------------------------------------------------------------------
    def _start(self) -> None:
        sb, lim = self.sandbox, self.limits
        client = sb.client
        try:
            self.volume = client.volumes.create(
                driver="local",
                driver_opts={"type": "tmpfs", "device": "tmpfs", "o": f"size={lim.disk_mb}m,uid={_UID},gid={_UID},mode=0700"},
                labels={"turngym.sandbox": "1"},
            )
            self.container = client.containers.run(
                sb.image,
                ["sleep", "infinity"],
                detach=True,
                network_disabled=True,
                read_only=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=lim.processes + 8,  # + docker-init, sleep, the exec wrappers
                mem_limit=f"{lim.memory_mb + 64}m",
                # the quota, in billionths of a core (the engine refuses more than it has), and
                # the scheduling weight in proportion (within the kernel's range)
                nano_cpus=max(10_000_000, round(min(lim.cpu_cores, sb.engine_cpus) * 1e9)),
                cpu_shares=min(262_144, max(2, round(1024 * min(lim.cpu_cores, sb.engine_cpus)))),
                memswap_limit=f"{lim.memory_mb + 64}m",
                tmpfs={"/tmp": f"size={lim.tmp_mb}m,mode=1777"},
                volumes={self.volume.name: {"bind": "/work", "mode": "rw"}},
                working_dir="/work",
                init=True,
                labels={"turngym.sandbox": "1"},
            )
        except Exception as exc:
            self._remove()
            raise SandboxError(f"docker: could not start a container from {sb.image!r}: {exc}") from exc
        self._pids_file = _cgroup_pids_file(self.container.id)
        self.container.reload()  # its pid, for is_pristine
        mount = self.volume.attrs.get("Mountpoint") or ""
        self._host_dir = mount if mount and os.path.isdir(mount) else None

    @property
    def host_dir(self) -> str | None:
        """The volume's directory on this host (None when the engine is remote)."""
        return self._host_dir

    @property
    def workdir(self) -> str:
        return "/work"

    def _remove(self, attempts: int = 20) -> None:
        """Remove the container, then its volume, retrying while the engine is busy.

        A container full of a fork bomb can take the engine a few seconds to tear down, and its
        volume cannot go before it does: one silent try would leak both.
        """
        for obj in (self.container, self.volume):
            if obj is None:
                continue
            for i in range(attempts):
                try:
                    obj.remove(force=True)
                    break
                except Exception as exc:  # noqa: BLE001 - the SDK raises several kinds
                    if type(exc).__name__ == "NotFound":
                        break  # already gone
                    time.sleep(min(0.05 * 2**i, 1.0))

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        self._remove()

    # -- processes -------------------------------------------------------------------------
    def process_count(self) -> int:
        """Processes alive in the container (its own two included)."""
        if self._pids_file:
            try:
                with open(self._pids_file) as fh:
                    return int(fh.read())
            except (OSError, ValueError):
                pass
        try:
            return len(self.container.top().get("Processes") or [])
        except Exception as exc:
            raise SandboxError(f"docker: cannot list the container's processes: {exc}") from exc

    def _exec(self, argv: Sequence[str], user: str = _USER) -> tuple[int | None, bytes]:
        res = self.container.exec_run(list(argv), user=user, workdir="/work", demux=False)
        return res.exit_code, res.output or b""

    def make_clean(self) -> None:
        """Leave no process of the sandbox user behind: reap, and restart the container if that fails.

        A restart kills everything (the pid limit may be too full for an ``exec`` to start);
        the workdir volume survives it, ``/tmp`` does not.
        """
        if self.process_count() <= _IDLE_PROCS:
            return
        try:
            self._exec(["sh", "-c", _REAP])
        except Exception:  # noqa: BLE001 - the pid limit may be full: the restart below handles it
            pass
        if self.process_count() <= _IDLE_PROCS:
            return
        try:
            self.container.restart(timeout=0)
        except Exception as exc:
            raise SandboxError(f"docker: could not restart a container to clear leftover processes: {exc}") from exc
        self._pids_file = _cgroup_pids_file(self.container.id)
        self.container.reload()

    # -- files -----------------------------------------------------------------------------
    def _put(self, entries: Sequence[tuple[str, int, bytes]]) -> None:
        try:
            ok = self.container.put_archive("/work", _tar(entries))
        except Exception as exc:
            raise SandboxError(f"docker: copying files into /work failed: {exc}") from exc
        if not ok:
            raise SandboxError("docker: copying files into /work failed")

    def write_files(self, files: Files) -> None:
        self._check_open()
        entries = [(check_relpath(p), 0o644, c.encode() if isinstance(c, str) else bytes(c)) for p, c in files.items()]
        if entries:
            self._put(entries)

    def _archive(self, path: str) -> tarfile.TarFile:
        try:
            stream, _ = self.container.get_archive(path)
        except Exception as exc:  # docker.errors.NotFound and friends
            raise FileNotFoundError(f"{path}: {exc}") from None
        return tarfile.open(fileobj=io.BytesIO(b"".join(stream)))

    def read_file(self, path: str) -> bytes:
        self._check_open()
        rel = check_relpath(path)
        with self._archive(f"/work/{rel}") as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise FileNotFoundError(f"{path!r} is not a regular file in the working dir (links are not followed)")
            fh = tar.extractfile(member)
            return fh.read() if fh else b""

    def snapshot(self) -> WorkdirSnapshot:
        self._check_open()
        entries = []
        with self._archive("/work/.") as tar:
            for m in tar:
                name = m.name.removeprefix("./").removeprefix(".")
                if not name:
                    continue
                if m.isfile():
                    fh = tar.extractfile(m)
                    entries.append((name, m.mode & 0o7777 or 0o644, fh.read() if fh else b""))
                elif m.issym():
                    entries.append((name, 0, m.linkname.encode()))
        return WorkdirSnapshot(tuple(sorted(entries)))

    def restore(self, snap: WorkdirSnapshot) -> None:
        self.reset()
        if snap.entries:
            self._put(snap.entries)

    def reset(self) -> None:
        """Kill every leftover process and empty ``/work`` and ``/tmp``."""
        self._check_open()
        wipe = _REAP + "; " + _WIPE + '; [ -z "$(ls -A /work)" ]'
        try:
            code, out = self._exec(["sh", "-c", wipe])
        except Exception:  # noqa: BLE001 - e.g. the pid limit is full; restart and retry below
            code, out = None, b""
        if code != 0:
            self.make_clean()
            code, out = self._exec(["sh", "-c", wipe])
            if code != 0:
                raise SandboxError(f"docker: could not empty the working dir: {out.decode(errors='replace')[-500:]}")
        self.make_clean()

    def _inodes_used(self, path: str) -> int | None:
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        return st.f_files - st.f_ffree

    def is_pristine(self) -> bool:
        """True when the host itself sees no process left and empty ``/work`` and ``/tmp``.

        Read from the host (the pids cgroup, and inode counts of the two tmpfs through the
        volume's mount and ``/proc/<pid>/root``), so nothing inside the container can fake it;
        False whenever the engine is not local.
        """
        if self._closed or self._host_dir is None or self._pids_file is None:
            return False
        try:
            pid = int(self.container.attrs["State"]["Pid"])
        except (KeyError, TypeError, ValueError):
            return False
        if pid <= 0 or self.process_count() > _IDLE_PROCS:
            return False
        # an empty tmpfs holds one inode: its root directory
        return self._inodes_used(self._host_dir) == 1 and self._inodes_used(f"/proc/{pid}/root/tmp") == 1

    def _disk_used(self) -> int | None:
        if self._host_dir is None:
            return None
        try:
            st = os.statvfs(self._host_dir)
        except OSError:
            return None
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    # -- commands --------------------------------------------------------------------------
    def _execute(self, argv: Sequence[str], *, stdin: bytes | None, limits: Limits, env: Mapping[str, str]) -> RunResult:
        if stdin:
            self._put([(_STDIN, 0o600, stdin)])
        api = self.sandbox.client.api
        start = time.monotonic()
        try:
            exec_id = api.exec_create(
                self.container.id,
                _run_and_reap(argv, limits, stdin=bool(stdin), wipe=self._wipe_after_run),
                user=_USER,
                workdir="/work",
                environment={"HOME": "/work", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PATH": _PATH, **env},
            )["Id"]
            sock = api.exec_start(exec_id, socket=True)
        except Exception as exc:
            self.make_clean()
            raise SandboxError(f"docker: exec failed: {exc}") from exc
        out, err, killed_for, truncated = self._collect(sock, limits, start)
        duration = time.monotonic() - start
        if killed_for:  # the host stopped reading: make sure nothing keeps running
            self._exec(["sh", "-c", _REAP])
        code = api.exec_inspect(exec_id).get("ExitCode")
        sig = None
        if code is not None and code > 128:
            sig, code = code - 128, None
        if killed_for is None and sig == 9 and duration >= limits.wall_s:
            killed_for = "wall"
        self.make_clean()
        stderr = err.decode("utf-8", "replace")
        limit: LimitName | None = killed_for
        if limit is None and code != 0:
            tail = stderr[-4000:].lower()
            limit = "disk" if any(m in tail for m in _ENOSPC_MARKERS) else classify_failure(sig, 0.0, limits, stderr)
        if limit is None:
            used = self._disk_used()
            if used is not None and used > (limits.disk_mb << 20) - (1 << 20):
                limit = "disk"
        return RunResult(out.decode("utf-8", "replace"), stderr, code, sig, limit, duration, 0.0, truncated, self.sandbox.name)

    def _collect(self, sock: Any, limits: Limits, start: float) -> tuple[bytearray, bytearray, LimitName | None, bool]:
        """Read the exec's multiplexed stdout/stderr up to the output cap and the wall deadline.

        The deadline is kept here, not only by the in-container ``timeout``: that runs as the
        sandbox's uid, so the program can stop it (``kill(-1, SIGSTOP)``), and then no byte and
        no end of stream would ever come. (docker's own frame reader polls without a timeout.)
        """
        raw = getattr(sock, "_sock", sock)
        out, err, total = bytearray(), bytearray(), 0
        killed_for: LimitName | None = None
        truncated = False
        try:
            for stream, data in _frames(raw, start + limits.wall_s + _GRACE_S):
                buf = out if stream == 1 else err
                room = limits.output_bytes - total
                buf += data[: max(room, 0)]
                total += min(len(data), max(room, 0))
                if len(data) > room:
                    truncated, killed_for = True, "output"
                    break
                if time.monotonic() - start > limits.wall_s + _GRACE_S:
                    killed_for = "wall"
                    break
        except TimeoutError:
            killed_for = "wall"
        finally:
            # shut the socket itself down, not only its file wrapper: an unread stream would
            # otherwise stay open in the engine
            for close in (lambda: raw.shutdown(2), raw.close, sock.close):
                try:
                    close()
                except OSError:
                    pass
        return out, err, killed_for, truncated


def _frames(raw: Any, deadline: float) -> Iterator[tuple[int, bytes]]:
    """``(stream, data)`` frames of a non-tty exec's stream (8-byte header: stream id, 3 zero
    bytes, big-endian length), until the engine closes it; TimeoutError at ``deadline``."""
    buf = bytearray()

    def fill(n: int) -> bool:
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the exec's stream did not end by the deadline")
            raw.settimeout(left)
            chunk = raw.recv(1 << 16)
            if not chunk:
                return False
            buf.extend(chunk)
        return True

    while fill(8):
        size = int.from_bytes(buf[4:8], "big")
        if not fill(8 + size):
            return
        yield buf[0], bytes(buf[8:8 + size])
        del buf[:8 + size]


class DockerSandbox(Sandbox):
    """One container per session (image ``turngym-sandbox``, from ``docker/sandbox.Dockerfile``).

    ``python`` is the image's interpreter for ``run_python`` and the SWE grader (default
    ``python3`` on the image's ``PATH``); an image whose packages live elsewhere (an official
    SWE-bench image's ``/opt/miniconda3/envs/testbed/bin/python``) names it here.

    Raises :class:`SandboxUnavailable` at construction when the SDK is missing, no engine
    answers, or the image is not built, each with the command that fixes it.
    """

    name = "docker"
    isolated = True

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        image: str | None = None,
        client: Any = None,
        timeout_s: float = 60.0,
        max_idle: int = 4,
        python: str = "python3",
    ) -> None:
        super().__init__(limits, python=PythonRuntime(executable=python, flags=("-B",), path=()))
        self._site_known = False
        image = image or os.environ.get("TURNGYM_DOCKER_IMAGE") or DEFAULT_IMAGE
        try:
            import docker
        except ImportError:
            raise SandboxUnavailable("the Docker backend needs the docker SDK: pip install docker") from None
        try:
            self.client = client or docker.from_env(timeout=int(timeout_s))
            self.client.ping()
        except Exception as exc:
            raise SandboxUnavailable(
                f"no Docker engine answered ({type(exc).__name__}: {exc}). Start the Docker daemon "
                "(scripts/docker_engine.sh up) or set DOCKER_HOST, or use make_sandbox('bubblewrap')."
            ) from None
        try:
            image_id = str(self.client.images.get(image).id)
        except Exception:
            raise SandboxUnavailable(
                f"Docker image {image!r} is missing: build it with "
                f"`docker build -t {image} -f docker/sandbox.Dockerfile .` (offline: see docker/README.md)"
            ) from None
        self.image = image
        self.image_id = image_id
        self.max_idle = max_idle
        self._idle: list[DockerSession] = []
        self._lock = threading.Lock()
        self._engine_cpus: float | None = None

    @property
    def engine_cpus(self) -> float:
        """CPUs of the engine's machine (a container's ``cpu_cores`` is capped at it)."""
        if self._engine_cpus is None:
            try:
                self._engine_cpus = float(self.client.info().get("NCPU") or 0) or float(os.cpu_count() or 1)
            except Exception:  # noqa: BLE001 - an engine that cannot say: this machine's count
                self._engine_cpus = float(os.cpu_count() or 1)
        return self._engine_cpus

    def open_session(self, limits: Limits | None = None) -> DockerSession:
        return DockerSession(self, limits or self.limits)

    # The runtime's site dirs come from the image, asked for on first use (a container run).
    @property
    def python(self) -> PythonRuntime:
        if not self._site_known:
            self._runtime = replace(self._runtime, path=self.site_dirs())
            self._site_known = True
        return self._runtime

    @python.setter
    def python(self, runtime: PythonRuntime) -> None:
        self._runtime = runtime
        self._site_known = bool(runtime.path)

    def site_dirs(self) -> tuple[str, ...]:
        """The image interpreter's site-packages (where pytest is, for the SWE grader's ``-I -S`` runner).

        Asked once per image, interpreter and process, in a pooled container (which then serves the next
        one-shot run). A probe that fails is an infrastructure fault: raised, not cached.
        """
        key = (self.image_id, self._runtime.executable)
        with _SITE_LOCK:
            known = _SITE_DIRS.get(key)
        if known is not None:
            return known
        res = self.run([self._runtime.executable, "-I", "-c", _SITE_PROBE], limits=None)
        try:
            dirs = json.loads(res.stdout)
            if res.exit_code != 0 or not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
                raise ValueError(res.stdout[-300:])
        except ValueError:
            raise SandboxError(
                f"docker: cannot read the site dirs of {self.image!r}'s python3 (exit {res.exit_code}): "
                f"{(res.stderr or res.stdout)[-500:]}"
            ) from None
        with _SITE_LOCK:
            return _SITE_DIRS.setdefault(key, tuple(dirs))

    # One-shot runs borrow a wiped container instead of starting one each time.
    def _borrow(self, limits: Limits | None) -> DockerSession:
        lim = limits or self.limits
        with self._lock:
            for i, s in enumerate(self._idle):
                if s.limits == lim:
                    return self._idle.pop(i)
        return self.open_session(lim)

    def _give_back(self, session: DockerSession) -> None:
        session._wipe_after_run = False
        try:
            if not session.is_pristine():  # the run's own wipe did not leave it verifiably empty
                session.reset()
        except Exception:  # noqa: BLE001 - a session that cannot be wiped is never reused
            session.close()
            return
        with self._lock:
            if len(self._idle) < self.max_idle and not session.closed:
                self._idle.append(session)
                return
        session.close()

    @contextmanager
    def _one_shot_session(self, limits: Limits | None) -> Iterator[DockerSession]:
        """A pooled container for one run: its own wrapper wipes it, then it goes back to the pool."""
        s = self._borrow(limits)
        s._wipe_after_run = True
        try:
            yield s
        finally:
            self._give_back(s)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for s in idle:
            s.close()
