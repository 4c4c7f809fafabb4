"""Docker backend: one container per session, one ``exec`` per command.

Used when a Docker engine answers (``docker.from_env().ping()``); otherwise constructing it
raises :class:`SandboxUnavailable` saying so. The container runs the image built from
``docker/sandbox.Dockerfile`` with no network, a read-only root, all capabilities dropped,
``no-new-privileges``, a pids and memory cap, and tmpfs ``/work`` and ``/tmp``. Commands run
as uid 65534 under ``timeout`` and shell ``ulimit``\\ s; the container's own process (root,
capless, ``sleep``) is never the target of a ``kill -9 -1`` issued as 65534, which is how a
session is wiped for reuse.
"""

from __future__ import annotations

import io
import shlex
import tarfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from turngym.sandbox._proc import classify_failure, rlimit_argv
from turngym.sandbox.base import Files, PythonRuntime, Sandbox, Session, WorkdirSnapshot, check_relpath
from turngym.sandbox.errors import SandboxError, SandboxUnavailable
from turngym.sandbox.limits import Limits, RunResult

__all__ = ["DockerSandbox", "DockerSession", "DEFAULT_IMAGE", "exec_argv"]

DEFAULT_IMAGE = "turngym-sandbox:latest"
_USER = "65534:65534"
_STDIN = "/tmp/.turngym-stdin"


def exec_argv(argv: Sequence[str], limits: Limits, *, stdin_file: str | None = None) -> list[str]:
    """The argv ``exec``'d in the container: ``timeout`` and ``prlimit`` around ``argv``.

    ``prlimit`` (util-linux, in every Debian image), not the shell's ``ulimit``: dash, the
    ``/bin/sh`` of Debian images, takes one limit per call and has no ``-u``. The process
    count is the container's ``pids_limit`` (``RLIMIT_NPROC`` would count uid 65534 across
    every container on the host).

    >>> exec_argv(["python3", "-c", "pass"], Limits(wall_s=2, cpu_s=1, memory_mb=256))[:5]
    ['timeout', '--signal=KILL', '2.0', 'prlimit', '--cpu=1:2']
    """
    limits_argv = [a for a in rlimit_argv("prlimit", limits) if not a.startswith("--nproc")]
    cmd = ["timeout", "--signal=KILL", str(float(limits.wall_s)), *limits_argv, *argv]
    if stdin_file:
        return ["sh", "-c", f'exec "$@" < {shlex.quote(stdin_file)}', "sh", *cmd]
    return cmd


