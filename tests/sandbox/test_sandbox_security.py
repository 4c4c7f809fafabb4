"""Security battery: hostile programs must be contained, reported, and leave the host unchanged.

Every attack runs against bubblewrap (the default backend; CI installs it). The attacks that
are about *limits* rather than isolation also run against the rlimit-only backend. A contained
attack shows up as a limit hit or a failed run; afterwards no process of the sandbox is left
and no file outside its working dir has changed.

The public-network probe never sends traffic off the machine: the sandboxed script first
checks that its network namespace has no interface but ``lo`` and no route, and only then
calls ``connect`` (which the kernel refuses locally with ENETUNREACH).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
import warnings

import pytest

from turngym.sandbox import BubblewrapSandbox, Limits, NotIsolatedWarning, RlimitSandbox, SandboxUnavailable
from turngym.sandbox.local import _UID_BASE, _UID_SPAN

FAST = Limits(wall_s=3.0, cpu_s=3.0, memory_mb=512, processes=32, output_bytes=100_000, file_size_mb=8, disk_mb=32)


def _bwrap():
    try:
        return BubblewrapSandbox(FAST)
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")


def _rlimit():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotIsolatedWarning)
        return RlimitSandbox(FAST)


def _sandbox_processes(uids: set[int] | None = None) -> list[int]:
    """Live processes owned by a sandbox session uid (there must be none between runs).

    ``uids``: only those session uids -- other test processes on a shared machine run
    sandboxes of their own.
    """
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                uid = os.stat(entry.path).st_uid
            except FileNotFoundError:
                continue
            if _UID_BASE <= uid < _UID_BASE + _UID_SPAN and (uids is None or uid in uids):
                pids.append(int(entry.name))
    return pids


def _recording_uids(sb) -> set[int]:
    """Record every session uid ``sb`` hands out."""
    uids: set[int] = set()
    pick = sb._session_uid

    def record():
        uid = pick()
        if uid is not None:
            uids.add(uid)
        return uid

    sb._session_uid = record
    return uids


@pytest.fixture
def bwrap():
    sb = _bwrap()
    uids = _recording_uids(sb)
    yield sb
    sb.close()
    assert _sandbox_processes(uids) == [], "a sandboxed process outlived its run"


@pytest.fixture(params=["bubblewrap", "rlimit"])
def any_backend(request):
    sb = _bwrap() if request.param == "bubblewrap" else _rlimit()
    uids = _recording_uids(sb)
    yield sb
    sb.close()
    assert _sandbox_processes(uids) == []


# -- isolation (bubblewrap) ------------------------------------------------------------------
def test_loopback_of_the_host_is_unreachable(bwrap):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        res = bwrap.run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)")
        assert not res.ok and "ConnectionRefusedError" in res.stderr
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever arrived at the host's listener
    finally:
        listener.close()


def test_public_network_is_unreachable_without_sending_anything(bwrap):
    probe = """
import socket, sys
ifaces = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]
routes = open('/proc/net/route').read().splitlines()[1:]
if ifaces != ['lo'] or routes:
    sys.exit(99)  # not isolated: refuse to touch the network at all
