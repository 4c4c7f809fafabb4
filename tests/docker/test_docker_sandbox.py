"""The container backend passes the bubblewrap backend's own suites, against a real engine.

The attack cases and API checks are *the same functions* as ``tests/sandbox`` runs on
bubblewrap (imported from those files, not copied): here their ``bwrap`` / ``any_backend`` /
``sandbox`` fixtures are a :class:`DockerSandbox`. Cases that are about the host-directory
backends only (the rlimit backend, the uid range, bubblewrap's interpreter binds) stay there.
Below them: what is specific to containers, above all that a session is left clean after a
time-out or a limit hit (nothing survives to hold the pid limit or tamper with the next run).
"""

from __future__ import annotations

import pytest

from tests.docker.conftest import ROOT, load_path
from turngym.sandbox import Limits, SandboxPool, make_sandbox
from turngym.sandbox.docker import DockerSandbox

_security = load_path("turngym_bwrap_security_cases", ROOT / "tests/sandbox/test_sandbox_security.py")
_api = load_path("turngym_bwrap_api_cases", ROOT / "tests/sandbox/test_sandbox_api.py")
FAST = _security.FAST

# -- the bubblewrap suites, on containers ---------------------------------------------------
test_loopback_of_the_host_is_unreachable = _security.test_loopback_of_the_host_is_unreachable
test_public_network_is_unreachable_without_sending_anything = _security.test_public_network_is_unreachable_without_sending_anything
test_writing_outside_the_workdir_fails = _security.test_writing_outside_the_workdir_fails
test_private_tmp_does_not_reach_the_host = _security.test_private_tmp_does_not_reach_the_host
test_host_files_outside_the_python_install_are_invisible = _security.test_host_files_outside_the_python_install_are_invisible
test_one_session_cannot_read_another = _security.test_one_session_cannot_read_another
test_killing_the_parent_or_the_host_does_nothing = _security.test_killing_the_parent_or_the_host_does_nothing
test_no_daemon_survives_the_run = _security.test_no_daemon_survives_the_run
test_fork_bomb_is_capped = _security.test_fork_bomb_is_capped
test_memory_bomb = _security.test_memory_bomb
test_infinite_loop_hits_the_cpu_limit = _security.test_infinite_loop_hits_the_cpu_limit
test_sleep_past_the_wall_limit = _security.test_sleep_past_the_wall_limit
test_stdout_flood_is_cut = _security.test_stdout_flood_is_cut
test_huge_file_is_refused = _security.test_huge_file_is_refused
test_many_files_hit_the_disk_limit = _security.test_many_files_hit_the_disk_limit
test_output_of_a_contained_attack_is_still_reported = _security.test_output_of_a_contained_attack_is_still_reported
test_deep_and_locked_trees_do_not_break_the_host_side = _security.test_deep_and_locked_trees_do_not_break_the_host_side

test_run_python_returns_output_and_status = _api.test_run_python_returns_output_and_status
test_run_shell_command_with_files_and_stdin = _api.test_run_shell_command_with_files_and_stdin
test_each_one_shot_run_gets_a_fresh_workdir = _api.test_each_one_shot_run_gets_a_fresh_workdir
test_session_keeps_files_between_commands = _api.test_session_keeps_files_between_commands
test_snapshot_and_restore_roundtrip = _api.test_snapshot_and_restore_roundtrip
test_reset_empties_the_workdir = _api.test_reset_empties_the_workdir
test_host_never_follows_links_planted_by_the_sandboxed_code = _api.test_host_never_follows_links_planted_by_the_sandboxed_code
test_paths_must_stay_inside_the_workdir = _api.test_paths_must_stay_inside_the_workdir
test_closed_session_refuses_work_and_deletes_its_dir = _api.test_closed_session_refuses_work_and_deletes_its_dir
test_large_source_is_written_to_a_file = _api.test_large_source_is_written_to_a_file
test_environment_does_not_leak_host_variables = _api.test_environment_does_not_leak_host_variables
test_pool_reuses_wiped_sessions_and_caps_idle = _api.test_pool_reuses_wiped_sessions_and_caps_idle
test_copy_in_and_changed_paths = _api.test_copy_in_and_changed_paths


@pytest.fixture
def docker_sb(docker_client, sandbox_image, no_leaks):
    sb = DockerSandbox(FAST, image=sandbox_image, client=docker_client)
    yield sb
    sb.close()


@pytest.fixture
def bwrap(docker_sb):  # the security suite's isolation fixture
    return docker_sb


@pytest.fixture
def any_backend(docker_sb):  # the security suite's limits fixture
    return docker_sb


@pytest.fixture
def sandbox(docker_client, sandbox_image, no_leaks):  # the API suite's fixture (default limits)
    sb = DockerSandbox(image=sandbox_image, client=docker_client)
    yield sb
    sb.close()


# -- containers only ------------------------------------------------------------------------
def test_make_sandbox_docker_and_the_image_override(docker_client, sandbox_image, monkeypatch):
    monkeypatch.setenv("TURNGYM_DOCKER_IMAGE", sandbox_image)
    sb = make_sandbox("docker", FAST)
    try:
        assert sb.name == "docker" and sb.isolated and sb.image == sandbox_image
    finally:
        sb.close()


