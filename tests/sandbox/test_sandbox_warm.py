"""WarmPython: fork-per-run inside a live bubblewrap session must behave like a fresh run."""

from __future__ import annotations

import os
import signal
import threading
import uuid

import pytest

from turngym.core.errors import ConfigError
from turngym.sandbox import BubblewrapSandbox, Limits, SandboxError, SandboxUnavailable, WarmPython

FAST = Limits(wall_s=3.0, cpu_s=3.0, memory_mb=512, processes=32, output_bytes=100_000, file_size_mb=8, disk_mb=32)


@pytest.fixture
def warm():
    try:
        sb = BubblewrapSandbox(FAST)
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")
    s = sb.open_session()
    w = WarmPython(s)
    yield w
    w.close()
    s.close()
    sb.close()


def test_runs_like_a_fresh_interpreter(warm):
    res = warm.run("import sys\nprint(__name__, sys.argv, 'json' in sys.modules)\nprint('e', file=sys.stderr)\nsys.exit(4)", args=["x"])
    assert (res.stdout, res.stderr, res.exit_code) == ("__main__ ['-c', 'x'] False\n", "e\n", 4)
    assert warm.run("import json; x = 1").ok
    assert warm.run("print('x' in dir())").stdout == "False\n"  # nothing leaks between runs


def test_sees_the_session_files_and_stdin(warm):
    warm.session.write_files({"a.txt": "21"})
    res = warm.run("import sys\nprint(int(open('a.txt').read()) * int(sys.stdin.read()))", stdin="2")
    assert res.stdout == "42\n"
    assert warm.run("open('b.txt', 'w').write('hi')").ok and warm.session.read_file("b.txt") == b"hi"


@pytest.mark.parametrize(
    ("source", "limits", "hit"),
    [
        ("while True:\n    pass", FAST.replace(cpu_s=1, wall_s=8), "cpu"),
        ("import time\ntime.sleep(60)", FAST.replace(wall_s=0.5), "wall"),
        ("x = bytearray(1 << 30)", FAST, "memory"),
        ("while True:\n    print('x' * 1000)", FAST, "output"),
        ("open('big', 'wb').write(b'x' * (32 << 20))", FAST, "file_size"),
        ("import os\nwhile True:\n    os.fork()", FAST, "processes"),
    ],
)
def test_limits(warm, source, limits, hit):
    res = warm.run(source, limits=limits)
    assert res.limit_hit in (hit, "wall") if hit == "processes" else res.limit_hit == hit, res.summary()
    assert warm.run("print('next run fine')").stdout == "next run fine\n"


def test_no_daemon_survives_a_run(warm):
    marker = f"turngym-warm-daemon-{uuid.uuid4().hex}"
    res = warm.run(
        "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}])\n"
        "    os._exit(0)\nos.wait()\n"
    )
    assert res.ok
    alive = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(os.path.join(entry.path, "cmdline"), "rb") as fh:
                    if marker.encode() in fh.read():
                        with open(os.path.join(entry.path, "stat")) as st:
                            if st.read().split(") ")[1][0] != "Z":
                                alive.append(entry.name)
            except OSError:
                continue
    assert alive == []


def test_isolation_holds(warm):
    assert "Network is unreachable" in warm.run("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)").stderr
    assert not warm.run("open('/etc/turngym-probe', 'w')").ok and not os.path.exists("/etc/turngym-probe")


def test_a_dead_worker_is_replaced(warm):
    assert warm.run("print(1)").ok
    warm.close()
    assert warm.run("print(2)").stdout == "2\n"


def test_needs_a_bubblewrap_session():
    import warnings

    from turngym.sandbox import RlimitSandbox

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sb = RlimitSandbox()
    with sb.open_session() as s, pytest.raises(ConfigError):
        WarmPython(s)
    sb.close()


