"""A seccomp deny-list for sandboxed code, compiled to classic BPF in pure Python.

Why a filter at all: namespaces and dropped capabilities already stop most of what the calls
below could do, but each of them is a large, historically buggy kernel surface that no
program graded here needs (new user namespaces are the classic way to regain capabilities
and reach kernel code that is otherwise root-only; ``ptrace`` / ``process_vm_*`` /
``pidfd_getfd`` read or steal from processes of the same uid; ``io_uring``, ``bpf``,
``userfaultfd`` and ``perf_event_open`` are the usual exploit primitives). Denying them costs
nothing at run time: the filter is a few dozen BPF instructions evaluated per system call.

Why pure Python: bubblewrap takes a compiled program (``--seccomp FD``) and libseccomp's
Python binding is rarely installed. Classic BPF is small enough to assemble here:
:func:`assemble` resolves labels into the forward jump offsets BPF needs, and
:func:`build_filter` emits the program.

The program, for each system call:

1. checks the architecture field of ``seccomp_data`` first -- system call numbers mean
   different things per ABI, so a filter that skipped this could be bypassed by switching
   ABI (``int 0x80`` on x86_64 reports ``AUDIT_ARCH_I386``). Only x86_64 and aarch64 are
   allowed; any other ABI (i386, and x32 numbers on x86_64) gets ``EPERM`` for every call;
2. denies the listed calls with ``EPERM`` (a clean error the program can handle, not a kill);
3. lets ``clone`` through unless it asks for a new namespace (threads and ``fork`` still
   work), answers ``clone3`` with ``ENOSYS`` (its flags live in memory a filter cannot read;
   glibc then falls back to ``clone``), allows only the querying/default forms of
   ``personality`` (changing it disables ASLR), and denies the ``TIOCSTI``/``TIOCLINUX``
   ioctls that push input into a terminal.
"""

from __future__ import annotations

import errno
import os
import platform
import struct
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Insn", "assemble", "build_filter", "DENIED_SYSCALLS", "filter_bytes", "supported_arch"]

# -- classic BPF encoding (linux/filter.h, linux/bpf_common.h) -------------------------------
BPF_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS: A = *(u32 *)(data + k)
BPF_JEQ_K = 0x05 | 0x10  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x05 | 0x30  # BPF_JMP | BPF_JGE | BPF_K
BPF_JSET_K = 0x05 | 0x40  # BPF_JMP | BPF_JSET | BPF_K: jump if A & k
BPF_RET_K = 0x06  # BPF_RET | BPF_K

SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000

# struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
_OFF_NR, _OFF_ARCH, _OFF_ARGS = 0, 4, 16


def _arg_lo(i: int) -> int:
    """Offset of the low 32 bits of argument ``i`` (every check below needs only those)."""
    return _OFF_ARGS + 8 * i + (0 if sys.byteorder == "little" else 4)


# Flags of clone() that create namespaces. CLONE_NEWTIME (0x80) is left out: in clone()'s
# first argument those bits are the exit signal, and unshare/clone3 are refused anyway.
CLONE_NEW_MASK = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_PERSONALITY_OK = (0x0, 0xFFFFFFFF)  # PER_LINUX, and the "query only" argument

#: System calls refused with EPERM, by name (numbers per architecture below).
DENIED_SYSCALLS: tuple[str, ...] = (
    # namespaces and mounts: no new namespaces, no mount table changes, no chroot tricks
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount",
    "fspick", "move_mount", "open_tree", "mount_setattr",
    # reading or controlling other processes (same uid is not enough of a boundary)
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    # kernel keyring, eBPF, perf, userfaultfd, io_uring: large attack surfaces
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # the machine itself: modules, kexec, reboot, swap, clocks, accounting, quotas, I/O ports
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "iopl", "ioperm", "settimeofday", "clock_settime", "adjtimex",
    "clock_adjtime", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup", "uselib", "lookup_dcookie",
    # file handles bypass path-based confinement (the "shocker" escape)
    "open_by_handle_at", "name_to_handle_at",
    "fanotify_init", "memfd_secret",
)  # fmt: skip

