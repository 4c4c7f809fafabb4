"""The candidate side of the split SWE grader: the process that imports the agent's package.

:mod:`turngym.envs.swe._split_boot` forks this process before it reads the nonce or the hidden
cases; :func:`serve` is all the child runs. It drops to the untrusted uid and Landlocks its
writes before any of the package's code exists, keeps only a socket to the grader and a pipe for
its console, and answers the grader's requests (import, attribute, call, operator, the hidden
cases) with plain data or a handle to an object that stays here. Nothing here is trusted once
the package runs: it may rewrite any of this, so the grader checks every answer.

Why a module of its own: it is the one part of the program that runs with the package, and
reading it apart from the grader's side shows what the candidate does before the package can
act. It is not a boundary in memory: the candidate is a fork of the grader, so it holds every
module the grader had loaded by then (code and the run's configuration, none of its secrets:
those are read after the fork). Stdlib only; it travels into the sandbox as text, inlined ahead
of the program as ``_turngym_split_candidate`` (see :func:`turngym.envs.swe.testing._boot_source`).

Its classes say ``__module__ = "__main__"``: a name the package can see (in a repr, in an
exception's traceback) reads as it did when the grader was one ``-c`` program.
"""

import builtins
import json
import os
import signal
import socket
import sys

try:
    import _turngym_inside_codec as codec
    import _turngym_inside_framing as framing
    import _turngym_inside_hardening as hardening
    import _turngym_split_wire as wire
except ImportError:  # imported on the host (tests, linters); in the sandbox the prelude provides them
    from turngym.envs.swe import _split_wire as wire
    from turngym.sandbox.inside import codec, framing, hardening

__all__ = ["HIDDEN_OBS_MAX", "serve"]

#: The hidden cases: the largest observation sent as is (the gold packages' answers take a few KB each).
HIDDEN_OBS_MAX = 16 << 10


class _GraderRef:
    """The candidate's view of an object the tests handed over: call it, read public attributes."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)

    __slots__ = ("_tg_id", "_tg_peer")

    def __init__(self, gid, peer):
        self._tg_id, self._tg_peer = gid, peer  # plain slots: this class has no __setattr__ of its own

    def __call__(self, *args, **kwargs):
        return self._tg_peer.request({"cb": self._tg_id, "args": self._tg_peer.enc(list(args)),
                                      "kwargs": self._tg_peer.enc(kwargs)})

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._tg_peer.request({"cbget": self._tg_id, "name": name})


class _CandidateError(Exception):
    """A callback into the tests raised (its builtin type is kept when it has one)."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)


