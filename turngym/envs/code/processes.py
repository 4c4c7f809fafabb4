"""The grader's hold on the solution's processes (stdlib only; runs in the sandbox, in the grader).

:mod:`~turngym.envs.code.harness` judges; this module keeps the processes it judges: the
**zygote** (:mod:`~turngym.envs.code.candidate`, forked before the grader reads its input, a fresh
interpreter when it has to be replaced after), one process per solution forked from it that owns
nothing but a request socket and an output pipe, the sweep of whatever an earlier solution left
running, and the request channel, whose deadlines are kept here (``select``, then ``SIGKILL`` to
the process group). Every answer is untrusted input: a frame past :data:`wire.MAX_FRAME`, an
answer before the question or anything but a JSON object is a :class:`SolutionFault`.

Why a module of its own: the process control is the half of the grader that knows nothing of
tests, and the half whose mistakes would let a solution outlive its deadline or reach the next
one. It is grader code only: it is shipped ahead of the harness's source, never ahead of the
candidate's (:func:`turngym.envs.code.runner._harness_source`), so a zygote started afresh holds
none of it; one forked before the input is read holds it as it holds the rest of the grader's
code, with no test or nonce in memory yet. Inlined in the sandbox as ``_turngym_code_processes``.

Its classes say ``__module__ = "__main__"``: a :class:`SolutionFault` in a test's error text reads
``SolutionFault: ...``, as it did when the grader was one ``-c`` program.
"""

import _socket
import json
import marshal
import os
import select
import signal
import sys
import time

try:
    import _turngym_inside_framing as framing
    import _turngym_inside_hardening as hardening
    import _turngym_wire as wire
except ImportError:  # imported on the host (tests, linters); in the sandbox the prelude provides them
    from turngym.envs.code import wire
    from turngym.sandbox.inside import framing, hardening

__all__ = ["IGNORED_SIGNALS", "NoStart", "SolutionFault", "SolutionProcesses", "Timeout", "zygote_argv"]

_ZYGOTE_START_S = 20.0
_SPAWN_S = 5.0
_OUTPUT_KEPT = 2000

#: The signals the grader ignores (only SIGKILL and SIGSTOP reach it); its children reset them.
IGNORED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)


class Timeout(BaseException):
    """A test ran out of time (BaseException: test code's ``except Exception`` can't swallow it)."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)


class SolutionFault(BaseException):
    """The solution's process broke down: died, broke the protocol, or returned non-plain
    data. A BaseException so that test code's ``except Exception`` cannot turn it into a pass."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)


