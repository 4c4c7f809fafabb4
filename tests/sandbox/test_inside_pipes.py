"""The toolkit's pipe pump (:class:`turngym.sandbox.inside.pipes.Pipes`) around a real child."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys

from turngym.sandbox.inside.pipes import Pipes


def _pump(argv: list[str], data: bytes, cap: int) -> Pipes:
    """``argv`` fed ``data`` on stdin, its stdout and stderr read under ``cap`` until both end or the cap."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin and proc.stdout and proc.stderr
    with selectors.DefaultSelector() as sel:
        pipes = Pipes(sel, (proc.stdout.fileno(), proc.stderr.fileno()), os.dup(proc.stdin.fileno()), data, cap)
        proc.stdin.close()  # the pump holds its own copy of the write end
        while pipes.open and not pipes.truncated:
            for key, mask in sel.select(10):
                assert pipes.handle(key.fd, mask)
        pipes.close_stdin()
    proc.kill()
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return pipes


def test_input_larger_than_a_pipe_is_fed_while_the_output_is_read():
    data = os.urandom(300_000)  # past the 64 KiB pipe buffer both ways: a pump that blocked would deadlock
    pipes = _pump(["cat"], data, cap=1 << 20)
    out, err = pipes.bufs.values()
    assert bytes(out) == data and not err and not pipes.truncated and pipes.total == len(data)


def test_the_cap_counts_both_outputs_and_stops_at_it():
    script = "import sys; sys.stderr.write('e' * 500); sys.stderr.flush(); sys.stdout.write('o' * 100000)"
    pipes = _pump([sys.executable, "-c", script], b"", cap=1000)
    out, err = pipes.bufs.values()
    assert pipes.truncated and pipes.total == 1000 and len(out) + len(err) == 1000
    assert set(bytes(out)) <= {ord("o")} and set(bytes(err)) <= {ord("e")}


def test_a_child_that_never_reads_its_input_ends_the_feed_quietly():
    pipes = _pump([sys.executable, "-c", "import os; os.close(0); print('done')"], b"x" * 1_000_000, cap=1 << 20)
    out, _ = pipes.bufs.values()
    assert bytes(out) == b"done\n" and not pipes.truncated
    assert not pipes.handle(-1, selectors.EVENT_READ)  # not one of its pipes
