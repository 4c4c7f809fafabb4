"""turngym: multi-turn text environments with per-turn process signals, and turn-level
credit-assignment trainers for LLM agents.

>>> import turngym
>>> env = turngym.make("turngym/Math-v0")
>>> obs, info = env.reset(seed=0)
>>> "turngym/Math-v0" in turngym.list_envs()
True

Importing turngym registers every env id (with gymnasium too) without importing env code,
torch or transformers.
"""

import turngym.envs  # noqa: E402,F401  (registers every env family)
from turngym.core import (
    ConfigError,
    EnvCheckError,
    EnvSnapshot,
    InfraError,
    InvalidActionPolicy,
    MissingExtraError,
    ResetNeeded,
    RewardSpec,
    Signal,
    SnapshotError,
    Task,
    TaskError,
    TooManyInfraErrors,
    Transition,
    TurngymEnv,
    TurngymError,
    UnknownEnvError,
    check_env,
    env_info,
    list_envs,
    make,
    register,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "EnvCheckError",
    "EnvSnapshot",
    "InfraError",
    "InvalidActionPolicy",
    "MissingExtraError",
    "ResetNeeded",
    "RewardSpec",
    "Signal",
    "SnapshotError",
    "Task",
    "TaskError",
    "TooManyInfraErrors",
    "Transition",
    "TurngymEnv",
    "TurngymError",
    "UnknownEnvError",
    "__version__",
    "check_env",
    "env_info",
    "list_envs",
    "make",
    "register",
]