_X86_64: dict[str, int] = {
    "unshare": 272, "setns": 308, "clone": 56, "clone3": 435, "mount": 165, "umount2": 166,
    "pivot_root": 155, "chroot": 161, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
    "userfaultfd": 323, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168,
    "iopl": 172, "ioperm": 173, "open_by_handle_at": 304, "name_to_handle_at": 303,
    "personality": 135, "ioctl": 16, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "move_mount": 429, "open_tree": 428, "mount_setattr": 442, "acct": 163, "settimeofday": 164,
    "clock_settime": 227, "adjtimex": 159, "clock_adjtime": 305, "syslog": 103, "quotactl": 179,
    "quotactl_fd": 443, "lookup_dcookie": 212, "vhangup": 153, "uselib": 134, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "pidfd_getfd": 438, "memfd_secret": 447,
    "fanotify_init": 300,
}  # fmt: skip

# aarch64 uses the generic table (asm-generic/unistd.h); iopl, ioperm and uselib do not exist.
_AARCH64: dict[str, int] = {
    "unshare": 97, "setns": 268, "clone": 220, "clone3": 435, "mount": 40, "umount2": 39,
    "pivot_root": 41, "chroot": 51, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
    "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
    "userfaultfd": 282, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
    "finit_module": 273, "delete_module": 106, "reboot": 142, "swapon": 224, "swapoff": 225,
    "open_by_handle_at": 265, "name_to_handle_at": 264, "personality": 92, "ioctl": 29, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
    "mount_setattr": 442, "acct": 89, "settimeofday": 170, "clock_settime": 112, "adjtimex": 171,
    "clock_adjtime": 266, "syslog": 116, "quotactl": 60, "quotactl_fd": 443, "lookup_dcookie": 18,
    "vhangup": 58, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "pidfd_getfd": 438, "memfd_secret": 447, "fanotify_init": 262,
}  # fmt: skip

_ARCHES: dict[int, tuple[str, Mapping[str, int]]] = {
    AUDIT_ARCH_X86_64: ("x86_64", _X86_64),
    AUDIT_ARCH_AARCH64: ("aarch64", _AARCH64),
}


@dataclass(frozen=True, slots=True)
class Insn:
    """One BPF instruction before assembly; jumps name labels instead of offsets.

    ``label`` marks this instruction as a jump target; ``jt``/``jf`` are label names
    (``None``: fall through to the next instruction).
    """

    code: int
    k: int = 0
    jt: str | None = None
    jf: str | None = None
    label: str | None = None


def assemble(program: Sequence[Insn]) -> bytes:
    """Resolve labels and encode ``struct sock_filter`` entries (native byte order).

    Classic BPF only jumps forward, by at most 255 instructions; both are checked.

    >>> len(assemble([Insn(BPF_RET_K, SECCOMP_RET_ALLOW)]))
    8
    >>> assemble([Insn(BPF_JEQ_K, 1, jt="x"), Insn(BPF_RET_K, 0), Insn(BPF_RET_K, 1, label="x")])[2:4]  # jt, jf
    b'\\x01\\x00'
    """
    where: dict[str, int] = {}
    for i, ins in enumerate(program):
        if ins.label is not None:
            if ins.label in where:
                raise ValueError(f"BPF label {ins.label!r} defined twice")
            where[ins.label] = i
    out = bytearray()
    for i, ins in enumerate(program):
        offs = []
        for target in (ins.jt, ins.jf):
            if target is None:
                offs.append(0)
                continue
            if target not in where:
                raise ValueError(f"BPF jump to undefined label {target!r}")
            off = where[target] - (i + 1)
            if not 0 <= off <= 255:
                raise ValueError(f"BPF jump to {target!r} from {i} is out of range ({off})")
            offs.append(off)
        if not 0 <= ins.k <= 0xFFFFFFFF:
            raise ValueError(f"BPF constant {ins.k:#x} does not fit 32 bits")
        out += struct.pack("=HBBI", ins.code, offs[0], offs[1], ins.k)
    if len(program) > 4096:  # BPF_MAXINSNS
        raise ValueError("BPF program longer than 4096 instructions")
    return bytes(out)


