"""The SWE grader's program inside the sandbox (run as ``python -I -S -B -c <this source> CONFIG``).

This file is never imported by turngym: the host reads its text and passes it with ``-c``, so
nothing in the agent's tree can shadow it, and ``-I -S`` keep the interpreter away from the
agent's working directory, ``PYTHON*`` variables, ``site``, ``.pth`` files and
``sitecustomize``. It imports pytest (and every ``_pytest`` module and pluggy) from the
runner's own site directories *before* the agent's tree is put on ``sys.path``, so a
``pytest.py``, ``_pytest/`` or ``pluggy/`` in the tree is never the one that runs.

Two processes, because the code under test runs inside pytest's interpreter:

* the **parent** never imports anything from the agent's tree. It makes itself non-dumpable
  (a same-uid child can then neither ptrace it nor open its descriptors through ``/proc``),
  forks, and only then reads the per-run nonce from stdin, so the nonce never exists in the
  child's memory. It relays the child's per-test records and prints one line,
  ``NONCE <json>``, on the only stdout the host reads: the child's stdout and stderr are a
  pipe to the parent, shown to the agent as console text and never parsed for verdicts.
* the **child** runs pytest with a configuration from the command line only (``-c
  /dev/null``, explicit ``--rootdir``/``--confcutdir``, no cache provider, plugin autoload
  off, ``--noconftest`` unless the host allows conftests) and a recorder plugin passed as an
  object. The recorder snapshots the identity of pytest's, pluggy's, unittest's and the
  runtime's functions and classes before any agent code runs, and reports ``tampered`` when
  the code under test changed one, registered a plugin or installed a trace function.

The child's records remain claims by a process that runs agent code: see the SWE testing
module's docstring for what that leaves open.
"""

import json
import os
import sys
import time

try:
    import _turngym_inside_framing as framing
    import _turngym_inside_hardening as hardening
except ImportError:  # imported on the host (tests, linters); in the sandbox the prelude provides them
    from turngym.sandbox.inside import framing, hardening

BANNER = b"turngym-grader-started\n"


def _preimport():
    """Import pytest and its top-level dependencies before the tree can shadow any of them; the
    first ImportError (None if all imported).

    Only top-level names can be shadowed: a ``_pytest`` submodule imported later is looked up
    in the already-imported ``_pytest`` package's own directory, never on ``sys.path``.
    """
    import importlib

    failure = None
    for name in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging.version", "unittest", "unittest.mock", "doctest",
                 "pdb", "traceback", "inspect", "json", "hmac", "hashlib", "selectors", "ast", "_pytest.assertion.rewrite",
                 "_pytest.pytester_assertions", "_pytest.legacypath", "_pytest.python_api", "_pytest.raises"):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            failure = failure or exc
    return failure


# ------------------------------------------------------------------------------------ child
_WATCHED_PREFIXES = ("_pytest", "pytest", "pluggy", "unittest", "iniconfig")
_WATCHED = ("builtins", "sys", "os", "posix", "io", "_io", "json", "json.encoder", "json.decoder", "_json",
            "traceback", "inspect", "types", "functools", "warnings", "contextlib", "__main__", "gc", "marshal")
#: Module globals pytest itself rebinds while tests run.
_MUTABLE = {
    ("_pytest.assertion.util", "_reprcompare"), ("_pytest.assertion.util", "_assertion_pass"),
    ("_pytest.assertion.util", "_config"), ("sys", "last_type"), ("sys", "last_value"),
    ("sys", "last_traceback"), ("sys", "last_exc"), ("sys", "stdout"), ("sys", "stderr"), ("sys", "stdin"),
    ("sys", "displayhook"), ("sys", "excepthook"), ("sys", "unraisablehook"), ("sys", "breakpointhook"),
    ("__main__", "__builtins__"), ("builtins", "_"), ("warnings", "_showwarnmsg_impl"), ("warnings", "showwarning"),
    ("warnings", "_showwarning_orig"),
    ("_pytest.config", "Config._getini_unknown_type"),  # the legacypath plugin's documented patch
}


def _interesting(value):
    return callable(value) or isinstance(value, type(sys))


def _watched_modules():
    out = {}
    for name, mod in list(sys.modules.items()):
        if mod is None:
            continue
        if name in _WATCHED or name.split(".")[0] in _WATCHED_PREFIXES:
            out[name] = mod
    return out


