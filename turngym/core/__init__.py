"""The turngym contract: env base class, tasks, signal specs, registry, parsers, checker."""

from turngym.core.checker import check_env
from turngym.core.env import INFO_KEYS, EnvSnapshot, InvalidActionPolicy, Transition, TurngymEnv
from turngym.core.errors import (
    ConfigError,
    EnvCheckError,
    InfraError,
    MissingExtraError,
    RegistrationError,
    ResetNeeded,
    SnapshotError,
    TaskError,
    TooManyInfraErrors,
    TurngymError,
    UnknownEnvError,
)
from turngym.core.hashing import state_hash
from turngym.core.parsing import Parsed, TagAction, ToolCall, parse_code_block, parse_tag, parse_tool_calls
from turngym.core.registry import EnvInfo, env_info, list_envs, make, register
from turngym.core.spaces import TextSpace
from turngym.core.spec import RewardSpec, Signal
from turngym.core.task import Task, read_jsonl, write_jsonl

__all__ = [
    "ConfigError",
    "EnvCheckError",
    "EnvInfo",
    "EnvSnapshot",
    "INFO_KEYS",
    "InfraError",
    "InvalidActionPolicy",
    "MissingExtraError",
    "Parsed",
    "RegistrationError",
    "ResetNeeded",
    "RewardSpec",
    "Signal",
    "SnapshotError",
    "TagAction",
    "Task",
    "TaskError",
    "TooManyInfraErrors",
    "TextSpace",
    "ToolCall",
    "Transition",
    "TurngymEnv",
    "TurngymError",
    "UnknownEnvError",
    "check_env",
    "env_info",
    "list_envs",
    "make",
    "parse_code_block",
    "parse_tag",
    "parse_tool_calls",
    "read_jsonl",
    "register",
    "state_hash",
    "write_jsonl",
]