def _arch_block(tag: str, table: Mapping[str, int], denied: Iterable[str], first_label: str) -> list[Insn]:
    """Instructions judging one architecture's system call numbers."""
    deny, allow = f"{tag}_deny", f"{tag}_allow"
    prog = [Insn(BPF_LD_W_ABS, _OFF_NR, label=first_label)]
    if tag == "x86_64":  # x32 ABI numbers carry the same arch value: refuse them outright
        prog.append(Insn(BPF_JGE_K, X32_SYSCALL_BIT, jt=deny))
    prog += [
        Insn(BPF_JEQ_K, table["clone"], jt=f"{tag}_clone"),
        Insn(BPF_JEQ_K, table["clone3"], jt=f"{tag}_enosys"),
        Insn(BPF_JEQ_K, table["personality"], jt=f"{tag}_personality"),
        Insn(BPF_JEQ_K, table["ioctl"], jt=f"{tag}_ioctl"),
    ]
    prog += [Insn(BPF_JEQ_K, table[name], jt=deny) for name in denied if name in table]
    prog += [
        Insn(BPF_RET_K, SECCOMP_RET_ALLOW),
        Insn(BPF_LD_W_ABS, _arg_lo(0), label=f"{tag}_clone"),
        Insn(BPF_JSET_K, CLONE_NEW_MASK, jt=deny, jf=allow),
        Insn(BPF_LD_W_ABS, _arg_lo(0), label=f"{tag}_personality"),
        Insn(BPF_JEQ_K, _PERSONALITY_OK[0], jt=allow),
        Insn(BPF_JEQ_K, _PERSONALITY_OK[1], jt=allow, jf=deny),
        Insn(BPF_LD_W_ABS, _arg_lo(1), label=f"{tag}_ioctl"),
        Insn(BPF_JEQ_K, _TIOCSTI, jt=deny),
        Insn(BPF_JEQ_K, _TIOCLINUX, jt=deny, jf=allow),
        Insn(BPF_RET_K, SECCOMP_RET_ERRNO | errno.ENOSYS, label=f"{tag}_enosys"),
        Insn(BPF_RET_K, SECCOMP_RET_ERRNO | errno.EPERM, label=deny),
        Insn(BPF_RET_K, SECCOMP_RET_ALLOW, label=allow),  # jumps only go forward: targets last
    ]
    return prog


def build_filter(denied: Sequence[str] = DENIED_SYSCALLS) -> list[Insn]:
    """The whole program: the arch check, then one block per supported architecture."""
    unknown = sorted(set(denied) - set(_X86_64) - set(_AARCH64))
    if unknown:
        raise ValueError(f"no syscall numbers known for {unknown}")
    prog = [Insn(BPF_LD_W_ABS, _OFF_ARCH)]
    tags = []
    for arch, (tag, _table) in _ARCHES.items():
        prog.append(Insn(BPF_JEQ_K, arch, jt=f"{tag}_start"))
        tags.append(tag)
    prog.append(Insn(BPF_RET_K, SECCOMP_RET_ERRNO | errno.EPERM))  # any other ABI
    for _arch, (tag, table) in _ARCHES.items():
        prog += _arch_block(tag, table, denied, f"{tag}_start")
    return prog


_CACHE: dict[tuple[str, ...], bytes] = {}


def filter_bytes(denied: Sequence[str] = DENIED_SYSCALLS) -> bytes:
    """The assembled program, as bubblewrap's ``--seccomp FD`` reads it (cached)."""
    key = tuple(denied)
    if key not in _CACHE:
        _CACHE[key] = assemble(build_filter(key))
    return _CACHE[key]


def supported_arch() -> bool:
    """True on the architectures the filter knows (others run without it)."""
    return platform.machine() in ("x86_64", "aarch64") and os.name == "posix"
