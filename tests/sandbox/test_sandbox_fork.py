"""A forked child that drops its copy of a sandbox must not delete the parent's live directories.

Forking copies every sandbox and session object; when the child garbage-collects or exits, their
finalizers ran in the child and removed the parent's root and session workdirs (a shared MCP
server's workdir vanished under the parent this way, in a test that forks). Cleanup now happens
only in the process that created them.
"""

from __future__ import annotations

import gc
import os

import pytest

from turngym.sandbox.base import Limits
from turngym.sandbox.local import BubblewrapSandbox

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def test_a_forked_child_leaves_the_parents_sandbox_alone() -> None:
    sb = BubblewrapSandbox(Limits())
    session = sb.open_session(Limits())
    root, workdir = sb._root, session.host_dir
    pid = os.fork()
    if pid == 0:  # the child: drop every copy, collect, exit
        del session, sb
        gc.collect()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.path.isdir(root) and os.path.isdir(workdir), "the child's finalizers deleted the parent's dirs"
    session.close()
    sb.close()
    assert not os.path.exists(workdir) and not os.path.exists(root), "the owner still cleans up"
