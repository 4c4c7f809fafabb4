"""The trusted grader that runs *inside* the sandbox (stdlib only, no turngym imports).

Why it is shaped like this: the sandbox keeps the solution away from the host, but the
grader has to run somewhere the solution cannot reach, or the solution can simply report
that every test passed (walk the stack to the code that writes results, patch ``json``,
return an object whose ``__eq__`` is always true). So the solution never runs in this
process:

* This process reads its input (a random nonce and the problems, tests included) from
  :data:`wire.PAYLOAD_FILE` and deletes the file, makes itself non-dumpable (same-uid
  processes cannot ptrace it or open its ``/proc/PID/mem`` or ``fd``), keeps its stdout to
  itself and reports ``start``.
* It starts the zygote (:mod:`~turngym.envs.code.candidate`) *before* it reads its input
  (a fork then; a fresh interpreter if it has to be replaced later), so the zygote never
  holds the tests or the nonce, and gets one forked process per solution from it (again
  after a timeout or a crash) that owns nothing but a request socket and an output pipe.
* The tests run *here*, with ``candidate`` (and every top-level name of the solution the
  tests use) bound to a proxy that calls into the solution's process. Arguments and return
  values cross as plain data only (:mod:`~turngym.envs.code.wire`), so test code compares
  real ``int``/``list``/... values, never an object the solution made. Value tests
  ``(name, call)`` send back the value; the host compares it with the expected value, which
  never enters the sandbox.
* Deadlines are enforced here (``select`` on the socket, then ``SIGKILL`` to the solution's
  process group): a solution that ignores signals cannot stretch a test.

Results go to stdout as JSON lines prefixed by the nonce. Where the sandbox gives this
process a second uid (``TURNGYM_UNTRUSTED_UID``, with the capabilities to switch to it: the
bubblewrap sandbox as root), the zygote drops to that uid and every capability before any
solution code exists, so the solution cannot signal, stop, renice or read this process at all
(``EPERM``). With one uid per sandbox, bubblewrap's trusted launch makes this process its
PID namespace's init instead (pid 1), which the solution cannot stop or kill: the kernel drops
signals to an init from inside its namespace unless the init handles them. Where neither
holds (Docker), a solution that kills this process only ends the run early and one that stops
it stalls the run to its wall budget: the lines written so far stand and the unreached tests
fail; it cannot write a line of its own, having neither the stream nor the nonce.

The zygote, the solution processes and the request channel (with its deadlines) are
:mod:`~turngym.envs.code.processes`, shipped ahead of this source as ``_turngym_code_processes``
(grader code only: :func:`turngym.envs.code.runner._harness_source`); what is here runs the tests
and judges them.
"""

import builtins
import functools
import importlib
import json
import linecache
import marshal
import os
import signal
import sys
import time
import traceback

try:
    import _turngym_code_processes as processes
    import _turngym_inside_codec as codec
    import _turngym_inside_hardening as hardening
    import _turngym_wire as wire
except ImportError:  # imported on the host (tests, linters); in the sandbox the prelude provides them
    from turngym.envs.code import processes, wire
    from turngym.sandbox.inside import codec, hardening

__all__ = ["main", "same_value"]

same_value = codec.same_value
_VALUE_CHARS = 100_000
_ALARM_SLACK_S = 0.1


#: Stdlib modules a test may use under the name the solution imported them as (MBPP's tests
#: call ``math.isclose`` relying on the solution's ``import math``): the grader's own copy.
_SHARED_MODULES = frozenset({"math", "cmath", "re", "string", "collections", "itertools", "functools", "heapq",
                             "bisect", "operator", "statistics", "fractions", "decimal"})


class CandidateError(Exception):
    """The solution raised an exception that is not a builtin one (its type name is kept)."""


#: Whether :meth:`_Grader._timed`'s timer is armed: a SIGALRM is ours only then.
_alarm_armed = False


