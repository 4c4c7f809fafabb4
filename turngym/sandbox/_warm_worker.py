"""The warm Python worker that runs *inside* a sandbox (stdlib only; see :mod:`.warm`).

Reads one JSON request per line on stdin, forks a child per request that runs the source in
a fresh ``__main__`` namespace under rlimits in its own process group, collects its output
(capped) until it exits or the deadline passes, then kills every other process it may kill
(``kill(-1)``: the run's leftovers, never itself or the namespace init) and the SysV IPC
objects it left, and answers with one JSON line on stdout. A request with ``wipe_tmp`` (the
session was reset) first empties ``/tmp`` and ``/dev/shm``; if that fails the worker answers ``restart`` and
exits, and the host starts a fresh sandbox. The host sends ``source + "\\nmain()"``.
"""

import sys

_BASE_MODULES = frozenset(sys.modules)  # what a fresh interpreter has; runs start from this

import base64  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import selectors  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

try:
    import _turngym_inside_hardening as hardening
    from _turngym_inside_pipes import Pipes
except ImportError:  # imported on the host (tests, linters); in the sandbox the prelude provides it
    from turngym.sandbox.inside import hardening
    from turngym.sandbox.inside.pipes import Pipes

#: The session's untrusted uid (set when the worker runs with the capabilities to drop to
#: it): every run but a trusted one (a grader) runs as this uid, so no run can signal, stop or
#: read the worker -- a worker that dies is then never the run's doing.
RUN_UID = hardening.pop_untrusted_uid()


