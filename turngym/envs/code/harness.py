"""The test harness that runs *inside* the sandbox (stdlib only, no turngym imports).

Protocol: stdin carries one line with a random nonce, then a JSON payload
``{"problems": [{"id", "solution", "entry_point", "setup", "tests": [[name, code], ...]}],
"per_test_s": float, "error_chars": int}``. Results go to stdout as JSON lines prefixed by
the nonce, so nothing the solution prints can pass for a result. The solution's own
``print`` output is captured (capped) instead of reaching stdout.

Each solution is executed in a fresh namespace; each test in a copy of it, with ``candidate``
bound to the entry point and ``_check`` (strict, type-aware equality) available. A per-test
``SIGALRM`` turns an endless test into a failure without losing the tests after it.
:func:`runner.evaluate_many` sends ``source + "\\nmain()"`` with ``python -c``.
"""

import builtins
import functools
import json
import linecache
import os
import signal
import sys
import traceback


class _Timeout(BaseException):
    """Raised by the per-test alarm (BaseException: ``except Exception`` can't swallow it)."""


def _on_alarm(signum, frame):
    raise _Timeout()


class _Sink:
    """A capped text sink standing in for sys.stdout / sys.stderr while solutions run."""

    encoding = "utf-8"

    def __init__(self, cap):
        self.cap, self.n, self.parts = cap, 0, []

    def write(self, s):
        s = str(s)
        if self.n < self.cap:
            self.parts.append(s[: self.cap - self.n])
        self.n += len(s)
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return False

    def getvalue(self):
        return "".join(self.parts)


def _short(value, n=200):
    r = repr(value)
    return r if len(r) <= n else r[: n - 3] + "..."


def same_value(a, b):
    """Equality that also requires equal types, recursively (bool is not int, 1 is not 1.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(b)) or (a != a and b != b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (set, frozenset)):
        return a == b and all(type(x) is type(y) for x, y in zip(sorted(a, key=repr), sorted(b, key=repr)))
    return bool(a == b)


def _literal(value, limit):
    """``repr`` of a plain value (None, bool, int, float, str, and lists/tuples/dicts/sets of
    them), or a type error: only plain data may come back to the host."""
    def plain(v, depth):
        if depth > 50:
            return False
        if v is None or type(v) in (bool, int, float, str):
            return True
        if type(v) in (list, tuple, set, frozenset):
            return all(plain(x, depth + 1) for x in v)
        if type(v) is dict:
            return all(plain(k, depth + 1) and plain(x, depth + 1) for k, x in v.items())
        return False

    if not plain(value, 0):
        raise TypeError(f"the function returned a {type(value).__name__}, not plain data: {_short(value)}")
    text = repr(value)
    if len(text) > 100_000:
        raise ValueError(f"the returned value is too large ({len(text)} characters as text)")
    return text


def _check(got, expected):
    if not same_value(got, expected):
        raise AssertionError(f"expected {_short(expected)}, got {_short(got)}")


def _format_error(exc, limit):
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__)
        if f.filename == "solution.py" or f.filename.startswith("<test ")
    ]
    lines = traceback.format_list(frames[-4:]) + traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).rstrip()
    return text if len(text) <= limit else "..." + text[-limit:]


def _timed(seconds, fn):
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _run_problem(p, emit, per_test_s, error_chars):
    src = p["solution"]
    entry = p["entry_point"]
    linecache.cache["solution.py"] = (len(src), None, src.splitlines(True), "solution.py")
    sink = _Sink(2000)
    sys.stdout = sys.stderr = sink
    ns = {"__name__": "solution", "__file__": "solution.py", "__builtins__": builtins}
    error = None
    try:
        _timed(per_test_s * 2, lambda: exec(compile(src, "solution.py", "exec"), ns))
        if not callable(ns.get(entry)):
            error = f"NameError: the solution does not define a function {entry}()"
    except _Timeout:
        error = f"TimeoutError: loading the solution took more than {per_test_s * 2:g} s"
    except BaseException as exc:  # SystemExit too: a solution may not end the harness
        error = _format_error(exc, error_chars)
    emit({"event": "load", "id": p["id"], "ok": error is None, "error": error, "output": sink.getvalue()})
    if error is not None:
        return
    base = dict(ns)
    base["candidate"], base["_check"] = ns[entry], _check
    setup_error = None
    if p.get("setup"):
        try:
            _timed(per_test_s * 2, lambda: exec(compile(p["setup"], "<test setup>", "exec"), base))
        except BaseException as exc:
            setup_error = _format_error(exc, error_chars)
    for test in p["tests"]:
        name, code, by_value = test[0], test[1], len(test) > 2
        fname = f"<test {name}>"
        linecache.cache[fname] = (len(code), None, code.splitlines(True), fname)
        err, value = setup_error, None
        if err is None:
            try:
                if by_value:  # the host compares the value: the expected one never gets here
                    got = _timed(per_test_s, functools.partial(eval, compile(code, fname, "eval"), dict(base)))
                    value = _timed(per_test_s, functools.partial(_literal, got, error_chars))
                else:
                    _timed(per_test_s, functools.partial(exec, compile(code, fname, "exec"), dict(base)))
            except _Timeout:
                err = f"TimeoutError: the test took more than {per_test_s:g} s"
            except BaseException as exc:
                err = _format_error(exc, error_chars)
        emit({"event": "test", "id": p["id"], "name": name, "passed": err is None and not by_value, "error": err, "value": value})


def main():
    nonce = sys.stdin.readline().strip()
    payload = json.loads(sys.stdin.read())
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")

    def emit(obj):
        out.write(nonce + json.dumps(obj) + "\n")
        out.flush()

    signal.signal(signal.SIGALRM, _on_alarm)
    sys.setrecursionlimit(3000)
    emit({"event": "start"})
    for p in payload["problems"]:
        _run_problem(p, emit, float(payload.get("per_test_s", 2.0)), int(payload.get("error_chars", 600)))
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    emit({"event": "done"})