def _tar(files: Mapping[str, bytes], uid: int = 65534) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.uid, info.gid, info.mode, info.mtime = len(data), uid, uid, 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class DockerSession(Session):
    """A running container; the workdir is its ``/work`` tmpfs."""

    sandbox: DockerSandbox

    def __init__(self, sandbox: DockerSandbox, limits: Limits, container: Any) -> None:
        super().__init__(sandbox, limits)
        self.container = container

    @property
    def workdir(self) -> str:
        return "/work"

    def _api(self) -> Any:
        return self.sandbox.client.api

    def _exec(self, argv: Sequence[str], user: str = _USER) -> tuple[int, bytes]:
        res = self.container.exec_run(list(argv), user=user, workdir="/work", demux=False)
        return res.exit_code, res.output or b""

    def write_files(self, files: Files) -> None:
        self._check_open()
        data = {check_relpath(p): (c.encode() if isinstance(c, str) else bytes(c)) for p, c in files.items()}
        if not self.container.put_archive("/work", _tar(data)):
            raise SandboxError("docker: put_archive into /work failed")

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
                raise FileNotFoundError(f"{path!r} is not a regular file in the working dir")
            fh = tar.extractfile(member)
            return fh.read() if fh else b""

    def snapshot(self) -> WorkdirSnapshot:
        self._check_open()
        entries = []
        with self._archive("/work/.") as tar:
            for m in tar.getmembers():
                name = m.name.removeprefix("./")
                if m.isfile():
                    fh = tar.extractfile(m)
                    entries.append((name, m.mode & 0o7777 or 0o644, fh.read() if fh else b""))
                elif m.issym():
                    entries.append((name, 0, m.linkname.encode()))
        return WorkdirSnapshot(tuple(sorted(entries)))

    def restore(self, snap: WorkdirSnapshot) -> None:
        self.reset()
        self.write_files(snap.files)
        links = [(p, t.decode()) for p, mode, t in snap.entries if not mode]
        for path, target in links:
            self._exec(["ln", "-sfn", target, path])

    def reset(self) -> None:
        self._check_open()
        self._exec(["sh", "-c", "kill -9 -1 2>/dev/null; find /work /tmp -mindepth 1 -delete 2>/dev/null; true"])

    def _execute(self, argv: Sequence[str], *, stdin: bytes | None, limits: Limits, env: Mapping[str, str]) -> RunResult:
        if stdin:
            if not self.container.put_archive("/tmp", _tar({_STDIN.rsplit("/", 1)[1]: stdin})):
                raise SandboxError("docker: could not stage stdin")
        api = self._api()
        start = time.monotonic()
        try:
            exec_id = api.exec_create(
                self.container.id,
                exec_argv(argv, limits, stdin_file=_STDIN if stdin else None),
                user=_USER,
                workdir="/work",
                environment={"HOME": "/work", "PATH": "/usr/local/bin:/usr/bin:/bin", **env},
            )["Id"]
            stream = api.exec_start(exec_id, stream=True, demux=True)
        except Exception as exc:
            raise SandboxError(f"docker: exec failed: {exc}") from exc
        out, err, total, truncated, killed_for = bytearray(), bytearray(), 0, False, None
        for chunk_out, chunk_err in stream:
            for buf, chunk in ((out, chunk_out), (err, chunk_err)):
                if chunk:
                    room = limits.output_bytes - total
                    buf += chunk[: max(room, 0)]
                    total += min(len(chunk), max(room, 0))
                    if len(chunk) > room:
                        truncated, killed_for = True, "output"
            if killed_for or time.monotonic() - start > limits.wall_s + 1:
                killed_for = killed_for or "wall"
                self._exec(["sh", "-c", "kill -9 -1"])
                break
        code = api.exec_inspect(exec_id).get("ExitCode")
        duration = time.monotonic() - start
        sig = None
        if code is not None and code > 128:
            sig, code = code - 128, None
        if killed_for is None and sig == 9 and duration >= limits.wall_s:
            killed_for = "wall"
        stderr = err.decode("utf-8", "replace")
        limit = killed_for or (classify_failure(sig, 0.0, limits, stderr) if code != 0 else None)
        return RunResult(out.decode("utf-8", "replace"), stderr, code, sig, limit, duration, 0.0, truncated, self.sandbox.name)

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        try:
            self.container.remove(force=True)
        except Exception:  # noqa: BLE001 - already gone is fine; nothing else to do on close
            pass


class DockerSandbox(Sandbox):
    """One container per session (image ``turngym-sandbox``, from ``docker/sandbox.Dockerfile``).

    Raises :class:`SandboxUnavailable` at construction when the SDK is missing, no engine
    answers, or the image is not built, each with the command that fixes it.
    """

    name = "docker"
    isolated = True

    def __init__(self, limits: Limits | None = None, *, image: str = DEFAULT_IMAGE, client: Any = None, timeout_s: float = 5.0) -> None:
        super().__init__(limits, python=PythonRuntime(executable="python3", flags=("-B",), path=()))
        try:
            import docker
        except ImportError:
            raise SandboxUnavailable("the Docker backend needs the docker SDK: pip install docker") from None
        try:
            self.client = client or docker.from_env(timeout=int(timeout_s))
            self.client.ping()
        except Exception as exc:
            raise SandboxUnavailable(
                f"no Docker engine answered ({type(exc).__name__}: {exc}). Start the Docker daemon or set "
                "DOCKER_HOST, or use make_sandbox('bubblewrap')."
            ) from None
        try:
            self.client.images.get(image)
        except Exception:
            raise SandboxUnavailable(
                f"Docker image {image!r} is missing: build it with `docker build -t {image} -f docker/sandbox.Dockerfile docker/`"
            ) from None
        self.image = image

    def open_session(self, limits: Limits | None = None) -> DockerSession:
        lim = limits or self.limits
        try:
            container = self.client.containers.run(
                self.image,
                ["sleep", "infinity"],
                detach=True,
                network_disabled=True,
                read_only=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=lim.processes + 8,
                mem_limit=f"{lim.memory_mb}m",
                tmpfs={"/work": f"size={lim.disk_mb}m,uid=65534,gid=65534,mode=0700", "/tmp": f"size={lim.tmp_mb}m,mode=1777"},
                working_dir="/work",
                init=True,
                labels={"turngym.sandbox": "1"},
            )
        except Exception as exc:
            raise SandboxError(f"docker: could not start a container from {self.image!r}: {exc}") from exc
        return DockerSession(self, lim, container)
