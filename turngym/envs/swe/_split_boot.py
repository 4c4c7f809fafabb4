"""The split SWE grader (run as ``python -I -S -B -c <this source> CONFIG``): tests here, code elsewhere.

Used for the shipped (generated) repositories, whose tests call the package and assert on
what comes back. The verdict must come from a process that never runs the agent's code, so
the agent's package is never imported here:

* This process (the **grader**) imports pytest from the runner's site directories, makes
  itself non-dumpable (no same-uid ptrace, no ``/proc/<pid>/mem`` or ``fd``), ignores the
  catchable signals, and forks the **candidate** *before* it reads the per-run nonce from
  stdin, so the nonce never exists in the candidate's memory. The candidate keeps only a
  socket to the grader and a pipe for its console output; it imports the agent's package
  and answers requests.
* Here, every top-level module of the tree outside the test directories is a *proxy*
  module: ``from pkg import Name`` binds a stand-in whose calls, attribute reads and
  operators are requests to the candidate. What comes back is plain data (``int``,
  ``str``, ``list``... of exactly those types, rebuilt here) or a handle to an object that
  stays in the candidate. A handle equals plain data only through the plain value the
  candidate sent with it (for subclasses of plain types), compared here; comparisons answer
  plain data only; ``len``/``bool``/``repr`` answer exactly ``int``/``bool``/``str``. An
  exception raised there is raised here as a local class built from builtin ``Exception``
  subclasses and the package's classes the tests name, never ``SystemExit``,
  ``KeyboardInterrupt`` or pytest's outcomes.
* The candidate runs none of the agent's code until pytest has collected every test module
  (the stand-ins are lazy), so every file imported here is one the task shipped; after
  collection nothing from the tree can be imported here at all. Objects the tests hand to
  the package (a fake clock, a function to memoize) cross as references the candidate can
  call, and read public attributes of, only when they were defined in the test files.
* Deadlines are kept here: a candidate that does not answer in time is killed and the run
  is timed out; a candidate that dies ends the run (no test passes); a watchdog reports
  at the deadline whatever happens. pytest's own report hooks run here and build the only
  verdict line, ``NONCE <json>``, on a stdout the candidate never holds.

* **Hidden cases** (the host's :mod:`turngym.envs.swe.hidden`): a second stdin line after the
  nonce may carry a driver (source) and inputs. Read after the fork like the nonce, they are
  never on disk, and reach the candidate only once pytest is done, in one request; it answers
  one plain-JSON observation per case, which travels on the verdict line (``"hidden"``) for the
  host to compare with the gold package's answers (which never enter the sandbox). The tests'
  part of the verdict is taken before, so nothing the package does with the hidden inputs
  (print them, die, stall) shows in it: only in the hidden part.

* Where the sandbox gives the session a second, untrusted uid (``TURNGYM_UNTRUSTED_UID``: a
  trusted launch, bubblewrap as root), this process keeps the session uid and the
  capabilities to switch uids and to kill, and the candidate drops to the untrusted uid with
  every capability set emptied before it reads a request, so before any of the package's
  code runs. The candidate, and anything it starts, then cannot signal, stop, renice,
  ``prlimit`` or ptrace this process (``EPERM``); this process can still kill it. The
  candidate reports its uid in a first frame, and only then is the banner written: a
  candidate that could not start (or changed uid but kept capabilities) is the
  infrastructure's fault, never a verdict. A drop that fails at any step, before or after the
  uid changed, ends the candidate before the package runs: it would otherwise run with this
  process's uid and capabilities (kill, setuid) inside the sandbox.

* Before any of the package's code runs, the candidate also Landlocks itself (no privilege
  needed, no way back): it and its children write nowhere but a fresh temporary directory
  (``TMPDIR``, where pytest's ``tmp_path`` lands too) and ``/dev``. The tests run here and
  read the repository's files while they run (expected output, fixture data); with one uid
  nothing else would stop the package from rewriting those between reads, or renaming the
  test directory away and planting a forged copy. Where the kernel has no Landlock (< 5.13),
  that stays open on one-uid backends; the first frame says whether the lock is in place.

What the candidate can still do is behave: answer each call however its code says (that is
the package under test). With one uid in bubblewrap (a user namespace) this process is its
PID namespace's init, which the candidate cannot signal to a stop or a kill. With one uid in
Docker it can kill or stop this process, which ends the run with no verdict line (killed) or
at the wall budget (stopped): the host scores both as the agent's failure.
"""

