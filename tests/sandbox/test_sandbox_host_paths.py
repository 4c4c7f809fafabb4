"""An interpreter or venv under the host's /tmp or /work is visible to bubblewrap-sandboxed code.

bubblewrap gives every run its own /tmp and binds the session's workdir at /work; a venv living
under either host path (common in containers and CI) used to be hidden by those mounts, so
``run_python`` through it could not even start its interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest

from turngym.sandbox import BubblewrapSandbox, Limits, PythonRuntime, SandboxUnavailable, WarmPython

FAST = Limits(wall_s=10.0, cpu_s=10.0, memory_mb=512, processes=32, output_bytes=100_000, file_size_mb=8, disk_mb=32)

PROBE = (
    "import os, sys, venv_marker\n"
    "print(sys.prefix, venv_marker.VALUE, os.getcwd(), open('in.txt').read(), sep='|')\n"
    "open('out.txt', 'w').write('written')\n"
)


@pytest.fixture(params=["/tmp", "/work"])
def venv(request) -> Path:
    """A real venv (``--system-site-packages``) under the host's ``/tmp`` or ``/work``, with a module of its own."""
    parent = Path(request.param)
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        pytest.skip(f"the host has no writable {parent}")
    path = parent / f"turngym-venv-{uuid.uuid4().hex[:8]}"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)], check=True, timeout=60)
    try:
        purelib = sysconfig.get_path("purelib", vars={"base": str(path), "platbase": str(path)})
        Path(purelib).mkdir(parents=True, exist_ok=True)
        (Path(purelib) / "venv_marker.py").write_text("VALUE = 42\n")
        # a stranger uid (the session's) must be able to reach the venv, as it would any interpreter
        os.chmod(path, 0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _sandbox(venv: Path) -> BubblewrapSandbox:
    # no -S: the venv's own site (pyvenv.cfg) sets sys.prefix and finds its site-packages
    runtime = PythonRuntime(executable=str(venv / "bin" / "python"), flags=("-B",), path=())
    try:
        return BubblewrapSandbox(FAST, python=runtime)
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")


def test_run_python_through_a_venv_under_tmp_or_work(venv):
    sb = _sandbox(venv)
    try:
        with sb.open_session() as s:
            wd = s.workdir
            assert not (wd == str(venv) or str(venv).startswith(wd + "/") or wd.startswith(str(venv) + "/"))
            s.write_files({"in.txt": "given"})
            res = s.run_python(PROBE)
            assert res.ok, res.stderr
            assert res.stdout == f"{venv}|42|{wd}|given\n"
            assert s.read_file("out.txt") == b"written"
            assert s.snapshot().files == {"in.txt": b"given", "out.txt": b"written"}  # no mount points planted
            # the private /tmp is still private and writable; the venv in it is read-only
            res = s.run_python(f"import os\nopen('/tmp/x', 'w').write('1')\nprint(os.access({str(venv)!r}, os.W_OK))")
            assert res.ok and res.stdout == "False\n", res.stderr
    finally:
        sb.close()


def test_warm_worker_through_a_venv_survives_resets(venv):
    sb = _sandbox(venv)
    try:
        with sb.open_session() as s, WarmPython(s) as warm:
            s.write_files({"in.txt": "given"})
            first = warm.run(PROBE)
            assert first.ok and first.stdout == f"{venv}|42|{s.workdir}|given\n", first.stderr
            assert warm.run("open('/tmp/left', 'w').write('secret'); import os; os.makedirs('/tmp/a/b')").ok
            pid = warm._proc.pid
            s.reset()
            s.write_files({"in.txt": "again"})
            again = warm.run("import os\nprint(sorted(os.listdir('/tmp')), open('in.txt').read())")
            assert again.ok, again.stderr
            listed = again.stdout.split("] ")[0] + "]"
            assert "left" not in listed and "'a'" not in listed and again.stdout.endswith(" again\n")
            # the wipe kept the venv's mount point and still counted /tmp as clean: the same worker
            assert warm._proc.pid == pid
    finally:
        sb.close()


def test_the_workdir_moves_only_when_a_host_dir_is_there():
    from turngym.sandbox.local import _pick_workdir

    assert _pick_workdir(["/usr", "/etc", "/root/.pyenv/versions/3.11.7"]) == "/work"
    assert _pick_workdir(["/usr", "/work/main/.venv"]) == "/workdir"
    assert _pick_workdir(["/usr", "/work", "/workdir/x"]) == "/sandbox/work"
    assert _pick_workdir(["/sandbox", "/work", "/workdir"]) == "/.turngym-sandbox/work"


def test_removing_a_session_tree_never_changes_its_parents_mode(tmp_path) -> None:
    """The cleanup opens up 000 directories *inside* the tree it removes, and never touches the
    parent: when the error is about the tree's own root (already gone, a race between two reapers)
    the parent is the shared temp dir, and a 0700 ``/tmp`` locks every other user and apt out."""
    import os
    import stat

    from turngym.sandbox.local import _rmtree

    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(0o1777)
    _rmtree(str(parent / "already-gone"))  # the error is about the root itself
    assert stat.S_IMODE(os.stat(parent).st_mode) == 0o1777
    tree = parent / "session"
    (tree / "locked" / "deep").mkdir(parents=True)
    (tree / "locked" / "deep" / "f").write_text("x")
    (tree / "locked").chmod(0)  # what a sandboxed program may leave behind
    _rmtree(str(tree))
    assert not tree.exists() and stat.S_IMODE(os.stat(parent).st_mode) == 0o1777
    from turngym.sandbox.local import _force_remove

    outside = tmp_path / "host"  # a link the program planted inside its tree, pointing out of it
    outside.mkdir(mode=0o755)
    tree.mkdir()
    (tree / "link").symlink_to(outside)
    _force_remove(os.rmdir, str(tree / "link" / "x"), str(tree))
    assert stat.S_IMODE(os.stat(outside).st_mode) == 0o755