socket.create_connection(('1.1.1.1', 80), timeout=2)
"""
    res = bwrap.run_python(probe)
    assert res.exit_code == 1, res.summary()
    assert "Network is unreachable" in res.stderr


@pytest.mark.parametrize("target", ["/etc/turngym-probe", "/usr/turngym-probe", "/turngym-probe", "HOST_TMP", "HOME"])
def test_writing_outside_the_workdir_fails(bwrap, tmp_path, target):
    path = {"HOST_TMP": str(tmp_path / "probe"), "HOME": os.path.expanduser("~/turngym-probe")}.get(target, target)
    res = bwrap.run_python(f"open({path!r}, 'w').write('pwned')")
    assert not res.ok and ("Error" in res.stderr)
    assert not os.path.exists(path)


def test_private_tmp_does_not_reach_the_host(bwrap):
    name = f"/tmp/turngym-probe-{uuid.uuid4().hex}"
    res = bwrap.run_python(f"open({name!r}, 'w').write('x'); print(open({name!r}).read())")
    assert res.ok and res.stdout == "x\n"
    assert not os.path.exists(name)


def test_host_files_outside_the_python_install_are_invisible(bwrap):
    here = os.path.abspath(__file__)
    res = bwrap.run_python(f"open({here!r}).read()")
    assert not res.ok and "FileNotFoundError" in res.stderr
    res = bwrap.run_python("open('/etc/shadow').read()")
    assert not res.ok and ("PermissionError" in res.stderr or "FileNotFoundError" in res.stderr)


def test_one_session_cannot_read_another(bwrap):
    with bwrap.open_session() as a, bwrap.open_session() as b:
        a.write_files({"secret.txt": "alice's key"})
        for path in (os.path.join(a.host_dir, "secret.txt"), "../" + os.path.basename(a.host_dir) + "/secret.txt"):
            res = b.run_python(f"print(open({path!r}).read())")
            assert not res.ok and "alice" not in res.stdout
        assert "alice" not in b.run("ls -la / /work .. 2>&1; cat /work/../*/secret.txt 2>&1").stdout


def test_killing_the_parent_or_the_host_does_nothing(bwrap):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        attack = f"""
import os, signal
for pid in (os.getppid(), 1, {os.getpid()}, {bystander.pid}):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as e:
        print(pid, type(e).__name__)
os.kill(-1, signal.SIGKILL)
raise SystemExit(1)
"""
        res = bwrap.run_python(attack)
        assert not res.ok
        assert bystander.poll() is None  # the host process is alive
        assert bwrap.run_python("print('still works')").stdout == "still works\n"
    finally:
        bystander.kill()
        bystander.wait()


def test_no_daemon_survives_the_run(bwrap):
    marker = f"turngym-daemon-{uuid.uuid4().hex}"
    daemon = f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 3)
        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', {marker!r}])
    os._exit(0)
os.wait()
print('detached')
"""
    res = bwrap.run_python(daemon)
    assert res.ok and res.stdout == "detached\n"
    survivors = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(os.path.join(entry.path, "cmdline"), "rb") as fh:
                    if marker.encode() in fh.read():
                        survivors.append(entry.name)
            except OSError:
                continue
    assert survivors == []


def test_fork_bomb_is_capped(bwrap):
    res = bwrap.run_python("import os\nwhile True:\n    os.fork()")
    assert res.limit_hit in ("processes", "wall") and not res.ok
    res = bwrap.run(":(){ :|:& };:", limits=FAST.replace(wall_s=2))
    assert not res.ok
    assert bwrap.run("echo alive").stdout == "alive\n"


def test_fork_bomb_is_capped_by_the_rlimit_backend_when_it_can_drop_privileges():
    sb = _rlimit()
    uids = _recording_uids(sb)
    try:
        if not sb.enforces_process_limit:
            pytest.skip("running as root with an interpreter other uids cannot execute: RLIMIT_NPROC cannot bind")
        res = sb.run_python("import os\nwhile True:\n    os.fork()")
        assert res.limit_hit in ("processes", "wall")
    finally:
        sb.close()
    assert _sandbox_processes(uids) == []


_DAEMON = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        open(sys.argv[1], 'w').write(os.readlink('/proc/self'))\n"  # the host's pid, in any PID namespace
    "        time.sleep(60)\n"
    "    os._exit(0)\n"
    "time.sleep(0.2)\n"
)


