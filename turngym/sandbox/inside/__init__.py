"""The toolkit of the trusted programs that run *inside* a sandbox (stdlib only).

Code-v0's grader and solution process, SWE-v0's graders and the warm worker run as
``python -I -S -B -c <source>``: they cannot import turngym (the sandbox's paths are not the
host's). The modules here are what they share, shipped as text ahead of each program's source
by :func:`turngym.sandbox.inline.inside_prelude` and importable there as ``_turngym_inside_<name>``
(on the host, as ``turngym.sandbox.inside.<name>``, for tests and the host's side of each protocol):

* :mod:`.codec`: plain data as JSON trees (one representation per kind), with hooks for handles;
* :mod:`.framing`: length-prefixed frames and reads with a deadline;
* :mod:`.hardening`: non-dumpable processes and the drop to the untrusted uid.

Each module imports only the standard library, and none imports another, so any subset ships
alone. Nothing here may import turngym (see :data:`turngym.sandbox.inline.INSIDE_MODULES`).
"""

__all__: list[str] = []