def _on_alarm(signum, frame):
    # Only our own timer, run out, ends a test: with one uid the solution may send this process
    # a SIGALRM (as a PID namespace's init it gets those, having a handler), which would end
    # any test, or the grader itself between tests, at the moment the solution chose.
    if _alarm_armed and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0:
        raise processes.Timeout()


class _Sink:
    """Where the (trusted) test code's prints go: stdout is the result channel."""

    encoding = "utf-8"

    def write(self, s):
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return False


def _short(value, n=200):
    r = repr(value)
    return r if len(r) <= n else r[: n - 3] + "..."


def _check(got, expected):
    if not codec.same_value(got, expected):
        raise AssertionError(f"expected {_short(expected)}, got {_short(got)}")


def _format_error(exc, limit):
    limit = max(limit, 20)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<test ")]
    lines = traceback.format_list(frames[-4:]) + traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).rstrip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _referenced_names(codes):
    """Top-level names test code may look up in the solution's module (builtins aside): the
    global names of the compiled tests and of every function they define."""
    names, stack = set(), []
    for code, mode in codes:
        try:
            stack.append(compile(code, "<names>", mode))
        except (SyntaxError, ValueError):
            continue
    while stack:
        co = stack.pop()
        names.update(co.co_names)
        stack.extend(c for c in co.co_consts if isinstance(c, _CodeType))
    return sorted(n for n in names if not hasattr(builtins, n))


_CodeType = type(compile("", "<names>", "exec"))


class _Remote:
    """A function of the solution, called in the solution's process."""

    def __init__(self, grader, name):
        self._grader, self.__name__ = grader, name

    def __call__(self, *args, **kwargs):
        return self._grader.call(self.__name__, args, kwargs)

    def __repr__(self):
        return f"<the solution's {self.__name__}>"