class _Server:
    """The candidate's loop: serve the grader's requests, make callbacks into the tests."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)

    def __init__(self, sock):
        self.sock = sock
        self.objs = {}
        self.ids = {}

    def ref(self, value):
        key = id(value)
        rid = self.ids.get(key)
        if rid is None:
            rid = self.ids[key] = len(self.objs) + 1
            self.objs[rid] = value
        out = {"R": rid}
        for base in (str, int, float, tuple, list, dict, set, frozenset, bytes):
            if isinstance(value, base) and not isinstance(value, bool):
                try:
                    out = {"R": rid, "p": codec.encode_obj(base(value))}
                except Exception:  # noqa: BLE001 - no plain view, then
                    pass
                break
        return {"H": out}

    def enc(self, value):
        return codec.encode_obj(value, self.ref)

    def deref(self, tag, body):
        if tag == "R" and type(body) is int and body in self.objs:
            return self.objs[body]
        if tag == "G" and type(body) is int:
            return _GraderRef(body, self)
        if tag == "M" and type(body) is str:
            import importlib

            return importlib.import_module(body)
        raise ValueError(f"bad reference {tag}")

    def dec(self, obj):
        return codec.decode_obj(obj, self.deref)

    def request(self, msg):
        """A callback into the grader; serve nested requests until its answer comes."""
        wire.send(self.sock, msg)
        while True:
            req = wire.recv(self.sock)
            if "ret" in req:
                return self.dec(req["ret"])
            if "raise" in req:
                kind = getattr(builtins, str(req.get("type")), None)
                if not (isinstance(kind, type) and issubclass(kind, Exception)):
                    kind = _CandidateError
                raise kind(str(req.get("raise")))
            self.serve_one(req)

    def serve_one(self, req):
        try:
            value = self.run(req)
            reply = {"ok": True, "v": self.enc(value)}
        except Exception as exc:  # noqa: BLE001 - reported, the grader raises it in the test
            reply = {"ok": False, "exc": self.describe(exc)}
        except BaseException as exc:  # noqa: BLE001 - SystemExit and friends: the test fails
            reply = {"ok": False, "exc": {"mro": [], "args": {"L": [f"the package raised {type(exc).__name__}"]},
                                          "attrs": {"D": []}, "text": ""}}
        framing.flush_streams()
        try:
            wire.send(self.sock, reply)
        except (ValueError, TypeError, RecursionError, OverflowError) as exc:
            wire.send(self.sock, {"ok": False, "exc": {"mro": [], "args": {"L": [f"the answer could not be sent ({exc})"[:300]]},
                                                   "attrs": {"D": []}, "text": ""}})

    def run(self, req):
        import operator

        op = req.get("op")
        if op == "import":
            import importlib

            for name in req["names"]:
                importlib.import_module(name)
            return None
        if op == "hidden":
            return _hidden_cases(str(req["source"]), str(req["package"]), req["cases"])
        obj = self.dec(req["obj"])
        if op == "getattr":
            return getattr(obj, str(req["name"]))
        if op == "setattr":
            setattr(obj, str(req["name"]), self.dec(req["value"]))
            return None
        if op == "delattr":
            delattr(obj, str(req["name"]))
            return None
        if op == "call":
            return obj(*self.dec(req["args"]), **self.dec(req["kwargs"]))
        args = self.dec(req.get("args", {"L": []}))
        if op == "next":
            out = []
            for _ in range(64):
                try:
                    out.append(next(obj))
                except StopIteration:
                    return [out, True]
            return [out, False]
        funcs = {"iter": iter, "len": len, "bool": bool, "repr": repr, "str": str, "hash": hash, "format": format,
                 "isinstance": isinstance, "contains": operator.contains, "getitem": operator.getitem,
                 "setitem": operator.setitem, "delitem": operator.delitem, "int": int, "float": float,
                 "index": operator.index, "complex": complex, "round": round, "abs": abs, "neg": operator.neg,
                 "pos": operator.pos, "invert": operator.invert}
        if op in funcs:
            return funcs[op](obj, *args)
        fn = getattr(operator, str(op), None) if str(op) in _BINARY else None
        if fn is None:
            raise ValueError(f"unknown operation {op!r}")
        return fn(obj, *args)

    def describe(self, exc):
        mro = []
        for cls in type(exc).__mro__:
            if cls.__module__ == "builtins":
                mro.append(["builtins", cls.__qualname__, 0])
            else:
                mro.append([str(cls.__module__), str(cls.__qualname__), self.ref(cls)["H"]["R"]])
        attrs = {k: v for k, v in vars(exc).items() if not k.startswith("__")} if hasattr(exc, "__dict__") else {}
        enc = {}
        for name, value in (("args", list(exc.args)), ("attrs", attrs)):
            try:
                enc[name] = self.enc(value)
            except (ValueError, TypeError, RecursionError):
                enc[name] = {"L": []} if name == "args" else {"D": []}
        try:
            import traceback

            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-6))[-3000:]
        except BaseException:  # noqa: BLE001
            text = type(exc).__name__
        return {"mro": mro, "args": enc["args"], "attrs": enc["attrs"], "text": text}


def _hidden_cases(source, package, cases):
    """The candidate's side of the hidden cases: the driver's ``run(package, case)`` for every
    case, each observation made plain JSON here (a driver error is an observation too).

    The answers are the package's claims like any other: they count only where they equal the
    gold package's, which never enters this sandbox, on inputs this process sees only now."""
    import hashlib
    import importlib

    driver = {"__name__": "_turngym_hidden"}
    exec(compile(source, "<turngym hidden cases>", "exec"), driver)  # noqa: S102 - the host's driver
    pkg = importlib.import_module(package)
    out = []
    for case in cases:
        try:
            text = json.dumps(driver["run"](pkg, case))
            # a large answer (the gold ones are a few KB) travels as its digest: the verdict line stays small
            obs = json.loads(text) if len(text) <= HIDDEN_OBS_MAX else ["!large", hashlib.sha256(text.encode()).hexdigest()]
        except Exception as exc:  # noqa: BLE001 - what the package did to the driver is part of its answer
            obs = ["!driver", type(exc).__name__, str(exc)[:200]]
        out.append(obs)
    return out