import builtins
import json
import os
import signal
import socket
import sys
import threading
import time

try:
    import _turngym_inside_codec as codec
    import _turngym_inside_framing as framing
    import _turngym_inside_hardening as hardening
except ImportError:  # imported on the host (tests, linters); in the sandbox the prelude provides them
    from turngym.sandbox.inside import codec, framing, hardening

BANNER = b"turngym-grader-started\n"
MAX_FRAME = 8 << 20
#: The hidden cases: the largest observation sent as is, and the most all of them may take on the verdict line
#: (the sandbox keeps 1 MiB of output; the gold packages' answers take at most ~250 KB).
HIDDEN_OBS_MAX = 16 << 10
HIDDEN_TOTAL_MAX = 640 << 10


# ------------------------------------------------------------------------------ framing
def _send(sock, obj):
    """One message (a JSON object whose values are :mod:`codec` trees) as one frame."""
    framing.send_frame(sock, codec.dumps(obj).encode("utf-8", "surrogatepass"), MAX_FRAME)


def _recv(sock, deadline=None):
    """One message: TimeoutError past ``deadline``, EOFError at the end, ValueError if malformed."""
    msg = json.loads(framing.recv_frame(sock, MAX_FRAME, deadline).decode("utf-8", "surrogatepass"))
    if type(msg) is not dict:
        raise ValueError("a message is not an object")
    return msg


# ------------------------------------------------------------------------------ candidate
class _GraderRef:
    """The candidate's view of an object the tests handed over: call it, read public attributes."""

    __slots__ = ("_tg_id", "_tg_peer")

    def __init__(self, gid, peer):
        object.__setattr__(self, "_tg_id", gid)
        object.__setattr__(self, "_tg_peer", peer)

    def __call__(self, *args, **kwargs):
        return self._tg_peer.request({"cb": self._tg_id, "args": self._tg_peer.enc(list(args)),
                                      "kwargs": self._tg_peer.enc(kwargs)})

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._tg_peer.request({"cbget": self._tg_id, "name": name})


class _CandidateError(Exception):
    """A callback into the tests raised (its builtin type is kept when it has one)."""


