"""Registry: make (both ways), listing, did-you-mean, and a torch-free import."""

import subprocess
import sys

import gymnasium
import pytest

import turngym
from turngym.core.errors import RegistrationError, UnknownEnvError


def test_make_both_ways():
    env = turngym.make("turngym/Math-v0")
    assert isinstance(env, turngym.TurngymEnv)
    assert env.spec is not None and env.spec.id == "turngym/Math-v0"
    wrapped = gymnasium.make("turngym/Math-v0")
    obs, info = wrapped.reset(seed=0)
    assert isinstance(obs, str) and info["task_id"].startswith("math/gen/")
    assert wrapped.unwrapped.max_turns == env.max_turns == 10


def test_make_overrides_kwargs():
    env = turngym.make("turngym/Math-v0", max_turns=3, min_steps=2, max_steps=2)
    assert env.max_turns == 3
    _, info = env.reset(seed=0)
    assert info["task_id"].startswith("math/gen/2/")


def test_unknown_id_suggests():
    with pytest.raises(UnknownEnvError, match="Did you mean 'turngym/Math-v0'"):
        turngym.make("turngym/Mat-v0")
    with pytest.raises(UnknownEnvError, match="Did you mean 'turngym/Math-v0'"):
        turngym.make("math")
    with pytest.raises(UnknownEnvError, match="turngym envs"):
        turngym.make("turngym/Zzzzzz-v9")


def test_list_envs_has_descriptions():
    envs = turngym.list_envs()
    assert "turngym/Math-v0" in envs
    assert all(isinstance(d, str) and d for d in envs.values())
    assert list(envs) == sorted(envs)


def test_register_validates():
    with pytest.raises(RegistrationError, match="turngym/Name-v0"):
        turngym.register("Math", "x.y:Z", description="", max_turns=1, family="x")
    with pytest.raises(RegistrationError, match="entry point"):
        turngym.register("turngym/Foo-v0", "not an entry point", description="", max_turns=1, family="x")
    with pytest.raises(RegistrationError, match="already registered"):
        turngym.register("turngym/Math-v0", "turngym.envs.math.env:Other", description="", max_turns=1, family="math")


def test_import_turngym_does_not_import_torch():
    code = "import sys, turngym; turngym.list_envs(); print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_spec_records_the_constructor_overrides_so_spec_make_rebuilds_the_same_env():
    env = turngym.make("turngym/Math-v0", max_turns=4)
    assert env.spec.kwargs["max_turns"] == 4
    rebuilt = env.spec.make()
    assert rebuilt.unwrapped.max_turns == 4
    assert turngym.make("turngym/Math-v0").spec.kwargs["max_turns"] != 4  # the registry's default is untouched
    env.close()
    rebuilt.close()
