"""The turngym exception tree.

Every error turngym raises on purpose derives from :class:`TurngymError`, so callers can
catch the library's failures without catching their own bugs. Messages say what was
received, what was expected, and how to fix it.

A malformed *agent action* is never an exception: it is part of the episode (see
:class:`turngym.core.env.InvalidActionPolicy`). These errors are for programmer mistakes
(bad ids, bad configs, misuse of the API) and for infrastructure that cannot proceed.
"""

from __future__ import annotations

__all__ = [
    "TurngymError",
    "RegistrationError",
    "UnknownEnvError",
    "ConfigError",
    "TaskError",
    "ResetNeeded",
    "SnapshotError",
    "EnvCheckError",
    "InfraError",
    "TooManyInfraErrors",
    "MissingExtraError",
]


class TurngymError(Exception):
    """Root of every exception raised deliberately by turngym."""


class RegistrationError(TurngymError):
    """An environment was registered with an invalid id, entry point or spec."""


class UnknownEnvError(TurngymError, KeyError):
    """``make`` was asked for an id that is not registered (the message suggests close ids)."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0]) if self.args else ""


class ConfigError(TurngymError, ValueError):
    """A constructor argument or config field is out of its valid domain."""


class TaskError(TurngymError, ValueError):
    """A task could not be found, generated or loaded (bad id, malformed file)."""


class ResetNeeded(TurngymError, RuntimeError):
    """``step`` was called before ``reset`` or after the episode ended."""


class SnapshotError(TurngymError, ValueError):
    """A snapshot was restored into an env of another kind, or the env cannot snapshot."""


class EnvCheckError(TurngymError, AssertionError):
    """``turngym.check_env`` found contract violations; ``.failures`` lists each one."""

    def __init__(self, env_id: str, failures: list[str]) -> None:
        self.env_id = env_id
        self.failures = list(failures)
        lines = "\n".join(f"  - {f}" for f in self.failures)
        super().__init__(f"{env_id}: {len(self.failures)} contract violation(s):\n{lines}")


class InfraError(TurngymError, RuntimeError):
    """Infrastructure failed (sandbox died, server timed out): not the agent's fault.

    Envs catch these and report ``info["infra_error"]`` instead of scoring the episode 0;
    trainers drop or retry such episodes.
    """


class TooManyInfraErrors(TurngymError, RuntimeError):
    """More of a run's episodes ended in infrastructure errors than its ``max_infra_error_rate`` allows.

    Infra-error episodes are dropped, never scored; past the bound the survivors are no longer
    a fair sample (an env bug that fires on some tasks only would silently bias training and
    evaluation toward the others), so the run stops and says so.
    """


class MissingExtraError(TurngymError, ImportError):
    """A feature needs a package that only one of turngym's optional extras installs.

    Raised when the feature is used, never when ``turngym`` is imported; the message names the
    extra (``pip install 'turngym[server]'``). An ``ImportError`` too, so code that probes for an
    optional dependency with ``except ImportError`` keeps working.
    """
