"""WarmPython: fork-per-run inside a live bubblewrap session must behave like a fresh run."""

from __future__ import annotations

import os
import uuid

import pytest

from turngym.core.errors import ConfigError
from turngym.sandbox import BubblewrapSandbox, Limits, SandboxUnavailable, WarmPython

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
    res = warm.run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    assert not res.ok and "killed or stalled" in res.stderr  # the run's failure, no SandboxError
    res = warm.run("import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)", limits=FAST.replace(wall_s=0.5))
    assert res.limit_hit == "wall"
    assert warm.run("print('recovered')").stdout == "recovered\n"
