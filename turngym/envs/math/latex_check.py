"""LaTeX answer checks that cannot hang the env: a pre-screen, then math-verify in a killable worker.

``math-verify`` hands an answer to sympy, and sympy evaluates what it is given: ``10^{10^{10}}``
is an exact integer with ten billion digits, ``(10^{10})!`` and ``\\binom{10^6}{5 \\cdot 10^5}``
never finish. That work is pure C under the GIL, so neither a thread time-out nor math-verify's
own time-outs (``SIGALRM``, which only works on the main thread and only between bytecodes) can
stop it, and an env stepped inside a server would freeze every session with it. Two layers:

* :func:`screen` refuses, from the text alone (its first :data:`MAX_ANSWER_CHARS` characters), the shapes that make sympy
  build huge exact numbers — power towers, large exponents, large operands under a factorial,
  binomial, sum or product. A refused answer is simply not equal to the gold answer; no
  sensible final answer is written that way.
* Everything else runs in a separate interpreter (:class:`VerifyWorker`) behind a pipe, with a
  hard deadline: past it the worker is killed (and a fresh one started on the next check), so
  the worst an answer can cost is the deadline, spent waiting on a pipe with the GIL released.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from turngym.core.errors import InfraError

__all__ = ["screen", "Verdict", "VerifyWorker", "check_latex", "CHECK_TIMEOUT_S", "MAX_EXPONENT", "MAX_OPERAND"]

#: Wall-clock bound on one math-verify check, worker start-up excluded (start-up has its own).
CHECK_TIMEOUT_S = 5.0
#: The worker imports sympy and math-verify once; on a busy machine that takes seconds.
STARTUP_TIMEOUT_S = 60.0
#: Largest product of the literal exponents in one answer (``x^2 + y^3`` uses 6).
MAX_EXPONENT = 1000
#: Largest literal allowed in an answer that has a factorial, binomial, sum, product or limit.
MAX_OPERAND = 1000
#: Address space a check may add to the worker: one that tries to build a giant number fails fast.
WORKER_MEMORY_BYTES = 2 << 30
#: How many checks may run at once (one worker each); more wait for a free worker.
MAX_WORKERS = 4
#: Only this much of an answer is checked: a final answer is short, and the bound keeps sympy's
#: parse of it bounded too.
MAX_ANSWER_CHARS = 500

_HEAVY_COMMANDS = re.compile(r"\\(?:d|t)?binom|\\choose|\\prod|\\sum|\\int|\\lim|\\Gamma|\\operatorname")
_DIGITS = re.compile(r"\d+")
#: Scientific notation's exponent (``1.5e300``): a possessive digit run, linear on any text.
_E_EXPONENT = re.compile(r"\d[eE][+-]?(\d++)")


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the answer equals the gold one, and why it was not checked (None if it was)."""

    equal: bool
    unchecked_reason: str | None = None


def _group_end(text: str, i: int, open_ch: str, close_ch: str) -> int:
    """Index just past the group opened at ``text[i] == open_ch`` (end of text if unbalanced)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def _operand_end(text: str, i: int) -> int:
    """Index just past the exponent operand that starts at ``i`` (spaces before it skipped)."""
    n = len(text)
    while i < n and text[i].isspace():
        i += 1
    if i >= n:
        return n
    ch = text[i]
    if ch == "{":
        return _group_end(text, i, "{", "}")
    if ch == "(":
        return _group_end(text, i, "(", ")")
    if ch in "+-":  # a signed operand: the sign and what follows
        return _operand_end(text, i + 1)
    if ch == "\\":  # a command and its braced arguments: \frac{1}{2}
        j = i + 1
        while j < n and text[j].isalpha():
            j += 1
        while j < n and text[j] == "{":
            j = _group_end(text, j, "{", "}")
        return j
    if ch.isdigit() or ch == ".":
        j = i
        while j < n and (text[j].isdigit() or text[j] == "."):
            j += 1
        return j
    return i + 1  # a single symbol


def _power_operators(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every ``^`` and ``**`` operator in ``text``."""
    ops: list[tuple[int, int]] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == "^":
            ops.append((i, i + 1))
            i += 1
        elif text.startswith("**", i):
            ops.append((i, i + 2))
            i += 2
        else:
            i += 1
    return ops


def _literal_product(text: str) -> int:
    """Product of the integer literals in ``text`` (each at least 1), capped just above the limit."""
    product = 1
    for d in _DIGITS.findall(text):
        product *= max(1, int(d[:6]) if len(d) <= 6 else 10**6)
        if product > MAX_EXPONENT:
            return MAX_EXPONENT + 1
    return product