def _child(req, fds):
    r_in, w_out, w_err = fds
    try:  # if the sandbox runs out of memory, the kernel kills the run, not the worker
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass
    if RUN_UID is not None and not req.get("trusted"):
        try:
            hardening.drop_privileges(RUN_UID)
        except OSError as exc:
            os.write(w_err, f"[sandbox] cannot drop to the untrusted uid: {exc}\n".encode())
            os._exit(126)
    hardening.set_dumpable(1)  # after the uid change, which clears it
    os.setsid()
    os.dup2(r_in, 0)
    os.dup2(w_out, 1)
    os.dup2(w_err, 2)
    os.closerange(3, 65536)
    lim = req["limits"]
    cpu = max(1, int(-(-lim["cpu_s"] // 1)))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (lim["memory_mb"] << 20,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["file_size_mb"] << 20,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim["open_files"],) * 2)
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = ["-c", *req["args"]]
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
    for name in [m for m in sys.modules if m not in _BASE_MODULES]:
        del sys.modules[name]
    main = type(sys)("__main__")
    sys.modules["__main__"] = main
    code = 0
    try:
        exec(compile(req["source"], "<string>", "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def _kill_leftovers():
    """Kill every process this worker may signal: the run's leftovers (daemons included).

    ``kill(-1)`` spares the caller and the namespace init, and the worker's uid owns nothing
    else in this PID namespace.
    """
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass


_IPC_RMID = 0
_libc = None


def _as_untrusted(fn):
    """``fn()`` as the worker's uid and, when runs have their own uid, as that uid too (in a
    forked helper) first: objects a run made (files in the sticky ``/tmp``, SysV IPC) can only
    be removed by their owner. The worker's own pass, last, says whether all is gone."""
    if RUN_UID is not None:
        pid = os.fork()
        if pid == 0:
            try:
                hardening.drop_privileges(RUN_UID)
                fn()
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    return fn()


def _ipc_left():
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}", "rb") as fh:
                if len(fh.read().splitlines()) > 1:
                    return True
        except OSError:
            pass
    return False


def _clean_ipc():
    """Remove SysV shared memory, semaphores and message queues a run left behind.

    The worker's IPC namespace lives as long as the worker, so these would otherwise carry
    data (and memory) from one run, or one episode, to the next.
    """
    if _ipc_left():
        _as_untrusted(_remove_ipc)


def _remove_ipc():
    global _libc
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}", "rb") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        if not rows:
            continue
        if _libc is None:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
        for row in rows:
            try:
                ident = int(row.split()[1])
            except (IndexError, ValueError):
                continue
            if kind == "shm":
                _libc.shmctl(ident, _IPC_RMID, None)
            elif kind == "sem":
                _libc.semctl(ident, 0, _IPC_RMID)
            else:
                _libc.msgctl(ident, _IPC_RMID, None)
    return True


def _wipe_tmp():
    """Empty /tmp and /dev/shm as every uid that may have written there (see :func:`_as_untrusted`)."""
    return _as_untrusted(_wipe_tmp_once)


def _wipe_tmp_once():
    """Empty /tmp and /dev/shm (all made by runs of this uid); True if both are empty.

    Mount points stay, with the dirs leading to them: they are host dirs the sandbox binds in
    read-only (an interpreter or venv under the host's /tmp), not anything a run made; the
    walk does not enter them. The walk is iterative: a run may nest dirs thousands deep.
    """
    ok = True
    for top in ("/tmp", "/dev/shm"):
        if not os.path.isdir(top):
            continue
        order, stack = [], [top]
        while stack:
            d = stack.pop()
            order.append(d)
            try:
                with os.scandir(d) as it:
                    entries = list(it)
            except OSError:
                ok = False
                continue
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    if os.path.ismount(e.path):
                        continue
                    try:
                        os.chmod(e.path, 0o700)  # a run may have locked a directory
                    except OSError:
                        pass
                    stack.append(e.path)
                else:
                    try:
                        os.unlink(e.path)
                    except OSError:
                        ok = False
        for d in reversed(order[1:]):
            try:
                os.rmdir(d)
            except OSError:
                pass
        ok = ok and _only_mount_points(top)
    return ok


def _only_mount_points(top):
    """True if all that is left under ``top`` is mount points and the dirs leading to them."""
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            return False
        if not entries and d != top:
            return False
        for e in entries:
            if not e.is_dir(follow_symlinks=False):
                return False
            if not os.path.ismount(e.path):
                stack.append(e.path)
    return True


def _run(req):
    lim = req["limits"]
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    r_err, w_err = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            _child(req, (r_in, w_out, w_err))
        finally:
            os._exit(127)
    for fd in (r_in, w_out, w_err):
        os.close(fd)
    sel = selectors.DefaultSelector()
    pipes = Pipes(sel, (r_out, r_err), w_in, base64.b64decode(req["stdin"]), lim["output_bytes"])
    pidfd = os.pidfd_open(pid)
    sel.register(pidfd, selectors.EVENT_READ)
    killed_for = None
    deadline = start + lim["wall_s"]
    exited = False
    while pipes.open:
        timeout = deadline - time.monotonic()
        if exited:  # leftovers were killed at exit: the pipes close within moments
            timeout = min(timeout, 0.5)
        if timeout <= 0:
            if not exited:
                killed_for = "wall"
            break
        events = sel.select(timeout)
        if not events and exited:
            break
        for key, mask in events:
            fd = key.fd
            if fd == pidfd:
                exited = True
                sel.unregister(pidfd)
                _kill_leftovers()
                continue
            if pipes.handle(fd, mask) and pipes.truncated:
                killed_for = "output"
                break
        if killed_for:
            break
    if killed_for:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    _, status, usage = os.wait4(pid, 0)
    duration = time.monotonic() - start
    _kill_leftovers()
    _clean_ipc()
    pipes.close_stdin()
    sel.close()
    for fd in (r_out, r_err, pidfd):
        try:
            os.close(fd)
        except OSError:
            pass
    return {
        "stdout": base64.b64encode(bytes(pipes.bufs[r_out])).decode(),
        "stderr": base64.b64encode(bytes(pipes.bufs[r_err])).decode(),
        "status": status,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "duration_s": duration,
        "killed_for": killed_for,
        "truncated": pipes.truncated,
    }


def main():
    # non-dumpable: the runs it forks (same uid) cannot ptrace it, nor open its /proc/PID/fd
    # or memory, so a run cannot forge the next reply
    hardening.set_dumpable(0)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    out.write(b'{"ready": true}\n')
    out.flush()
    for line in inp:
        req = json.loads(line)
        if req.get("wipe_tmp") and not _wipe_tmp():
            out.write(b'{"restart": true}\n')
            out.flush()
            return
        resp = _run(req)
        out.write(json.dumps(resp).encode() + b"\n")
        out.flush()