class _Server:
    """The candidate's loop: serve the grader's requests, make callbacks into the tests."""

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
        _send(self.sock, msg)
        while True:
            req = _recv(self.sock)
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
            _send(self.sock, reply)
        except (ValueError, TypeError, RecursionError, OverflowError) as exc:
            _send(self.sock, {"ok": False, "exc": {"mro": [], "args": {"L": [f"the answer could not be sent ({exc})"[:300]]},
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


def _candidate(sock, out_w, root, nstd, run_uid=None, scratch=None):
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
    _send(server.sock, {"uid": os.getuid(), "writes_locked": locked})
    while True:
        try:
            req = _recv(server.sock)
        except BaseException:  # noqa: BLE001 - the grader closed the socket: done
            os._exit(0)
        server.serve_one(req)


# -------------------------------------------------------------------------------- grader
class CandidateGone(BaseException):
    """The package's process died, timed out or broke the protocol (a BaseException: test code's
    ``except Exception`` cannot swallow it)."""


class RemoteError(Exception):
    """An exception the package raised whose classes are neither builtins nor named by the tests."""


class _Client:
    """The grader's end of the socket; every value from it is rebuilt as plain data or a handle."""

    def __init__(self, sock, pid, deadline, test_root):
        self.sock = sock
        self.pid = pid
        self.deadline = deadline
        self.test_root = test_root
        self.gone = ""
        self.fatal = ""
        self.timed_out = False
        self.collected = False
        self.gobjs = {}
        self.gids = {}
        self.lazy = []  # every lazy class made so far
        self.exc_classes = {}
        self.pending = None  # a BaseException a callback raised here (pytest's outcomes...)

    # -- the wire
    def kill(self, why, timed_out=False):
        """The package's process misbehaved (died, timed out, broke the protocol): the run is void."""
        if not self.fatal:
            self.fatal = why
            self.timed_out = timed_out
        self.stop(why)

    def stop(self, why="the run ended"):
        self.gone = self.gone or why
        for target in (-self.pid, self.pid):
            try:
                os.kill(target, signal.SIGKILL)
            except OSError:
                pass

    def request(self, msg):
        if not self.collected:
            raise RemoteError("the package is used while pytest collects the tests; the grader only calls it from tests")
        if self.gone:
            raise CandidateGone(self.gone)
        try:
            _send(self.sock, msg)
            while True:
                reply = _recv(self.sock, self.deadline)
                if "cb" in reply or "cbget" in reply:
                    self.callback(reply)
                    continue
                break
        except TimeoutError:
            self.kill("the package did not answer before the deadline", timed_out=True)
            raise CandidateGone(self.gone) from None
        except (EOFError, OSError):
            status = self.reap()
            self.kill(f"the package's process ended (status {status})")
            raise CandidateGone(self.gone) from None
        except (ValueError, RecursionError, UnicodeError) as exc:
            self.kill(f"the package's process broke the protocol ({str(exc)[:200]})")
            raise CandidateGone(self.gone) from None
        pending, self.pending = self.pending, None
        if pending is not None:
            raise pending
        if reply.get("ok") is True:
            return self.dec(reply.get("v"))
        raise self.exception(reply.get("exc"))

    def reap(self):
        for _ in range(50):
            try:
                pid, raw = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if pid:
                return os.waitstatus_to_exitcode(raw)
            time.sleep(0.002)
        return None

    def callback(self, req):
        try:
            obj = self.gobjs[req.get("cb", req.get("cbget"))]
            if "cb" in req:
                value = obj(*self.dec(req.get("args")), **self.dec(req.get("kwargs")))
            else:
                name = req.get("name")
                if type(name) is not str or name.startswith("_"):
                    raise AttributeError(f"the package may read only public attributes of the tests' objects, not {name!r}")
                value = getattr(obj, name)
            reply = {"ret": self.enc(value)}
        except KeyError:
            reply = {"raise": "unknown reference", "type": "ValueError"}
        except Exception as exc:  # noqa: BLE001 - the package sees the test code's exception
            reply = {"raise": str(exc)[:1000], "type": type(exc).__name__ if type(exc).__module__ == "builtins" else "Exception"}
        except BaseException as exc:  # noqa: BLE001 - pytest.fail/skip in a callback: raised in the test afterwards
            if self.pending is None:
                self.pending = exc
            reply = {"raise": "the test was stopped", "type": "Exception"}
        _send(self.sock, reply)

    # -- values
    def _from_tests(self, value):
        """Objects the tests may hand to the package: functions, classes and instances defined in a test file."""
        mod = getattr(value, "__module__", None) if callable(value) else type(value).__module__
        if not isinstance(mod, str) or isinstance(value, type(sys)):
            return False
        module = sys.modules.get(mod)
        path = getattr(module, "__file__", None) or ""
        return bool(path) and os.path.abspath(path).startswith(self.test_root)

    def ref(self, value):
        if isinstance(value, RemoteObject):
            return {"R": object.__getattribute__(value, "_tg_id")}
        if isinstance(value, _RemoteMeta):
            return _resolve_ref(value)
        if not self._from_tests(value):
            raise TypeError(f"a {type(value).__name__} cannot be passed to the package: only plain data, the package's "
                            "own objects and objects defined in the test files cross to it")
        key = id(value)
        gid = self.gids.get(key)
        if gid is None:
            gid = self.gids[key] = len(self.gobjs) + 1
            self.gobjs[gid] = value
        return {"G": gid}

    def enc(self, value):
        return codec.encode_obj(value, self.ref)

    def deref(self, tag, body):
        if tag == "H" and type(body) is dict and type(body.get("R")) is int:
            plain = codec.decode_obj(body["p"]) if "p" in body else _NO_PLAIN
            return RemoteObject(body["R"], plain)
        if tag == "G" and type(body) is int and body in self.gobjs:
            return self.gobjs[body]
        raise ValueError(f"bad reference {tag}")

    def dec(self, obj):
        return codec.decode_obj(obj, self.deref)

    def exception(self, info):
        """A local exception for the package's: builtin Exception subclasses and the tests' named classes only."""
        if type(info) is not dict:
            return CandidateGone("the package's process sent a malformed error")
        try:
            args = self.dec(info.get("args"))
            attrs = self.dec(info.get("attrs"))
            mro = info.get("mro")
            if type(args) is not list or type(attrs) is not dict or type(mro) is not list:
                raise ValueError("malformed")
        except (ValueError, TypeError, RecursionError):
            return RemoteError("the package raised an exception that could not be read back")
        bases, rids = [], set()
        for entry in mro:
            if type(entry) is not list or len(entry) != 3:
                continue
            module, name, rid = entry
            if module == "builtins":
                cls = getattr(builtins, str(name), None)
                if isinstance(cls, type) and issubclass(cls, Exception) and cls not in bases and cls is not Exception:
                    bases.append(cls)
            elif type(rid) is int:
                rids.add(rid)
        if rids:
            for lazy in self.lazy:
                try:
                    ref = _resolve_ref(lazy)
                except BaseException:  # noqa: BLE001 - a name the package does not have
                    continue
                if type(ref) is dict and ref.get("R") in rids and lazy not in bases:
                    bases.insert(0, lazy)
        name = str(mro[0][1]) if mro and type(mro[0]) is list and len(mro[0]) == 3 else "RemoteError"
        cls = self._exception_class(name[:100], tuple(bases))
        exc = cls.__new__(cls)
        try:
            exc.args = tuple(args)
            for key, value in attrs.items():
                if type(key) is str and not key.startswith("__"):
                    setattr(exc, key, value)
        except Exception:  # noqa: BLE001, S110 - a builtin's read-only attribute: keep the rest
            pass
        text = info.get("text")
        if type(text) is str and text and hasattr(exc, "add_note"):
            exc.add_note("raised in the package's process:\n" + text[-2000:])
        return exc

    def _exception_class(self, name, bases):
        hit = self.exc_classes.get((name, bases))
        if hit is None:
            candidates = [bases] + [bases[:i] for i in range(len(bases) - 1, 0, -1)] + [()]
            for combo in candidates:
                try:
                    hit = type(name, (*combo, RemoteError), {"__module__": "package"})
                    break
                except TypeError:
                    continue
            self.exc_classes[(name, bases)] = hit
        return hit

    def op(self, name, obj, *args):
        return self.request({"op": name, "obj": self.enc(obj), "args": self.enc(list(args))})


_NO_PLAIN = object()
_client = None


def _expect(value, *types):
    if type(value) not in types:
        raise TypeError(f"the package answered a {type(value).__name__} where Python requires {types[0].__name__}")
    return value


class RemoteObject:
    """A handle to an object of the package: every operation is a request to its process."""

    __slots__ = ("_tg_id", "_tg_plain")

    def __init__(self, rid, plain):
        object.__setattr__(self, "_tg_id", rid)
        object.__setattr__(self, "_tg_plain", plain)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _client.request({"op": "getattr", "obj": _client.enc(self), "name": name})

    def __setattr__(self, name, value):
        _client.request({"op": "setattr", "obj": _client.enc(self), "name": name, "value": _client.enc(value)})

    def __delattr__(self, name):
        _client.request({"op": "delattr", "obj": _client.enc(self), "name": name})

    def __call__(self, *args, **kwargs):
        return _client.request({"op": "call", "obj": _client.enc(self), "args": _client.enc(list(args)),
                                "kwargs": _client.enc(kwargs)})

    def _compare(self, op, other, reflected):
        plain = object.__getattribute__(self, "_tg_plain")
        if not isinstance(other, (RemoteObject, _RemoteMeta)):
            if plain is _NO_PLAIN:  # never equal to plain data: the package's __eq__ is not asked
                return NotImplemented
            import operator

            return getattr(operator, op)(other, plain) if reflected else getattr(operator, op)(plain, other)
        value = _client.op(op, other, self) if reflected else _client.op(op, self, other)
        if isinstance(value, RemoteObject):
            raise TypeError(f"the package's {op} answered an object, not plain data")
        return value

    def __eq__(self, other):
        return self._compare("eq", other, False)

    def __ne__(self, other):
        return self._compare("ne", other, False)

    def __lt__(self, other):
        return self._compare("lt", other, False)

    def __le__(self, other):
        return self._compare("le", other, False)

    def __gt__(self, other):
        return self._compare("gt", other, False)

    def __ge__(self, other):
        return self._compare("ge", other, False)

    def __hash__(self):
        return _expect(_client.op("hash", self), int)

    def __bool__(self):
        return _expect(_client.op("bool", self), bool)

    def __len__(self):
        return _expect(_client.op("len", self), int)

    def __repr__(self):
        return _expect(_client.op("repr", self), str)

    def __str__(self):
        return _expect(_client.op("str", self), str)

    def __format__(self, spec):
        return _expect(_client.op("format", self, spec), str)

    def __int__(self):
        return _expect(_client.op("int", self), int)

    def __float__(self):
        return _expect(_client.op("float", self), float)

    def __index__(self):
        return _expect(_client.op("index", self), int)

    def __contains__(self, item):
        return bool(_client.op("contains", self, item))

    def __getitem__(self, key):
        return _client.op("getitem", self, key)

    def __setitem__(self, key, value):
        _client.op("setitem", self, key, value)

    def __delitem__(self, key):
        _client.op("delitem", self, key)

    def __iter__(self):
        it = _client.op("iter", self)
        while True:
            chunk, done = _client.op("next", it)
            yield from chunk
            if done:
                return

    def __neg__(self):
        return _client.op("neg", self)

    def __abs__(self):
        return _client.op("abs", self)


def _binary(name):
    def fwd(self, other):
        return _client.op(name, self, other)

    def rev(self, other):
        return _client.op(name, other, self)

    return fwd, rev


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and_", "or_", "xor", "lshift", "rshift",
              "matmul"):
    _dunder = _name.rstrip("_")
    _fwd, _rev = _binary(_name)
    setattr(RemoteObject, f"__{_dunder}__", _fwd)
    setattr(RemoteObject, f"__r{_dunder}__", _rev)


class _RemoteMeta(type):
    """The type of a name imported from the package: a class (so ``pytest.raises`` and ``except``
    accept it) whose calls, attributes and ``isinstance`` checks go to the package's process."""

    def __call__(cls, *args, **kwargs):
        if "_tg_module" not in cls.__dict__:  # a local class made for one of the package's exceptions
            return type.__call__(cls, *args, **kwargs)
        return _resolve(cls)(*args, **kwargs)

    def __getattr__(cls, name):
        if (name.startswith("__") and name.endswith("__") or _client is None or not _client.collected
                or "_tg_module" not in cls.__dict__):
            raise AttributeError(name)
        return getattr(_resolve(cls), name)

    def __instancecheck__(cls, obj):
        if isinstance(obj, RemoteObject) and "_tg_module" in cls.__dict__:
            return _expect(_client.op("isinstance", obj, cls), bool)
        return type.__instancecheck__(cls, obj)

    def __repr__(cls):
        return f"<{cls.__dict__.get('_tg_module')}.{cls.__name__} in the package's process>"

    def __bool__(cls):
        return True

    def __iter__(cls):
        return iter(_resolve(cls))

    def __len__(cls):
        return len(_resolve(cls))

    def __contains__(cls, item):
        return item in _resolve(cls)

    def __getitem__(cls, key):
        return _resolve(cls)[key]


def _resolve(cls):
    d = cls.__dict__
    if "_tg_module" not in d:
        raise TypeError(f"{cls.__name__} is a local class, not a name of the package")
    if "_tg_value" not in d:
        value = _client.request({"op": "getattr", "obj": {"M": d["_tg_module"]}, "name": cls.__name__})
        type.__setattr__(cls, "_tg_value", value)
    return cls.__dict__["_tg_value"]


def _resolve_ref(cls):
    value = _resolve(cls)
    if isinstance(value, RemoteObject):
        return {"R": object.__getattribute__(value, "_tg_id")}
    raise TypeError(f"{cls.__name__} is not an object of the package")


class _ProxyModule(type(sys)):
    """A module of the package, seen from the grader: its names are lazy stand-ins."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        lazy = _RemoteMeta(name, (Exception,), {"_tg_module": self.__name__, "__module__": self.__name__})
        _client.lazy.append(lazy)
        setattr(self, name, lazy)
        return lazy


class _ImportGuard:
    """First on ``sys.meta_path``: the package's modules are proxies; while collecting, only the
    test directories' modules and ``conftest.py`` files (the task's own) are imported here from
    the tree; after collection nothing from the tree is.

    A module of the tree reached under another name than its top-level one (a conftest that
    puts ``src/`` on ``sys.path``, then ``import pkg``) is the agent's code: never imported here.
    """

    def __init__(self, root, proxied, test_dirs=()):
        self.root = root
        self.proxied = proxied
        self.allowed = tuple(os.path.join(root, d, "") for d in test_dirs)
        self.modules = []

    def _trusted(self, path):
        path = os.path.abspath(path)
        inside = os.path.join(path, "")  # a directory (a package's location) as its contents' prefix
        return (not inside.startswith(self.root) or inside.startswith(self.allowed)
                or os.path.basename(path) == "conftest.py")

    def find_spec(self, name, path=None, target=None):
        import importlib.machinery
        import importlib.util

        if name.partition(".")[0] in self.proxied:
            return importlib.util.spec_from_loader(name, self, is_package=True)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = getattr(spec, "origin", None) or ""
        locations = list(getattr(spec, "submodule_search_locations", None) or [])
        where = [p for p in [origin, *locations] if p and os.path.isabs(p)]
        if _client is not None and _client.collected:
            if any(os.path.abspath(p).startswith(self.root) for p in where):
                raise ImportError(f"the grader does not import {name!r} from the repository after collection")
        elif not all(self._trusted(p) for p in where):
            raise ImportError(f"the grader imports nothing of the repository outside its test directories "
                              f"({name!r} from {where[0]}): the package is served from its own process by its "
                              "top-level name only")
        return None

    def create_module(self, spec):
        mod = _ProxyModule(spec.name)
        mod.__path__ = []
        mod.__spec__ = spec
        self.modules.append(spec.name)
        return mod

    def exec_module(self, module):
        pass


class _Reporter:
    """pytest's reports, recorded in this (trusted) process."""

    def __init__(self, guard):
        self.guard = guard
        self.records = []

    def _first(self):
        if self.guard in sys.meta_path:
            sys.meta_path.remove(self.guard)
        sys.meta_path.insert(0, self.guard)

    def pytest_collection(self, session):
        self._first()

    def pytest_collection_finish(self, session):
        # every test module is imported: only now may the package's code run (in its process)
        self._first()
        _client.collected = True
        names = sorted({m.partition(".")[0] for m in self.guard.modules} | set(self.guard.modules))
        if names:
            try:
                _client.request({"op": "import", "names": names, "obj": None})
            except CandidateGone:
                pass
            except Exception as exc:  # noqa: BLE001 - the package does not import: a collection error
                self.records.append({"k": "collect", "nodeid": "", "text": f"{type(exc).__name__}: {exc}"[-3000:]})
                _client.stop("the package could not be imported")

    def pytest_collectreport(self, report):
        if report.failed:
            self.records.append({"k": "collect", "nodeid": report.nodeid, "text": str(report.longreprtext)[-3000:]})

    def pytest_runtest_logreport(self, report):
        msg = ""
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            msg = getattr(crash, "message", None) or str(report.longreprtext)
        self.records.append({"k": "test", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                             "msg": msg[:2000]})

    def pytest_sessionfinish(self, session, exitstatus):
        self.records.append({"k": "done", "exit": int(exitstatus)})


def _tree_modules(root, test_dirs):
    """Top-level importable names of the tree outside the test directories."""
    out = set()
    for entry in os.listdir(root):
        full = os.path.join(root, entry)
        if entry in test_dirs or entry.startswith("."):
            continue
        if entry.endswith(".py") and os.path.isfile(full) and entry != "conftest.py":
            out.add(entry[:-3])
        elif os.path.isdir(full) and entry.isidentifier():
            out.add(entry)
    return out


def _scratch_dir():
    """A fresh temporary directory for both processes (``TMPDIR``; pytest's ``tmp_path`` lands in
    it): the one place outside ``/dev`` the package may write. Sticky and world-writable, so
    an untrusted uid writes its own files there and cannot touch the grader's."""
    import tempfile

    try:
        scratch = tempfile.mkdtemp(prefix="turngym-tests-")
        os.chmod(scratch, 0o1777)
    except OSError:
        return None
    os.environ["TMPDIR"] = scratch
    tempfile.tempdir = scratch
    return scratch


def _read_hidden(line):
    """The hidden cases of the stdin line after the nonce: ``{"package", "source", "cases"}``, or None."""
    if not line.strip():
        return None
    spec = json.loads(line.decode("utf-8", "surrogatepass"))
    if type(spec) is not dict or type(spec.get("source")) is not str or type(spec.get("cases")) is not list:
        raise ValueError("malformed hidden cases")
    return spec


def _run_hidden(spec, results):
    """Send the driver and its inputs to the package's process in one request and keep what it
    answers: one plain-JSON observation per case. A package that dies, stalls or answers
    anything else ends the cases with ``error`` set (the host scores them as disagreeing)."""
    try:
        obs = _client.request({"op": "hidden", "obj": None, "package": spec.get("package"), "source": spec["source"],
                               "cases": spec["cases"]})
        if type(obs) is not list or len(obs) != len(spec["cases"]):
            raise ValueError("not one observation per case")
        if len(json.dumps(obs)) > HIDDEN_TOTAL_MAX:
            raise ValueError("the observations are too large")
    except CandidateGone as exc:
        results["error"] = f"the package's process is gone ({exc})"
        return
    except Exception as exc:  # noqa: BLE001 - a malformed answer (or a handle): no observation counts
        results["error"] = f"the package's process answered the hidden cases with no observations ({type(exc).__name__})"
        return
    results["obs"] = obs
    results["done"] = True


def main():
    global _client
    cfg = json.loads(sys.argv[1])
    nstd = hardening.path_outside(os.getcwd(), cfg["site"])  # the stdlib, then the runner's site dirs
    try:
        import pytest
    except ImportError:
        sys.stderr.write(f"the SWE grader cannot import pytest from its site dirs {cfg['site']!r}\n")
        sys.stderr.flush()
        os._exit(3)
    hardening.set_dumpable(0)  # non-Linux: the sandbox's uid separation still applies
    run_uid = hardening.pop_untrusted_uid()
    root = os.getcwd()
    test_dirs = set(cfg.get("test_dirs") or ["tests"])
    proxied = _tree_modules(root, test_dirs)
    t0 = time.monotonic()
    deadline = t0 + float(cfg["deadline"])
    scratch = _scratch_dir()
    mine, theirs = socket.socketpair()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        mine.close()
        os.close(out_r)
        try:
            _candidate(theirs, out_w, root, nstd, run_uid, scratch)
        finally:
            os._exit(0)
    theirs.close()
    os.close(out_w)
    try:  # the candidate's first frame, sent before it runs any of the package's code
        hello = _recv(mine, time.monotonic() + 30)
        if type(hello.get("uid")) is not int or (run_uid is not None and hello["uid"] != run_uid):
            raise ValueError(f"unexpected first frame {hello!r}"[:200])
    except (OSError, EOFError, TimeoutError, ValueError) as exc:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        sys.stderr.write(f"the SWE grader's candidate process did not start ({exc!r})\n")
        sys.stderr.flush()
        os._exit(3)
    os.write(1, BANNER)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    nonce = sys.stdin.buffer.readline().strip().decode("ascii", "replace")
    try:
        hidden_spec = _read_hidden(sys.stdin.buffer.readline()) if cfg.get("hidden") else None
    except ValueError as exc:
        sys.stderr.write(f"the SWE grader got malformed hidden cases ({exc})\n")
        sys.stderr.flush()
        os._exit(3)
    hidden = {"obs": [], "done": False, "error": ""}
    visible = {}  # the tests' part of the verdict, taken when pytest is done (before the hidden cases)
    result_fd = os.dup(1)
    import tempfile

    console_file = tempfile.TemporaryFile()  # noqa: SIM115 - pytest's console, read back at the end
    console_fd = console_file.fileno()
    os.dup2(console_fd, 1)
    os.dup2(console_fd, 2)
    os.close(0)
    cand_out = bytearray()

    def drain():
        while True:
            try:
                chunk = os.read(out_r, 65536)
            except OSError:
                return
            if not chunk:
                return
            cand_out.extend(chunk)
            if len(cand_out) > 64 << 10:
                del cand_out[: len(cand_out) - (64 << 10)]

    threading.Thread(target=drain, daemon=True).start()
    test_root = os.path.join(root, "")
    _client = _Client(mine, pid, deadline, test_root)
    guard = _ImportGuard(test_root, proxied, sorted(test_dirs))
    sys.meta_path.insert(0, guard)
    reporter = _Reporter(guard)
    lock = threading.Lock()
    reported = []

    def tests_part(timed_out):
        framing.flush_streams()
        try:
            size = os.lseek(console_fd, 0, os.SEEK_END)
            os.lseek(console_fd, max(0, size - (64 << 10)), os.SEEK_SET)
            console = os.read(console_fd, 64 << 10)
        except OSError:
            console = b""
        text = console.decode("utf-8", "replace") + cand_out.decode("utf-8", "replace")
        return {"records": list(reporter.records), "timed_out": timed_out or _client.timed_out, "console": text,
                "fatal": _client.fatal}

    def report(timed_out):
        with lock:
            if reported:
                return
            reported.append(True)
            _client.stop()
            part = visible or tests_part(timed_out)
            out = {**part, "forged": 0, "status": None}
            if hidden_spec is not None:
                error = hidden["error"] or ("" if hidden["done"] else "the hidden cases ran past the deadline")
                out["hidden"] = {"obs": list(hidden["obs"]), "done": hidden["done"] and not error, "error": error}
            framing.write_all(result_fd, (nonce + " " + json.dumps(out) + "\n").encode())
            if scratch:
                import shutil

                shutil.rmtree(scratch, ignore_errors=True)  # a plain subprocess's /tmp is the host's

    watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), lambda: (report(True), os._exit(0)))
    watchdog.daemon = True
    watchdog.start()
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ.pop("PYTEST_ADDOPTS", None)
    try:
        pytest.main(list(cfg["args"]), plugins=[reporter])
    except BaseException as exc:  # noqa: BLE001 - report, never hang
        reporter.records.append({"k": "crash", "text": repr(exc)[:500]})
    if hidden_spec is not None:
        with lock:
            if not reported:
                visible.update(tests_part(False))
        _run_hidden(hidden_spec, hidden)
    report(False)
    os._exit(0)


if __name__ == "__main__":
    main()
