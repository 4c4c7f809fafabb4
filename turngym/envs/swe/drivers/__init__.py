"""Hidden-case drivers of the shipped SWE repositories (one module per repository).

Each module is plain standard-library Python with two functions:

* ``generate(rng, n)`` — ``n`` JSON cases (inputs only) drawn from ``rng`` (host side).
* ``run(pkg, case)`` — exercise the package's public API on one case and return what it
  observed as plain JSON data (values, or ``["!", exception name, message]`` per operation).

``run`` is executed by the split grader's *trusted* process with ``pkg`` the proxy of the
agent's package (and, once per repository, of the gold one), so the source travels on the
grader's stdin after the package's process is forked: it is never in the tree, on disk in the
sandbox, or in the memory of the process running the agent's code (see
:mod:`turngym.envs.swe.hidden`).
"""