_BINARY = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow",
                     "and_", "or_", "xor", "lshift", "rshift", "matmul"})


def _become_untrusted(run_uid):
    """The candidate's first step: the untrusted uid where there is one. Any failure exits
    (126) before the package runs, whether or not the uid changed: the package never runs
    with the grader's uid or capabilities. The grader then sees no first frame and reports
    that the candidate did not start (the host's infra error, never a verdict)."""
    if run_uid is None:
        return
    try:
        hardening.drop_privileges(run_uid)
    except BaseException as exc:  # noqa: BLE001 - whatever failed, the package must not run
        try:
            os.write(2, f"[grader] the package's process could not drop to the untrusted uid {run_uid} ({exc!r})\n".encode())
        finally:
            os._exit(126)


#: Landlock's file-system rights that change the tree (ABI 1, then REFER in 2 and TRUNCATE in 3).
_LL_WRITES = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))
_LL_LATER = {2: 1 << 13, 3: 1 << 14}
def _lock_writes(writable, root):
    """Landlock: from now on this process and its children write nowhere but beneath ``writable``
    (none of which may hold the tree at ``root``).

    The tests run in the grader and read files of the repository while they run (expected
    output, fixture data, the test files themselves). With one uid (Docker, a user namespace)
    nothing else stops the package from rewriting those files between the grader's reads, or
    renaming the test directory away and planting another: a forged verdict from data the
    tests trust. Landlock needs no privilege and cannot be lifted by the restricted process.
    Returns whether the lock is in place (False where the kernel lacks Landlock, < 5.13).
    """
    import ctypes
    import struct

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long
        abi = syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # landlock_create_ruleset: ABI version
        if abi < 1:
            return False
        handled = _LL_WRITES | sum(bit for version, bit in _LL_LATER.items() if abi >= version)
        attr = struct.pack("=Q", handled)
        ruleset = syscall(444, ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
        if ruleset < 0:
            return False
        try:
            for path in writable:
                if root == path or root.startswith(path.rstrip("/") + "/"):
                    continue  # never the tree's own directories
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    rule = struct.pack("=Qi", handled, fd)  # landlock_path_beneath_attr (packed)
                    if syscall(445, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.c_char_p(rule), ctypes.c_uint32(0)) < 0:
                        return False
                finally:
                    os.close(fd)
            if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, which landlock_restrict_self requires
                return False
            return syscall(446, ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0
        finally:
            os.close(ruleset)
    except (OSError, AttributeError):
        return False


def serve(sock, out_w, root, nstd, run_uid=None, scratch=None):
    """The forked child: owns a socket and an output pipe, imports the agent's package on request.

    It writes only to ``scratch`` (its and the tests' temporary files) and ``/dev``."""
    _become_untrusted(run_uid)
    locked = _lock_writes([p for p in (scratch, "/dev") if p], root)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT,
                signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    fd = sock.detach()
    os.dup2(fd, 3)
    os.closerange(4, 1 << 16)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - for the process's whole life
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = sys.stdout
    sys.path.insert(nstd, root)
    server = _Server(socket.socket(fileno=3))
    wire.send(server.sock, {"uid": os.getuid(), "writes_locked": locked})
    while True:
        try:
            req = wire.recv(server.sock)
        except BaseException:  # noqa: BLE001 - the grader closed the socket: done
            os._exit(0)
        server.serve_one(req)

