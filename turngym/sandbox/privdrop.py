"""Dropping to the session's untrusted uid with no capability left (stdlib only).

Programs that run *inside* a sandbox as trusted graders (Code-v0's harness, SWE-v0's split
grader, the warm worker) start the code they judge under another uid, so that code cannot signal,
stop, throttle or read them. They run as ``python -I -S -B -c <source>`` and cannot import
turngym, so this module travels into them as text (:func:`turngym.sandbox.inline.inline_module`);
one copy keeps the three drops identical.
"""

import os

__all__ = ["UNTRUSTED_UID_ENV", "drop_privileges"]

#: Where a trusted launch names the uid its untrusted children must run as.
UNTRUSTED_UID_ENV = "TURNGYM_UNTRUSTED_UID"
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4


def drop_privileges(uid):
    """Become ``uid`` (keeping the gid, which owns the workdir) with no capability in any set;
    raises OSError if any step fails (the caller must then not run the untrusted code)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):  # the bounding set (EINVAL past the last capability)
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            raise OSError(ctypes.get_errno(), "cannot drop the capability bounding set")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    gid = os.getgid()
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:
        raise OSError(ctypes.get_errno(), "cannot clear the capability sets")
    if os.getresuid() != (uid, uid, uid):
        raise OSError(1, "the uid did not change")
