"""Code-v0's grader protocol: the constants both of its sandbox processes and the host share.

The values themselves cross as plain data in the toolkit's codec
(:mod:`turngym.sandbox.inside.codec`: exactly None, bool, int, float, complex, str, bytes and
lists, tuples, sets, frozensets and dicts of them, rebuilt by type whatever the sender claims),
in length-prefixed frames (:mod:`turngym.sandbox.inside.framing`). Stdlib only: this module runs
inlined in the sandbox as ``_turngym_wire``.
"""

__all__ = ["MAX_FRAME", "MAX_REQUEST", "PAYLOAD_FILE", "WORKDIR_ENV"]

#: The largest answer from the solution's process to the grader (untrusted: checked), in bytes.
MAX_FRAME = 1 << 20
#: The largest request from the grader: its requests are trusted (the solution process may read
#: them as ``marshal``) and sized by the solution's source, so only the frame format bounds them.
MAX_REQUEST = (1 << 32) - 1
#: The file (in the sandbox's workdir) that carries the grader's input; the grader deletes it
#: before any solution code runs, so the hidden tests never pass through a process the
#: solution can read.
PAYLOAD_FILE = ".turngym-grader.json"
#: Environment variable that tells a zygote started afresh (in "/") where the working dir is.
WORKDIR_ENV = "TURNGYM_GRADER_WORKDIR"