def _alive(pid: int) -> bool:
    """Running or sleeping: not gone and not a zombie waiting for an init that does not reap."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize("enforcement", ["auto", "watchdog"])
def test_rlimit_session_end_kills_a_setsid_daemon_without_a_private_uid(monkeypatch, enforcement):
    """Root with an interpreter only root can execute (test double: _others_can_exec says
    no): runs cannot drop to a private uid, and a double-forked ``setsid`` daemon leaves the
    process group. The session's cgroup (``auto``) or, without one (``watchdog``), the run's
    own PID namespace still holds it, and the session's end kills it."""
    import turngym.sandbox.local as local
    from turngym.sandbox import cgroups

    monkeypatch.setattr(local, "_others_can_exec", lambda path: False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotIsolatedWarning)
        sb = RlimitSandbox(FAST, enforcement=enforcement)
    try:
        if sb.drops_uid or os.geteuid() != 0:
            pytest.skip("not running as root")
        if enforcement == "auto" and cgroups.detect() is None:
            pytest.skip("no cgroup this process may create")
        s = sb.open_session()
        pidfile = os.path.join(s.host_dir, "daemon.pid")
        res = s.run_python(_DAEMON, args=[pidfile])
        assert res.ok, res
        pid = int(open(pidfile).read())
        s.close()
        deadline = time.monotonic() + 2
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if _alive(pid):
            os.kill(pid, 9)
            pytest.fail("the setsid daemon outlived its session")
    finally:
        sb.close()


# -- limits (both backends) ------------------------------------------------------------------
def test_memory_bomb(any_backend):
    # a wall budget well past what ten 50 MB allocations take, so a loaded machine still meets the memory limit first
    res = any_backend.run_python("x = []\nwhile True:\n    x.append(bytearray(50 << 20))", limits=FAST.replace(wall_s=30))
    assert res.limit_hit == "memory" and not res.ok


def test_infinite_loop_hits_the_cpu_limit(any_backend):
    res = any_backend.run_python("while True:\n    pass", limits=FAST.replace(cpu_s=1, wall_s=10))
    assert res.limit_hit == "cpu" and res.duration_s < 10  # killed by RLIMIT_CPU before the wall limit


def test_sleep_past_the_wall_limit(any_backend):
    res = any_backend.run_python("import time\ntime.sleep(60)", limits=FAST.replace(wall_s=0.5))
    assert res.limit_hit == "wall" and res.duration_s < 3 and res.exit_code is None


def test_stdout_flood_is_cut(any_backend):
    res = any_backend.run_python("while True:\n    print('x' * 1000)")
    assert res.limit_hit == "output" and res.output_truncated
    assert len(res.stdout) + len(res.stderr) <= FAST.output_bytes


def test_huge_file_is_refused(any_backend):
    res = any_backend.run_python("open('big', 'wb').write(b'x' * (64 << 20))")
    assert res.limit_hit == "file_size"
    res = any_backend.run_python("f = open('sparse', 'wb')\nf.seek(1 << 40)\nf.write(b'x')\nf.close()")
    assert res.limit_hit == "file_size"


def test_many_files_hit_the_disk_limit(any_backend):
    with any_backend.open_session() as s:
        res = s.run_python("for i in range(8):\n    open(f'f{i}', 'wb').write(b'x' * (7 << 20))")
        assert res.limit_hit == "disk"


def test_output_of_a_contained_attack_is_still_reported(any_backend):
    res = any_backend.run_python("import sys\nprint('before', flush=True)\nwhile True:\n    pass", limits=FAST.replace(wall_s=0.5))
    assert res.limit_hit in ("wall", "cpu") and res.stdout == "before\n"


def test_deep_and_locked_trees_do_not_break_the_host_side(bwrap):
    with bwrap.open_session() as s:  # 1100 levels: deeper than Python's recursion limit
        res = s.run_python(
            "import os\nfor i in range(1100):\n    os.mkdir('d')\n    os.chdir('d')\nopen('leaf', 'w').write('x')\n"
            "os.chdir('/' if False else os.environ['HOME'])\nos.mkdir('locked')\nopen('locked/f', 'w').write('y')\nos.chmod('locked', 0)"
        )
        assert res.ok, res.summary()
        files = s.list_files()  # bounded walk, no RecursionError
        assert "locked/f" in files
        s.reset()
        assert s.list_files() == []
