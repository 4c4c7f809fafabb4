"""Hardening of the trusted programs inside a sandbox (stdlib only; runs inlined there too).

Programs that run *inside* a sandbox as trusted graders (Code-v0's harness, SWE-v0's graders,
the warm worker) judge code that runs beside them:

* :func:`set_dumpable`: a non-dumpable process cannot be ptraced, nor its ``/proc/PID/mem``,
  ``fd`` or ``environ`` opened, by processes of the same uid, so the code under test cannot read
  a grader's secrets (tests, nonce) nor write to its memory or streams. A fresh interpreter is
  dumpable again, and a uid change clears the flag, so each program sets it itself.
* :func:`path_outside`: nothing is imported from where the code under test writes (the
  working dir, where ``-c`` would put ``''``): it may have planted modules there.
* :func:`drop_privileges`: where the sandbox lends a second uid (``UNTRUSTED_UID_ENV``, with
  the capabilities to switch to it: bubblewrap as root), the code under test starts as that uid
  with no capability left, so it cannot signal, stop, throttle or read its grader at all.

One copy keeps every program's drop identical.
"""

import os
import sys

__all__ = ["UNTRUSTED_UID_ENV", "address_space_note", "drop_privileges", "path_outside", "pop_untrusted_uid", "set_dumpable"]

#: Where a trusted launch names the uid its untrusted children must run as.
UNTRUSTED_UID_ENV = "TURNGYM_UNTRUSTED_UID"
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4


def set_dumpable(flag, required=False):
    """``prctl(PR_SET_DUMPABLE, flag)``; whether it took. Where there is no ``prctl`` (not
    Linux, no ``ctypes``) the sandbox's uid separation still applies and False is returned,
    unless ``required``: then OSError (the caller must not go on)."""
    try:
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, flag, 0, 0, 0) == 0:
            return True
        error = OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")
    except Exception as exc:  # noqa: BLE001 - no ctypes, no libc, no prctl
        error = OSError(f"prctl(PR_SET_DUMPABLE) is not available ({type(exc).__name__})")
    if required:
        raise error
    return False


def pop_untrusted_uid():
    """The untrusted uid this launch names (None if none), taken out of the environment so
    nothing started later inherits it."""
    return int(os.environ.pop(UNTRUSTED_UID_ENV, "0") or 0) or None


def path_outside(root, extra=()):
    """``sys.path`` becomes its entries outside ``root`` (``''`` and relative ones resolved
    against the working dir; with ``root`` ``/``, only ``''`` goes), then ``extra``; the import
    system's cache of finders is dropped. Returns how many entries were kept before ``extra``."""
    prefix = os.path.join(os.path.abspath(root), "")

    def inside(path):
        return not path or (prefix != "/" and os.path.join(os.path.abspath(path), "").startswith(prefix))

    keep = [p for p in sys.path if not inside(p)]
    sys.path[:] = keep + [d for d in extra if d not in keep]
    sys.path_importer_cache.clear()
    return len(keep)


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


def address_space_note():
    """``"; address space limited to N MiB"`` when ``RLIMIT_AS`` bounds this process, else ``""``.

    A grader whose own imports fail under a small memory limit sees an ``ImportError`` (a C
    extension that cannot map its library), which names no limit: its report adds this."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return ""
    return "" if soft == resource.RLIM_INFINITY else f"; address space limited to {soft >> 20} MiB (raise Limits.memory_mb)"
