"""The split SWE grader's messages: what its two processes send each other, one frame each.

Both sides of :mod:`turngym.envs.swe._split_boot` (the grader and the candidate it forks) speak
this; it holds no state, so it is the same in either. Stdlib only: it travels into the sandbox
as text, inlined ahead of the program as ``_turngym_split_wire`` (see
:func:`turngym.envs.swe.testing._boot_source`).
"""

import json

try:
    import _turngym_inside_codec as codec
    import _turngym_inside_framing as framing
except ImportError:  # imported on the host (tests, linters); in the sandbox the prelude provides them
    from turngym.sandbox.inside import codec, framing

__all__ = ["MAX_FRAME", "recv", "send"]

MAX_FRAME = 8 << 20


def send(sock, obj):
    """One message (a JSON object whose values are :mod:`codec` trees) as one frame."""
    framing.send_frame(sock, codec.dumps(obj).encode("utf-8", "surrogatepass"), MAX_FRAME)


def recv(sock, deadline=None):
    """One message: TimeoutError past ``deadline``, EOFError at the end, ValueError if malformed."""
    msg = json.loads(framing.recv_frame(sock, MAX_FRAME, deadline).decode("utf-8", "surrogatepass"))
    if type(msg) is not dict:
        raise ValueError("a message is not an object")
    return msg
