"""The sandbox interface: runs, sessions, files, snapshots, limits, pool, backend selection."""

from __future__ import annotations

import os
import warnings

import pytest

from turngym.core.errors import ConfigError, InfraError
from turngym.sandbox import (
    BACKENDS,
    BubblewrapSandbox,
    Limits,
    NotIsolatedWarning,
    PythonRuntime,
    RateLimiter,
    RlimitSandbox,
    SandboxError,
    SandboxPool,
    SandboxUnavailable,
    SessionClosed,
    make_sandbox,
)
from turngym.sandbox.factory import BACKEND_CLASSES


def _bwrap_or_skip() -> BubblewrapSandbox:
    try:
        return BubblewrapSandbox()
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")


def _rlimit() -> RlimitSandbox:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotIsolatedWarning)
        return RlimitSandbox()


@pytest.fixture(params=["bubblewrap", "rlimit"])
def sandbox(request):
    sb = _bwrap_or_skip() if request.param == "bubblewrap" else _rlimit()
    yield sb
    sb.close()


def test_run_python_returns_output_and_status(sandbox):
    res = sandbox.run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)")
    assert (res.stdout, res.stderr, res.exit_code, res.limit_hit) == ("out\n", "err\n", 3, None)
    assert not res.ok and res.backend == sandbox.name and res.duration_s > 0


def test_run_shell_command_with_files_and_stdin(sandbox):
    res = sandbox.run("cat data.txt - | tr a-z A-Z", files={"data.txt": "abc\n"}, stdin="def\n")
    assert res.ok and res.stdout == "ABC\nDEF\n"


def test_each_one_shot_run_gets_a_fresh_workdir(sandbox):
    assert sandbox.run("echo x > left.txt").ok
    assert sandbox.run("ls -A").stdout == ""


def test_session_keeps_files_between_commands(sandbox):
    with sandbox.open_session() as s:
        s.write_files({"pkg/mod.py": "VALUE = 41\n"})
        assert s.run_python("import sys; sys.path.insert(0, 'pkg'); import mod; open('out.txt', 'w').write(str(mod.VALUE + 1))").ok
        assert s.read_file("out.txt") == b"42"
        assert s.list_files() == ["out.txt", "pkg/mod.py"]
        assert s.run("cat out.txt").stdout == "42"


def test_snapshot_and_restore_roundtrip(sandbox):
    with sandbox.open_session() as s:
        s.write_files({"a.txt": "one", "d/b.bin": b"\x00\x01"})
        s.run("chmod 755 a.txt && ln -s a.txt link")
        snap = s.snapshot()
        s.run("rm -rf d && echo changed > a.txt && touch new")
        s.restore(snap)
        again = s.snapshot()
    assert again == snap
    assert snap.files == {"a.txt": b"one", "d/b.bin": b"\x00\x01"}
    assert ("link", 0, b"a.txt") in snap.entries and ("a.txt", 0o755, b"one") in snap.entries


def test_reset_empties_the_workdir(sandbox):
    with sandbox.open_session() as s:
        s.run("mkdir -p x/y && touch x/y/z top")
        s.reset()
        assert s.list_files() == []


def test_host_never_follows_links_planted_by_the_sandboxed_code(sandbox, tmp_path):
    secret = tmp_path / "host-secret"
    secret.write_text("do not read")
    with sandbox.open_session() as s:
        s.run(f"ln -s {secret} leak && ln -s {tmp_path} dirlink")
        with pytest.raises(FileNotFoundError):
            s.read_file("leak")
        with pytest.raises(FileNotFoundError):
            s.read_file("dirlink/host-secret")
        s.write_files({"leak": "overwritten"})  # replaces the link, never writes through it
        assert s.read_file("leak") == b"overwritten"
    assert secret.read_text() == "do not read"


def test_paths_must_stay_inside_the_workdir(sandbox):
    with sandbox.open_session() as s:
        for bad in ("../x", "/etc/passwd", "", "a/../../b"):
            with pytest.raises(ConfigError):
                s.write_files({bad: "x"})


def test_closed_session_refuses_work_and_deletes_its_dir(sandbox):
    s = sandbox.open_session()
    host_dir = s.host_dir
    s.close()
    assert not os.path.exists(host_dir)
    with pytest.raises(SessionClosed):
        s.run("true")


def test_large_source_is_written_to_a_file(sandbox):
    src = "x = 1\n" * 20_000 + "print(x)\n"
    assert sandbox.run_python(src).stdout == "1\n"


def test_environment_does_not_leak_host_variables(sandbox, monkeypatch):
    monkeypatch.setenv("TURNGYM_HOST_SECRET", "s3cret")
    out = sandbox.run_python("import os; print(sorted(os.environ))").stdout
    assert "TURNGYM_HOST_SECRET" not in out and "PYTHONHASHSEED" in out


def test_limits_validate():
    with pytest.raises(ConfigError, match="wall_s"):
        Limits(wall_s=0)
    with pytest.raises(ConfigError, match="processes"):
        Limits(processes=2)
    assert Limits().replace(wall_s=1.5).wall_s == 1.5


def test_sandbox_errors_are_infra_errors():
    assert issubclass(SandboxError, InfraError) and issubclass(SandboxUnavailable, SandboxError)


def test_rlimit_backend_is_flagged_not_isolated():
    with pytest.warns(NotIsolatedWarning):
        sb = RlimitSandbox()
    assert sb.isolated is False
    sb.close()