class NoStart(Exception):
    """The zygote did not start: nothing the solution did can cause this (it has not run)."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)


def _kill_group(pid):
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


class _Child:
    """One solution process: its pid (also its process group), request socket, output pipe."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)

    def __init__(self, pid, sock, out_fd):
        self.pid, self.sock, self.out_fd = pid, sock, out_fd
        self.buf = bytearray()
        self.output = bytearray()

    def capture(self):
        try:
            chunk = os.read(self.out_fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            os.close(self.out_fd)
            self.out_fd = -1
        elif len(self.output) < _OUTPUT_KEPT:
            self.output += chunk[: _OUTPUT_KEPT - len(self.output)]

    def close(self):
        _kill_group(self.pid)
        self.sock.close()
        if self.out_fd >= 0:
            os.close(self.out_fd)
            self.out_fd = -1


class SolutionProcesses:
    """The zygote and the one solution process at a time forked from it, and the channel to that
    process; :class:`turngym.envs.code.harness._Grader` adds the tests."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)

    def __init__(self, zygote_argv, run_uid=None):
        self.zygote_argv = zygote_argv
        self.run_uid = run_uid
        self.zygote_pid, self.ctl = None, None
        self.input_read = False
        self.child = None

    # -- processes -------------------------------------------------------------------------
    def spawn_zygote(self):
        """Start the zygote without waiting for it (its start overlaps the grader's own).

        Before the grader has read its input, a plain fork is safe and fast: this process
        then holds nothing secret (the input arrives by file, not through the warm worker this
        process may be forked from). Once the input is in memory, a zygote the solution killed
        is replaced by a fresh interpreter (exec), which inherits no memory at all.
        """
        ctl, theirs = _socket.socketpair()
        pid = os.fork()
        if pid == 0:
            try:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.dup2(theirs.fileno(), 3)
                os.closerange(4, 1 << 16)
                for sig in IGNORED_SIGNALS:  # ignored dispositions would survive an exec
                    signal.signal(sig, signal.SIG_DFL)
                if self.run_uid is not None:
                    try:
                        hardening.drop_privileges(self.run_uid)
                    except OSError:
                        os._exit(126)  # never run a solution that could reach the grader
                # The zygote stays non-dumpable (inherited from this process, kept by the uid
                # change), and so are the solutions it forks: a solution cannot write the
                # zygote's memory (/proc/PID/mem) to take over the next solutions it forks.
                if self.input_read:
                    # A fresh interpreter starts in "/": no start-up import may come from the
                    # working dir, where an earlier solution may have planted modules.
                    os.environ[wire.WORKDIR_ENV] = os.getcwd()
                    os.chdir("/")
                    os.execv(self.zygote_argv[0], self.zygote_argv)
                else:
                    exec(compile(self.zygote_argv[-1], "<zygote>", "exec"), {"__name__": "__zygote__"})
            finally:
                os._exit(127)
        theirs.close()
        self.zygote_pid, self.ctl = pid, ctl

    def start_zygote(self):
        """A zygote that answers (spawned now unless :meth:`spawn_zygote` already did)."""
        if self.zygote_pid is None:
            self.spawn_zygote()
        if self._ctl_read(1, _ZYGOTE_START_S) != b"R":
            self.stop_zygote()
            raise NoStart(f"the solution runner (a fresh {self.zygote_argv[0]}) did not start")

    def stop_zygote(self):
        if self.zygote_pid is not None:
            _kill_group(self.zygote_pid)
            try:
                os.waitpid(self.zygote_pid, 0)
            except OSError:
                pass
            self.ctl.close()
        self.zygote_pid, self.ctl = None, None

    def _ctl_read(self, n, seconds):
        """``n`` bytes from the zygote within ``seconds``; None if it closed, failed or took longer."""
        try:
            return framing.recv_exact(self.ctl, n, time.monotonic() + seconds)
        except (EOFError, OSError):  # TimeoutError is an OSError
            return None

    def _spawn(self):
        for _attempt in range(2):
            if self.zygote_pid is None:
                try:
                    self.start_zygote()
                except NoStart as exc:
                    raise SolutionFault(f"the solution's process could not be restarted ({exc})") from None
            mine, theirs = _socket.socketpair()
            out_r, out_w = os.pipe()
            try:
                self.ctl.sendmsg([b"F"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, bytes(_fd_array(theirs.fileno(), out_w)))])
                reply = self._ctl_read(4, _SPAWN_S)
            except OSError:
                reply = None
            finally:
                theirs.close()
                os.close(out_w)
            pid = int.from_bytes(reply, "big") if reply else 0
            if pid > 1:
                os.set_blocking(out_r, False)
                return _Child(pid, mine, out_r)
            mine.close()
            os.close(out_r)
            self.stop_zygote()  # killed or stopped by an earlier solution: start a new one
        raise SolutionFault("the solution's process could not be started (its runner was killed)")

    def drop_child(self):
        if self.child is not None:
            self.child.close()
            self.child = None

    # -- requests --------------------------------------------------------------------------
    def _exchange(self, msg, deadline):
        """Send one request (``None``: none) to the solution's process and wait (until
        ``deadline``) for its next answer."""
        child = self.child
        data = b"" if msg is None else framing.pack_frame(marshal.dumps(msg), wire.MAX_REQUEST)
        sent = 0
        while True:
            frame = self._frame(child, sent < len(data))
            if frame is not None:
                return frame
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout()
            rlist = [child.sock] + ([child.out_fd] if child.out_fd >= 0 else [])
            wlist = [child.sock] if sent < len(data) else []
            readable, writable, _ = select.select(rlist, wlist, [], left)
            if writable:
                try:
                    sent += child.sock.send(data[sent:sent + 65536])
                except OSError:
                    raise SolutionFault("the solution's process died (it exited or was killed)") from None
            if child.out_fd in readable:
                child.capture()
            if child.sock in readable:
                try:
                    chunk = child.sock.recv(65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise SolutionFault("the solution's process died (it exited or was killed)")
                child.buf += chunk

    @staticmethod
    def _frame(child, sending):
        """The next whole answer in ``child``'s buffer, or None (answers may arrive in a row)."""
        try:
            frame = framing.take_frame(child.buf, wire.MAX_FRAME)
        except ValueError:
            raise SolutionFault(f"the solution's process sent more than {wire.MAX_FRAME} bytes") from None
        if frame is None:
            return None
        if sending:
            raise SolutionFault("the solution's process broke the protocol (it answered before it was asked)")
        try:
            reply = json.loads(frame)
        except (ValueError, RecursionError):
            reply = None
        if type(reply) is not dict:
            raise SolutionFault("the solution's process broke the protocol")
        return reply

    def sweep(self):
        """Kill every process of the solutions' uid but the zygote, and wake the zygote: what an
        earlier solution left running (a daemon) must not touch the next one, nor keep the
        zygote stopped (the next spawn would wait out its deadline).

        With one uid, this process is the PID namespace's init (the sandbox's trusted launch):
        then every other process in the namespace is a solution's, and orphans it inherited are
        reaped here (they would fill the sandbox's process cap as zombies)."""
        as_init = self.run_uid is None and os.getpid() == 1
        if self.run_uid is None and not as_init:
            return
        if as_init:
            self.reap()
        keep = (os.getpid(), self.zygote_pid)
        for _pass in range(50):  # until a scan finds nobody: a forking leftover hops past one scan
            found = False
            for name in os.listdir("/proc"):
                if not name.isdigit() or int(name) in keep:
                    continue
                try:
                    if as_init or os.stat(f"/proc/{name}").st_uid == self.run_uid:
                        with open(f"/proc/{name}/stat", "rb") as fh:
                            if fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                                continue  # dead already, waiting to be reaped
                        os.kill(int(name), signal.SIGKILL)
                        found = True
                except OSError:
                    pass
            if not found:
                break
        if as_init:
            self.reap()
        if self.zygote_pid is not None:
            try:
                os.kill(self.zygote_pid, signal.SIGCONT)
            except OSError:
                pass

    def reap(self):
        """Collect exited children (as init: every orphan of the namespace); a zygote found
        dead here is forgotten, so the next spawn starts a fresh one at once."""
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.zygote_pid:
                self.ctl.close()
                self.zygote_pid, self.ctl = None, None


def _fd_array(*fds):
    import array

    return array.array("i", fds)


def zygote_argv(candidate_source):
    """This interpreter with the same flags (``-S``, ``-B``...), running the candidate side."""
    argv = list(getattr(sys, "orig_argv", []) or [sys.executable])
    cut = argv.index("-c") if "-c" in argv else len(argv) - 1  # before -c (or the script): options only
    return [sys.executable or argv[0], *argv[1:cut], "-c", candidate_source]