class _Grader(processes.SolutionProcesses):
    """The test-running half of the grader: loads each solution in a fresh process, runs the
    tests here against proxies of its functions, keeps each test's deadline."""

    def __init__(self, zygote_argv, per_test_s, error_chars, details=True, run_uid=None):
        super().__init__(zygote_argv, run_uid)
        self.per_test_s, self.error_chars, self.details = per_test_s, error_chars, details
        self.deadline = 0.0
        self.fault = None
        self.calls = 0
        self.load_output = b""

    def load(self, p, names, deadline):
        """Start a process for ``p``'s solution and load it: ``(names, error)``."""
        self.drop_child()
        self.sweep()
        self.child = self._spawn()
        self.load_output = b""
        req = {"op": "load", "source": p["solution"], "entry": p["entry_point"], "names": names,
               "error_chars": self.error_chars}
        try:
            reply = self._exchange(req, deadline)
            self.load_output = bytes(self.child.output)
        except processes.Timeout:
            self.drop_child()
            return None, f"TimeoutError: loading the solution took more than {self.per_test_s * 2:g} s"
        except processes.SolutionFault as exc:
            self.drop_child()
            return None, f"the solution's process died while loading: {exc}"
        if reply.get("ok") is not True:
            self.drop_child()
            return None, str(reply.get("error") or "the solution did not load")[: self.error_chars]
        got = reply.get("names")
        return (got if type(got) is dict else {}), None

    def call(self, name, args, kwargs):
        if self.fault is not None or self.child is None:
            raise processes.SolutionFault(self.fault or "the solution's process is gone")
        msg = {"op": "call", "id": self.calls, "name": name, "args": list(args), "kwargs": dict(kwargs)}
        try:
            codec.encode_obj(msg["args"])  # plain data only, in the solution's direction too
            codec.encode_obj(msg["kwargs"])
            if len(marshal.dumps(msg)) > wire.MAX_FRAME:
                raise ValueError(f"the arguments take more than {wire.MAX_FRAME} bytes")
        except (TypeError, ValueError) as exc:
            raise TypeError(f"the test passed {name}() an argument that cannot be sent to the solution: {exc}") from None
        self.calls += 1
        try:
            reply = self._exchange(msg, self.deadline)
            if reply.get("id") != msg["id"]:
                raise processes.SolutionFault("the solution's process broke the protocol")
            if reply.get("ok") is True:
                try:
                    return codec.decode_obj(reply.get("value"))
                except (ValueError, RecursionError) as exc:
                    raise processes.SolutionFault(f"{name}() returned a value that is not plain data ({exc})") from None
        except processes.Timeout:
            self.fault = f"TimeoutError: the test took more than {self.per_test_s:g} s"
            self.drop_child()
            raise
        except processes.SolutionFault as exc:
            self.fault = str(exc)
            self.drop_child()
            raise
        except BaseException:  # an alarm or anything else mid-request: the channel is out of step
            self.drop_child()
            raise
        if reply.get("kind") != "raise":  # answered in step (a non-plain value, SystemExit...): the process stays
            self.fault = str(reply.get("message") or "the call failed")[:500]
            raise processes.SolutionFault(self.fault)
        raise _candidate_exception(reply)

    # -- problems --------------------------------------------------------------------------
    def run_problem(self, p, emit):
        per_test_s = self.per_test_s
        tests = p["tests"]
        codes = [(p.get("setup") or "", "exec")] + [(t[1], "eval" if len(t) > 2 else "exec") for t in tests]
        names = _referenced_names(codes)
        remote, error = self.load(p, names, time.monotonic() + per_test_s * 2)
        emit({"event": "load", "id": p["id"], "ok": error is None, "error": error,
              "output": self.load_output.decode("utf-8", "replace")})
        if error is not None:
            return
        base = {"__builtins__": builtins, "__name__": "__grader__", "_check": _check}
        wanted = set(names)
        for name, kind in remote.items():
            # Only the names asked for (never a builtin such as ``abs`` the solution could
            # shadow to pass an assertion), never in place of the grader's own (``_check``).
            if name not in wanted or name in base or name == "candidate" or type(kind) is not list or not kind:
                continue
            if kind[0] == "call":
                base[name] = _Remote(self, name)
            elif kind[0] == "value" and len(kind) == 2:
                try:
                    base[name] = codec.decode_obj(kind[1])
                except (ValueError, RecursionError):
                    pass
            elif kind[0] == "module" and len(kind) == 2 and kind[1] in _SHARED_MODULES and name == kind[1]:
                base[name] = importlib.import_module(kind[1])  # MBPP tests use the solution's ``math``
        entry = _Remote(self, p["entry_point"])
        base["candidate"] = base[p["entry_point"]] = entry
        setup_error = None
        if p.get("setup"):
            setup_error = self._timed(lambda: exec(compile(p["setup"], "<test setup>", "exec"), base), per_test_s * 2)
        base["candidate"] = base[p["entry_point"]] = entry
        i = 0
        while i < len(tests):
            name, code, by_value = tests[i][0], tests[i][1], len(tests[i]) > 2
            err, value = setup_error, None
            if err is None and self.child is None:  # ended by an earlier test: a fresh one
                _, load_error = self.load(p, names, time.monotonic() + per_test_s * 2)
                if load_error is not None:
                    err = f"the solution's process ended in an earlier test and could not be reloaded: {load_error}"
            if err is None:
                plan = self._plan(tests, i, base)
                if len(plan) > 1:
                    for test, (err, value) in zip(tests[i:], self._run_plan(plan)):
                        emit({"event": "test", "id": p["id"], "name": test[0], "passed": False, "error": err, "value": value})
                        i += 1
                    continue
            if err is None:
                fname = f"<test {name}>"
                linecache.cache[fname] = (len(code), None, code.splitlines(True), fname)
                box = []
                if by_value:  # the host compares the value: the expected one never gets here
                    err = self._timed(functools.partial(_evaluate_into, box, code, fname, dict(base)), per_test_s)
                    if err is None:
                        try:
                            value = codec.encode(box[0], _VALUE_CHARS)
                        except (TypeError, ValueError, RecursionError) as exc:
                            err = f"{type(exc).__name__}: {exc}"[: self.error_chars]
                else:
                    err = self._timed(functools.partial(exec, compile(code, fname, "exec"), dict(base)), per_test_s)
            emit({"event": "test", "id": p["id"], "name": name, "passed": err is None and not by_value,
                  "error": err, "value": value})
            i += 1
        self.drop_child()

    def _plan(self, tests, start, base):
        """The value tests from ``start`` on that are plain calls of the solution's functions
        (the host says which, and with what arguments): they can go in one request."""
        plan = []
        for test in tests[start:]:
            spec = test[3] if len(test) > 3 else None
            remote = base.get(spec.get("fn")) if type(spec) is dict else None
            if not isinstance(remote, _Remote):
                break
            try:
                args, kwargs = codec.decode_obj(spec["args"]), codec.decode_obj(spec["kwargs"])
            except (KeyError, ValueError):
                break
            if type(args) is not list or type(kwargs) is not dict:
                break
            plan.append((test[0], test[1], remote.__name__, args, kwargs))
        return plan

    def _run_plan(self, plan):
        """Send the planned calls at once; the solution answers each as it finishes, and each
        answer has its own deadline. Yields ``(error, value)`` per test until the solution's
        process fails (the caller goes on from the first test not yielded)."""
        first = self.calls
        self.calls += len(plan)
        msg = {"op": "batch", "calls": [{"id": first + k, "name": fn, "args": args, "kwargs": kwargs}
                                        for k, (_n, _c, fn, args, kwargs) in enumerate(plan)]}
        if len(marshal.dumps(msg)) > wire.MAX_FRAME:
            return
        for k, (name, code, fn, _args, _kwargs) in enumerate(plan):
            try:
                reply = self._exchange(msg if k == 0 else None, time.monotonic() + self.per_test_s)
                if reply.get("id") != first + k:
                    raise processes.SolutionFault("the solution's process broke the protocol")
                if reply.get("ok") is True:
                    try:
                        got = codec.decode_obj(reply.get("value"))
                    except (ValueError, RecursionError) as exc:
                        raise processes.SolutionFault(f"{fn}() returned a value that is not plain data ({exc})") from None
                    try:
                        yield None, codec.encode(got, _VALUE_CHARS)
                    except (TypeError, ValueError, RecursionError) as exc:
                        yield f"{type(exc).__name__}: {exc}"[: self.error_chars], None
                    continue
                if reply.get("kind") == "raise":
                    yield self._call_error(name, code, _candidate_exception(reply)), None
                else:
                    yield self._call_error(name, code, processes.SolutionFault(str(reply.get("message") or "the call failed")[:500])), None
            except processes.Timeout:
                self.drop_child()
                yield f"TimeoutError: the test took more than {self.per_test_s:g} s", None
                return
            except processes.SolutionFault as exc:
                self.drop_child()
                yield self._call_error(name, code, exc), None
                return

    def _call_error(self, name, code, exc):
        """What a failing planned call reports: as if the test had raised ``exc`` itself."""
        if not self.details and not isinstance(exc, processes.SolutionFault):
            return f"{type(exc).__name__} (details hidden)"
        head = f'  File "<test {name}>", line 1, in <module>\n    {code}\n' if self.details else ""
        text = (head + "".join(traceback.format_exception_only(type(exc), exc))).rstrip()
        limit = max(self.error_chars, 20)
        return text if len(text) <= limit else "..." + text[-limit:]

    def _timed(self, fn, seconds):
        """Run trusted test code with a deadline; its error text, or None if it passed."""
        self.fault = None
        global _alarm_armed
        self.deadline = time.monotonic() + seconds
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds + _ALARM_SLACK_S)
            _alarm_armed = True  # after the timer: a SIGALRM in between is not ours (it is due in seconds)
            fn()
            err = None
        except processes.Timeout:
            err = f"TimeoutError: the test took more than {seconds:g} s"
        except processes.SolutionFault as exc:
            err = _format_error(exc, self.error_chars) if self.details else f"SolutionFault: {exc}"[: self.error_chars]
        except BaseException as exc:  # noqa: BLE001 - any failure of a test is that test's failure
            # Without details, not a word of the test: its text passes through processes
            # (the warm worker) that later runs of the agent's code are forked from.
            err = _format_error(exc, self.error_chars) if self.details else f"{type(exc).__name__} (details hidden)"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _alarm_armed = False
        if err is None and self.fault is not None:  # the test code swallowed the solution's fault
            err = self.fault
        return err