def _snapshot():
    """Per watched namespace: (namespace, names, objects, labels) for every function/class in it.

    The namespaces are the live module dicts and class mappingproxies, so a check is one
    C-level identity pass per namespace (cheap enough to run around every test).
    """
    groups = []
    mods = _watched_modules()

    def add(ns, prefix, pairs):
        pairs = [(k, v) for k, v in pairs if (prefix[0], prefix[1] + k) not in _MUTABLE]
        if pairs:
            keys, vals = zip(*pairs)
            groups.append((ns, keys, vals, prefix))

    for mname, mod in mods.items():
        try:
            ns = vars(mod)
        except TypeError:
            continue
        members = [(k, v) for k, v in list(ns.items()) if _interesting(v)]
        add(ns, (mname, ""), members)
        for key, value in members:
            if isinstance(value, type) and getattr(value, "__module__", None) == mname:
                cls_ns = vars(value)
                add(cls_ns, (mname, key + "."), [
                    (a, m) for a, m in list(cls_ns.items())
                    if _interesting(m) or isinstance(m, (staticmethod, classmethod, property))
                ])
    return groups, tuple(mods.items()), sys.modules


_MISSING = object()


def _changed(before):
    """Names of the watched objects that are not the ones snapshotted (removed ones included)."""
    import itertools
    import operator

    groups, mods, modules = before
    out = []
    for ns, keys, vals, (mname, prefix) in groups:
        if any(map(operator.is_not, map(ns.get, keys, itertools.repeat(_MISSING)), vals)):
            out += [f"{mname}.{prefix}{k}" for k, v in zip(keys, vals) if ns.get(k, _MISSING) is not v]
    out += [f"sys.modules[{name!r}]" for name, mod in mods if modules.get(name) is not mod]
    if sys.modules is not modules:
        out.append("sys.modules")
    return out


def _codes(co):
    out = [co]
    for c in co.co_consts:
        if isinstance(c, type(co)):
            out += _codes(c)
    return out


def _expected_from_source(source, path, config):
    """What a pristine import of ``source`` defines: its code objects (as pytest's assertion
    rewriting compiles them), its module-level names (None if ``import *`` makes that
    unknowable) and its imports (alias -> (module, attribute or None))."""
    import ast

    if source is None:
        return None, None, {}
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError:
        return set(), None, {}
    names, imports = _bindings(tree)
    # test modules are always assertion-rewritten here (default python_files, no --assert=plain):
    # compile exactly as pytest's _rewrite_test does
    from _pytest.assertion.rewrite import rewrite_asserts

    rewrite_asserts(tree, source, path, config)
    return set(_codes(compile(tree, path, "exec", dont_inherit=True))), names, imports


