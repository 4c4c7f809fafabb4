"""The seccomp program, checked instruction by instruction with a small classic-BPF interpreter.

Running the filter in a sandbox only shows what happens on this machine's architecture; the
interpreter below evaluates the assembled bytes for both x86_64 and aarch64 (and for the ABIs
the filter must refuse), so a wrong jump offset or syscall number fails here.
"""

from __future__ import annotations

import errno
import struct
import sys

import pytest

from turngym.sandbox import seccomp as bpf

ALLOW = bpf.SECCOMP_RET_ALLOW
EPERM = bpf.SECCOMP_RET_ERRNO | errno.EPERM
ENOSYS = bpf.SECCOMP_RET_ERRNO | errno.ENOSYS
X86, ARM, I386 = bpf.AUDIT_ARCH_X86_64, bpf.AUDIT_ARCH_AARCH64, 0x40000003


def run_filter(prog: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """Evaluate a classic BPF program on one ``struct seccomp_data``."""
    args = tuple(args) + (0,) * (6 - len(args))
    data = struct.pack("=iIQ6Q", nr, arch, 0, *args)
    insns = [struct.unpack_from("=HBBI", prog, off) for off in range(0, len(prog), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == bpf.BPF_LD_W_ABS:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (bpf.BPF_JEQ_K, bpf.BPF_JGE_K, bpf.BPF_JSET_K):
            cond = {bpf.BPF_JEQ_K: acc == k, bpf.BPF_JGE_K: acc >= k, bpf.BPF_JSET_K: bool(acc & k)}[code]
            pc += 1 + (jt if cond else jf)
        elif code == bpf.BPF_RET_K:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


PROG = bpf.filter_bytes()

CASES = [
    # (arch, syscall name, args, expected)
    ("read", (), ALLOW),
    ("unshare", (0x10000000,), EPERM),
    ("setns", (3, 0), EPERM),
    ("mount", (), EPERM),
    ("ptrace", (0,), EPERM),
    ("process_vm_readv", (), EPERM),
    ("bpf", (), EPERM),
    ("io_uring_setup", (), EPERM),
    ("keyctl", (), EPERM),
    ("clone", (0x11,), ALLOW),  # fork(): SIGCHLD
    ("clone", (0x003D0F00,), ALLOW),  # pthread_create's flags
    ("clone", (0x10000000 | 0x11,), EPERM),  # CLONE_NEWUSER
    ("clone", (0x40000000 | 0x11,), EPERM),  # CLONE_NEWNET
    ("clone3", (), ENOSYS),
    ("personality", (0xFFFFFFFF,), ALLOW),
    ("personality", (0,), ALLOW),
    ("personality", (0x0040000,), EPERM),  # ADDR_NO_RANDOMIZE
    ("ioctl", (0, 0x5412), EPERM),  # TIOCSTI
    ("ioctl", (0, 0x5401), ALLOW),  # TCGETS
]
NUMBERS = {X86: {**bpf._X86_64, "read": 0}, ARM: {**bpf._AARCH64, "read": 63}}


@pytest.mark.parametrize("arch", [X86, ARM], ids=["x86_64", "aarch64"])
@pytest.mark.parametrize(("name", "args", "expected"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_filter_decisions(arch, name, args, expected):
    assert run_filter(PROG, NUMBERS[arch][name], arch, args) == expected


@pytest.mark.parametrize("arch", [X86, ARM], ids=["x86_64", "aarch64"])
def test_every_denied_call_is_refused(arch):
    for name in bpf.DENIED_SYSCALLS:
        if name in NUMBERS[arch]:
            assert run_filter(PROG, NUMBERS[arch][name], arch) == EPERM, name


def test_foreign_abis_are_refused():
    assert run_filter(PROG, 3, I386) == EPERM  # int 0x80 from a 64-bit process
    assert run_filter(PROG, 0x40000000 | 0, X86) == EPERM  # x32 read


def test_assembler_rejects_backward_and_undefined_jumps():
    with pytest.raises(ValueError, match="out of range"):
        bpf.assemble([bpf.Insn(bpf.BPF_RET_K, 0, label="a"), bpf.Insn(bpf.BPF_JEQ_K, 1, jt="a")])
    with pytest.raises(ValueError, match="undefined"):
        bpf.assemble([bpf.Insn(bpf.BPF_JEQ_K, 1, jt="nowhere")])
    with pytest.raises(ValueError, match="no syscall numbers"):
        bpf.build_filter(["not_a_syscall"])


@pytest.mark.skipif(sys.byteorder != "little", reason="the cases pack arguments little-endian")
def test_program_is_a_whole_number_of_instructions():
    assert len(PROG) % 8 == 0 and 0 < len(PROG) // 8 < 4096