def test_docker_without_an_engine_says_so_clearly(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxUnavailable, match="no Docker engine answered.*make_sandbox\\('bubblewrap'\\)"):
        make_sandbox("docker")


def test_docker_exec_argv_wraps_limits_and_runs_under_dash():
    from turngym.sandbox.docker import exec_argv

    lim = Limits(wall_s=3, cpu_s=2, memory_mb=512, file_size_mb=4, processes=16)
    argv = exec_argv(["python3", "-c", "pass"], lim, stdin_file="/tmp/in")
    assert argv[:3] == ["sh", "-c", 'exec "$@" < /tmp/in']
    assert argv[4:8] == ["timeout", "--signal=KILL", "3.0", "prlimit"]
    assert "--cpu=2:3" in argv and f"--as={512 << 20}:{512 << 20}" in argv and not any(a.startswith("--nproc") for a in argv)
    assert argv[-3:] == ["python3", "-c", "pass"]
    # the same wrapper, run here with this machine's /bin/sh, timeout and prlimit
    import subprocess
    import sys

    script = "import resource, sys; print(resource.getrlimit(resource.RLIMIT_CPU)[0], sys.stdin.read())"
    cmd = exec_argv([sys.executable, "-S", "-c", script], lim, stdin_file="/dev/stdin")
    out = subprocess.run(cmd, input="hi", capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout == "2 hi\n", out.stderr


def test_make_sandbox_auto_prefers_an_isolated_backend():
    sb = make_sandbox("auto")
    try:
        if isinstance(sb, BubblewrapSandbox) or sb.name == "docker":
            assert sb.isolated
    finally:
        sb.close()
    with pytest.raises(ConfigError, match="unknown sandbox backend"):
        make_sandbox("firejail")


def test_each_backend_name_builds_its_own_class():
    assert BACKENDS == ("bubblewrap", "docker", "rlimit")  # the order "auto" tries them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rlimit warns that it is not isolated
        sb = make_sandbox("rlimit")
    try:
        assert type(sb) is RlimitSandbox and sb.name == "rlimit"
    finally:
        sb.close()
    for name, target in BACKEND_CLASSES.items():
        module, _, cls = target.partition(":")
        assert cls.lower().startswith(name.lower()), (name, target)


def test_broken_interpreter_surfaces_as_a_failed_run_not_a_crash():
    sb = _bwrap_or_skip()
    broken = BubblewrapSandbox(python=PythonRuntime(executable="/nonexistent/python3"))
    res = broken.run_python("print(1)")
    assert res.exit_code != 0 and "nonexistent" in res.stderr
    broken.close()
    sb.close()


def test_rate_limiter_spaces_creations():
    now = [100.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    rl = RateLimiter(rate=4.0, burst=2, clock=lambda: now[0], sleep=sleep)
    waits = [rl.acquire() for _ in range(4)]
    assert waits == [0.0, 0.0, 0.25, 0.25] and slept == [0.25, 0.25]
    now[0] += 10  # idle time refills the bucket, capped at the burst
    assert [rl.acquire() for _ in range(3)] == [0.0, 0.0, 0.25]


def test_pool_reuses_wiped_sessions_and_caps_idle(sandbox):
    if not sandbox.reusable_sessions:
        pytest.skip(f"{sandbox.name} sessions are not safely reusable here")
    pool = SandboxPool(sandbox, max_idle=1, creation_rate=1000.0)
    a, b = pool.acquire(), pool.acquire()
    a.write_files({"secret": "from episode 1"})
    pool.release(a)
    pool.release(b)  # over max_idle: closed
    assert b.closed and pool.stats["created"] == 2 and pool.stats["discarded"] == 1
    with pool.session() as c:
        assert c is a and c.list_files() == []
    assert pool.stats["reused"] == 1
    pool.close()
    assert a.closed


def test_pool_never_reuses_sessions_the_backend_cannot_wipe_safely():
    sb = _rlimit()
    sb.drops_uid = False  # as when running as root with a private interpreter: no uid to reap by
    pool = SandboxPool(sb, max_idle=4)
    with pool.session() as s:
        pass
    assert s.closed and pool.stats["discarded"] == 1
    with pool.session() as t:
        assert t is not s
    pool.close()
    sb.close()


def test_cli_lists_backends_and_runs_code(capsys):
    from turngym.cli import main

    assert main(["sandbox"]) == 0
    listing = capsys.readouterr().out
    assert listing.splitlines()[0].startswith("bubblewrap") and "docker" in listing
    assert main(["sandbox", "--python", "print(6 * 7)"]) == 0
    assert capsys.readouterr().out == "42\n"


def test_copy_in_and_changed_paths(sandbox, tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (repo / "test_mod.py").write_text("from pkg.mod import f\nassert f() == 1\nprint('ok')\n")
    (repo / "link").symlink_to("/etc/passwd")
    with sandbox.open_session() as s:
        assert s.copy_in(repo, "repo") == 2
        before = s.snapshot()
        res = s.run(f"cd repo && {sandbox.python.executable} -S -B test_mod.py")
        assert res.ok and res.stdout == "ok\n", res.summary()
        s.write_files({"repo/pkg/mod.py": "def f():\n    return 2\n"})
        assert s.snapshot().changed_paths(before) == ["repo/pkg/mod.py"]
