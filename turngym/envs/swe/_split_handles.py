"""The grader's side of the split SWE grader: stand-ins for the package, and the client they call.

In :mod:`turngym.envs.swe._split_boot` the tests import the package's modules as proxy modules
(:func:`proxy_module`) whose names are lazy stand-ins (:class:`_RemoteMeta` classes); a call,
attribute read or operator on one is a request through the client (:func:`connect`) to the
candidate's process (:mod:`turngym.envs.swe._split_candidate`), and what comes back is rebuilt here as plain
data of exactly the builtin types, a :class:`RemoteObject` handle, or a local exception class.
Everything the package answers is untrusted input: ``len``/``bool``/``repr`` must answer exactly
``int``/``bool``/``str``, comparisons plain data, and a handle equals plain data only through the
plain value sent with it, compared here.

Why a module of its own: this is the whole surface the package's answers meet in the grader,
apart from pytest's driving of it in the program. The state it holds (:data:`_client`) exists
only in the grader: :func:`connect` makes it after the fork. Stdlib only; it travels into the
sandbox as text, inlined ahead of the program as ``_turngym_split_handles`` (see
:func:`turngym.envs.swe.testing._boot_source`).

Its classes say ``__module__ = "__main__"``: a name that shows in pytest's reports (``CandidateGone:
...``) or in a test's assertion reads as it did when the grader was one ``-c`` program.
"""

import builtins
import os
import signal
import sys
import time

try:
    import _turngym_inside_codec as codec
    import _turngym_split_wire as wire
except ImportError:  # imported on the host (tests, linters); in the sandbox the prelude provides them
    from turngym.envs.swe import _split_wire as wire
    from turngym.sandbox.inside import codec

__all__ = ["CandidateGone", "RemoteError", "RemoteObject", "connect", "proxy_module"]


class CandidateGone(BaseException):
    """The package's process died, timed out or broke the protocol (a BaseException: test code's
    ``except Exception`` cannot swallow it)."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)


class RemoteError(Exception):
    """An exception the package raised whose classes are neither builtins nor named by the tests."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)


class _Client:
    """The grader's end of the socket; every value from it is rebuilt as plain data or a handle."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)

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
            wire.send(self.sock, msg)
            while True:
                reply = wire.recv(self.sock, self.deadline)
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
        wire.send(self.sock, reply)

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
#: The grader's one client (set by :func:`connect` after the fork: the candidate never has one).
_client = None


def connect(sock, pid, deadline, test_root):
    """The grader's client for the candidate ``pid`` on ``sock``; every stand-in talks through it."""
    global _client
    _client = _Client(sock, pid, deadline, test_root)
    return _client


def _expect(value, *types):
    if type(value) not in types:
        raise TypeError(f"the package answered a {type(value).__name__} where Python requires {types[0].__name__}")
    return value


class RemoteObject:
    """A handle to an object of the package: every operation is a request to its process."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)

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

    def __format__(self, spec):
        return _expect(_client.op("format", self, spec), str)

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


def _comparison(name):
    def compare(self, other):
        return self._compare(name, other, False)

    return compare


def _typed(name, kind):
    """``op(self)`` whose answer Python requires to be exactly ``kind`` (``hash`` an int, ...)."""

    def unary(self):
        return _expect(_client.op(name, self), kind)

    return unary


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(RemoteObject, f"__{_name}__", _comparison(_name))
for _name, _kind in (("hash", int), ("bool", bool), ("len", int), ("repr", str), ("str", str), ("int", int),
                     ("float", float), ("index", int)):
    setattr(RemoteObject, f"__{_name}__", _typed(_name, _kind))


class _RemoteMeta(type):
    """The type of a name imported from the package: a class (so ``pytest.raises`` and ``except``
    accept it) whose calls, attributes and ``isinstance`` checks go to the package's process."""

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)

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

    __module__ = "__main__"  # named as in the one-file grader (see the module's docstring)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        lazy = _RemoteMeta(name, (Exception,), {"_tg_module": self.__name__, "__module__": self.__name__})
        _client.lazy.append(lazy)
        setattr(self, name, lazy)
        return lazy


def proxy_module(spec):
    """The module the grader imports for ``spec``, one of the package's: every name a lazy stand-in."""
    mod = _ProxyModule(spec.name)
    mod.__path__ = []
    mod.__spec__ = spec
    return mod