def _bindings(tree):
    """Module-level names a pristine import binds (None if ``import *``) and its imports."""
    import ast

    names, imports = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            names.update(node.names)
    scopes = list(tree.body)
    while scopes:
        node = scopes.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name == "*":
                    return None, {}
                if isinstance(node, ast.Import):
                    alias = a.asname or a.name.split(".")[0]
                    names.add(alias)
                    imports[alias] = (a.name if a.asname else alias, None)
                else:
                    names.add(a.asname or a.name)
                    if not node.level and node.module:
                        imports[a.asname or a.name] = (node.module, a.name)
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        if isinstance(node, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            continue
        scopes.extend(ast.iter_child_nodes(node))
    return names, imports


class Recorder:
    """Per-test outcomes to the parent, MAC'd, with integrity checks around every report.

    The MAC key is made after the fork and handed to the parent before anything from the tree
    is imported, so bytes written to the result pipe by other code in this process (it can
    find the descriptor) are rejected unless that code also finds this object's key.
    """

    def __init__(self, fd, key, sources, write=os.write, dumps=json.dumps, gettrace=sys.gettrace, getprofile=sys.getprofile):
        import hashlib
        import hmac

        self.fd = fd
        self.sources = sources
        self.modules = dict(sys.modules)  # everything loaded before the tree is on the path
        self._known = {}
        self._mac = hmac.new(key, digestmod=hashlib.sha256)
        self._write, self._dumps, self._gettrace, self._getprofile = write, dumps, gettrace, getprofile
        self.before = _snapshot()
        self.plugins = None
        self.config = None
        self.tampered = []
        self._own = {k: id(v) for k, v in vars(self).items() if k not in ("plugins", "config", "tampered", "_known")}

    def send(self, record):
        body = self._dumps(record).encode("utf-8", "replace")
        mac = self._mac.copy()
        mac.update(body)
        data = mac.hexdigest().encode() + b" " + body + b"\n"
        while data:
            n = self._write(self.fd, data)
            data = data[n:]

    def check(self, where):
        problems = _changed(self.before)
        mine = vars(self)
        if any(id(mine.get(k)) != v for k, v in self._own.items()) or set(mine) - set(self._own) - {"plugins", "config", "tampered", "_own", "_known"}:
            problems.append("the recorder's own state was replaced")
        if self._gettrace() is not None or self._getprofile() is not None:
            problems.append("a trace/profile function is installed")
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None and any(monitoring.get_tool(i) is not None for i in range(6)):
            problems.append("a sys.monitoring tool is registered")
        if self.plugins is not None and self._plugin_state() != self.plugins:
            problems.append("the set of pytest plugins or hook implementations changed")
        if problems:
            self.flag(where, "; ".join(problems[:20]))

    def flag(self, where, what):
        if not self.tampered:
            self.tampered = [what]
            self.send({"k": "tampered", "where": where, "what": self.tampered})

    # -- the test functions and their modules must be the ones in the files read before the run
    def _expected(self, path):
        """(code objects compiled from the pristine file, the module-level names it binds, its imports)."""
        hit = self._known.get(path)
        if hit is None:
            hit = self._known[path] = _expected_from_source(self.sources.get(path), path, self.config)
        return hit

    def verify_item(self, item):
        fn = getattr(item, "function", None)
        if fn is None:  # not a Python function item (doctest, custom items): nothing to compare
            return
        path = str(getattr(item, "path", ""))
        codes, names, imports = self._expected(path)
        if codes is None:
            self.flag(item.nodeid, f"{path} was not a test file when the run started")
            return
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        if code not in codes:
            inner = getattr(fn, "__wrapped__", None)
            wrapper_ok = code is not None and code.co_filename.endswith(os.sep.join(("unittest", "mock.py")))
            if not (wrapper_ok and getattr(getattr(inner, "__func__", inner), "__code__", None) in codes):
                self.flag(item.nodeid, f"the test function {item.nodeid} is not the one in its file")
                return
        module = getattr(item, "module", None)
        if module is None or names is None:
            return
        env = vars(module)
        extra = [k for k in env if k not in names and not (k.startswith("__") and k.endswith("__")) and not k.startswith("@py")]
        if extra:
            self.flag(item.nodeid, f"names added to the test module: {sorted(extra)[:5]}")
            return
        missing = object()
        for alias, (modname, attr) in imports.items():
            target = self.modules.get(modname)
            if target is None:
                continue  # imported by the tests themselves after the start (e.g. the package under test)
            want = target if attr is None else getattr(target, attr, missing)
            if want is not missing and env.get(alias, missing) is not want:
                self.flag(item.nodeid, f"the test module's {alias!r} is not {modname}{'.' + attr if attr else ''}")
                return

    def _runtest_call(self, item):
        # the function is checked right before it runs, the runner right after: whatever the
        # code under test changed at import, collection or in any test is seen before a verdict
        self.verify_item(item)
        try:
            return (yield)
        finally:
            self.check(item.nodeid)

    def _plugin_state(self):
        pm = self.config.pluginmanager
        hooks = {}
        for name in dir(pm.hook):
            caller = getattr(pm.hook, name, None)
            get = getattr(caller, "get_hookimpls", None)
            if get is not None:
                hooks[name] = tuple(id(h.function) for h in get())
        return (tuple(sorted(id(p) for p in pm.get_plugins())), tuple(sorted(hooks.items())))

    # -- hooks --------------------------------------------------------------------------
    def pytest_configure(self, config):
        self.config = config

    def pytest_collectstart(self, collector):
        # the first collector is the session, before any test module (or agent code) is
        # imported, and after pytest registered its own session-time plugins
        if self.plugins is None:
            self.plugins = self._plugin_state()
        self.check("collection")

    def pytest_collectreport(self, report):
        if report.failed:
            self.send({"k": "collect", "nodeid": report.nodeid, "text": str(report.longreprtext)[-3000:]})

    def pytest_runtest_logreport(self, report):
        msg = ""
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            msg = getattr(crash, "message", None) or str(report.longreprtext)
        self.send({"k": "test", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome, "msg": msg[:2000]})

    def pytest_sessionfinish(self, session, exitstatus):
        self.check("sessionfinish")
        self.send({"k": "done", "exit": int(exitstatus)})


def _child(cfg, res_w, out_w, nstd, sources):
    os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    for fd in range(3, 1024):
        if fd != res_w:
            try:
                os.close(fd)
            except OSError:
                pass
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the child's stdin for its whole life
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = sys.stdout
    os.environ.pop("PYTEST_ADDOPTS", None)
    os.environ.pop("PYTEST_PLUGINS", None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    root = os.getcwd()
    sys.path.insert(nstd, root)  # the package under test: after the stdlib, before site dirs
    import pytest

    code = 4
    key = os.urandom(32)
    framing.write_all(res_w, key.hex().encode() + b"\n")  # first line, before any code from the tree runs
    Recorder.pytest_runtest_call = pytest.hookimpl(wrapper=True)(Recorder._runtest_call)
    rec = Recorder(res_w, key, sources)
    del key
    try:
        code = int(pytest.main(list(cfg["args"]), plugins=[rec]))
    except BaseException as exc:  # noqa: BLE001 - report, never hang
        try:
            rec.send({"k": "crash", "text": repr(exc)[:500]})
        except Exception:  # noqa: BLE001
            pass
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(code)


# ----------------------------------------------------------------------------------- parent
def _drain(fds, deadline, caps):
    import selectors

    sel = selectors.DefaultSelector()
    bufs = {fd: bytearray() for fd in fds}
    for fd in fds:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    open_fds = set(fds)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            return bufs, False
        for key, _ in sel.select(min(left, 1.0)):
            try:
                chunk = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(key.fd)
                open_fds.discard(key.fd)
                continue
            buf = bufs[key.fd]
            buf += chunk
            if len(buf) > caps[key.fd]:
                del buf[: len(buf) - caps[key.fd]]
    return bufs, True


def _read_sources(args, limit=8 << 20):
    """abs path -> bytes of every .py file the test arguments name, read before any tree code runs."""
    out, total = {}, 0
    for arg in args:
        if arg.startswith("-"):
            continue
        path = os.path.abspath(arg.split("::", 1)[0])
        files = [path] if os.path.isfile(path) else [
            os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".py")
        ]
        for f in files:
            if f in out or os.path.islink(f) or total > limit:
                continue
            try:
                with open(f, "rb") as fh:
                    out[f] = fh.read()
            except OSError:
                continue
            total += len(out[f])
    return out


def _verify(lines):
    """The records whose MAC checks under the key the child sent first; and how many did not."""
    import hashlib
    import hmac

    records, forged = [], 0
    if not lines or len(lines[0]) != 64:
        return records, int(any(lines))
    try:
        key = bytes.fromhex(lines[0].decode("ascii"))
    except ValueError:
        return records, 1
    for line in lines[1:]:
        if not line:
            continue
        mac, _, body = line.partition(b" ")
        good = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(mac, good):
            forged += 1
            continue
        try:
            rec = json.loads(body)
        except ValueError:
            forged += 1
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records, forged


def main():
    cfg = json.loads(sys.argv[1])
    nstd = hardening.path_outside(os.getcwd(), cfg["site"])  # the stdlib, then the runner's site dirs
    failure = _preimport()
    if "pytest" not in sys.modules:
        # Nothing of the tree has run yet: a runner without pytest is the infrastructure's
        # fault, so no banner -- the host reports an infra error instead of a failed episode.
        sys.stderr.write(f"the SWE grader cannot import pytest from its site dirs {cfg['site']!r} "
                         f"({type(failure).__name__}: {failure}{hardening.address_space_note()})\n")
        sys.stderr.flush()
        os._exit(3)
    os.write(1, BANNER)
    hardening.set_dumpable(0)  # same-uid processes cannot ptrace us or open /proc/<pid>/fd
    res_r, res_w = os.pipe()
    out_r, out_w = os.pipe()
    sources = _read_sources(cfg["args"])
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(res_r)
        os.close(out_r)
        _child(cfg, res_w, out_w, nstd, sources)
    os.close(res_w)
    os.close(out_w)
    nonce = sys.stdin.buffer.readline().strip().decode("ascii", "replace")
    deadline = t0 + float(cfg["deadline"])
    bufs, finished = _drain([res_r, out_r], deadline, {res_r: 8 << 20, out_r: 64 << 10})
    status = None
    while finished:  # the pipes closed; the child may still linger (closed them and kept running)
        try:
            done_pid, raw = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            break
        if done_pid:
            status = os.waitstatus_to_exitcode(raw)
            break
        if time.monotonic() > deadline:
            finished = False
            break
        time.sleep(0.005)
    if not finished:
        for target in (-pid, pid):
            try:
                os.kill(target, 9)
            except OSError:
                pass
        try:
            _, raw = os.waitpid(pid, 0)
            status = os.waitstatus_to_exitcode(raw)
        except ChildProcessError:
            pass
    records, forged = _verify(bytes(bufs[res_r]).split(b"\n"))
    out = {"records": records, "forged": forged, "timed_out": not finished, "status": status,
           "console": bytes(bufs[out_r]).decode("utf-8", "replace")}
    framing.write_all(1, (nonce + " " + json.dumps(out) + "\n").encode())
    os._exit(0)


if __name__ == "__main__":
    main()