def screen(answer: str) -> str | None:
    """Why ``answer`` is refused before any evaluation, or None if it may be checked.

    >>> screen(r"\\frac{3}{4}") is None, screen("x^2 + 2x + 1") is None, screen(r"6.02 \\times 10^{23}") is None
    (True, True, True)
    >>> screen("10**10**10"), screen(r"10^{10^{10}}"), screen("9^{99999}")
    ('power tower', 'power tower', 'exponent too large')
    >>> screen("(10^{10})!"), screen(r"\\binom{1000000}{500000}")
    ('factorial with a large operand', 'large operand under \\\\binom')
    >>> screen("1e" + "9" * 400), screen("6.02e23") is None
    ('exponent too large', True)
    """
    text = answer[:MAX_ANSWER_CHARS]
    if any(len(e) > 4 or int(e) > MAX_EXPONENT for e in _E_EXPONENT.findall(text)):  # sympy expands 1e999…9 for seconds
        return "exponent too large"
    budget = 1
    for start, end in _power_operators(text):
        stop = _operand_end(text, end)
        operand = text[end:stop]
        if "^" in operand or "**" in operand or "!" in operand:
            return "power tower"
        rest = text[stop:].lstrip()
        if rest.startswith("^") or rest.startswith("**"):
            return "power tower"
        base = text[:start].rstrip()
        if base.endswith(")") or base.endswith("}"):  # (a^b)^c: the exponents multiply
            budget *= _literal_product(operand)
        else:
            budget = max(budget, _literal_product(operand))
        if budget > MAX_EXPONENT:
            return "exponent too large"
    big = any(len(d) > 4 or int(d) > MAX_OPERAND for d in _DIGITS.findall(text))
    has_power = bool(_power_operators(text))
    if "!" in text.replace("\\!", "") and (big or has_power):
        return "factorial with a large operand"
    heavy = _HEAVY_COMMANDS.search(text)
    if heavy is not None and (big or has_power):
        return f"large operand under {heavy.group()}"
    return None


class VerifyWorker:
    """One math-verify interpreter behind a pipe, killed when a check passes its deadline.

    The worker is ``python -m turngym.envs.math.latex_check``: a fresh interpreter (no fork of
    a threaded server), its memory capped, its own math-verify time-outs on (it runs checks on
    its main thread, where ``SIGALRM`` works) as a first, cheaper line before the hard kill.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""

    def _start(self) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "turngym.envs.math.latex_check"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        self._buf = b""
        if self._read_line(time.monotonic() + STARTUP_TIMEOUT_S) != {"ready": True}:
            self.close()
            raise InfraError(
                "the math-verify worker did not start: check that `python -c 'import math_verify'` works"
            )

    def _read_line(self, deadline: float) -> dict | None:
        """The next JSON line from the worker, or None if the deadline passes or it dies."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return None

    def check(self, pred: str, gold: str, timeout_s: float = CHECK_TIMEOUT_S) -> bool | None:
        """math-verify's verdict on ``pred`` vs ``gold``; None if it timed out or the worker died.

        Raises :class:`InfraError` only if the worker cannot start at all (an installation
        fault, not the agent's doing).
        """
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps({"pred": pred, "gold": gold}).encode() + b"\n")
            self._proc.stdin.flush()
        except OSError:
            self.close()
            return None
        reply = self._read_line(time.monotonic() + timeout_s)
        if reply is None or "equal" not in reply:
            self.close()  # hung or crashed mid-check: never reuse it, its state is unknown
            return None
        return bool(reply["equal"])

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()


class _Pool:
    """Idle workers shared by every env in the process; at most :data:`MAX_WORKERS` busy at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_WORKERS)
        self._idle: list[VerifyWorker] = []
        self._pid = os.getpid()

    def check(self, pred: str, gold: str) -> bool | None:
        with self._slots:
            with self._lock:
                if self._pid != os.getpid():  # a forked child must not share its parent's pipes
                    self._idle, self._pid = [], os.getpid()
                worker = self._idle.pop() if self._idle else VerifyWorker()
            try:
                return worker.check(pred, gold)
            finally:
                with self._lock:
                    self._idle.append(worker)

    def close(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                for w in self._idle:
                    w.close()
            self._idle = []


_POOL = _Pool()
atexit.register(_POOL.close)


def check_latex(pred: str, gold: str) -> Verdict:
    """Is ``pred`` equal to ``gold`` per math-verify, bounded in time whatever ``pred`` holds.

    >>> check_latex(r"\\frac{3}{4}", "3/4")
    Verdict(equal=True, unchecked_reason=None)
    >>> check_latex("10^{10^{10}}", "17")
    Verdict(equal=False, unchecked_reason='power tower')
    """
    pred = pred[:MAX_ANSWER_CHARS]
    reason = screen(pred)
    if reason is not None:
        return Verdict(False, reason)
    equal = _POOL.check(pred, gold)
    if equal is None:
        return Verdict(False, f"answer check took longer than {CHECK_TIMEOUT_S:g} s")
    return Verdict(equal)


def _serve() -> None:
    """The worker loop: one JSON request per line on stdin, one verdict per line on stdout."""
    import logging
    import resource

    # The cap is on top of what the interpreter already maps (numpy's thread pools reserve
    # address space by core count), so it bounds what a check allocates, on any machine.
    try:
        with open("/proc/self/statm") as fh:
            mapped = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = mapped + WORKER_MEMORY_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (OSError, ValueError):
        pass  # no /proc (not Linux): the hard deadline still bounds the check

    logging.disable(logging.WARNING)  # math-verify warns on every parse failure
    from math_verify import parse, verify

    # The protocol owns the real stdout; anything a library prints goes to stderr (discarded).
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    # math-verify's own time-outs, inside the host's deadline: a slow check that Python code can
    # interrupt answers "not equal" without costing a worker restart.
    parse_s, verify_s = 1, max(1, int(CHECK_TIMEOUT_S) - 3)
    for line in sys.stdin:
        try:
            req = json.loads(line)
            gold = parse(req["gold"], parsing_timeout=parse_s)
            pred = parse(req["pred"], parsing_timeout=parse_s)
            equal = bool(verify(gold, pred, timeout_seconds=verify_s))
        except BaseException:  # noqa: BLE001 - sympy raises anything on odd input (MemoryError too): "not equal"
            equal = False
        out.write(json.dumps({"equal": equal}) + "\n")
        out.flush()


if __name__ == "__main__":
    _serve()
