"""``inside/hardening.address_space_note``: a grader whose imports fail under a memory limit names the limit."""

from __future__ import annotations

import subprocess
import sys

import pytest

CODE = ("import resource, sys\n"
        "if len(sys.argv) > 1: resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]) << 20, resource.RLIM_INFINITY))\n"
        "from turngym.sandbox.inside.hardening import address_space_note\n"
        "print(repr(address_space_note()))\n")


@pytest.mark.parametrize(("limit_mb", "expected"), [(None, "''"), (2048, "'; address space limited to 2048 MiB (raise Limits.memory_mb)'")])
def test_the_note_names_the_address_space_limit(limit_mb: int | None, expected: str) -> None:
    argv = [sys.executable, "-c", CODE, *([] if limit_mb is None else [str(limit_mb)])]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert out == expected
