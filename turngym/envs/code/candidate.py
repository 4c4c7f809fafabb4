"""The solution's side of the grader (stdlib only; runs in the sandbox, trusted by nobody).

:mod:`~turngym.envs.code.harness` starts this as a *fresh interpreter* (so its memory holds
neither the hidden tests nor the grader's nonce), the **zygote**. For each solution the
grader sends the zygote a socket and a pipe (``SCM_RIGHTS``); the zygote forks a process that
keeps only those two (the socket as its request channel, the pipe as its stdout/stderr), loads
the solution, and answers requests: ``load`` (run the module, report the top-level names the
tests use) and ``call`` (call a function with plain-data arguments, answer with a plain-data
value or the exception it raised).

Nothing here is trusted: the solution runs in this process and may rewrite any of it. The
grader therefore treats every answer as untrusted input (checked size, depth and types, see
:mod:`turngym.sandbox.inside.codec`) and enforces deadlines itself.

Framing: a 4-byte big-endian length, then the message: ``marshal`` from the grader (trusted
data; this side may load it), JSON to the grader (which never unmarshals what comes from
here). Only builtin and extension modules are imported up front, so the zygote starts fast
(``_signal``, not ``signal``, which imports ``enum``; file descriptors are read with a
``memoryview``, not ``array``, which imports ``collections``: ~4 ms of a fresh start).
"""

import _signal as signal
import _socket
import builtins
import marshal
import os
import sys

try:
    import _turngym_inside_codec as codec
    import _turngym_inside_framing as framing
    import _turngym_inside_hardening as hardening
    import _turngym_wire as wire
except ImportError:  # imported on the host (tests, linters); in the sandbox the prelude provides them
    from turngym.envs.code import wire
    from turngym.sandbox.inside import codec, framing, hardening

__all__ = ["main"]

_CTL_FD = 3
_SOURCE = [""]


def _recv(sock):
    """One request from the grader (None at the end of the stream)."""
    try:
        return marshal.loads(framing.recv_frame(sock, wire.MAX_REQUEST))
    except EOFError:
        return None


def _send(sock, obj):
    framing.send_frame(sock, codec.dumps(obj).encode("utf-8"), wire.MAX_FRAME)


def _format_error(exc, limit=600):
    import linecache
    import traceback

    src = _SOURCE[0]
    linecache.cache["solution.py"] = (len(src), None, src.splitlines(True), "solution.py")
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "solution.py"]
    try:
        lines = traceback.format_list(frames[-4:]) + traceback.format_exception_only(type(exc), exc)
        text = "".join(lines).rstrip()
    except BaseException:  # noqa: BLE001 - a hostile __str__: the type is all we report
        text = f"{type(exc).__name__}: <unprintable>"
    return text if len(text) <= limit else "..." + text[-limit:]


def _load(req):
    src, entry = req["source"], req["entry"]
    _SOURCE[0] = src
    ns = {"__name__": "solution", "__file__": "solution.py", "__builtins__": builtins}
    try:
        exec(compile(src, "solution.py", "exec"), ns)
    except BaseException as exc:  # SystemExit too: a solution may not end its own loading quietly
        return None, {"ok": False, "error": _format_error(exc, req.get("error_chars", 600))}
    if not callable(ns.get(entry)):
        return None, {"ok": False, "error": f"NameError: the solution does not define a function {entry}()"}
    names = {}
    for name in req.get("names", ()):
        if name not in ns:
            continue
        value = ns[name]
        if type(value) is type(sys):
            names[name] = ["module", getattr(value, "__name__", "")]
        elif callable(value):
            names[name] = ["call"]
        else:
            try:
                names[name] = ["value", codec.encode_obj(value)]
            except (TypeError, ValueError, RecursionError):
                pass
    return ns, {"ok": True, "names": names}