@pytest.mark.parametrize(
    "attack",
    [
        "import os, time\nfor _ in range(10):\n    if os.fork() == 0:\n        time.sleep(600)\ntime.sleep(600)",  # sleepers past the wall limit
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",  # bomb that keeps the pid limit full
        # kill the run's own wrapper (it would have reaped), then leave a full pid limit behind
        "import os, signal, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(0.3)\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            time.sleep(0.01)\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)",
    ],
    ids=["sleepers", "bomb", "wrapper-killed-then-bomb"],
)
def test_session_is_left_clean_after_a_timeout_or_limit_hit(docker_sb, attack):
    with docker_sb.open_session(FAST.replace(wall_s=1.5)) as s:
        s.write_files({"keep.txt": "mine"})
        res = s.run_python(attack)
        assert not res.ok
        assert s.process_count() == 2, "a process of the run outlived it"  # docker-init + sleep
        after = s.run_python("import os; print(len(os.listdir('/proc')) > 0, open('keep.txt').read())")
        assert after.ok and after.stdout == "True mine\n", after.summary()
        assert s.run("echo alive").stdout == "alive\n"


def test_stdin_handoff_file_is_not_left_in_the_workdir(docker_sb):
    with docker_sb.open_session() as s:
        res = s.run("cat; ls -A", stdin="payload\n")
        assert res.ok and res.stdout == "payload\n", res.summary()
        assert s.list_files() == []


def test_planted_parent_link_is_replaced_not_followed(docker_sb):
    with docker_sb.open_session() as s:
        assert s.run("ln -s /tmp d && ln -s /etc/passwd f").ok
        s.write_files({"d/x.txt": "in the workdir", "f": "replaced"})
        assert s.run("test -d d && ! test -L d && cat d/x.txt && ls /tmp").stdout == "in the workdir"
        assert s.read_file("f") == b"replaced"


def test_pool_hands_a_clean_container_to_the_next_episode(docker_sb):
    pool = SandboxPool(docker_sb, max_idle=1, creation_rate=1000.0)
    a = pool.acquire()
    a.run_python("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(600)", limits=FAST.replace(wall_s=1))
    a.write_files({"secret": "episode 1"})
    pool.release(a)
    with pool.session() as b:
        assert b is a and b.list_files() == [] and b.process_count() == 2
        assert "sleep" not in b.run("ps -eo comm 2>/dev/null || ls /proc").stdout.replace("sleep\n", "", 1)
    pool.close()


def test_one_shot_runs_reuse_containers_and_stay_independent(docker_client, sandbox_image, no_leaks):
    sb = DockerSandbox(Limits(wall_s=5), image=sandbox_image, client=docker_client, max_idle=1)
    try:
        assert sb.run("echo x > left.txt && echo ok").stdout == "ok\n"
        (idle,) = sb._idle
        assert sb.run("ls -A").stdout == ""
        assert sb._idle == [idle]  # the same container, wiped
    finally:
        sb.close()


def test_one_shot_run_that_kills_its_own_wipe_does_not_leak_into_the_next(docker_client, sandbox_image, no_leaks):
    sb = DockerSandbox(FAST, image=sandbox_image, client=docker_client, max_idle=1)
    try:
        attack = (
            "import os, signal\nopen('left.txt', 'w').write('secret')\nopen('/tmp/left', 'w').write('secret')\n"
            "os.kill(-1, signal.SIGKILL)  # the wrapper shell that would have wiped dies here"
        )
        sb.run_python(attack)
        assert sb.run("ls -A /work /tmp").stdout == "/tmp:\n\n/work:\n"
        assert "secret" not in sb.run("cat left.txt /tmp/left 2>&1").stdout
        (idle,) = sb._idle
        idle.write_files({"planted": "x"})
        assert not idle.is_pristine()  # the host sees the file; the next borrower gets a wipe
    finally:
        sb.close()


_cpu = load_path("turngym_cpu_cases", ROOT / "tests/security/test_sandbox_cpu.py")


def test_a_cpu_burn_is_held_to_the_containers_quota(docker_client, sandbox_image, no_leaks):
    """``Limits.cpu_cores`` is the container's ``nano_cpus`` (its weight follows): 16 processes,
    each in a session of its own, get no more than the quota between them."""
    sb = DockerSandbox(Limits(wall_s=30, cpu_s=30, cpu_cores=_cpu.QUOTA), image=sandbox_image, client=docker_client)
    try:
        with sb.open_session() as s:
            host = s.container.attrs["HostConfig"]
            assert host["NanoCpus"] == int(_cpu.QUOTA * 1e9) and host["CpuShares"] == int(1024 * _cpu.QUOTA), host
            res = s.run_python(_cpu.BURN)
        assert res.ok, res
        cpu, wall = (float(x) for x in res.stdout.split())
        assert cpu <= _cpu.QUOTA * wall * _cpu.SLACK + 0.1, (cpu, wall)
    finally:
        sb.close()


def test_more_cores_than_the_engine_has_is_capped_not_refused(docker_client, sandbox_image, no_leaks):
    sb = DockerSandbox(Limits(wall_s=10, cpu_cores=1000.0), image=sandbox_image, client=docker_client)
    try:
        with sb.open_session() as s:
            assert s.container.attrs["HostConfig"]["NanoCpus"] == int(sb.engine_cpus * 1e9)
            assert s.run("echo ok").stdout == "ok\n"
    finally:
        sb.close()
