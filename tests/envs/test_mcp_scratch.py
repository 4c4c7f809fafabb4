"""What counts as a file an MCP server left in its private ``/tmp`` (``SandboxedServer.scratch_used``).

Such a file outlives the call's episode, so the env restarts the server after it. The sandbox
itself puts mount points there when the interpreter or a venv lives under the host's ``/tmp``
(a fresh venv in ``/tmp/...``): counted as the server's, they made *every* call restart the
server in such a venv (README line 2's test suite then failed its MCP blame test).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import pytest

from turngym.envs.mcp.server import SandboxedServer, holds_files, mount_points

pytest.importorskip("mcp_server_sqlite")

from turngym.envs.mcp.sqlite_env import sqlite_server  # noqa: E402
from turngym.envs.mcp.sqlite_tasks import build_database, generate_sqlite_task  # noqa: E402


def _tree(root: Path, *paths: str) -> None:
    for p in paths:
        (root / p.lstrip("/")).mkdir(parents=True, exist_ok=True)


def test_mount_points_and_the_dirs_made_for_them_are_not_files(tmp_path: Path) -> None:
    _tree(tmp_path, "/tmp/host/venv/lib", "/dev/shm")
    mounts = frozenset({"/tmp", "/tmp/host/venv", "/dev/shm"})
    assert not holds_files(str(tmp_path), "/tmp", mounts)
    assert not holds_files(str(tmp_path), "/dev/shm", mounts)


@pytest.mark.parametrize("planted", ["/tmp/x.db", "/tmp/host/x.db", "/tmp/host/sub/", "/dev/shm/sem.x", "/tmp/other/venv/"])
def test_anything_else_is_a_file(tmp_path: Path, planted: str) -> None:
    _tree(tmp_path, "/tmp/host/venv/lib", "/dev/shm")
    target = tmp_path / planted.lstrip("/")
    if planted.endswith("/"):
        target.mkdir(parents=True)
    else:
        target.write_bytes(b"x")
    mounts = frozenset({"/tmp", "/tmp/host/venv", "/dev/shm"})
    assert holds_files(str(tmp_path), "/tmp", mounts) or holds_files(str(tmp_path), "/dev/shm", mounts)


def test_a_link_where_a_mount_leads_is_not_followed(tmp_path: Path) -> None:
    """A directory on the way to a mount point that is a link counts as a file: never walked."""
    _tree(tmp_path, "/tmp", "/elsewhere/venv")
    (tmp_path / "tmp/host").symlink_to(tmp_path / "elsewhere")
    assert holds_files(str(tmp_path), "/tmp", frozenset({"/tmp", "/tmp/host/venv"}))


def test_mount_points_read_escaped_paths() -> None:
    mounts = mount_points(os.getpid())
    assert "/" in mounts and "/proc" in mounts


@pytest.fixture
def shown_tmp_dir():
    """A host directory under ``/tmp`` the sandbox shows (as a venv in ``/tmp`` is shown)."""
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="turngym-shown-") as d:
        (Path(d) / "venv").mkdir()
        yield str(Path(d) / "venv")


def test_a_server_with_a_host_dir_under_tmp_keeps_running(shown_tmp_dir: str) -> None:
    spec = dataclasses.replace(sqlite_server(), ro_binds=(shown_tmp_dir,))
    server = SandboxedServer(spec)
    try:
        Path(server.session.host_dir, spec.world_file).write_bytes(build_database(generate_sqlite_task(1).setup))
        server.start()
        assert server.client is not None
        assert "employees" in server.client.call("list_tables", {}, 30.0).text
        pid = server._pid()
        assert pid is not None
        assert not server.scratch_used(), "the sandbox's own mount under /tmp was counted as the server's file"
        server.client.call("write_query", {"query": "VACUUM INTO '/tmp/x.db'"}, 30.0)
        assert server.scratch_used(), "a file the server wrote into its /tmp was missed"
    finally:
        server.close()