def test_a_run_cannot_take_over_or_blame_the_worker(warm):
    forge = "import os\nos.write(os.open(f'/proc/{os.getppid()}/fd/1', os.O_WRONLY), b'{}\\n')"
    res = warm.run(forge)
    assert not res.ok and "PermissionError" in res.stderr
    split = warm.session.run_uid is not None
    for sig in ("SIGKILL", "SIGSTOP", "SIGTERM"):
        res = warm.run(f"import os, signal, time\nos.kill(os.getppid(), signal.{sig})\ntime.sleep(5)", limits=FAST.replace(wall_s=0.5))
        if split:  # runs have their own uid: the worker is out of their reach
            assert "PermissionError" in res.stderr and res.limit_hit is None, res
        else:  # same uid: the run's failure, never a SandboxError
            assert not res.ok and res.limit_hit in ("wall", None), res
    assert warm.run("print('recovered')").stdout == "recovered\n"


def _split(warm):
    if warm.session.run_uid is None:
        pytest.skip("runs share the worker's uid here (bubblewrap in a user namespace)")


def test_runs_have_the_untrusted_uid_and_no_capabilities(warm):
    _split(warm)
    probe = "import os\nprint(os.getresuid()[0], [l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')])"
    res = warm.run(probe)
    uid, caps = res.stdout.split(" ", 1)
    assert int(uid) == warm.session.run_uid and caps.strip() == str(["0000000000000000"] * 5)
    trusted = warm.run(probe + "\nprint(os.environ['TURNGYM_UNTRUSTED_UID'])", trusted=True)
    assert int(trusted.stdout.split()[0]) == warm.session.uid
    assert trusted.stdout.split()[-1] == str(warm.session.run_uid)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_a_worker_killed_or_stopped_from_outside_is_an_infra_error(warm, sig):
    """Nothing a run does can reach the worker, so its death with no limit hit is the
    infrastructure's (an OOM kill elsewhere on the host, an operator), not the program's."""
    _split(warm)
    assert warm.run("print(1)").ok
    pid = warm._worker_pid
    assert pid is not None and os.stat(f"/proc/{pid}").st_uid == warm.session.uid
    timer = threading.Timer(0.3, os.kill, (pid, sig))
    timer.start()
    try:
        with pytest.raises(SandboxError, match="no limit hit"):
            warm.run("import time\ntime.sleep(2)", limits=FAST.replace(wall_s=1.0))
    finally:
        timer.cancel()
    assert warm.run("print('fresh worker')").stdout == "fresh worker\n"


def test_a_worker_killed_by_the_sessions_memory_limit_is_the_programs_failure():
    """Files in the session's tmpfs fill its memory cgroup; the OOM killer then takes the
    worker too. That is the program's failure (a memory limit), never an infra error."""
    try:
        sb = BubblewrapSandbox(FAST.replace(memory_mb=120, tmp_mb=400, disk_mb=64))
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")
    try:
        with sb.open_session() as s, WarmPython(s) as w:
            if s.cgroup is None:
                pytest.skip("no memory cgroup here")
            fill = "b = b'x' * (1 << 20)\nfor i in range(300):\n    open(f'/dev/shm/f{i}', 'wb').write(b)"
            res = w.run(fill)
            assert res.limit_hit == "memory" and not res.ok, res
            s.reset()
            assert w.run("print('next')").stdout == "next\n"
    finally:
        sb.close()


def test_without_a_working_trusted_launch_sessions_keep_one_uid(monkeypatch):
    """A trusted launch that does not get CAP_SETUID (here: the kept set minus it, as an old
    setpriv would leave it) is found at construction: sessions then keep one uid instead of
    handing out a second one their trusted programs could not switch to."""
    import turngym.sandbox.local as local

    if os.geteuid() != 0:
        pytest.skip("a second uid is only handed out as root")
    monkeypatch.setattr(local, "_TRUSTED_CAPS", ("kill",))
    monkeypatch.setattr(BubblewrapSandbox, "_trusted_probed", {})
    try:
        with pytest.warns(RuntimeWarning, match="CAP_SETUID"):
            sb = BubblewrapSandbox(FAST)
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")
    try:
        assert not sb.splits_uids
        with sb.open_session() as s:
            assert s.run_uid is None
    finally:
        sb.close()