def _evaluate_into(box, code, fname, ns):
    box.append(eval(compile(code, fname, "eval"), ns))


def _candidate_exception(reply):
    """The exception the solution raised, rebuilt here (a builtin type by name, else
    :class:`CandidateError`), with the solution's own traceback as a note."""
    type_name = str(reply.get("type") or "Exception")[:100]
    message = str(reply.get("message") or "")[:1000]
    cls = getattr(builtins, type_name, None)
    exc = None
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            exc = cls(message)
        except Exception:  # noqa: BLE001 - exception types that need other arguments
            exc = None
    if exc is None:
        exc = CandidateError(f"{type_name}: {message}")
    tb = str(reply.get("traceback") or "")[:2000]
    if tb:
        exc.add_note("raised in the solution:\n" + tb)
    return exc


def _trusted_imports():
    """No import from here on can load a file the solution wrote: the working dir (where
    ``-c`` puts ``''`` on ``sys.path``) leaves the path, and what the grader itself imports
    lazily is loaded now, before any solution code runs."""
    hardening.path_outside(os.getcwd())
    for name in ("binascii", "_json"):
        importlib.import_module(name)


def main(candidate_source):
    run_uid = hardening.pop_untrusted_uid()
    grader = _Grader(processes.zygote_argv(candidate_source), 2.0, 600, run_uid=run_uid)
    # Non-dumpable, before the fork (the zygote inherits it): the solution cannot read the tests
    # or the nonce out of this process (ptrace, /proc/PID/mem), nor write to its stdout.
    hardening.set_dumpable(0)
    grader.spawn_zygote()  # a plain fork: this process does not hold its input yet
    _trusted_imports()
    grader.input_read = True
    try:
        with open(wire.PAYLOAD_FILE, "rb") as fh:
            raw = fh.read()
        os.unlink(wire.PAYLOAD_FILE)
    except OSError as exc:
        print(f"grader: cannot read its input {wire.PAYLOAD_FILE}: {exc}", file=sys.stderr)
        sys.exit(3)
    payload = json.loads(raw)
    nonce = payload.pop("nonce")
    raw = None
    out = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    sys.stdout = sys.stderr = _Sink()

    def emit(obj):
        data = (nonce + json.dumps(obj) + "\n").encode("utf-8")
        while data:
            data = data[os.write(out, data):]

    signal.signal(signal.SIGALRM, _on_alarm)
    for sig in processes.IGNORED_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # only SIGKILL/SIGSTOP can stop the grader now
    sys.setrecursionlimit(3000)
    emit({"event": "start"})
    grader.per_test_s, grader.error_chars = float(payload.get("per_test_s", 2.0)), int(payload.get("error_chars", 600))
    grader.details = bool(payload.get("details", True))
    try:
        grader.start_zygote()
    except processes.NoStart as exc:  # before any solution code ran: the infrastructure's fault
        emit({"event": "infra", "error": str(exc)})
        return
    for p in payload["problems"]:
        grader.run_problem(p, emit)
    grader.stop_zygote()
    emit({"event": "done"})
