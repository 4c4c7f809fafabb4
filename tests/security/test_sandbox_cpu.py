"""A sandbox's CPU is capped as a whole: a burn in many processes cannot starve the others.

Each session's cgroup has a CPU quota (``Limits.cpu_cores``) and a weight in proportion. The
assertion that matters is deterministic even on a busy 2-core machine: what the burners
measured of their own CPU (``getrusage`` of every process) is at most their quota times their
wall time, with a little slack -- a busy machine only gives them less. Without the quota, 16
spinning processes take far more than a quarter core unless the machine is saturated 60 times
over. A bystander sandbox started meanwhile is reported and held to a loose bound.
"""

from __future__ import annotations

import threading
import time

import pytest

from turngym.sandbox import BubblewrapSandbox, Limits, SandboxUnavailable

#: 16 processes spin for 1.5 s; the parent prints the CPU seconds of all of them and its wall span.
#: Each child starts a session of its own: with the kernel's autogroups (on by default), a
#: session is a scheduling entity of its own, so without a cgroup 16 sessions weigh 16 times
#: what one does.
BURN = (
    "import os, resource, time\n"
    "t0 = time.monotonic()\n"
    "kids = []\n"
    "for _ in range(15):\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        os.setsid()  # a session of its own: an autogroup of its own, where the kernel has them\n"
    "        break\n"
    "    kids.append(pid)\n"
    "end = t0 + 1.5\n"
    "while time.monotonic() < end:\n"
    "    pass\n"
    "if kids or pid != 0:\n"
    "    for k in kids:\n"
    "        os.waitpid(k, 0)\n"
    "    me, ch = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "    print(me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime, time.monotonic() - t0)\n"
    "else:\n"
    "    os._exit(0)\n"
)
QUOTA = 0.25
SLACK = 1.25  # the CFS quota is kept per 100 ms period; allow a quarter over the average
N_BURNERS = 3


def test_a_cpu_burn_is_held_to_the_quota_and_a_bystander_starts_promptly():
    try:
        burners = BubblewrapSandbox(Limits(wall_s=30, cpu_s=30, cpu_cores=QUOTA))
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")
    bystander = BubblewrapSandbox(Limits(wall_s=10))
    try:
        if burners.cgroup_host is None or not burners.cgroup_host.cpu:
            pytest.skip("no writable cgroup with a cpu controller here: cpu_cores is not enforced (a warning says so)")
        sessions = [burners.open_session() for _ in range(N_BURNERS)]
        results: dict[int, object] = {}
        threads = [threading.Thread(target=lambda i=i, s=s: results.__setitem__(i, s.run_python(BURN)))
                   for i, s in enumerate(sessions)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sum(len(s.cgroup.procs()) for s in sessions) < 8 * N_BURNERS:
            time.sleep(0.02)  # the burn is under way
        latencies = []
        for _ in range(3):
            t = time.monotonic()
            res = bystander.run_python("print(1)")
            latencies.append(time.monotonic() - t)
            assert res.ok and res.stdout == "1\n", res
        for t in threads:
            t.join()
        for i, s in enumerate(sessions):
            res = results[i]
            assert res.ok, res  # type: ignore[attr-defined]
            cpu, wall = (float(x) for x in res.stdout.split())  # type: ignore[attr-defined]
            assert cpu <= QUOTA * wall * SLACK + 0.1, (i, cpu, wall)
            stat = s.cgroup.cpu_stat()  # the kernel's own count, the launcher and start-up included
            assert stat is not None and stat.usage_s <= QUOTA * res.duration_s * SLACK + 0.1, (i, stat, res.duration_s)  # type: ignore[attr-defined]
            s.close()
        assert max(latencies) < 5.0, latencies  # the zygote of an env waits 20 s for its start
    finally:
        burners.close()
        bystander.close()


def test_the_quota_follows_the_limits_and_is_reported():
    try:
        sb = BubblewrapSandbox(Limits(cpu_cores=1.5))
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")
    try:
        if sb.cgroup_host is None or not sb.cgroup_host.cpu:
            pytest.skip("no writable cgroup with a cpu controller here")
        assert "CPU quota" in sb.enforced_by()["cpu_cores"]
        with sb.open_session() as s:
            assert s.cgroup is not None and s.cgroup.has_cpu
            assert _quota(s.cgroup) == 1.5
            s.run(["true"], limits=s.limits.replace(cpu_cores=0.5))  # a run's own limits apply to the session
            assert _quota(s.cgroup) == 0.5
    finally:
        sb.close()


def _quota(cg) -> float:  # type: ignore[no-untyped-def]
    import os

    cpu = cg._dir("cpu")
    if cg.version == 2:
        quota, period = open(os.path.join(cpu, "cpu.max")).read().split()
    else:
        quota, period = open(os.path.join(cpu, "cpu.cfs_quota_us")).read(), open(os.path.join(cpu, "cpu.cfs_period_us")).read()
    return int(quota) / int(period)


def test_without_a_cpu_cgroup_a_warning_says_so_once(monkeypatch):
    """Where no cgroup is writable (rootless; here: a parent that does not exist), the quota
    cannot hold: one warning per process names the bound that remains and the fix."""
    import warnings

    import turngym.sandbox.local as local
    from turngym.sandbox import CpuLimitWarning

    monkeypatch.setattr(local, "_warned_cpu", False)
    made = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                made.append(BubblewrapSandbox(cgroup_parent="/nonexistent/turngym-cgroup"))
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")
    finally:
        for sb in made:
            sb.close()
    cpu = [w for w in caught if issubclass(w.category, CpuLimitWarning)]
    assert len(cpu) == 1, [str(w.message) for w in caught]
    assert "cpu_s per process times Limits.processes" in str(cpu[0].message) and "TURNGYM_CGROUP_PARENT" in str(cpu[0].message)
    assert made[0].enforced_by()["cpu_cores"].startswith("not enforced")
