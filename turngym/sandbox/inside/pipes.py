"""A child's stdin fed and its output read under one byte cap, on a selector (stdlib only; runs
inside sandboxes too).

The host's sandbox runner (:mod:`turngym.sandbox._proc`) and the warm worker inside a sandbox
(:mod:`turngym.sandbox._warm_worker`) run the same loop around a child: write its input as it
reads it, read both output pipes as they fill, and stop at the output cap so a child printing
without end cannot exhaust the reader's memory. Each keeps its own loop for what differs
(deadlines, a watchdog, a pidfd, namespace reports) and hands every event on one of these pipes
to :meth:`Pipes.handle`.
"""

import os
import selectors

__all__ = ["Pipes"]

_CHUNK = 1 << 16


class Pipes:
    """The output pipes ``outputs`` (read ends, registered for reading, in order) and the input
    pipe ``stdin_fd`` (write end, or None) fed ``data``; ``close(fd)`` closes the input pipe once
    it is written, broken, or not needed (default :func:`os.close`).

    ``bufs`` holds each output's bytes in ``outputs``' order; ``open`` counts the outputs not yet
    at end of file; ``truncated`` is set once ``cap`` bytes in all have been read (the caller
    stops the child: what it wrote past the cap is dropped).
    """

    def __init__(self, sel, outputs, stdin_fd, data, cap, close=os.close):
        self.sel = sel
        self.bufs = {fd: bytearray() for fd in outputs}
        for fd in outputs:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        self.open = len(self.bufs)
        self.cap = cap
        self.total = 0
        self.truncated = False
        self._stdin = stdin_fd
        self._pending = memoryview(data or b"")
        self._close = close
        if stdin_fd is not None:
            if self._pending:
                os.set_blocking(stdin_fd, False)
                sel.register(stdin_fd, selectors.EVENT_WRITE)
            else:
                self._stdin = None
                close(stdin_fd)

    def close_stdin(self):
        """Stop feeding the child (idempotent): it reads end of file."""
        fd, self._stdin = self._stdin, None
        if fd is not None:
            self.sel.unregister(fd)
            self._close(fd)

    def handle(self, fd, mask):
        """Serve one selector event; False if ``fd`` is none of these pipes."""
        if fd == self._stdin and mask & selectors.EVENT_WRITE:
            try:
                self._pending = self._pending[os.write(fd, self._pending[:_CHUNK]):]
            except BlockingIOError:
                return True
            except BrokenPipeError:  # the child closed its stdin: the rest is not wanted
                self._pending = memoryview(b"")
            if not self._pending:
                self.close_stdin()
            return True
        buf = self.bufs.get(fd)
        if buf is None:
            return False
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return True
        if not data:
            self.sel.unregister(fd)
            self.open -= 1
            return True
        room = self.cap - self.total
        if len(data) > room:
            buf += data[: max(room, 0)]
            self.total, self.truncated = self.cap, True
            return True
        buf += data
        self.total += len(data)
        return True
