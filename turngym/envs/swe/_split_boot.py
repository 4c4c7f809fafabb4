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

The program is in four pieces, shipped as text ahead of it (``_boot_source`` in
:mod:`turngym.envs.swe.testing`): the messages both processes send (:mod:`._split_wire`), the
candidate's side (:mod:`._split_candidate`), the grader's stand-ins and their client
(:mod:`._split_handles`), and this program, which drives pytest, forks the candidate and writes
the verdict. The split is for reading, not a wall: the candidate is a fork of this process and
holds what it held at the fork (code, the configuration), never what it reads after (the nonce,
the hidden cases) or builds after (the client, its handles, pytest's reports).
"""

import json
import os
import signal
import socket
import sys
import threading
import time

try:
    import _turngym_inside_framing as framing
    import _turngym_inside_hardening as hardening
    import _turngym_split_candidate as candidate
    import _turngym_split_handles as handles
    import _turngym_split_wire as wire
except ImportError:  # imported on the host (tests, linters); in the sandbox the prelude provides them
    from turngym.envs.swe import _split_candidate as candidate
    from turngym.envs.swe import _split_handles as handles
    from turngym.envs.swe import _split_wire as wire
    from turngym.sandbox.inside import framing, hardening

BANNER = b"turngym-grader-started\n"
#: The most the hidden cases' observations may take on the verdict line, all together (the sandbox
#: keeps 1 MiB of output; the gold packages' answers take at most ~250 KB).
HIDDEN_TOTAL_MAX = 640 << 10


class _ImportGuard:
    """First on ``sys.meta_path``: the package's modules are proxies; while collecting, only the
    test directories' modules and ``conftest.py`` files (the task's own) are imported here from
    the tree; after collection nothing from the tree is.

    A module of the tree reached under another name than its top-level one (a conftest that
    puts ``src/`` on ``sys.path``, then ``import pkg``) is the agent's code: never imported here.
    """

    def __init__(self, root, proxied, test_dirs=(), client=None):
        self.root = root
        self.client = client
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
        if self.client is not None and self.client.collected:
            if any(os.path.abspath(p).startswith(self.root) for p in where):
                raise ImportError(f"the grader does not import {name!r} from the repository after collection")
        elif not all(self._trusted(p) for p in where):
            raise ImportError(f"the grader imports nothing of the repository outside its test directories "
                              f"({name!r} from {where[0]}): the package is served from its own process by its "
                              "top-level name only")
        return None

    def create_module(self, spec):
        mod = handles.proxy_module(spec)
        self.modules.append(spec.name)
        return mod

    def exec_module(self, module):
        pass


class _Reporter:
    """pytest's reports, recorded in this (trusted) process."""

    def __init__(self, guard, client):
        self.guard = guard
        self.client = client
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
        self.client.collected = True
        names = sorted({m.partition(".")[0] for m in self.guard.modules} | set(self.guard.modules))
        if names:
            try:
                self.client.request({"op": "import", "names": names, "obj": None})
            except handles.CandidateGone:
                pass
            except Exception as exc:  # noqa: BLE001 - the package does not import: a collection error
                self.records.append({"k": "collect", "nodeid": "", "text": f"{type(exc).__name__}: {exc}"[-3000:]})
                self.client.stop("the package could not be imported")

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


def _run_hidden(client, spec, results):
    """Send the driver and its inputs to the package's process in one request and keep what it
    answers: one plain-JSON observation per case. A package that dies, stalls or answers
    anything else ends the cases with ``error`` set (the host scores them as disagreeing)."""
    try:
        obs = client.request({"op": "hidden", "obj": None, "package": spec.get("package"), "source": spec["source"],
                               "cases": spec["cases"]})
        if type(obs) is not list or len(obs) != len(spec["cases"]):
            raise ValueError("not one observation per case")
        if len(json.dumps(obs)) > HIDDEN_TOTAL_MAX:
            raise ValueError("the observations are too large")
    except handles.CandidateGone as exc:
        results["error"] = f"the package's process is gone ({exc})"
        return
    except Exception as exc:  # noqa: BLE001 - a malformed answer (or a handle): no observation counts
        results["error"] = f"the package's process answered the hidden cases with no observations ({type(exc).__name__})"
        return
    results["obs"] = obs
    results["done"] = True


def main():
    cfg = json.loads(sys.argv[1])
    nstd = hardening.path_outside(os.getcwd(), cfg["site"])  # the stdlib, then the runner's site dirs
    try:
        import pytest
    except ImportError as exc:
        sys.stderr.write(f"the SWE grader cannot import pytest from its site dirs {cfg['site']!r} "
                         f"({type(exc).__name__}: {exc}{hardening.address_space_note()})\n")
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
            candidate.serve(theirs, out_w, root, nstd, run_uid, scratch)
        finally:
            os._exit(0)
    theirs.close()
    os.close(out_w)
    try:  # the candidate's first frame, sent before it runs any of the package's code
        hello = wire.recv(mine, time.monotonic() + 30)
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
    client = handles.connect(mine, pid, deadline, test_root)
    guard = _ImportGuard(test_root, proxied, sorted(test_dirs), client)
    sys.meta_path.insert(0, guard)
    reporter = _Reporter(guard, client)
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
        return {"records": list(reporter.records), "timed_out": timed_out or client.timed_out, "console": text,
                "fatal": client.fatal}

    def report(timed_out):
        with lock:
            if reported:
                return
            reported.append(True)
            client.stop()
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
        _run_hidden(client, hidden_spec, hidden)
    report(False)
    os._exit(0)


if __name__ == "__main__":
    main()
