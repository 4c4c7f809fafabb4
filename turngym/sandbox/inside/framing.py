"""Length-prefixed frames on a socket, and reads with a deadline (stdlib only; runs inside sandboxes).

A frame is a 4-byte big-endian length and that many bytes. Every reader names the largest frame
it accepts, so a hostile peer cannot make it buffer without bound. What the bytes mean (JSON,
``marshal`` from a trusted peer) is the caller's business.

One :func:`recv_exact` serves every trusted program: it raises :class:`EOFError` when the peer
closes early and :class:`TimeoutError` once the deadline passes, and each caller maps those to its
own policy (Code-v0's grader treats both as "no answer", its solution process exits at the end
of the stream, SWE-v0's split grader voids the run). Only the ``_socket`` methods of the socket
are used (``recv``, ``sendall``, ``settimeout``), so a program that avoids importing ``socket``
(a fresh interpreter that must start fast) can pass its ``_socket.socket``.
"""

import os
import sys
import time

__all__ = ["HEADER", "pack_frame", "send_frame", "recv_exact", "recv_frame", "take_frame", "write_all",
           "flush_streams"]

#: Bytes of the length prefix.
HEADER = 4
_CHUNK = 1 << 20


def pack_frame(data, max_size):
    """``data`` with its length prefix; ValueError if it is longer than ``max_size``."""
    if len(data) > max_size:
        raise ValueError(f"a message of {len(data)} bytes is over the {max_size}-byte limit")
    return len(data).to_bytes(HEADER, "big") + data


def send_frame(sock, data, max_size):
    """Send ``data`` as one frame (ValueError, and nothing sent, if it is over ``max_size``)."""
    sock.sendall(pack_frame(data, max_size))


def recv_exact(sock, n, deadline=None):
    """Exactly ``n`` bytes from ``sock``.

    EOFError if the peer closes first; TimeoutError once ``deadline`` (``time.monotonic()``)
    passes; OSError from the socket as it comes. With a deadline the socket's timeout is set to
    the time left and stays so: a later ``sendall`` on it then also gives up by about then (a
    peer that stops reading cannot hold the caller past its deadline). Without one, the socket's
    mode is left as it is.
    """
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline")
            sock.settimeout(left)
        try:
            chunk = sock.recv(min(n - len(buf), _CHUNK))
        except TimeoutError:
            raise TimeoutError("deadline") from None
        if not chunk:
            raise EOFError("the peer closed the stream")
        buf += chunk
    return bytes(buf)


def recv_frame(sock, max_size, deadline=None):
    """One frame's bytes (see :func:`recv_exact` for EOF and the deadline); ValueError if its
    length is over ``max_size`` (nothing of the body is read then)."""
    n = int.from_bytes(recv_exact(sock, HEADER, deadline), "big")
    if n > max_size:
        raise ValueError(f"a message of {n} bytes is over the {max_size}-byte limit")
    return recv_exact(sock, n, deadline)


def take_frame(buf, max_size):
    """The first whole frame in ``buf`` (a bytearray a reader fills as bytes come), removed from
    it; None while it is incomplete; ValueError as soon as its length is over ``max_size``."""
    if len(buf) < HEADER:
        return None
    n = int.from_bytes(buf[:HEADER], "big")
    if n > max_size:
        raise ValueError(f"a message of {n} bytes is over the {max_size}-byte limit")
    if len(buf) < HEADER + n:
        return None
    frame = bytes(buf[HEADER:HEADER + n])
    del buf[:HEADER + n]
    return frame


def write_all(fd, data):
    """Write all of ``data`` to the file descriptor ``fd`` (``os.write`` may write less)."""
    while data:
        data = data[os.write(fd, data):]


def flush_streams():
    """Flush ``sys.stdout`` and ``sys.stderr``, whatever untrusted code made of them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001, S110 - replaced or closed by the code under test
            pass