def _call(ns, req):
    rid = req.get("id")
    try:
        fn, args, kwargs = ns[req["name"]], req["args"], req["kwargs"]
    except KeyError as exc:
        return {"id": rid, "ok": False, "kind": "fatal", "message": f"bad request ({exc})"}
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported to the grader, which re-raises it in the test
        try:
            message = str(exc)[:1000]
        except BaseException:  # noqa: BLE001
            message = "<unprintable>"
        return {"id": rid, "ok": False, "kind": "raise", "type": type(exc).__name__, "message": message,
                "traceback": _format_error(exc)}
    except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt...: the test fails
        return {"id": rid, "ok": False, "kind": "fatal", "message": f"the function raised {type(exc).__name__}"}
    try:
        return {"id": rid, "ok": True, "value": codec.encode_obj(value)}
    except (TypeError, ValueError, RecursionError) as exc:
        try:
            shown = repr(value)
            shown = shown if len(shown) <= 200 else shown[:197] + "..."
        except BaseException:  # noqa: BLE001
            shown = "<unprintable>"
        return {"id": rid, "ok": False, "kind": "fatal",
                "message": f"the function returned a {type(value).__name__}, not plain data ({exc}): {shown}"}


def _serve(ctl, sock_fd, out_fd):
    """The solution's process: only the request socket (fd 3) and the output pipe (fds 1, 2)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    ctl.detach()
    os.dup2(sock_fd, _CTL_FD)
    os.closerange(_CTL_FD + 1, 1 << 16)
    sock = _socket.socket(fileno=_CTL_FD)
    sys.setrecursionlimit(3000)
    ns = None
    while True:
        req = _recv(sock)
        if type(req) is not dict:
            os._exit(0)
        if req.get("op") == "load" and ns is None:
            ns, reply = _load(req)
        elif req.get("op") == "call" and ns is not None:
            reply = _call(ns, req)
        elif req.get("op") == "batch" and ns is not None:  # answers, one by one, as they are ready
            calls = req.get("calls") or []
            for call in calls[:-1]:
                reply = _call(ns, call)
                framing.flush_streams()
                _reply(sock, reply, call)
            reply, req = (_call(ns, calls[-1]), calls[-1]) if calls else ({}, req)
        else:
            os._exit(0)
        framing.flush_streams()
        _reply(sock, reply, req)


def _reply(sock, reply, req):
    try:
        _send(sock, reply)
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:  # e.g. an int with too many digits
        _send(sock, {"id": req.get("id"), "ok": False, "kind": "fatal",
                     "message": f"the answer could not be sent ({type(exc).__name__}: {exc})"[:500]})


def main():
    """The zygote: fork one process per ``(socket, pipe)`` pair received on fd 3.

    It serves every solution of a batch, so no solution may change it: it is non-dumpable (a
    solution cannot write its memory through ``/proc``; forked solutions inherit that), and
    nothing is imported from the working dir, where a solution may have planted modules (the
    path entry for it leaves ``sys.path``; a zygote started afresh started in "/").
    """
    workdir = os.environ.pop(wire.WORKDIR_ENV, None)
    if workdir is not None:  # a fresh interpreter (the grader replaced a killed zygote)
        hardening.set_dumpable(0, required=True)  # a fresh interpreter is dumpable again
        os.chdir(workdir)
    hardening.path_outside(os.getcwd())
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    ctl = _socket.socket(fileno=_CTL_FD)
    ctl.sendall(b"R")
    fd_size = memoryview(bytes(8)).cast("i").itemsize  # a C int
    while True:
        try:
            msg, anc, _flags, _addr = ctl.recvmsg(16, _socket.CMSG_SPACE(2 * fd_size))
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        fds = []
        for level, kind, data in anc:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds.extend(memoryview(data[: len(data) - len(data) % fd_size]).cast("i"))
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            ctl.sendall((0).to_bytes(4, "big"))
            continue
        pid = os.fork()
        if pid == 0:
            try:
                _serve(ctl, fds[0], fds[1])
            finally:
                os._exit(0)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        ctl.sendall(pid.to_bytes(4, "big"))
